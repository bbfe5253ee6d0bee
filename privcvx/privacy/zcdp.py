"""Zero-concentrated DP (zCDP) accounting: per-agent ledgers, composition and conversions.

The facts used (Bun & Steinke, "Concentrated differential privacy: simplifications, extensions, and
lower bounds", TCC 2016; Lemmas 1-4 and 11 of J. Ding, "Towards Plausible Collaborative Machine
Learning: Privacy, Efficiency and Fairness", PhD dissertation, University of Houston, 2022):

* the Gaussian mechanism with L2 sensitivity Delta and noise sigma is Delta^2 / (2 sigma^2)-zCDP (Lemma 1);
* rho-zCDP releases compose by summing rho (Lemma 2): `ZCDPLedger` sums every release's rho
  exactly, round by round (never a closed form: the one of the thesis's Thm. 2 is short of one
  rho^1, see docs/zcdp_admm.md);
* pure epsilon-DP implies epsilon^2 / 2-zCDP (Lemma 3, first part);
* rho-zCDP implies (rho + 2 sqrt(rho ln(1/delta)), delta)-DP (Lemma 4), inverted exactly by
  `dp_to_zcdp`;
* agents hold disjoint data, so the network's rho is the largest agent's (parallel composition,
  Lemma 11): `ZCDPAccountant`;
* (xi, rho)-zCDP (Bun & Steinke, Def. 1.1: D_alpha <= xi + rho alpha) composes by summing xi and rho, and gives
  (xi + rho + 2 sqrt(rho ln(1/delta)), delta)-DP (their Lemma 3.5 with the additive xi carried): PP-ADMM's objective
  perturbation is (xi, rho)-zCDP with xi its Jacobian term (`objective_perturbation`, docs/zcdp_admm.md).

`ledger_rho` reads the zCDP cost of an ordinary [`PrivacyLedger`][privcvx.privacy.accounting.PrivacyLedger]
(Gaussian and discrete Gaussian releases: 1 / (2 s^2) for noise multiplier s; Laplace kinds:
epsilon^2 / 2), so any run's ledger can be accounted in zCDP.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import dp_accounting

from privcvx.errors import PrivacyError, require_positive
from privcvx.privacy.accounting import PrivacyLedger
from privcvx.privacy.mechanisms import (
    Gaussian,
    Mechanism,
    ZCDPRelease,
    _with_multiplier,
    accounted_multiplier,
    check_delta,
    check_epsilon,
)


def _rho(value: float, argument: str = "rho", allow_zero: bool = True) -> float:
    return require_positive(value, argument=argument, error=PrivacyError, allow_zero=allow_zero)


def zcdp_to_dp(rho: float, delta: float, xi: float = 0.0) -> float:
    """epsilon = xi + rho + 2 sqrt(rho ln(1/delta)): (xi, rho)-zCDP gives (epsilon, delta)-DP (Lemma 4; xi = 0 is
    rho-zCDP)."""
    rho, delta = _rho(rho), check_delta(delta)
    return _rho(xi, "xi") + rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def dp_to_zcdp(epsilon: float, delta: float, xi: float = 0.0) -> float:
    """The largest rho whose Lemma 4 conversion, with an additive xi, is (epsilon, delta)-DP.

    rho* = (sqrt(ln(1/delta) + epsilon - xi) - sqrt(ln(1/delta)))^2; a `PrivacyError` if xi >= epsilon.

    This is a *budget* conversion (how much zCDP a target (epsilon, delta) allows), not the claim that an
    (epsilon, delta)-DP mechanism is rho-zCDP, which is false in general.
    """
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    xi = _rho(xi, "xi")
    if xi >= epsilon:
        raise PrivacyError(f"the additive zCDP term xi = {xi:.4g} leaves nothing of epsilon = {epsilon:.4g}",
                           argument="epsilon")
    epsilon -= xi
    log_term = math.log(1.0 / delta)
    # (sqrt(L + e) - sqrt(L))^2 = e^2 / (sqrt(L + e) + sqrt(L))^2, without cancellation for small e.
    rho = epsilon * epsilon / (math.sqrt(log_term + epsilon) + math.sqrt(log_term)) ** 2
    if not rho > 0.0:  # epsilon^2 underflows (epsilon below about 1e-154): no noise in the float range calibrates it
        raise PrivacyError(f"epsilon = {epsilon:.4g} at delta = {delta:.4g} is too small to calibrate: its zCDP budget "
                           "rho underflows to 0 in floating point", argument="epsilon")
    return rho


def pure_dp_to_zcdp(epsilon: float) -> float:
    """epsilon-DP implies epsilon^2 / 2-zCDP (Lemma 3, first part)."""
    return 0.5 * check_epsilon(epsilon) ** 2


def gaussian_rho(sensitivity: float, sigma: float) -> float:
    """Delta^2 / (2 sigma^2): the zCDP of one Gaussian release (Lemma 1)."""
    sensitivity = _rho(sensitivity, "sensitivity")
    return sensitivity ** 2 / (2.0 * require_positive(sigma, argument="sigma", error=PrivacyError) ** 2)


def gaussian_sigma(sensitivity: float, rho: float) -> float:
    """Delta / sqrt(2 rho): the sigma of a rho-zCDP Gaussian release (Lemma 1 inverted)."""
    return _rho(sensitivity, "sensitivity") / math.sqrt(2.0 * _rho(rho, allow_zero=False))


def jacobian_epsilon(hessian_change: float, modulus: float) -> float:
    """xi = -2 ln(1 - h / mu): the bound on the Jacobian term of objective perturbation (proof of Thm. 6).

    The change of variables b_i1 = B(x; D_i) has Jacobian E = Hess L_per(x; D_i), whose eigenvalues are >= mu (the
    local step's modulus); a neighbour changes it by A of rank <= 2 with ||A||_2 <= h (one sample's term of the
    Hessian, c1 / |D_i|). So det(E + A) / det(E) = det(I + E^-1 A) lies in [(1 - h/mu)^2, (1 + h/mu)^2], and the
    log-ratio of the Jacobians is at most -2 ln(1 - h/mu) in absolute value, for every output. The thesis bounds it by
    2.8 h / mu (-ln(1 - x) < 1.4 x on [0, 0.5]); needs 2 h < mu, else a `PrivacyError`.
    """
    change = _rho(hessian_change, "hessian_change")
    modulus = _rho(modulus, "modulus", allow_zero=False)
    if not 2.0 * change < modulus:
        raise PrivacyError(f"the Jacobian step of Thm. 6 needs 2 h_i < mu_i, got h_i = {change:.4g}, "
                           f"mu_i = {modulus:.4g}", argument="hessian_change")
    return -2.0 * math.log1p(-change / modulus)


def objective_perturbation(sensitivity: float, sigma: float, jacobian: float, delta: float) -> Mechanism:
    """The ledger entry of one objective-perturbation release (PP-ADMM's b_i1, Eq. (20); docs/zcdp_admm.md).

    The exact minimizer x of (20) has density phi_sigma(B(x; D)) |det J_D(x)|: its privacy loss is the Gaussian
    loss of b_i1 ~ N(0, sigma^2 I) against a shift of norm <= S (the gradient sensitivity) plus the log-ratio of the
    Jacobians, at most ``jacobian`` (`jacobian_epsilon`) in absolute value. So each Renyi divergence is at most
    xi + rho alpha with rho = S^2 / (2 sigma^2) for the sigma actually drawn and xi = ``jacobian``:
    ``ZCDPRelease(rho, xi)``, with the per-update (zcdp_to_dp(rho, delta, xi), delta) at the run's ``delta``.
    """
    rho, xi = gaussian_rho(sensitivity, sigma), _rho(jacobian, "jacobian")
    return ZCDPRelease(rho, xi, epsilon=zcdp_to_dp(rho, delta, xi), delta=check_delta(delta))


def calibrate_first_sigma(epsilon: float, delta: float, sensitivity: float, weights: Sequence[float]) -> float:
    """Inverse calibration: the sigma_1 with which releases k = 1..T of variances sigma_1^2 / weights[k-1] spend
    exactly (epsilon, delta).

    Release k costs weights[k-1] Delta^2 / (2 sigma_1^2); the sum must equal rho* = `dp_to_zcdp`,
    so sigma_1 = Delta sqrt(sum(weights) / (2 rho*)).
    """
    total = float(sum(_rho(w, "weights") for w in weights))
    if total <= 0.0:
        raise PrivacyError("the schedule has no release", argument="weights")
    return _rho(sensitivity, "sensitivity") * math.sqrt(total / (2.0 * dp_to_zcdp(epsilon, delta)))


@lru_cache(maxsize=4096)
def zcdp_gaussian(rho: float, delta: float) -> Mechanism:
    """A ledger entry for one rho-zCDP Gaussian release: a `Gaussian` of noise multiplier s = 1 / sqrt(2 rho).

    Its per-update (epsilon, delta) is the exact one of that Gaussian at the run's ``delta`` (Balle & Wang 2018,
    ``dp_accounting.get_epsilon_gaussian``), so that basic and advanced composition apply to the ledger too.
    """
    multiplier = 1.0 / math.sqrt(2.0 * _rho(rho, allow_zero=False))
    delta = check_delta(delta)
    epsilon = float(dp_accounting.get_epsilon_gaussian(multiplier, delta))
    return _with_multiplier(Gaussian, epsilon=epsilon, delta=delta, noise_multiplier=multiplier, budget=None)


def mechanism_rho(mechanism: Mechanism) -> float:
    """The zCDP of one release recorded as ``mechanism`` (its rho; `mechanism_xi` is its additive xi)."""
    if mechanism.kind == "zcdp":
        return mechanism.rho
    if mechanism.kind in ("gaussian", "discrete_gaussian"):
        return 0.5 / accounted_multiplier(mechanism.noise_multiplier) ** 2
    if mechanism.pure:
        return 0.5 * mechanism.epsilon ** 2
    raise PrivacyError(f"no zCDP bound for {mechanism!r}", argument="mechanism")


def mechanism_xi(mechanism: Mechanism) -> float:
    """The additive xi of one release's (xi, rho)-zCDP: 0 except for a
    [`ZCDPRelease`][privcvx.privacy.mechanisms.ZCDPRelease]."""
    return mechanism.xi if mechanism.kind == "zcdp" else 0.0


def ledger_rho(ledger: PrivacyLedger) -> float:
    """The zCDP of a whole ledger: the exact sum of its releases' rho (sequential composition, Lemma 2)."""
    return float(sum(count * mechanism_rho(mechanism) for mechanism, count in ledger.entries))


