"""Empirical privacy audits: releases of real runs on neighbouring datasets, epsilon bounded from below."""

from __future__ import annotations

import warnings

import dp_accounting
import numpy as np
import pytest
from audit_tools import epsilon_lower_bound, one_update_releases

import privcvx as pc
from privcvx.privacy.mechanisms import mechanism_from_dict

DELTA_GRADIENT = 0.2  # neighbouring datasets d and d + 0.2: the gradients x - d differ by exactly 0.2
SENSITIVITY = pc.Sensitivity(l1=DELTA_GRADIENT, l2=DELTA_GRADIENT)


@pytest.mark.parametrize("perturbation, draws", [
    (pc.ObjectivePerturbation(pc.Laplace(1.0)), 40_000),
    (pc.OutputPerturbation(pc.Gaussian(1.0, 1e-2)), 100_000),
])
def test_empirical_audit_respects_claimed_epsilon(perturbation, draws):
    left = one_update_releases(0.0, perturbation, SENSITIVITY, draws, seed=1)
    right = one_update_releases(DELTA_GRADIENT, perturbation, SENSITIVITY, draws, seed=2)
    claimed = perturbation.mechanism.epsilon
    lower = epsilon_lower_bound(left, right, perturbation.mechanism.delta)
    assert lower <= claimed
    assert lower >= 0.3 * claimed


def _scaled(mechanism: pc.Gaussian, factor: float) -> pc.Mechanism:
    """The same Gaussian with its noise multiplier times ``factor`` (an under-noised copy for the power check)."""
    return mechanism_from_dict({**mechanism.to_dict(), "noise_multiplier": factor * mechanism.noise_multiplier})


def test_gaussian_audit_meets_the_exact_epsilon_and_catches_under_noising():
    """Against the Gaussian's exact epsilon (Balle & Wang), not the looser claimed one; 25% less noise fails."""
    delta, draws = 0.05, 100_000
    mechanism = pc.Gaussian(1.0, delta)  # classic calibration: claimed epsilon 1, exact epsilon at delta 0.338
    exact = dp_accounting.get_epsilon_gaussian(mechanism.noise_multiplier, delta)
    bounds = {}
    for factor in (1.0, 0.75):
        perturbation = pc.ObjectivePerturbation(_scaled(mechanism, factor))
        left = one_update_releases(0.0, perturbation, SENSITIVITY, draws, seed=3)
        right = one_update_releases(DELTA_GRADIENT, perturbation, SENSITIVITY, draws, seed=4)
        bounds[factor] = epsilon_lower_bound(left, right, delta)
    print(f"exact {exact:.3f}, audited {bounds}")
    assert bounds[1.0] <= exact < mechanism.epsilon
    assert bounds[0.75] > exact  # the audit has the power to see 25% under-noising


def test_outpert_audit_with_an_active_constraint():
    """W = [0.05, 50]: dataset 0's noise-free release 0 is clipped to 0.05, dataset 0.2's (0.0667) is not."""
    perturbation = pc.OutputPerturbation(pc.Laplace(1.0))
    left = one_update_releases(0.0, perturbation, SENSITIVITY, 60_000, seed=5, box=(0.05, 50.0))
    right = one_update_releases(DELTA_GRADIENT, perturbation, SENSITIVITY, 60_000, seed=6, box=(0.05, 50.0))
    assert np.median(left) == pytest.approx(0.05, abs=0.01)  # the constraint is active for dataset 0
    lower = epsilon_lower_bound(left, right, 0.0)
    print(f"active constraint: audited {lower:.3f} of claimed 1")
    assert lower <= 1.0
    # The projection shrank the difference (0.0667 -> 0.0167) while the noise is calibrated to the derived
    # 0.0667: the audit sees about a quarter of the claimed epsilon, never more.
    assert 0.05 <= lower <= 0.5


def test_a_whole_ten_round_run_of_two_agents_stays_within_its_composed_epsilon():
    from problems.rendezvous import rendezvous

    privacy = pc.ObjectivePerturbation(pc.Gaussian(1.0, 0.05))
    direction = np.ones(2) / np.sqrt(2.0)

    def statistic(problem: pc.DistributedProblem, seed: int) -> tuple[float, float]:
        result = problem.solve(rounds=10, privacy=privacy, eta=0.5, rho=1.0, seed=seed, diagnostics=False)
        releases = [m["z"] for m in result.transcript if m.sender == "agent-0" and m.round >= 1]
        return float(sum(direction @ z for z in releases)), float(result.privacy["epsilon_pld"].iloc[0])

    # Agent 0 moves between opposite corners of X = [-1, 1]^2: its gradient 2 (x - a) changes by exactly the
    # declared L2 sensitivity 2 ||hi - lo||_2. The meeting box is wide, so no release is clipped.
    neighbours = [rendezvous(np.array([address, (0.3, -0.2)]), box=(-1.0, 1.0), meeting=(-30.0, 30.0))
                  for address in ((-1.0, -1.0), (1.0, 1.0))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # integer seeds: a research audit
        left = [statistic(neighbours[0], seed) for seed in range(1500)]
        right = [statistic(neighbours[1], 10_000 + seed) for seed in range(1500)]
    composed = left[0][1]  # the ledger's epsilon for 10 Gaussian updates at delta 0.05
    lower = epsilon_lower_bound(np.array([v for v, _ in left]), np.array([v for v, _ in right]), 0.05)
    print(f"composed {composed:.3f}, audited lower bound {lower:.3f}")
    assert 0.0 < lower <= composed
