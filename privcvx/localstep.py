"""Local-step construction: Eq. (9) as a weighted Euclidean projection onto W_p.

Completing the square in Eq. (9) (see ``docs/algorithm.md`` for the derivation): with
the metric weights

    m_i = 1/eta^t            on coordinates the agent does not share,
    m_i = 1/eta^t + rho^t    on coordinates it shares,

and the point (computed in numpy)

    a = (z^{t,e}/eta^t - g + S^T (rho^t w_p^{t+1} + lambda_p^t)) / m,

the update is ``z^{t,e+1} = argmin_{z in W_p} sum_i m_i (z_i - a_i)^2``, where ``g`` is
the (possibly perturbed) gradient and ``S`` selects the shared coordinates.

Three projections are offered, chosen once per agent:

* ``free``: W_p = R^n, the projection is the point itself;
* ``box``: all constraints are constant bounds on whole variables, the projection is
  ``np.clip`` (a weighted projection onto a box is separable);
* ``conic``: any other DCP set. A DPP-compliant CVXPY problem
  ``min sum_squares(multiply(s, z)) - 2 c @ z`` with Parameters ``s = sqrt(m/max m)``
  and ``c = (m/max m) * a`` is built once; every update only sets the parameters and
  re-solves, warm-started. Solvers are tried in a fallback chain; a fallback re-solves
  the same parameters, so it never redraws noise.

`ExactStep` is the other local step: the exact consensus-ADMM subproblem (no linearization, the limit
of E -> infinity linearized updates), compiled once per agent with the linear term and rho as parameters,
used by ``ExactADMM`` and ``LinearizedADMM(local_updates="exact")`` (non-private).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import clarabel
import cvxpy as cp
import numpy as np
import scipy.sparse as sp
from cvxpy import settings as cvxpy_settings
from cvxpy.constraints import Equality, Inequality
from cvxpy.cvxcore.python import canonInterface
from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import dims_to_solver_cones
from cvxpy.reductions.solvers.conic_solvers.conic_solver import ConicSolver

from privcvx.errors import SolverError
from privcvx.problem import Agent, AgentLayout, agent_vector
from privcvx.solver_warnings import quiet_inaccurate

#: Solver settings of the conic projection: accurate enough that a projected point matches
#: a fresh solve to about 1e-7, and Clarabel's qdldl (its multithreaded default is slower on 2 cores).
SOLVER_SETTINGS: dict[str, dict] = {
    cp.OSQP: {"eps_abs": 1e-9, "eps_rel": 1e-9, "polishing": True, "max_iter": 50000},
    # Clarabel often stops at "AlmostSolved", which only meets its *reduced* tolerances (feasibility 1e-4
    # by default): the reduced feasibility tolerance is tightened so that an accepted point is feasible to
    # about 1e-9 (the reduced gap tolerance stays at its default; a tighter one costs accuracy, see below).
    cp.CLARABEL: {"direct_solve_method": "qdldl", "tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11,
                  "reduced_tol_feas": 1e-8},
    cp.SCS: {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 100000},
}


#: The direct path's retry when the tight settings stall (InsufficientProgress) without meeting the reduced
#: tolerances: a slightly looser target, the same feasibility requirement for an "AlmostSolved" answer.
CLARABEL_RETRY = {**SOLVER_SETTINGS[cp.CLARABEL], "tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10}

#: The allowance, per coordinate, for a projection computed by a solver: the solver's feasibility tolerance
#: (Clarabel's reduced one, the loosest it accepts). The derived OutPert sensitivity adds it
#: (privacy/perturbation.py); closed-form projections (free, box) are exact and use 0. The distance of a
#: computed point to the exact projection can be larger (up to 2.8e-4 against SCS at 1e-12 on a 500-variable
#: set with cones, docs/performance.md): that is not covered (docs/privacy.md).
PROJECTION_ERROR = SOLVER_SETTINGS[cp.CLARABEL]["reduced_tol_feas"]

#: QP-representable local sets larger than this go to warm-started OSQP before Clarabel.
OSQP_MIN_DIMENSION = 300

#: Clarabel statuses accepted from the direct path; "AlmostSolved" counts as inaccurate unless it meets
#: `STANDARD_TOLERANCE`.
_CLARABEL_OK = {"Solved": False, "AlmostSolved": True}

#: Clarabel's own default tolerances (feasibility and gap, 1e-8). The tight targets of `SOLVER_SETTINGS` are
#: out of reach on power-flow zones: Clarabel stalls at them ("AlmostSolved") at the point it reaches with its
#: default targets (on case89pegase zones the same distance to an SCS 1e-12 solution, 5e-7 to 2e-4, whatever the
#: target from 1e-8 to 1e-11; docs/performance.md). Such an answer counts as accurate when it meets these.
STANDARD_TOLERANCE = 1e-8


def _meets_standard(solution: clarabel.DefaultSolution) -> bool:
    """Whether a Clarabel answer meets Clarabel's default feasibility and (absolute or relative) gap tolerances."""
    gap = abs(solution.obj_val - solution.obj_val_dual)
    scale = max(1.0, min(abs(solution.obj_val), abs(solution.obj_val_dual)))
    return (max(solution.r_prim, solution.r_dual) <= STANDARD_TOLERANCE
            and min(gap, gap / scale) <= STANDARD_TOLERANCE)


