"""Privacy accounting: each agent's ledger of releases, and its epsilon under five accountants.

Algorithm 1 is a (T E)-fold adaptive composition per agent (Sec. 4.3 of the paper):
every local update of agent p is one release of a mechanism on D_p. Agents hold
disjoint datasets, so a record is protected by its owner's ledger alone, and the run's
epsilon is that of the worst-off agent.

For a ledger of releases (epsilon_i, delta_i, noise multiplier s_i) with counts c_i,
k = sum c_i, `epsilon_report` gives

* ``epsilon_basic`` = sum c_i epsilon_i, valid at ``delta_basic`` = sum c_i delta_i
  (Dwork & Roth, Thm. 3.16);
* ``epsilon_advanced`` = sqrt(2 ln(1/delta) sum c_i epsilon_i^2) + sum c_i epsilon_i (e^epsilon_i - 1),
  valid at ``delta_advanced`` = sum c_i delta_i + delta (Dwork & Roth, Thm. 3.20 with
  delta' = delta; for equal epsilon_i this is exactly its statement);
* ``epsilon_moments``: the paper's Thm. 4.9 bound, Gaussian ledgers only,
  sqrt(2 ln(1/delta) sum c_i / s_i^2), which equals sqrt(T E ln(1/delta)/ln(1.25/delta)) epsilon
  for T E classic Gaussian updates at delta. Thm. 4.9 does not follow from its proof
  (see the erratum in docs/privacy.md): it is reported for comparison and is never used
  by `tightest_epsilon`;
* ``epsilon_rdp``, ``epsilon_pld``: dp-accounting's ``RdpAccountant`` and
  ``PLDAccountant`` composing each entry's ``dp_event()`` ``c_i`` times, at ``delta``;
* ``epsilon_gdp`` (extra key, not a table column): Gaussian ledgers only, the exact
  epsilon. Gaussian releases with noise multipliers s_i compose (adaptively) to
  mu-GDP with mu^2 = sum c_i / s_i^2 (Dong, Roth & Su 2022), whose epsilon at
  ``delta`` is Balle & Wang's (``dp_accounting.get_epsilon_gaussian(1/mu, delta)``, computed by
  `gaussian_epsilon`, the same numbers faster). It is
  below every other valid bound, so `tightest_epsilon` returns it for Gaussian
  ledgers without building a PLD (about 1 ms instead of up to 0.1 s per call).

Releases on the grid of the secure path ([`privcvx.privacy.grid`][privcvx.privacy.grid]) are their own kinds, so that
only bounds valid for them are reported:

* ``discrete_laplace`` (pure, epsilon = D/t): basic and advanced composition as above; PLD with
  dp-accounting's exact ``DiscreteLaplaceDpEvent``; RDP with its exact Renyi divergence
  ([`discrete_laplace_rdp`][privcvx.privacy.mechanisms.discrete_laplace_rdp]; the continuous Laplace's RDP curve
  is *below* it, so it would not be a valid bound).
* ``discrete_gaussian`` (rho-zCDP, Canonne, Kamath & Steinke 2020): RDP with ``ZCDpEvent(rho)``,
  the continuous Gaussian's RDP curve. It claims no per-update (epsilon, delta), so basic and
  advanced composition are NaN; the exact epsilon of the continuous Gaussian (``epsilon_gdp``),
  the paper's Thm. 4.9 and the PLD (dp-accounting has no event for the multivariate discrete
  Gaussian) do not apply and are NaN: such a ledger's tightest epsilon is its RDP epsilon.
* ``poisson_discrete_gaussian`` (Q-DPSGD-1's Poisson-sampled sum): RDP with the smaller of Zhu & Wang's general
  bound and the smoothing lemma's curve (`sampled_discrete_gaussian_rdp`); PLD with
  the mechanism's own ``privacy_loss_distribution`` (dp-accounting's Poisson-subsampled discrete Gaussian for a
  scalar release; for a vector release the continuous one at sqrt(sigma^2 - r^2) with the smoothing lemma's slack,
  `smoothed_gaussian_pld`), composed by `composed_pld_epsilon` for a ledger of such releases (NaN when mixed with
  other kinds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import dp_accounting
import numpy as np
import pandas as pd
from dp_accounting import pld
from scipy.optimize import brentq
from scipy.special import log_ndtr

from privcvx.errors import PrivacyError, check_scalar
from privcvx.privacy.mechanisms import (
    NEIGHBOURING_RELATION,
    PLD_DISCRETIZATION,
    GridRdpAccountant,
    Mechanism,
    accounted_multiplier,
    check_delta,
    mechanism_from_dict,
    smoothed_epsilon,
)

#: The delta at which runs with Laplace noise only are accounted (Laplace is (epsilon, 0)-DP
#: per update, but advanced, RDP and PLD composition need delta > 0).
DEFAULT_LAPLACE_DELTA = 1e-6

#: The columns of `privacy_table`, in order.
#: ``delta`` is where the RDP, PLD and moments columns hold; basic and advanced composition hold at their own
#: ``delta_basic`` (the sum of the releases' deltas: 0 for Laplace) and ``delta_advanced`` (that plus ``delta``).
#: ``calibration`` is "valid", or "nominal: <reasons>" for an agent with releases calibrated to a paper's printed
#: constant that is not a valid bound (`NominalPrivacyWarning`): not a guarantee. ``accounting`` says which bound the
#: epsilon columns are where they are not dp-accounting's accountants on an exact event (`ledger_accounting`).
PRIVACY_COLUMNS = ("agent", "steps", "delta", "epsilon_basic", "epsilon_advanced", "epsilon_moments",
                   "epsilon_rdp", "epsilon_pld", "delta_basic", "delta_advanced", "calibration", "accounting")

_EPSILON_KEYS = ("epsilon_basic", "epsilon_advanced", "epsilon_moments", "epsilon_rdp", "epsilon_pld")

#: A ledger's signature: its (mechanism, count) pairs in a canonical order (hashable; the caches' key).
Entries = tuple[tuple[Mechanism, int], ...]


class PrivacyLedger:
    """Every release one agent makes: the mechanisms and how many times each was used.

    ``nominal`` holds the reasons of releases calibrated to a nominal sensitivity (a paper's printed constant that
    is not a valid bound, [`Sensitivity`][privcvx.privacy.mechanisms.Sensitivity]): the privacy table then labels the
    agent's epsilon "nominal" (column ``calibration``).
    """

    def __init__(self, agent: str, *, reports: bool = True) -> None:
        self.agent = str(agent)
        self._counts: dict[Mechanism, int] = {}
        self._steps = 0
        #: Whether `record` keeps the new entries for `take_new` (an agent's own ledger, which its host reports to
        #: the driver); the driver's copies never report, and keep nothing beyond the counts.
        self.reports = reports
        self._new: list[tuple[Mechanism, int, str | None]] = []
        self.nominal: set[str] = set()

    def record(self, mechanism: Mechanism, count: int = 1, *, nominal: str | None = None) -> None:
        """Record ``count`` releases (local updates) made with ``mechanism``; ``nominal``: the reason their
        sensitivity is only nominal, or None."""
        if not isinstance(mechanism, Mechanism):
            raise PrivacyError(f"must be a pc.Laplace, pc.Gaussian or a grid release's mechanism, got {mechanism!r}",
                               agent=self.agent, argument="mechanism")
        count = check_scalar(count, argument="count", kind=int, low=1, agent=self.agent, error=PrivacyError)
        self._counts[mechanism] = self._counts.get(mechanism, 0) + count
        self._steps += count
        if self.reports:
            self._new.append((mechanism, count, nominal))
        if nominal is not None:
            self.nominal.add(str(nominal))

    def take_new(self) -> list[tuple[Mechanism, int, str | None]]:
        """The entries recorded since the last call, as (mechanism, count, nominal reason): what the agent's host
        reports to the driver's copy."""
        new, self._new = self._new, []
        return new

    def load_dict(self, data: dict) -> None:
        """Restore, in place, a ledger written by `to_dict` (a checkpoint)."""
        restored = PrivacyLedger.from_dict(data)
        self.agent, self._counts, self._new, self.nominal = restored.agent, restored._counts, [], restored.nominal
        self._steps = restored._steps

    @property
    def steps(self) -> int:
        """The number of releases recorded (kept as a running count: O(1))."""
        return self._steps

    @property
    def distinct(self) -> int:
        """The number of distinct mechanisms recorded, in O(1) (`entries` builds a list of them)."""
        return len(self._counts)

    @property
    def entries(self) -> list[tuple[Mechanism, int]]:
        """(mechanism, count) pairs in order of first use."""
        return list(self._counts.items())

    @property
    def calibration(self) -> str:
        """``"valid"``, or ``"nominal: <reasons>"`` when a release was calibrated to a nominal sensitivity."""
        return "valid" if not self.nominal else "nominal: " + "; ".join(sorted(self.nominal))

    def signature(self) -> Entries:
        """Hashable and order-free ((mechanism, count) pairs in a canonical order): composition does not
        depend on the order of releases, and equal mechanisms are equal by their signatures."""
        return tuple(sorted(self._counts.items(), key=lambda entry: repr((entry[0].signature(), entry[1]))))

    def to_dict(self) -> dict:
        """The ledger as JSON-able data: the agent, each mechanism with its count, and the nominal reasons."""
        return {"agent": self.agent,
                "entries": [{"mechanism": m.to_dict(), "count": c} for m, c in self._counts.items()],
                "nominal": sorted(self.nominal)}

    @classmethod
    def from_dict(cls, data: dict) -> PrivacyLedger:
        try:
            ledger = cls(data["agent"])
            for entry in data["entries"]:
                ledger.record(mechanism_from_dict(entry["mechanism"]), int(entry["count"]))
            ledger.nominal = {str(reason) for reason in data.get("nominal", [])}
            ledger._new = []
        except (KeyError, TypeError, AttributeError) as error:
            raise PrivacyError(f"not a ledger description ({error})", argument="data") from None
        return ledger

    def __repr__(self) -> str:
        return f"PrivacyLedger(agent={self.agent!r}, steps={self.steps})"


