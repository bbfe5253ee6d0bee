"""A run's Laplace noise set for a total (epsilon, delta): the methods whose releases are pure epsilon-DP Laplace
releases of public sensitivities (RandomizedADMM, RandomizedDGD, DPP2, DiaDSP, PPDC, and DPDG with ``delta``).

Such a method's run releases, for its worst-off agent, a known sequence of Laplace releases whose epsilons are
``c * unit`` (``unit``: the epsilons at the template's noise; c: one public factor, a noise rate or the inverse of a
scale factor). Its ledger reports their composition at the run's delta by the tightest accountant of the run's
history (`privcvx.privacy.accounting.tightest_epsilon` without PLD: the minimum of basic composition, advanced
composition and dp-accounting's RDP). `laplace_multiplier` finds the largest c whose composition is at most the
target, by bisection (the composition has no closed form beyond basic composition).

The calibration must hold on both noise paths, which the method does not know when it calibrates (in ``prepare``).
On the secure path (``seed="secure"``, `privcvx.privacy.grid`) a release of epsilon e = Delta / b is the grid's
``DiscreteLaplace(t, D)`` with D / t <= e, whose Renyi divergences lie above the continuous Laplace's (by a relative
O(1/D^2)), so `laplace_composition` composes, per release, an event that dominates both paths (`_dominating`):
``DiscreteLaplace(D_min / e, D_min)`` with the grid's smallest integer sensitivity D_min = 2^10 + 1; for a
noise-dominated grid release (e < 2^-20, charged up to e' = e + 2^-30 at any D) the zCDP bound of an e'-DP release.
Basic and advanced composition are those of the epsilons e (e' for the noise-dominated ones). The bisection keeps a
relative margin of 1e-12 below the target for the roundings of the run's own ledger, so a calibrated run reports at
most the target: the seeded path (continuous Laplace) a relative ~1e-8 below it, the secure path between that and
1e-12 below (at D = D_min). E.g. RandomizedADMM(D=2, b_inf=1) on ``consensus_problem(agents=3, bound=None)`` at a
total of 2 over 25 rounds reports 2 (1 - 1.7e-8) seeded and 2 (1 - 1.5e-8) on the grid (D = 1537). The final
privacy table adds PLD, which can only be lower.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from privcvx.errors import PrivacyError
from privcvx.privacy.accounting import PrivacyLedger, tightest_epsilon
from privcvx.privacy.grid import NOISE_DOMINATED
from privcvx.privacy.mechanisms import (
    GRID_PRECISION_BITS,
    DiscreteLaplace,
    Mechanism,
    ZCDPRelease,
    check_delta,
    check_epsilon,
)

#: Bisection steps on log c: the bracket is at most a factor sqrt(2 T ln(1/delta)) + 1 wide, so 60 halvings leave
#: c within a relative 1e-15 of the answer.
_BISECTIONS = 60

#: The secure grid's smallest integer L1 sensitivity: floor(Delta / gamma) + n >= 2^10 n + n (`grid.calibrate`).
#: At a fixed epsilon D / t the discrete Laplace's Renyi divergences fall as D grows, so D_min's are the largest.
_SMALLEST_GRID_SENSITIVITY = 2 ** GRID_PRECISION_BITS + 1

#: A noise-dominated grid release (epsilon below `NOISE_DOMINATED`; the grid step follows the noise scale) charges
#: at most its epsilon plus this (`grid.calibrate`: n gamma <= 2^-30 b).
_NOISE_DOMINATED_EXCESS = NOISE_DOMINATED * 2.0 ** -GRID_PRECISION_BITS

#: The relative margin the bisection keeps below the target, for the run's ledger, which recomputes the epsilons
#: (sensitivity / scale) and composes them incrementally (`RunningEpsilon`), with other roundings.
_MARGIN = 1e-12

#: Below this fraction of the basic-composition multiplier the bisection gives up (the noise would be 1e30 x it).
_SMALLEST_MULTIPLIER_FRACTION = 1e-30


def _dominating(epsilon: float) -> Mechanism:
    """A ledger entry whose every accountant's charge is at least that of a Laplace release of ``epsilon`` on either
    noise path: the float path's ``Laplace(epsilon)`` and the grid's ``DiscreteLaplace(t, D)``, D / t <= epsilon.

    ``DiscreteLaplace(D_min / epsilon, D_min)``: the same epsilon, and the grid's largest Renyi divergences. Below
    the noise-dominated threshold (with a relative 1e-6 of slack for the run's roundings of Delta / b) the grid
    charges up to e' = epsilon + 2^-30 at any D >= 1: a pure e'-DP release, which is (e'^2 / 2)-zCDP (Bun & Steinke
    2016, Prop. 3.3), so ``ZCDPRelease(e'^2 / 2, epsilon=e', delta=0)`` bounds it in every accountant.
    """
    if epsilon < NOISE_DOMINATED * (1.0 + 1e-6):
        charged = epsilon + _NOISE_DOMINATED_EXCESS
        return ZCDPRelease(0.5 * charged ** 2, epsilon=charged, delta=0.0)
    return DiscreteLaplace(_SMALLEST_GRID_SENSITIVITY / epsilon, _SMALLEST_GRID_SENSITIVITY)


def laplace_composition(epsilons: Sequence[float], delta: float) -> float:
    """The epsilon at ``delta`` that a ledger reports for Laplace releases of these ``epsilons`` (0 ones: none), at
    most: on the float path or on the secure grid, each release recorded as `_dominating` (epsilon)."""
    ledger = PrivacyLedger("calibration", reports=False)
    for epsilon in epsilons:
        if epsilon > 0.0:
            ledger.record(_dominating(epsilon))
    return tightest_epsilon(ledger, delta, with_pld=False)


@lru_cache(maxsize=256)
def _multiplier(unit: tuple[float, ...], target: float, delta: float) -> float:
    total = math.fsum(unit)
    if not total > 0.0:
        raise PrivacyError("the run makes no charged release: there is no noise to calibrate", argument="epsilon")
    ceiling = target * (1.0 - _MARGIN)

    def within(c: float) -> bool:
        return laplace_composition([c * e for e in unit], delta) <= ceiling

    basic = target / total  # basic composition spends exactly the target: at most a step above the answer
    low, high = 0.5 * basic, basic
    while not within(low):  # only noise-dominated releases' 2^-30 (or the margin) can push it above
        if low < _SMALLEST_MULTIPLIER_FRACTION * basic:
            raise PrivacyError(f"the target {target!r} is below what the secure grid's rounding alone charges "
                               f"{len(unit)} releases", argument="epsilon")
        low, high = 0.5 * low, low
    while within(high):
        low, high = high, 2.0 * high
    for _ in range(_BISECTIONS):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if within(middle) else (low, middle)
    return low


def laplace_multiplier(unit: Sequence[float], target: float, delta: float) -> float:
    """The largest c (to a relative 1e-15) with ``laplace_composition(c * unit, delta) <= target (1 - 1e-12)``.

    ``unit``: the per-release epsilons of a run at c = 1, in order; a zero is an uncharged release.
    """
    return _multiplier(tuple(float(e) for e in unit), check_epsilon(target), check_delta(delta))