class DirectClarabel:
    """The compiled projection solved by Clarabel directly, bypassing CVXPY's per-solve pipeline.

    CVXPY compiles the DPP problem once (``get_problem_data``). Each update then only
    evaluates the linear term q from CVXPY's parameter tensor; P, A and b are re-evaluated only
    when the metric weights change (once per round when eta^t or rho^t change), and a Clarabel solver
    is set up on them then, **always with q = 0**; every solve passes its q through
    ``solver.update(q=...)``. A solver keeps the cost scaling of the q it was built with, so building it
    from a canonical q makes every answer a function of (P, A, b, q) alone, whatever was solved before:
    a run resumed in a new process, which builds a new solver, repeats every solve bitwise
    (``bench/bench_fresh_solver.py`` checks it). Not applicable when CVXPY replaced a variable
    (variables with attributes); the CVXPY path is used then.
    """

    def __init__(self, problem: cp.Problem, variables: list[cp.Variable], weights: cp.Parameter | None) -> None:
        data, _, _ = problem.get_problem_data(cp.CLARABEL, enforce_dpp=True)
        self.program = data[cvxpy_settings.PARAM_PROB]
        columns = self.program.var_id_to_col
        if any(var.id not in columns for var in variables):
            raise LookupError("a variable was replaced by CVXPY's reductions")
        self.index = np.concatenate([columns[v.id] + np.arange(v.size) for v in variables])
        self.cones = dims_to_solver_cones(data[ConicSolver.DIMS])
        self.weights = weights
        self.settings = _clarabel_settings(SOLVER_SETTINGS[cp.CLARABEL])
        self.retry_settings = _clarabel_settings(CLARABEL_RETRY)
        self.data: tuple | None = None
        self.metric: np.ndarray | None = None
        self.solver: clarabel.DefaultSolver | None = None

    def _parameter_vector(self) -> np.ndarray:
        program = self.program
        return canonInterface.get_parameter_vector(program.total_param_size, program.param_id_to_col,
                                                   program.param_id_to_size,
                                                   lambda pid: np.array(program.id_to_param[pid].value))

    def solve(self) -> tuple[np.ndarray, bool]:
        """Solve at the current parameter values; returns (z, inaccurate) or raises RuntimeError."""
        metric = None if self.weights is None else self.weights.value
        if self.data is None or (metric is not None and not np.array_equal(self.metric, metric)):
            matrix_p, q, _, matrix_a, b = self.program.apply_parameters(quad_obj=True)
            self.data = (sp.triu(matrix_p).tocsc(), -matrix_a.tocsc(), b)
            self.metric = None if metric is None else np.array(metric)
            self.solver = clarabel.DefaultSolver(self.data[0], np.zeros_like(q), self.data[1], self.data[2],
                                                 self.cones, self.settings)
        else:
            q, _ = canonInterface.get_matrix_from_tensor(self.program.q, self._parameter_vector(),
                                                         self.program.x.size, with_offset=True)
            q = np.asarray(q.toarray()).reshape(-1)
        matrix_p, matrix_a, b = self.data
        self.solver.update(q=q)
        solution = self.solver.solve()
        if str(solution.status) not in _CLARABEL_OK:  # stalled at the tight targets: retry at reachable ones
            solution = clarabel.DefaultSolver(matrix_p, q, matrix_a, b, self.cones, self.retry_settings).solve()
        status = str(solution.status)
        if status not in _CLARABEL_OK:
            raise RuntimeError(f"Clarabel status {status}")
        return np.asarray(solution.x)[self.index], _CLARABEL_OK[status] and not _meets_standard(solution)