def default_accounting_delta(mechanism: Mechanism) -> float:
    """The run's delta: the budget's delta, else the Gaussian's delta-bar, else 1e-6 for Laplace."""
    if not isinstance(mechanism, Mechanism):
        raise PrivacyError(f"must be a pc.Laplace or pc.Gaussian, got {mechanism!r}", argument="mechanism")
    if mechanism.budget is not None:
        return mechanism.budget.delta
    return DEFAULT_LAPLACE_DELTA if mechanism.pure else mechanism.delta


def epsilon_report(ledger: PrivacyLedger, delta: float) -> dict:
    """The ledger's epsilon under every accountant, at ``delta`` (see the module docstring).

    Keys: ``steps``, ``delta``, the five ``epsilon_*`` of `PRIVACY_COLUMNS`, and
    ``delta_basic``, ``delta_advanced``: the deltas at which those two hold. NaN where an
    accountant does not apply. Results are cached by the ledger's signature.
    """
    if not isinstance(ledger, PrivacyLedger):
        raise PrivacyError(f"must be a PrivacyLedger, got {ledger!r}", argument="ledger")
    delta = check_delta(delta)
    return {"steps": ledger.steps, "delta": delta, **_report(ledger.signature(), delta)}


def tightest_epsilon(ledger: PrivacyLedger, delta: float, *, with_pld: bool = True) -> float:
    """The smallest epsilon, over the accountants whose guarantee holds at ``delta``.

    Gaussian ledgers: the exact ``epsilon_gdp``, which no valid accountant can beat.
    Otherwise the minimum of RDP, PLD (unless ``with_pld=False``: it costs tens of ms per
    call, so the run's per-round history leaves it out), and basic and advanced composition
    when their own delta is <= ``delta`` (Laplace releases), over those that apply (NaN ones,
    e.g. PLD and basic composition of a discrete Gaussian, are skipped). The paper's Thm. 4.9
    bound is never used (erratum in docs/privacy.md). 0 for an empty ledger.
    """
    signature = ledger.signature()
    if signature and _all_gaussian(signature):
        return _gdp_epsilon(signature, check_delta(delta))
    report = _report(signature, check_delta(delta), with_pld)
    candidates = [report["epsilon_rdp"], report["epsilon_pld"]]
    for name in ("basic", "advanced"):
        if report[f"delta_{name}"] <= delta:
            candidates.append(report[f"epsilon_{name}"])
    return min(value for value in candidates if not math.isnan(value))


