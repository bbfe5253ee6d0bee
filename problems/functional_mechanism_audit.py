"""An empirical privacy audit of the functional mechanism's release (`problems.fair_logistic.perturb_coefficients`),
in every mode, against the claim its ledger records.

The thesis's functional mechanism (Ch. 5; each agent of `problems.distributed_fair_logistic` alike) releases
theta = (a, M, c) once, through privcvx's release path (`AgentContext.release` on `fair_logistic.release_context`),
which charges it: ``Laplace(epsilon)`` for Delta_1 (pdfc) or the analytic ``Gaussian(epsilon, delta)`` for Delta_2
(adfc, relaxed), on the secure path the grid's discrete Laplace or discrete Gaussian. The split budget
(``attribute``, ``ratio``) is the same one release of w * theta, divided by w after (w = ``ratio`` on Phi_s).
`check_functional_mechanism` audits that release the way `pc.algorithms.check_privacy` audits an algorithm (issue
27): ``runs`` releases on each of two neighbouring coefficient vectors on the secure path, the exact LLR of each
(``privacy_audit.release_log_ratio``: both noise-free values are known), thresholds fixed in advance, Clopper-Pearson
bounds with Bonferroni (`privacy_audit.llr_lower_bound`), and the claim read from the ledger of the release: its
epsilon at ``delta`` (pdfc, on the epsilon scale at delta = 1e-6: a pure ledger's epsilon holds at every delta) or
its mu (adfc and relaxed: `privacy_audit.claimed_mu` of the charged discrete Gaussian).

**The pairs.** `declared_pair` (the default): two coefficient vectors that differ by exactly the declared Delta_1
(pdfc) or Delta_2 (Gaussian) in one coordinate outside Phi_s, so the charge is attained and the audit has power
against the ledger: it tests the noise drawn and the charge recorded for the declared sensitivity. That Delta bounds
theta's change over real neighbouring datasets is audited separately (`privcvx.sensitivity_audit`,
tests/test_builder_audit.py). `sharpest_pair` is such a real pair (`worst_case_coefficients`): no real pair attains
Delta_1 (the largest change is 0.31 Delta_1 at d = 2; the thesis's Delta_1 bounds each |x_j| by 1, not ||x|| by 1),
so on it the lower bound must stay below the claim and no audit can have power ("no power" is then expected).

**Power.** The under-noised variant draws ``under_noising`` times the scale the ledger charges
(``AgentContext.audit_noise_factor``, the ledger unchanged); its lower bound must exceed the claim.
"""

from __future__ import annotations

import numpy as np

from privcvx.algorithms.privacy_audit import (
    DrawnRelease,
    PrivacyAudit,
    PrivacyAuditFailure,
    claimed_mu,
    llr_lower_bound,
    release_log_ratio,
)
from privcvx.errors import check_int, check_scalar
from privcvx.privacy.accounting import PrivacyLedger, tightest_epsilon
from privcvx.privacy.mechanisms import Sensitivity, check_delta, check_epsilon
from privcvx.privacy.noise import SecureNoise
from problems.fair_logistic import (
    METHODS,
    attribute_mask,
    coefficient_mechanism,
    coefficient_sensitivity,
    coefficient_weights,
    perturb_coefficients,
    release_context,
    worst_case_coefficients,
)

#: The delta of pdfc's epsilon claim and bound (a pure ledger's epsilon holds at every delta > 0).
PURE_DELTA = 1e-6


