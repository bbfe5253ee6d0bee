"""Why Q-DPSGD at a sampling rate q < 1 has no empirical audit with power: the best possible test, computed.

    PYTHONPATH=. .venv/bin/python bench/bench_qdpsgd_subsampled_power.py

One release of the Poisson-subsampled Gaussian on one record's clipped gradient (the worst case of
`PoissonSampledGaussian`: the other records contribute nothing): on D the release is N(0, 1) in units of sigma = s
K, on D' (the record added) the mixture (1 - q) N(0, 1) + q N(1/s, 1). The claim is the ledger's: the amplified RDP
accountant's epsilon at delta (``PoissonSampledDpEvent(q, GaussianDpEvent(s))``, which
`PoissonSampledDiscreteGaussian` composes the same way on the secure path). For each (q, s, delta) the script prints
that claim and the largest lower bound log((TPR - delta) / FPR) of any threshold test "release >= tau" (tau on a
fine grid, i.e. chosen with hindsight, which favours the audit) for the noise as charged (1x) and for 0.75x the
noise: exact rates (N = infinity), and the Clopper-Pearson bounds at 95% (Bonferroni over 5 thresholds, the audit's
grid) of the expected counts at N = 2000 and 10^4 runs per dataset. The audit has power only where the 0.75x bound
at N exceeds the claim.
"""

from __future__ import annotations

import logging

import dp_accounting
import numpy as np
from dp_accounting import rdp
from scipy.stats import beta, norm

logging.getLogger("absl").setLevel(logging.ERROR)


def claim(rate: float, multiplier: float, delta: float) -> float:
    """The ledger's epsilon at delta of one Poisson-subsampled Gaussian release (RDP, amplified)."""
    accountant = rdp.RdpAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(multiplier)))
    return accountant.get_epsilon(delta)


def best_bound(rate: float, shift: float, delta: float, runs: int | None = None) -> float:
    """max over tau of log((TPR - delta) / FPR) for the test "release >= tau" (exact, or at ``runs``)."""
    best = 0.0
    for tau in np.linspace(-1.0, 6.0, 141):
        fpr, tpr = norm.sf(tau), (1 - rate) * norm.sf(tau) + rate * norm.sf(tau - shift)
        if runs is not None:
            alpha = 0.05 / (2 * 5)
            fpr = beta.ppf(1 - alpha, fpr * runs + 1, runs - fpr * runs)
            tpr = beta.ppf(alpha, tpr * runs, runs - tpr * runs + 1)
        if tpr > delta and fpr > 0:
            best = max(best, float(np.log((tpr - delta) / fpr)))
    return best


def main() -> None:
    print("| q | s | delta | claimed epsilon | best bound 1x (N = inf) | 0.75x (N = inf) | 0.75x (N = 2000) | "
          "0.75x (N = 10^4) |")
    print("|---|---|---|---|---|---|---|---|")
    for rate in (0.5, 0.8):
        for multiplier in (0.5, 0.7, 1.0):
            for delta in (1e-5, 1e-2, 0.1):
                under = 1.0 / (0.75 * multiplier)
                print(f"| {rate} | {multiplier} | {delta:g} | {claim(rate, multiplier, delta):.3f} | "
                      f"{best_bound(rate, 1.0 / multiplier, delta):.3f} | {best_bound(rate, under, delta):.3f} | "
                      f"{best_bound(rate, under, delta, 2000):.3f} | {best_bound(rate, under, delta, 10_000):.3f} |")


if __name__ == "__main__":
    main()