#: Above this many distinct mechanisms in a ledger, `RunningEpsilon` composes incrementally.
RUNNING_ACCOUNTING_ENTRIES = 16


class RunningEpsilon:
    """One agent's cumulative epsilon after each round, for the per-round history, in O(1) per release.

    A ledger with few distinct mechanisms (Algorithm 1: one) gets `tightest_epsilon` without
    PLD, whose answers are cached by the ledger's signature. A ledger whose mechanisms change every
    round (the decaying noise of paper 001) would make that quadratic in the rounds, so past
    `RUNNING_ACCOUNTING_ENTRIES` distinct mechanisms this keeps running sums instead: an RDP
    accountant composed one release at a time, basic composition, and the sums of advanced composition
    (the same formulas as `epsilon_report`). The final privacy table composes the whole ledger.
    """

    #: Answers by (history key, delta): agents whose ledgers grew identically (the same decaying noise
    #: everywhere, as in paper 001) share one computation per round: the epsilon, and the RDP curve it came from
    #: (an agent that reads a shared answer adopts that curve and drops its pending events, so that its memory
    #: stays flat in the rounds).
    _answers: dict[tuple[int, float], tuple[float, np.ndarray | None]] = {}

    def __init__(self, ledger: PrivacyLedger, delta: float) -> None:
        self.ledger = ledger
        self.delta = check_delta(delta)
        self.rdp = GridRdpAccountant()
        self.sums = {"basic": 0.0, "delta_basic": 0.0, "squares": 0.0, "advanced": 0.0, "mu_squared": 0.0}
        self.gaussian_only = True
        self.pending: list[tuple[dp_accounting.DpEvent, int]] = []  # composed into the RDP accountant when needed
        self.key = 0  # a hash chain of the releases in the order recorded
        self.queued: list[tuple[Mechanism, int]] = []  # releases not yet in the hash chain and the sums
        for mechanism, count in ledger.entries:
            self._add(mechanism, count)

    def _add(self, mechanism: Mechanism, count: int) -> None:
        """Queue a release for `_fold`: a ledger of few mechanisms never reads the chain or the sums, and each
        record is then O(1) with no arithmetic."""
        self.queued.append((mechanism, count))

    def _fold(self) -> None:
        """Add the queued releases, in the order recorded, to the hash chain, the sums and the pending events."""
        for mechanism, count in self.queued:
            self._fold_one(mechanism, count)
        self.queued.clear()

    def _fold_one(self, mechanism: Mechanism, count: int) -> None:
        self.key = hash((self.key, mechanism.signature(), count))
        epsilon = mechanism.epsilon
        self.sums["basic"] += count * epsilon
        self.sums["delta_basic"] += count * (0.0 if mechanism.pure else mechanism.delta)
        self.sums["squares"] += count * epsilon * epsilon
        self.sums["advanced"] += count * epsilon * (math.expm1(epsilon) if epsilon < 700 else math.inf)
        multiplier = accounted_multiplier(mechanism.noise_multiplier)
        self.sums["mu_squared"] += count / multiplier ** 2 if multiplier else math.inf  # 0: no privacy (beyond float)
        self.gaussian_only &= mechanism.kind == "gaussian"
        self.pending.append((mechanism.dp_event(), count))

    def record(self, mechanism: Mechanism, count: int = 1, *, nominal: str | None = None) -> None:
        """Record a release in the ledger and in the running sums."""
        self.ledger.record(mechanism, count, nominal=nominal)
        self._add(mechanism, count)

    def epsilon(self) -> float:
        """The tightest valid epsilon so far at the run's delta (no PLD)."""
        if self.ledger.distinct <= RUNNING_ACCOUNTING_ENTRIES:
            return tightest_epsilon(self.ledger, self.delta, with_pld=False)
        self._fold()
        answer = self._answers.get((self.key, self.delta))
        if answer is None:
            if len(self._answers) > 4096:
                self._answers.clear()
            epsilon = self._running_epsilon()
            self._answers[self.key, self.delta] = answer = (epsilon, None if self.gaussian_only else
                                                            np.array(self.rdp._rdp, dtype=float))
        elif answer[1] is not None and self.pending:  # the same releases, composed by another agent's accountant
            self.rdp._rdp = answer[1].copy()
            self.pending.clear()
        return answer[0]

    def _running_epsilon(self) -> float:
        if self.gaussian_only:
            return float(gaussian_epsilon(1.0 / math.sqrt(self.sums["mu_squared"]), self.delta))
        for event, count in self.pending:
            self.rdp.compose(event, count)
        self.pending.clear()
        candidates = [float(self.rdp.get_epsilon(self.delta))]
        if self.sums["delta_basic"] <= self.delta:
            candidates.append(self.sums["basic"])
            advanced = math.sqrt(2.0 * math.log(1.0 / self.delta) * self.sums["squares"]) + self.sums["advanced"]
            if self.sums["delta_basic"] + self.delta <= self.delta:
                candidates.append(advanced)
        return min(value for value in candidates if not math.isnan(value))