def _clarabel_settings(options: dict) -> clarabel.DefaultSettings:
    settings = clarabel.DefaultSettings()
    for key, value in options.items():
        setattr(settings, key, value)
    settings.verbose = False
    return settings


@dataclass
class ProjectionStats:
    """Counters of the conic projection: solves, fallbacks, inaccurate results, solver time."""

    solves: int = 0
    fallbacks: int = 0
    inaccurate: int = 0
    seconds: float = 0.0
    solvers: dict[str, int] = field(default_factory=dict)


def _has_attributes(var: cp.Variable) -> bool:
    """Whether a variable carries attributes (nonneg, bounds, ...) that CVXPY turns into constraints."""
    return any(value not in (None, False) for value in var.attributes.values())


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


class Projection:
    """The weighted projection onto one agent's W_p, compiled once (Eq. (9), Eq. (10)).

    ``uniform_metric=False`` keeps the metric a Parameter even when every coordinate is shared (a per-key
    rho makes the weights differ between shared coordinates).
    """

    def __init__(self, agent: Agent, layout: AgentLayout, solvers: list[str] | None = None,
                 uniform_metric: bool = True) -> None:
        self.agent_name = layout.name
        self.dim = layout.dim
        self.stats = ProjectionStats()
        has_attributes = any(_has_attributes(v) for v in agent.variables)
        self.kind = "free" if not agent.constraints and not has_attributes else "conic"
        self.bounds = box_bounds(agent, layout) if self.kind == "conic" and not has_attributes else None
        if self.bounds is not None:
            self.kind = "box"
        if self.kind != "conic":
            return
        self.variables = agent.variables
        self.z = agent_vector(agent)
        self.c = cp.Parameter(self.dim, name="linear_term")
        if uniform_metric and (layout.shared_mask.all() or not layout.shared_mask.any()):
            # One weight for every coordinate (m = 1/eta + rho or 1/eta): the metric is a multiple of I and
            # needs no Parameter, which spares the solver the auxiliary variables of multiply(s, z).
            self.s = None
            quadratic = cp.sum([cp.sum_squares(v) for v in agent.variables])
        else:
            self.s = cp.Parameter(self.dim, nonneg=True, name="metric_sqrt")
            quadratic = cp.sum_squares(cp.multiply(self.s, self.z))
        self.problem = cp.Problem(cp.Minimize(quadratic - 2 * self.c @ self.z), agent.constraints)
        assert self.problem.is_dcp(dpp=True), "the local projection must follow DPP"
        # Large QP-representable sets: warm-started OSQP is cheapest. Small ones are dominated by CVXPY's
        # per-solve overhead, which the direct Clarabel path removes (bench/bench_localstep.py).
        if not self.problem.is_qp():
            default = [cp.CLARABEL, cp.SCS]
        elif self.dim > OSQP_MIN_DIMENSION:
            default = [cp.OSQP, cp.CLARABEL, cp.SCS]
        else:
            default = [cp.CLARABEL, cp.OSQP, cp.SCS]
        self.solvers = list(solvers) if solvers else default
        self.direct: DirectClarabel | None = None
        if not solvers and self.solvers[0] == cp.CLARABEL:
            try:
                self.direct = DirectClarabel(self.problem, self.variables, self.s)
            except LookupError:
                self.direct = None

    def __call__(self, point: np.ndarray, weights: np.ndarray, warm_start: bool = False) -> np.ndarray:
        """argmin over W_p of sum_i weights_i (z_i - point_i)^2.

        ``warm_start`` lets a first-order solver start from its previous solution. Agents
        warm-start only within a round, so a run resumed at a round boundary from a
        checkpoint repeats every solve exactly.
        """
        if self.kind == "free":
            return point.copy()
        if self.kind == "box":  # np.clip's definition, without its wrapper's overhead (one call per local update)
            return np.minimum(np.maximum(point, self.bounds[0]), self.bounds[1])
        scaled = weights / weights.max()
        if self.s is None:
            if np.any(scaled != 1.0):
                raise ValueError("this agent's metric is uniform (all its coordinates are shared, or none)")
        else:
            self.s.value = np.sqrt(scaled)
        self.c.value = scaled * point
        return self._solve(warm_start)

    def _solve(self, warm_start: bool) -> np.ndarray:
        errors = []
        if self.direct is not None:
            start = time.perf_counter()
            try:
                z, inaccurate = self.direct.solve()
            except RuntimeError as exc:  # fall back to the CVXPY chain, same parameters, same noise
                errors.append(f"direct Clarabel: {exc}")
            else:
                self.stats.solves += 1
                self.stats.inaccurate += inaccurate
                self.stats.solvers["clarabel-direct"] = self.stats.solvers.get("clarabel-direct", 0) + 1
                return z
            finally:
                self.stats.seconds += time.perf_counter() - start
        for attempt, solver in enumerate(self.solvers):
            start = time.perf_counter()
            try:
                with quiet_inaccurate():  # counted in stats.inaccurate, reported once per run
                    self.problem.solve(solver=solver, warm_start=warm_start, enforce_dpp=True,
                                       **SOLVER_SETTINGS.get(solver, {}))
            except cp.error.SolverError as exc:
                errors.append(f"{solver}: {exc}")
                continue
            finally:
                self.stats.seconds += time.perf_counter() - start
            status = self.problem.status
            if status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) and self.z.value is not None:
                self.stats.solves += 1
                self.stats.fallbacks += attempt > 0 or bool(errors)
                self.stats.inaccurate += status == cp.OPTIMAL_INACCURATE
                self.stats.solvers[solver] = self.stats.solvers.get(solver, 0) + 1
                return np.asarray(self.z.value, dtype=float).reshape(-1)
            errors.append(f"{solver}: status {status}")
        raise SolverError("every solver failed on the local update: " + "; ".join(errors),
                          agent=self.agent_name, argument="constraints")

    @property
    def error_bound(self) -> float:
        """How far a computed projection may be from the exact one, per coordinate (`PROJECTION_ERROR`)."""
        return PROJECTION_ERROR if self.kind == "conic" else 0.0


