"""Zero-concentrated DP (zCDP) accounting: per-agent ledgers, composition and conversions.

The facts used (Bun & Steinke, "Concentrated differential privacy: simplifications, extensions, and
lower bounds", TCC 2016; Lemmas 1-4 and 11 of J. Ding, "Towards Plausible Collaborative Machine
Learning: Privacy, Efficiency and Fairness", PhD dissertation, University of Houston, 2022):

* the Gaussian mechanism with L2 sensitivity Delta and noise sigma is Delta^2 / (2 sigma^2)-zCDP (Lemma 1);
* rho-zCDP releases compose by summing rho (Lemma 2): :class:`ZCDPLedger` sums every release's rho
  exactly, round by round (never a closed form: the one of the thesis's Thm. 2 is short of one
  rho^1, see docs/zcdp_admm.md);
* pure epsilon-DP implies epsilon^2 / 2-zCDP (Lemma 3, first part);
* rho-zCDP implies (rho + 2 sqrt(rho ln(1/delta)), delta)-DP (Lemma 4), inverted exactly by
  :func:`dp_to_zcdp`;
* agents hold disjoint data, so the network's rho is the largest agent's (parallel composition,
  Lemma 11): :class:`ZCDPAccountant`.

:func:`ledger_rho` reads the zCDP cost of an ordinary :class:`~privcvx.privacy.accounting.PrivacyLedger`
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
    _with_multiplier,
    accounted_multiplier,
    check_delta,
    check_epsilon,
)


def _rho(value: float, argument: str = "rho", allow_zero: bool = True) -> float:
    return require_positive(value, argument=argument, error=PrivacyError, allow_zero=allow_zero)


def zcdp_to_dp(rho: float, delta: float) -> float:
    """epsilon = rho + 2 sqrt(rho ln(1/delta)): rho-zCDP gives (epsilon, delta)-DP (Lemma 4)."""
    rho, delta = _rho(rho), check_delta(delta)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def dp_to_zcdp(epsilon: float, delta: float) -> float:
    """The largest rho whose Lemma 4 conversion is (epsilon, delta)-DP.

    rho* = (sqrt(ln(1/delta) + epsilon) - sqrt(ln(1/delta)))^2.

    This is a *budget* conversion (how much zCDP a target (epsilon, delta) allows), not the claim that an
    (epsilon, delta)-DP mechanism is rho-zCDP, which is false in general.
    """
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    log_term = math.log(1.0 / delta)
    # (sqrt(L + e) - sqrt(L))^2 = e^2 / (sqrt(L + e) + sqrt(L))^2, without cancellation for small e.
    return epsilon * epsilon / (math.sqrt(log_term + epsilon) + math.sqrt(log_term)) ** 2


def pure_dp_to_zcdp(epsilon: float) -> float:
    """epsilon-DP implies epsilon^2 / 2-zCDP (Lemma 3, first part)."""
    return 0.5 * check_epsilon(epsilon) ** 2


def thesis_dp_to_zcdp(epsilon: float, delta: float) -> float:
    """epsilon^2 / (4 ln(1/delta)): the charge the thesis gives an (epsilon, delta)-DP step (Thm. 6).

    Lemma 3's second part says this rho *suffices for* (epsilon, delta)-DP; the thesis uses it in the
    other direction, which is not a theorem (caveat 1 of the digest). Kept to reproduce the thesis's
    PP-ADMM accounting; docs/zcdp_admm.md says what it does and does not guarantee.
    """
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    return epsilon * epsilon / (4.0 * math.log(1.0 / delta))


def gaussian_rho(sensitivity: float, sigma: float) -> float:
    """Delta^2 / (2 sigma^2): the zCDP of one Gaussian release (Lemma 1)."""
    sensitivity = _rho(sensitivity, "sensitivity")
    return sensitivity ** 2 / (2.0 * require_positive(sigma, argument="sigma", error=PrivacyError) ** 2)


def calibrate_first_sigma(epsilon: float, delta: float, sensitivity: float, weights: Sequence[float]) -> float:
    """Inverse calibration: the sigma_1 with which releases k = 1..T of variances sigma_1^2 / weights[k-1] spend
    exactly (epsilon, delta).

    Release k costs weights[k-1] Delta^2 / (2 sigma_1^2); the sum must equal rho* = :func:`dp_to_zcdp`,
    so sigma_1 = Delta sqrt(sum(weights) / (2 rho*)).
    """
    total = float(sum(_rho(w, "weights") for w in weights))
    if total <= 0.0:
        raise PrivacyError("the schedule has no release", argument="weights")
    return _rho(sensitivity, "sensitivity") * math.sqrt(total / (2.0 * dp_to_zcdp(epsilon, delta)))


@lru_cache(maxsize=4096)
def zcdp_gaussian(rho: float, delta: float) -> Mechanism:
    """A ledger entry for one rho-zCDP Gaussian release: a :class:`Gaussian` of noise multiplier s = 1 / sqrt(2 rho).

    Its per-update (epsilon, delta) is the exact one of that Gaussian at the run's ``delta`` (Balle & Wang 2018,
    ``dp_accounting.get_epsilon_gaussian``), so that basic and advanced composition apply to the ledger too.
    """
    multiplier = 1.0 / math.sqrt(2.0 * _rho(rho, allow_zero=False))
    delta = check_delta(delta)
    epsilon = float(dp_accounting.get_epsilon_gaussian(multiplier, delta))
    return _with_multiplier(Gaussian, epsilon=epsilon, delta=delta, noise_multiplier=multiplier, budget=None)


def mechanism_rho(mechanism: Mechanism) -> float:
    """The zCDP of one release recorded as ``mechanism``."""
    if mechanism.kind in ("gaussian", "discrete_gaussian"):
        return 0.5 / accounted_multiplier(mechanism.noise_multiplier) ** 2
    if mechanism.pure:
        return 0.5 * mechanism.epsilon ** 2
    raise PrivacyError(f"no zCDP bound for {mechanism!r}", argument="mechanism")


def ledger_rho(ledger: PrivacyLedger) -> float:
    """The zCDP of a whole ledger: the exact sum of its releases' rho (sequential composition, Lemma 2)."""
    return float(sum(count * mechanism_rho(mechanism) for mechanism, count in ledger.entries))


