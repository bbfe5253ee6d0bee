"""A compiled local problem: the parameters that change each round, one strategy chain, one statistics object.

Every local step of privcvx's algorithms is (LS) of [`strategies`][privcvx.localsolve.strategies],

    z = argmin_{z in W_p}  f_p(z) + 1/2 sum_{i in pen} w_i z_i^2 - sum_{i in pen} b_i z_i,

with only w (when rho^t or eta^t change) and b (every step) changing between steps:

* the projection of Eq. (9) of Ryu & Kim (``f_p = 0``, `LocalProblem.project`), used by Algorithm 1's linearized
  updates, DP gradient descent, Q-DPSGD, the randomized ADMM and DGD;
* the exact consensus-ADMM step, Eq. (7.6) of Boyd et al. (`LocalProblem.step`, ``ExactADMM``);
* the local step (12) of the decentralized ADMM of Ding's thesis (PR-, PP-, IPP-ADMM);
* the proximal step (12) of Xiao, Ye & Devadas (``RandomizedADMM(update="exact")``).

The error policy is the same for all: the chain is the strategies that accept the problem, in `STRATEGIES` order;
a strategy that fails passes the same (w, b) to the next (so noise is never redrawn), counted as a fallback;
retries within a strategy are counted; an answer is accurate when it meets `STANDARD_TOLERANCE`, accepted and
counted as inaccurate when it meets only `ACCEPTABLE_RESIDUAL`; when every strategy failed, `SolverError` names
the agent and every solver's status (the run loop turns it into ``RunFailed`` naming the round, the history
kept). A problem no strategy accepts raises `UnsupportedError` naming the agent and its cones.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import cvxpy as cp
import numpy as np
from cvxpy.constraints import Equality, Inequality

from privcvx.errors import SolverError, UnsupportedError, check_scalar
from privcvx.localsolve.certificate import CERTIFIED_ERROR, Certifier, certifier_for
from privcvx.localsolve.cvxpy_adapter import ConicData, compile_local, cone_names, needs_integer_solver
from privcvx.localsolve.strategies import STRATEGIES, Strategy, StrategyFailure
from privcvx.problem import Agent, AgentLayout, agent_vector


@dataclass
class SolveStats:
    """One agent's counters: solves, fallbacks to the next strategy, retries within one, inaccurate answers,
    refactorizations (weights changed), solver seconds, and solves per strategy."""

    solves: int = 0
    fallbacks: int = 0
    retries: int = 0
    inaccurate: int = 0
    refactors: int = 0
    seconds: float = 0.0
    strategies: dict[str, int] = field(default_factory=dict)


def box_bounds(agent: Agent, layout: AgentLayout) -> tuple[np.ndarray, np.ndarray] | None:
    """Lower and upper bounds of z if every constraint is a constant bound on a whole variable."""
    offsets = {v.id: (o, v) for v, o in zip(agent.variables, layout.offsets, strict=True)}
    lower = np.full(layout.dim, -np.inf)
    upper = np.full(layout.dim, np.inf)
    for constraint in agent.constraints:
        if not isinstance(constraint, (Inequality, Equality)):
            return None
        lhs, rhs = constraint.args
        for var_side, const_side, is_upper in ((lhs, rhs, True), (rhs, lhs, False)):
            if isinstance(var_side, cp.Variable) and var_side.id in offsets and not const_side.variables() \
                    and not const_side.parameters():
                o, var = offsets[var_side.id]
                bound = np.broadcast_to(np.asarray(const_side.value, dtype=float), var.shape)
                bound = bound.reshape(-1, order="F")
                sl = slice(o, o + var.size)
                if is_upper or isinstance(constraint, Equality):
                    upper[sl] = np.minimum(upper[sl], bound)
                if not is_upper or isinstance(constraint, Equality):
                    lower[sl] = np.maximum(lower[sl], bound)
                break
        else:
            return None
    return lower, upper


def _has_attributes(var: cp.Variable) -> bool:
    """Whether a variable carries attributes (nonneg, bounds, ...) that CVXPY turns into constraints."""
    return any(value not in (None, False) for value in var.attributes.values())


def _closed_form_bounds(agent: Agent, layout: AgentLayout) -> tuple[np.ndarray, np.ndarray] | None:
    """The box of W_p when the projection onto it is np.clip (no variable attributes), else None."""
    if not agent.constraints or any(_has_attributes(v) for v in agent.variables):
        return None
    return box_bounds(agent, layout)


def set_kind(agent: Agent, layout: AgentLayout, bounds: tuple | None | bool = False) -> str:
    """The kind of W_p for the privacy analysis (``privacy.sensitivity.SET_KINDS``): "free" (R^n), "box" (constant
    bounds on whole variables, projected by np.clip) or "conic" (any other set, projected by a solver).
    ``bounds``: `_closed_form_bounds` when already computed."""
    if not agent.constraints and not any(_has_attributes(v) for v in agent.variables):
        return "free"
    if bounds is False:
        bounds = _closed_form_bounds(agent, layout)
    return "conic" if bounds is None else "box"


class LocalProblem:
    """One agent's local problem (LS), compiled once.

    ``objective``: include f_p (a step) or not (a projection); ``penalized``: the positions in z_p of the penalty's
    coordinates (``None``: all of them). ``kind`` is the set's kind for the privacy analysis ("free", "box",
    "conic"; "exact" for a step with f_p), ``region`` W_p's kind for a step too; ``strategy`` the first strategy of
    the chain.
    """

    def __init__(self, agent: Agent, layout: AgentLayout, *, objective: bool = False,
                 penalized: np.ndarray | None = None, certified: bool | float = False) -> None:
        self.agent, self.layout = agent, layout
        self.agent_name = layout.name
        self.dim = layout.dim
        self.has_objective = objective
        self.penalized = np.arange(layout.dim) if penalized is None else np.asarray(penalized, dtype=int)
        if not objective and self.penalized.size != layout.dim:
            raise ValueError("a projection penalizes every coordinate")
        self.bounds = _closed_form_bounds(agent, layout)
        self.region = set_kind(agent, layout, self.bounds)
        self.kind = "exact" if objective else self.region
        self.stats = SolveStats()
        #: The certified l2 distance (over the penalized entries) of the last answer of the chain to the exact step,
        #: and the largest so far (0 for closed forms; nan when uncertified). Diagnostics: they depend on the data.
        self.certificate = self.largest_certificate = 0.0
        self.z = agent_vector(agent)
        self._problem: cp.Problem | None = None
        self._solvers: list[str] | None = None
        closed = not objective and self.kind in ("free", "box")
        self.data: ConicData | None = None if closed else compile_local(
            agent.objective if objective else 0.0, agent.constraints, agent.variables, self.z)
        self.certifier: Certifier | None = None if closed else certifier_for(self.data, self.penalized)
        self.chain: list[Strategy] = []
        # a closed form never fails: it is the whole chain; else, when ``certified`` (a private release depends on the
        # answers), the strategies that accept the problem and certify their answers (`error_bound`), each answer
        # certified and enforced (`enforcing`), or, when none certifies or none is asked, all that accept it
        accepting = [STRATEGIES[0]] if closed else [kind for kind in STRATEGIES if kind.accepts(self)]
        #: The declared e of the answers (``certified=True``: `certificate.CERTIFIED_ERROR`; a number: that one).
        self.certified_error = CERTIFIED_ERROR if certified is True else check_scalar(
            certified, argument="certified", kind=float, low=0.0, closed="right", agent=self.agent_name) \
            if certified else math.nan
        self.certified = bool(certified) and any(kind.certifies(self) for kind in accepting)
        self.enforcing = self.certified and self.certifier is not None
        self._candidates = [kind for kind in accepting if kind.certifies(self)] if self.certified else accepting
        if not self._candidates:
            raise UnsupportedError(f"no local-solve strategy accepts the cones {cone_names(self.cvxpy_problem())} "
                                   "(no installed conic solver handles them)", algorithm="localsolve",
                                   feature=f"the cones {', '.join(cone_names(self.cvxpy_problem()))}",
                                   agent=self.agent_name, argument="constraints")
        self.chain.append(self._candidates[0](self))

    # ---- CVXPY's public path (the "cvxpy" strategy, and the diagnostics) -------------------------------------
    def cvxpy_problem(self) -> cp.Problem:
        """(LS) as one DPP CVXPY problem with Parameters ``root`` = sqrt(w/2) and ``linear`` = b (built once)."""
        if self._problem is None:
            self.root = cp.Parameter(self.penalized.size, nonneg=True, name="penalty_root")
            self.linear = cp.Parameter(self.penalized.size, name="linear_term")
            pen = self.z if self.penalized.size == self.dim else self.z[self.penalized]
            goal = cp.sum_squares(cp.multiply(self.root, pen)) - self.linear @ pen
            self._problem = cp.Problem(cp.Minimize((self.agent.objective if self.has_objective else 0) + goal),
                                       self.agent.constraints)
        return self._problem

    def compilable_solvers(self) -> list[str]:
        """The conic solvers (Clarabel, SCS) CVXPY can compile this problem for (none for a mixed-integer one)."""
        if self._solvers is None:
            problem, self._solvers = self.cvxpy_problem(), []
            for solver in () if needs_integer_solver(problem.constraints) else (cp.CLARABEL, cp.SCS):
                try:
                    problem.get_problem_data(solver)
                except (cp.error.SolverError, cp.error.DCPError, ValueError):
                    continue
                self._solvers.append(solver)
        return self._solvers

    # ---- the steps ---------------------------------------------------------------------------------------
    def project(self, point: np.ndarray, weights: np.ndarray, warm_start: bool = False) -> np.ndarray:
        """argmin over W_p of sum_i weights_i (z_i - point_i)^2: Eq. (9) completed to a square (``f_p`` = 0).

        The weights are scaled by their largest entry (the argmin does not change), as the conic data expects.
        ``warm_start`` lets a first-order solver start from its previous answer (agents do so within a round, so a
        run resumed at a round boundary from a checkpoint repeats every solve exactly)."""
        if self.kind == "free":  # the closed forms, without the chain's bookkeeping (one call per local update)
            self.stats.solves += 1
            return point.copy()
        if self.kind == "box":
            self.stats.solves += 1
            return np.minimum(np.maximum(point, self.bounds[0]), self.bounds[1])
        scaled = weights / weights.max()
        return self._solve(2.0 * scaled, 2.0 * (scaled * point), point, warm_start)

    def step(self, linear: np.ndarray, weight: float | np.ndarray, warm_start: bool = False) -> np.ndarray:
        """argmin over W_p of f_p(z) + <linear, z_pen> + 1/2 sum weight_i z_pen,i^2 (``weight``: a number or a
        vector over the penalized coordinates). ``warm_start``: OSQP starts from its last answer, which
        `state_dict` keeps (every other strategy answers from the weights and the linear term alone)."""
        return self.tilted_step(-np.asarray(linear, dtype=float), weight, warm_start)

    def tilted_step(self, tilt: np.ndarray, weight: float | np.ndarray, warm_start: bool = False) -> np.ndarray:
        """`step` with its linear term given as the float array ``tilt`` = -linear (the exact ADMM step's
        lambda_p + rho w_p, without negating it twice)."""
        if type(weight) is float or (type(weight) is np.ndarray and weight.ndim and weight.dtype == np.float64):
            weights = weight  # as the strategies take them (the usual case: no conversion, no np.ndim dispatch)
        else:
            weights = float(weight) if np.ndim(weight) == 0 else np.asarray(weight, dtype=float)
        return self._solve(weights, tilt, None, warm_start)

    def state_dict(self) -> dict[str, Any]:
        """What the next warm-started solve starts from (`Strategy.warm_state`), for checkpoints."""
        return {"warm": self.chain[0].warm_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict`."""
        self.chain[0].load_warm_state(state["warm"])

    def _solve(self, weights: float | np.ndarray, linear: np.ndarray, point: np.ndarray | None,
               warm_start: bool) -> np.ndarray:
        """The error policy (module docstring): the chain in order, the same (w, b) for every strategy."""
        stats, failures, position = self.stats, [], 0
        start = time.perf_counter()
        try:
            while True:
                strategy = self.chain[position]
                try:
                    z, inaccurate = strategy.solve(weights, linear, point, warm_start, stats)
                    break
                except StrategyFailure as exc:
                    failures.append(f"{strategy.name}: {exc}")
                position += 1
                if position == len(self._candidates):
                    raise SolverError("every local-solve strategy failed: " + "; ".join(failures),
                                      agent=self.agent_name,
                                      argument="objective" if self.has_objective else "constraints")
                if position == len(self.chain):
                    self.chain.append(self._candidates[position](self))
        finally:
            stats.seconds += time.perf_counter() - start
        stats.solves += 1
        self.certificate = strategy.distance
        self.largest_certificate = float(np.maximum(self.largest_certificate, strategy.distance))  # nan stays nan
        stats.fallbacks += position > 0
        stats.inaccurate += inaccurate
        stats.strategies[strategy.name] = stats.strategies.get(strategy.name, 0) + 1
        return z

    # ---- what the privacy analysis and the reports read ----------------------------------------------------
    @property
    def strategy(self) -> str:
        """The name of the strategy that answers first."""
        return self.chain[0].name

    @property
    def error_bound(self) -> float:
        """A bound on ||z_computed - z_exact||_2 over the penalized coordinates, enforced on every answer: 0 for a
        closed form; for a problem built with ``certified=True`` (or a number e), the largest over the chain
        (`certified_error` for a certified solver, `strategies.SMOOTH_TARGET` for L-BFGS-B), since any of
        them may answer; ``inf`` otherwise: answers not certified (not asked, or not certifiable: no conic data, a cone
        other than zero, nonneg, SOC, an auxiliary column on which the set is unbounded, or a quadratic term not
        proven PSD as built (`certificate.certifier_for`); docs/privacy.md), which the private calibrations refuse."""
        if self.kind in ("free", "box"):
            return 0.0
        if not self.certified:
            return math.inf
        return max(self.certified_error if kind.error_bound is None else kind.error_bound for kind in self._candidates)

    def violation(self, z: np.ndarray) -> float:
        """The largest violation of W_p at z (0 when z is in W_p)."""
        if self.kind == "free":
            return 0.0
        if self.bounds is not None:
            lower, upper = self.bounds
            return float(max(np.max(lower - z, initial=0.0), np.max(z - upper, initial=0.0)))
        saved = [v.value for v in self.agent.variables]
        offset = 0
        for var in self.agent.variables:
            var.save_value(z[offset:offset + var.size].reshape(var.shape, order="F"))
            offset += var.size
        worst = max((float(np.max(c.violation(), initial=0.0)) for c in self.agent.constraints), default=0.0)
        for var, value in zip(self.agent.variables, saved, strict=True):
            var.save_value(value)
        return worst

    def report(self, diagnostics: bool) -> dict[str, Any]:
        """``result.info["local_solve"]``'s entry: the kind, the first strategy and the number of solves (public: the
        number of steps); with diagnostics, the other counters (they depend on the private data)."""
        stats = asdict(self.stats)
        public = {"kind": self.kind, "strategy": self.strategy, "solves": stats.pop("solves")}
        return {**public, **stats} if diagnostics else public