class ExactStep:
    """The compiled exact step of one agent: argmin f_p(z) + <q, z_s> + (rho/2) ||z_s||^2 over W_p.

    With q = -(lambda_p + rho w_p) this is the consensus ADMM step of Boyd et al. (Foundations and Trends in ML,
    2011), Eq. (7.6): Eq. (9) of Ryu & Kim with f_p in place of its linearization and no proximal term. One
    CVXPY problem (DPP: q and rho are Parameters) solved by Clarabel from scratch.

    ``per_key``: rho is a vector over the shared entries, the penalty sum_i rho_i z_si^2 / 2."""

    def __init__(self, agent: Agent, layout: AgentLayout, per_key: bool = False) -> None:
        self.name = agent.name
        self.z = agent_vector(agent)
        shared = self.z[layout.shared_local]
        self.linear = cp.Parameter(layout.shared_local.size)
        self.rho = cp.Parameter(layout.shared_local.size if per_key else (), nonneg=True)
        penalty = cp.sum(cp.multiply(self.rho, cp.square(shared))) / 2 if per_key \
            else self.rho / 2 * cp.sum_squares(shared)
        objective = agent.objective + self.linear @ shared + penalty
        self.problem = cp.Problem(cp.Minimize(objective), agent.constraints)
        self.solves = 0
        self.inaccurate = 0
        self.retries = 0

    def __call__(self, linear: np.ndarray, rho: float | np.ndarray) -> np.ndarray:
        """The minimizer for the linear term ``linear`` and penalty ``rho``."""
        self.linear.value = linear
        self.rho.value = rho
        # From scratch: a resumed run repeats it bitwise. accept_unknown: Clarabel's best point when it stalls
        # (InsufficientProgress), counted as inaccurate; without it case89pegase's run failed in round 14. First the
        # projection's tight settings (with Clarabel's defaults the general-form lasso of
        # examples/lasso_general_form.py stalls 1.6e-5 from its optimum; with them it reaches 5e-9); where Clarabel
        # fails at them (power-flow zones of case24_ieee_rts and larger), its default settings.
        for settings in (SOLVER_SETTINGS[cp.CLARABEL], {}):
            try:
                with quiet_inaccurate():  # counted in self.inaccurate, reported once per run
                    self.problem.solve(solver=cp.CLARABEL, warm_start=False, accept_unknown=True, **settings)
            except cp.error.SolverError as exc:
                failure = f"failed: {exc}"
                continue
            if self.problem.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) and self.z.value is not None:
                break
            failure = f"ended {self.problem.status}"
        else:
            raise SolverError(f"the exact local step {failure}", agent=self.name, argument="objective")
        self.retries += bool(settings is not SOLVER_SETTINGS[cp.CLARABEL])
        self.solves += 1
        self.inaccurate += self.problem.status == cp.OPTIMAL_INACCURATE
        return np.asarray(self.z.value, dtype=float).reshape(-1)
