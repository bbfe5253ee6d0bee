"""The functional mechanism's release, charged by the release path and audited empirically on the secure path in
every mode against its ledger's claim, with power against a 0.75x under-noising (issue 27 item 3)."""

import numpy as np
import pytest

from privcvx.algorithms.privacy_audit import PrivacyAuditFailure
from privcvx.privacy import noise
from privcvx.privacy.accounting import tightest_epsilon
from privcvx.privacy.grid import integer_noise
from privcvx.privacy.mechanisms import Gaussian, Laplace, Sensitivity
from privcvx.privacy.noise import SeededNoise
from problems.fair_logistic import (
    breast_cancer_fairness,
    coefficient_sensitivity,
    fair_logistic,
    perturb_coefficients,
    release_context,
    worst_case_coefficients,
)
from problems.functional_mechanism_audit import check_functional_mechanism, declared_pair, sharpest_pair

#: (mode, runs): pdfc (Laplace, epsilon scale) and the Gaussian modes (mu scale, at epsilon = 8: a large per-release
#: epsilon makes the test sharp), each with and without the split budget of x_s = attribute 0.
MODES = [({"method": "pdfc"}, 2000), ({"method": "pdfc", "attribute": 0}, 2000),
         ({"method": "adfc", "attribute": 0, "epsilon": 8.0}, 1200), ({"method": "relaxed", "epsilon": 8.0}, 1200)]


@pytest.mark.parametrize(("mode", "runs"), MODES, ids=lambda value: str(value))
def test_every_mode_passes_against_its_ledger_with_power(mode, runs):
    report = check_functional_mechanism(runs=runs, **mode)
    print(report)
    assert report.lower_bound <= report.claimed < report.under_noised
    assert report.attained == pytest.approx(1.0)  # the declared pair attains the charged sensitivity
    assert report.scale == ("epsilon" if mode["method"] == "pdfc" else "mu")


def test_a_real_pair_stays_below_the_claim_and_cannot_show_power():
    """The sharpest real pair changes theta by 1 of Delta_1 = 9 (d = 2): far below the charge, so no power."""
    with pytest.raises(PrivacyAuditFailure, match="no power") as failure:
        check_functional_mechanism("pdfc", pair=sharpest_pair(2), runs=1000)
    report = failure.value.report
    assert report.lower_bound <= report.claimed and "exceeds" not in str(failure.value)
    assert report.attained == pytest.approx(1.0 / coefficient_sensitivity(2)[0])


def test_a_release_drawn_with_less_noise_than_charged_fails(monkeypatch):
    """The grid's integer noise drawn at 0.75x the scale the ledger charges: the audit reads the claim from the
    ledger and refutes it."""
    monkeypatch.setattr(noise, "integer_noise", lambda kind, scale, size: integer_noise(kind, 0.75 * scale, size))
    with pytest.raises(PrivacyAuditFailure, match="exceeds the ledger's epsilon"):
        check_functional_mechanism("pdfc", runs=2000)


@pytest.mark.parametrize("method", ["pdfc", "adfc", "relaxed"])
def test_the_release_is_one_charge_of_the_whole_budget_and_phi_s_gets_ratio_times_it(method):
    """One release, charged Laplace(epsilon) or the analytic Gaussian(epsilon, delta) for (Delta_1, Delta_2), split
    or not; Phi_s's noise is 1/ratio times Phi_n's (the seeded path: the noise is the float mechanism's)."""
    d, draws = 2, 4000
    theta = np.zeros(d + d * d + d)
    context = release_context("agent", SeededNoise(np.random.SeedSequence(1)), theta.size)
    released = np.array([perturb_coefficients(theta, d, method, 2.0, 1e-5, 0, 0.5, context) for _ in range(draws)])
    ((mechanism, count),) = context.ledger.entries
    expected = Laplace(2.0) if method == "pdfc" else Gaussian(2.0, 1e-5, analytic=True)
    assert count == draws and mechanism.signature() == expected.signature()
    spread = released.std(axis=0)
    phi_s, phi_n = spread[0], spread[-1]  # a_0 (Phi_s of attribute 0) and c_1 (Phi_n)
    l1, l2 = coefficient_sensitivity(d)
    assert phi_n == pytest.approx(expected.scale(Sensitivity(l1=l1, l2=l2)) * (2 ** 0.5 if method == "pdfc" else 1),
                                  rel=0.05)
    assert phi_s / phi_n == pytest.approx(1.0 if method == "relaxed" else 2.0, rel=0.08)


def test_fair_logistic_reports_the_ledger_of_its_release():
    X, y, z = breast_cancer_fairness()
    model = fair_logistic(X[:60], y[:60], z[:60], 0.1, "pdfc", 1.0, attribute=0)
    assert tightest_epsilon(model.ledger, 1e-6) == pytest.approx(1.0, rel=1e-3)  # one charge: the grid's epsilon
    assert fair_logistic(X[:60], y[:60], z[:60], 0.1).ledger is None


def test_declared_pair_attains_the_declared_sensitivity_outside_phi_s():
    for method, norm in (("pdfc", 0), ("adfc", 1)):
        first, second = declared_pair(2, method, 0)
        assert np.count_nonzero(first - second) == 1 and np.flatnonzero(first - second)[0] == first.size - 1
        assert np.abs(first - second).sum() == pytest.approx(coefficient_sensitivity(2)[norm])
    first, second = sharpest_pair(2)
    assert np.count_nonzero(first - second) == 1 and np.abs(first - second).sum() == pytest.approx(1.0)
    # every real pair changes theta by at most the declared Delta_1 (the worst by 0.31 Delta_1 at d = 2)
    largest = max(np.abs(a - b).sum() for a, b in worst_case_coefficients(2))
    assert 0.3 < largest / coefficient_sensitivity(2)[0] <= 1.0
