"""Step 3 of `certificate`: a point that meets (C) exactly, within a proven distance of the released one.

The released x_f meets the zero rows A_0 x = b_0 only to round-off. `ExactFeasibility.exact_move` bounds the distance
to a point x'' = (1 - theta)(x_f - d) + theta x0' that meets them, and the cones, exactly: r_0 = A_0 x_f - b_0 is
evaluated exactly (`zero_residual`, integer arithmetic on the stored floats), a right inverse of A_0R (R the free
columns) is proven in floating point (`right_inverse`), d holds the slacks of the blocks it would push out of K
(`held_move`), and the public Slater point absorbs what is left (`slater_move`). `certificate.Certifier.bound` takes
its dual bound at x'' and adds ||x'' - x_f||. Without a proven right inverse the step is uncertifiable (fail closed).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse as sp

from privcvx.localsolve.proven import dyadic, dyadic_sum

if TYPE_CHECKING:
    from privcvx.localsolve.certificate import Block

#: Passes of `ExactFeasibility.exact_move` that add the blocks its move pushes out of K to those it holds.
HOLD_PASSES = 3

def block_norm(values: np.ndarray, block: Block) -> float:
    """The l2 (Frobenius) norm of a block's rows of a vector or matrix."""
    return float(np.linalg.norm(values[block.start:block.start + block.size]))


def _dyadic_upper(numerator: int, k: int) -> float:
    """The float |numerator| / 2**k rounded up (inf on overflow)."""
    size = abs(numerator)
    drop = max(size.bit_length() - 64, 0)
    with np.errstate(over="ignore"):
        try:
            value = math.ldexp(float((size >> drop) + (drop > 0)), drop - k)
        except OverflowError:
            return math.inf
    return math.nextafter(value, math.inf) if size else 0.0


class RightInverse(NamedTuple):
    """A float X with M X = I - F, ||F||_2 <= beta < 1 and ||X||_2 <= norm, both proven (`right_inverse`): then
    Z = X (I - F)^-1 is an exact right inverse of M, so M d = r has the solution d = Z r, ||Z r||_2 <= ||X r||_2 +
    norm beta / (1 - beta) ||r||_2, and the least-norm solution M^+ r is no longer."""

    matrix: np.ndarray
    beta: float
    norm: float

    def solution_norm(self, residual: np.ndarray, bound: float) -> float:
        """An upper bound on ||M^+ r||_2 for a float ``residual`` within ``bound`` (l2) of r."""
        eps = float(np.finfo(float).eps)
        rows = residual.size
        image = self.matrix @ residual
        rounding = (rows + 2) * eps * (np.abs(self.matrix) @ np.abs(residual))
        total = float(np.linalg.norm(image)) + float(np.linalg.norm(rounding)) + self.norm * (
            bound + self.beta / (1.0 - self.beta) * (float(np.linalg.norm(residual)) + bound))
        return total * (1.0 + 1e-12)


def right_inverse(matrix: np.ndarray) -> RightInverse | None:
    """A proven right inverse of M (`RightInverse`), or None when M is not shown to have full row rank. X = M'(M M')^-1
    by Cholesky, or pinv(M) when that fails (nothing is assumed of X); F = I - M X is bounded elementwise by
    |fl(I - fl(M X))| (1 + eps) + (n + 2) eps |M| |X| (Higham's |fl(A B) - A B| <= gamma_n |A| |B| for inner dimension
    n, any order of summation, plus the subtraction's rounding), beta by its Frobenius norm, ||X||_2 by
    min(||X||_F, sqrt(||X||_1 ||X||_inf)). With pinv this does not square M's condition number (a proof through the
    Gram matrix M M' would: sigma_min below 1e-8 sigma_max is lost in its rounding)."""
    for method in ("cholesky", "pinv"):
        with np.errstate(all="ignore"):
            try:
                inverse = scipy.linalg.cho_solve(scipy.linalg.cho_factor(matrix @ matrix.T), matrix).T \
                    if method == "cholesky" else np.linalg.pinv(matrix)
            except (np.linalg.LinAlgError, ValueError):
                continue
            proven = _proven(matrix, inverse) if np.all(np.isfinite(inverse)) else None
        if proven is not None:
            return proven
    return None


