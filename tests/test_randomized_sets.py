"""RandomizedADMM and RandomizedDGD on a set that is not a box: the worst-case l1 charge d alpha_k B_inf (+ 2 sqrt(d) e
for a solver's projection) holds after any Euclidean projection (privcvx.algorithms.local_dp), recomputed here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privcvx import algorithms
from privcvx.algorithms.privacy_audit import quadratic_pair
from privcvx.errors import ConvergenceWarning, PrivacyError, ReproducibleNoiseWarning
from privcvx.localsolve import CERTIFIED_ERROR

pytestmark = [pytest.mark.filterwarnings("ignore", category=ReproducibleNoiseWarning),
              pytest.mark.filterwarnings("ignore", category=ConvergenceWarning)]

#: {x1 + x2 = 1} (projected by a solver), agent 0's gradient moved along (1, -1): B_inf = 1/sqrt(2) per coordinate.
B_INF = math.sqrt(0.5)


def _affine():
    return quadratic_pair("affine", n=2, direction=np.array([1.0, -1.0]), shift=1.0).original


def _charge(d: int, b_inf: float, alpha: float, beta: float) -> float:
    """Theorem 2.2's worst case summed over d coordinates, plus the solver's 2 sqrt(d) e (e in l2): one release."""
    return beta * (d * alpha * b_inf + 2.0 * math.sqrt(d) * CERTIFIED_ERROR)


def test_randomized_admm_runs_privately_on_an_affine_set_with_the_recomputed_charge():
    """Refused before (UnsupportedError 'non-box constraints under privacy'). D_i = 2 (L + zeta |N_i|) = 2 (1 + 0.5 * 2)
    on the complete graph of 3 agents; T releases at rate beta."""
    problem, beta, rounds = _affine(), 3.0, 4
    result = problem.solve(algorithms.RandomizedADMM(noise_rate=beta, b_inf=B_INF), rounds=rounds, seed=1,
                           diagnostics=True)
    spent = result.history["epsilon"].to_numpy()
    expected = _charge(2, B_INF, 1.0 / 4.0, beta)
    assert spent[-1] == pytest.approx(rounds * expected, rel=1e-12)
    assert spent[-1] != pytest.approx(rounds * beta * 2 * B_INF / 4.0, rel=1e-9)  # the solver's term is charged
    table = result.privacy
    assert np.all(table["ex_post_ratio"] == 1.0)  # only the worst case is claimed on a set


@pytest.mark.parametrize("method", ["admm", "dgd"])
def test_a_total_epsilon_on_an_affine_set_is_spent_exactly(method):
    problem, total, rounds = _affine(), 2.0, 6
    algorithm = algorithms.RandomizedADMM(epsilon=total, b_inf=B_INF) if method == "admm" else \
        algorithms.RandomizedDGD(epsilon=total, b_inf=B_INF, step=0.5)
    result = problem.solve(algorithm, rounds=rounds, seed=2, diagnostics=True)
    spent = result.history["epsilon"].to_numpy()[-1]
    assert total * (1 - 1e-9) <= spent <= total * (1 + 1e-9)
    if method == "dgd":  # constant step 0.5: every release charges the same, recomputed
        worst = result.privacy["epsilon_worst_case"].to_numpy()
        beta = total / (rounds * _charge(2, B_INF, 0.5, 1.0))
        assert worst.max() == pytest.approx(rounds * _charge(2, B_INF, 0.5, beta), rel=1e-9)


def test_projected_release_sensitivity_refuses_an_uncertified_step_as_the_other_calibrations_do():
    """d shift + 2 sqrt(d) e for a finite e; an infinite or NaN e is refused by the same check as
    `projected_sensitivity` (PrivacyError naming the agent and "cannot be certified"); no private data stays 0."""
    from privcvx.privacy.ex_post import projected_release_sensitivity

    assert projected_release_sensitivity(4, 0.1, 1e-3) == pytest.approx(0.4 + 2 * 2 * 1e-3, rel=1e-15)
    assert projected_release_sensitivity(4, 0.0, math.inf) == 0.0
    for error in (math.inf, math.nan):
        with pytest.raises(PrivacyError, match="zone-a.*cannot be certified"):
            projected_release_sensitivity(4, 0.1, error, agent="zone-a")
