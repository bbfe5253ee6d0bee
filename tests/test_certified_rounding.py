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
from privcvx.algorithms import PRADMM
from privcvx.algorithms.base import AgentContext
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


def test_a_penalty_whose_rounding_leaves_p_minus_diag_w_indefinite_takes_the_deficit_from_min_w():
    """P_f = [[1 + h, 1 + h], [1 + h, 1 + 2h]], h = 2^-20, is positive definite (lambda_min about h / 2, proven), but
    fl(P_f + 2^40 I) drops h and 2h from the diagonal (half an ulp of 2^40 is 2^-13): P - 2^40 I is [[1, 1 + h],
    [1 + h, 1]] exactly, with the eigenvalue -h (v = (1, -1)), so g is not 2^40-strongly convex as the certificate
    would claim. Before session 40 the certifier took it at 2^40; then it refused it; now it takes the strong
    convexity that survives, 2^40 minus a loss (u max P_jj - m) at least h (exact: mpmath), and loses nothing on P_f
    + I, whose rounding its margin covers."""
    h = 2.0 ** -20
    quadratic = np.array([[1.0 + h, 1.0 + h], [1.0 + h, 1.0 + 2.0 * h]])
    certifier = _disc(quadratic, 1.0)
    assert 0.0 < certifier.objective_margin <= h / 2.0
    weight = 2.0 ** 40
    built = quadratic + weight * np.eye(2)
    (a, b), (_, c) = [[mpmath.mpf(float(built[i, j])) - (weight if i == j else 0) for j in range(2)] for i in range(2)]
    deficit = -((a + c) / 2 - mpmath.sqrt(((a - c) / 2) ** 2 + b ** 2))  # -lambda_min(P - w I), exactly h
    assert deficit == h
    assert certifier.set_hessian(sp.csc_matrix(built))
    assert deficit <= certifier.convexity_loss <= 2.0 ** -12
    assert certifier.set_hessian(sp.csc_matrix(quadratic + np.eye(2))) and certifier.convexity_loss == 0.0



#: The radius of the ball over which `_wide_least_squares` minimizes (active at the step below).
RADIUS = 0.5


def _wide_least_squares(private: bool) -> tuple[pc.DistributedProblem, np.ndarray, np.ndarray]:
    """Two agents with f_p(z) = z'Mz + c'z, M = A'A, A 3 x 6 (rank 3: M singular, non-diagonal, and as stored
    indefinite by round-off), c = -2 A'b, over ||z||_2 <= `RADIUS`; ``private``: z = (x, y), x (4 entries) shared
    and y a private variable. The problem, M and c."""
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(3, 6)), rng.normal(size=3)
    matrix, linear = a.T @ a, -2.0 * (a.T @ b)
    assert np.array_equal(matrix, matrix.T) and np.linalg.matrix_rank(matrix) == 3
    agents = []
    for name in ("wide-0", "wide-1"):
        x, y = cp.Variable(4), cp.Variable(2)
        z = cp.hstack([x, y]) if private else cp.Variable(6)
        agents.append(pc.Agent(cp.quad_form(z, matrix) + linear @ z, [cp.norm(z) <= RADIUS],
                               shared={"x": x} if private else z, name=name,
                               declared=pc.Declared(sensitivity=pc.Sensitivity(l2=0.1),
                                                    release_bound=pc.ReleaseBound(shared=0.1, private=0.1))))
    return pc.DistributedProblem(agents), matrix, linear


def _ball_step(matrix: np.ndarray, linear: np.ndarray, weight: float) -> list[mpmath.mpf]:
    """argmin z'Mz + linear'z + weight/2 ||z||^2 over ||z||_2 <= `RADIUS`, in 50 digits: z(l) = -(2M + (weight + 2l)
    I)^-1 linear with l >= 0 the root of ||z(l)|| = `RADIUS` (bisection; ||z(l)|| falls as l grows)."""
    mpmath.mp.dps = 50
    n = matrix.shape[0]

    def point(multiplier: mpmath.mpf) -> mpmath.matrix:
        system = mpmath.matrix([[2 * mpmath.mpf(float(matrix[i, j])) + (weight + 2 * multiplier) * (i == j)
                                 for j in range(n)] for i in range(n)])
        return -mpmath.lu_solve(system, mpmath.matrix([mpmath.mpf(float(v)) for v in linear]))

    low, high = mpmath.mpf(0), mpmath.mpf(1)
    assert mpmath.norm(point(low)) > RADIUS  # the ball is active
    while mpmath.norm(point(high)) > RADIUS:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if mpmath.norm(point(middle)) > RADIUS else (low, middle)
    return list(point(high))


