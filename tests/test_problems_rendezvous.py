"""The rendezvous problem of paper 001, Example 1, against its closed-form and CVXPY optima."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

from privcvx.errors import DeclarationError
from problems import rendezvous
from problems.rendezvous import RELATION

# Addresses in [-1, 1]^2; the meeting point must lie in [0.2, 0.9] x [-0.9, -0.4], which does not
# contain their mean, so W_p is active at the optimum.
MEETING = ((0.2, -0.9), (0.9, -0.4))


@pytest.fixture(scope="module")
def points() -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, size=(6, 2))


def test_centralized_optimum_is_the_clipped_mean(points):
    problem = rendezvous(points, meeting=MEETING)
    ref = problem.solve_centralized(solver=cp.CLARABEL)
    x = np.clip(points.mean(axis=0), *MEETING)
    assert not np.allclose(x, points.mean(axis=0))
    np.testing.assert_allclose(ref.w, x, atol=1e-6)
    assert ref.value == pytest.approx(np.sum((points - x) ** 2), rel=1e-7)


def test_distributed_run_reaches_the_optimum(points):
    problem = rendezvous(points, meeting=MEETING)
    x = np.clip(points.mean(axis=0), *MEETING)
    eta = 1 / max(agent.smoothness for agent in problem.agents)
    result = problem.solve(rounds=200, local_updates=1, rho=2.0, eta=eta)
    np.testing.assert_allclose(result.w, x, atol=1e-6)
    assert result.history["max_violation"].iloc[-1] <= 1e-12


def test_gradient_oracle_and_sensitivity(points):
    problem = rendezvous(points, box=(-1.0, 1.0))
    rng = np.random.default_rng(1)
    for agent, address in zip(problem.agents, points, strict=True):
        var = agent.variables[0]
        var.value = rng.uniform(-1, 1, 2)
        np.testing.assert_allclose(agent.gradient(var.value), agent.objective.grad[var].toarray().ravel(),
                                   atol=1e-12)
        sens = agent.sensitivity
        for _ in range(50):  # moving the address within the box changes the gradient by 2 (a - a')
            moved = rng.uniform(-1, 1, 2)
            change = 2 * (address - moved)
            assert np.abs(change).sum() <= sens.l1 and np.linalg.norm(change) <= sens.l2
        corner = 2 * (np.array([1.0, 1.0]) - np.array([-1.0, -1.0]))  # opposite corners attain it
        assert np.linalg.norm(corner) == pytest.approx(sens.l2) and np.abs(corner).sum() == pytest.approx(sens.l1)


@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"points": [[0.0, 2.0]]}, "points"),
    ({"points": [0.0, 0.5]}, "points"),
    ({"points": [[np.nan, 0.0]]}, "points"),
    ({"box": (1.0, -1.0)}, "box"),
    ({"box": (0.0,)}, "box"),
    ({"meeting": ((0.0, 0.0), (0.0, 1.0))}, "meeting"),
])
def test_bad_input_raises(kwargs, argument):
    args = {"points": [[0.0, 0.5], [0.3, -0.2]], **kwargs}
    with pytest.raises(DeclarationError) as caught:
        rendezvous(**args)
    assert caught.value.argument == argument


def test_relation_and_sensitivity_hold_for_every_neighbour():
    """Replace-one: moving one address anywhere in the box changes the gradient by at most the declared bound."""
    rng = np.random.default_rng(3)
    points = rng.uniform(-1, 1, (4, 2))
    problem = rendezvous(points)
    assert RELATION.startswith("replace_one") and all(agent.declared.relation == RELATION for agent in problem.agents)
    declared = problem.agents[1].sensitivity
    worst = [0.0, 0.0]
    corners = [np.array(c, dtype=float) for c in ((-1, -1), (1, 1), (-1, 1), (1, -1))]
    for moved in [*rng.uniform(-1, 1, (200, 2)), *corners]:
        neighbour = points.copy()
        neighbour[1] = moved
        other = rendezvous(neighbour)
        for x in [*rng.uniform(-3, 3, (5, 2)), np.zeros(2)]:  # outside the box too: z_i(t) may leave it
            change = problem.agents[1].gradient(x) - other.agents[1].gradient(x)
            worst = [max(worst[0], np.abs(change).sum() / declared.l1),
                     max(worst[1], np.linalg.norm(change) / declared.l2)]
            assert np.array_equal(problem.agents[0].gradient(x), other.agents[0].gradient(x))  # others untouched
    assert max(worst) <= 1.0 + 1e-12 and min(worst) >= 0.5
