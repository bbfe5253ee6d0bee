"""A certified l2 distance between a solver's answer to (LS) and the exact step, and the point that is released.

The local-solve layer's solvers answer (LS) in Clarabel's form (`cvxpy_adapter.ConicData` plus the round's penalty)

    min g(x) = 1/2 x'Px + q'x   s.t.   Ax + s = b,  s in K = {0}^m0 x R_+^m1 x SOC x ... x SOC,     (C)

z = x[columns], and P - diag(w on the penalized columns) >= -l I on them (l, the loss to P_f's round-off and P's,
proven as built: `Certifier.set_hessian`), so g is mu = (min w - l)-strongly convex in the penalized coordinates z_pen
(l = 0 for a diagonal P_f). Its exact solution x* is unique in z_pen. Given an answer x and a dual y (Clarabel's z;
OSQP's y), `Certifier.certify` returns a point x_f with slack in K and a number c with ||z_pen,f - z*_pen||_2 <= c:

1. **Active-set polish** (`polish.ActiveSetPolish`): Newton's method on the KKT system of the constraints the answer
   holds active, the active set corrected one change at a time, gives a second pair (x, y) with y in K* and y's and
   the dual residual at round-off. Both the polished and the unpolished pair are certified from scratch (steps 2-5);
   the smaller certificate is kept.
2. **Feasibility repair** (for the cones). x_e = x - A_0^+ (A_0 x - b_0) (least squares, twice) puts x on the zero
   rows to round-off; a variable in a thin slab l <= x_j <= u (`freeze_slabs`) is first clipped into it, and the zero
   rows are restored in the other columns R, so both its rows hold exactly (a slab of width 4e-10 would otherwise make
   theta about 1). A public Slater point x0 (`slater_point`, computed once per problem: max t s.t. A x + s = b, s - t e
   in K, t <= 1, e = 1 on nonneg rows and on each SOC's axis) has, per cone block i, a ball of radius m_i about s_i(x0)
   in K_i (nonneg: s0_i; SOC: (t - ||u||)/sqrt 2). With d_i = dist(s_i(x_e), K_i) and theta = max_i d_i/(d_i + m_i),
   x_f = (1 - theta) x_e + theta x0 has s_f = (1 - theta)(s_e + D) + [theta s0 - (1 - theta) D], D = proj_K(s_e) - s_e,
   and the bracket lies in K since ||(1 - theta) D_i|| <= theta m_i blockwise: s_f is in K in exact arithmetic; the
   floats are a heuristic here, and step 3 proves what they leave (`proven.ProvenCones.proven_room`).
3. **Exact feasibility** (the zero rows; `exact_feasibility.ExactFeasibility.exact_move`). x_f meets A_0 x = b_0
   only to round-off. r_0 = A_0 x_f - b_0 is evaluated exactly (integer arithmetic on the stored floats' dyadic
   rationals, `zero_residual`), and steps 4-5 are taken at a point x'' that meets (C) exactly, E >= ||x'' - x_f||_2
   away:
   - a right inverse of A_0R is proven in floating point once per problem (`right_inverse`: X = pinv(A_0R), F = I -
     A_0R X bounded elementwise with Higham's gamma_n |A_0R| |X|, beta >= ||F||_2, beta < 1/2; Z = X (I - F)^-1 is an
     exact right inverse), so d = Z r_0 puts x_f - d on the zero rows, ||d|| <= ||X r_0|| + ||X|| beta / (1 - beta)
     ||r_0|| (`RightInverse.solution_norm`);
   - d moves s by A d, which would push active blocks out of K: those are held (`held_move`). d solves [A_0R; H] d =
     (r_0, 0), H the active nonneg rows and, per active SOC block, its normal row nu'A_i (nu = (1, -v), v the dual's
     direction), with a right inverse proven per answer; a held SOC block then leaves K by a second-order term
     ||w_u||^2 / (2 ||u||) (about 1e-30) and the rounding of its row, and y_i's_i moves only by that rounding;
   - the balls about the blocks of s(x_f) and s(x0) are proven for the stored floats (`proven_room`: a block that
     lies outside K by round-off has a negative radius, minus how far, which adds to its reach below);
   - what d still pushes out of K (reach_i) is absorbed by the Slater point as in step 2, with x0' = x0 - d0 (d0 its
     own correction, ||d0|| = slater_shift) and margins m_i' = m_i - ||A_i,R|| ||d0|| - (rounding of s(x0)):
     x'' = (1 - theta)(x_f - d) + theta x0', theta = max_i reach_i / (reach_i + m_i'), E = ||d|| + theta (||x0 - x_f||
     + ||d|| + ||d0||);
   - when A_0R is not shown to have full row rank (redundant rows, or a condition number beyond about 1e15) or a
     needed margin m_i' is not positive, the certificate is infinite (fail closed).
   The test `test_an_answer_off_ill_conditioned_zero_rows_by_round_off_is_within_its_certificate` is an answer 2^-56
   off two near-parallel zero rows and 1.8e-8 from the exact projection, which the certificate without this step put
   at 3.2e-12.
4. **Dual lower bound** at x''. For y in K* and any feasible x, y's >= 0, so g(x) >= L(x, y) = 1/2 x'Px + c'x - b'y
   with c = q + A'y. Split x into the columns S with a quadratic term (P_SS positive definite) and the auxiliary ones
   N (P's rows N are 0: CVXPY's epigraph variables). g* = g(x*) >= L(x*, y) >= min_{x_S} L + c_N'x*_N, and without
   cancellation
       g(x'') - g* <= 1/2 r_S'P_SS^-1 r_S + y's'' + c_N'(x''_N - x*_N),   r = P x'' + c (dual residual at x''),  (gap)
   with c_N = r_N, bounded above by 1/2 ||r_S||^2 / lambda_min(P_SS) + y's'' + |r_N|' W, W a proven public bound on
   the width of the feasible set in the columns N (`auxiliary_widths`: x'' and x* are both feasible). A problem with
   auxiliary columns whose feasible set is not shown bounded is not certified (`certifier_for` returns None): its
   `LocalProblem.error_bound` is infinite, which the private calibrations refuse (fail closed). x'' is not formed:
   ||r_S(x'')|| <= ||r_S(x_f)|| + ||P|| E, and y's'' = y_K's_K(x'') (its zero rows are 0) <= y_K's_K(x_f) + drift +
   theta (y_K's_K(x0) + ||A_K'y_K|| ||d0||), the drift from the rows that d moves (`Move`).
5. **Distance.** x'' feasible and x* optimal: g(x'') - g* >= <grad g(x*), x'' - x*> + (mu / 2) ||z_pen'' -
   z*_pen||^2 >= (mu / 2) ||...||^2, so ||z_pen,f - z*_pen||_2 <= sqrt(2 (gap) / mu) + E = c.

Round-off: the rounding of r_S is bounded (gamma = (k + 2) eps on sums of k terms, added to |r_S|); |c_N|'W is
evaluated in rational arithmetic, and y's_f in floating point plus its rounding bound, or in rational arithmetic
when that bound is not small (exact for the stored floats A, b, q, x_f, y, W), rounded up. The cone checks are
proven for the stored floats (`proven`, session 39): step 2's repair is a floating-point heuristic, and step 3 takes
the balls about s(x_f) (and s(x0)) from `ProvenCones.proven_room` (a rounding bound, and rational arithmetic for a
block it does not place inside K): a block that lies outside K by round-off is one more reach for the Slater point.
The dual is put in K* exactly (`ProvenCones.proven_dual`: an SOC block's y_0 raised, in extended precision, when
rational arithmetic finds it short); lambda_min(P_SS) is a proven lower bound (`proven.eigenvalue_floor`: exact for a
diagonal P, the projections' case; a shifted Cholesky factorization with Higham's bound otherwise), and the widths W
of auxiliary columns are proven from Clarabel's duals (`auxiliary_widths`). P - diag(w) >= -l I as built (P = P_f +
diag(w) in floating point; `proven.objective_margin`: l = 0 for a diagonal P_f >= 0, else l = (u max P_jj - m)^+ with
m a proven lower bound on lambda_min(P_f), negative for a singular P_f; not certified: an m < 0 on a column without
the penalty, and an f_p not convex). Not covered: x86's extended precision is assumed
to round as IEEE does.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import clarabel
import numpy as np
import scipy.sparse as sp

from privcvx.localsolve.cvxpy_adapter import ConicData
from privcvx.localsolve.exact_feasibility import ExactFeasibility
from privcvx.localsolve.polish import NEWTON_DAMPING, ActiveSetPolish
from privcvx.localsolve.proven import (
    ProvenCones,
    dyadic,
    dyadic_sum,
    eigenvalue_floor,
    exact,
    objective_margin,
    quadratic_rows,
    rounded_down,
    rounded_up,
    soc_projection,
)

#: The bound on ||z_released - z_exact||_2 over the penalized coordinates that `LocalProblem(..., certified=True)`
#: declares (`LocalProblem.error_bound`; a number declares its own, as OutPert's and DPDG's `solver_error` do):
#: answers whose certificate exceeds it are re-solved, then passed to the next strategy, then refused
#: (`SolverError`). On examples/compare_case14.toml it holds for PR-ADMM and RandomizedADMM in every run
#: (docs/privacy.md, "The solver's error").
CERTIFIED_ERROR = 1e-4

#: The initial active sets of the polish, tried in turn while the certificate is above its target: s_i < ratio y_i
#: (an interior-point answer that has not settled leaves weakly active constraints with s_i above y_i).
ACTIVE_RATIOS = (1.0, 1e4)
#: Steps of the feasibility repair when rounding leaves s_f outside K (theta multiplied by 4 each time).
REPAIR_STEPS = 8
#: The relative cutoff of the zero rows' least squares with frozen columns (`Certifier.freeze_slabs`).
RANK_GAP = 1e-8
#: A bound row whose Slater margin is at most this fraction of the largest makes a thin slab (`Certifier.freeze_slabs`).
THIN_MARGIN = 1e-6


class Block(NamedTuple):
    """One cone block of (C): its kind ("zero", "nonneg" (one row) or "soc"), first row and size."""

    kind: str
    start: int
    size: int


def cone_blocks(cones: list) -> list[Block]:
    """The blocks of Clarabel's cone list in the order of A's rows (a nonneg cone gives one block per row)."""
    blocks, start = [], 0
    for cone in cones:
        name = type(cone).__name__
        size = int(cone.dim if hasattr(cone, "dim") else cone.dimension)
        if name == "NonnegativeConeT":
            blocks += [Block("nonneg", start + i, 1) for i in range(size)]
        elif name in ("ZeroConeT", "SecondOrderConeT"):
            blocks.append(Block("zero" if name == "ZeroConeT" else "soc", start, size))
        else:
            raise ValueError(f"no certificate for the cone {name}")
        start += size
    return blocks


def certifiable_cones(cones: list) -> bool:
    """Whether every cone is one `cone_blocks` knows (zero, nonneg, SOC)."""
    return all(type(cone).__name__ in ("ZeroConeT", "NonnegativeConeT", "SecondOrderConeT") for cone in cones)


def certifier_for(data: ConicData | None, penalized: np.ndarray) -> Certifier | None:
    """The problem's `Certifier`, or None when its answers cannot be certified: no conic data (CVXPY's public path),
    a cone other than zero, nonneg and SOC, an auxiliary column (no quadratic term in f_p and no penalty: the dual
    bound of step 4 is then -inf up to round-off) in a feasible set not shown bounded, or a quadratic term P_f not
    shown PSD up to its round-off, or so only with a negative m on an entry without the penalty
    (`proven.objective_margin`). ``penalized``: the positions in z of the penalized entries."""
    if data is None or not certifiable_cones(data.cones):
        return None
    quadratic = data.P.diagonal() != 0.0  # P is PSD: a zero diagonal entry is a zero row
    quadratic[data.columns[penalized]] = True
    certifier = Certifier(data, np.flatnonzero(~quadratic), data.columns[penalized])
    return certifier if np.all(np.isfinite(certifier.width)) and certifier.objective_margin > -math.inf else None


def _separated_rank(matrix: np.ndarray) -> int | None:
    """The number of singular values above `RANK_GAP` of the largest, or None when one lies between 1e-15 of it
    (round-off) and `RANK_GAP` (a least-squares solve would then depend on the cutoff)."""
    values = np.linalg.svd(matrix, compute_uv=False)
    if not values.size or values[0] == 0.0:
        return 0
    rank = int(np.sum(values > RANK_GAP * values[0]))
    return rank if int(np.sum(values > 1e-15 * values[0])) == rank else None


def _coarser_eps(*arrays: np.ndarray) -> float:
    """The largest unit roundoff of the arrays' precisions (float64, or `polish.EXTENDED` for a refined point or a
    dual raised into K*): a product of two of them is rounded in each operand's precision before they are mixed."""
    return max(float(np.finfo(array.dtype).eps) for array in arrays)