def privacy_table(ledgers: Sequence[PrivacyLedger], delta: float) -> pd.DataFrame:
    """One row per agent with the columns of `PRIVACY_COLUMNS`."""
    rows = [{"agent": ledger.agent, **epsilon_report(ledger, delta), "calibration": ledger.calibration,
             "accounting": ledger_accounting(ledger)} for ledger in ledgers]
    return pd.DataFrame(rows, columns=list(PRIVACY_COLUMNS))


def ledger_accounting(ledger: PrivacyLedger) -> str:
    """The table's ``accounting`` column: the releases' notes (``Mechanism.accounting_note``: which bound the epsilon
    columns are, e.g. the secure path's looser RDP beside its tight PLD), "; "-joined, or "dp-accounting" when every
    release is an exact dp-accounting event."""
    notes = dict.fromkeys(note for mechanism, _ in ledger.entries if (note := mechanism.accounting_note))
    return "; ".join(notes) or "dp-accounting"


@lru_cache(maxsize=8192)
def _report(signature: Entries, delta: float, with_pld: bool = True) -> dict:
    """Accountants' answers for a ledger signature: (mechanism, count) pairs."""
    if not signature:
        return {**dict.fromkeys(_EPSILON_KEYS, 0.0), "epsilon_gdp": 0.0, "delta_basic": 0.0,
                "delta_advanced": 0.0}
    epsilons = [mechanism.epsilon for mechanism, _ in signature]
    counts = [count for _, count in signature]
    # A budget-calibrated or discrete Gaussian has no per-update (epsilon, delta): its basic/advanced deltas are NaN.
    deltas = [math.nan if math.isnan(mechanism.epsilon) else mechanism.delta for mechanism, _ in signature]
    delta_basic = sum(c * d for c, d in zip(counts, deltas, strict=True))
    report = {
        "epsilon_basic": sum(c * e for c, e in zip(counts, epsilons, strict=True)),
        "delta_basic": delta_basic,
        "epsilon_advanced": math.sqrt(2.0 * math.log(1.0 / delta) * sum(
            c * e * e for c, e in zip(counts, epsilons, strict=True)))
        + sum(c * e * (math.expm1(e) if e < 700 else math.inf) for c, e in zip(counts, epsilons, strict=True)),
        "delta_advanced": delta_basic + delta,
        "epsilon_moments": _paper_moments_epsilon(signature, delta),
        "epsilon_gdp": _gdp_epsilon(signature, delta),
    }
    report["epsilon_rdp"] = _accountant_epsilon("rdp", signature, delta)
    report["epsilon_pld"] = _accountant_epsilon("pld", signature, delta) if with_pld else math.nan
    return report


