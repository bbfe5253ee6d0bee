"""DPP^2: double privacy protection for nonconvex decentralized optimization (Ou, Wang, Liu & Lu,
"Distributed Nonconvex Optimization with Double Privacy Protection and Exact Convergence", arXiv 2511.02283).

The problem is min_x sum_i f_i(x) with smooth, possibly nonconvex f_i, over a static connected graph
with P = I - W (``weights`` rule; symmetric PSD, Null(P) = span(1)) and G = alpha I - beta P, positive
definite iff 0 < beta < alpha / lambda_max(P) (Eq. (15); refused otherwise). Node i keeps (x_i, d_i, q_i),
d_i^0 = q_i^0 = 0, and in iteration k (Algorithm 1, lines 5-10):

    5   w_i^k ~ Lap(r^k u_w),  e_i^k ~ Lap(r^k u_e)                    (per coordinate)
    6   y_i^k = x_i^k + (1 - eta^k) d_i^k + w_i^k                      SEND y (round 1 of the iteration)
    7   a_i^k = sum_j p_ij y_j^k;  z_i^k = grad f_i(x_i^k) + eta^k q_i^k + rho a_i^k + e_i^k      SEND z
    8   x_i^{k+1} = x_i^k + w_i^k - alpha (z_i^k - e_i^k) + beta sum_j p_ij z_j^k    (own noise cancelled)
    9   d_i^{k+1} = eta^k d_i^k + y_i^k
    10  q_i^{k+1} = eta^k q_i^k + rho a_i^k

In privcvx, round t = k + 1 has two phases: phase 0 takes the y^k of the neighbours and sends z^k (lines 7,
9, 10); phase 1 takes the z^k and computes x^{k+1} (line 8), then draws eta^{k+1} and the noise and sends
y^{k+1} (lines 5-6; ``start`` sends y^0). After T rounds every node holds x^T; y^T is not sent.

**Tier 1 (Sec. III-A).** eta^k in (0, 1) is one scalar per iteration for all nodes, drawn from a stream
keyed by ``mixing_seed``: a secret the nodes share and the transcript does not contain. It mixes x_i with
d_i and grad f_i with q_i in the messages and does not change the x-trajectory (q^k = rho P d^k, so
(16)-(19) equal the compact form (20)-(21), in which eta does not appear). Anyone holding the key replays
the transcript into x_i^k + w_i^k and grad f_i(x_i^k) + e_i^k (`TranscriptReplay`); without it the
messages are mixed with unknown duals. A node-specific eta breaks q = rho P d and the method diverges.

**Tier 2 (Sec. III-B, Theorem 3).** The decaying Laplace noise gives each node pure epsilon_i-DP of f_i under
delta-adjacency; `privcvx.privacy.dpp2_accountant` has the bound. Every y_i^k (k >= 1) and z_i^k is
recorded in the node's ledger as a Laplace release with the Appendix E sensitivity, so the ledger's basic
composition after T rounds is Theorem 3's eps_i(T - 1) with the k = 0 term.

The step conditions (24)-(27) of Theorems 1-2 are far stricter than the paper's own experiment (alpha <=
1 / (4 (Mbar + 10.5 Mbar^2)) = 9.2e-4 for Mbar = 5.03, against alpha = 0.1): `theorem_step_bound`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.spatial.distance import pdist

from privcvx.algorithms.base import AgentContext, Monitor
from privcvx.algorithms.gradient_agents import (
    GradientAgent,
    GradientMethod,
    laplacian,
    laplacian_row,
    largest_eigenvalue,
)
from privcvx.errors import ParameterError, check_scalar, require_positive
from privcvx.messages import Message
from privcvx.privacy.accounting import DEFAULT_LAPLACE_DELTA
from privcvx.privacy.dpp2_accountant import DPP2Privacy
from privcvx.privacy.sensitivity import holds_no_private_data
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import Topology


def theorem_step_bound(smoothness: float) -> float:
    """xi6 / xi7 = 1 / (4 (Mbar + 10.5 Mbar^2)): the upper bound on alpha in condition (27) of Theorems 1-2."""
    return 0.25 / (smoothness + 10.5 * smoothness ** 2)


class MixingSequence:
    """eta^0, eta^1, ...: uniform on (0, 1) from a stream keyed by the nodes' shared secret, or a constant.

    This is the tier-1 mixing key, not DP noise: every node (and anyone trusted with the key) draws the same
    sequence. It is a numpy ``Generator(PCG64)`` on ``SeedSequence(key)``; its state goes into checkpoints.
    """

    def __init__(self, key: int, eta: float | None = None) -> None:
        self.constant = eta
        self.generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))

    def next(self) -> float:
        """eta^k, the next mixing scalar in (0, 1) (or the constant, when one was given)."""
        if self.constant is not None:
            return self.constant
        value = 0.0
        while value == 0.0:  # (0, 1): random() is in [0, 1)
            value = float(self.generator.random())
        return value

    def get_state(self) -> dict[str, Any]:
        """The stream's state (secret: it is the key's position), for checkpoints."""
        return self.generator.bit_generator.state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state written by `get_state`."""
        self.generator.bit_generator.state = state