@dataclass(frozen=True)
class ZCDPCharge:
    """One zCDP release of one agent: its round, what was released, its rho and its additive xi."""

    round: int
    label: str
    rho: float
    xi: float = 0.0


class ZCDPLedger:
    """One agent's zCDP releases: ``total`` and ``total_xi`` are their exact sums (sequential composition, Lemma 2)."""

    def __init__(self, agent: str) -> None:
        self.agent = str(agent)
        self.charges: list[ZCDPCharge] = []

    def record(self, round: int, rho: float, label: str = "release", xi: float = 0.0) -> None:  # noqa: A002
        """Charge one (xi, rho)-zCDP release (xi = 0: rho-zCDP) in round ``round`` (the paper's t)."""
        self.charges.append(ZCDPCharge(int(round), str(label), _rho(rho), _rho(xi, "xi")))

    @property
    def total(self) -> float:
        return math.fsum(charge.rho for charge in self.charges)

    @property
    def total_xi(self) -> float:
        return math.fsum(charge.xi for charge in self.charges)

    def rounds(self, label: str | None = None) -> list[int]:
        """The rounds with a charge (of ``label``, if given), in order."""
        return [c.round for c in self.charges if label is None or c.label == label]

    def epsilon(self, delta: float) -> float:
        """The agent's (epsilon, delta)-DP from its total xi and rho (sequential composition)."""
        return zcdp_to_dp(self.total, delta, self.total_xi)

    def to_dict(self) -> dict:
        """The ledger as JSON-able data (checkpoints)."""
        return {"agent": self.agent, "charges": [[c.round, c.label, c.rho, c.xi] for c in self.charges]}

    @classmethod
    def from_dict(cls, data: Mapping) -> ZCDPLedger:
        ledger = cls(data["agent"])
        for round_, label, rho, *xi in data["charges"]:
            ledger.record(round_, rho, label, *xi)
        return ledger


class ZCDPAccountant:
    """The network's zCDP: the largest agent's total (parallel composition over disjoint data, Lemma 11)."""

    def __init__(self, ledgers: Iterable[ZCDPLedger]) -> None:
        self.ledgers = list(ledgers)

    @property
    def rho(self) -> float:
        return max((ledger.total for ledger in self.ledgers), default=0.0)

    def epsilon(self, delta: float) -> float:
        """The run's (epsilon, delta)-DP: the largest agent's (parallel composition)."""
        return max((ledger.epsilon(delta) for ledger in self.ledgers), default=zcdp_to_dp(0.0, delta))

    def table(self) -> dict[str, float]:
        """Each agent's total rho, by name."""
        return {ledger.agent: ledger.total for ledger in self.ledgers}
