"""Quantized differentially private decentralized SGD: Q-DPSGD-1 and Q-DPSGD-2.

Chapter 4 of J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness"
(PhD dissertation, University of Houston, 2022): Algorithms 4 and 5, Eqs. (26)-(28). Every agent i keeps a
model x_i in its public set W_i and, in round t,

    z_i(t) = Q(x_i(t-1))          [+ eta * N_Z(0, sigma_t^2)^p   for variant 2]          (broadcast)
    g_i    = (1/B) ( sum_{j in S_i(t)} clip_K(grad l(x_i(t-1); d_j))  [+ N(0, (s K)^2 I)  for variant 1] )
    x_i(t) = Proj_{W_i}[ (1 - eps + eps w_ii) x_i(t-1) + eps sum_{j != i} w_ij z_j(t) - alpha_t eps g_i ]  (27)/(28)

with Q the stochastic quantizer (26) on s bits of resolution eta, S_i(t) a Poisson sample of the agent's
records (each with probability q), clip_K(g) = g / max(1, ||g||_2 / K), B = q m the expected batch size, and
w_ij the gossip weights of round t's graph (`Topology.weights`). The agent's step of round t takes
round t's broadcasts, computes x_i(t) and broadcasts z_i(t+1) (``start`` broadcasts the public Q(x_i(0))).

Per-sample gradients. Clipping needs the gradient of every record, which a CVXPY objective does not expose:
an agent of a private run is a [`pc.SampledAgent`][privcvx.problem.SampledAgent], which declares its records'
gradients (a [`SampleLoss`][privcvx.declared.SampleLoss]) next to its objective (the mean of the per-record
losses), and its sampling frame (record count, record smoothness) in its `pc.Declared` record.
``problems/binary_logistic.py`` builds L2-regularized logistic regression so. A plain ``pc.Agent`` runs only
without privacy, as one record (its full gradient, unclipped, q = 1).

Privacy: variant 1 releases through the sampled Gaussian mechanism, variant 2 perturbs the quantized state on the
lattice, whose sensitivity D_t the agent tracks; the analysis and the calibration of the noise multiplier are in
[`privcvx.algorithms.qdpsgd_accounting`][privcvx.algorithms.qdpsgd_accounting] (`QDPSGDAccountant`).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm, LatestReleases
from privcvx.algorithms.qdpsgd_accounting import QDPSGDAccountant
from privcvx.errors import (
    ConvergenceWarning,
    ParameterError,
    PrivacyError,
    PrivcvxError,
    check_scalar,
    require_positive,
)
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import LocalProblem
from privcvx.messages import Message
from privcvx.privacy.mechanisms import (
    DiscreteGaussian,
    PoissonSampledGaussian,
    Sensitivity,
    check_delta,
    check_epsilon,
)
from privcvx.privacy.sensitivity import holds_no_private_data, projected_sensitivity
from privcvx.problem import Agent, DistributedProblem, SampledAgent
from privcvx.schedules import Power, Schedule, as_schedule, checked_value
from privcvx.topology import WEIGHT_RULES, Topology
from privcvx.tuning import inverse_largest_smoothness

VARIANTS = (1, 2)
#: The exponent a of the default step c / t^a. Eq. (27) takes the gradient at x_i(t-1), before the projection
#: onto W_i, whose bias is O(alpha_t): with a = 3/4 (DPDistributedGradient's) the box-constrained consensus
#: problem of check_algorithm stops at a relative gap of 1.1e-3 after 300 rounds, with a = 0.85 at 6.4e-4
#: (complete graph) and 8.5e-4 (ring); measured with c = 1 / max L_i.
DIMINISHING_POWER = 0.85


class _WholeObjective:
    """A plain agent as one record: its full gradient (runs without privacy only)."""

    count = 1

    def __init__(self, evaluator: GradientEvaluator) -> None:
        self.evaluator = evaluator

    def gradients(self, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        return np.tile(self.evaluator.gradient(x), (len(indices), 1))


def stochastic_quantize(x: np.ndarray, resolution: float, bits: int, uniforms: np.ndarray) -> np.ndarray:
    """The stochastic quantizer (26): each coordinate to eta k or eta (k + 1), unbiased, on s bits.

    x / eta is first saturated to the s-bit range [-2^(s-1), 2^(s-1) - 1] (the thesis's representable range;
    unbiasedness holds inside it); then a coordinate with x / eta in [k, k + 1] becomes eta (k + 1) with
    probability x / eta - k, else eta k. ``uniforms`` are the agent's U(0, 1) draws, one per coordinate.
    """
    low, high = -2.0 ** (bits - 1), 2.0 ** (bits - 1) - 1.0
    scaled = np.clip(np.asarray(x, dtype=float) / resolution, low, high)
    floor = np.floor(scaled)
    return resolution * (floor + (uniforms < scaled - floor))


class QDPSGD(QDPSGDAccountant, Algorithm):
    """Q-DPSGD-1 and Q-DPSGD-2 (Ding's thesis, Ch. 4, Algorithms 4-5, Eqs. (26)-(28)).

    Parameters
    ----------
    variant:
        1 (Gaussian noise on the minibatch gradient, Eq. (27)) or 2 (discrete Gaussian noise on the quantized
        model, on the lattice eta Z, Eq. (28)).
    epsilon, delta:
        The run's total (epsilon, delta) per agent: the noise multiplier is calibrated for the run's T rounds
        (RDP accountant of dp-accounting). ``None`` (with ``noise_multiplier=None``) runs without noise.
    noise_multiplier:
        s, fixed instead of calibrated: the Gaussian's std over K (variant 1), or the integer noise's sigma
        over the lattice sensitivity (variant 2).
    bits, resolution:
        The quantizer (26): s bits per coordinate and the lattice step eta (range eta [-2^(s-1), 2^(s-1) - 1]).
    clip:
        K, the per-record gradient clipping norm; required under privacy (default none).
    sampling_rate:
        q, the Poisson sampling probability of each record per round.
    batch_size:
        B, the public normalizer of the minibatch sum (the expected batch). Default q m_i with m_i the agent's
        record count; under privacy that count must be declared public (``SampledAgent(record_count=m_i)``), else
        give B, a setting independent of the data (the add/remove analysis assumes it is).
    step:
        alpha_t: a float (constant) or a schedule; default c / t^0.85 with c = 1 / max_i L_i from the declared
        smoothness (estimated without privacy), as for DPDistributedGradient.
    averaging:
        The averaging step eps in (0, 1] of Eq. (27) (1: plain gossip).
    weights:
        The gossip rule of `Topology.weights`.
    tol:
        Stop when the disagreement and the change of the average release are both <= tol.
    """

    name = "qdpsgd"
    columns = ("round", "average_objective", "objective", "disagreement", "average_change", "bits", "total_bits",
               "epsilon", "step", "time_s")
    diagnostic_columns = {"average_objective": sum, "objective": sum}
    objective_columns = ("average_objective", "objective")

    def __init__(self, variant: int = 1, epsilon: float | None = None, delta: float = 1e-5,
                 noise_multiplier: float | None = None, bits: int = 32, resolution: float = 2.0 ** -20,
                 clip: float | None = None, sampling_rate: float = 1.0, batch_size: float | None = None,
                 step: float | Schedule | None = None,
                 averaging: float = 1.0, weights: str = "metropolis", tol: float | None = None) -> None:
        self.variant, self.epsilon, self.delta, self.noise_multiplier = variant, epsilon, delta, noise_multiplier
        self.bits, self.resolution, self.clip, self.sampling_rate = bits, resolution, clip, sampling_rate
        self.batch_size = batch_size
        self._batch = None if batch_size is None else require_positive(batch_size, argument="batch_size")
        self.step, self.averaging, self.weights, self.tol = step, averaging, weights, tol
        check_scalar(variant, argument="variant", choices=VARIANTS)
        if epsilon is not None and noise_multiplier is not None:
            raise ParameterError("give epsilon (calibrated) or noise_multiplier (fixed), not both",
                                 argument="noise_multiplier")
        self._epsilon = None if epsilon is None else check_epsilon(epsilon)
        self._delta = check_delta(delta)
        self._multiplier = None if noise_multiplier is None else require_positive(
            noise_multiplier, argument="noise_multiplier", error=PrivacyError)
        check_scalar(bits, argument="bits", kind=int, low=2, high=53)
        self._resolution = require_positive(resolution, argument="resolution")
        self._clip = None if clip is None else require_positive(clip, argument="clip")
        self._rate = require_positive(sampling_rate, argument="sampling_rate")
        if self._rate > 1.0:
            raise ParameterError(f"must lie in (0, 1], got {sampling_rate!r}", argument="sampling_rate")
        self._averaging = require_positive(averaging, argument="averaging")
        if self._averaging > 1.0:
            raise ParameterError(f"must lie in (0, 1], got {averaging!r}", argument="averaging")
        check_scalar(weights, argument="weights", choices=sorted(WEIGHT_RULES))
        self._step = None if step is None else as_schedule(step, argument="step")
        self._c: float | None = None  # the default step's c, fixed by prepare()
        self._tol = None if tol is None else require_positive(tol, argument="tol")

    # ---- run set-up -----------------------------------------------------------------------------------
    @property
    def private(self) -> bool:
        return self._epsilon is not None or self._multiplier is not None

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        self.require_decentralized(topology)
        self.require_consensus(problem)
        for agent in problem.agents:
            if self.private and holds_no_private_data(agent):
                continue  # no records to protect: its whole gradient, released without noise
            if not isinstance(agent, SampledAgent) and (self.private or self._rate < 1.0 or self._clip is not None):
                raise self.unsupported("agents without per-record gradients",
                                       "clipping, subsampling and privacy need a SampledAgent (its per-record "
                                       "gradients); a plain pc.Agent runs only without them", agent=agent.name,
                                       argument="samples")
        if self.private:
            if self._clip is None:
                raise PrivacyError("under privacy the per-record gradients must be clipped: give clip=K",
                                   argument="clip")
            private_agents = [agent for agent in problem.agents if not holds_no_private_data(agent)]
            unsmooth = [agent.name for agent in private_agents if agent.declared.record_smoothness is None]
            if self.variant == 2 and unsmooth:
                raise PrivacyError("Q-DPSGD-2 bounds the sensitivity of the agent's state through the Lipschitz "
                                   "constant of the per-record gradients: declare SampledAgent(record_smoothness=L)",
                                   agent=unsmooth[0], argument="record_smoothness")
            undeclared = [agent.name for agent in private_agents if agent.declared.record_count is None]
            if self._batch is None and undeclared:
                raise PrivacyError("the default normaliser B = q m_i reveals the record count m_i: declare it public "
                                   "(SampledAgent(record_count=m_i)) or give batch_size=B", agent=undeclared[0],
                                   argument="batch_size")
            if self._step is None and any(agent.smoothness is None for agent in problem.agents):
                raise PrivacyError("the step must be public under privacy: declare pc.Agent(smoothness=L) for every "
                                   "agent or give step", argument="step")

    def prepare(self, problem: DistributedProblem, topology: Topology, rounds: int) -> QDPSGD:
        """Check the problem, fix the default step's c, and calibrate the noise multiplier for ``rounds``."""
        self.check(problem, topology)
        ready = self.clone()
        if self._step is None:
            ready._c = inverse_largest_smoothness(problem)
        if self._epsilon is not None:
            ready._multiplier = self.calibrate(rounds)
        if self.variant == 2 and self.private and self._rate < 1.0:
            ready._warn_sampled_state(problem, rounds)
        return ready

    def _warn_sampled_state(self, problem: DistributedProblem, rounds: int) -> None:
        """Q-DPSGD-2 with q < 1: the state's sensitivity D_t grows by up to 1 + alpha_t eps L_rec / q per round
        (`privcvx.algorithms.qdpsgd_accounting`; no amplification is claimed), so the noise grows with it: a
        ``ConvergenceWarning`` with the bound."""
        smoothness = max(agent.declared.record_smoothness for agent in problem.agents
                         if not holds_no_private_data(agent))
        step, eps = self.schedule(), self._averaging
        log_growth = sum(math.log1p(step(t) * eps * smoothness / self._rate) for t in range(1, rounds + 1))
        warnings.warn(f"Q-DPSGD-2 with sampling_rate={self._rate!r} < 1: subsampling is not amplified for the "
                      f"state's release, and it divides the per-round growth of the state's sensitivity D_t by q "
                      f"(1 + alpha_t eps L_rec / q): over {rounds} rounds D_t may grow by a factor of up to "
                      f"10^{log_growth / math.log(10):.1f}, and "
                      "the noise with it. Use sampling_rate=1 (or a smaller step) with variant=2", ConvergenceWarning,
                      stacklevel=4)

    def schedule(self) -> Schedule:
        """alpha_t: the gradient step of round t."""
        if self._step is not None:
            return self._step
        return Power(1.0 if self._c is None else self._c, DIMINISHING_POWER)

    def agent_program(self, agent: Agent, context: AgentContext) -> QDPSGDAgent:
        return QDPSGDAgent(agent, context, self)

    def monitor(self, problem: DistributedProblem, topology: Topology) -> QDPSGDMonitor:
        return QDPSGDMonitor(problem, topology, self.schedule(), self.bits)


class QDPSGDAgent(AgentProgram):
    """Agent i of Q-DPSGD: its model x_i, its last broadcast z_i, the sensitivity D_t of x_i (variant 2)."""

    def __init__(self, agent: Agent, context: AgentContext, settings: QDPSGD) -> None:
        self.agent, self.context, self.settings = agent, context, settings
        self.layout = context.layout
        self.projection = LocalProblem(agent, self.layout, certified=settings.private)
        self.evaluator = GradientEvaluator(agent, self.layout)
        # An agent without private data (pc.Sensitivity(l1=0, l2=0)) under privacy: its whole gradient, neither
        # sampled nor clipped, and its broadcasts without noise, charged nothing (docs/privacy.md).
        self.public = settings.private and holds_no_private_data(agent)
        self.samples = agent.samples if isinstance(agent, SampledAgent) and not self.public \
            else _WholeObjective(self.evaluator)
        self.batch = 1.0 if self.public else (settings._batch if settings._batch is not None
                                              else settings._rate * self.samples.count)
        self.step_size = settings.schedule()
        self.ones = np.ones(self.layout.dim)
        self.x = self.projection.project(np.zeros(self.layout.dim), self.ones)  # x_i(0): public
        self.z = self.x.copy()
        self.sensitivity = 0.0  # D_t: the L2 sensitivity of x_i(t) (variant 2 under privacy)
        self.multiplier = settings.multiplier_for(context.noise, context.rounds, self.layout.dim)

    def _broadcast(self, t: int) -> list[Message]:
        """z_i(t) = Q(x_i(t-1)) (+ eta N_Z(0, sigma^2) in variant 2, then saturated to the s-bit range)."""
        settings, noise = self.settings, self.context.noise
        eta, bits = settings._resolution, settings.bits
        quantized = stochastic_quantize(self.x, eta, bits, noise.uniform(self.layout.dim))
        if settings.variant == 2 and settings.private and not self.public and t >= 2:
            lattice_sensitivity = self.sensitivity / eta + math.sqrt(self.layout.dim)
            sigma = self.multiplier * lattice_sensitivity
            codes = self.context.release(np.rint(quantized / eta), DiscreteGaussian(sigma, lattice_sensitivity),
                                         Sensitivity(l2=lattice_sensitivity), scale=sigma)
            quantized = eta * np.clip(codes, -2.0 ** (bits - 1), 2.0 ** (bits - 1) - 1.0)
        self.z = quantized
        return [self.context.message(t, {"z": self.z})]

    def start(self) -> list[Message]:
        return self._broadcast(1)

    def _gradient(self) -> np.ndarray:
        """g_i: the clipped per-record gradients of a Poisson sample, summed (+ Gaussian noise, variant 1), over B."""
        settings, noise = self.settings, self.context.noise
        m = self.samples.count
        chosen = np.arange(m) if settings._rate >= 1.0 or self.public else \
            np.flatnonzero(noise.uniform(m) < settings._rate)
        rows = np.asarray(self.samples.gradients(self.x, chosen), dtype=float).reshape(len(chosen), self.layout.dim)
        if settings._clip is not None and len(chosen) and not self.public:
            norms = np.linalg.norm(rows, axis=1)
            rows = rows / np.maximum(1.0, norms / settings._clip)[:, None]
        total = rows.sum(axis=0)
        if settings.variant == 1 and settings.private and not self.public:
            clip, multiplier = settings._clip, self.multiplier
            total = self.context.release(total, PoissonSampledGaussian(settings._rate, multiplier),
                                         Sensitivity(l2=clip), scale=multiplier * clip)
        if not np.all(np.isfinite(total)):
            raise PrivcvxError("a per-record gradient is not finite", agent=self.context.name, argument="samples")
        return total / self.batch

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        """Eq. (27) / (28) on round t's broadcasts, then the broadcast of round t + 1."""
        received = {m.sender: m["z"] for m in inbox if m.round == t}
        row = self.context.topology.weight_row(self.context.name, t, self.settings.weights)
        name = self.context.name
        missing = sorted(set(row) - set(received) - {name})
        if missing:
            raise PrivcvxError(f"round {t}: no broadcast from the neighbours {missing}", agent=name,
                               argument="messages")
        eps, alpha = self.settings._averaging, checked_value(self.step_size, t, argument="step")
        keep = 1.0 - eps + eps * row.get(name, 0.0)
        mixed = keep * self.x + eps * sum(row[j] * received[j] for j in sorted(row) if j != name)
        self.x = self.projection.project(mixed - alpha * eps * self._gradient(), self.ones)
        if self.settings.variant == 2 and self.settings.private and not self.public:
            # D_t = (keep + alpha eps L_rec / q) D_{t-1} + alpha eps K / B (`qdpsgd_accounting`), through the
            # projection (l2 survives it; a solver's error is added on a set that is not a box).
            growth = keep + alpha * eps * self.agent.declared.record_smoothness / self.settings._rate
            pre_image = Sensitivity(l2=growth * self.sensitivity + alpha * eps * self.settings._clip / self.batch)
            self.sensitivity = projected_sensitivity(pre_image, self.projection.kind, self.layout.dim,
                                                     solver_error=self.projection.error_bound, norm="l2",
                                                     agent=name).l2
        return self._broadcast(t + 1)

    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        """f_i at the agent's model x_i(t) and at the average release."""
        return {"objective": self.evaluator.value(self.x), "average_objective": self.evaluator.value(w_p)}

    def output(self, released_only: bool = False) -> np.ndarray:
        return self.z.copy()  # the last broadcast: a release either way

    def report(self) -> dict[str, Any]:
        """The projections' report (``result.info["local_solve"]``)."""
        return {"local_solve": self.projection.report(self.context.diagnostics)}

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x, "z": self.z, "sensitivity": self.sensitivity}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            x, z = (np.asarray(state[k], dtype=float) for k in ("x", "z"))
            sensitivity = float(state["sensitivity"])
        except (KeyError, TypeError, ValueError) as error:
            raise PrivcvxError(f"not a Q-DPSGD agent state ({error})", agent=self.context.name,
                               argument="state") from None
        if x.shape != (self.layout.dim,) or z.shape != (self.layout.dim,) or not sensitivity >= 0.0:
            raise PrivcvxError("the state's vectors do not fit the agent", agent=self.context.name, argument="state")
        self.x, self.z, self.sensitivity = x, z, sensitivity


class QDPSGDMonitor(LatestReleases):
    """Public metrics from the broadcasts: disagreement, the average release, its change, the bits sent."""

    def __init__(self, problem: DistributedProblem, topology: Topology, step: Schedule, bits: int) -> None:
        super().__init__(problem, "z")
        self.topology, self.step, self.bits = topology, step, bits
        self.total_bits = 0.0

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        agreement = self.agreement(messages)
        # A broadcast of round t + 1 reaches the sender's neighbours in that round: p s bits to each.
        sent = float(sum(m["z"].size * self.bits * len(self.topology.neighbours(m.sender, m.round))
                         for m in messages if "z" in m.payload))
        self.total_bits += sent
        if t == 0:
            return {}
        return {**agreement, "bits": sent, "total_bits": self.total_bits,
                "step": checked_value(self.step, t, argument="step")}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "total_bits": self.total_bits}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.total_bits = float(state["total_bits"])
