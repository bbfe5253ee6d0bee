"""Algorithm 1 of Ryu & Kim: DP linearized ADMM with several local updates per round (paper 004).

Server (lines 1-9, `ADMMServer`): keeps every agent's last released shared entries and
dual lambda_p, computes the global vector w (line 5) and sends each agent its slice w_p with
the round's rho; it updates the duals (line 8) when the releases arrive.

Agent (lines 11-23, `ADMMAgent`): keeps its own dual, its last local iterate
z_p^{t-1,E+1}, its noise stream and its ledger. Each round it runs E local updates Eq. (9) with
ObjPert Eq. (10) or OutPert Eq. (12), each from the previous one (line 16), releases the average
of the E iterates (line 20) and updates its dual (line 22) exactly as the server does.

Messages: ``start`` sends the agent's initial shared entries (and, when rho="adaptive" needs a
starting value, its L_p: see docs/privacy.md); each round the server sends ``{"w", "rho"}`` to
each agent, and each agent answers ``{"z"}`` (its released shared entries). With server-side
acceleration (`privcvx.acceleration`: ``relaxation``, ``anderson``) the server also sends the dual
``"lam"`` the agent must use, which it computed from released messages alone; with
``rho="adaptive-per-key"`` the message's ``"rho"`` is a vector over the agent's shared entries. The public metrics
(the residuals of Boyd et al., rho) are computed from these messages alone by `ADMMMonitor`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from privcvx.acceleration import Anderson, AndersonMixer, OverRelaxation, as_anderson, as_relaxation
from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm, Coordinator, Monitor
from privcvx.errors import ParameterError, PrivacyError, PrivcvxError, check_int
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import LocalProblem
from privcvx.messages import Message
from privcvx.privacy.accounting import default_accounting_delta
from privcvx.privacy.mechanisms import Budget, Sensitivity
from privcvx.privacy.perturbation import Perturbation
from privcvx.problem import Agent, AgentLayout, DistributedProblem
from privcvx.schedules import PerKeyBalancing, ResidualBalancing, Schedule, as_schedule, checked_value, inverse_sqrt
from privcvx.topology import SERVER, Topology
from privcvx.tuning import SmoothStep, is_smooth, smoothness_of, update_epsilon

#: step_rule's marker for an agent with L_p = 0 and no per-update epsilon (no proximal term).
_NO_PROXIMAL_TERM = object()
#: The history columns of Algorithm 1 (the API contract's, plus rho and eta), in order.
HISTORY_COLUMNS = ("round", "objective", "consensus_residual", "primal_residual", "dual_residual",
                   "max_violation", "noise_magnitude", "epsilon", "rho", "eta", "time_s")
#: The named settings of ``local_updates`` besides a number E.
LOCAL_STEPS = ("exact", "auto")


#: Boyd et al.'s (abs, rel) thresholds of ``result.status`` when ``tol`` is not given (docs/algorithms.md, "Status").
DEFAULT_TOL = (1e-4, 1e-3)


def check_tol(tol: Any) -> tuple[float, float] | None:
    """``tol=(abs, rel)``: two finite numbers >= 0, not both 0 (Boyd et al. Sec. 3.3.1)."""
    if tol is None:
        return None
    try:
        values = tuple(float(v) for v in tol)
    except (TypeError, ValueError):
        raise ParameterError(f"must be a pair (abs, rel), got {tol!r}", argument="tol") from None
    if len(values) != 2:
        raise ParameterError(f"must be a pair (abs, rel), got {tol!r}", argument="tol")
    if any(not math.isfinite(v) or v < 0 for v in values) or values == (0.0, 0.0):
        raise ParameterError(f"must be two finite numbers >= 0, not both 0, got {tol!r}", argument="tol")
    return values


def rho_of(rho: float | np.ndarray, layout: AgentLayout) -> float | np.ndarray:
    """rho on an agent's shared entries: the number itself, or the agent's slice of a per-key vector over w."""
    return rho[layout.shared_global] if np.ndim(rho) else rho


class LinearizedADMM(Algorithm):
    """Algorithm 1 of Ryu & Kim (paper 004) on `Topology.star`.

    Parameters
    ----------
    local_updates:
        E, the local updates Eq. (9) per round; or "exact": the exact consensus-ADMM step (the limit
        E -> infinity of Eq. (9)'s updates, [`LocalProblem.step`][privcvx.localsolve.LocalProblem.step];
        non-private, ``eta`` is not used); or "auto" (the default): "exact" when `exact_step_applies`
        (non-private, every f_p a quadratic CVXPY expression) and ``eta="auto"``, with rho="adaptive" becoming
        `exact_step_penalty` (per-key residual balancing that never freezes); else E = 1, Algorithm 1 as printed
        (always under privacy).
    rho:
        The penalty: a float, a schedule ``t -> rho^t`` (Assumption 5.1(i)), or "adaptive"
        (residual balancing, [`ResidualBalancing`][privcvx.schedules.ResidualBalancing], started at the largest L_p: the
        relative rule [`adaptive`][privcvx.schedules.adaptive] without privacy, the absolute one under privacy and
        with ``local_updates="exact"``, `exact_step_penalty` with "auto"'s exact step; `prepare`).
    eta:
        The proximal step: a float, a schedule ``t -> eta^t``, or "auto": 1/L_p per agent
        (Eq. (25a) under privacy, Eq. (26a) for a nonsmooth f_p; [`privcvx.tuning`][privcvx.tuning]).
    privacy:
        ``None``, ``pc.ObjectivePerturbation(mechanism)`` (Eq. (10)) or ``pc.OutputPerturbation(...)`` (Eq. (12)).
    tol:
        ``(abs, rel)``: stop when both ADMM residuals meet Boyd et al.'s thresholds (Sec. 3.3.1). Without it the
        run goes to its last round, and ``result.status`` is "converged" when the last round meets
        `DEFAULT_TOL`.
    relaxation:
        Over-relaxation alpha in [1, 2) of the server's averaging and dual update (Boyd et al. Sec. 3.4.3;
        [`OverRelaxation`][privcvx.acceleration.OverRelaxation]); 1 is Algorithm 1 as printed.
    anderson:
        ``None``, or a memory m (or [`Anderson`][privcvx.acceleration.Anderson]): safeguarded type-II Anderson
        acceleration of the server's (w, lambda) map.

    Notes
    -----
    ``rho="adaptive-per-key"`` ([`PerKeyBalancing`][privcvx.schedules.PerKeyBalancing]) balances the residuals of each
    shared key on its own. The three accelerations act on the server only, from released messages:
    post-processing, no privacy cost (docs/privacy.md).
    """

    name = "linearized_admm"
    calibrated_to_rounds = False  # a Budget's per-update mechanism (split over T E) is in the prepared repr
    columns = HISTORY_COLUMNS
    diagnostic_columns = {"objective": sum, "max_violation": max, "noise_magnitude": sum, "eta": min}
    objective_columns = ("objective",)

    def __init__(self, local_updates: int | str = "auto", rho: float | Schedule | str = "adaptive",
                 eta: float | Schedule | str = "auto", privacy: Perturbation | None = None,
                 tol: tuple[float, float] | None = None, relaxation: float | OverRelaxation = 1.0,
                 anderson: int | Anderson | None = None) -> None:
        self.local_updates = local_updates
        self.rho = rho
        self.eta = eta
        self.privacy = privacy
        self.tol = tol
        self.relaxation = relaxation
        self.anderson = anderson
        self._relaxation = as_relaxation(relaxation).alpha
        self._anderson = as_anderson(anderson)
        if isinstance(local_updates, str) and local_updates not in LOCAL_STEPS:
            raise ParameterError(f'must be a number E >= 1, "exact" or "auto", got {local_updates!r}',
                                 argument="local_updates")
        self._exact = local_updates == "exact"
        self._local_updates = 1 if isinstance(local_updates, str) else check_int(local_updates,
                                                                                 argument="local_updates")
        self._rho = as_schedule(rho, argument="rho")
        self._eta = None if isinstance(eta, str) and eta == "auto" else as_schedule(eta, argument="eta")
        if privacy is not None and not isinstance(privacy, Perturbation):
            raise PrivacyError("must be pc.ObjectivePerturbation(...) or pc.OutputPerturbation(...)",
                               argument="privacy")
        if self._exact and privacy is not None:
            raise PrivacyError('the exact local step has no privacy analysis (the paper\'s is for the linearized '
                               'step, Eq. (9)): use a number E, or "auto", under privacy', argument="local_updates")
        self._tol = check_tol(tol)

    @property
    def private(self) -> bool:
        return self.privacy is not None

    @property
    def accounting_delta(self) -> float:
        if self.privacy is None:
            return 0.0
        mechanism = self.privacy.mechanism
        return mechanism.delta if isinstance(mechanism, Budget) else default_accounting_delta(mechanism)

    def default_topology(self) -> Topology:
        return Topology.star()

    @property
    def uses_smoothness(self) -> bool:
        """Whether L_p shapes the run: eta="auto" (the step) or rho="adaptive" without a start (rho^1 = max L_p)."""
        return self._eta is None or (isinstance(self._rho, ResidualBalancing) and self._rho.value is None)

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        """Star topology only; under privacy every agent declares its sensitivity, and L_p when it is used.

        eta^t and rho^t shape every release (and OutPert's noise scale), so under privacy they must be
        public: L_p comes from ``pc.Agent(smoothness=...)``, a bound valid for every dataset, never from an
        estimate on the agent's data. A nonsmooth f_p needs no L_p (Eq. (26a)).
        """
        self.require_star(topology)
        if self.privacy is None:
            return
        mechanism = self.privacy.mechanism
        laplace = mechanism.mechanism == "laplace" if isinstance(mechanism, Budget) else mechanism.norm == "l1"
        for agent in problem.agents:
            if self.privacy.needs_gradient_sensitivity() and agent.sensitivity is None:
                raise PrivacyError("privacy is on but this agent declares no gradient sensitivity",
                                   agent=agent.name, argument="sensitivity")
            if self.privacy.kind == "objective" and laplace and isinstance(agent.sensitivity, Sensitivity) \
                    and agent.sensitivity.l1 is None:
                raise PrivacyError("the Laplace mechanism perturbs the gradient and needs its L1 sensitivity "
                                   "(Eq. (18)); this agent declares only l2", agent=agent.name, argument="sensitivity")
            if self.uses_smoothness and agent.smoothness is None and is_smooth(agent.objective):
                raise PrivacyError(
                    "eta='auto' and rho='adaptive' set the step and the penalty from L_p, which shape every release; "
                    "under privacy L_p must be public: declare pc.Agent(smoothness=L) with a bound valid for every "
                    "dataset of the neighbouring relation, or pass eta and rho as numbers or schedules",
                    agent=agent.name, argument="smoothness")

    def prepare(self, problem: DistributedProblem, topology: Topology, rounds: int) -> LinearizedADMM:
        """Check the problem; ``local_updates="auto"`` becomes "exact" or 1 (`exact_step_applies`);
        rho="adaptive" becomes `exact_step_penalty` with "auto"'s exact step, the absolute
        [`ResidualBalancing`][privcvx.schedules.ResidualBalancing] under privacy and with ``local_updates="exact"``, and
        [`adaptive`][privcvx.schedules.adaptive] otherwise; a Budget becomes the per-update mechanism of its T * E
        updates."""
        default_rho = isinstance(self.rho, str) and self.rho == "adaptive"
        if self.local_updates == "auto":
            if self._eta is not None or not exact_step_applies(problem, self.privacy):  # a given eta: Eq. (9)
                return self.clone(local_updates=1).prepare(problem, topology, rounds)
            return self.clone(local_updates="exact", **({"rho": exact_step_penalty(problem)} if default_rho
                                                        else {})).prepare(problem, topology, rounds)
        if default_rho and (self.privacy is not None or self._exact):
            # Under privacy rho="adaptive" stays the absolute rule: under ObjPert the relative one of
            # pc.schedules.adaptive() ended 1.1% worse on case118 in each of 5 seeds (docs/tuning.md). So does the
            # yardstick, the explicit exact step (ExactADMM): Boyd et al.'s plain rule, its rounds comparable.
            return self.clone(rho=ResidualBalancing()).prepare(problem, topology, rounds)
        self.check(problem, topology)
        if self.privacy is not None and isinstance(self.privacy.mechanism, Budget):
            return self.clone(privacy=self.privacy.resolve(rounds * self._local_updates))
        return self

    def agent_program(self, agent: Agent, context: AgentContext) -> ADMMAgent:
        return (ExactStepAgent if self._exact else ADMMAgent)(agent, context, self)

    def coordinator(self, problem: DistributedProblem, topology: Topology) -> ADMMServer:
        return ADMMServer(problem, self._rho, self._relaxation, self._anderson)

    def monitor(self, problem: DistributedProblem, topology: Topology) -> ADMMMonitor:
        return ADMMMonitor(problem)

    def converged(self, metrics: Mapping[str, float], w: np.ndarray) -> bool:
        """Boyd et al. Sec. 3.3.1: both residuals below their thresholds, at ``tol`` or `DEFAULT_TOL`."""
        eps_abs, eps_rel = self._tol or DEFAULT_TOL
        root = math.sqrt(metrics["entries"])
        eps_pri = root * eps_abs + eps_rel * metrics["scale_primal"]
        eps_dual = root * eps_abs + eps_rel * metrics["scale_dual"]
        return metrics["primal_residual"] <= eps_pri and metrics["dual_residual"] <= eps_dual

    def summarize(self, reports: list[dict[str, Any]]) -> dict[str, Any]:
        """``info["local_updates"]``: the local step that ran ("exact", or the number E of linearized updates); the
        agents' solver counters are in ``info["local_solve"]`` (`privcvx.solver_warnings.local_solve_info`)."""
        return {"local_updates": "exact" if self._exact else self._local_updates}

    @property
    def per_key(self) -> bool:
        """Whether rho is a vector over the shared entries (``rho="adaptive-per-key"``)."""
        return isinstance(self._rho, PerKeyBalancing)


def exact_step_applies(problem: DistributedProblem, privacy: Perturbation | None) -> bool:
    """Whether ``local_updates="auto"`` runs the exact step: no privacy, and every agent's objective is a convex DCP
    CVXPY expression, built in the driver, that is quadratic (``is_qpwa``: a quadratic of piecewise-affine terms,
    e.g. the squared mismatches of the power-flow zones, Eq. (28)). Then the exact step is one conic solve, about
    the cost of the projection of Eq. (9). A gradient oracle declared next to a convex expression (the power-flow
    zones declare one, for speed) does not matter: the exact step uses the expression. A nonconvex objective
    (``Agent.convex`` False) or an agent built on its host (``pc.problem.AgentSpec``) keeps E = 1."""
    return privacy is None and all(isinstance(agent, Agent) and agent.convex and agent.objective.is_qpwa()
                                   for agent in problem.agents)


#: The key of ``problem.info`` where a builder names its exact-step penalty rule (`exact_step_penalty`).
EXACT_STEP_PENALTY = "exact_step_penalty"


def exact_step_penalty(problem: DistributedProblem | None = None) -> PerKeyBalancing:
    """rho="adaptive" under ``local_updates="auto"`` when the step is exact: residual balancing per shared key
    (`PerKeyBalancing`, tau = 2, mu = 10, started at the largest L_p) that keeps adapting
    (``until=None``). Frozen after 100 rounds, the single or per-key rho leaves ExactADMM short of f - f* <= 1e-3
    within 600 rounds on case145 and case300 (docs/tuning.md, "The training set of grids"). Computed from the
    residuals of released messages only, as every residual-balancing rule.

    A builder whose problem needs another rule names a factory of it in ``problem.info["exact_step_penalty"]``
    (a fresh rule per run; ``powerflow.zonal_problem(objective="cost")``'s: docs/powerflow.md, "Cost OPF")."""
    factory = problem.info.get(EXACT_STEP_PENALTY) if problem is not None and isinstance(problem.info, Mapping) \
        else None
    return factory() if factory is not None else PerKeyBalancing(until=None)


class RoundTerms(NamedTuple):
    """The terms of Eq. (9) that stay the same over a round's E local updates."""

    #: 1/eta^t (an array when eta = inf: `ADMMAgent.inverse_step`).
    inverse: float | np.ndarray
    #: The metric weights m: 1/eta^t, plus rho^t on shared coordinates.
    weights: np.ndarray
    #: rho^t w_p^{t+1} + lambda_p^t, added on the shared coordinates.
    shift: np.ndarray
    #: The release sensitivity, when it does not depend on the iterate (None otherwise, or without privacy).
    sensitivity: Sensitivity | None


class ADMMAgent(AgentProgram):
    """Agent p of Algorithm 1 (lines 11-23), with its private data, noise stream and ledger."""

    def __init__(self, agent: Agent, context: AgentContext, settings: LinearizedADMM) -> None:
        self.agent = agent
        self.context = context
        self.layout: AgentLayout = context.layout
        self.privacy = settings.privacy
        self.local_updates = settings._local_updates
        self.eta = settings._eta
        self.needs_smoothness_hint = isinstance(settings._rho, ResidualBalancing) and settings._rho.value is None
        self.private = settings.privacy is not None
        self.projection = LocalProblem(agent, self.layout)
        self.evaluator = GradientEvaluator(agent, self.layout)
        self.mask = self.layout.shared_mask
        self.all_shared = np.array_equal(self.layout.shared_local, np.arange(self.layout.dim))
        declared = agent.sensitivity
        self.sensitivity_at_z = callable(declared) and not isinstance(declared, Sensitivity)  # e.g. Eq. (31)
        # Line 13: z_p^{0,E+1} = z_p^1, the feasible point of W_p closest to the origin.
        self.z = self.projection.project(np.zeros(self.layout.dim), np.ones(self.layout.dim))
        self.lam = np.zeros(self.layout.shared_local.size)
        self.released = self.z.copy()
        self.declared_smoothness = agent.smoothness
        self._step: Schedule | None = None
        self._terms: RoundTerms | None = None
        self._metric: tuple[tuple[float, float], tuple[float | np.ndarray, np.ndarray]] | None = None
        self._last = {"noise_magnitude": 0.0, "eta": math.nan}

    @property
    def smoothness(self) -> float:
        """L_p: declared (``pc.Agent(smoothness=...)``), else [`smoothness_of`][privcvx.tuning.smoothness_of] at z_p^1
        (nan for a nonsmooth f_p, 0 for an affine one)."""
        if self.declared_smoothness is None:
            if self.private and is_smooth(self.agent.objective):  # LinearizedADMM.check refuses this run
                raise PrivacyError("L_p would be estimated from private data", agent=self.layout.name,
                                   argument="smoothness")
            self.declared_smoothness = smoothness_of(self.agent, self.evaluator, self.z)
        return self.declared_smoothness

    def step_rule(self) -> Schedule | None:
        """eta="auto": 1/L_p (no privacy), Eq. (25a) under privacy, Eq. (26a) when f_p is nonsmooth.

        ``None`` when L_p = 0 (an affine or constant f_p) and there is no per-update epsilon: the linearization
        is exact, no proximal term is needed, and `inverse_step` weights the update by rho alone.
        """
        if self._step is None:
            lipschitz = self.smoothness
            epsilon = update_epsilon(self.privacy.mechanism if self.privacy is not None else None)
            if not math.isfinite(lipschitz) or (lipschitz <= 0 and math.isinf(epsilon)):
                self._step = inverse_sqrt() if not math.isfinite(lipschitz) else _NO_PROXIMAL_TERM
            else:
                self._step = SmoothStep(lipschitz, epsilon)
        return None if self._step is _NO_PROXIMAL_TERM else self._step

    def inverse_step(self, eta: float, rho: float) -> float | np.ndarray:
        """1/eta in Eq. (9); for eta = inf (L_p = 0) it is 0 on shared coordinates, whose step the penalty rho
        bounds, and rho on private ones (an affine f_p over an unbounded private set has no minimizer)."""
        return rho * (1.0 - self.mask) if math.isinf(eta) else 1.0 / eta

    def start(self) -> list[Message]:
        payload: dict[str, Any] = {"z": self.z[self.layout.shared_local]}
        if self.needs_smoothness_hint:  # rho="adaptive" starts at max_p L_p: public (declared) under privacy
            payload["smoothness"] = self.smoothness
        return [self.context.message(0, payload, receiver=SERVER)]

    def penalties(self, rho: float | np.ndarray) -> tuple[float | np.ndarray, float]:
        """rho on the local vector (0 on private coordinates) and a scalar rho for private coordinates (the
        largest entry of a per-key rho)."""
        if np.ndim(rho) == 0:
            return rho * self.mask, rho
        shared = np.zeros(self.layout.dim)
        shared[self.layout.shared_local] = rho
        return shared, float(np.max(rho))

    def local_update(self, z: np.ndarray, w_p: np.ndarray, rho: float | np.ndarray, eta: float,
                     warm_start: bool = False) -> tuple[np.ndarray, float]:
        """One local update, Eq. (9) with ObjPert Eq. (10) or OutPert Eq. (12); returns (z^{t,e+1}, sum|xi|).

        ``rho`` is a number, or a vector over the shared entries (``rho="adaptive-per-key"``). Within
        `step` the round's terms are computed once (`_round_terms`); a subclass may replace this
        method (ExactADMM's exact step does)."""
        terms = self._terms if self._terms is not None else self._round_terms(w_p, rho, eta)
        return self._update(z, terms, warm_start)

    def _round_terms(self, w_p: np.ndarray, rho: float | np.ndarray, eta: float) -> RoundTerms:
        """The terms of Eq. (9) for w_p, rho and eta (computed once per round; 1/eta and the weights are kept while a
        scalar rho and eta stay the same, as with a fixed rho and eta="auto" without privacy)."""
        key = (rho, eta) if isinstance(rho, float) else None
        if key is not None and self._metric is not None and self._metric[0] == key:
            inverse, weights = self._metric[1]
        else:
            shared_rho, private_rho = self.penalties(rho)
            inverse = self.inverse_step(eta, private_rho)
            weights = inverse + shared_rho
            weights.flags.writeable = False  # kept for the next rounds: read-only
            self._metric = None if key is None else (key, (inverse, weights))
        sensitivity = None
        if self.privacy is not None and not self.sensitivity_at_z:
            sensitivity = self._release_sensitivity(z=None, weights=weights)
        return RoundTerms(inverse, weights, rho * w_p + self.lam, sensitivity)

    def _release_sensitivity(self, z: np.ndarray | None, weights: np.ndarray) -> Sensitivity:
        """The sensitivity of what a local update releases (a declared callable is evaluated at z)."""
        needed = self.privacy.needs_gradient_sensitivity()
        return self.privacy.release_sensitivity(
            self.privacy.gradient_sensitivity(self.agent, None if z is None else self.layout.split(z))
            if needed else None, weights, self.projection.kind != "conic", self.projection.error_bound,
            agent=self.layout.name)

    def _update(self, z: np.ndarray, terms: RoundTerms, warm_start: bool) -> tuple[np.ndarray, float]:
        """`local_update` with the round's terms (`_round_terms`) computed once."""
        inverse, weights, shift, sensitivity = terms
        gradient = self.evaluator.gradient(z)
        # a non-finite entry makes g.g non-finite; only then (or if g.g overflows) is every entry checked
        if not math.isfinite(gradient @ gradient) and not np.isfinite(gradient).all():
            raise PrivcvxError("the gradient is not finite at the current iterate (check the data, eta and rho)",
                               agent=self.layout.name, argument="gradient")
        magnitude = 0.0
        if self.privacy is not None:
            if sensitivity is None:
                sensitivity = self._release_sensitivity(z, weights)
            if self.privacy.kind == "objective":  # the noisy gradient is released; the projection post-processes it
                gradient = self.context.release(gradient, self.privacy.mechanism, sensitivity, subtract=True,
                                                tags={"release": "gradient"})
                magnitude = self.context.last_release.magnitude
        linear = z * inverse  # Eq. (9)'s point, computed in one array (in place: the same operations)
        linear -= gradient
        if self.all_shared:
            linear += shift
        else:
            linear[self.layout.shared_local] += shift
        linear /= weights
        z_next = self.projection.project(linear, weights, warm_start)
        if self.privacy is not None and self.privacy.kind == "output":
            z_next = self.context.release(z_next, self.privacy.mechanism, sensitivity, tags={"release": "output"})
            magnitude = self.context.last_release.magnitude
        return z_next, magnitude

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        """Lines 15-22: E local updates from the last iterate, release the average, update the dual."""
        (message,) = inbox
        w_p, rho = message["w"], message["rho"]
        rho = float(rho) if rho.ndim == 0 else np.asarray(rho, dtype=float)  # a payload holds arrays
        if "lam" in message.payload:  # server-side acceleration: the server's dual is the one to use
            self.lam = np.asarray(message["lam"], dtype=float)
        rule = self.eta if self.eta is not None else self.step_rule()
        eta = math.inf if rule is None else checked_value(rule, t, argument="eta")
        z = self.z
        total = np.zeros(self.layout.dim)
        noise = 0.0
        self._terms = self._round_terms(w_p, rho, eta)  # this round's w_p, rho and eta: read by local_update
        try:
            for e in range(self.local_updates):
                z, magnitude = self.local_update(z, w_p, rho, eta, warm_start=e > 0)
                total += z
                noise += magnitude
        finally:
            self._terms = None
        self.z = z
        self.released = total / self.local_updates
        shared = self.released[self.layout.shared_local]
        self.lam = self.lam + rho * (w_p - shared)
        self._last = {"noise_magnitude": noise, "eta": 1.0 / self.penalties(rho)[1] if math.isinf(eta) else eta}
        return [self.context.message(t, {"z": shared}, receiver=SERVER)]

    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        """f_p and the W_p violation at the release, Eq. (29)'s sum |xi| and the step: from private data."""
        return {"objective": self.evaluator.value(self.released),
                "max_violation": self.evaluator.violation(self.released), **self._last}

    def output(self, released_only: bool = False) -> np.ndarray:
        """The last release z_p^{t+1}: the whole local vector, or only its shared entries (what was sent)."""
        return self.released[self.layout.shared_local].copy() if released_only else self.released.copy()

    def report(self) -> dict[str, Any]:
        """The local solves' report (``result.info["local_solve"]``): the kind, strategy and number of solves; the
        other counters depend on the private data and are kept only in runs that keep diagnostics."""
        return {"local_solve": self.projection.report(self.context.diagnostics)}

    def state_dict(self) -> dict[str, Any]:
        return {"z": self.z, "lam": self.lam, "released": self.released}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.z, self.lam, self.released = state["z"], state["lam"], state["released"]


class ConsensusDuals:
    """The duals lambda_p of line 8 and the consensus-ADMM residuals (Boyd et al. Secs. 3.3, 7.1).

    The server and the monitor both keep one: the server to run the method, the monitor to
    compute the public metrics from the messages alone.
    """

    def __init__(self, layouts: list[AgentLayout]) -> None:
        self.layouts = layouts
        self.lam = [np.zeros(layout.shared_local.size) for layout in layouts]
        #: Full consensus: every agent holds every entry of w, in w's order (A_p = I). The agents' vectors are then
        #: stacked as the rows of one array, and each operation runs once instead of once per agent.
        size = layouts[0].shared_global.size if layouts else 0
        self.full = all(np.array_equal(layout.shared_global, np.arange(size)) for layout in layouts)
        self._rows: tuple[list[np.ndarray], np.ndarray, list[np.ndarray], np.ndarray] | None = None

    def stacked(self, released: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Full consensus: the releases and the duals as rows. Those of the last line 8 if it saw these releases and
        no dual was replaced since (``lam`` holds the rows of that array), else stacked anew."""
        if self._rows is not None:
            seen, stacked, rows, lam = self._rows
            if len(rows) == len(self.lam) and all(a is b for a, b in zip(rows, self.lam, strict=True)):
                return (stacked if seen is released else np.array(released)), lam
        return np.array(released), np.array(self.lam)  # np.stack's rows (equal shapes), without its wrapper

    def update(self, w: np.ndarray, w_previous: np.ndarray, released: list[np.ndarray], rho: float | np.ndarray,
               used: list[np.ndarray] | None = None, residuals: bool = True) -> dict[str, float]:
        """Line 8 for every agent; returns the residuals of the round (``residuals=False``: line 8 alone, and {}).

        ``rho`` is a number or a vector over the entries of w (``rho="adaptive-per-key"``). ``used``: the
        vector each agent was sent in place of A_p w, if it differs (over-relaxation, Boyd et al.
        Sec. 3.4.3); line 8 uses it. Primal: r = ||A w - z|| over every agent's shared entries. Dual:
        s = ||rho A (w^{t+1} - w^t)||, the change of the global vector seen by every copy. Their relative
        scales are max(||A w||, ||z||) and ||lambda|| (all duals stacked).
        """
        if self.full:  # the same numbers as the loop below, bitwise (_rows_total, _repeated)
            stacked, lam = self.stacked(released)
            gap = w - stacked
            lam = lam + rho * (gap if used is None else np.stack(used) - stacked)
            self.lam = list(lam)
            self._rows = (released, stacked, list(self.lam), lam)
            if not residuals:
                return {}
            dual_sq = self._repeated(self._change_sq(w, w_previous, rho))
            return {**self._residuals(self._rows_total(gap), dual_sq, rho),
                    **self._scales(self._rows_total(stacked), self._repeated(float((w * w).sum())),
                                   self._rows_total(lam))}
        primal_sq = z_sq = w_sq = dual_sq = lam_sq = 0.0
        for p, (layout, z_new) in enumerate(zip(self.layouts, released, strict=True)):
            w_p = w[layout.shared_global]
            rho_p = rho_of(rho, layout)
            gap = w_p - z_new
            self.lam[p] = lam_p = self.lam[p] + rho_p * (gap if used is None else used[p] - z_new)
            if residuals:
                # (x * x).sum() is np.sum(x ** 2) (the same pairwise sum) without np.sum's wrapper
                primal_sq += float((gap * gap).sum())
                z_sq += float((z_new * z_new).sum())
                w_sq += float((w_p * w_p).sum())
                dual_sq += self._change_sq(w_p, w_previous[layout.shared_global], rho_p)
                lam_sq += float((lam_p * lam_p).sum())
        return {**self._residuals(primal_sq, dual_sq, rho), **self._scales(z_sq, w_sq, lam_sq)} if residuals else {}

    @staticmethod
    def _change_sq(w_p: np.ndarray, w_previous_p: np.ndarray, rho_p: float | np.ndarray) -> float:
        """||A_p (w^{t+1} - w^t)||^2 for one agent (times rho_p entrywise for a vector rho)."""
        change = w_p - w_previous_p
        if np.ndim(rho_p):
            change = rho_p * change
        return float((change * change).sum())

    def _rows_total(self, rows: np.ndarray) -> float:
        """Under full consensus, the agents' sums of squares (one row each) added in agent order, as the loop over
        the agents adds them; the sum of a row is the 1-d pairwise sum of that row, bitwise."""
        return self._repeated(np.add.reduce(rows * rows, axis=1).tolist())

    def _repeated(self, terms: float | list[float]) -> float:
        """The terms added one by one from 0 (a number: once per agent, the same for every agent)."""
        total = 0.0
        for term in terms if isinstance(terms, list) else [terms] * len(self.layouts):
            total += term
        return total

    def _residuals(self, primal_sq: float, dual_sq: float, rho: float | np.ndarray) -> dict[str, float]:
        return {"primal_residual": math.sqrt(primal_sq),
                "dual_residual": math.sqrt(dual_sq) if np.ndim(rho) else rho * math.sqrt(dual_sq)}

    def _scales(self, z_sq: float, w_sq: float, lam_sq: float) -> dict[str, float]:
        return {"scale_primal": math.sqrt(max(z_sq, w_sq)), "scale_dual": math.sqrt(lam_sq),
                "entries": float(sum(layout.shared_local.size for layout in self.layouts))}

    def entry_residuals(self, w: np.ndarray, w_previous: np.ndarray,
                        released: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Per entry k of w: the squared primal residual sum_p (w_k - z_pk)^2 over its copies, and the squared
        change of its copies, multiplicity_k (w_k^{t+1} - w_k^t)^2 (residual balancing per key)."""
        if self.full and w.size > 1:  # the loop below with the agents as rows, added in agent order from 0 (bitwise
            # the same; a reduction over one column would be numpy's pairwise sum)
            gap = w - self.stacked(released)[0]
            change = w - w_previous
            return (np.add.reduce(gap ** 2, axis=0, initial=0.0),
                    np.add.reduce(np.repeat((change ** 2)[np.newaxis], len(gap), axis=0), axis=0, initial=0.0))
        primal_sq, change_sq = np.zeros(w.size), np.zeros(w.size)
        for layout, z_new in zip(self.layouts, released, strict=True):
            np.add.at(primal_sq, layout.shared_global, (w[layout.shared_global] - z_new) ** 2)
            np.add.at(change_sq, layout.shared_global, (w - w_previous)[layout.shared_global] ** 2)
        return primal_sq, change_sq


def key_groups(problem: DistributedProblem) -> np.ndarray:
    """The index of its shared key for every entry of w."""
    index = np.zeros(problem.dim, dtype=int)
    for number, key in enumerate(problem.keys):
        offset = problem.key_offsets[key]
        index[offset:offset + int(np.prod(problem.key_shapes[key], dtype=int))] = number
    return index


class ADMMServer(Coordinator):
    """The server of Algorithm 1 (lines 1-9), generalized to shared keys, with optional server-side
    acceleration (over-relaxation, Anderson, per-key rho; [`privcvx.acceleration`][privcvx.acceleration])."""

    def __init__(self, problem: DistributedProblem, rho: Schedule, relaxation: float = 1.0,
                 anderson: Anderson | None = None) -> None:
        self.layouts = problem.layouts
        self.names = problem.names
        self.multiplicity = problem.multiplicity
        self.dim = problem.dim
        self.rho = copy.deepcopy(rho)  # residual balancing adapts the run's own copy
        if isinstance(self.rho, PerKeyBalancing):
            self.rho.index = key_groups(problem) if self.rho.groups == "key" else np.arange(self.dim)
        self.relaxation = relaxation
        self.mixer = None if anderson is None else AndersonMixer(anderson)
        self.used: list[np.ndarray] | None = None  # the relaxed vectors the agents were sent, if relaxed
        self.shared = [np.zeros(layout.shared_local.size) for layout in self.layouts]
        self.duals = ConsensusDuals(self.layouts)
        self.w = np.zeros(self.dim)
        self.w_previous = self.w
        self.rho_used: float | np.ndarray = math.nan

    def start(self) -> list[Message]:
        return []

    def _released(self, inbox: list[Message]) -> tuple[list[np.ndarray], dict[str, Message]]:
        by_sender = {message.sender: message for message in inbox}
        missing = [name for name in self.names if name not in by_sender]
        if missing:
            raise PrivcvxError(f"the server received nothing from {missing}", agent=missing[0], argument="messages")
        return [by_sender[name]["z"] for name in self.names], by_sender

    def _penalty(self, t: int) -> float | np.ndarray:
        """rho^t: a number, or a vector over the entries of w (per-key residual balancing)."""
        if isinstance(self.rho, PerKeyBalancing):
            return self.rho.entries()
        return checked_value(self.rho, t, argument="rho")

    def _average(self, released: list[np.ndarray], rho: float | np.ndarray) -> np.ndarray:
        """Line 5: each entry of w averages (z_p - lambda_p / rho) over its holders."""
        if self.duals.full:  # the agents' terms as rows, added in agent order (np.add.reduce over rows, from 0)
            stacked, lam = self.duals.stacked(released)
            return np.add.reduce(stacked - lam / rho, axis=0, initial=0.0) / self.multiplicity
        total = np.zeros(self.dim)
        for layout, z_p, lam_p in zip(self.layouts, released, self.duals.lam, strict=True):
            # an agent holds each entry once, so += adds exactly as np.add.at would (at a fraction of its cost)
            total[layout.shared_global] += z_p - lam_p / rho_of(rho, layout)
        return total / self.multiplicity

    def _scaled_duals(self, duals: list[np.ndarray], rho: float | np.ndarray) -> np.ndarray:
        return np.concatenate([lam / rho_of(rho, layout)
                               for layout, lam in zip(self.layouts, duals, strict=True)])

    def _accelerate(self, w: np.ndarray, sent: list[np.ndarray], rho: float | np.ndarray) -> np.ndarray:
        """Anderson on x = (w, lambda/rho) -> G(x): the next w; the duals become the mixed ones."""
        if not np.array_equal(rho, self.rho_used):  # the metric changed: the memory no longer applies
            self.mixer.restart()
        point = np.concatenate([self.w, self._scaled_duals(sent, rho)])
        mixed = self.mixer.step(point, np.concatenate([w, self._scaled_duals(self.duals.lam, rho)]))
        offset = self.dim
        for p, layout in enumerate(self.layouts):
            size = layout.shared_local.size
            self.duals.lam[p] = mixed[offset:offset + size] * rho_of(rho, layout)
            offset += size
        return mixed[:self.dim]

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        """Line 8 on the releases of round t - 1 (or the initial points), then line 5 and the broadcast."""
        released, by_sender = self._released(inbox)
        first = np.ndim(self.rho_used) == 0 and math.isnan(self.rho_used)  # the inbox holds the initial points
        sent = list(self.duals.lam)
        if first:
            if isinstance(self.rho, ResidualBalancing):
                finite = [float(m["smoothness"]) for m in by_sender.values() if "smoothness" in m.payload]
                self.rho.start(max((v for v in finite if math.isfinite(v) and v > 0), default=1.0))
        else:
            per_key = isinstance(self.rho, PerKeyBalancing)  # reads entry_residuals
            residuals = self.duals.update(self.w, self.w_previous, released, self.rho_used, self.used,
                                          residuals=isinstance(self.rho, ResidualBalancing) and not per_key)
            if per_key:
                self.rho.observe_groups(*self.duals.entry_residuals(self.w, self.w_previous, released))
            elif isinstance(self.rho, ResidualBalancing):
                self.rho.observe(residuals)
        self.shared = released
        rho = self._penalty(t)
        w = self._average(released, rho)
        if self.mixer is not None and not first:
            w = self._accelerate(w, sent, rho)
        self.rho_used = rho
        self.w_previous, self.w = self.w, w
        if self.relaxation != 1.0:  # Boyd et al. Sec. 3.4.3: A_p w -> alpha A_p w + (1 - alpha) z_p, in the
            # agent's step and in line 8 (w is ADMM's first block here: the server averages before the agents step)
            self.used = [self.relaxation * self.w[layout.shared_global] + (1.0 - self.relaxation) * z_p
                         for layout, z_p in zip(self.layouts, released, strict=True)]
        messages = []
        if self.duals.full:  # every agent's slice A_p w (and of a per-key rho) is all of it: the messages share it,
            # read-only
            self.w.flags.writeable = False
            if np.ndim(rho):
                rho.flags.writeable = False
        for p, (name, layout) in enumerate(zip(self.names, self.layouts, strict=True)):
            w_p = self.w if self.duals.full else self.w[layout.shared_global]
            payload = {"w": w_p if self.used is None else self.used[p],
                       "rho": rho if self.duals.full else rho_of(rho, layout)}
            if self.used is not None:  # the unrelaxed slice, for the public metrics and result.w
                payload["average"] = w_p
            if self.mixer is not None:  # the agent's dual is the server's, mixed from released messages
                payload["lam"] = self.duals.lam[p]
            messages.append(Message(round=t, sender=SERVER, receiver=name, payload=payload))
        return messages

    def state_dict(self) -> dict[str, Any]:
        return {"shared": self.shared, "lam": self.duals.lam, "w": self.w, "w_previous": self.w_previous,
                "rho_used": self.rho_used, "used": self.used,
                "rho": self.rho.state_dict() if isinstance(self.rho, ResidualBalancing) else None,
                "anderson": None if self.mixer is None else self.mixer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.shared, self.duals.lam = state["shared"], state["lam"]
        self.w, self.w_previous, self.rho_used = state["w"], state["w_previous"], state["rho_used"]
        self.used = state["used"]
        if isinstance(self.rho, ResidualBalancing):
            self.rho.load_state_dict(state["rho"])
        if self.mixer is not None:
            self.mixer.load_state_dict(state["anderson"])


class ADMMMonitor(Monitor):
    """The public metrics of Algorithm 1 from its messages: residuals, rho and the global vector w.

    The server's messages carry w_p and rho^t, the agents' carry their released shared entries;
    the monitor replays line 8 on them to get the duals, hence the residuals' scales. When the server
    accelerates, its messages also carry the duals lambda_p^{t-1} the agents use, and the monitor starts
    line 8 from those; when it over-relaxes, they carry the relaxed vector the agent uses (``"w"``, which
    line 8 uses) and the slice of w itself (``"average"``). A per-key rho is reported by its mean over the
    entries of w.
    The scales are computed in every run: ``result.status`` reads them (`LinearizedADMM.converged`).
    """

    def __init__(self, problem: DistributedProblem) -> None:
        self.released: list[np.ndarray] | None = None
        self.layouts = problem.layouts
        self.names = problem.names
        self.duals = ConsensusDuals(self.layouts)
        self.w = np.zeros(problem.dim)

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        if t == 0:  # the agents' initial points: no round yet
            return {}
        downlink = {m.receiver: m for m in messages if m.sender == SERVER}
        uplink = {m.sender: m for m in messages if m.receiver == SERVER}
        w_previous, w = self.w, self.w.copy()
        vector = np.ndim(downlink[self.names[0]]["rho"]) > 0
        rho = np.zeros(w.size) if vector else float(downlink[self.names[0]]["rho"])
        relaxed = "average" in downlink[self.names[0]].payload
        accelerated = "lam" in downlink[self.names[0]].payload
        if self.duals.full and not accelerated:  # each agent's slice is all of w: the last one written is kept
            w[:] = downlink[self.names[-1]]["average" if relaxed else "w"]
            if vector:
                rho[:] = downlink[self.names[-1]]["rho"]
        else:
            for p, (name, layout) in enumerate(zip(self.names, self.layouts, strict=True)):
                w[layout.shared_global] = downlink[name]["average" if relaxed else "w"]
                if vector:
                    rho[layout.shared_global] = downlink[name]["rho"]
                if "lam" in downlink[name].payload:
                    self.duals.lam[p] = downlink[name]["lam"]
        self.w = w
        released = self.released = [uplink[name]["z"] for name in self.names]
        residuals = self.duals.update(w, w_previous, released, rho,
                                      [downlink[name]["w"] for name in self.names] if relaxed else None)
        return {**residuals, "consensus_residual": residuals["primal_residual"],
                "rho": float(np.mean(rho)) if vector else rho}

    def global_vector(self) -> np.ndarray:
        return self.w.copy()

    def releases(self) -> list[np.ndarray] | None:
        return self.released

    def state_dict(self) -> dict[str, Any]:
        return {"lam": self.duals.lam, "w": self.w}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.duals.lam, self.w = state["lam"], state["w"]


class ExactStepAgent(ADMMAgent):
    """Agent p of Algorithm 1 with the exact consensus-ADMM step in place of the E updates Eq. (9):
    ``LinearizedADMM(local_updates="exact")`` and ``ExactADMM`` (non-private).

    The step is argmin_{z in W_p} f_p(z) + <q, z_s> + (rho/2) ||z_s||^2 with q = -(lambda_p + rho w_p), the consensus
    ADMM step of Boyd et al. (Foundations and Trends in ML, 2011), Eq. (7.6): Eq. (9) of Ryu & Kim with f_p in place
    of its linearization and no proximal term, solved by the local-solve layer (a vector rho under ``per_key``)."""

    def __init__(self, agent: Agent, context: AgentContext, settings: LinearizedADMM) -> None:
        super().__init__(agent, context, settings)
        self.exact = LocalProblem(agent, self.layout, objective=True, penalized=self.layout.shared_local)

    def step_rule(self) -> None:
        """No proximal term (eta = inf): the history's eta is 1/rho, as for an affine f_p (`ADMMAgent.step`);
        L_p is not estimated for the step."""
        return None

    def local_update(self, z: np.ndarray, w_p: np.ndarray, rho: float | np.ndarray, eta: float,
                     warm_start: bool = True) -> tuple[np.ndarray, float]:
        """The exact step (no linearization, no proximal term, no noise); ``z`` and ``eta`` are not used. A QP step
        on OSQP starts from the last round's answer (non-private: the exact step has no privacy analysis, so nothing
        relies on it being a function of this round's data alone; `state_dict` keeps the point)."""
        return self.exact.step(-(self.lam + rho * w_p), rho, warm_start), 0.0

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        """`ADMMAgent.step` with its one update the exact step: no terms of Eq. (9) (`_round_terms`), no average of
        E iterates; the release, the dual (line 22) and the history's eta (1/rho, or a given eta, computed only when
        the run keeps diagnostics) are the same."""
        (message,) = inbox
        w_p, rho = message["w"], message["rho"]
        rho = float(rho) if rho.ndim == 0 else np.asarray(rho, dtype=float)  # a payload holds arrays
        if "lam" in message.payload:  # server-side acceleration: the server's dual is the one to use
            self.lam = np.asarray(message["lam"], dtype=float)
        self.z = self.released = self.local_update(self.z, w_p, rho, math.inf)[0]
        shared = self.released[self.layout.shared_local]
        self.lam = self.lam + rho * (w_p - shared)
        if self.context.diagnostics:  # the history's eta (the step does not use it), read by `diagnostics` alone
            eta = math.inf if self.eta is None else checked_value(self.eta, t, argument="eta")
            self._last = {"noise_magnitude": 0.0, "eta": 1.0 / (rho if isinstance(rho, float) else float(rho.max()))
                          if math.isinf(eta) else eta}
        return [self.context.message(t, {"z": shared}, receiver=SERVER)]

    def report(self) -> dict[str, Any]:
        return {"local_solve": self.exact.report(self.context.diagnostics)}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "local_solve": self.exact.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.exact.load_state_dict(state["local_solve"])