class DPP2(GradientMethod):
    """DPP^2 (Algorithm 1 of Ou, Wang, Liu & Lu) for smooth, possibly nonconvex consensus problems.

    Parameters
    ----------
    rho, alpha, beta:
        The penalty and G = alpha I - beta P (Eq. (15)); 0 < beta < alpha / lambda_max(P) is checked per topology.
        Defaults: the paper's experiment, rho = 10, alpha = 0.1, beta = 0.05.
    eta:
        None (default): eta^k uniform on (0, 1) from the mixing stream; a float in (0, 1): constant.
    mixing_seed:
        The nodes' shared secret key of the eta stream. None: a fresh key from the OS at each run (its
        messages then differ from run to run, its x-trajectory does not); give one to reproduce or resume.
    u_w, u_e, r:
        The Laplace scales r^k u_w of w_i^k and r^k u_e of e_i^k. With ``u_w`` and ``u_e`` the run is private
        (Theorem 3); both None (default): no noise.
    smoothness:
        Mbar for Theorem 3 (alpha Mbar < 1 is required); default: the max of the agents' declared smoothness.
    weights:
        The rule of W in P = I - W ("metropolis", "lazy_metropolis", "max_degree").
    trace:
        Keep every node's x_i^k and grad f_i(x_i^k) in ``result.info["agents"]`` (research runs: private data;
        refused with ``diagnostics=False``).
    epsilon, delta:
        A total epsilon per node over the run: `prepare` scales ``u_w`` and ``u_e`` (a template, with ``r``) by one
        factor so that the worst-off node's ledger reports at most it at ``delta`` (the delta of the ledgers'
        accountants).
    """

    name = "dpp2"
    phases = 2
    noise_settings = ("u_w", "u_e")

    def __init__(self, rho: float = 10.0, alpha: float = 0.1, beta: float = 0.05, eta: float | None = None,
                 mixing_seed: int | None = None, u_w: float | None = None, u_e: float | None = None,
                 r: float | None = None, smoothness: float | None = None, weights: str = "metropolis",
                 trace: bool = False, epsilon: float | None = None, delta: float = DEFAULT_LAPLACE_DELTA) -> None:
        self.rho, self.alpha, self.beta, self.eta, self.mixing_seed = rho, alpha, beta, eta, mixing_seed
        self.u_w, self.u_e, self.r, self.smoothness, self.weights, self.trace = u_w, u_e, r, smoothness, weights, trace
        self.epsilon, self.delta = epsilon, delta
        for argument in ("rho", "alpha", "beta"):
            require_positive(getattr(self, argument), argument=argument)
        if eta is not None:  # None: random
            check_scalar(eta, argument="eta", kind=float, low=0.0, high=1.0, closed="neither")
        if mixing_seed is not None:  # the nodes' shared key
            check_scalar(mixing_seed, argument="mixing_seed", kind=int, low=0)
        if smoothness is not None:
            require_positive(smoothness, argument="smoothness", allow_zero=True)
        self.check_common(weights, trace, epsilon, delta)

    def __repr__(self) -> str:
        """The settings, with the mixing key masked: ``repr`` reaches ``result.info`` and checkpoint headers."""
        return re.sub(r"mixing_seed=\d+", "mixing_seed=<secret>", super().__repr__())

    # ---- run set-up -----------------------------------------------------------------------------------
    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        super().check(problem, topology)
        largest = largest_eigenvalue(laplacian(topology, self.weights)[1])
        if not self.beta < self.alpha / largest:
            raise ParameterError(f"G = alpha I - beta P is not positive definite: beta = {self.beta} must be below "
                                 f"alpha / lambda_max(P) = {self.alpha} / {largest:.6g} = {self.alpha / largest:.6g} "
                                 "(Eq. (15))", argument="beta")
        private = [agent for agent in problem.agents if not holds_no_private_data(agent)]
        if self.private and private:  # Theorem 3's conditions, checked on an agent with private data
            self.privacy_of(private[0], problem.layouts[0].dim,
                            self.declared_smoothness(problem) if self.smoothness is None else self.smoothness)

    def resolve(self, problem: DistributedProblem, topology: Topology) -> DPP2:
        """Check the problem; fix Mbar (under privacy) and a fresh mixing key when none was given."""
        self.check(problem, topology)
        changes: dict[str, Any] = {}
        if self.mixing_seed is None:
            changes["mixing_seed"] = secrets.randbits(63)
        if self.private and self.smoothness is None:
            changes["smoothness"] = self.declared_smoothness(problem)
        return self.clone(**changes) if changes else self

    def privacy_of(self, agent: Agent, dim: int, smoothness: float | None = None) -> DPP2Privacy:
        """Node i's Theorem 3 quantities (delta_i from its declared sensitivity)."""
        return DPP2Privacy(delta=self.adjacency_radius(agent), dim=dim, alpha=self.alpha,
                           smoothness=self.smoothness if smoothness is None else smoothness, u_e=self.u_e,
                           u_w=self.u_w)

    def release_epsilons(self, agent: Agent, dim: int, rounds: int) -> list[float]:
        """z^0 .. z^{T-1} and y^1 .. y^{T-1} (y^0 perturbs the public x^0), each sensitivity / (u r^k): their sum is
        Theorem 3's eps_i(T - 1) with the k = 0 term."""
        node = self.privacy_of(agent, dim)
        decay = [self.r ** -k for k in range(1, rounds)]
        return [node.zero_term, *(node.sensitivity_e / self.u_e * g for g in decay),
                *(node.sensitivity_w / self.u_w * g for g in decay)]

    def mixing_sequence(self, key: int | None = None) -> MixingSequence:
        """The eta stream of key ``key`` (default: this run's ``mixing_seed``)."""
        key = self.mixing_seed if key is None else key
        if key is None:
            raise ParameterError("the algorithm is not prepared: it has no mixing key yet", argument="mixing_seed")
        return MixingSequence(key, self.eta)

    def agent_program(self, agent: Agent, context: AgentContext) -> DPP2Agent:
        return DPP2Agent(agent, context, self, self.mixing_sequence())

    def monitor(self, problem: DistributedProblem, topology: Topology) -> DPP2Monitor:
        return DPP2Monitor(problem, TranscriptReplay(*laplacian(topology, self.weights), rho=self.rho,
                                                     etas=self.mixing_sequence(), keep_history=False))


