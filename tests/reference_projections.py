"""Exact (weighted) Euclidean projections onto small convex sets, written without privcvx, for certificate tests.

Each `Reference` is a set (a CVXPY constraint builder over one vector variable), a point, diagonal weights and the
exact minimizer of sum_i w_i (x_i - point_i)^2 over the set. Every answer is computed in exact rational arithmetic
(`fractions.Fraction`), with square roots and the one 1-D multiplier search (`flow_limits`) carried to 60 digits
(`decimal`), and only then rounded to float: each coordinate of ``projection`` is within one ulp of the exact
projection of the float data. `perturbed` gives a deliberately wrong answer with its exact l2 distance.

Used by tests/test_certified_reference.py and bench/reference_distance.py. Not a pytest module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from math import isqrt

import cvxpy as cp
import numpy as np

Vector = list[Fraction]
DIGITS = 60


def _exact(values: Sequence[float] | np.ndarray) -> Vector:
    return [Fraction(float(v)) for v in np.asarray(values, dtype=float).ravel()]


def _float(values: Vector) -> np.ndarray:
    return np.array([float(v) for v in values])  # float(Fraction) rounds correctly


def _sqrt(value: Fraction) -> Fraction:
    """sqrt(value): exact when value is the square of a rational, else to `DIGITS` digits."""
    num, den = value.numerator, value.denominator
    rn, rd = _isqrt_exact(num), _isqrt_exact(den)
    if rn is not None and rd is not None:
        return Fraction(rn, rd)
    with localcontext() as context:
        context.prec = DIGITS
        return Fraction((Decimal(num) / Decimal(den)).sqrt())


def _isqrt_exact(n: int) -> int | None:
    root = isqrt(n)
    return root if root * root == n else None


def _norm(values: Vector) -> Fraction:
    return _sqrt(sum((v * v for v in values), Fraction(0)))


# ---- the closed forms (float in, float out, exact inside) ---------------------------------------------------------
def project_ball(point: np.ndarray, center: np.ndarray, radius: float) -> np.ndarray:
    """Onto {x: ||x - center||_2 <= radius}: center + radius (p - c)/||p - c|| outside, p inside."""
    p, c, r = _exact(point), _exact(center), Fraction(radius)
    d = [pi - ci for pi, ci in zip(p, c, strict=True)]
    n = _norm(d)
    return _float(p if n <= r else [ci + r * di / n for ci, di in zip(c, d, strict=True)])


def project_halfspace(point: np.ndarray, normal: np.ndarray, level: float, weights: np.ndarray | None = None
                      ) -> np.ndarray:
    """Onto {x: a'x <= beta} in the W-norm: p - (a'p - beta)_+ / (a'W^-1 a) W^-1 a."""
    p, a = _exact(point), _exact(normal)
    w = _exact(np.ones(len(p)) if weights is None else weights)
    excess = sum((ai * pi for ai, pi in zip(a, p, strict=True)), Fraction(0)) - Fraction(level)
    if excess <= 0:
        return _float(p)
    scale = excess / sum((ai * ai / wi for ai, wi in zip(a, w, strict=True)), Fraction(0))
    return _float([pi - scale * ai / wi for pi, ai, wi in zip(p, a, w, strict=True)])


def project_soc(point: np.ndarray) -> np.ndarray:
    """Onto the second-order cone {(t, u): ||u||_2 <= t} (point = (t, u)): p if inside, 0 if in the polar cone
    (||u|| <= -t), else ((t + ||u||)/2) (1, u/||u||)."""
    p = _exact(point)
    t, u = p[0], p[1:]
    nu = _norm(u)
    if nu <= t:
        return _float(p)
    if nu <= -t:
        return np.zeros(len(p))
    a = (t + nu) / 2
    return _float([a] + [a * ui / nu for ui in u])


def _box_hyperplane_exact(p: Vector, w: Vector, a: Vector, level: Fraction, lower: Vector, upper: Vector
                          ) -> Vector:
    """argmin sum w_i (x_i - p_i)^2 s.t. lower <= x <= upper, a'x = level (a_i != 0): x(l) = clip(p - l a/w), with
    the multiplier l found exactly on the piecewise-linear, nonincreasing h(l) = a'x(l) - level by its breakpoints."""
    def x_of(lam: Fraction) -> Vector:
        return [min(max(pi - lam * ai / wi, lo), up) for pi, ai, wi, lo, up in zip(p, a, w, lower, upper, strict=True)]

    def h(lam: Fraction) -> Fraction:
        return sum((ai * xi for ai, xi in zip(a, x_of(lam), strict=True)), Fraction(0)) - level

    breaks = sorted({(pi - b) * wi / ai for pi, ai, wi, lo, up in zip(p, a, w, lower, upper, strict=True)
                     for b in (lo, up)})
    if h(breaks[0]) < 0 or h(breaks[-1]) > 0:  # h is constant beyond the breakpoints (every coordinate clipped)
        raise ValueError("the box does not meet the hyperplane")
    for left, right in zip(breaks, breaks[1:], strict=False):
        hl, hr = h(left), h(right)
        if hl >= 0 >= hr:
            lam = left if hl == hr else left + hl * (right - left) / (hl - hr)  # h is linear on [left, right]
            return x_of(lam)
    return x_of(breaks[0])  # one breakpoint, h(it) = 0


def project_box_hyperplane(point: np.ndarray, normal: np.ndarray, level: float, lower: np.ndarray,
                           upper: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Onto {lower <= x <= upper, a'x = level} (finite bounds, a_i != 0) in the W-norm, exactly
    (`_box_hyperplane_exact`)."""
    n = len(point)
    w = np.ones(n) if weights is None else weights
    return _float(_box_hyperplane_exact(_exact(point), _exact(w), _exact(normal), Fraction(level),
                                        _exact(lower), _exact(upper)))


def project_simplex(point: np.ndarray, total: float = 1.0) -> np.ndarray:
    """Onto {x >= 0, sum x = total} by sorting (Held, Wolfe & Crowder): tau = (sum_{i<=k} u_i - total)/k for the
    largest k with u_k > tau_k, u sorted decreasingly; x = (p - tau)_+. Independent of `project_box_hyperplane`."""
    p = _exact(point)
    u = sorted(p, reverse=True)
    partial, tau = Fraction(0), Fraction(0)
    for k, uk in enumerate(u, start=1):
        partial += uk
        candidate = (partial - Fraction(total)) / k
        if uk > candidate:
            tau = candidate
    return _float([max(pi - tau, Fraction(0)) for pi in p])


def _segment(p: Vector, a: Vector, b: Vector) -> Vector:
    d = [bi - ai for ai, bi in zip(a, b, strict=True)]
    s = sum(((pi - ai) * di for pi, ai, di in zip(p, a, d, strict=True)), Fraction(0)) / sum(di * di for di in d)
    s = min(max(s, Fraction(0)), Fraction(1))
    return [ai + s * di for ai, di in zip(a, d, strict=True)]


def polygon_halfspaces(vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, h) with {x: N x <= h} the convex polygon of these vertices, given counter-clockwise."""
    v = np.asarray(vertices, dtype=float)
    edges = np.roll(v, -1, axis=0) - v
    normals = np.column_stack([edges[:, 1], -edges[:, 0]])  # outward for a counter-clockwise order
    return normals, np.einsum("ij,ij->i", normals, v)


def project_polygon(point: np.ndarray, vertices: np.ndarray) -> np.ndarray:
    """Onto a convex polygon (vertices counter-clockwise): the point if inside, else the nearest of the projections
    onto its edges (enumeration, exact)."""
    p, verts = _exact(point), [_exact(v) for v in vertices]
    inside = all((b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0]) >= 0
                 for a, b in zip(verts, verts[1:] + verts[:1], strict=True))
    if inside:
        return _float(p)
    candidates = [_segment(p, a, b) for a, b in zip(verts, verts[1:] + verts[:1], strict=True)]
    return _float(min(candidates, key=lambda c: sum((ci - pi) ** 2 for ci, pi in zip(c, p, strict=True))))


def project_flow_limits(point: np.ndarray, limits: np.ndarray, demand: float) -> np.ndarray:
    """Onto {(P_1, Q_1, ..., P_k, Q_k): P_i^2 + Q_i^2 <= S_i^2, sum_i P_i = demand} (k inverters with apparent-power
    limits S_i meeting a fixed active demand). KKT: (P_i, Q_i) = the projection of (p_i - l, q_i) onto the disk of
    radius S_i, l the balance's multiplier, the root of the nonincreasing h(l) = sum_i P_i(l) - demand; found by
    bisection in 60-digit arithmetic (400 halvings: the bracket ends far below one ulp)."""
    p = _exact(point)
    pairs = [(p[2 * i], p[2 * i + 1]) for i in range(len(limits))]
    radii = [Fraction(float(s)) for s in limits]
    target = Fraction(demand)

    def disk(a: Fraction, b: Fraction, r: Fraction) -> tuple[Fraction, Fraction]:
        n = _sqrt(a * a + b * b)
        return (a, b) if n <= r else (r * a / n, r * b / n)

    def h(lam: Fraction) -> Fraction:
        return sum((disk(a - lam, b, r)[0] for (a, b), r in zip(pairs, radii, strict=True)), Fraction(0)) - target

    if not -sum(radii) < target < sum(radii):
        raise ValueError("the demand must lie strictly within the inverters' total limit")
    spread = max(abs(a) for a, _ in pairs) + sum(radii) + abs(target) + 1
    low, high = -spread, spread  # h(low) > 0 > h(high)
    with localcontext() as context:
        context.prec = DIGITS
        for _ in range(400):
            mid = Fraction(Decimal(low.numerator) / Decimal(low.denominator)
                           + Decimal(high.numerator) / Decimal(high.denominator)) / 2
            low, high = (mid, high) if h(mid) > 0 else (low, mid)
    return _float([c for (a, b), r in zip(pairs, radii, strict=True) for c in disk(a - low, b, r)])


def project_thin_slab(point: np.ndarray, low: float, high: float, total: float) -> np.ndarray:
    """Onto {low <= x_1 <= high, x_1 + x_2 = total, ||(x_3, x_4)||_2 <= x_2} (unit weights; a thin slab coupled to
    the rest through the equality row and the cone). For x_1 = t the rest is fixed: x_2 = total - t and (x_3, x_4)
    the disk projection of radius total - t, so f(t) = (t - p_1)^2 + (total - t - p_2)^2 + ((n - total + t)_+)^2
    with n = ||(p_3, p_4)||, convex and C^1; its minimizer over R is t_B = (p_1 - p_2 + total)/2 when t_B <= total - n
    (cone inactive), else t_A = (p_1 - p_2 - n + 2 total)/3 (f' = 6t - 2p_1 + 2p_2 + 2n - 4 total); clipped to the
    slab (f convex in t). Needs total - high > 0 (the disk's radius positive)."""
    p, lo, up, c = _exact(point), Fraction(low), Fraction(high), Fraction(total)
    n = _norm(p[2:4])
    t_b = (p[0] - p[1] + c) / 2
    t = t_b if t_b <= c - n else (p[0] - p[1] - n + 2 * c) / 3
    t = min(max(t, lo), up)
    radius = c - t
    u = p[2:4] if n <= radius else [radius * v / n for v in p[2:4]]
    return _float([t, c - t, *u])


def project_below(point: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Onto {x <= upper} (componentwise, exact): also the projection onto any set {x <= upper, A x <= h} whose rows
    A x <= h every x <= upper meets (`redundant_corner`)."""
    return _float([min(p, u) for p, u in zip(_exact(point), _exact(upper), strict=True)])


# ---- the fixtures -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reference:
    """One exact projection: minimize sum_i weights_i (x_i - point_i)^2 s.t. ``constraints(x)`` (x = cp.Variable(
    dim)); ``projection`` is its exact answer (within one ulp), ``method`` how it was computed, ``exact`` the same
    exact projection (same set, same weights) of any other point. ``hard``: Clarabel
    through CVXPY at 1e-11 misses it by more than 1e-7 (measured: simplex_degenerate 1.4e-6, flow_limits 3.2e-7;
    SCS at 1e-13 meets it), the kind of answer a certificate must not pass as exact. ``inaccurate``: both end
    ``optimal_inaccurate`` (the thin slab: measured, Clarabel 1.7e-9 off, SCS 2.1e-7); `solve_with` then accepts that
    status and the check compares Clarabel's answer at 1e-8."""

    name: str
    dim: int
    constraints: Callable[[cp.Variable], list[cp.Constraint]]
    point: np.ndarray
    weights: np.ndarray
    projection: np.ndarray
    method: str
    exact: Callable[[np.ndarray], np.ndarray]
    hard: bool = False
    inaccurate: bool = False


def _ref(name: str, constraints: Callable[[cp.Variable], list[cp.Constraint]], point: Sequence[float],
         exact: Callable[[np.ndarray], np.ndarray], method: str, weights: Sequence[float] | None = None,
         hard: bool = False, inaccurate: bool = False) -> Reference:
    point = np.asarray(point, dtype=float)
    weights = np.ones(point.size) if weights is None else np.asarray(weights, dtype=float)
    return Reference(name, point.size, constraints, point, weights, exact(point), method, exact, hard, inaccurate)


def references() -> list[Reference]:
    """Every fixture (about 20): each set with its point outside (the projection on the boundary), some inside."""
    out: list[Reference] = []
    c, r = np.array([1.0, -2.0, 0.5]), 1.5
    for tag, p in (("outside", [4.0, 2.0, 12.5]), ("inside", [1.2, -1.5, 0.0]), ("irrational", [0.3, 0.7, -2.1])):
        out.append(_ref(f"ball_{tag}", lambda x, c=c, r=r: [cp.norm(x - c) <= r], p,
                        lambda v, c=c, r=r: project_ball(v, c, r), "closed form"))
    a, beta = np.array([1.0, -2.0, 3.0, 0.5]), 1.25
    p = [0.7, -1.1, 2.3, 0.4]
    out.append(_ref("halfspace", lambda x, a=a, beta=beta: [a @ x <= beta], p,
                    lambda v, a=a, beta=beta: project_halfspace(v, a, beta), "closed form (rational)"))
    w = np.array([1.0, 4.0, 0.25, 2.0])
    out.append(_ref("halfspace_weighted", lambda x, a=a, beta=beta: [a @ x <= beta], p,
                    lambda v, a=a, beta=beta, w=w: project_halfspace(v, a, beta, w), "closed form (rational)", w))
    for tag, p in (("outside", [1.0, 3.0, -4.0, 12.0]), ("polar", [-20.0, 3.0, 4.0, 0.0]),
                   ("inside", [2.0, 0.5, -1.0, 1.25]), ("irrational", [0.4, -1.0, 0.7, 0.2])):
        out.append(_ref(f"soc_{tag}", lambda x: [cp.SOC(x[0], x[1:])], p, project_soc, "closed form"))
    lo, up, a, level = np.array([0.0, -1.0, 0.0, -0.5, 0.0]), np.array([1.0, 1.0, 0.5, 0.5, 2.0]), \
        np.array([1.0, 2.0, -1.0, 1.0, 0.5]), 0.75
    p = [1.3, 0.9, -0.7, 0.2, 3.1]

    def box_plane(x: cp.Variable, lo: np.ndarray = lo, up: np.ndarray = up, a: np.ndarray = a,
                  level: float = level) -> list[cp.Constraint]:
        return [x >= lo, x <= up, a @ x == level]

    out.append(_ref("box_hyperplane", box_plane, p, lambda v: project_box_hyperplane(v, a, level, lo, up),
                    "multiplier by breakpoints (rational)"))
    w = np.array([2.0, 0.5, 1.0, 3.0, 0.125])
    out.append(_ref("box_hyperplane_weighted", box_plane, p,
                    lambda v, w=w: project_box_hyperplane(v, a, level, lo, up, w),
                    "multiplier by breakpoints (rational)", w))
    for tag, p in (("", [0.45, -0.3, 1.2, 0.05, 0.6, -1.0]), ("_degenerate", [0.4, -0.3, 1.2, 0.05, 0.6, -1.0])):
        # degenerate: x_1 = 0.4 - tau = 4e-17 with a zero multiplier (no strict complementarity)
        out.append(_ref(f"simplex{tag}", lambda x: [x >= 0, cp.sum(x) == 1], p, project_simplex,
                        "sort (rational)", hard=bool(tag)))
    verts = np.array([[0.0, 0.0], [3.0, -1.0], [4.0, 2.0], [1.5, 3.5], [-0.5, 2.0]])
    normals, levels = polygon_halfspaces(verts)
    for tag, p in (("edge", [5.0, 0.0]), ("vertex", [5.5, 2.3]), ("inside", [1.0, 1.0])):
        out.append(_ref(f"polygon_{tag}", lambda x, n=normals, h=levels: [n @ x <= h], p,
                        lambda v: project_polygon(v, verts), "enumeration of edges (rational)"))
    limits, demand = np.array([1.0, 0.8, 1.5]), 2.2
    p = [1.2, 0.5, 0.1, -0.9, 0.6, 1.4]

    def flows(x: cp.Variable, limits: np.ndarray = limits, demand: float = demand) -> list[cp.Constraint]:
        return [cp.norm(x[2 * i:2 * i + 2]) <= s for i, s in enumerate(limits)] + [x[0::2] @ np.ones(3) == demand]

    out.append(_ref("flow_limits", flows, p, lambda v: project_flow_limits(v, limits, demand),
                    "multiplier by 60-digit bisection", hard=True))
    low, high, total = 1.1236 - 2e-10, 1.1236 + 2e-10, 2.0  # case14's slack bus: |V|^2 held within 4e-10

    def slab(x: cp.Variable, low: float = low, high: float = high, total: float = total) -> list[cp.Constraint]:
        return [x[0] >= low, x[0] <= high, x[0] + x[1] == total, cp.SOC(x[1], x[2:4])]

    for tag, p in (("", [1.5, 0.2, 3.0, -4.0]), ("_inside", [1.1236, 0.8764, 0.3, 0.2])):
        out.append(_ref(f"thin_slab{tag}", slab, p, lambda v: project_thin_slab(v, low, high, total),
                        "1-D convex piecewise quadratic in x_1, clipped (rational)", inaccurate=True))
    upper = np.array([1.0, 1.0, 1.0])

    def corner(x: cp.Variable, upper: np.ndarray = upper) -> list[cp.Constraint]:
        # at (1, 1, 1) all six rows are active; the last three are implied by the first three (their multipliers
        # are not unique: a degenerate active set)
        return [x <= upper, x[0] + x[1] <= 2.0, 2.0 * x[0] + x[1] + x[2] <= 4.0, x[0] + x[1] + x[2] <= 3.0]

    out.append(_ref("redundant_corner", corner, [2.5, 1.75, 3.0], lambda v: project_below(v, upper),
                    "componentwise (the redundant rows are implied)"))
    out.append(_ref("ball_far", lambda x, c=c, r=r: [cp.norm(x - c) <= r], [1201.0, -1602.0, 0.5],
                    lambda v, c=c, r=r: project_ball(v, c, r), "closed form (multiplier about 1.3e3)"))
    out.append(_ref("box_hyperplane_far", box_plane, [1300.0, -900.0, 700.0, 2000.0, -1500.0],
                    lambda v: project_box_hyperplane(v, a, level, lo, up),
                    "multiplier by breakpoints (rational; multipliers about 1e3)"))
    return out


def perturbed(reference: Reference, size: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """A deliberately wrong answer: the projection plus a random direction of l2 length about ``size``, and its exact
    l2 distance to ``reference.projection`` (computed in rational arithmetic from the float vectors returned)."""
    direction = rng.normal(size=reference.dim)
    answer = reference.projection + size * direction / np.linalg.norm(direction)
    return answer, l2_distance(answer, reference.projection)


def l2_distance(x: np.ndarray, y: np.ndarray) -> float:
    """||x - y||_2 of two float vectors, exactly up to the final rounding (at most one ulp off)."""
    return float(_norm([a - b for a, b in zip(_exact(x), _exact(y), strict=True)]))


#: Tight settings for the independent solves: Clarabel (interior point) and SCS (ADMM, for the `Reference.hard` ones).
TIGHT = {cp.CLARABEL: {"tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11},
         cp.SCS: {"eps_abs": 1e-13, "eps_rel": 1e-13, "max_iters": 200_000}}


def solve_with(reference: Reference, solver: str = cp.CLARABEL) -> np.ndarray:
    """The same projection by CVXPY and ``solver`` at `TIGHT` settings (the independent check of the references)."""
    x = cp.Variable(reference.dim)
    problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(reference.weights, cp.square(x - reference.point)))),
                         reference.constraints(x))
    problem.solve(solver=solver, **TIGHT[solver])
    if problem.status != cp.OPTIMAL and not (reference.inaccurate and problem.status == cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"{reference.name}: {solver} ended {problem.status}")
    return np.asarray(x.value)
