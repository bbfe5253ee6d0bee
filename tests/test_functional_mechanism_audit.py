"""The functional mechanism's release (PDFC) audited empirically on the secure path (issue 27 item 3)."""

import numpy as np
import pytest

from privcvx.algorithms.privacy_audit import PrivacyAuditFailure
from problems.fair_logistic import coefficient_sensitivity, worst_case_coefficients
from problems.functional_mechanism_audit import check_functional_mechanism, sharpest_pair


def test_pdfc_release_passes_with_power():
    report = check_functional_mechanism(2, 18.0, runs=3000)
    print(report)
    # the pair's bound: |Delta a_1| = 1 on the grid, over the discrete Laplace's scale (about 18 / 9 = 2)
    assert 1.9 < report.claimed_epsilon < 2.2
    assert report.lower_bound <= report.claimed_epsilon < report.under_noised
    assert report.attained == pytest.approx(1.0 / coefficient_sensitivity(2)[0])


def test_sharpest_pair_changes_one_coordinate_by_one():
    first, second = sharpest_pair(2)
    assert np.count_nonzero(first - second) == 1 and np.abs(first - second).sum() == pytest.approx(1.0)
    # every pair changes theta by at most the declared Delta_1 (the worst by 0.31 Delta_1 at d = 2)
    largest = max(np.abs(a - b).sum() for a, b in worst_case_coefficients(2))
    assert 0.3 < largest / coefficient_sensitivity(2)[0] <= 1.0


def test_audit_fails_a_release_drawn_with_less_noise(monkeypatch):
    """A PDFC whose noise is 0.5x the claim's is refuted: the audit draws through perturb_coefficients itself."""
    import problems.functional_mechanism_audit as audit

    real = audit.perturb_coefficients
    monkeypatch.setattr(audit, "perturb_coefficients",
                        lambda theta, d, method, epsilon, *rest: real(theta, d, method, 2 * epsilon, *rest))
    with pytest.raises(PrivacyAuditFailure, match="exceeds"):
        check_functional_mechanism(2, 18.0, runs=500)