#: Below this noise multiplier (scale / sensitivity) the PLD accountant is not run.
PLD_MIN_NOISE_MULTIPLIER = 0.05


@lru_cache(maxsize=8192)
def _accountant_epsilon(name: str, signature: Entries, delta: float) -> float:
    """Epsilon at ``delta`` from dp-accounting's RDP or PLD accountant, composing every ledger entry.

    NaN when the accountant cannot represent the ledger: PLD's discretized loss distribution
    needs about 2 / (noise multiplier x 1e-3) points, so it is skipped below a noise multiplier
    of `PLD_MIN_NOISE_MULTIPLIER` (a Laplace per-update epsilon above 20), where it would
    take minutes or fail.
    """
    if name == "pld" and min(mechanism.noise_multiplier for mechanism, _ in signature) < PLD_MIN_NOISE_MULTIPLIER:
        return math.nan
    if name == "pld" and any(_own_pld(mechanism) is not None for mechanism, _ in signature):
        return composed_pld_epsilon(signature, delta)
    accountant = (GridRdpAccountant() if name == "rdp" else
                  pld.PLDAccountant(NEIGHBOURING_RELATION, value_discretization_interval=PLD_DISCRETIZATION))
    try:
        for mechanism, count in signature:
            event = mechanism.dp_event()
            if not accountant.supports(event):  # the PLD of a discrete Gaussian release
                return math.nan
            accountant.compose(event, count)
        return float(accountant.get_epsilon(delta))
    except (IndexError, ValueError, OverflowError, MemoryError):
        return math.nan


def _own_pld(mechanism: Mechanism) -> pld.privacy_loss_distribution.PrivacyLossDistribution | None:
    """The mechanism's own PLD (the secure path's Poisson-sampled discrete Gaussian), or None."""
    own = getattr(mechanism, "privacy_loss_distribution", None)
    return None if own is None else own()