class DPP2Agent(GradientAgent):
    """Node i of Algorithm 1: (x_i, d_i, q_i), the current eta^k, and the pieces of iteration k it needs later."""

    def __init__(self, agent: Agent, context: AgentContext, settings: DPP2, etas: MixingSequence) -> None:
        super().__init__(agent, context, settings, weights=laplacian_row(context, settings.weights))
        self.etas = etas
        self.privacy = settings.privacy_of(agent, self.dim) if settings.private and not self.public else None
        self.d = np.zeros(self.dim)
        self.q = np.zeros(self.dim)
        self.eta = 0.0
        self.y = np.zeros(self.dim)
        self.w = np.zeros(self.dim)
        self.z = np.zeros(self.dim)
        self.inner = np.zeros(self.dim)  # z_i^k - e_i^k: the node's own noise is cancelled in line 8

    def _scale(self, u: float | None) -> float:
        return 0.0 if u is None else u * self.settings.r ** self.k

    def _send_y(self) -> list[Message]:
        """Lines 5-6 of iteration k: eta^k, w_i^k and y_i^k."""
        self.eta = self.etas.next()
        clean = self.x + (1.0 - self.eta) * self.d
        sensitivity = 0.0 if self.privacy is None or self.k == 0 else self.privacy.sensitivity_w
        self.y = self.release(clean, self._scale(self.settings.u_w), sensitivity, "y")
        self.w = self.y - clean
        return [self.context.message(self.k + 1, {"y": self.y}, phase=0)]

    def start(self) -> list[Message]:
        return self._send_y()

    def step(self, t: int, inbox: list[Message], phase: int = 0) -> list[Message]:
        if phase == 0:  # line 7, then lines 9-10
            a = self.settings.rho * self.mix(inbox, "y", self.y, t, 0)
            self.inner = self.traced_gradient(self.x) + self.eta * self.q + a
            sensitivity = 0.0
            if self.privacy is not None:
                sensitivity = self.privacy.sensitivity_e0 if self.k == 0 else self.privacy.sensitivity_e
            self.z = self.release(self.inner, self._scale(self.settings.u_e), sensitivity, "z")
            self.d = self.eta * self.d + self.y
            self.q = self.eta * self.q + a
            return [self.context.message(t, {"z": self.z}, phase=1)]
        # line 8, then lines 5-6 of the next iteration
        mixed = self.mix(inbox, "z", self.z, t, 1)
        self.x = self.x + self.w - self.settings.alpha * self.inner + self.settings.beta * mixed
        self.k = t
        return self._send_y() if t < self.context.rounds else []

    def output(self, released_only: bool = False) -> np.ndarray:
        """x_i^T; with ``released_only`` the last y_i (a release, mixed with the dual by eta)."""
        return self.y.copy() if released_only else self.x.copy()

    def state_dict(self) -> dict[str, Any]:
        return {**self.base_state(), "x": self.x, "d": self.d, "q": self.q, "eta": self.eta,
                "y": self.y, "w": self.w, "z": self.z, "inner": self.inner, "etas": self.etas.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_base_state(state)
        self.x, self.d, self.q, self.eta = state["x"], state["d"], state["q"], state["eta"]
        self.y, self.w, self.z, self.inner = state["y"], state["w"], state["z"], state["inner"]
        self.etas.set_state(state["etas"])


class TranscriptReplay:
    """What a holder of the mixing key recovers from the messages alone (the eavesdropper with eta known).

    From d^0 = q^0 = 0 and the public P and rho: d_i^{k+1} = eta^k d_i^k + y_i^k and q^{k+1} = eta^k q^k +
    rho P y^k, hence x_i^k + w_i^k = y_i^k - (1 - eta^k) d_i^k and grad f_i(x_i^k) + e_i^k = z_i^k - eta^k q_i^k
    - rho (P y^k)_i. ``etas`` is the eta stream (the key), or a guess of it for an attacker without the key.
    """

    def __init__(self, order: list[str], p: np.ndarray, *, rho: float, etas: MixingSequence,
                 keep_history: bool = True) -> None:
        self.order, self.p, self.rho, self.etas, self.keep_history = order, p, rho, etas, keep_history
        #: Per iteration k, the recovered x^k + w^k and grad f(x^k) + e^k (rows in ``order``); without
        #: ``keep_history`` only the latest (the run's monitor: its checkpoints stay small).
        self.states: list[np.ndarray] = []
        self.gradients: list[np.ndarray] = []
        self.d: np.ndarray | None = None
        self.q: np.ndarray | None = None
        self.a: np.ndarray | None = None
        self.y: np.ndarray | None = None
        self.eta = 0.0

    def _stack(self, messages: list[Message], key: str) -> np.ndarray:
        by_sender = {m.sender: m[key] for m in messages}
        return np.stack([by_sender[name] for name in self.order])

    def feed(self, messages: list[Message]) -> None:
        """Take messages of whole exchanges: y^k is stamped (k + 1, phase 0) and z^k (k + 1, phase 1)."""
        for stamp in sorted({(m.round, m.phase) for m in messages}):
            batch = [m for m in messages if (m.round, m.phase) == stamp]
            key = "y" if stamp[1] == 0 else "z"
            values = self._stack(batch, key)
            if key == "y":
                if self.d is None:
                    self.d, self.q = np.zeros_like(values), np.zeros_like(values)
                self.eta = self.etas.next()
                self.y, self.a = values, self.rho * (self.p @ values)
                self.states = [*(self.states if self.keep_history else []), values - (1.0 - self.eta) * self.d]
            else:
                self.gradients = [*(self.gradients if self.keep_history else []),
                                  values - self.eta * self.q - self.a]
                self.d = self.eta * self.d + self.y
                self.q = self.eta * self.q + self.a

    def state_dict(self) -> dict[str, Any]:
        """The replay so far (recovered states, the d/q/a/y recursions and the eta stream), for checkpoints."""
        return {"states": self.states, "gradients": self.gradients, "d": self.d, "q": self.q, "a": self.a,
                "y": self.y, "eta": self.eta, "etas": self.etas.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state written by `state_dict`."""
        self.states, self.gradients = list(state["states"]), list(state["gradients"])
        self.d, self.q, self.a, self.y, self.eta = state["d"], state["q"], state["a"], state["y"], state["eta"]
        self.etas.set_state(state["etas"])


class DPP2Monitor(Monitor):
    """Public metrics of a key holder: the replayed noisy states x_i^k + w_i^k, their average (``result.w``),
    their largest pairwise distance and the change of the average. An eavesdropper without the key cannot
    compute them (tier 1); they are post-processing of the DP releases."""

    def __init__(self, problem: DistributedProblem, replay: TranscriptReplay) -> None:
        self.names = problem.names
        self.replay = replay
        self.w = np.zeros(problem.dim)

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        previous = self.w
        self.replay.feed(messages)
        latest = self.replay.states[-1]
        positions = [self.replay.order.index(name) for name in self.names]
        self.w = latest[positions].mean(axis=0)
        if t == 0:
            return {}
        return {"disagreement": float(pdist(latest).max(initial=0.0)) if len(latest) > 1 else 0.0,
                "average_change": float(np.linalg.norm(self.w - previous))}

    def global_vector(self) -> np.ndarray:
        return self.w.copy()

    def state_dict(self) -> dict[str, Any]:
        return {"replay": self.replay.state_dict(), "w": self.w}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.replay.load_state_dict(state["replay"])
        self.w = state["w"]


def consensus_gap(x: np.ndarray, gradients: np.ndarray) -> float:
    """Eq. (31): ||x - xbar||^2 + (1/N) ||sum_i grad f_i(x_i)||^2, for stacked node states (N x d)."""
    deviation = x - x.mean(axis=0)
    total = gradients.sum(axis=0)
    return float(np.sum(deviation ** 2) + total @ total / len(x))


def stationarity(gradients: np.ndarray, reading: str = "average") -> float:
    """Fig. 3's ||(1/N) grad ftilde(x^K)||^2: "average" ||(1/N) sum_i g_i||^2 or "literal" (1/N^2) sum_i ||g_i||^2."""
    n = len(gradients)
    if reading == "average":
        mean = gradients.sum(axis=0) / n
        return float(mean @ mean)
    if reading == "literal":
        return float(np.sum(gradients ** 2) / n ** 2)
    raise ParameterError(f'must be "average" or "literal", got {reading!r}', argument="reading")


