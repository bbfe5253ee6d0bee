"""Algorithm 1 of Ryu & Kim: DP linearized ADMM with several local updates per round (paper 004).

This module holds the method's settings (`LinearizedADMM`): the checks, and `prepare`, which resolves "auto" once.
Server (lines 1-9): `privcvx.algorithms.admm_server.ADMMServer`, which asks a penalty rule
(`privcvx.schedules.PenaltyRule`) for rho^t. Agent (lines 11-23): `privcvx.algorithms.admm_agent.ADMMAgent`.

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
from typing import Any

import numpy as np

from privcvx.acceleration import Anderson, OverRelaxation, as_anderson, as_relaxation
from privcvx.algorithms.admm_agent import ADMMAgent, ExactStepAgent
from privcvx.algorithms.admm_server import ADMMMonitor, ADMMServer
from privcvx.algorithms.base import AgentContext, Algorithm
from privcvx.errors import ParameterError, PrivacyError, check_int
from privcvx.privacy.accounting import default_accounting_delta
from privcvx.privacy.mechanisms import Budget, Sensitivity
from privcvx.privacy.perturbation import Perturbation
from privcvx.problem import Agent, DistributedProblem
from privcvx.schedules import (
    PenaltyRule,
    PerKeyBalancing,
    ResidualBalancing,
    Schedule,
    as_penalty,
    as_schedule,
    meets_tolerance,
)
from privcvx.topology import Topology
from privcvx.tuning import is_smooth

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


class LinearizedADMM(Algorithm):
    """Algorithm 1 of Ryu & Kim (paper 004) on `Topology.star`.

    Parameters
    ----------
    local_updates:
        E, the local updates Eq. (9) per round; or "exact": the exact consensus-ADMM step (the limit
        E -> infinity of Eq. (9)'s updates, [`LocalProblem.step`][privcvx.localsolve.LocalProblem.step];
        non-private, ``eta`` is not used); or "auto" (the default): "exact" when `exact_step_applies`
        (non-private, every f_p a quadratic CVXPY expression) and ``eta="auto"``, with rho="adaptive" becoming
        `exact_step_penalty` (per-key residual balancing, fixed once the run meets `EXACT_STEP_SETTLE`); else E = 1,
        Algorithm 1 as printed (always under privacy).
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

    def __init__(self, local_updates: int | str = "auto", rho: float | Schedule | PenaltyRule | str = "adaptive",
                 eta: float | Schedule | str = "auto", privacy: Perturbation | None = None,
                 tol: tuple[float, float] | None = None, relaxation: float | OverRelaxation = 1.0,
                 anderson: int | Anderson | None = None) -> None:
        self.local_updates, self.rho, self.eta, self.privacy = local_updates, rho, eta, privacy
        self.tol, self.relaxation, self.anderson = tol, relaxation, anderson
        self._relaxation = as_relaxation(relaxation).alpha
        self._anderson = as_anderson(anderson)
        if isinstance(local_updates, str) and local_updates not in LOCAL_STEPS:
            raise ParameterError(f'must be a number E >= 1, "exact" or "auto", got {local_updates!r}',
                                 argument="local_updates")
        self._exact = local_updates == "exact"
        self._local_updates = 1 if isinstance(local_updates, str) else check_int(local_updates,
                                                                                 argument="local_updates")
        self._rho = as_penalty(rho)
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
        return self._eta is None or self._rho.needs_suggestion

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
        """Resolve the settings once, then check the problem: ``local_updates="auto"`` becomes "exact" or 1
        (`exact_step_applies`); rho="adaptive" becomes `exact_step_penalty` with "auto"'s exact step, the absolute
        [`ResidualBalancing`][privcvx.schedules.ResidualBalancing] under privacy and with ``local_updates="exact"``, and
        stays [`adaptive`][privcvx.schedules.adaptive] otherwise; a Budget becomes the per-update mechanism of its
        T * E updates."""
        settings: dict[str, Any] = {}
        auto_exact = self.local_updates == "auto" and self._eta is None and exact_step_applies(problem, self.privacy)
        if self.local_updates == "auto":  # a given eta: Eq. (9)
            settings["local_updates"] = "exact" if auto_exact else 1
        if isinstance(self.rho, str) and self.rho == "adaptive":
            if auto_exact:
                settings["rho"] = exact_step_penalty(problem)
            elif self.privacy is not None or self._exact:
                # Under privacy rho="adaptive" stays the absolute rule: under ObjPert the relative one of
                # pc.schedules.adaptive() ended 1.1% worse on case118 in each of 5 seeds (docs/tuning.md). So does the
                # yardstick, the explicit exact step (ExactADMM): Boyd et al.'s plain rule, its rounds comparable.
                settings["rho"] = ResidualBalancing()
        prepared = self.clone(**settings) if settings else self
        prepared.check(problem, topology)
        if self.privacy is not None and isinstance(self.privacy.mechanism, Budget):
            return prepared.clone(privacy=self.privacy.resolve(rounds * prepared._local_updates))
        return prepared

    def agent_program(self, agent: Agent, context: AgentContext) -> ADMMAgent:
        return (ExactStepAgent if self._exact else ADMMAgent)(agent, context, self)

    def coordinator(self, problem: DistributedProblem, topology: Topology) -> ADMMServer:
        return ADMMServer(problem, self._rho, self._relaxation, self._anderson)

    def monitor(self, problem: DistributedProblem, topology: Topology) -> ADMMMonitor:
        return ADMMMonitor(problem)

    def converged(self, metrics: Mapping[str, float], w: np.ndarray) -> bool:
        """Boyd et al. Sec. 3.3.1: both residuals below their thresholds, at ``tol`` or `DEFAULT_TOL`."""
        return meets_tolerance(metrics, self._tol or DEFAULT_TOL)

    def summarize(self, reports: list[dict[str, Any]]) -> dict[str, Any]:
        """``info["local_updates"]``: the local step that ran ("exact", or the number E of linearized updates); the
        agents' solver counters are in ``info["local_solve"]`` (`privcvx.solver_warnings.local_solve_info`)."""
        return {"local_updates": "exact" if self._exact else self._local_updates}