def sharpest_pair(d: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair of `worst_case_coefficients` (d) whose change is the largest among those in one coordinate."""
    single = [(float(np.abs(first - second).sum()), index) for index, (first, second)
              in enumerate(worst_case_coefficients(d)) if np.count_nonzero(np.abs(first - second) > 1e-12) == 1]
    return worst_case_coefficients(d)[max(single)[1]]


def declared_pair(d: int, method: str, attribute: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """theta of `sharpest_pair` (d) and theta with its last c coordinate moved by the declared Delta_1 (pdfc) or
    Delta_2 (adfc, relaxed): the release's sensitivity, attained, in a coordinate outside Phi_s (``attribute``)."""
    theta = sharpest_pair(d)[0]
    outside = np.arange(theta.size) if attribute is None else np.flatnonzero(~attribute_mask(d, attribute))
    neighbour = theta.copy()
    neighbour[outside[-1]] += coefficient_sensitivity(d)[0 if method == "pdfc" else 1]
    return theta, neighbour


def _releases(pair: tuple[np.ndarray, np.ndarray], d: int, method: str, epsilon: float, delta: float,
              attribute: int | None, ratio: float, runs: int, on_neighbour: bool,
              factor: float) -> tuple[np.ndarray, np.ndarray, PrivacyLedger]:
    """The LLR towards D' and its normalizer of ``runs`` secure releases on D (or D'), and one release's ledger."""
    weights = coefficient_weights(d, method, attribute, ratio)
    original, neighbour = (weights * theta for theta in pair)
    l1, l2 = coefficient_sensitivity(d)
    mechanism = coefficient_mechanism(method, epsilon, delta)
    drawn = DrawnRelease(original, mechanism.draws, mechanism.scale(Sensitivity(l1=l1, l2=l2)) * factor,
                         l1 if method == "pdfc" else l2, True, False)
    context = release_context("audited", SecureNoise(), original.size)
    context.audit_noise_factor = factor
    llr, normalizer, ledger = np.empty(runs), np.empty(runs), None
    for run in range(runs):
        context.releases, context.ledger = [], PrivacyLedger("audited")
        perturb_coefficients(pair[1] if on_neighbour else pair[0], d, method, epsilon, delta, attribute, ratio,
                             context)
        llr[run], normalizer[run] = release_log_ratio(context.releases[-1].value, original, neighbour, drawn)
        ledger = context.ledger if ledger is None else ledger
    return llr, normalizer, ledger


def check_functional_mechanism(method: str = "pdfc", d: int = 2, epsilon: float = 2.0, delta: float = 1e-5, *,
                               attribute: int | None = None, ratio: float = 0.5,
                               pair: tuple[np.ndarray, np.ndarray] | None = None, runs: int = 2000,
                               under_noising: float = 0.75, confidence: float = 0.95) -> PrivacyAudit:
    """Audit the functional mechanism's release in ``method``'s mode (module docstring); raise `PrivacyAuditFailure`
    when the lower bound exceeds the ledger's claim or the under-noised variant's does not ("no power").

    ``epsilon``, ``delta``, ``attribute``, ``ratio``: those of `problems.fair_logistic.fair_logistic`; ``pair``:
    theta(D), theta(D') flattened (default `declared_pair`). The report's ``attained`` is ||w (theta - theta')||
    over the declared Delta in the norm of the mechanism (1 for `declared_pair`).
    """
    method = check_scalar(method, argument="method", choices=METHODS)
    epsilon, delta = check_epsilon(epsilon, argument="epsilon"), check_delta(delta)
    runs = check_int(runs, argument="runs")
    under_noising = check_scalar(under_noising, argument="under_noising", kind=float, low=0.0, high=1.0,
                                 closed="neither")
    pair = declared_pair(d, method, attribute) if pair is None else (np.asarray(pair[0], float),
                                                                     np.asarray(pair[1], float))
    kind = "laplace" if method == "pdfc" else "gaussian"
    bound_delta = PURE_DELTA if kind == "laplace" else delta

    def lower_bound(factor: float) -> tuple[str, float, PrivacyLedger]:
        negatives = _releases(pair, d, method, epsilon, delta, attribute, ratio, runs, False, factor)
        positives = _releases(pair, d, method, epsilon, delta, attribute, ratio, runs, True, factor)
        return (*llr_lower_bound(kind, negatives[:2], positives[:2], bound_delta, confidence),
                negatives[2])

    (scale, lower, ledger), (_, under, _) = lower_bound(1.0), lower_bound(under_noising)
    claimed_epsilon = tightest_epsilon(ledger, bound_delta)
    claimed = claimed_epsilon if scale == "epsilon" else claimed_mu(ledger)
    failures = []
    if lower > claimed:
        failures.append(f"the empirical lower bound {lower:.4f} exceeds the ledger's {scale} {claimed:.4f}")
    if under <= claimed:
        failures.append(f"no power: the {under_noising}x under-noised variant's lower bound {under:.4f} does not "
                        f"exceed the ledger's {scale} {claimed:.4f}")
    weights = coefficient_weights(d, method, attribute, ratio)
    attained = float(np.linalg.norm(weights * (pair[0] - pair[1]), ord=1 if kind == "laplace" else 2)
                     / coefficient_sensitivity(d)[0 if kind == "laplace" else 1])
    split = "" if attribute is None or method == "relaxed" else f", attribute={attribute}, ratio={ratio}"
    report = PrivacyAudit(f"functional mechanism ({method}, d={d}, epsilon={epsilon:g}{split})", scale, claimed,
                          claimed_epsilon, bound_delta, lower, under, under_noising, attained, 0, runs, 1, 1,
                          confidence, tuple(failures))
    if failures:
        raise PrivacyAuditFailure(report)
    return report