def _proven(matrix: np.ndarray, inverse: np.ndarray) -> RightInverse | None:
    """`right_inverse`'s bounds for a float X, or None when beta is not below 1/2."""
    rows, columns = matrix.shape
    eps = float(np.finfo(float).eps)
    left = np.eye(rows) - matrix @ inverse
    error = (1.0 + eps) * np.abs(left) + (columns + 2) * eps * (np.abs(matrix) @ np.abs(inverse))
    inflation = 1.0 + (rows + columns + 2) ** 2 * eps
    beta = float(np.linalg.norm(error)) * inflation
    absolute = np.abs(inverse)
    norm = min(float(np.linalg.norm(inverse)),
               math.sqrt(float(np.max(absolute.sum(axis=0))) * float(np.max(absolute.sum(axis=1))))) * inflation
    return RightInverse(inverse, beta, norm) if beta < 0.5 and math.isfinite(norm) else None


def _without_multiples(rows: list[tuple[list[int], list[tuple[int, int]], tuple[int, int]]]) -> list[int]:
    """The rows (columns, dyadic entries, dyadic b) that are not an exact rational multiple of an earlier row kept,
    entries and b alike (``x == 1`` stated twice, or scaled)."""
    kept: dict[tuple[int, ...], list[int]] = {}
    for number, (columns, entries, b) in enumerate(rows):
        values = [Fraction(n, 1 << k) for n, k in [*entries, b]]
        if not columns and not values[-1]:
            continue  # 0 = 0
        pattern = (*columns, -1 if values[-1] else -2)
        multiple = False
        for other in kept.get(pattern, []):
            theirs = [Fraction(n, 1 << k) for n, k in [*rows[other][1], rows[other][2]]]
            ratio = values[0] / theirs[0]
            if all(mine == ratio * their for mine, their in zip(values, theirs, strict=True)):
                multiple = True
                break
        if not multiple:
            kept.setdefault(pattern, []).append(number)
    return sorted(number for numbers in kept.values() for number in numbers)


class Move(NamedTuple):
    """Step 3 of the module docstring: x'' = (1 - theta)(x_f - d) + theta x0' meets (C) exactly, with ||d||_2 <= delta
    and y_K's_K(x_f - d) <= y_K's_K(x_f) + drift."""

    delta: float
    theta: float
    drift: float


_NO_MOVE = Move(math.inf, 1.0, math.inf)



