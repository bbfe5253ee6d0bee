"""ObjPert (Eq. (10)) and OutPert (Eq. (12)) inside Algorithm 1: scale, feasibility, Remark 3.1, audit, utility."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from core_problems import box_l1_least_squares
from scipy.stats import beta as beta_dist

import privcvx as pc
from privcvx.algorithms import AgentContext, LinearizedADMM
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


# ---- empirical audit of one perturbed local update ----------------------------------------------------

def _one_update_releases(data: float, perturbation, sensitivity: pc.Sensitivity, draws: int, seed: int) -> np.ndarray:
    """Run the real local update of Algorithm 1 ``draws`` times on a one-sample dataset ``data``."""
    x = cp.Variable(1)
    agent = pc.Agent(0.5 * cp.sum_squares(x - data), [x <= 50, x >= -50], shared=x, name="audited",
                     sensitivity=sensitivity)
    problem = pc.DistributedProblem([agent])
    role = LinearizedADMM(privacy=perturbation).agent_program(agent, AgentContext.for_agent(problem, seed=seed))
    z, w_p = np.zeros(1), np.zeros(1)
    return np.array([role.local_update(z, w_p, 1.0, 0.5)[0][0] for _ in range(draws)])


def _clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    lower = beta_dist.ppf(alpha / 2, k, n - k + 1) if k > 0 else 0.0
    upper = beta_dist.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
    return float(lower), float(upper)


def _threshold_bound(left: np.ndarray, right: np.ndarray, tau: float, delta: float) -> float:
    """95% Clopper-Pearson lower bound on epsilon from the test "release >= tau"."""
    p_low, _ = _clopper_pearson(int(np.sum(right >= tau)), len(right))
    _, q_high = _clopper_pearson(int(np.sum(left >= tau)), len(left))
    return float(np.log(max(p_low - delta, 1e-300) / q_high))


def _epsilon_lower_bound(left: np.ndarray, right: np.ndarray, delta: float) -> float:
    """Best threshold test: choose tau on one half of the draws, bound epsilon on the other half."""
    half = len(left) // 2
    taus = np.quantile(right[:half], np.linspace(0.5, 0.995, 60))
    tau = max(taus, key=lambda t: _threshold_bound(left[:half], right[:half], t, delta))
    return _threshold_bound(left[half:], right[half:], tau, delta)


@pytest.mark.parametrize("perturbation, draws", [
    (pc.ObjectivePerturbation(pc.Laplace(1.0)), 40_000),
    (pc.OutputPerturbation(pc.Gaussian(1.0, 1e-2)), 100_000),
])
def test_empirical_audit_respects_claimed_epsilon(perturbation, draws):
    delta_gradient = 0.2  # neighbouring datasets: d and d + 0.2, so the gradients x - d differ by exactly 0.2
    sensitivity = pc.Sensitivity(l1=delta_gradient, l2=delta_gradient)
    left = _one_update_releases(0.0, perturbation, sensitivity, draws, seed=1)
    right = _one_update_releases(delta_gradient, perturbation, sensitivity, draws, seed=2)
    claimed = perturbation.mechanism.epsilon
    lower = _epsilon_lower_bound(left, right, perturbation.mechanism.delta)
    assert lower <= claimed
    assert lower >= 0.3 * claimed


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