def composed_pld_epsilon(signature: Entries, delta: float) -> float:
    """Epsilon at ``delta`` of a ledger whose every mechanism gives its own PLD (``privacy_loss_distribution``:
    the secure path's Poisson-sampled discrete Gaussian), composed by dp-accounting, with the sum of the releases'
    likelihood-ratio slacks (``pld_slack``, a vector release's smoothing lemma) carried by `smoothed_epsilon`; NaN
    for a ledger that mixes them with mechanisms that only have a dp-accounting event."""
    own = [(_own_pld(mechanism), count) for mechanism, count in signature]
    if any(distribution is None for distribution, _ in own):
        return math.nan
    composed = None
    for distribution, count in own:
        entry = distribution.self_compose(count)
        composed = entry if composed is None else composed.compose(entry)
    slack = sum(count * getattr(mechanism, "pld_slack", 0.0) for mechanism, count in signature)
    return smoothed_epsilon(composed, slack, delta)


def _all_gaussian(signature: Entries) -> bool:
    return all(mechanism.kind == "gaussian" for mechanism, _ in signature)


def _gaussian_mu_squared(signature: Entries) -> float:
    """mu^2 = sum_i c_i / s_i^2 of a Gaussian ledger: the GDP parameter of its composition (each s_i capped at
    1e150, `accounted_multiplier`: valid, and s_i^2 cannot overflow)."""
    return sum(count / accounted_multiplier(mechanism.noise_multiplier) ** 2 for mechanism, count in signature)


@lru_cache(maxsize=8192)
def _gdp_epsilon(signature: Entries, delta: float) -> float:
    """Exact epsilon of a Gaussian ledger at ``delta`` (mu-GDP composition, Balle-Wang conversion)."""
    if not _all_gaussian(signature):
        return math.nan
    return float(gaussian_epsilon(1.0 / math.sqrt(_gaussian_mu_squared(signature)), delta))


def gaussian_epsilon(sigma: float, delta: float, tol: float = 1.0e-12) -> float:
    """The exact epsilon at ``delta`` of the Gaussian mechanism with noise multiplier ``sigma`` (Balle & Wang,
    "Improving the Gaussian mechanism for differential privacy", ICML 2018, Thm. 8).

    This is ``dp_accounting.get_epsilon_gaussian`` step for step (the same root search, to the same tolerance),
    with ``scipy.special.log_ndtr`` where it calls ``scipy.stats.norm.logcdf``: the same function of the same
    argument (the standard normal's loc 0 and scale 1 change nothing) without scipy.stats' argument handling,
    which cost about 40 times the function. A run's per-round epsilon calls it about 30 times; the answers are
    the same numbers (tests/test_round_cost.py compares them bitwise with dp-accounting's).
    """
    if sigma < 0:
        raise PrivacyError(f"sigma must be non-negative, got {sigma!r}", argument="sigma")
    if not 0 <= delta <= 1:
        raise PrivacyError(f"delta must be in [0, 1], got {delta!r}", argument="delta")
    if delta == 1 or sigma == np.inf:
        return 0.0
    if sigma == 0 or delta == 0:
        return math.inf

    def log_delta_at(epsilon: float) -> float:  # Balle & Wang's Eq. (6), in logs
        t_star = epsilon * sigma + 1 / (2 * sigma)
        x = log_ndtr(1 / sigma - t_star)
        y = epsilon + log_ndtr(-t_star)
        return x + np.log1p(-np.exp(y - x)) if y < x else -np.inf  # y == x: log1p(-1) = -inf, without a warning

    log_delta = np.log(delta)
    if log_delta_at(0) < log_delta:  # (0, delta)-DP
        return 0.0
    low, high = 0.0, 1.0
    while log_delta_at(high) > log_delta:
        low, high = high, high * 10
    return float(brentq(lambda epsilon: log_delta_at(epsilon) - log_delta, low, high, xtol=tol))


def _paper_moments_epsilon(signature: Entries, delta: float) -> float:
    """Thm. 4.9, sqrt(T E ln(1/delta) / ln(1.25/delta)) epsilon-bar, in noise-multiplier form.

    With sigma^2 = 2 ln(1.25/delta-bar)(Delta_2/epsilon-bar)^2, epsilon-bar^2 / ln(1.25/delta-bar)
    = 2 / s^2, so the bound is sqrt(2 ln(1/delta) sum_i c_i / s_i^2); it coincides with
    Thm. 4.9 when delta = delta-bar. NaN unless every release is Gaussian.
    """
    if not _all_gaussian(signature):
        return math.nan
    return math.sqrt(2.0 * math.log(1.0 / delta) * _gaussian_mu_squared(signature))
