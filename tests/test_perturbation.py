"""ObjPert (Eq. (10)) and OutPert (Eq. (12)) inside Algorithm 1: scale, feasibility, Remark 3.1, audit, utility."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from core_problems import box_l1_least_squares

import privcvx as pc
from privcvx.errors import PrivacyError

SENSITIVITY = pc.Sensitivity(l1=0.05, l2=0.05)


def _quadratic_agents(count: int, n: int, constraints: bool, seed: int = 0) -> pc.DistributedProblem:
    rng = np.random.default_rng(seed)
    agents = []
    for _ in range(count):
        x = cp.Variable(n)
        target = rng.normal(size=n)
        agents.append(pc.Agent(0.5 * cp.sum_squares(x - target), [x <= 1, x >= -1] if constraints else [],
                               shared=x, sensitivity=SENSITIVITY))
    return pc.DistributedProblem(agents)


def test_noise_magnitude_matches_eq29_expectation():
    agents, n, local_updates, rounds = 3, 10, 2, 200
    problem = _quadratic_agents(agents, n, constraints=True)
    mechanism = pc.Laplace(0.5)
    result = problem.solve(rounds=rounds, local_updates=local_updates, rho=1.0, eta=0.5,
                           privacy=pc.ObjectivePerturbation(mechanism), seed=4)
    expected = agents * local_updates * n * mechanism.expected_abs(mechanism.scale(SENSITIVITY))
    assert result.history["noise_magnitude"].mean() == pytest.approx(expected, rel=0.05)


def test_objpert_releases_are_feasible_and_outpert_are_not():
    problem, eta, rho = box_l1_least_squares(sensitivity=SENSITIVITY)
    reference = problem.solve_centralized()
    active = np.isclose(np.abs(reference.w), 0.5, atol=1e-6).any() or np.isclose(np.abs(reference.w).sum(), 2.0)
    assert active, "the test needs constraints that are active at the optimum"
    mechanism = pc.Gaussian(0.5, 1e-3)
    objective = problem.solve(rounds=30, rho=rho, eta=eta, privacy=pc.ObjectivePerturbation(mechanism), seed=1)
    output = problem.solve(rounds=30, rho=rho, eta=eta, privacy=pc.OutputPerturbation(mechanism), seed=1)
    assert (objective.history["max_violation"] <= 1e-6).all()
    assert (output.history["max_violation"] > 0).all()
    assert (objective.history["noise_magnitude"] > 0).all()


@pytest.mark.parametrize("mechanism", [pc.Laplace(0.3), pc.Gaussian(0.3, 1e-4)])
def test_remark_3_1_objpert_equals_outpert_on_unconstrained_sets(mechanism):
    problem = _quadratic_agents(3, 5, constraints=False)
    options = {"rounds": 8, "local_updates": 3, "rho": 2.0, "eta": pc.schedules.inverse_sqrt(0.5), "seed": 9}
    objective = problem.solve(privacy=pc.ObjectivePerturbation(mechanism), **options)
    output = problem.solve(privacy=pc.OutputPerturbation(mechanism, sensitivity="derived"), **options)
    assert np.max(np.abs(objective.w - output.w)) <= 1e-9
    for a, b in zip(objective.z, output.z, strict=True):
        assert np.max(np.abs(a - b)) <= 1e-9
    assert not np.allclose(objective.history["noise_magnitude"], output.history["noise_magnitude"])


def test_privacy_requires_declared_sensitivity():
    x = cp.Variable(2)
    problem = pc.DistributedProblem([pc.Agent(cp.sum_squares(x), shared=x, name="silent")])
    with pytest.raises(PrivacyError, match=r"\[agent 'silent'\] argument 'sensitivity'"):
        problem.solve(rounds=2, privacy=pc.ObjectivePerturbation(pc.Laplace(1.0)))
    with pytest.raises(PrivacyError, match="privacy"):
        problem.solve(rounds=2, privacy=pc.Laplace(1.0))


def test_data_dependent_sensitivity_callable_is_evaluated_at_the_iterate():
    x = cp.Variable(2)
    seen = []

    def sensitivity(value):
        seen.append(value.copy())
        return pc.Sensitivity(l1=0.1 * (1 + np.abs(value).sum()), l2=0.1)

    problem = pc.DistributedProblem([pc.Agent(cp.sum_squares(x - 1), [x <= 0.5], shared=x, sensitivity=sensitivity)])
    result = problem.solve(rounds=4, local_updates=2, rho=1.0, eta=0.2,
                           privacy=pc.ObjectivePerturbation(pc.Laplace(1.0)), seed=0)
    assert len(seen) == 8
    assert (result.history["max_violation"] <= 1e-12).all()


def test_budget_mode_spends_its_target():
    problem, eta, rho = box_l1_least_squares(agents=2, sensitivity=SENSITIVITY)
    budget = pc.Budget(2.0, 1e-5)
    result = problem.solve(rounds=10, local_updates=2, rho=rho, eta=eta, privacy=pc.ObjectivePerturbation(budget))
    spent = result.history["epsilon"].iloc[-1]
    assert spent <= 2.0 * 1.01 and spent >= 2.0 * 0.95
    assert (result.privacy["steps"] == 20).all()


def test_utility_large_epsilon_near_optimum_small_epsilon_worse():
    problem, eta, rho = box_l1_least_squares(sensitivity=SENSITIVITY)
    reference = problem.solve_centralized()
    gaps = {}
    for epsilon in (1e4, 0.1):
        result = problem.solve(rounds=60, rho=3.0, eta=eta, seed=0,
                               privacy=pc.ObjectivePerturbation(pc.Laplace(epsilon)))
        gaps[epsilon] = abs(result.history["objective"].iloc[-1] - reference.value) / abs(reference.value)
    assert gaps[1e4] <= 1e-2
    assert gaps[0.1] > 10 * gaps[1e4]
