"""The strategies of the local-solve layer, each chosen by ``accepts(local)`` as CVXPY chooses its reductions.

Every strategy minimizes the same function over W_p,

    g(z) = f_p(z) + 1/2 sum_{i in pen} w_i z_i^2 - sum_{i in pen} b_i z_i        (LS)

(f_p is 0 for a projection), given the weights w and the linear term b of the round, and returns
``(z, inaccurate)`` or raises `StrategyFailure` with the solver's status. In their order of preference:

* `ClosedForm`: a projection onto R^n or a box (Eq. (9) of Ryu & Kim completed to a square): the point, or np.clip;
* `Factorization`: an unconstrained or equality-constrained quadratic: its KKT system, factored once per weight
  vector (rho or eta changed), after which a solve is one matrix product;
* `OSQPStep`: any other QP, on OSQP set up once per weight vector, each solve an ``update(q=...)``, warm-started;
* `SmoothStep`: a smooth convex f_p (not a QP) over R^n or a box, every coordinate penalized: L-BFGS-B on f_p's
  numpy value and gradient, accepted only with a certified distance to the exact step (the federated logistic loss,
  whose conic form has one exponential cone per sample and class);
* `ClarabelStep`: any conic program (SOC, PSD, exponential and power cones) on Clarabel, its data built once per
  weight vector, each solve an ``update(q=...)``;
* `CvxpyStep`: CVXPY's public solve path (Clarabel, then SCS): the fallback of every strategy, and the only one
  for a problem whose data CVXPY's internals cannot give ([`cvxpy_adapter`][privcvx.localsolve.cvxpy_adapter]).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import clarabel
import cvxpy as cp
import numpy as np
import osqp
import scipy.optimize
import scipy.sparse as sp
import scipy.sparse.linalg

from privcvx.gradients import GradientEvaluator
from privcvx.localsolve.certificate import Certificate
from privcvx.solver_warnings import quiet_inaccurate
from privcvx.tuning import is_smooth

if TYPE_CHECKING:
    from privcvx.localsolve.problem import LocalProblem, SolveStats

#: Solver settings: accurate enough that a computed step matches a fresh solve to about 1e-7, and Clarabel's qdldl
#: (its multithreaded default is slower on 2 cores).
SOLVER_SETTINGS: dict[str, dict] = {
    # OSQP without polishing: at these targets its residuals end near 1e-11, and its polish prints to the console
    # ("Polishing not needed") whatever ``verbose`` says.
    cp.OSQP: {"eps_abs": 1e-9, "eps_rel": 1e-9, "polishing": False, "max_iter": 50000},
    # Clarabel often stops at "AlmostSolved", which only meets its *reduced* tolerances (feasibility 1e-4 by
    # default): the reduced feasibility tolerance is tightened so that an accepted point is feasible to about 1e-9.
    cp.CLARABEL: {"direct_solve_method": "qdldl", "tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11,
                  "reduced_tol_feas": 1e-8},
    cp.SCS: {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 100000},
}

#: Clarabel's settings for a refinement: the same problem solved again in y = x - x^, centred at the best answer x^ so
#: far, with Clarabel's defaults and no equilibration. On the zones of iceland, whose lines of x = 1e-4 p.u. put 1e4
#: beside 8e-4 in A, the tight first solve stalled (InsufficientProgress) with a duality gap up to 4e-3 (a shared
#: entry off by up to 2e-2) while its residuals were about 1e-10; refined, the gap came to about 1e-8
#: (docs/tuning.md, "Iceland").
CLARABEL_REFINEMENT = {"direct_solve_method": "qdldl", "equilibrate_enable": False}
#: The refinements tried before the retries, while no answer is accurate.
CLARABEL_REFINEMENTS = (CLARABEL_REFINEMENT, CLARABEL_REFINEMENT)

#: Clarabel's retries when the tight settings and the refinements stall: a slightly looser target, then Clarabel's
#: defaults (the power-flow zones of case24_ieee_rts and larger need them). Of all the answers the best
#: (`_rank`: verdict, then duality gap) is returned.
CLARABEL_RETRIES = ({**SOLVER_SETTINGS[cp.CLARABEL], "tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10},
                    {"direct_solve_method": "qdldl"})

#: The stated tolerance of an accurate answer: Clarabel's default feasibility and gap tolerance (1e-8). An answer
#: that meets it is accurate; one that meets only `ACCEPTABLE_RESIDUAL` is accepted and counted as inaccurate.
STANDARD_TOLERANCE = 1e-8

#: The largest primal or dual residual of an answer that is accepted at all (counted as inaccurate): a solver that
#: stalls (Clarabel's InsufficientProgress, OSQP's "solved inaccurate") above it has failed.
ACCEPTABLE_RESIDUAL = 1e-6

#: `SmoothStep`'s own target for its certified distance (below the declared `CERTIFIED_ERROR`, which it then meets).
SMOOTH_TARGET = 1e-8

#: KKT systems up to this size are factored densely (LAPACK), larger ones by SuperLU.
DENSE_KKT = 1000


class StrategyFailure(RuntimeError):
    """A strategy could not answer (the solver's status is the message): the next strategy of the chain tries."""


class Strategy(ABC):
    """One way of solving (LS) for a compiled local problem; built once, called once per local step."""

    #: The name in ``result.info["local_solve"]``.
    name: ClassVar[str]
    #: How far an answer may be from the exact minimizer, in l2 over the penalized coordinates, as the private
    #: calibrations count it: enforced on every answer (`certificate`), 0 for a closed form.
    error_bound: ClassVar[float | None] = None  # None: the problem's declared `LocalProblem.certified_error`

    def __init__(self, local: LocalProblem) -> None:
        self.local = local
        #: The certified l2 distance of the last answer to the exact step (nan: not certified; 0: a closed form).
        self.distance = 0.0 if isinstance(self, ClosedForm) else math.nan

    @classmethod
    @abstractmethod
    def accepts(cls, local: LocalProblem) -> bool:
        """Whether this strategy solves the local problem exactly as stated."""

    @classmethod
    def certifies(cls, local: LocalProblem) -> bool:
        """Whether every answer this strategy returns for the problem is certified within `error_bound` (a solver's:
        when the problem has a `certificate.Certifier`)."""
        return local.certifier is not None

    @abstractmethod
    def solve(self, weights: float | np.ndarray, linear: np.ndarray, point: np.ndarray | None, warm_start: bool,
              stats: SolveStats) -> tuple[np.ndarray, bool]:
        """z minimizing (LS) (``point = linear / weights`` for a projection), and whether it is inaccurate. ``weights``
        is one float for all the penalized coordinates, or an array over them."""

    def warm_state(self) -> list[np.ndarray] | None:
        """What a warm-started solve starts from (None: the strategy's answers depend on (w, b) alone)."""
        return None

    def load_warm_state(self, state: list[np.ndarray] | None) -> None:
        """Restore `warm_state` (a checkpoint): a strategy that keeps none takes only None."""
        if state is not None:
            raise ValueError(f"the {self.name} strategy keeps no warm start")


class ClosedForm(Strategy):
    """Projection onto R^n (the point) or onto a box (np.clip's definition, without its wrapper's overhead)."""

    name = "closed_form"
    error_bound = 0.0

    @classmethod
    def accepts(cls, local: LocalProblem) -> bool:
        return not local.has_objective and local.kind in ("free", "box")

    @classmethod
    def certifies(cls, local: LocalProblem) -> bool:
        return True

    def solve(self, weights: float | np.ndarray, linear: np.ndarray, point: np.ndarray | None, warm_start: bool,
              stats: SolveStats) -> tuple[np.ndarray, bool]:
        if self.local.bounds is None:
            return point.copy(), False
        lower, upper = self.local.bounds
        return np.minimum(np.maximum(point, lower), upper), False


class _Weighted(Strategy):
    """A strategy that rebuilds its solver when the weights change (rho^t or eta^t did) and counts it."""

    def __init__(self, local: LocalProblem) -> None:
        super().__init__(local)
        self.data = local.data
        self.pen_columns = self.data.columns[local.penalized]
        self.key: float | bytes | None = None

    def prepare(self, weights: float | np.ndarray, stats: SolveStats) -> None:
        """Rebuild for new weights (``refactor``); a no-op while they stay the same (bitwise)."""
        key = weights if isinstance(weights, float) else weights.tobytes()
        if key == self.key:
            return
        self.key = None
        self.refactor(weights)
        self.key = key
        stats.refactors += 1

    @abstractmethod
    def refactor(self, weights: float | np.ndarray) -> None:
        """Build the solver (factorization) for these weights."""

    def hessian(self, weights: float | np.ndarray) -> sp.csc_matrix:
        """P plus the penalty's diagonal on the penalized columns."""
        diagonal = np.zeros(self.data.P.shape[0])
        np.add.at(diagonal, self.pen_columns, weights)
        return (self.data.P + sp.diags(diagonal)).tocsc()

    def linear_term(self, linear: np.ndarray) -> np.ndarray:
        """q minus the round's linear term on the penalized columns."""
        q = self.data.q.copy()
        np.subtract.at(q, self.pen_columns, linear)
        return q

    def certified(self, x: np.ndarray, y: np.ndarray, q: np.ndarray, weights: float | np.ndarray,
                  polish: bool = True) -> Certificate:
        """The certified point and distance of the answer (x, y) (`certificate.Certifier.certify`; ``polish=False``:
        without the polish, `Certifier.bound`). The problem must have a certifier (`Strategy.certifies`)."""
        certifier = self.local.certifier
        if certifier.key != self.key:
            certifier.set_hessian(self.hessian(weights), self.key)
        if polish:
            return certifier.certify(x, y, q, float(np.min(weights)), self.local.certified_error)
        return certifier.bound(x, certifier.dual_cone_projection(y), q, float(np.min(weights)))


class Factorization(_Weighted):
    """An unconstrained or equality-constrained quadratic: the KKT system [[H, A_e'], [A_e, 0]] is factored once per
    weight vector; the minimizer is affine in the linear term, z = z0 + G b, so a solve is one product."""

    name = "factorization"

    @classmethod
    def accepts(cls, local: LocalProblem) -> bool:
        data = local.data
        return data is not None and data.qp and data.nonneg == 0

    def __init__(self, local: LocalProblem) -> None:
        super().__init__(local)
        data = self.data
        n, m = data.P.shape[0], data.zero
        equalities = data.A[:m]
        self.kkt = sp.bmat([[data.P, equalities.T], [equalities, None]], format="csc")  # the weights go on its diagonal
        self.dense = n + m <= DENSE_KKT
        if self.dense:
            self.kkt = self.kkt.toarray()
        self.rhs = np.zeros((n + m, self.pen_columns.size + 1))
        self.rhs[:n, 0] = -data.q
        self.rhs[n:, 0] = data.b[:m]
        self.rhs[self.pen_columns, np.arange(1, self.pen_columns.size + 1)] = 1.0

    def refactor(self, weights: float | np.ndarray) -> None:
        size = self.kkt.shape[0]
        diagonal = np.zeros(size)
        np.add.at(diagonal, self.pen_columns, weights)
        try:
            if self.dense:
                kkt = self.kkt + np.diag(diagonal)
                solution = np.linalg.solve(kkt, self.rhs)
            else:
                kkt = (self.kkt + sp.diags(diagonal)).tocsc()
                solution = scipy.sparse.linalg.splu(kkt).solve(self.rhs)
        except (np.linalg.LinAlgError, RuntimeError) as exc:
            raise StrategyFailure(f"the KKT system is singular ({exc})") from None
        residual = np.max(np.abs(kkt @ solution - self.rhs), initial=0.0)
        if not np.all(np.isfinite(solution)) or residual > STANDARD_TOLERANCE * max(1.0, np.max(np.abs(self.rhs))):
            raise StrategyFailure(f"the KKT system is singular (residual {residual:.2e})")
        rows = np.arange(solution.shape[0]) if self.local.enforcing else self.data.columns
        self.offset = solution[rows, 0]  # x and the equalities' multipliers when certified, else z
        self.gain = np.ascontiguousarray(solution[rows, 1:])

    def solve(self, weights: float | np.ndarray, linear: np.ndarray, point: np.ndarray | None, warm_start: bool,
              stats: SolveStats) -> tuple[np.ndarray, bool]:
        self.prepare(weights, stats)
        answer = self.offset + self.gain @ linear
        if not self.local.enforcing:
            return answer, False
        n = self.data.P.shape[0]
        certificate = self.certified(answer[:n], answer[n:], self.linear_term(linear), weights, polish=False)
        if not certificate.distance <= self.local.certified_error:
            raise StrategyFailure(f"certified distance {certificate.distance:.2e} > {self.local.certified_error:g}")
        self.distance = certificate.distance
        return certificate.x[self.data.columns], False


class OSQPStep(_Weighted):
    """A QP with inequalities on OSQP: set up (factored) once per weight vector, then ``update(q=...)`` and solve.

    Every solve starts from OSQP's initial rho (refactored only if the last solve adapted it) and from a stated
    point: x = y = 0, the state of a fresh setup (``warm_start=False``), or the primal and dual of this strategy's
    last answer (``warm_start=True``, `warm_state`). An answer is thus a function of (P, A, l, u, q) and that point
    alone, so a run resumed from a checkpoint that kept the point (`LocalProblem.state_dict`) repeats it bitwise.
    A warm start changes an answer only within OSQP's tolerances (``SOLVER_SETTINGS``), which
    `Strategy.error_bound` covers either way."""

    name = "osqp"

    @classmethod
    def accepts(cls, local: LocalProblem) -> bool:
        data = local.data
        # Projections (f_p = 0) stay on Clarabel: from a fresh state OSQP needed 10-60x Clarabel's time on the
        # box + l1 sets of bench/bench_localstep.py (n = 200, 500); with a quadratic f_p it is the faster one
        # (bench/bench_localsolve.py, (b)).
        return data is not None and data.qp and data.nonneg > 0 and local.has_objective

    def __init__(self, local: LocalProblem) -> None:
        super().__init__(local)
        self.size = (self.data.P.shape[0], self.data.A.shape[0])
        self.cold = [np.zeros(self.size[0]), np.zeros(self.size[1])]
        self.last: list[np.ndarray] | None = None  # the primal x and dual y of the last answer

    def refactor(self, weights: float | np.ndarray) -> None:
        data = self.data
        lower = np.concatenate([data.b[:data.zero], np.full(data.nonneg, -np.inf)])
        self.solver = osqp.OSQP()
        self.solver.setup(sp.triu(self.hessian(weights), format="csc"), data.q, data.A, lower, data.b,
                          verbose=False, adaptive_rho_interval=25, **SOLVER_SETTINGS[cp.OSQP])
        self.initial_rho = self.solver.settings.rho
        self.rho_adapted = False

    def solve(self, weights: float | np.ndarray, linear: np.ndarray, point: np.ndarray | None, warm_start: bool,
              stats: SolveStats) -> tuple[np.ndarray, bool]:
        self.prepare(weights, stats)
        self.solver.update(q=self.linear_term(linear))
        if self.rho_adapted:  # back to the initial rho of a fresh setup (a refactorization)
            self.solver.update_settings(rho=self.initial_rho)
            self.rho_adapted = False
        x, y = self.last if warm_start and self.last is not None else self.cold
        self.solver.warm_start(x=x, y=y)
        result = self.solver.solve(raise_error=False)
        info = result.info
        self.rho_adapted = info.rho_updates > 0
        residual = max(info.prim_res, info.dual_res)
        if info.status not in ("solved", "solved inaccurate") or not residual <= ACCEPTABLE_RESIDUAL:
            raise StrategyFailure(f"OSQP status {info.status!r} (residual {residual:.2e})")
        self.last = [np.array(result.x, dtype=float), np.array(result.y, dtype=float)]
        accurate = info.status == "solved" and residual <= STANDARD_TOLERANCE
        if not self.local.enforcing:
            return self.last[0][self.data.columns], not accurate
        # OSQP's y (l <= Ax <= u, P x + q + A'y = 0) is Clarabel's dual of Ax + s = b, s in {0} x R_+
        certificate = self.certified(*self.last, self.linear_term(linear), weights)
        if not certificate.distance <= self.local.certified_error:
            raise StrategyFailure(f"OSQP: certified distance {certificate.distance:.2e} > "
                                  f"{self.local.certified_error:g}")
        self.distance = certificate.distance
        return certificate.x[self.data.columns], not accurate

    def warm_state(self) -> list[np.ndarray] | None:
        return None if self.last is None else [vector.copy() for vector in self.last]

    def load_warm_state(self, state: list[np.ndarray] | None) -> None:
        if state is not None and [np.shape(vector) for vector in state] != [(size,) for size in self.size]:
            raise ValueError(f"a warm start of shapes {[np.shape(vector) for vector in state]}, not {self.size}")
        self.last = None if state is None else [np.array(vector, dtype=float) for vector in state]


#: L-BFGS-B's settings for `SmoothStep`: no stop on a small decrease of g (ftol 0), a projected-gradient stop far below
#: what the certificate needs, and an iteration cap after which Clarabel answers instead.
LBFGSB_OPTIONS = {"ftol": 0.0, "gtol": 1e-13, "maxiter": 1000, "maxcor": 20}
#: The projected Barzilai-Borwein steps of `SmoothStep`'s polish, tried while L-BFGS-B's answer is not certified: they
#: use the gradient alone, so they go on where L-BFGS-B's line search stops on g's rounding (about 3% of the digits
#: steps under PR-ADMM's noise stopped at a certified 1.3e-8 to 2.6e-8).
POLISH_STEPS = 50


class SmoothStep(Strategy):
    """(LS) for a smooth convex f_p over R^n or a box, every coordinate penalized, by L-BFGS-B on the numpy value and
    gradient of f_p (`privcvx.gradients.GradientEvaluator`: the agent's oracle, or its compiled expression), started at
    the minimizer of the penalty alone, clip(b / w): an answer is a function of (w, b) alone.

    An answer z (in W_p: clipped to the box) is accepted only with a certificate. g + I_W is (min_i w_i)-strongly
    convex, since f_p is convex; v, the least-norm element of grad g(z) + N_W(z) (grad_i g on a free coordinate,
    min(grad_i g, 0) at a lower bound, max(grad_i g, 0) at an upper one), is in its subdifferential at z, and 0 is at
    the exact step z*. Strong monotonicity, <v - 0, z - z*> >= min w ||z - z*||^2, gives ||z - z*||_2 <= ||v||_2 /
    min w, and the answer is accepted when that is at most `SMOOTH_TARGET` (below `error_bound`, in l2). While it is
    not, up to `POLISH_STEPS` projected Barzilai-Borwein steps (gradients only) go on from L-BFGS-B's answer, keeping
    the best certified point; if none is certified, `StrategyFailure`: Clarabel solves the conic form when that is
    certifiable, else (exponential cones: not certifiable, so not in the chain) `SolverError`. On digits (10 classes,
    64 features, about 135 samples per agent) a step under PR-ADMM takes a median 7-15 ms, where Clarabel took 6-15 s
    on its 1350 exponential cones, with a median certified distance below 1e-12 (bench/bench_smooth_step.py).
    """

    name = "lbfgsb"
    error_bound = SMOOTH_TARGET  # what its certificate enforces

    @classmethod
    def accepts(cls, local: LocalProblem) -> bool:
        objective = local.agent.objective  # a quadratic one is a QP: factored, on OSQP, or through CVXPY
        return (local.has_objective and local.region in ("free", "box") and local.penalized.size == local.dim
                and not objective.is_quadratic() and objective.is_dcp() and objective.is_convex()
                and is_smooth(objective))

    @classmethod
    def certifies(cls, local: LocalProblem) -> bool:
        return True

    def __init__(self, local: LocalProblem) -> None:
        super().__init__(local)
        self.evaluator = GradientEvaluator(local.agent, local.layout)
        infinite = np.full(local.dim, np.inf)
        self.lower, self.upper = (-infinite, infinite) if local.bounds is None else local.bounds
        self.box = scipy.optimize.Bounds(self.lower, self.upper)

    def solve(self, weights: float | np.ndarray, linear: np.ndarray, point: np.ndarray | None, warm_start: bool,
              stats: SolveStats) -> tuple[np.ndarray, bool]:
        evaluator, w = self.evaluator, np.broadcast_to(np.asarray(weights, dtype=float), linear.shape)
        if not w.min() > 0.0:
            raise StrategyFailure("L-BFGS-B: a zero penalty weight leaves the step without a certificate")

        def gradient_of(z: np.ndarray) -> np.ndarray:
            return evaluator.gradient(z) + w * z - linear

        def value_and_gradient(z: np.ndarray) -> tuple[float, np.ndarray]:
            return evaluator.value(z) + 0.5 * float(z @ (w * z)) - float(linear @ z), gradient_of(z)

        with np.errstate(all="ignore"):  # a trial point outside dom f_p: L-BFGS-B backtracks, or the check refuses
            result = scipy.optimize.minimize(value_and_gradient, np.clip(linear / w, self.lower, self.upper),
                                             jac=True, method="L-BFGS-B", bounds=self.box, options=LBFGSB_OPTIONS)
            z = np.clip(result.x, self.lower, self.upper)
            gradient = gradient_of(z)
            distance, best = self.certified_distance(z, gradient, w), z
            step = 1.0 / float(w.max())
            for _ in range(POLISH_STEPS):  # projected Barzilai-Borwein steps; the best certified point is kept
                if distance <= SMOOTH_TARGET or not math.isfinite(step):
                    break
                moved = np.clip(z - step * gradient, self.lower, self.upper)
                moved_gradient = gradient_of(moved)
                change, turn = moved - z, moved_gradient - gradient
                curvature = float(change @ turn)
                step = float(change @ change) / curvature if curvature > 0.0 else math.inf
                z, gradient = moved, moved_gradient
                candidate = self.certified_distance(z, gradient, w)
                if candidate < distance:
                    distance, best = candidate, z
            z = best
        if not distance <= SMOOTH_TARGET:
            raise StrategyFailure(f"L-BFGS-B: certified distance {distance:.2e} > {SMOOTH_TARGET:g} "
                                  f"({result.message})")
        self.distance = distance
        return z, False

    def certified_distance(self, z: np.ndarray, gradient: np.ndarray, w: np.ndarray) -> float:
        """||v||_2 / min w, v the least-norm element of grad g(z) + N_W(z): a bound on ||z - z*||_2 (see the class)."""
        least = np.where(z <= self.lower, np.minimum(gradient, 0.0),
                         np.where(z >= self.upper, np.maximum(gradient, 0.0), gradient))
        return float(np.linalg.norm(least)) / float(w.min())


class ClarabelStep(_Weighted):
    """A conic program on Clarabel, its data built once per weight vector **with q = 0**, every solve passing its q
    through ``update(q=...)``: an answer is a function of (P, A, b, q) alone, whatever was solved before, so a run
    resumed in a new process repeats every solve bitwise (``bench/bench_fresh_solver.py`` checks it). An answer short of
    the stated tolerance is refined (`CLARABEL_REFINEMENTS`), then retried (`CLARABEL_RETRIES`), counted per agent, and
    the best answer (`_rank`) is returned."""

    name = "clarabel"

    @classmethod
    def accepts(cls, local: LocalProblem) -> bool:
        return local.data is not None

    def refactor(self, weights: float | np.ndarray) -> None:
        self.full_p = self.hessian(weights)  # both triangles: the refinements' products P x
        self.P = sp.triu(self.full_p, format="csc")
        self.solver = clarabel.DefaultSolver(self.P, np.zeros_like(self.data.q), self.data.A, self.data.b,
                                             self.data.cones, clarabel_settings(SOLVER_SETTINGS[cp.CLARABEL]))

    def solve(self, weights: float | np.ndarray, linear: np.ndarray, point: np.ndarray | None, warm_start: bool,
              stats: SolveStats) -> tuple[np.ndarray, bool]:
        self.prepare(weights, stats)
        q = self.linear_term(linear)
        self.solver.update(q=q)
        enforced = self.local.certified_error if self.local.enforcing else None
        answer = self._certified(_judged(self.solver.solve()), q, weights)
        for settings in CLARABEL_REFINEMENTS + CLARABEL_RETRIES:  # not certified (or, uncertifiable, short of the
            if _settled(answer, enforced):                        # stated tolerance): solved again, counted
                break
            stats.retries += 1
            if settings is CLARABEL_REFINEMENT:  # the same problem in y = x - x^, x^ the best answer so far
                shift = answer.x if np.isfinite(answer.x).all() else np.zeros_like(answer.x)
                solution = clarabel.DefaultSolver(self.P, self.full_p @ shift + q, self.data.A,
                                                  self.data.b - self.data.A @ shift, self.data.cones,
                                                  clarabel_settings(settings)).solve()
                retried = self._assessed(shift + np.asarray(solution.x), solution, q)
            else:
                retried = _judged(clarabel.DefaultSolver(self.P, q, self.data.A, self.data.b, self.data.cones,
                                                         clarabel_settings(settings)).solve())
            answer = min(answer, self._certified(retried, q, weights), key=lambda a: _rank(a, enforced))
        if answer.verdict == "failed":
            raise StrategyFailure(answer.message)
        if enforced is not None and not answer.distance <= enforced:
            raise StrategyFailure(f"Clarabel: certified distance {answer.distance:.2e} > {enforced:g} "
                                  f"({answer.message})")
        self.distance = answer.distance if enforced is not None else math.nan
        return answer.x[self.data.columns], answer.verdict == "inaccurate"

    def _certified(self, answer: Answer, q: np.ndarray, weights: float | np.ndarray) -> Answer:
        """The answer with its point replaced by the certified one and its certified distance (unchanged when the
        problem has no certifier, or the answer failed)."""
        if not self.local.enforcing or answer.verdict == "failed":
            return answer
        certificate = self.certified(answer.x, answer.multipliers, q, weights)
        return answer._replace(x=certificate.x, distance=certificate.distance)

    def _assessed(self, x: np.ndarray, solution: clarabel.DefaultSolution, q: np.ndarray) -> Answer:
        """A refined point x with the slack s and dual z of the refinement (those of the shifted problem are the
        original's), judged on the original problem min 1/2 x'Px + q'x s.t. Ax + s = b, s in K: Clarabel's
        normalized residuals and the duality gap x'Px + q'x + b'z (primal minus dual objective)."""
        data, s, z = self.data, np.asarray(solution.s), np.asarray(solution.z)
        px, atz = self.full_p @ x, data.A.T @ z
        r_prim = _norm(data.A @ x + s - data.b) / max(1.0, _norm(data.b) + _norm(x) + _norm(s))
        r_dual = _norm(px + atz + q) / max(1.0, _norm(px) + _norm(atz) + _norm(q))
        primal = 0.5 * float(x @ px) + float(q @ x)
        return _verdict(x, z, str(solution.status), primal, primal - float(x @ px + q @ x + data.b @ z), r_prim,
                        r_dual)


class Answer(NamedTuple):
    """One Clarabel answer: the point x, its dual, its verdict ("accurate", "inaccurate", "failed"; `_verdict`), its
    duality gap (relative as `_verdict` says), its status for messages, and its certified distance (inf until
    certified)."""

    x: np.ndarray
    multipliers: np.ndarray
    verdict: str
    gap: float
    message: str
    distance: float = math.inf


def _norm(vector: np.ndarray) -> float:
    return float(np.max(np.abs(vector), initial=0.0))


def _rank(answer: Answer, enforced: float | None) -> tuple:
    """The better of two answers: when certificates are enforced (within ``enforced``), a certified one, then the
    better verdict, then the smaller certified distance; otherwise the better verdict, then the smaller duality gap
    (for (LS), a feasible x with absolute gap G lies within sqrt(2 G / min w) of the exact step)."""
    verdict = ("accurate", "inaccurate", "failed").index(answer.verdict)
    if enforced is not None:
        return verdict == 2, not answer.distance <= enforced, verdict, answer.distance
    return verdict, answer.gap


def _settled(answer: Answer, enforced: float | None) -> bool:
    """Whether no more solves are needed: certified within ``enforced`` (when enforced), else accurate."""
    return answer.distance <= enforced if enforced is not None else answer.verdict == "accurate"


def _judged(solution: clarabel.DefaultSolution) -> Answer:
    """A Clarabel answer judged on its own residuals and objectives (`_verdict`)."""
    return _verdict(np.asarray(solution.x), np.asarray(solution.z), str(solution.status), solution.obj_val,
                    solution.obj_val_dual, solution.r_prim, solution.r_dual)


def _verdict(x: np.ndarray, multipliers: np.ndarray, status: str, primal: float, dual: float, r_prim: float,
             r_dual: float) -> Answer:
    """"accurate" (Solved, or residuals and gap within `STANDARD_TOLERANCE`), "inaccurate" (residuals within
    `ACCEPTABLE_RESIDUAL`), or "failed". The gap |primal - dual| is relative to min(|primal|, |dual|) when that
    exceeds 1, as Clarabel's."""
    gap = abs(primal - dual)
    gap = min(gap, gap / max(1.0, min(abs(primal), abs(dual)))) if math.isfinite(gap) else math.inf
    residual = max(r_prim, r_dual)
    message = f"Clarabel status {status} (residual {residual:.2e})"
    if status in ("PrimalInfeasible", "DualInfeasible") or not residual <= ACCEPTABLE_RESIDUAL:
        return Answer(x, multipliers, "failed", gap, message)
    accurate = status == "Solved" or (residual <= STANDARD_TOLERANCE and gap <= STANDARD_TOLERANCE)
    return Answer(x, multipliers, "accurate" if accurate else "inaccurate", gap, message)


def clarabel_settings(options: dict) -> clarabel.DefaultSettings:
    """Clarabel's settings object with these options, quiet."""
    settings = clarabel.DefaultSettings()
    for key, value in options.items():
        setattr(settings, key, value)
    settings.verbose = False
    return settings


class CvxpyStep(Strategy):
    """(LS) as a DPP CVXPY problem (``s = sqrt(w/2)`` and ``b`` Parameters) solved through CVXPY: Clarabel at the
    tight settings, then SCS (each further solver counted as a retry)."""

    name = "cvxpy"

    def __init__(self, local: LocalProblem) -> None:
        super().__init__(local)
        self.problem = local.cvxpy_problem()

    @classmethod
    def accepts(cls, local: LocalProblem) -> bool:
        return local.data is not None or bool(local.compilable_solvers())

    @classmethod
    def certifies(cls, local: LocalProblem) -> bool:
        return False  # CVXPY gives z, not the conic form's x and dual: the chain of a certified problem leaves it out

    def solve(self, weights: float | np.ndarray, linear: np.ndarray, point: np.ndarray | None, warm_start: bool,
              stats: SolveStats) -> tuple[np.ndarray, bool]:
        local = self.local
        local.root.value = np.broadcast_to(np.sqrt(weights / 2.0), local.penalized.shape)
        local.linear.value = linear
        failures = []
        for attempt, solver in enumerate(local.compilable_solvers()):
            stats.retries += attempt > 0
            try:
                with quiet_inaccurate():  # counted in the statistics, reported once per run
                    # a step's warm start would carry over rounds, from solver state no checkpoint holds (only
                    # OSQPStep's is kept, `warm_state`): a step starts cold
                    self.problem.solve(solver=solver, warm_start=warm_start and not local.has_objective,
                                       **SOLVER_SETTINGS[solver])
            except cp.error.SolverError as exc:
                failures.append(f"{solver}: {exc}")
                continue
            if self.problem.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) and local.z.value is not None:
                return np.asarray(local.z.value, dtype=float).reshape(-1), self.problem.status != cp.OPTIMAL
            failures.append(f"{solver}: status {self.problem.status}")
        raise StrategyFailure("; ".join(failures))


#: The strategies in their order of preference: a local problem's chain is those that accept it.
STRATEGIES: tuple[type[Strategy], ...] = (ClosedForm, Factorization, OSQPStep, SmoothStep, ClarabelStep, CvxpyStep)
