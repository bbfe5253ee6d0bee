"""The Slater step of the certificate (privcvx/localsolve/exact_feasibility.py) for a solver's answer whose slack lies
a hair outside its cone: floating point puts the slack on the boundary (s_i = 0, or ||u|| = t), exact arithmetic about
2e-17 outside. `ProvenCones.proven_room` gives such a block a negative room (minus how far it may lie outside), and
`ExactFeasibility.exact_move` must absorb it by the step toward the public Slater point, with zero rows (through
`held_move`, which holds the block) and without. Before session 39's fix (a76966c) a problem without zero rows took no
step (Move(0, 0, 0)) and a held block's reach was set to 0, so the certificate missed the violation. The last test
is the step's refusal when the Slater point's own block may lie outside K (an implicit equality among the
inequalities), which no step toward it can repair.

Each answer is what a scripted Clarabel returns to `LocalProblem.project` (the public path: the strategy certifies it,
polish included, and releases the certified point); the released point is compared with the exact projection of the
same float point (rational arithmetic for the wedge, mpmath for the disc)."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import clarabel
import cvxpy as cp
import mpmath
import numpy as np
import pytest
import scipy.sparse as sp

import privcvx as pc
from privcvx.localsolve import LocalProblem
from privcvx.localsolve.exact_feasibility import ExactFeasibility

#: The wedge {x_1 >= 1, x_1 >= SLOPE x_0 + 1}: its apex (0, 1) moves by (violation) / SLOPE along x_0.
SLOPE = 1e-6
#: x_0 of the answer: SLOPE * OFFSET = 2e-17 is below half an ulp of 1, so fl(SLOPE x_0 - x_1) = -1 and the float
#: slack of the second row is 0; exactly it is -2e-17, and the answer is OFFSET from the exact projection (the apex).
OFFSET = 2e-11
#: 2^-27: 1 + TILT^2 rounds to 1, so a float norm puts (1, TILT) on the unit circle; exactly it lies 2^-55 outside.
TILT = 2.0 ** -27
#: The equality x_2 = LEVEL of the problems with zero rows.
LEVEL = 0.5


def _local(constraints: list, x: cp.Variable) -> LocalProblem:
    agent = pc.Agent(cp.sum_squares(x), constraints, shared=x, name="outside")
    return LocalProblem(agent, pc.DistributedProblem([agent]).layouts[0], certified=True)


def _wedge(zero_rows: bool) -> LocalProblem:
    x = cp.Variable(3 if zero_rows else 2)
    return _local([x[1] >= 1.0, x[1] >= SLOPE * x[0] + 1.0, *([x[2] == LEVEL] if zero_rows else [])], x)


def _disc() -> LocalProblem:
    x = cp.Variable(3)
    return _local([cp.SOC(cp.Constant(1.0), x[:2]), x[2] == LEVEL], x)


def _released(local: LocalProblem, x: np.ndarray, z: np.ndarray, monkeypatch) -> tuple[np.ndarray, np.ndarray]:
    """The point p with 2 (x - p) + A'z = 0 exactly in rationals up to p's rounding (the KKT pair of the projection of
    p at `LocalProblem.project`'s weights 2), and what `project` releases when Clarabel answers (x, z) as solved."""
    data = local.data
    assert data.P.nnz == 0 and np.array_equal(data.columns, np.arange(x.size))  # x is z itself
    point = x + 0.5 * (data.A.T @ z)
    answer = SimpleNamespace(x=list(x), z=list(z), s=list(data.b - data.A @ x), status="Solved", obj_val=0.0,
                             obj_val_dual=0.0, r_prim=0.0, r_dual=0.0)

    class Scripted:
        def __init__(self, *args) -> None:
            pass

        def update(self, **kwargs) -> None:
            pass

        def solve(self) -> SimpleNamespace:
            return answer

    monkeypatch.setattr(clarabel, "DefaultSolver", Scripted)  # after the certifier's setup (its Slater point)
    released = local.project(point, np.ones(x.size))
    assert local.strategy == "clarabel" and local.stats.retries == 0  # the scripted answer was certified and kept
    return point, released


def _held_rooms(monkeypatch) -> list[float]:
    """The smallest room (`ExactFeasibility.exact_move`'s own) of the blocks each call of `held_move` holds."""
    rooms, held_move = [], ExactFeasibility.held_move

    def spy(self, residual, error, slack, own, y, held):
        rooms.append(float(np.min(own[held])))
        return held_move(self, residual, error, slack, own, y, held)

    monkeypatch.setattr(ExactFeasibility, "held_move", spy)
    return rooms


def _wedge_distance(x: np.ndarray, point: np.ndarray) -> Fraction:
    """||x - apex||^2 in rationals, after checking that the apex (0, 1[, LEVEL]) is the exact projection of the float
    point: point - apex = A'lambda with lambda > 0 on both inequalities (KKT for the Euclidean projection)."""
    p = [Fraction(float(v)) for v in point]
    apex = [Fraction(0), Fraction(1), Fraction(LEVEL)][:len(p)]
    steep = p[0] / Fraction(SLOPE)  # the multiplier of x_1 >= SLOPE x_0 + 1: A's row (SLOPE, -1)
    flat = -(p[1] - 1) - steep  # of x_1 >= 1: A's row (0, -1)
    assert steep > 0 and flat > 0
    return sum(((Fraction(float(v)) - a) ** 2 for v, a in zip(x, apex, strict=True)), Fraction(0))


@pytest.mark.parametrize("zero_rows", [False, True], ids=["no_zero_rows", "held"])
def test_a_nonneg_slack_a_hair_outside_is_absorbed_by_the_slater_step(zero_rows, monkeypatch):
    """The answer (OFFSET, 1[, LEVEL]) with the dual 1 on both rows of the wedge: a KKT pair for the wedge moved by
    2e-17, whose float slack is (0, 0) and exact second slack -2e-17, 2e-11 from the exact projection (the apex).
    Before the fix it was released with a certificate of 5.3e-15 (no zero rows) or 7.3e-15 (held by `held_move`, its
    reach 0): both below its true distance. Now the Slater step counts the violation (8.9e-9 unpolished) and the
    polished point, 3.5e-15 from the apex, is released with 8.4e-11."""
    local = _wedge(zero_rows)
    certifier = local.certifier
    x = np.array([OFFSET, 1.0, LEVEL][:3 if zero_rows else 2])
    z = np.array([0.0, 2.0, 2.0][1 - zero_rows:])  # weights 2: twice the multipliers 1
    slack = certifier.b - certifier.A @ x
    assert np.all(slack[certifier.data.zero:] == 0.0)  # on the boundary in floating point
    assert Fraction(-1.0) - (Fraction(SLOPE) * Fraction(OFFSET) - 1) < 0  # outside exactly
    room = certifier.proven_room(x, slack)
    assert room[1] < 0.0 and bool(certifier.zero_terms) == zero_rows
    rooms = _held_rooms(monkeypatch)
    point, released = _released(local, x, z, monkeypatch)
    assert _wedge_distance(x, point) >= Fraction(OFFSET) ** 2  # the answer is OFFSET from the exact projection
    assert _wedge_distance(released, point) <= Fraction(local.certificate) ** 2
    assert local.certificate < 1e-7
    if zero_rows:
        assert rooms and min(rooms) < 0.0  # the held path saw the negative room
    unpolished = certifier.bound(x, z, -2.0 * point, 2.0)  # Factorization's path: no polish
    assert _wedge_distance(unpolished.x, point) <= Fraction(unpolished.distance) ** 2


def _disc_distance(x: np.ndarray, point: np.ndarray) -> float:
    """||x - exact projection of point||_2 onto {||(x_0, x_1)|| <= 1, x_2 = LEVEL} (point outside the disc), in 50
    digits."""
    mpmath.mp.dps = 50
    p = [mpmath.mpf(float(v)) for v in point[:2]]
    norm = mpmath.sqrt(p[0] ** 2 + p[1] ** 2)
    assert norm > 1
    exact = [p[0] / norm, p[1] / norm, mpmath.mpf(LEVEL)]
    return float(mpmath.sqrt(sum((mpmath.mpf(float(v)) - e) ** 2 for v, e in zip(x, exact, strict=True))))


def test_an_soc_slack_a_hair_outside_is_absorbed_by_the_slater_step_past_the_held_block(monkeypatch):
    """The unit disc with a zero row x_2 = LEVEL; the answer (1, TILT, LEVEL) with the dual (1, -1, 0) on the cone:
    floating point puts its slack (1, 1, TILT) on the cone's boundary, exactly it is 2^-55 outside, and the answer is
    3.7e-9 from the exact projection (mpmath). `held_move` holds the cone block (the zero row's move would push it
    out); before the fix its reach left out the negative room and the answer was released with a certificate of
    8.2e-15. Now the Slater step absorbs it (8.9e-9 unpolished), and the polished point, 6.9e-18 from the exact
    projection, is released with 4.7e-10."""
    local = _disc()
    certifier = local.certifier
    x = np.array([1.0, TILT, LEVEL])
    z = np.array([0.0, 2.0, -2.0, 0.0])  # weights 2: twice (0 | 1, -1, 0)
    slack = certifier.b - certifier.A @ x
    u = [Fraction(float(v)) for v in slack[2:]]
    assert slack[1] == float(np.linalg.norm(slack[2:])) and u[0] ** 2 + u[1] ** 2 > Fraction(float(slack[1])) ** 2
    assert certifier.proven_room(x, slack)[0] < 0.0
    rooms = _held_rooms(monkeypatch)
    point, released = _released(local, x, z, monkeypatch)
    assert _disc_distance(x, point) > 3e-9
    assert _disc_distance(released, point) <= local.certificate < 1e-7
    assert rooms and min(rooms) < 0.0
    unpolished = certifier.bound(x, z, -2.0 * point, 2.0)
    assert _disc_distance(unpolished.x, point) <= unpolished.distance < 1e-7


def _exact_slack(certifier, x: np.ndarray) -> list[Fraction]:
    """b - Ax in rationals for the stored floats."""
    return [Fraction(float(certifier.b[i])) - sum(Fraction(float(a)) * Fraction(float(v))
                                                  for a, v in zip(certifier.A[i], x, strict=True))
            for i in range(certifier.b.size)]


def test_a_slater_point_outside_its_own_block_is_refused_where_the_step_would_leave_k(monkeypatch):
    """An implicit equality among the inequalities (x_0 + x_1 <= 1 and >= 1, not a singleton slab that
    `freeze_slabs` would freeze) leaves no strictly feasible point: Clarabel's Slater point x0 has one of those two
    slacks exactly negative (about -1.1e-16, rationals), so its proven ball is short (slater_margin < 0). The answer
    (0.5, 0.5, OFFSET, 1) has both slacks exactly 0 and the wedge's second slack -2e-17 exactly (floating point: all
    0), which only a step theta > 0 toward x0 repairs; but every theta > 0 puts the short block outside K exactly
    ((1 - theta) 0 + theta s(x0) < 0), so no x'' of step 3 meets (C) and the certificate must be infinite. Without the
    "short" check of `ExactFeasibility.slater_move` it was 5.5e-15 (theta 2.8e-17, x'' outside K)."""
    x = cp.Variable(4)
    local = _local([x[0] + x[1] <= 1.0, x[0] + x[1] >= 1.0, x[3] >= 1.0, x[3] >= SLOPE * x[2] + 1.0], x)
    certifier = local.certifier
    assert certifier is not None and not certifier.frozen.size and not certifier.zero_terms
    at_slater = _exact_slack(certifier, certifier.x0)
    short = np.flatnonzero(certifier.slater_margin < 0.0)
    assert short.size == 1 and at_slater[short[0]] < 0  # the Slater point's own block outside K, exactly
    answer = np.array([0.5, 0.5, OFFSET, 1.0])
    at_answer = _exact_slack(certifier, answer)
    wedge = int(np.argmin(at_answer))
    assert at_answer[short[0]] == 0 and at_answer[wedge] < 0 and certifier.slater_margin[wedge] > 0.5
    assert np.all(certifier.b - certifier.A @ answer == 0.0)  # the repair (step 2) sees nothing to do
    theta = -at_answer[wedge] / (at_slater[wedge] - at_answer[wedge])  # the least theta that repairs the wedge
    repaired = [(1 - theta) * mine + theta * slater for mine, slater in zip(at_answer, at_slater, strict=True)]
    assert repaired[wedge] == 0 and repaired[short[0]] < 0  # ... and puts the short block outside K
    moves, slater_move = [], ExactFeasibility.slater_move

    def spy(self, delta, reach, drift):
        moves.append(slater_move(self, delta, reach, drift))
        return moves[-1]

    monkeypatch.setattr(ExactFeasibility, "slater_move", spy)
    certifier.set_hessian(2.0 * sp.identity(4, format="csc"))
    assert certifier.bound(answer, np.zeros(4), -2.0 * answer, 2.0).distance == np.inf
    assert moves and moves[-1].delta == np.inf
