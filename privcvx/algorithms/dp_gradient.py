"""DP distributed projected gradient over a time-varying graph (Huang, Mitra & Vaidya, paper 001).

Every agent i keeps an estimate x_i in the public set X (its W_i) and, in round t (Eqs. (5)-(7)):

    y_i(t) = x_i(t-1) + w_i(t),            w_i(t) ~ Lap(M_t)^n          (Algorithm 2, broadcast)
    z_i(t) = sum_j a_ij(t) y_j(t)                                       (Algorithm 3, aggregate)
    x_i(t) = Proj_X[ z_i(t) - gamma_t grad f_i(z_i(t)) ]                (Algorithm 4, local step)

with doubly stochastic weights a_ij(t) on round t's graph. Only y_i(t) leaves the agent. In
privcvx the agent's step of round t computes x_i(t) and broadcasts y_i(t+1), the message of
round t+1 (``start`` broadcasts y_i(1)); so after T rounds every estimate x_i(1..T) has been
released once with noise, and ``result.z`` holds the releases y_i(T+1), never a clean x_i(T)
(note N5 of the digest).

Privacy (Theorem 5, Lemmas 2 and 4). With geometric steps gamma_t = c q^(t-1), Eq. (8), the
estimate x_i(t) = Proj_X[z - gamma_t d] (z public, d the gradient) has L1 sensitivity
Delta(t) = S_i gamma_t (+ a solver's error), where S_i follows from the agent's declared gradient
sensitivity (``pc.Sensitivity``) by the rules of `privcvx.privacy.sensitivity`: on R^n or a box,
S_i = the declared l1 (sqrt(n) l2 when only l2 is declared); on any other convex set X the projection
keeps only l2, so S_i = sqrt(n) l2 and an agent without a declared l2 is refused (Lemma 4's proof
drops the projection; its 2 C2 sqrt(n) is of this form, sqrt(n) times the l2 bound 2 C2). A set
projected by a solver adds E = 2 sqrt(n) e to Delta(t) (e = ``solver_error``, the certified l2 bound of
`privcvx.localsolve.certificate`), which does not decay with gamma_t: a geometric split cannot pay it with a
bounded noise. The safe calibration then splits the agent's epsilon (this is privcvx's, not the paper's): a share
(1 - ``solver_share``) pays S_i gamma_t by the geometric split below, and ``solver_share`` pays E over the run's T
releases (the ``horizon``, T = the run's rounds unless given): release t costs the split's epsilon_t plus
share epsilon / T, and M_{t+1} = Delta(t) / that. The noise stays bounded (below E T / (share epsilon) once the
geometric part has decayed), and the run spends at most epsilon over T rounds (its ledger charges every release's
true Delta / M, also past T, which `prepare` refuses). The paper's calibration ignores E, and its ledger charges
the excess. x_i(t) is released in y_i(t+1) with Laplace scale M_{t+1}.

* ``calibration="safe"`` (default): M_t = S_i c p^(t-1) / (epsilon (p - q)). Then
  sum_{t>=1} Delta(t) / M_{t+1} = epsilon exactly, and after T rounds the agent has spent
  epsilon (1 - (q/p)^T), on a set projected by a solver too.
* ``calibration="paper"``: Eq. (8) verbatim, M_t = S_i c p^t / (epsilon (p - q)). Because Eq. (5)
  releases x(t-1) with the noise of round t, the sum is epsilon / p, not epsilon: the erratum N1 of
  the digest (Eqs. (11)-(12) pair M_t with x(t) instead). The ledger records the true cost, so the
  reported epsilon is valid (it is not nominal); only the requested one is exceeded, by 1/p.

Both spend pure epsilon. With ``delta`` (safe calibration only) epsilon is the total at delta of the T = ``horizon``
releases: their epsilon_t above times a public factor kappa per kind of set (closed-form, or projected by a solver),
the largest at which that kind's releases (every private agent's of that kind) compose to at most epsilon at delta
(`laplace_multiplier`: basic, advanced or RDP), so M_t / kappa.

Each release y_i(t+1) is recorded in the agent's ledger as a Laplace mechanism with
epsilon_t = Delta(t) / M_{t+1}; y_i(1) perturbs the public x_i(0) and costs nothing. epsilon_t falls like
(q/p)^t, so its noise multiplier 1/epsilon_t passes 1e154 (whose square overflows) after a few hundred to a few
thousand rounds: the accountants cap it at 1e150 (`accounted_multiplier`), and
once gamma_t underflows to 0 the release is Proj[z_i(t)], a post-processing of releases, and costs nothing.

Without privacy (``epsilon=None``, the default) the noise is zero and the step defaults to the
non-summable gamma_t = c / t^(3/4), with which the method reaches the optimum; geometric steps
stop at the bias of Theorem 10 (see docs/algorithms.md for how far, and for the choice of 3/4).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext, Algorithm, StepMonitor
from privcvx.algorithms.dp_gradient_accuracy import optimal_noise_decay
from privcvx.algorithms.gradient_agents import ProjectedGradientAgent
from privcvx.errors import ParameterError, PrivacyError, PrivcvxError, check_scalar, require_positive
from privcvx.localsolve import set_kind
from privcvx.messages import Message
from privcvx.privacy.accounting import DEFAULT_LAPLACE_DELTA
from privcvx.privacy.mechanisms import Laplace, Sensitivity, check_delta, check_epsilon, laplace_release
from privcvx.privacy.sensitivity import (
    declared_constant,
    holds_no_private_data,
    projected_sensitivity,
    solver_allowance,
)
from privcvx.privacy.total_budget import laplace_multiplier
from privcvx.problem import Agent, AgentLayout, AgentSpec, DistributedProblem
from privcvx.schedules import Geometric, Power, Schedule, as_schedule, checked_value
from privcvx.topology import WEIGHT_RULES, Topology
from privcvx.tuning import inverse_largest_smoothness, warn_nonsmooth

CALIBRATIONS = ("safe", "paper")
STEPS = ("geometric", "diminishing")
#: The exponent a of the default non-private step c / t^a: a = 1 stalls on ill-conditioned agents, a = 1/2 is slow
#: when constraints bind (the average iterate's error is O(gamma_t)); bench/bench_dpdg_steps.py measures both.
DIMINISHING_POWER = 0.75


class DPDistributedGradient(Algorithm):
    """The DP distributed projected gradient method of paper 001 (Algorithms 1-4, Eqs. (5)-(8)).

    Parameters
    ----------
    epsilon:
        Each agent's total epsilon: over an infinite horizon (Theorem 5), at ``delta`` over the horizon; None: no noise.
    step:
        ``"geometric"`` (gamma_t = c q^(t-1), Eq. (8); required under privacy), ``"diminishing"``
        (gamma_t = c / t^(3/4), non-summable: it reaches the optimum without privacy), or, without
        privacy, a float (constant) or a schedule ``t -> gamma_t``. Default: geometric under privacy,
        diminishing otherwise.
    c:
        The initial step. Default 1 / max_i L_i from the agents' declared smoothness
        (``pc.Agent(smoothness=...)``); without privacy an undeclared L_i is estimated.
    q:
        The step decay of the geometric step, in (0, 1).
    p:
        The noise decay, in (q, 1). Default: `optimal_noise_decay`.
    weights:
        The mixing rule of `Topology.weights`: "metropolis", "lazy_metropolis" or "max_degree".
    calibration:
        "safe" (default, the digest's fix of the noise index) or "paper" (Eq. (8) verbatim).
    tol:
        Stop when the disagreement and the change of the average release are both <= tol.
    solver_error:
        e, the certified l2 error of a projection computed by a solver (a conic set), as OutPert's (not the layer's
        ``CERTIFIED_ERROR``, 1e-4: here e enters every release). Each release on such a set carries E = 2 sqrt(n) e
        in l1, paid over the horizon from ``solver_share`` of epsilon, so the late rounds' noise, up to
        E T / (share epsilon), is linear in e; a step whose certificate exceeds e ends the run (`RunFailed`).
        docs/results.md compares e = 1e-4 and 1e-6 on case14's full-consensus zones (n = 144, T = 200).
    solver_share:
        The share of epsilon that pays E under the safe calibration, in (0, 1); unused on boxes and free sets.
    horizon:
        T, the number of releases E is paid over; ``None``: the run's rounds (set by `prepare`, so such a run
        resumes only with the same rounds). Used only where E is, or with ``delta``.
    delta:
        ``None`` (default): ``epsilon`` is pure epsilon-DP (basic composition), and the ledger reports at 1e-6.
        A delta in (0, 1): ``epsilon`` is the total at this delta over the horizon's T releases, with noise
        smaller by the factor kappa of the module doc (safe calibration only); the ledger reports at this delta.
    """

    name = "dp_distributed_gradient"
    columns = ("round", "average_objective", "objective", "disagreement", "average_change", "noise_magnitude",
               "epsilon", "step", "time_s")
    diagnostic_columns = {"average_objective": sum, "objective": sum, "noise_magnitude": sum}
    objective_columns = ("average_objective", "objective")
    _delta = DEFAULT_LAPLACE_DELTA  # the Laplace ledger reports its epsilon at this delta

    def __init__(self, epsilon: float | None = None, step: str | float | Schedule | None = None,
                 c: float | None = None, q: float = 0.9, p: float | None = None, weights: str = "metropolis",
                 calibration: str = "safe", tol: float | None = None, solver_error: float = 1e-5,
                 solver_share: float = 0.5, horizon: int | None = None, delta: float | None = None) -> None:
        self.epsilon, self.step, self.c, self.q, self.p = epsilon, step, c, q, p
        self.weights, self.calibration, self.tol = weights, calibration, tol
        self.solver_error, self.solver_share, self.horizon, self.delta = solver_error, solver_share, horizon, delta
        check_scalar(solver_error, argument="solver_error", kind=float, low=0.0, closed="right", error=PrivacyError)
        check_scalar(solver_share, argument="solver_share", kind=float, low=0.0, high=1.0, closed="neither")
        if horizon is not None:
            check_scalar(horizon, argument="horizon", kind=int, low=1)
        self._epsilon = None if epsilon is None else check_epsilon(epsilon)
        self._q = check_scalar(q, argument="q", kind=float, low=0.0, high=1.0, closed="neither")
        check_scalar(calibration, argument="calibration", choices=CALIBRATIONS)
        self._factor = {False: 1.0, True: 1.0} if delta is None else None  # kappa per kind, fixed by `prepare`
        if delta is not None:
            self._delta = check_delta(delta)
            if calibration == "paper":
                raise PrivacyError("a delta's calibration composes the safe calibration's release epsilons: use "
                                   "calibration='safe' with delta, or delta=None", argument="calibration")
        self._p = optimal_noise_decay(self._q, calibration) if p is None else require_positive(p, argument="p")
        if not self._q < self._p < 1.0:
            raise ParameterError(f"the noise decay must lie in (q, 1) = ({self._q}, 1), got {p!r}", argument="p")
        check_scalar(weights, argument="weights", choices=sorted(WEIGHT_RULES))
        self._c = None if c is None else require_positive(c, argument="c")
        kind = step if step is not None else ("geometric" if self._epsilon is not None else "diminishing")
        if self._epsilon is not None and kind != "geometric":
            raise PrivacyError("under privacy the step must be 'geometric' (Eq. (8)): the privacy of Theorem 5 "
                               "needs summable steps", argument="step")
        self._kind = kind
        if not isinstance(kind, str):
            as_schedule(kind, argument="step")
        elif kind not in STEPS:
            raise ParameterError(f'must be "geometric", "diminishing", a float or a schedule, got {step!r}',
                                 argument="step")
        self._tol = None if tol is None else require_positive(tol, argument="tol")

    # ---- run set-up -----------------------------------------------------------------------------------
    @property
    def private(self) -> bool:
        return self._epsilon is not None

    @property
    def calibrated_to_rounds(self) -> bool:  # type: ignore[override]
        """Whether the noise depends on T: only through the ``horizon`` (the solver's term, or ``delta``'s factor);
        without it the noise of round t depends on t alone (Eq. (27)'s schedule), and a run extends."""
        return self.horizon is not None

    @property
    def certified(self) -> bool | float:
        """What the agents' projections declare to `LocalProblem` (``certified``): e under privacy."""
        return self.solver_error if self.private else False

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        self.require_decentralized(topology)
        self.require_consensus(problem)
        if self.private:
            for agent in problem.agents:
                self.declared_sensitivity(agent)
            if self._c is None and any(agent.smoothness is None for agent in problem.agents):
                raise PrivacyError("the step must be public under privacy: declare pc.Agent(smoothness=L) for every "
                                   "agent (a bound valid for every dataset) or give c", argument="c")

    @staticmethod
    def declared_sensitivity(agent: Agent) -> Sensitivity:
        """The agent's declared gradient sensitivity: a constant pc.Sensitivity (Lemma 4)."""
        return declared_constant(agent, "a constant pc.Sensitivity bounding the change of the gradient over "
                                        "neighbouring datasets at every point (Lemma 4)")

    def release_sensitivity(self, agent: Agent, kind: str, dim: int, step: float = 1.0,
                            solver_error: float = 0.0) -> float:
        """The L1 sensitivity of x_i(t) = Proj_X[z - step * grad f_i(z)] on a set X of ``kind`` (module doc).

        With ``step`` 1 and no solver error this is S_i, the sensitivity per unit step that the noise is
        calibrated to (`noise_scale`); `projected_sensitivity` gives it
        and refuses an l1-only declaration on a set that is not a box."""
        return projected_sensitivity(self.declared_sensitivity(agent), kind, dim, scale=step,
                                     solver_error=solver_error, norm="l1", agent=agent.name).l1

    def prepare(self, problem: DistributedProblem, topology: Topology, rounds: int) -> DPDistributedGradient:
        """Check the problem, fix c (1 / max L_i) when it was not given, and the horizon T (the run's ``rounds``)
        when an agent's set is projected by a solver under the safe calibration, or with ``delta`` (then kappa too)."""
        self.check(problem, topology)
        if self.horizon is not None and self.horizon < rounds:
            raise ParameterError(f"a run of {rounds} rounds releases past the horizon {self.horizon} its noise is "
                                 "calibrated to: give horizon >= rounds, or None (the rounds)", argument="horizon")
        ready = self
        if self._c is None and isinstance(self._kind, str):
            ready = ready.clone(c=self._default_c(problem))
        solver_terms = [_may_pay_solver_term(*pair) for pair in zip(problem.agents, problem.layouts, strict=True)
                        if not holds_no_private_data(pair[0])]
        if self.delta is not None and self.private:
            ready = ready.clone(horizon=ready.horizon or rounds)
            ready._factor = ready.factors(set(solver_terms))
        elif self.horizon is None and self.private and self.calibration == "safe" and any(solver_terms):
            ready = ready.clone(horizon=rounds)
        return ready

    def factors(self, kinds: set[bool]) -> dict[bool, float]:
        """kappa per kind of set (``True``: solver-projected) in ``kinds`` (`laplace_multiplier`, module doc); another
        kind, whose agents release nothing charged, takes the least of them (1 without private agents)."""
        factors = {kind: laplace_multiplier(self.release_epsilons(kind), self._epsilon, self._delta) for kind in kinds}
        return {kind: factors.get(kind, min(factors.values(), default=1.0)) for kind in (False, True)}

    def release_epsilons(self, solver_term: bool) -> list[float]:
        """The epsilons Delta(t-1) / M_t of the releases t = 2..T+1 (T the horizon) without ``delta``'s factor: an
        agent's with S = 1 (and E = 1 if ``solver_term``), which are every agent's of that kind (module doc)."""
        if self.horizon is None:
            raise ParameterError("the release epsilons are a run's: prepare the algorithm (or give horizon=T)",
                                 argument="horizon")
        gamma, term = self.schedule(), float(solver_term)
        return [(gamma(t - 1) + term) / self._schedule_scale(1.0, t, term) if gamma(t - 1) > 0.0 else 0.0
                for t in range(2, self.horizon + 2)]

    @staticmethod
    def _default_c(problem: DistributedProblem) -> float:
        """1 / max L_i over the declared (under privacy) or estimated smoothness."""
        warn_nonsmooth("DPDistributedGradient", problem.agents, "its default step c = 1 / max L_i has no L_i for "
                       "them (a subgradient step at c = 1 / max of the others' L_i, or 1)",
                       "Give c (a step for a subgradient method), or smooth the objective (e.g. a Huber or squared "
                       "hinge loss)")
        return inverse_largest_smoothness(problem)

    def schedule(self) -> Schedule:
        """gamma_t: the step of round t."""
        c = 1.0 if self._c is None else self._c
        if self._kind == "geometric":
            return Geometric(c, self._q)
        if self._kind == "diminishing":
            return Power(c, DIMINISHING_POWER)
        return as_schedule(self._kind, argument="step")

    def noise_scale(self, sensitivity: float, t: int, solver_term: float = 0.0) -> float:
        """M_t for an agent whose release has L1 sensitivity S per unit step: Eq. (8) ("paper") or divided by p
        ("safe"). With the solver's term E = ``solver_term`` > 0 ("safe"), the release of x(t-1) in round t >= 2
        gets epsilon_t = S gamma_{t-1} / M_t[(1 - share) epsilon] + share epsilon / T and M_t = (S gamma_{t-1} + E) /
        epsilon_t (module doc). With ``delta``, divided by the run's factor kappa."""
        if self._factor is None:
            raise ParameterError("delta's factor kappa is fixed for a run: prepare the algorithm", argument="delta")
        return self._schedule_scale(sensitivity, t, solver_term) / self._factor[solver_term > 0.0]

    def _schedule_scale(self, sensitivity: float, t: int, solver_term: float) -> float:
        c = 1.0 if self._c is None else self._c
        share = self.solver_share if solver_term > 0.0 and self.calibration == "safe" else 0.0
        scale = sensitivity * c * self._p ** (t - 1) / (self._epsilon * (1.0 - share) * (self._p - self._q))
        if self.calibration == "paper":
            return scale * self._p
        if share and t >= 2:
            if self.horizon is None:
                raise ParameterError("the solver's term is paid over a horizon: prepare the algorithm for a run "
                                     "(or give horizon=T)", argument="horizon")
            step = sensitivity * c * self._q ** (t - 2)  # S gamma_{t-1}, geometric under privacy
            return (step + solver_term) / (step / scale + share * self._epsilon / self.horizon)
        return scale

    def divergence_step(self, metrics: Mapping[str, float]) -> float | None:
        """gamma_t for the non-summable "diminishing" steps c / t^(3/4); None for geometric or given ones."""
        return metrics["step"] if self._kind == "diminishing" else None

    def agent_program(self, agent: Agent, context: AgentContext) -> DPDGAgent:
        return DPDGAgent(agent, context, self)

    def monitor(self, problem: DistributedProblem, topology: Topology) -> StepMonitor:
        return StepMonitor(problem, "y", self.schedule(), underflow=True)


def _may_pay_solver_term(agent: Agent | AgentSpec, layout: AgentLayout) -> bool:
    """Whether an agent's releases may carry the solver's term E: it holds private data and its set is projected by
    a solver. The set of an agent built by its factory on its host is not known to the driver: assumed so."""
    return not holds_no_private_data(agent) and (isinstance(agent, AgentSpec) or set_kind(agent, layout) == "conic")


class DPDGAgent(ProjectedGradientAgent):
    """Agent i of paper 001: its estimate x_i (from the public x_i(0), data-independent: N3), its last broadcast y_i,
    its noise stream and ledger."""

    def __init__(self, agent: Agent, context: AgentContext, settings: DPDistributedGradient) -> None:
        super().__init__(agent, context, settings, certified=settings.certified)
        self.ones = np.ones(self.layout.dim)
        self.step_size = settings.schedule()
        self.sensitivity = settings.release_sensitivity(agent, self.projection.kind, self.layout.dim) \
            if settings.private else 0.0
        #: E, the solver's term of every release's Delta(t) (0 on closed-form sets and without private data)
        self.solver_term = solver_allowance(self.layout.dim, self.projection.error_bound, agent.name).l1 \
            if self.sensitivity > 0.0 and self.projection.error_bound > 0.0 else 0.0
        self.y = self.x.copy()
        self.noise_magnitude = 0.0

    def _broadcast(self, t: int) -> list[Message]:
        """y_i(t) = x_i(t-1) + w_i(t) (Eq. (5)), recorded in the ledger when x_i(t-1) depends on the data."""
        if self.settings.private:
            scale = self.settings.noise_scale(self.sensitivity, t, self.solver_term)
            # x_i(t-1) has sensitivity Delta(t-1) = S gamma_{t-1} (+ E, through the set's kind): a Laplace release with
            # epsilon Delta / M_t. x_i(0) has none, nor has x_i(t-1) = Proj[z] once gamma_{t-1} underflows to 0 (a
            # public function of earlier releases); a Delta that underflows is rounded up.
            gamma = checked_value(self.step_size, t - 1, argument="step", underflow=True) if t >= 2 else 0.0
            sensitivity = 0.0 if gamma == 0.0 or self.sensitivity == 0.0 else max(self.settings.release_sensitivity(
                self.agent, self.projection.kind, self.layout.dim, gamma, self.projection.error_bound), math.ulp(0.0))
            mechanism = laplace_release(sensitivity, scale) or Laplace(1.0)  # uncharged when sensitivity is 0
            try:
                self.y = self.context.release(self.x, mechanism, Sensitivity(l1=sensitivity), scale=scale,
                                              tags={"payload": "y"})
            except PrivacyError as error:
                if error.argument != "value":
                    raise
                # The secure grid's step is 2^-10 Delta / n, so |x / step| < 2^62 needs Delta > n 2^-52 |x|: a
                # sensitivity (and noise) that has decayed below the float resolution of x, where no double holds
                # a release of that sensitivity (the float path's x + w rounds to x there).
                raise PrivacyError(
                    f"round {t}: the release's sensitivity Delta = {sensitivity:.3g} (S c q^(t-2), q = "
                    f"{self.settings._q}) and noise scale {scale:.3g} have decayed below the float resolution of "
                    "the estimate, which no grid step can then represent; the geometric step c q^t has stopped "
                    f"moving the estimates by now: run at most {t - 1} rounds, or give a q closer to 1",
                    agent=self.context.name, argument="rounds") from error
            self.noise_magnitude = self.context.last_release.magnitude
        else:
            self.y, self.noise_magnitude = self.x + np.zeros(self.layout.dim), 0.0
        return [self.context.message(t, {"y": self.y})]

    def start(self) -> list[Message]:
        return self._broadcast(1)

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        """Eqs. (6)-(7) on round t's broadcasts, then the broadcast of round t + 1."""
        received = {m.sender: m["y"] for m in inbox if m.round == t}
        received[self.context.name] = self.y
        row = self.context.topology.weight_row(self.context.name, t, self.settings.weights)
        missing = sorted(set(row) - set(received))
        if missing:
            raise PrivcvxError(f"round {t}: no broadcast from the neighbours {missing}", agent=self.context.name,
                               argument="messages")
        z = sum(row[j] * received[j] for j in sorted(row))
        gradient = self.evaluator.gradient(z)
        if not np.all(np.isfinite(gradient)):
            raise PrivcvxError("the gradient is not finite at the aggregate z_i(t)", agent=self.context.name,
                               argument="gradient")
        gamma = checked_value(self.step_size, t, argument="step", underflow=True)
        self.x = self.projection.project(z - gamma * gradient, self.ones)
        return self._broadcast(t + 1)

    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        """f_i at the agent's estimate x_i(t) and at the average release, and this round's sum |w_i|."""
        return {"objective": self.evaluator.value(self.x), "average_objective": self.evaluator.value(w_p),
                "noise_magnitude": self.noise_magnitude}

    def output(self, released_only: bool = False) -> np.ndarray:
        return self.y.copy()  # the last broadcast: a release either way

    def report(self) -> dict[str, Any]:
        """The projections' report (``result.info["local_solve"]``)."""
        return {"local_solve": self.projection.report(self.context.diagnostics)}

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x, self.y = state["x"], state["y"]