def exact_step_applies(problem: DistributedProblem, privacy: Perturbation | None) -> bool:
    """Whether ``local_updates="auto"`` runs the exact step: no privacy, and every agent's objective is a convex DCP
    CVXPY expression, built in the driver, that is quadratic (``is_qpwa``: a quadratic of piecewise-affine terms,
    e.g. the squared mismatches of the power-flow zones, Eq. (28)). Then the exact step is one conic solve, about
    the cost of the projection of Eq. (9). A gradient oracle declared next to a convex expression (the power-flow
    zones declare one, for speed) does not matter: the exact step uses the expression. A nonconvex objective
    (``Agent.convex`` False) or an agent built on its host (``pc.problem.AgentSpec``) keeps E = 1."""
    return privacy is None and all(isinstance(agent, Agent) and agent.convex and agent.objective.is_qpwa()
                                   for agent in problem.agents)


#: Boyd et al.'s (abs, rel) thresholds at which `exact_step_penalty` settles: absolute only, sqrt(n) 1e-4 on both
#: residuals. At `DEFAULT_TOL` (relative 1e-3 of ||z|| and ||lambda||) it settled too early on case145 (f* = 0.44): it
#: then missed f - f* <= 1e-3 within 600 rounds (docs/tuning.md, "Iceland").
EXACT_STEP_SETTLE = (1e-4, 0.0)

def exact_step_penalty(problem: DistributedProblem | None = None) -> PenaltyRule:
    """rho="adaptive" under ``local_updates="auto"`` when the step is exact: residual balancing per shared key
    (`PerKeyBalancing`, tau = 2, mu = 10, started at the largest L_p) that keeps adapting (``until=None``) until the
    first round whose residuals meet `EXACT_STEP_SETTLE` (``settle``), and is fixed from then on. Frozen after 100
    rounds, the single or per-key rho leaves ExactADMM short of f - f* <= 1e-3 within 600 rounds on case145 and
    case300 (docs/tuning.md, "The training set of grids"); never settling, it kept reacting to residuals at the level
    of the solver's accuracy, and iceland and case145 left the target they had met (docs/tuning.md, "Iceland").
    Computed from the residuals of released messages only, as every residual-balancing rule.

    A builder whose problem needs another rule names it: ``pc.DistributedProblem(..., penalty_rule=rule)``
    (``powerflow.zonal_problem(objective="cost")``'s: docs/powerflow.md, "Cost OPF"); each run adapts its own copy."""
    rule = problem.penalty_rule if problem is not None else None
    return copy.deepcopy(rule) if rule is not None else PerKeyBalancing(until=None, settle=EXACT_STEP_SETTLE)
