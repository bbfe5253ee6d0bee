"""An empirical privacy audit of the functional mechanism's release (`problems.fair_logistic.perturb_coefficients`).

The thesis's PDFC (Algorithm 6; each agent of `problems.distributed_fair_logistic` alike) releases theta = (a, M, c)
with Laplace noise of scale Delta_1 / epsilon, Delta_1 = `coefficient_sensitivity` (d)[0], and claims pure
epsilon-DP. `check_functional_mechanism` audits that release the way `pc.algorithms.check_privacy` audits an
algorithm (issue 27): a neighbouring pair theta(D), theta(D') from `worst_case_coefficients`, ``runs`` draws on
each through the builders' own secure path (``perturb_coefficients`` with ``agent_noise_sources(resolve_seed(None,
private=True), 1)``: the grid's discrete Laplace), the exact LLR of each release (``privacy_audit.release_log_ratio``:
both noise-free coefficient vectors are known), the thresholds ``LAPLACE_THRESHOLDS`` fixed in advance and
Clopper-Pearson bounds with Bonferroni (`epsilon_lower_bound`).

Power: the under-noised variant is the same draw with epsilon / ``under_noising``, i.e. ``under_noising`` times the
Laplace scale (perturb_coefficients has no noise hook; its scale is Delta_1 / epsilon), with the claim unchanged.
The pair changes theta by less than Delta_1 (the largest change of any pair of `worst_case_coefficients` is 0.31
Delta_1 at d = 2, 0.25 at d = 3: the thesis's Delta_1 bounds |x_j| <= 1 per coordinate, not ||x|| <= 1), so no pair
can show power against the claim itself. The audit therefore also checks the bound the release guarantees for the
pair, ``pair_epsilon`` = ||grid(theta) - grid(theta')||_1 / t (t: the discrete Laplace's scale): the lower bound
must not exceed it, and the under-noised variant's must (the audit sees the noise actually drawn). The default pair
is the sharpest: the largest change of a single coordinate (a_1 by 1: the label of x = e_1 flipped), for which the
LLR test at the largest threshold is the optimal one.
"""

from __future__ import annotations

import math

import numpy as np

from privcvx.algorithms.privacy_audit import (
    LAPLACE_THRESHOLDS,
    DrawnRelease,
    PrivacyAudit,
    PrivacyAuditFailure,
    epsilon_lower_bound,
    release_log_ratio,
)
from privcvx.errors import ParameterError, check_int
from privcvx.privacy.mechanisms import check_epsilon
from privcvx.privacy.noise import agent_noise_sources
from privcvx.runtime.loop import resolve_seed
from problems.fair_logistic import coefficient_sensitivity, perturb_coefficients, worst_case_coefficients


def sharpest_pair(d: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair of `worst_case_coefficients` (d) whose change is the largest among those in one coordinate."""
    single = [(float(np.abs(first - second).sum()), index) for index, (first, second)
              in enumerate(worst_case_coefficients(d)) if np.count_nonzero(np.abs(first - second) > 1e-12) == 1]
    return worst_case_coefficients(d)[max(single)[1]]


def _llr_sample(original: np.ndarray, neighbour: np.ndarray, d: int, epsilon: float, runs: int, on_neighbour: bool,
                factor: float) -> tuple[np.ndarray, float]:
    """The normalized LLR towards D' of ``runs`` secure PDFC releases on D (or D'), and the pair's bound."""
    noise = agent_noise_sources(resolve_seed(None, private=True), 1)[0]
    drawn = DrawnRelease(original, "laplace", coefficient_sensitivity(d)[0] / epsilon * factor,
                   coefficient_sensitivity(d)[0], True, False)
    source = neighbour if on_neighbour else original
    statistic, normalizer = np.empty(runs), math.nan
    for run in range(runs):
        released = perturb_coefficients(source, d, "pdfc", epsilon / factor, 0.0, None, 1.0, noise)
        llr, normalizer = release_log_ratio(released, original, neighbour, drawn)
        statistic[run] = llr / normalizer
    return statistic, normalizer


def check_functional_mechanism(d: int = 2, epsilon: float = 18.0, *, pair: tuple[np.ndarray, np.ndarray] | None = None,
                               runs: int = 2000, under_noising: float = 0.75,
                               confidence: float = 0.95) -> PrivacyAudit:
    """Audit PDFC's epsilon-DP release of theta (module docstring); raise `PrivacyAuditFailure` if refuted.

    ``pair``: theta(D), theta(D') flattened (default `sharpest_pair`); ``epsilon``: the claim (large, so that the
    pair's share of it, about 2 at the default, makes the test sharp). The report's ``claimed`` is ``epsilon``,
    ``claimed_epsilon`` the pair's bound, ``attained`` ||theta - theta'||_1 / Delta_1. Fails when the lower bound
    exceeds either, or when the under-noised variant's does not exceed the pair's bound ("no power").
    """
    epsilon = check_epsilon(epsilon, argument="epsilon")
    runs = check_int(runs, argument="runs")
    if not 0 < under_noising < 1:
        raise ParameterError(f"must lie in (0, 1), got {under_noising!r}", argument="under_noising")
    original, neighbour = sharpest_pair(d) if pair is None else (np.asarray(pair[0], float), np.asarray(pair[1], float))
    thresholds = np.array(LAPLACE_THRESHOLDS)

    def lower_bound(factor: float) -> tuple[float, float]:  # the variant's lower bound, and the pair's bound
        negatives, pair_epsilon = _llr_sample(original, neighbour, d, epsilon, runs, False, factor)
        positives, _ = _llr_sample(original, neighbour, d, epsilon, runs, True, factor)
        return epsilon_lower_bound(negatives, positives, thresholds, 0.0, confidence), pair_epsilon

    (lower, claimed_pair), (under, _) = lower_bound(1.0), lower_bound(under_noising)
    failures = []
    if lower > min(epsilon, claimed_pair):
        failures.append(f"the empirical lower bound {lower:.4f} exceeds the claimed epsilon {epsilon:g} or the "
                        f"pair's bound {claimed_pair:.4f}")
    if under <= claimed_pair:
        failures.append(f"no power: the {under_noising}x under-noised variant's lower bound {under:.4f} does not "
                        f"exceed the pair's bound {claimed_pair:.4f}")
    attained = float(np.abs(original - neighbour).sum()) / coefficient_sensitivity(d)[0]
    report = PrivacyAudit(f"functional mechanism (pdfc, d={d})", "epsilon", epsilon, claimed_pair, 0.0, lower, under,
                          under_noising, attained, 0, runs, 1, 1, confidence, tuple(failures))
    if failures:
        raise PrivacyAuditFailure(report)
    return report
