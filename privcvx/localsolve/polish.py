"""Step 1 of `certificate`: the active-set polish of a solver's answer to (C).

With s = b - Ax: a nonneg row with s_i < y_i is active (s_i = 0 becomes an equality); an SOC block whose distance to
the boundary, (s_0 - ||s_1||)/sqrt 2, is below ||y_i|| is active (s_0 = ||s_1|| becomes an equality); of a thin
slab's two bound rows (`Certifier.freeze_slabs`) only the side its multipliers press. Newton's method on the KKT
system of min g s.t. the zero rows and these equalities (`newton`, damped on the auxiliary columns, which the active
set may leave undetermined) moves (x, multipliers) to the active set's KKT point; a multiplier that turns negative,
a row that the others keep from holding, or a constraint that the new point violates corrects the active set, one
change at a time (`correction`). The dual is the multipliers: free on zero rows, mu_i >= 0 on active nonneg rows,
mu_i (1, u_i) on an active SOC block with u_i = -s_1/||s_1|| (s_i lies on the ray alpha (1, -u_i), so y_i's_i = 0),
0 on inactive blocks: y is in K*, y's is at round-off and the dual residual r = P x + q + A'y too.

Nothing here is trusted: `Certifier.bound` certifies the polished pair from scratch, as it does the solver's.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg

if TYPE_CHECKING:
    from privcvx.localsolve.certificate import Block

_EPS = np.finfo(float).eps
#: The extended precision of the polish's last Newton steps (x86's 80-bit long double: eps 1.1e-19) and of the
#: certificate's repair and residuals (`Certifier.bound`). On a platform where it is float64, nothing changes.
EXTENDED = np.longdouble
#: The extended-precision Newton steps that end the polish (mixed-precision refinement).
REFINEMENT_ITERATIONS = 3
#: Newton steps of the polish at most (from an interior-point answer, two reach round-off on case14's zones).
POLISH_ITERATIONS = 8
#: Corrections of the polish's active set (a negative multiplier leaves, a violated constraint joins).
ACTIVE_SET_PASSES = 64
#: An active row leaves when its slack stays above this many times the round-off level at which a violated row joins
#: (hysteresis: a dense KKT solve leaves active rows at 1e-14 to 1e-13, and equal thresholds made rows cycle).
HELD_FACTOR = 1e3
#: The polish's Newton steps add this (times max |P_ii|) to the auxiliary columns' curvature: where the active set
#: leaves them undetermined (a singular KKT matrix), an LU solve returned steps of 1e5 with a small residual.
NEWTON_DAMPING = 1e-9


class ActiveSetPolish:
    """The polish of `Certifier` (a mixin: it reads the certifier's A, b, blocks, Hessian and auxiliary columns)."""

    def active_set(self, s: np.ndarray, y: np.ndarray, ratio: float = 1.0) -> tuple[list[int], list[Block]]:
        """The rows and SOC blocks kept as equalities in the polish (step 1): every zero row, nonneg rows with
        s_i < ratio y_i, SOC blocks closer to the boundary than ratio ||y_i|| (not at the apex); of a thin slab's
        two sides (`freeze_slabs`) only those of the side with the larger multiplier (an interior-point answer has
        both active, and a multiplier on each side costs y_i (u - l) in the certificate's y's)."""
        rows, cones = [], []
        y = ratio * y
        for block in self.blocks:
            kind, start, size = block
            if kind == "zero" or (kind == "nonneg" and s[start] < y[start]):
                rows += range(start, start + size)
            elif kind == "soc":
                v, w = s[start:start + size], y[start:start + size]
                if (v[0] - float(np.linalg.norm(v[1:]))) / math.sqrt(2.0) < float(np.linalg.norm(w)):
                    cones.append(block)
        for lower, upper in self.slab_sides:  # one side of a thin slab: the one its net multiplier presses
            side = upper if y[upper].sum() >= y[lower].sum() else lower
            rows = [row for row in rows if row not in lower + upper or row in side]
        return rows, cones

    def polish(self, x: np.ndarray, y: np.ndarray, q: np.ndarray,
               ratio: float = 1.0) -> tuple[np.ndarray, np.ndarray] | None:
        """Step 1 of the module docstring: Newton's method on the KKT system of the active-set problem from (x, y),
        the active set corrected up to `ACTIVE_SET_PASSES` times (`correction`); the polished x and its dual in K*,
        or None if it fails."""
        if not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
            return None
        y = self.dual_cone_projection(y)
        rows, cones = self.active_set(self.b - self.A @ x, y, ratio)
        start_x = x
        for passes in range(ACTIVE_SET_PASSES):
            multipliers = np.concatenate([y[rows], [y[block.start] for block in cones]])
            answer = self.newton(start_x, multipliers, q, np.array(rows, dtype=int), cones)
            if answer is None:
                return None
            x, multipliers = answer
            s = self.b - self.A @ x
            change = self.correction(rows, cones, multipliers, s, x)
            if change is None:
                break
            if passes == ACTIVE_SET_PASSES - 1:
                return None
            y = np.zeros_like(y)
            y[rows] = multipliers[:len(rows)]
            for block, value in zip(cones, multipliers[len(rows):], strict=True):
                y[block.start] = value
            joins, item = change
            if joins:  # a violated block joins
                rows, cones = (rows + [item.start], cones) if item.kind == "nonneg" else (rows, cones + [item])
            else:  # a row or a cone leaves
                rows = [row for row in rows if row != item]
                cones = [block for block in cones if block != item]
        rows_array = np.array(rows, dtype=int)
        refined = self.newton(x, multipliers, q, rows_array, cones, extended=True)
        if refined is not None:
            x, multipliers = refined
            s = self.b - self.A @ x
        dual = np.zeros(y.shape, dtype=multipliers.dtype)
        dual[rows_array] = multipliers[:len(rows)]
        for block, value in zip(cones, multipliers[len(rows):], strict=True):
            s_1 = s[block.start + 1:block.start + block.size]
            dual[block.start:block.start + block.size] = value * np.concatenate([[1.0], -s_1 / np.sqrt(s_1 @ s_1)])
        return x, self.dual_cone_projection(dual)

    def correction(self, rows: list[int], cones: list[Block], multipliers: np.ndarray, s: np.ndarray,
                   x: np.ndarray) -> tuple[bool, int | Block] | None:
        """One change of the polish's active set, (joins, row or block), or None when it is settled: first a nonneg
        row whose slack stays above `HELD_FACTOR` times round-off (the rows kept cannot all hold: e.g. l <= x_k <= u
        with u - l = 4e-10, both active in the interior-point answer; the one with the smaller multiplier leaves),
        then the most negative multiplier (below -1e-9 of the largest) leaves, then the most violated constraint joins
        (a violation above round-off).
        One at a time, as a primal active-set method: a degenerate vertex otherwise makes the set cycle."""
        loose = 64.0 * _EPS * (1.0 + np.abs(self.b) + self.abs_a @ np.abs(x))
        nonneg = [(value, row) for row, value in zip(rows, multipliers, strict=False)
                  if self.blocks_of_row[row] == "nonneg"]
        held = [(value, row) for value, row in nonneg if s[row] > HELD_FACTOR * loose[row]]
        if held:
            return False, min(held)[1]
        small = -1e-9 * float(np.max(np.abs(multipliers), initial=0.0))
        negative = [(value, row) for value, row in nonneg if value < small]
        negative += [(value, block) for block, value in zip(cones, multipliers[len(rows):], strict=True)
                     if value < small]
        if negative:
            return False, min(negative, key=lambda pair: pair[0])[1]
        dist, _ = self.distances(s)
        violated = [(d, block) for block, d in zip(self.conic_blocks, dist, strict=True)
                    if d > loose[block.start] and block.start not in rows and block not in cones]
        return (True, max(violated, key=lambda pair: pair[0])[1]) if violated else None

    def newton(self, x: np.ndarray, multipliers: np.ndarray, q: np.ndarray, rows: np.ndarray,
               cones: list[Block], extended: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
        """`POLISH_ITERATIONS` Newton steps on the KKT system of min g s.t. s_rows = 0, ||s_1|| = s_0 on the cones.
        ``extended``: mixed-precision refinement, x, the multipliers and the residuals in `EXTENDED` (the KKT matrix
        and its solve in float64), so that the active constraints hold to about its eps (1e-19), not float64's.
        The KKT matrix is sparse (`_NewtonOperators`; an SOC block's curvature on its columns' support) and factored
        by a sparse LU; scipy's sparse products keep a long double vector in long double."""
        dtype = EXTENDED if extended else np.float64
        x, multipliers = x.astype(dtype), multipliers.astype(dtype)
        operators = self._newton_operators()
        a_sparse, hessian, n, m = operators.a, operators.hessian, x.size, rows.size
        a_lin = a_sparse[rows].tocoo()
        linear = (np.concatenate([a_lin.row + n, a_lin.col]), np.concatenate([a_lin.col, a_lin.row + n]),
                  np.concatenate([a_lin.data, a_lin.data]))
        a_lin = a_lin.tocsr()
        supports = [operators.support(block) for block in cones]
        tolerance = 4.0 * float(np.finfo(dtype).eps)
        for _ in range(REFINEMENT_ITERATIONS if extended else POLISH_ITERATIONS):
            s = self.b - a_sparse @ x
            values, gradient = [a_lin @ x - self.b[rows]], hessian @ x + q + a_lin.T @ multipliers[:m]
            triplets = [operators.curvature, linear]
            for k, (block, (columns, dense, square)) in enumerate(zip(cones, supports, strict=True)):
                s_1 = s[block.start + 1:block.start + block.size]
                norm = np.sqrt(s_1 @ s_1)
                if not norm > 0.0:
                    return None
                u = -s_1 / norm  # h(x) = ||s_1|| - s_0, grad h = A_i'(1, u), Hess h = A_1'(I - u u')A_1 / ||s_1||
                row = dense[0] + u @ dense[1:]  # grad h on the block's columns
                gradient[columns] += multipliers[m + k] * row
                values.append(np.array([norm - s[block.start]]))
                rounded = u.astype(np.float64)
                projected = dense[1:] - np.outer(rounded, rounded @ dense[1:])
                product = float(multipliers[m + k] / norm) * (dense[1:].T @ projected)
                index = np.full(columns.size, n + m + k)
                row = row.astype(np.float64)
                triplets += [(*square, product.ravel()), (index, columns, row), (columns, index, row)]
            size = n + m + len(cones)
            index_rows, index_columns, entries = (np.concatenate(part) for part in zip(*triplets, strict=True))
            kkt = sp.csc_matrix((entries, (index_rows, index_columns)), shape=(size, size))  # duplicates summed
            rhs = -np.concatenate([gradient, *values]).astype(np.float64)
            step = _kkt_solve(kkt, rhs)
            if not np.all(np.isfinite(step)):
                return None
            x, multipliers = x + step[:n], multipliers + step[n:]
            settled = [np.linalg.norm(part) <= tolerance * (1.0 + float(np.linalg.norm(value.astype(np.float64))))
                       for part, value in ((step[:n], x), (step[n:], multipliers))]
            if all(settled):  # x and the multipliers each (the multipliers' scale must not excuse x's step)
                break
        return x, multipliers

    def _newton_operators(self) -> _NewtonOperators:
        """`newton`'s sparse operators: the certifier's CSR copy of A (``rows``), and a sparse copy of its Hessian
        made once per `set_hessian` (the certifier keeps the Hessian dense for its other steps)."""
        cached = getattr(self, "_polish_operators", None)
        if cached is None:
            cached = _NewtonOperators(self.rows)
            self._polish_operators = cached
        if cached.dense_hessian is not self.hessian:
            cached.set_hessian(self.hessian, self.auxiliary, self.damping)
        return cached


class _NewtonOperators:
    """The sparse operators of `ActiveSetPolish.newton`: A, the Hessian, the KKT matrix's constant curvature (the
    Hessian plus `NEWTON_DAMPING` on the auxiliary columns) as (row, column, value) triplets, and each SOC block's
    column support."""

    def __init__(self, a: sp.csr_matrix) -> None:
        self.a = a
        self.dense_hessian: np.ndarray | None = None
        self.supports: dict[int, tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]] = {}

    def set_hessian(self, hessian: np.ndarray, auxiliary: np.ndarray, damping: float) -> None:
        """The sparse Hessian and the constant curvature's triplets for the certifier's current Hessian."""
        self.dense_hessian, self.hessian = hessian, sp.csr_matrix(hessian)
        coo = self.hessian.tocoo()
        self.curvature = (np.concatenate([coo.row, auxiliary]), np.concatenate([coo.col, auxiliary]),
                          np.concatenate([coo.data, np.full(len(auxiliary), damping)]))

    def support(self, block: Block) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """The columns where an SOC block's rows are nonzero, the block on them (dense), and the (row, column)
        indices of a square matrix on them (row-major)."""
        if block.start not in self.supports:
            rows = self.a[block.start:block.start + block.size]
            columns = np.unique(rows.indices)
            square = (np.repeat(columns, columns.size), np.tile(columns, columns.size))
            self.supports[block.start] = (columns, rows[:, columns].toarray(), square)
        return self.supports[block.start]


def _kkt_solve(kkt: sp.csc_matrix, rhs: np.ndarray) -> np.ndarray:
    """The Newton step: a sparse LU solve, or least squares (on the dense matrix) where the factorization is
    singular or its residual is above 1e-9 (1 + ||rhs||): degenerate active sets."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.sparse.linalg.MatrixRankWarning)
        try:
            step = scipy.sparse.linalg.splu(kkt).solve(rhs)
        except RuntimeError:  # "Factor is exactly singular"
            step = np.full(rhs.shape, np.nan)
        scale = 1e-9 * (1.0 + np.linalg.norm(rhs))
        if np.all(np.isfinite(step)) and np.linalg.norm(kkt @ step - rhs) <= scale:
            return step
        return scipy.linalg.lstsq(kkt.toarray(), rhs, lapack_driver="gelsy")[0]