@dataclass(frozen=True)
class ZCDPCharge:
    """One zCDP release of one agent: its round, what was released, its rho."""

    round: int
    label: str
    rho: float


class ZCDPLedger:
    """One agent's zCDP releases: ``total`` is their exact sum (sequential composition, Lemma 2)."""

    def __init__(self, agent: str) -> None:
        self.agent = str(agent)
        self.charges: list[ZCDPCharge] = []

    def record(self, round: int, rho: float, label: str = "release") -> None:  # noqa: A002 - the paper's t
        """Charge one release of zCDP ``rho`` in round ``round``."""
        self.charges.append(ZCDPCharge(int(round), str(label), _rho(rho)))

    @property
    def total(self) -> float:
        return math.fsum(charge.rho for charge in self.charges)

    def rounds(self, label: str | None = None) -> list[int]:
        """The rounds with a charge (of ``label``, if given), in order."""
        return [c.round for c in self.charges if label is None or c.label == label]

    def epsilon(self, delta: float) -> float:
        """The agent's (epsilon, delta)-DP from its total rho (sequential composition)."""
        return zcdp_to_dp(self.total, delta)

    def to_dict(self) -> dict:
        """The ledger as JSON-able data (checkpoints)."""
        return {"agent": self.agent, "charges": [[c.round, c.label, c.rho] for c in self.charges]}

    @classmethod
    def from_dict(cls, data: Mapping) -> ZCDPLedger:
        ledger = cls(data["agent"])
        for round_, label, rho in data["charges"]:
            ledger.record(round_, rho, label)
        return ledger


class ZCDPAccountant:
    """The network's zCDP: the largest agent's total (parallel composition over disjoint data, Lemma 11)."""

    def __init__(self, ledgers: Iterable[ZCDPLedger]) -> None:
        self.ledgers = list(ledgers)

    @property
    def rho(self) -> float:
        return max((ledger.total for ledger in self.ledgers), default=0.0)

    def epsilon(self, delta: float) -> float:
        """The run's (epsilon, delta)-DP from the largest agent's rho (parallel composition)."""
        return zcdp_to_dp(self.rho, delta)

    def table(self) -> dict[str, float]:
        """Each agent's total rho, by name."""
        return {ledger.agent: ledger.total for ledger in self.ledgers}
