"""The certificate's floating-point checks (privcvx/localsolve/proven.py) against exact and high-precision references:
a slack that floating point puts inside the cone and exact arithmetic outside, a dual that floating point puts in K*
and exact arithmetic outside, and a Hessian block whose smallest eigenvalue eigvalsh overestimates. Before session 39
each of these was certified with a bound that the exact projection (mpmath, 50 digits) shows false, or taken as
positive definite while exactly singular."""

from __future__ import annotations

from fractions import Fraction

import clarabel
import cvxpy as cp
import mpmath
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

import privcvx as pc
from privcvx.localsolve import LocalProblem
from privcvx.localsolve.certificate import Certifier
from privcvx.localsolve.cvxpy_adapter import ConicData
from privcvx.localsolve.proven import eigenvalue_floor

#: 2^-27: 1 + TILT^2 rounds to 1, so a float norm sees (1, TILT) on the unit sphere; exactly it lies 2^-55 outside.
TILT = 2.0 ** -27


def _disc(quadratic: np.ndarray, radius: float) -> Certifier:
    """min 1/2 x'Px + q'x s.t. ||x||_2 <= radius in Clarabel's form, s = b - Ax = (radius, x1, x2) in SOC(3), with P_f
    ``quadratic`` (the round's penalty comes with `Certifier.set_hessian`)."""
    data = ConicData(P=sp.csc_matrix(quadratic), q=np.zeros(2), A=sp.csc_matrix([[0.0, 0.0], [-1.0, 0.0], [0.0, -1.0]]),
                     b=np.array([radius, 0.0, 0.0]), cones=[clarabel.SecondOrderConeT(3)], columns=np.arange(2),
                     zero=0, nonneg=0, qp=False)
    return Certifier(data, np.zeros(0, dtype=int))


def _unit_disc() -> Certifier:
    """min 1/2 ||x - p||^2 s.t. ||x||_2 <= 1."""
    certifier = _disc(np.zeros((2, 2)), 1.0)
    assert certifier.set_hessian(sp.identity(2, format="csc"))
    return certifier


def _distance_to_projection(x: np.ndarray, point: np.ndarray) -> float:
    """||x - point / ||point|| ||_2 (the exact projection onto the unit disc of a point outside it), in 50 digits."""
    mpmath.mp.dps = 50
    p = [mpmath.mpf(float(v)) for v in point]
    norm = mpmath.sqrt(sum(v * v for v in p))
    return float(mpmath.sqrt(sum((mpmath.mpf(float(xi)) - pi / norm) ** 2 for xi, pi in zip(x, p, strict=True))))


def _squares(values: np.ndarray) -> Fraction:
    return sum((Fraction(float(v)) ** 2 for v in values), Fraction(0))


