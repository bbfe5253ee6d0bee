"""A run's Laplace noise set for a total (epsilon, delta): the methods whose releases are pure epsilon-DP Laplace
releases of public sensitivities (RandomizedADMM, RandomizedDGD, DPP2, DiaDSP, PPDC).

Such a method's run releases, for its worst-off agent, a known sequence of Laplace releases whose epsilons are
``c * unit`` (``unit``: the epsilons at the template's noise; c: one public factor, a noise rate or the inverse of a
scale factor). Its ledger reports their composition at the run's delta by the tightest accountant of the run's
history (`privcvx.privacy.accounting.tightest_epsilon` without PLD: the minimum of basic composition, advanced
composition and dp-accounting's RDP). `laplace_multiplier` finds the largest c whose composition is at most the
target, by bisection (the composition is increasing in c and has no closed form beyond basic composition), so a
calibrated run reports the target itself. The final privacy table adds PLD, which can only be lower.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from privcvx.errors import PrivacyError
from privcvx.privacy.accounting import PrivacyLedger, tightest_epsilon
from privcvx.privacy.mechanisms import Laplace, check_delta, check_epsilon

#: Bisection steps on log c: the bracket is at most a factor sqrt(2 T ln(1/delta)) + 1 wide, so 60 halvings leave
#: c within a relative 1e-15 of the answer.
_BISECTIONS = 60


def laplace_composition(epsilons: Sequence[float], delta: float) -> float:
    """The epsilon at ``delta`` that a ledger of Laplace releases of these ``epsilons`` reports (0 ones: none)."""
    ledger = PrivacyLedger("calibration", reports=False)
    for epsilon in epsilons:
        if epsilon > 0.0:
            ledger.record(Laplace(epsilon))
    return tightest_epsilon(ledger, delta, with_pld=False)


@lru_cache(maxsize=256)
def _multiplier(unit: tuple[float, ...], target: float, delta: float) -> float:
    total = math.fsum(unit)
    if not total > 0.0:
        raise PrivacyError("the run makes no charged release: there is no noise to calibrate", argument="epsilon")
    low = target / total  # basic composition spends exactly the target: a lower end

    def spent(c: float) -> float:
        return laplace_composition([c * e for e in unit], delta)

    high = 2.0 * low
    while spent(high) <= target:
        low, high = high, 2.0 * high
    for _ in range(_BISECTIONS):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if spent(middle) <= target else (low, middle)
    return low


def laplace_multiplier(unit: Sequence[float], target: float, delta: float) -> float:
    """The largest c (to a relative 1e-15) with ``laplace_composition(c * unit, delta) <= target``.

    ``unit``: the per-release epsilons of a run at c = 1, in order; a zero is an uncharged release.
    """
    return _multiplier(tuple(float(e) for e in unit), check_epsilon(target), check_delta(delta))