class ExactFeasibility:
    """Step 3 (a mixin of `certificate.Certifier`: it reads the certifier's A, b, blocks, free columns, Slater point
    and margins)."""

    def exact_feasibility(self) -> None:
        """The public data of `exact_move`, once per problem (after `freeze_slabs`): the zero rows' terms as dyadic
        rationals, less exact multiples of other rows (`_without_multiples`: they hold wherever those do); a proven
        right inverse of A_0R (R the free columns, A_0 those rows; `right_inverse`; None when A_0R is not shown to
        have full row rank: every certificate is then infinite); per cone block the norm of its rows in R; the
        Slater point's distance slater_shift to x0' = x0 - A_0R^+ (A_0 x0 - b_0), and the radii slater_margin of
        balls in K about the blocks of s(x0') (`proven.ProvenCones.proven_room` of s(x0), less that move; negative:
        minus how far the block may lie outside K)."""
        zero, eps = self.data.zero, float(np.finfo(float).eps)
        rows = sp.csr_matrix(self.equalities)
        terms = [([int(j) for j in rows.indices[rows.indptr[i]:rows.indptr[i + 1]]],
                  [dyadic(v) for v in rows.data[rows.indptr[i]:rows.indptr[i + 1]]], dyadic(self.b[i]))
                 for i in range(zero)]
        self.independent = _without_multiples(terms)
        self.zero_terms = [terms[i] for i in self.independent]
        self.zero_rows = self.equalities[self.independent]
        self.zero_inverse = right_inverse(self.zero_rows[:, self.free]) if self.zero_terms else None
        on_free = self.A[:, self.free]
        self.abs_free = np.abs(on_free)
        self.block_norms = np.array([block_norm(on_free, block) for block in self.conic_blocks]) * (1.0 + 1e-12)
        self.slater_slack = self.b - self.A @ self.x0
        self.slack_round = (self.A.shape[1] + 2) * eps * (np.abs(self.b) + self.abs_a @ np.abs(self.x0))
        self.slater_shift = self.equality_distance(self.x0) if self.zero_terms else 0.0
        if not math.isfinite(self.slater_shift):
            self.slater_margin = np.full(len(self.conic_blocks), -math.inf)
            return
        self.slater_margin = self.proven_room(self.x0, self.slater_slack) - self.block_norms * self.slater_shift

    def zero_residual(self, x: np.ndarray) -> tuple[np.ndarray, float]:
        """A_0 x - b_0 exact for the stored floats (integer arithmetic on dyadic rationals), rounded to floats, and a
        bound on the l2 norm of that rounding."""
        values: dict[int, tuple[int, int]] = {}
        residual = np.zeros(len(self.zero_terms))
        for i, (columns, entries, (b_numerator, b_k)) in enumerate(self.zero_terms):
            terms = [(-b_numerator, b_k)]
            for column, (numerator, shift) in zip(columns, entries, strict=True):
                if column not in values:
                    values[column] = dyadic(x[column])
                x_numerator, x_k = values[column]
                terms.append((numerator * x_numerator, shift + x_k))
            total, k = dyadic_sum(terms)
            residual[i] = math.copysign(_dyadic_upper(total, k), total)
        # |r_i - residual_i| <= 2 ulp(residual_i) <= 4 eps |residual_i| (normal numbers; 1e-300 covers subnormals)
        return residual, (4.0 * float(np.finfo(float).eps) * float(np.linalg.norm(residual)) + 1e-300) * (1.0 + 1e-12)

    def equality_distance(self, x: np.ndarray) -> float:
        """An upper bound on ||A_0R^+ (A_0 x - b_0)||_2 (`RightInverse.solution_norm`); inf without a proven right
        inverse of A_0R."""
        if self.zero_inverse is None:
            return math.inf
        residual, error = self.zero_residual(x)
        return self.zero_inverse.solution_norm(residual, error) if math.isfinite(error) else math.inf

    def exact_move(self, x_f: np.ndarray, slack: np.ndarray, own: np.ndarray, y: np.ndarray) -> Move:
        """Step 3 of the module docstring (`Move`): d with the slacks of the blocks it would push out of K held
        (`held_move`), else d = A_0R^+ r_0 and the Slater point; delta inf when neither is shown to exist. ``slack``:
        s(x_f); ``own``: the radii of balls in K about its blocks, proven for the exact s(x_f) (negative: minus how
        far the block may lie outside K, which the Slater point absorbs; `proven.ProvenCones.proven_room`); ``y``:
        the dual, 0 on the zero rows."""
        if not self.zero_terms:
            return self.slater_move(0.0, -own, 0.0)
        if self.zero_inverse is None:
            return _NO_MOVE
        residual, error = self.zero_residual(x_f)
        delta = self.zero_inverse.solution_norm(residual, error)
        if not math.isfinite(delta):
            return _NO_MOVE
        reach = self.block_norms * delta - own
        active = reach > 0.0
        if not np.any(active):
            return Move(delta, 0.0, self.pull(np.abs(y)) * delta)
        pressed = np.array([bool(np.any(y[block.start:block.start + block.size])) for block in self.conic_blocks],
                           dtype=bool)
        rounding = (x_f.size + 2) * float(np.finfo(x_f.dtype).eps) * (
            np.abs(self.b) + self.abs_a @ np.abs(x_f).astype(np.float64))  # |fl(s) - s|
        for held in {active.tobytes(): active, (active | pressed).tobytes(): active | pressed}.values():
            move = None
            for _ in range(HOLD_PASSES):  # blocks that d pushes out of K are held too
                attempt = self.held_move(residual, error, (slack, rounding), own, y, held)
                if attempt is None:
                    break
                move, pushed = attempt
                if not np.any(pushed[~held] > 0.0):
                    break
                held = held | (pushed > 0.0)
            if move is not None:
                return move
        return self.slater_move(delta, reach, self.pull(np.abs(y)) * delta)

    def held_move(self, residual: np.ndarray, error: float, slack: tuple[np.ndarray, np.ndarray], own: np.ndarray,
                  y: np.ndarray, held: np.ndarray) -> tuple[Move, np.ndarray] | None:
        """d with A_0R d = r_0 that holds the slack of each ``held`` nonneg row (A_i d = 0) and, on each held SOC
        block s = (t, u), its normal component: nu'A_i d = tau, nu = (1, -v), v = -y_1/y_0 (the dual's direction) or
        u/||u||, |tau| <= the rounding of the float row nu'A_i (the row held). Then s_i(x_f - d) = s_i + w, w = A_i d,
        leaves K by at most (u/||u|| - v)'w_u + |tau| + ||w_u||^2 / (2 ||u||) (||u + w_u|| <= ||u|| + u'w_u/||u|| +
        ||w_u||^2 / (2 ||u||), t >= ||u||), which the Slater point absorbs (theta about 1e-30), and y_i's_i changes by
        y_0 tau only. The Move and how far d (or the second-order term) pushes each block out of K; None when the rows
        are not shown independent (`right_inverse`) or an SOC block is at its apex."""
        eps = float(np.finfo(float).eps)
        slack, slack_round = slack
        rows, cones, weights = [self.zero_rows], [], np.abs(y)
        for number in np.flatnonzero(held):
            kind, start, size = self.conic_blocks[number]
            if kind == "nonneg":
                rows.append(self.A[start:start + 1])
                weights[start] = 0.0
                continue
            u, dual = slack[start + 1:start + size].astype(np.float64), y[start:start + size]
            length = float(np.linalg.norm(u))
            if not length > 2.0 * block_norm(slack_round, self.conic_blocks[number]):
                return None
            direction = -dual[1:].astype(np.float64) / float(dual[0]) if dual[0] > 0.0 else u / length
            row = self.A[start] - direction @ self.A[start + 1:start + size]
            rows.append(row[None, :])
            rounding = (size + 2) * eps * (self.abs_a[start] + np.abs(direction) @ self.abs_a[start + 1:start + size])
            cones.append((number, length, direction, float(np.linalg.norm(rounding[self.free]))))
            weights[start:start + size] = 0.0
        inverse = right_inverse(np.vstack(rows)[:, self.free])
        if inverse is None:
            return None
        delta = inverse.solution_norm(np.concatenate([residual, np.zeros(len(rows) - 1)]), error)
        reach = self.block_norms * delta - own
        reach[held] = -own[held]  # a held nonneg row's slack does not move
        drift = self.pull(weights) * delta
        for number, length, direction, rounding in cones:
            block = self.conic_blocks[number]
            moved, tau = self.block_norms[number] * delta, rounding * delta
            shift = 2.0 * block_norm(slack_round, block)  # >= ||u - fl(u)||: the direction of the exact u
            tilt = float(np.linalg.norm(slack[block.start + 1:block.start + block.size].astype(np.float64) / length
                                        - direction)) + 2.0 * shift / length + 8.0 * eps * block.size
            reach[number] = (tilt * moved + tau + moved ** 2 / (2.0 * (length - shift)) + max(-own[number], 0.0)) * (
                1.0 + 1e-12)
            if y[block.start] > 0.0:
                drift += float(y[block.start]) * (tau + 4.0 * eps * float(np.linalg.norm(direction)) * moved)
        return self.slater_move(delta, reach, drift), reach

    def slater_move(self, delta: float, reach: np.ndarray, drift: float) -> Move:
        """The `Move` with d (``delta``, ``drift``) and the smallest theta whose step toward x0' puts back into K every
        block that d leaves by at most ``reach`` (a negative reach: a ball of radius -reach in K about the block),
        provided every block of s(x0') that may lie outside K (slater_margin < 0) is absorbed by its ball:
        (1 - theta)(-reach_i) >= theta |slater_margin_i|."""
        pushed = reach > 0.0
        if not np.any(pushed):
            return Move(delta, 0.0, drift)
        if np.any(self.slater_margin[pushed] <= 0.0):
            return _NO_MOVE
        theta = float(np.max(reach[pushed] / (reach[pushed] + self.slater_margin[pushed]))) * (1.0 + 1e-12)
        short = self.slater_margin < 0.0
        if np.any((1.0 - theta) * -reach[short] < theta * -self.slater_margin[short] * (1.0 + 1e-12)):
            return _NO_MOVE
        return Move(delta, theta, drift) if theta < 1.0 else _NO_MOVE

    def pull(self, weights: np.ndarray) -> float:
        """An upper bound on ||A' w||_2 for w = |y| on the rows whose slacks move."""
        inflation = 1.0 + 4.0 * (self.b.size + 2) * float(np.finfo(float).eps)
        return float(np.linalg.norm(self.abs_free.T @ weights)) * inflation