def test_a_singular_quadratic_from_a_wide_least_squares_is_certified():
    """cp.quad_form(z, A'A) with a wide A: CVXPY keeps P_f = 2 A'A (not diagonal), singular and, as stored, indefinite
    by round-off (v'Mv < 0 exactly; lambda_min(P_f) >= -2.9e-14 proven). From session 40's first rule (P_f proven PSD
    with a margin) until this one the step had no certifier, so PR-ADMM and the other private methods refused the
    agent; now the certificate takes that much (3.0e-14) from min w (`proven`), and the released step (3e-17 from
    the exact step, mpmath, 50 digits) is within its certificate (2.8e-10)."""
    problem, matrix, linear = _wide_least_squares(private=False)
    direction = np.linalg.eigh(matrix)[1][:, 0]
    assert sum(Fraction(float(direction[i])) * Fraction(float(matrix[i, j])) * Fraction(float(direction[j]))
               for i in range(6) for j in range(6)) < 0  # indefinite as stored: about -7.2e-17
    layout = problem.layouts[0]
    local = LocalProblem(problem.agents[0], layout, objective=True, penalized=layout.shared_local, certified=True)
    assert local.certifier is not None and -1e-12 < local.certifier.objective_margin < 0.0
    assert local.error_bound == 1e-4
    weight, tilt = 1.0, np.array([0.3, -0.2, 0.1, 0.0, 0.4, -0.1])
    z = local.step(tilt, weight)
    exact = _ball_step(matrix, linear + tilt, weight)
    true = float(mpmath.sqrt(sum((mpmath.mpf(float(v)) - e) ** 2 for v, e in zip(z, exact, strict=True))))
    assert 0.0 < local.certifier.convexity_loss < 1e-12
    assert true <= local.certificate <= 1e-4


def test_a_singular_quadratic_on_a_private_variable_is_refused_naming_the_reason():
    """The same f_p with z = (x, y), y private (no penalty): the round-off's negative curvature on y is not absorbed by
    any penalty, so the step has no certifier, and PR-ADMM refuses the agent with a `PrivacyError` that names it and
    the reason (its quadratic term not proven PSD as built)."""
    problem, _, _ = _wide_least_squares(private=True)
    layout = problem.layouts[0]
    local = LocalProblem(problem.agents[0], layout, objective=True, penalized=layout.shared_local, certified=True)
    assert local.certifier is None and local.error_bound == np.inf
    topology = pc.Topology.ring().bind(problem.names)
    context = AgentContext.for_agent(problem, 0, seed=0, topology=topology, rounds=2)
    with pytest.raises(pc.errors.PrivacyError, match=r"(?s)wide-0.*quadratic term .* not proven PSD as built"):
        PRADMM(epsilon=1.0, delta=1e-5, strong_convexity=0.0).agent_program(problem.agents[0], context)


def test_a_slightly_indefinite_quadratic_is_certified_with_the_strong_convexity_that_survives():
    """P_f = [[1, 1], [1, 1 - 2^-34]] (lambda_min about -2^-35, within the round-off tolerance) plus w = 3 2^-36 on
    both entries: g is only about w / 3-strongly convex. An answer 1e-2 from x* (rationals, Cramer's rule on the
    stored Hessian) along that eigenvector is within its certificate, which takes m from w; with min w alone (no
    loss, the rule before this session's) the certificate would be 0.58 of the true distance."""
    quadratic = np.array([[1.0, 1.0], [1.0, 1.0 - 2.0 ** -34]])
    weight = 3.0 * 2.0 ** -36
    certifier = _disc(quadratic, 100.0)
    assert -2.0 ** -34 < certifier.objective_margin < 0.0
    hessian = quadratic + weight * np.eye(2)
    assert certifier.set_hessian(sp.csc_matrix(hessian))
    q = -(hessian @ np.array([0.5, 0.25]))
    (a, b), (c, d) = [[Fraction(float(v)) for v in row] for row in hessian]
    determinant = a * d - b * c
    exact = [(-d * Fraction(float(q[0])) + b * Fraction(float(q[1]))) / determinant,
             (c * Fraction(float(q[0])) - a * Fraction(float(q[1]))) / determinant]
    direction = np.linalg.eigh(hessian)[1][:, 0]
    x = np.array([float(v) for v in exact]) + 1e-2 * direction
    certificate = certifier.bound(x, np.zeros(3), q, weight)
    true = float(sum((Fraction(float(v)) - e) ** 2 for v, e in zip(certificate.x, exact, strict=True))) ** 0.5
    assert true > 9.9e-3
    assert true <= certificate.distance < 1.1 * true
    certifier.convexity_loss = 0.0
    assert certifier.bound(x, np.zeros(3), q, weight).distance < 0.65 * true