def _quiet_settings() -> clarabel.DefaultSettings:
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.direct_solve_method = "qdldl"
    return settings


class Certificate(NamedTuple):
    """The released point x_f (in K and on the zero rows up to a proven move, module docstring) and c >= ||z_pen,f -
    z*_pen||_2."""

    x: np.ndarray
    distance: float


class Certifier(ActiveSetPolish, ExactFeasibility, ProvenCones):
    """One local problem's public certificate data: cone blocks, the zero rows' least-squares operator, a Slater point.

    ``penalized``: the columns of x that carry the penalty (their weights are passed to `certify`; None: all)."""

    def __init__(self, data: ConicData, auxiliary: np.ndarray, penalized: np.ndarray | None = None) -> None:
        self.data = data
        quadratic = data.P.toarray()
        #: m of `proven` (-inf: P_f not shown PSD enough): m < 0 is of use only when every nonzero row of P_f is
        #: penalized
        self.objective_margin = objective_margin(quadratic)
        if self.objective_margin < 0.0 and penalized is not None and np.setdiff1d(quadratic_rows(quadratic),
                                                                                   penalized).size:
            self.objective_margin = -math.inf
        self.blocks = cone_blocks(data.cones)
        self.A = data.A.toarray()
        self.abs_a = np.abs(self.A)
        self.rows, self.columns = sp.csr_matrix(data.A), sp.csc_matrix(data.A)
        self.b = data.b
        self.equalities = self.A[:data.zero]
        self.conic_blocks = [block for block in self.blocks if block.kind != "zero"]  # `distances`' order
        self.frozen, self.low, self.high = np.zeros(0, dtype=int), np.zeros(0), np.zeros(0)
        self.slab_sides: list[tuple[list[int], list[int]]] = []
        self.free = np.arange(self.A.shape[1])
        self.pinv = np.linalg.pinv(self.equalities) if data.zero else None
        self.x0 = self.slater_point()
        _, self.margin = self.distances(self.b - self.A @ self.x0)
        self.freeze_slabs()
        self.exact_feasibility()
        self.blocks_of_row = {row: block.kind for block in self.blocks
                              for row in range(block.start, block.start + block.size)}
        self.auxiliary = auxiliary
        self.quadratic = np.setdiff1d(np.arange(self.A.shape[1]), auxiliary)
        self.width = self.auxiliary_widths()
        self.hessian: np.ndarray | None = None
        self.key: float | bytes | None = None

    # ---- the public data, once per problem ------------------------------------------------------------------
    def freeze_slabs(self) -> None:
        """Variables in a thin slab l <= x_j <= u (rows -x_j <= -l and x_j <= u; case14's slack bus holds
        |V|^2 = 1.1236 within 4.2e-10) are frozen: `on_equalities` clips them into [l, u], which both rows then hold
        exactly, and restores the zero rows with the other columns. Without it, the repair's theta is about
        violation / (u - l), near 1 after any rounding. A slab is a singleton row (coefficient +-1) on each side,
        one of them with a Slater margin at most `THIN_MARGIN` of the largest; it is frozen only when the other
        columns keep the zero rows' rank with well separated singular values (`_separated_rank`: s37-audit's
        near-parallel rows, singular values 2 and 1.6e-15, passed `matrix_rank` but not `pinv`'s cutoff, and the
        least squares left the zero rows off by 6e-11 at a point 5e4 from the set). Soundness no longer rests on this
        test: step 3 counts any residual the least squares leave (module docstring)."""
        largest = float(np.max(self.margin, initial=0.0))
        bounds: dict[int, list[float]] = {}
        sides: dict[int, tuple[list[int], list[int]]] = {}  # per column: its lower and its upper bound rows
        thin: set[int] = set()
        for block, margin in zip(self.conic_blocks, self.margin, strict=True):
            row = self.A[block.start]
            (column,) = np.flatnonzero(row) if np.count_nonzero(row) == 1 else (None,)
            if block.kind != "nonneg" or column is None or abs(row[column]) != 1.0:
                continue
            low, high = bounds.setdefault(int(column), [-math.inf, math.inf])
            bound = self.b[block.start] * row[column]  # x_j <= b (coefficient 1) or x_j >= -b (coefficient -1)
            bounds[int(column)] = [low, min(high, bound)] if row[column] > 0 else [max(low, bound), high]
            sides.setdefault(int(column), ([], []))[int(row[column] > 0)].append(block.start)
            if margin <= THIN_MARGIN * largest:
                thin.add(int(column))
        frozen = np.array(sorted(j for j in thin if bounds[j][0] <= bounds[j][1]), dtype=int)
        if not frozen.size:
            return
        free = np.setdiff1d(np.arange(self.A.shape[1]), frozen)
        if self.data.zero:
            rank = _separated_rank(self.equalities[:, free])
            if rank is None or rank != _separated_rank(self.equalities):
                return
        self.frozen, self.free = frozen, free
        self.low, self.high = np.array([bounds[j][0] for j in frozen]), np.array([bounds[j][1] for j in frozen])
        self.slab_sides = [sides[j] for j in frozen]
        self.pinv = np.linalg.pinv(self.equalities[:, free], rtol=RANK_GAP) if self.data.zero else None
        self.x0 = self.on_equalities(self.x0)
        _, self.margin = self.distances(self.b - self.A @ self.x0)

    def on_equalities(self, x: np.ndarray) -> np.ndarray:
        """x with its frozen columns clipped into their slabs (`freeze_slabs`), then moved onto A_0 x = b_0 in the
        other columns by least squares, twice (the second pass refines the first's rounding)."""
        x = x.copy()
        x[self.frozen] = np.clip(x[self.frozen], self.low, self.high)
        if self.pinv is None:
            return x
        for _ in range(2):
            x[self.free] -= self.pinv @ (self.equalities @ x - self.b[:self.data.zero])
        return x

    def toward_slater(self, x_e: np.ndarray, theta: float) -> np.ndarray:
        """(1 - theta) x_e + theta x0, with the frozen columns clipped into their slabs (rounding)."""
        x = (1.0 - theta) * x_e + theta * self.x0
        x[self.frozen] = np.clip(x[self.frozen], self.low, self.high)
        return x

    def slater_point(self) -> np.ndarray:
        """max t s.t. A x + s = b, s - t e in K, t <= 1 (public data only), put on the zero rows."""
        data = self.data
        rows, n = self.A.shape
        if all(block.kind == "zero" for block in self.blocks):
            return self.on_equalities(np.zeros(n))
        axis = np.zeros(rows)
        for block in self.blocks:
            if block.kind != "zero":
                axis[block.start] = 1.0
        matrix = sp.vstack([sp.hstack([data.A, sp.csc_matrix(axis[:, None])]),
                            sp.csc_matrix(([1.0], ([0], [n])), shape=(1, n + 1))]).tocsc()
        linear = np.zeros(n + 1)
        linear[n] = -1.0
        solution = clarabel.DefaultSolver(sp.csc_matrix((n + 1, n + 1)), linear, matrix,
                                          np.concatenate([self.b, [1.0]]),
                                          [*data.cones, clarabel.NonnegativeConeT(1)], _quiet_settings()).solve()
        x0 = np.asarray(solution.x)[:n]
        return self.on_equalities(np.where(np.isfinite(x0), x0, 0.0))

    def auxiliary_widths(self) -> np.ndarray:
        """Per auxiliary column j, a proven bound on |x_j - x'_j| over the feasible set: for every column k and sign,
        Clarabel's dual z of min +-x_k, put in K* exactly, bounds +-x_k >= level - ||rho||_1 X on the feasible set
        (`proven.ProvenCones.column_floor`, X = max_k |x_k| there); then X <= max_k |ends_k| / (1 - max ||rho||_1)
        and W_j = (upper_j - lower_j) + (||rho_j^+||_1 + ||rho_j^-||_1) X, rounded up. inf for every column when the
        feasible set is not shown bounded (a solve that fails, or max ||rho||_1 >= 1). Without auxiliary columns
        nothing is solved."""
        if not self.auxiliary.size:
            return np.zeros(0)
        n = self.A.shape[1]
        floors = np.empty((n, 2, 2))  # per column and sign (+x_k, -x_k): the level and ||rho||_1
        for column in range(n):
            for side, sign in enumerate((1.0, -1.0)):
                linear = np.zeros(n)
                linear[column] = sign
                solution = clarabel.DefaultSolver(sp.csc_matrix((n, n)), linear, self.data.A, self.b, self.data.cones,
                                                  _quiet_settings()).solve()
                if str(solution.status) != "Solved" or not np.all(np.isfinite(solution.z)):
                    return np.full(self.auxiliary.size, math.inf)
                floors[column, side] = self.column_floor(np.asarray(solution.z), column, sign)
        lower, upper, slack = floors[:, 0, 0], -floors[:, 1, 0], floors[:, :, 1]
        eps = float(np.finfo(float).eps)
        largest = float(np.max(slack))
        if not largest < 1.0 or not np.all(np.isfinite(floors)):
            return np.full(self.auxiliary.size, math.inf)
        extent = float(np.max(np.maximum(np.abs(lower), np.abs(upper)))) / (1.0 - largest) * (1.0 + 8.0 * eps)
        widths = (np.maximum(upper - lower, 0.0) + slack.sum(axis=1) * extent)[self.auxiliary] * (1.0 + 8.0 * eps)
        return np.nextafter(widths, math.inf)

    def distances(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per non-zero block: dist(s_i, K_i), and the radius of the largest ball about s_i inside K_i."""
        dist, margin = [], []
        for kind, start, size in self.blocks:
            v = s[start:start + size]
            if kind == "nonneg":
                dist.append(max(-v[0], 0.0))
                margin.append(max(v[0], 0.0))
            elif kind == "soc":
                gap = soc_projection(v) - v
                dist.append(float(np.sqrt(gap @ gap)))
                margin.append(max(float(v[0] - np.sqrt(v[1:] @ v[1:])) / math.sqrt(2.0), 0.0))
        return np.array(dist), np.array(margin)

    # ---- per weight vector -----------------------------------------------------------------------------------
    def set_hessian(self, hessian: sp.spmatrix, key: float | bytes | None = None) -> bool:
        """Take the round's P = fl(P_f + diag(w)) (with the penalty), for the weights ``key``, and the strong convexity
        it loses to P_f and rounding (`proven`: (u max_j P_jj - m)^+, taken from min w in `bound`); False when P_SS is
        not shown positive definite or P_f not shown PSD enough (every certificate is then infinite)."""
        self.key = key
        dense = hessian.toarray()
        lowest = eigenvalue_floor(dense[np.ix_(self.quadratic, self.quadratic)])  # P_SS (P's other rows are 0)
        largest = float(np.max(np.abs(np.diag(dense)), initial=0.0))
        margin = self.objective_margin
        if not math.isfinite(margin):  # inf: a diagonal P_f >= 0 loses nothing; -inf: not certified
            self.convexity_loss = 0.0 if margin > 0.0 else math.inf
        else:  # half an ulp of P's diagonal (and a subnormal's), beyond the margin m
            self.convexity_loss = rounded_up(max(exact(0.5 * float(np.finfo(float).eps) * largest)
                                                 + Fraction(2.0 ** -1074) - exact(margin), Fraction(0)))
        if self.convexity_loss == math.inf:
            lowest = min(lowest, 0.0)
        self.hessian, self.lowest = dense, lowest
        self.damping = NEWTON_DAMPING * max(1.0, largest)
        self.abs_p = np.abs(dense)
        inflation = 1.0 + (dense.shape[0] + 2) * float(np.finfo(float).eps)
        self.p_norm = float(np.max(self.abs_p.sum(axis=1), initial=0.0)) * inflation  # >= ||P||_2 (P symmetric)
        return lowest > 0.0

    # ---- per answer ------------------------------------------------------------------------------------------
    def certify(self, x: np.ndarray, y: np.ndarray, q: np.ndarray, min_weight: float,
                target: float = 0.0) -> Certificate:
        """The best of the unpolished certificate of the answer (x, y) and the polished ones (module docstring): the
        first polish always, then from wider initial active sets (`ACTIVE_RATIOS`) while it is above ``target``."""
        best = self.bound(x, y, q, min_weight)
        for ratio in ACTIVE_RATIOS:
            if ratio != ACTIVE_RATIOS[0] and best.distance <= target:  # the first polish always runs
                break
            polished = self.polish(x, y, q, ratio)
            if polished is not None:
                best = min(best, self.bound(*polished, q, min_weight), key=lambda c: c.distance)
        return best

    def bound(self, x: np.ndarray, y: np.ndarray, q: np.ndarray, min_weight: float) -> Certificate:
        """Steps 2-5 of the module docstring for a dual y, first put in K* (`ProvenCones.proven_dual`)."""
        if not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
            return Certificate(x, math.inf)
        y = self.proven_dual(y)
        x_e = self.on_equalities(x)
        dist, _ = self.distances(self.b - self.A @ x_e)
        if np.any((dist > 0.0) & (self.margin <= 0.0)):
            return Certificate(x_e, math.inf)
        theta = float(np.max(dist / np.maximum(dist + self.margin, np.finfo(float).tiny), initial=0.0))
        x_f = x_e if theta == 0.0 else self.toward_slater(x_e, theta)
        for _ in range(REPAIR_STEPS):  # a theta below round-off moves nothing: larger steps toward x0
            slack = self.b - self.A @ x_f
            dist, _ = self.distances(slack)
            if not np.any(dist > 0.0):
                break
            theta = max(4.0 * theta, 64.0 * float(np.finfo(x_e.dtype).eps))
            x_f = self.toward_slater(x_e, theta)
        else:
            return Certificate(x_f, math.inf)
        y_cones = y.copy()
        y_cones[:self.data.zero] = 0.0  # y's'' = y_K's_K'': the zero rows of s'' are 0
        delta, step, drift = self.exact_move(x_f, slack, self.proven_room(x_f, slack), y_cones)
        if not self.lowest > 0.0 or not math.isfinite(delta):
            return Certificate(x_f, math.inf)
        move = delta + step * (float(np.linalg.norm(self.x0 - x_f)) * (1.0 + 1e-12) + delta + self.slater_shift)
        n, rows = x.size, self.b.size
        # r = P x_f + q + A'y with the bound on its rounding (gamma_k |terms|, k terms per sum, in the precision of
        # x_f or y, the coarser: float64, or `polish.EXTENDED` for a refined point); y's_f exactly
        r = self.hessian @ x_f + q + self.A.T @ y
        eps = _coarser_eps(x_f, y)  # P x_f is rounded in x_f's precision, A'y in y's
        r_round = (n + rows + 2) * eps * (self.abs_p @ np.abs(x_f) + np.abs(q) + self.abs_a.T @ np.abs(y))
        # (1 - theta) y_K's_K(x_f - d) + theta y_K's_K(x0')
        complementarity = max(self.complementarity_bound(x_f, y_cones) + drift, 0.0)
        if step > 0.0:
            at_slater = float(y_cones @ self.slater_slack + np.abs(y_cones) @ (
                self.slack_round + (rows + 2) * eps * np.abs(self.slater_slack)))
            complementarity += step * max(at_slater + self.pull(np.abs(y_cones)) * self.slater_shift, 0.0)
        bound_r = np.abs(r) + r_round
        residual = float(np.linalg.norm(bound_r[self.quadratic])) + self.p_norm * move  # r'' = r + P (x'' - x_f)
        auxiliary = self.auxiliary_term(y, q)
        gap = 0.5 * residual ** 2 / self.lowest + complementarity + auxiliary
        released = x_f.astype(np.float64)  # a refined x_f is rounded to the float64 that is released: + its distance
        rounding = float(np.sqrt(np.sum((released - x_f) ** 2))) if x_f.dtype != np.float64 else 0.0
        modulus = rounded_down(exact(min_weight) - exact(self.convexity_loss))  # strong convexity in z_pen
        if not modulus > 0.0:
            return Certificate(released, math.inf)
        return Certificate(released, (math.sqrt(2.0 * gap / modulus) + move + rounding) * (1.0 + 1e-12))

    def complementarity_bound(self, x: np.ndarray, y: np.ndarray) -> float:
        """An upper bound on y's with s = b - Ax: in floating point plus its rounding bound (gamma_k on sums of k
        terms) when that bound is below 1e-3 of the value, else in rational arithmetic on the rows where y is not 0
        (exact for the stored floats), rounded up."""
        product = y @ (self.b - self.A @ x)
        value, eps = float(product), _coarser_eps(x, y)
        rounding = (x.size + self.b.size + 4) * eps * float(np.abs(y) @ (np.abs(self.b) + self.abs_a @ np.abs(x)))
        if rounding <= 1e-3 * abs(value):
            return value + rounding
        products = []
        for row in np.flatnonzero(y):
            (dual, dual_k), (slack, slack_k) = dyadic(y[row]), self.exact_slack(x, row)
            products.append((dual * slack, dual_k + slack_k))
        total, k = dyadic_sum(products)
        return rounded_up(Fraction(total, 1 << k))

    def auxiliary_term(self, y: np.ndarray, q: np.ndarray) -> float:
        """|c_N|' W with c_N = q_N + A_N'y in rational arithmetic (exact for the stored floats), rounded up."""
        total = Fraction(0)
        for position, column in enumerate(self.auxiliary):
            start, end = self.columns.indptr[column], self.columns.indptr[column + 1]
            value = Fraction(float(q[column]))
            for row, entry in zip(self.columns.indices[start:end], self.columns.data[start:end], strict=True):
                value += exact(entry) * exact(y[row])
            total += abs(value) * Fraction(float(self.width[position]))
        return rounded_up(total)
