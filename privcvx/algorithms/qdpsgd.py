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
an agent of a private run is a `SampledAgent`, which declares its records' gradients (a
`SampleLoss`) next to its objective (the mean of the per-record losses). ``problems/binary_logistic.py``
builds L2-regularized logistic regression so. A plain ``pc.Agent`` runs only without privacy, as one record
(its full gradient, unclipped, q = 1).

Privacy, variant 1 (gradient perturbation, Theorem 11). The noisy sum is the sampled Gaussian mechanism: under
add/remove-one the sum of clipped gradients has L2 sensitivity K (2K under replace-one; over the mean that is
the thesis's 2K/|S|), the noise is N(0, (s K)^2), and each round is recorded as
[`PoissonSampledGaussian`][privcvx.privacy.mechanisms.PoissonSampledGaussian] (q, s): dp-accounting's
``PoissonSampledDpEvent(q, GaussianDpEvent(s))``, the RDP amplification by subsampling (Lemma 8). The thesis
divides by the realized |S| and uses the approximation 8 rho / (m^2 sigma^2) of the amplified RDP; privcvx
divides by the public B (``batch_size``; the realized size is data dependent) and uses dp-accounting's exact
RDP of the subsampled Gaussian. Q and the gossip are post-processing.

Privacy, variant 2 (output perturbation on the lattice, Theorems 14-15). What is released is Q(x_i(t)) plus
discrete Gaussian noise, so its sensitivity is that of the private state x_i(t), not of one gradient step (Lemma 19
bounds only the last step: a change in one record moves every later x_i, through the term (1 - eps + eps w_ii) x_i
and through the gradients of all the other records, evaluated at a different x_i). With D_0 = 0 (x_i(0) is public)
and the releases of the other agents fixed,

    ||x_i(t) - x_i'(t)||_2 <= D_t = (c_t + alpha_t eps L_rec / q) D_{t-1} + alpha_t eps K / B,

with c_t = 1 - eps (1 - w_ii(t)): the projection is non-expansive, clipping is 1-Lipschitz, each record's gradient
is L_rec-Lipschitz (``SampledAgent(record_smoothness=...)``), at most m = B / q records are sampled, and the
differing record adds at most K / B (on a set projected by a solver, its error adds 2 sqrt(n) e per round:
`privcvx.privacy.sensitivity`). This bound grows geometrically when c_t + alpha_t eps L_rec / q > 1, and the
noise with it: it is what can be proved without further assumptions, not a tight account. With the quantizer's
uniforms fixed, Q moves each coordinate by at most one extra lattice step, so Q(x)/eta has L2 sensitivity D_t/eta +
sqrt(p) (the thesis's Lemma 19 has 2 eta sqrt(p)), and the mixture over the uniforms keeps the bound. The integer
noise has sigma_t = s (D_t/eta + sqrt(p)), each release is 1/(2 s^2)-zCDP (CKS20;
`DiscreteGaussian` in the ledger) and the thesis's subsampling amplification is
not claimed: a record changes the state in every round it is sampled, which Lemma 8 (one release per sample) does
not cover. The release is then saturated to the s-bit range (post-processing). Noise comes from
`discrete_gaussian`: OpenDP's sampler under ``seed="secure"``, a seeded
CKS sampler otherwise.

Variant 1's Gaussian goes through the agent's noise source (``perturb``): on the secure path it becomes a
discrete Gaussian on a fine grid, and the Poisson sample is drawn from the same source (``SecureNoise.uniform``,
the operating system's entropy). The release is recorded as
`PoissonSampledDiscreteGaussian`, which keeps the subsampling amplification: its RDP is Zhu & Wang 2019's
general bound (`poisson_zcdp_rdp`), and a scalar release also has its exact PLD (dp-accounting's Poisson-subsampled
discrete Gaussian), which the ledger composes. With ``epsilon`` the agent draws the seeded path's multiplier when the
secure account spends at most epsilon with it, else the smallest that does (`QDPSGD.calibrate` with ``grid=True``,
`QDPSGD.multiplier_for`): the same multiplier for scalar releases, 1.27x (q = 0.02) to 5.3x (q = 0.1) more for
d = 5, where only the RDP bound is proved (docs/qdpsgd.md).

With ``epsilon`` the noise multiplier s is calibrated in `QDPSGD.prepare` so that T rounds spend
(epsilon, delta) under dp-accounting's RDP accountant; ``noise_multiplier`` fixes s instead.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Protocol, runtime_checkable

import dp_accounting
import numpy as np
from scipy.optimize import brentq

from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm, LatestReleases
from privcvx.errors import (
    ConvergenceWarning,
    DeclarationError,
    ParameterError,
    PrivacyError,
    PrivcvxError,
    check_scalar,
    require_positive,
)
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import LocalProblem
from privcvx.messages import Message
from privcvx.privacy.grid import calibrate as grid_calibration
from privcvx.privacy.mechanisms import (
    DiscreteGaussian,
    GridRdpAccountant,
    PoissonSampledDiscreteGaussian,
    PoissonSampledGaussian,
    Sensitivity,
    check_delta,
    check_epsilon,
)
from privcvx.privacy.noise import NoiseSource, SecureNoise
from privcvx.privacy.sensitivity import holds_no_private_data, projected_sensitivity
from privcvx.problem import Agent, DistributedProblem
from privcvx.schedules import Power, Schedule, as_schedule, checked_value
from privcvx.topology import WEIGHT_RULES, Topology
from privcvx.tuning import smoothness_of

VARIANTS = (1, 2)
#: The exponent a of the default step c / t^a. Eq. (27) takes the gradient at x_i(t-1), before the projection
#: onto W_i, whose bias is O(alpha_t): with a = 3/4 (DPDistributedGradient's) the box-constrained consensus
#: problem of check_algorithm stops at a relative gap of 1.1e-3 after 300 rounds, with a = 0.85 at 6.4e-4
#: (complete graph) and 8.5e-4 (ring); measured with c = 1 / max L_i.
DIMINISHING_POWER = 0.85


@runtime_checkable
class SampleLoss(Protocol):
    """An agent's records as the sum of per-record losses: what clipping and subsampling need.

    ``count`` is the number m of records (public, as the batch size of DP-SGD); ``gradients(x, indices)``
    returns the gradients of the losses of the records ``indices`` at the agent's flattened vector ``x``, one
    row each (shape ``(len(indices), x.size)``). The agent's objective must be their mean.
    """

    count: int

    def gradients(self, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """The per-record gradients at ``x``, one row per index."""


class SampledAgent(Agent):
    """A ``pc.Agent`` that also declares its per-record gradients (``samples``, a `SampleLoss`).

    ``record_smoothness`` is a public bound L_rec on the Lipschitz constant of every record's gradient (valid for
    every record the data could hold); Q-DPSGD-2 needs it under privacy. ``record_count`` declares the number of
    records m_i public (it must equal ``samples.count``): QDPSGD's default normaliser B = q m_i reveals it, so a
    private run without ``batch_size`` needs it. Every other argument is ``pc.Agent``'s; ``objective`` must be
    the mean of the records' losses.
    """

    def __init__(self, objective: Any, constraints: Any = (), *, samples: SampleLoss,
                 record_smoothness: float | None = None, record_count: int | None = None, **kwargs: Any) -> None:
        super().__init__(objective, constraints, **kwargs)
        self.record_smoothness = None if record_smoothness is None else require_positive(
            record_smoothness, argument="record_smoothness", agent=kwargs.get("name"), error=DeclarationError,
            allow_zero=True)
        if not isinstance(samples, SampleLoss):
            raise DeclarationError(f"must provide count and gradients(x, indices), got {samples!r}",
                                   agent=kwargs.get("name"), argument="samples")
        count = check_scalar(samples.count, argument="samples.count", kind=int, low=1, agent=kwargs.get("name"),
                             error=DeclarationError)
        if record_count is not None and check_scalar(record_count, argument="record_count", kind=int, low=1,
                                                     agent=kwargs.get("name"), error=DeclarationError) != count:
            raise DeclarationError(f"must be None or the agent's number of records, {count}, got {record_count!r}",
                                   agent=kwargs.get("name"), argument="record_count")
        self.samples = samples
        self.record_count = None if record_count is None else count


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


class QDPSGD(Algorithm):
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
        if variant not in VARIANTS:
            raise ParameterError(f"must be 1 or 2, got {variant!r}", argument="variant")
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
            if self.variant == 2 and any(agent.record_smoothness is None for agent in private_agents):
                raise PrivacyError("Q-DPSGD-2 bounds the sensitivity of the agent's state through the Lipschitz "
                                   "constant of the per-record gradients: declare SampledAgent(record_smoothness=L)",
                                   argument="record_smoothness")
            undeclared = [agent.name for agent in private_agents if agent.record_count is None]
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
            smoothness = []
            for agent, layout in zip(problem.agents, problem.layouts, strict=True):
                declared = agent.smoothness
                smoothness.append(declared if declared is not None else
                                  smoothness_of(agent, GradientEvaluator(agent, layout), np.zeros(layout.dim)))
            finite = [v for v in smoothness if math.isfinite(v) and v > 0]
            ready._c = 1.0 / max(finite) if finite else 1.0
        if self._epsilon is not None:
            ready._multiplier = self.calibrate(rounds)
        if self.variant == 2 and self.private and self._rate < 1.0:
            ready._warn_sampled_state(problem, rounds)
        return ready

    def _warn_sampled_state(self, problem: DistributedProblem, rounds: int) -> None:
        """Q-DPSGD-2 with q < 1: the state's sensitivity D_t grows by up to 1 + alpha_t eps L_rec / q per round (module
        docstring; no amplification is claimed), so the noise grows with it: a ``ConvergenceWarning`` with the bound."""
        smoothness = max(agent.record_smoothness for agent in problem.agents if not holds_no_private_data(agent))
        step, eps = self.schedule(), self._averaging
        log_growth = sum(math.log1p(step(t) * eps * smoothness / self._rate) for t in range(1, rounds + 1))
        warnings.warn(f"Q-DPSGD-2 with sampling_rate={self._rate!r} < 1: subsampling is not amplified for the "
                      f"state's release, and it divides the per-round growth of the state's sensitivity D_t by q "
                      f"(1 + alpha_t eps L_rec / q): over {rounds} rounds D_t may grow by a factor of up to "
                      f"10^{log_growth / math.log(10):.1f}, and "
                      "the noise with it. Use sampling_rate=1 (or a smaller step) with variant=2", ConvergenceWarning,
                      stacklevel=4)

    def calibrate(self, rounds: int, *, grid: bool = False, dim: int = 1) -> float:
        """The smallest noise multiplier s whose ``rounds`` releases spend (epsilon, delta) (RDP accountant of
        `release_event`: variant 1's exact Poisson-sampled Gaussian, variant 2's (discrete) Gaussian zCDP).

        ``grid=True`` (variant 1 on the secure path, releases of dimension ``dim``): the same s when the ledger's
        account of those releases, `secure_epsilon` (the PLD of `PoissonSampledDiscreteGaussian`), also spends
        at most epsilon with it, as it does where the PLD is tighter than the RDP bound (0.887 at q = 0.02,
        T = 200, epsilon = 1); else the smallest s for which it does. Both paths then draw the same noise.
        """
        if self._epsilon is None:
            raise PrivacyError("calibration needs epsilon", argument="epsilon")
        seeded = dp_accounting.calibrate_dp_mechanism(
            GridRdpAccountant, lambda s: dp_accounting.SelfComposedDpEvent(self.release_event(s), rounds),
            self._epsilon, self._delta, bracket_interval=dp_accounting.LowerEndpointAndGuess(1e-3, 1.0))
        if not grid or self.variant != 1 or self.secure_epsilon(seeded, rounds, dim) <= self._epsilon:
            return seeded
        upper = 2.0 * seeded
        while self.secure_epsilon(upper, rounds, dim) > self._epsilon:
            upper *= 2.0
        return float(brentq(lambda s: self.secure_epsilon(s, rounds, dim) - self._epsilon, seeded, upper,
                            xtol=1e-6 * seeded))

    def secure_epsilon(self, multiplier: float, rounds: int, dim: int) -> float:
        """The ledger's epsilon at delta of ``rounds`` variant-1 releases of dimension ``dim`` on the secure grid at
        noise multiplier s (`PoissonSampledDiscreteGaussian` on the grid `privcvx.privacy.grid.calibrate` gives the
        clipped sum, sensitivity K): its PLD for a scalar release, its RDP bound for a vector."""
        clip = 1.0 if self._clip is None else self._clip
        on_grid = grid_calibration("gaussian", multiplier * clip, clip, dim)
        release = PoissonSampledDiscreteGaussian(self._rate, on_grid.scale, on_grid.sensitivity, dim)
        distribution = release.privacy_loss_distribution()
        if distribution is not None:
            return float(distribution.self_compose(rounds).get_epsilon_for_delta(self._delta))
        accountant = GridRdpAccountant()
        accountant.compose(release.dp_event(), rounds)
        return float(accountant.get_epsilon(self._delta))

    def release_event(self, multiplier: float) -> dp_accounting.DpEvent:
        """One round's release as a dp-accounting event at noise multiplier s > 0."""
        if self.variant == 1:
            return PoissonSampledGaussian(self._rate, multiplier).dp_event()
        return dp_accounting.ZCDpEvent(rho=0.5 / multiplier ** 2)

    def multiplier_for(self, noise: NoiseSource, rounds: int, dim: int) -> float | None:
        """The noise multiplier an agent drawing from ``noise`` uses: the prepared one, except for a calibrated
        variant 1 on the secure path (`calibrate` with ``grid=True`` for releases of dimension ``dim``)."""
        if self._epsilon is not None and self.variant == 1 and isinstance(noise, SecureNoise):
            return self.calibrate(rounds, grid=True, dim=dim)
        return self._multiplier

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
        self.projection = LocalProblem(agent, self.layout)
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
            # D_t = (keep + alpha eps L_rec / q) D_{t-1} + alpha eps K / B (module docstring), through the
            # projection (l2 survives it; a solver's error is added on a set that is not a box).
            growth = keep + alpha * eps * self.agent.record_smoothness / self.settings._rate
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