def _certified_distance(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The unpolished certificate of (x, y) for the projection of p = x + A'y onto the unit disc (the dual residual
    P x + q + A'y is then 0 exactly), and the true distance of the released point to the exact projection."""
    certifier = _unit_disc()
    point = x + certifier.A.T @ y
    certificate = certifier.bound(x, certifier.dual_cone_projection(y), -point, 1.0)
    return certificate.distance, _distance_to_projection(certificate.x, point)


def test_a_slack_outside_the_cone_only_exactly_is_within_its_certificate():
    """x = (1, 2^-27): the float norm is 1, so the float check puts the slack (1, x) in the cone, 2^-55 outside
    exactly. With y = (1, -1, 0) in K* and y's = 0 the old certificate was 6.2e-15 for a point 3.7e-9 from the exact
    projection; now the slack is checked exactly and the Slater point absorbs it."""
    x = np.array([1.0, TILT])
    assert float(np.sqrt(x @ x)) == 1.0 and _squares(x) > 1  # inside in floating point, outside exactly
    distance, true = _certified_distance(x, np.array([1.0, -1.0, 0.0]))
    assert true > 3e-9
    assert true <= distance < 1e-7


def test_a_dual_outside_the_dual_cone_only_exactly_is_within_its_certificate():
    """y = (1, -1, -2^-27): the float norm of y_u is 1 = y_0, exactly it is longer. x = (1, 0) is feasible exactly and
    y's = 0; the old certificate was 6.2e-15 for a point 3.7e-9 from the exact projection; now y_0 is raised (in
    extended precision) until y is in K* exactly."""
    y = np.array([1.0, -1.0, -TILT])
    assert float(np.sqrt(y[1:] @ y[1:])) == y[0] and _squares(y[1:]) > Fraction(y[0]) ** 2
    certifier = _unit_disc()
    proven = certifier.proven_dual(y)
    assert Fraction(*proven[0].as_integer_ratio()) ** 2 >= _squares(y[1:])  # in K* exactly
    assert abs(float(proven[0]) - 1.0) <= 4 * np.finfo(float).eps
    distance, true = _certified_distance(np.array([1.0, 0.0]), y)
    assert true > 3e-9
    assert true <= distance < 1e-7


def test_points_inside_or_exactly_on_the_cones_are_left_as_they_are():
    """A slack and a dual with room to spare are decided in floating point, one exactly on the boundary in rational
    arithmetic (no raise of y_0); the certificate of the exact KKT pair x = (1, 0), y = (1, -1, 0) of the projection
    of (2, 0) stays at round-off."""
    certifier = _unit_disc()
    inside = np.array([0.3, 0.4])
    (room,) = certifier.proven_room(inside, certifier.b - certifier.A @ inside)
    assert 0.5 / np.sqrt(2.0) - 1e-14 <= room <= 0.5 / np.sqrt(2.0)  # the ball of radius (1 - ||x||) / sqrt 2
    for dual in (np.array([2.0, -1.0, -1.0]), np.array([1.0, -1.0, 0.0])):
        proven = certifier.proven_dual(dual)
        assert proven.dtype == np.float64 and np.array_equal(proven, dual)
    distance, true = _certified_distance(np.array([1.0, 0.0]), np.array([1.0, -1.0, 0.0]))
    assert true == 0.0 and distance < 1e-13


@pytest.mark.parametrize("vector", [(-5.0, 3.0), (-2.0, 9.0, -6.0), (1.0, 9.0, -6.0)])
def test_an_exactly_singular_hessian_block_is_not_taken_as_positive_definite(vector):
    """v v' with integer v is singular exactly; LAPACK's eigvalsh puts its smallest eigenvalue at +1e-16 to +5e-15
    for these (the old `set_hessian` then took P_SS as positive definite, and every certificate divided by it). The
    proven floor is at most 0 and the certifier refuses the Hessian (fail closed)."""
    matrix = np.outer(vector, vector)
    floor = eigenvalue_floor(matrix)
    assert floor <= 0.0
    size = len(vector)
    data = ConicData(P=sp.csc_matrix(matrix), q=np.zeros(size), A=sp.csc_matrix(-np.eye(size)), b=np.ones(size),
                     cones=[clarabel.NonnegativeConeT(size)], columns=np.arange(size), zero=0, nonneg=size, qp=True)
    certifier = Certifier(data, np.zeros(0, dtype=int))
    assert not certifier.set_hessian(sp.csc_matrix(matrix))


def test_the_eigenvalue_floor_is_below_the_exact_smallest_eigenvalue_and_close_to_it():
    """Q diag(1e-6, 1, 2, 3) Q' for a random orthogonal Q (seed 1, the second draw): eigvalsh overestimates its
    smallest eigenvalue by 6.7e-12 relative (mpmath, 50 digits); the floor is below the exact value and within
    2^-9 of it."""
    mpmath.mp.dps = 50
    rng = np.random.default_rng(1)
    for _ in range(2):
        orthogonal, _ = np.linalg.qr(rng.normal(size=(4, 4)))
        matrix = orthogonal @ np.diag([1e-6, 1.0, 2.0, 3.0]) @ orthogonal.T
        matrix = (matrix + matrix.T) / 2.0
    exact = min(mpmath.eigsy(mpmath.matrix(matrix.tolist()))[0])
    floor = eigenvalue_floor(matrix)
    assert mpmath.mpf(floor) <= exact
    assert floor >= float(exact) * (1.0 - 2.0 ** -9)
    diagonal = np.diag([3.0, 0.5, 7.0])
    assert eigenvalue_floor(diagonal) == 0.5  # exact for a diagonal matrix
    assert scipy.linalg.eigvalsh(matrix)[0] > exact  # the fixture: the float estimate is above the exact value


class _Misreported:
    """A Clarabel solution whose objective value and dual are off by ``factor`` (a solver's claim, not a proof)."""

    def __init__(self, solution, factor: float) -> None:
        self.solution, self.factor = solution, factor

    def __getattr__(self, name: str):
        value = getattr(self.solution, name)
        return value * self.factor if name == "obj_val" else np.asarray(value) * self.factor if name == "z" else value


def test_auxiliary_widths_are_proven_even_from_a_misreporting_solver(monkeypatch):
    """||x||_2 <= t' <= t <= 2 with the objective t (CVXPY's conic form: t and its copy t' are auxiliary columns):
    both range over [0, 2] exactly. With Clarabel's objective values and duals scaled by 1/4, the old widths (twice
    Clarabel's max - min, plus 1e-6) were 1.0 < 2, and the old certifier used them; the proven widths rest only on the
    duals put in K* and the residuals they leave, so they stay at least 2 (and within 1e-6 of 2 from the true
    answers, where the old ones were 4.000003)."""
    def widths() -> np.ndarray:
        x, t = cp.Variable(2), cp.Variable()
        agent = pc.Agent(t, [cp.norm(x) <= t, t <= 2.0], shared=x, name="lifted")
        problem = pc.DistributedProblem([agent])
        local = LocalProblem(agent, problem.layouts[0], objective=True, penalized=problem.layouts[0].shared_local,
                             certified=True)
        assert local.certifier is not None and local.certifier.auxiliary.size == 2
        return local.certifier.width

    proven = widths()
    assert np.all((proven >= 2.0) & (proven <= 2.0 + 1e-6))  # Clarabel's duality gap, about 1e-9
    solver = clarabel.DefaultSolver

    class Misreporting:
        def __init__(self, *args) -> None:
            self.solver = solver(*args)

        def solve(self):
            return _Misreported(self.solver.solve(), 0.25)

    monkeypatch.setattr(clarabel, "DefaultSolver", Misreporting)
    assert np.all(widths() >= 2.0)


#: P_f = [[0, 0.9], [0.9, 0]] (eigenvalues -0.9 and 0.9): f_p is not convex, yet P_f + I (eigenvalues 0.1 and 1.9)
#: is positive definite, so lambda_min(P_SS) alone does not see it. CVXPY takes it through `psd_wrap`.
INDEFINITE = np.array([[0.0, 0.9], [0.9, 0.0]])


def _indefinite_objective() -> tuple[Certifier, np.ndarray, np.ndarray, list[Fraction]]:
    """min 1/2 x'(P_f + I)x + q'x s.t. ||x||_2 <= 10, with x* = (0.5, 0.25) + O(eps) interior (computed here in
    rationals from the stored floats); the certifier, q, the Hessian as built, and x*."""
    hessian = INDEFINITE + np.eye(2)
    q = -(hessian @ np.array([0.5, 0.25]))
    (a, b), (c, d) = [[Fraction(float(v)) for v in row] for row in hessian]
    determinant = a * d - b * c
    exact = [(-d * Fraction(float(q[0])) + b * Fraction(float(q[1]))) / determinant,
             (c * Fraction(float(q[0])) - a * Fraction(float(q[1]))) / determinant]  # P x = -q, Cramer's rule
    return _disc(INDEFINITE, 10.0), q, hessian, exact


def test_an_objective_whose_quadratic_is_not_shown_psd_is_not_certified():
    """P - diag(w) = P_f must be PSD for g to be (min w)-strongly convex (step 5 of `certificate`); here it has the
    eigenvalue -0.9, and g only 0.1-strongly convex. An answer 1e-4 from x* along that eigenvector was certified at
    3.2e-5 before session 40 (with min w = 1 where 0.1 holds). Now the certifier refuses the Hessian (every
    certificate infinite), and a local problem with that objective has no certifier, so private calibrations refuse
    it (fail closed)."""
    certifier, q, hessian, exact = _indefinite_objective()
    certifier.set_hessian(sp.csc_matrix(hessian))
    x = np.array([0.5, 0.25]) + 1e-4 * np.array([1.0, -1.0]) / np.sqrt(2.0)
    certificate = certifier.bound(x, np.zeros(3), q, 1.0)
    true = float(sum((Fraction(float(v)) - e) ** 2 for v, e in zip(certificate.x, exact, strict=True))) ** 0.5
    assert true > 9e-5
    assert true <= certificate.distance
    z = cp.Variable(2)
    agent = pc.Agent(0.5 * cp.quad_form(z, cp.psd_wrap(INDEFINITE)), [cp.norm(z) <= 10.0], shared=z, name="saddle")
    layout = pc.DistributedProblem([agent]).layouts[0]
    local = LocalProblem(agent, layout, objective=True, penalized=layout.shared_local, certified=True)
    assert local.certifier is None and local.error_bound == np.inf


def test_a_penalty_whose_rounding_leaves_p_minus_diag_w_indefinite_is_refused():
    """P_f = [[1 + h, 1 + h], [1 + h, 1 + 2h]], h = 2^-20, is positive definite (lambda_min about h / 2, proven), but
    fl(P_f + 2^40 I) drops h and 2h from the diagonal (half an ulp of 2^40 is 2^-13): P - 2^40 I is [[1, 1 + h],
    [1 + h, 1]] exactly, with v'(P - 2^40 I)v = -2h for v = (1, -1), so g is not 2^40-strongly convex as the
    certificate would claim. The certifier refuses that Hessian (before session 40 it took it), and takes P_f + I,
    whose rounding its margin covers."""
    h = 2.0 ** -20
    quadratic = np.array([[1.0 + h, 1.0 + h], [1.0 + h, 1.0 + 2.0 * h]])
    certifier = _disc(quadratic, 1.0)
    assert 0.0 < certifier.objective_margin <= h / 2.0
    weight = 2.0 ** 40
    built = quadratic + weight * np.eye(2)
    shifted = [[Fraction(float(built[i, j])) - (weight if i == j else 0) for j in range(2)] for i in range(2)]
    assert shifted[0][0] - 2 * shifted[0][1] + shifted[1][1] == -2 * Fraction(h)  # v'(P - w I)v < 0 exactly
    assert not certifier.set_hessian(sp.csc_matrix(built))
    assert certifier.bound(np.zeros(2), np.zeros(3), np.zeros(2), weight).distance == np.inf
    assert certifier.set_hessian(sp.csc_matrix(quadratic + np.eye(2)))
