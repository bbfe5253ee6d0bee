"""The cone checks and the curvature of `certificate`, proven for the stored floats (directed rounding, Higham-type
error bounds, exact rational arithmetic where those do not decide).

- **Cone membership of a slack** (`ProvenCones.proven_room`): per cone block of s = b - Ax, a lower bound on the
  radius of a ball about the exact s_i inside K_i, or, when s_i may lie outside K_i, minus an upper bound on
  dist(s_i, K_i). First in floating point with the rounding bound |fl(s) - s| <= gamma_(n+2) (|b| + |A||x|); a block
  that this does not place inside K_i is evaluated exactly (rational arithmetic on the stored floats): a nonneg row's
  s_i itself; an SOC block's t^2 - ||u||^2 =: D, with t - ||u|| = D / (t + ||u||) in [D / (2t), ...] when D >= 0 and
  ||u|| - t <= -D / (2t) when D < 0, t > 0 (dist((t, u), SOC) <= max(||u|| - t, 0): raise t to ||u||).
- **The dual in K*** (`ProvenCones.proven_dual`): y projected onto K* in floating point, then each SOC block checked
  (y_0 >= ||y_u|| by an upper bound on the float norm, else exactly: y_0 >= 0 and y_0^2 >= ||y_u||^2); a block that
  fails has y_0 raised, in extended precision, to the first number whose square is at least ||y_u||^2 (exact check).
- **lambda_min(P_SS)** (`eigenvalue_floor`): exact for a diagonal matrix; otherwise mu below eigvalsh's estimate, and
  a floating-point Cholesky factorization of fl(M - mu I) that runs to completion proves M - mu I + E + dM = R'R >= 0
  with |dM_ij| <= gamma_(n+1) / (1 - gamma_(n+1)) sqrt(a_ii a_jj) (Higham, Accuracy and Stability, Thm. 10.3 and
  its corollary; any order of the inner products, so LAPACK's blocked factorization too) and |E| <= eps |diag|
  the subtraction's rounding: lambda_min(M) >= mu - gamma / (1 - gamma) trace(fl(M - mu I)) - eps max_i a_ii.
- **P - diag(w) PSD as built** (`objective_margin`, once per problem; `certificate.Certifier.set_hessian`, per
  weight vector): the Hessian is P = fl(P_f + diag(d)), d >= min w the penalty's diagonal, so P - diag(d) = P_f +
  diag(delta) with |delta_j| <= u P_jj (u = eps / 2, one rounding to nearest per diagonal entry; delta_j = 0 off
  the penalized columns and off P_f's nonzero rows R, d_j being a float). For a diagonal P_f >= 0 this is PSD
  exactly (rounding is monotone: fl(a + d) >= d for a >= 0 and a float d). Otherwise, with m a proven lower bound on
  lambda_min(P_f) over R (P_f exactly symmetric; `eigenvalue_bound`), P - diag(d) >= m I_R - u max_j P_jj I_pen,
  which is >= -(u max_j P_jj - m)^+ I_pen when m >= 0 or R lies in the penalized columns: g is then (min w - that
  loss)-strongly convex in z_pen (`Certifier.set_hessian` takes the loss from min w). So a singular P_f (CVXPY's
  2 M of `cp.quad_form(x, M)` with a rank-deficient M, which its rounding may leave indefinite by about n eps ||M||)
  is certified when every column it touches is penalized (full consensus), with a loss of about n eps ||P_f||. Not
  certified (fail closed): m < 0 on a column that is not penalized (a private variable), and m below
  -`PSD_TOLERANCE` ||P_f||_inf (an f_p that is not convex, through `cp.psd_wrap`): the certificate would hold for
  the problem as built, but the sensitivities assume f_p convex.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from functools import cached_property

import numpy as np
import scipy.linalg

from privcvx.localsolve.polish import EXTENDED

#: Shifts below eigvalsh's estimate tried by `eigenvalue_floor` (fractions of it), in turn until a Cholesky
#: factorization of the shifted matrix completes.
SHIFTS = (2.0 ** -10, 2.0 ** -4, 0.5)
#: The most negative lambda_min(P_f), relative to ||P_f||_inf, taken for the rounding of a PSD matrix's construction
#: (``A.T @ A`` of a wide A is indefinite by about k eps ||A||^2 as stored) rather than a nonconvex f_p (`cp.psd_wrap`
#: of an indefinite matrix), which `objective_margin` refuses.
PSD_TOLERANCE = 1e-10
#: An absolute term in the float norm's upper bound that covers the underflow of squares (far below any margin).
UNDERFLOW = 1e-150


def exact(value: float | np.floating) -> Fraction:
    """A float64 or extended-precision number as the exact rational it stores."""
    return Fraction(*value.as_integer_ratio())


def dyadic(value: float | np.floating) -> tuple[int, int]:
    """A float64 or extended-precision number as (numerator, k) with value = numerator / 2**k exactly."""
    numerator, denominator = value.as_integer_ratio()
    return numerator, denominator.bit_length() - 1


def dyadic_sum(terms: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """The exact sum of dyadic rationals (numerator, k) (integer arithmetic: no gcd, unlike `Fraction`)."""
    total, k = 0, 0
    for numerator, shift in terms:
        if shift > k:
            total, k = total << (shift - k), shift
        total += numerator << (k - shift)
    return total, k


def _squares(values: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """The exact sum of the squares of dyadic rationals."""
    return dyadic_sum((numerator * numerator, 2 * k) for numerator, k in values)


def _fraction(value: tuple[int, int]) -> Fraction:
    return Fraction(value[0], 1 << value[1])


def _at_least(left: tuple[int, int], right: tuple[int, int]) -> bool:
    """Whether the dyadic rational ``left`` is at least ``right``."""
    return dyadic_sum([left, (-right[0], right[1])])[0] >= 0


def rounded_up(value: Fraction) -> float:
    """The smallest float at least ``value``."""
    rounded = float(value)
    return rounded if Fraction(rounded) >= value else math.nextafter(rounded, math.inf)


def rounded_down(value: Fraction) -> float:
    """The largest float at most ``value``."""
    return -rounded_up(-value)


def norm_upper(u: np.ndarray) -> np.floating:
    """An upper bound on the l2 norm of the stored numbers, in their precision: fl(sqrt(u'u)) is within
    ((k + 1) / 2 + 1) eps of it (k terms, all positive), inflated by (k + 2) eps, and `UNDERFLOW` for the squares."""
    eps = np.finfo(u.dtype).eps
    norm = np.sqrt(u @ u) * (1 + (u.size + 2) * eps) + UNDERFLOW
    return np.nextafter(norm, np.inf, dtype=u.dtype)


def _float_below(value: np.floating) -> float:
    """The largest float64 at most ``value`` (an extended-precision number rounds to the nearest)."""
    rounded = float(value)
    return rounded if rounded <= value else math.nextafter(rounded, -math.inf)


def soc_room(t: tuple[int, int], u: list[tuple[int, int]]) -> float:
    """A lower bound on t - ||u|| (negative: minus an upper bound on ||u|| - t) for exact dyadic t and u (module
    docstring)."""
    squares = _squares(u)
    difference = _fraction(dyadic_sum([(t[0] * t[0], 2 * t[1]), (-squares[0], squares[1])]))
    head = _fraction(t)
    if head > 0:
        return rounded_down(difference / (2 * head)) if difference >= 0 else -rounded_up(-difference / (2 * head))
    if difference == 0:
        return 0.0  # t = 0 and u = 0: the apex
    norm = math.nextafter(math.sqrt(rounded_up(_fraction(squares))), math.inf)
    return -math.nextafter(norm + rounded_up(-head), math.inf)


def eigenvalue_floor(matrix: np.ndarray) -> float:
    """A proven lower bound on the smallest eigenvalue of a symmetric float matrix (module docstring); not above 0
    when the matrix is not shown positive definite."""
    if not matrix.size:
        return math.inf
    if not np.any(matrix - np.diag(np.diag(matrix))):
        return float(np.min(np.diag(matrix)))  # exact: a diagonal matrix's eigenvalues are its entries
    estimate = float(scipy.linalg.eigvalsh(matrix, subset_by_index=[0, 0])[0])
    if not estimate > 0.0:
        return min(estimate, 0.0)
    n, eps = matrix.shape[0], float(np.finfo(float).eps)
    gamma = (n + 1) * eps / (1.0 - (n + 1) * eps)
    for fraction in SHIFTS:
        shift = estimate * (1.0 - fraction)
        shifted = matrix - shift * np.eye(n)
        try:
            scipy.linalg.cholesky(shifted, lower=False, check_finite=True)
        except (np.linalg.LinAlgError, ValueError):
            continue
        diagonal = np.diag(shifted)
        error = (gamma / (1.0 - gamma) * float(np.sum(diagonal)) + eps * float(np.max(np.abs(diagonal))))
        return math.nextafter(shift - error * (1.0 + 4 * (n + 2) * eps), -math.inf)
    return 0.0


def eigenvalue_bound(matrix: np.ndarray) -> float:
    """A proven lower bound on the smallest eigenvalue of a symmetric float matrix, negative too: `eigenvalue_floor`
    when that is positive, else `eigenvalue_floor` of fl(M + sI) minus s and the shift's rounding (u |fl(M_ii + s)|
    per diagonal entry), s above minus eigvalsh's estimate by 8 (n + 2) eps (sum_i |M_ii| + max_i sum_j |M_ij|)
    (Cholesky's error term of `eigenvalue_floor`), doubled up to four times; -inf when none is shown positive."""
    floor = eigenvalue_floor(matrix)
    if floor > 0.0:
        return floor
    n, eps = matrix.shape[0], float(np.finfo(float).eps)
    estimate = float(scipy.linalg.eigvalsh(matrix, subset_by_index=[0, 0])[0])
    size = float(np.sum(np.abs(np.diag(matrix))) + np.max(np.abs(matrix).sum(axis=1)))
    for doubling in range(5):
        shift = max(-estimate, 0.0) + 8.0 * (n + 2) * eps * size * 2.0 ** doubling
        shifted = matrix + shift * np.eye(n)
        floor = eigenvalue_floor(shifted)
        if floor > 0.0:
            rounding = Fraction(float(np.max(np.abs(np.diag(shifted))))) * Fraction(eps) / 2 + Fraction(2.0 ** -1074)
            return rounded_down(Fraction(floor) - Fraction(shift) - rounding)
    return -math.inf


def objective_margin(matrix: np.ndarray) -> float:
    """m of the module docstring: inf for a diagonal P_f with nonnegative entries, -inf for a diagonal one with a
    negative entry, a P_f not exactly symmetric or one with m below -`PSD_TOLERANCE` ||P_f||_inf (not convex), else a
    proven lower bound on lambda_min(P_f) over its nonzero rows (`eigenvalue_bound`: negative, about -n eps ||P_f||,
    for a singular P_f)."""
    diagonal = np.diag(matrix)
    if not np.any(matrix - np.diag(diagonal)):
        return math.inf if np.all(diagonal >= 0.0) else -math.inf
    if not np.array_equal(matrix, matrix.T):
        return -math.inf
    rows = quadratic_rows(matrix)
    margin = eigenvalue_bound(matrix[np.ix_(rows, rows)])
    return margin if margin >= -PSD_TOLERANCE * float(np.max(np.abs(matrix).sum(axis=1))) else -math.inf


def quadratic_rows(matrix: np.ndarray) -> np.ndarray:
    """The nonzero rows of P_f (R of the module docstring)."""
    return np.flatnonzero(np.any(matrix != 0.0, axis=1))


class ProvenCones:
    """The proven cone checks (a mixin of `certificate.Certifier`: it reads the certifier's A (dense, CSR and
    |A|), b and conic blocks)."""

    def proven_room(self, x: np.ndarray, slack: np.ndarray) -> np.ndarray:
        """Per conic block of s(x) = b - Ax (``slack``: its floating-point value), a lower bound on the radius of a
        ball about the exact s_i inside K_i, or minus an upper bound on dist(s_i, K_i) when s_i may lie outside
        (module docstring)."""
        eps = np.finfo(slack.dtype).eps
        error = (x.size + 2) * eps * (np.abs(self.b) + self.abs_a @ np.abs(x))  # >= |fl(s) - s|
        room = np.empty(len(self.conic_blocks))
        positions, rows = self.nonneg_blocks
        low = np.nextafter(slack[rows] - error[rows], -np.inf)  # one rounding of the subtraction
        near = low.astype(np.float64)
        room[positions] = np.where(near > low, np.nextafter(near, -np.inf), near)  # rounded down to float64
        for position, row in zip(positions[low < 0], rows[low < 0], strict=True):
            room[position] = self.exact_room(x, row, 1)
        for number, (kind, start, size) in enumerate(self.conic_blocks):
            if kind != "soc":
                continue
            v, bound = slack[start:start + size], error[start:start + size]
            reach = norm_upper(v[1:]) + norm_upper(bound[1:]) + bound[0]
            low = ((v[0] - reach) - 4 * eps * (abs(v[0]) + reach)) / np.sqrt(v.dtype.type(2)) * (1 - 4 * eps)
            room[number] = _float_below(low) if low >= 0 else self.exact_room(x, start, size)
        return room

    @cached_property
    def nonneg_blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """The positions of the nonneg blocks among the conic blocks, and their rows."""
        positions = [number for number, block in enumerate(self.conic_blocks) if block.kind == "nonneg"]
        return np.array(positions, dtype=int), np.array([self.conic_blocks[i].start for i in positions], dtype=int)

    def exact_room(self, x: np.ndarray, start: int, size: int) -> float:
        """`proven_room` of one block, in rational arithmetic on the stored floats."""
        s = [self.exact_slack(x, row) for row in range(start, start + size)]
        if size == 1:
            return rounded_down(_fraction(s[0]))
        room = soc_room(s[0], s[1:])
        return room * math.sqrt(0.5) * (1.0 - 4.0 * float(np.finfo(float).eps)) if room > 0.0 else room

    def exact_slack(self, x: np.ndarray, row: int) -> tuple[int, int]:
        """b_i - A_i x exactly, for the stored floats, as a dyadic rational (numerator, k)."""
        begin, end = self.rows.indptr[row], self.rows.indptr[row + 1]
        terms = [dyadic(float(self.b[row]))]
        for column, value in zip(self.rows.indices[begin:end], self.rows.data[begin:end], strict=True):
            (a, a_k), (b, b_k) = dyadic(value), dyadic(x[column])
            terms.append((-a * b, a_k + b_k))
        return dyadic_sum(terms)

    def column_floor(self, z: np.ndarray, column: int, sign: float) -> tuple[float, float]:
        """For a dual z of min sign x_k (Clarabel: z in K*, A'z + sign e_k = rho at round-off): a level and an upper
        bound on ||rho||_1 with sign x_k >= level - ||rho||_1 max_j |x_j| for every feasible x (sign x_k = rho'x -
        b'z + z's and z's >= 0 once z is put in K*, `proven_dual`); -b'z and rho with Higham's rounding bounds
        (gamma_(m+2) on sums of m + 1 terms), rounded outward."""
        z = self.proven_dual(z)
        eps = np.finfo(z.dtype).eps
        gamma = (self.b.size + 2) * eps
        magnitude = np.abs(z)
        level = -(self.b @ z) - gamma * (np.abs(self.b) @ magnitude)
        rho = self.A.T @ z
        rho[column] += sign
        slack = (np.sum(np.abs(rho)) + gamma * (np.sum(self.abs_a.T @ magnitude) + 1.0)) * (
            1 + (z.size + rho.size + 2) * eps)
        return _float_below(level * (1 - 4 * eps) if level > 0 else level * (1 + 4 * eps)), \
            -_float_below(-slack)

    def dual_cone_projection(self, y: np.ndarray) -> np.ndarray:
        """y projected onto K* in floating point (zero rows free; nonneg and SOC are self-dual)."""
        y = y.copy()
        for kind, start, size in self.blocks:
            if kind == "nonneg":
                y[start] = max(y[start], 0.0)
            elif kind == "soc":
                y[start:start + size] = soc_projection(y[start:start + size])
        return y

    def proven_dual(self, y: np.ndarray) -> np.ndarray:
        """`dual_cone_projection` with each SOC block proven in K* (module docstring); in extended precision when a
        block's y_0 had to be raised."""
        y = self.dual_cone_projection(y)
        for kind, start, size in self.blocks:
            if kind != "soc" or y[start] >= norm_upper(y[start + 1:start + size]):
                continue
            squares = _squares(dyadic(entry) for entry in y[start + 1:start + size])
            if y[start] >= 0 and _at_least(_squares([dyadic(y[start])]), squares):
                continue
            y = y.astype(EXTENDED)
            head = np.sqrt(y[start + 1:start + size] @ y[start + 1:start + size])
            while not _at_least(_squares([dyadic(head)]), squares):
                head = np.nextafter(head, np.inf, dtype=EXTENDED)
            y[start] = head
        return y


def soc_projection(v: np.ndarray) -> np.ndarray:
    """The Euclidean projection onto {(t, u): ||u|| <= t}."""
    t, u = v[0], v[1:]
    norm = np.sqrt(u @ u)  # in v's precision (`polish.EXTENDED` for a refined point)
    if norm <= t:
        return v.copy()
    if norm <= -t:
        return np.zeros_like(v)
    half = 0.5 * (t + norm)
    return np.concatenate([[half], half * u / norm])
