"""Q-DPSGD-1's noise multiplier on the seeded and the secure path, and what the secure ledger spends with it.

    PYTHONPATH=. .venv/bin/python bench/bench_qdpsgd_secure_multiplier.py

At epsilon = 1, delta = 1e-5, T = 200 and q in {0.02, 0.1}, for releases of dimension d in {1, 5}: the seeded
multiplier (`QDPSGD.calibrate(T)`, dp-accounting's RDP of the Poisson-sampled Gaussian), the secure one
(`QDPSGD.calibrate(T, grid=True, dim=d)`), and the secure ledger's epsilon at that multiplier: its PLD (what
`calibrate` checks; for d > 1 the smoothing lemma's, with its slack 2 Lambda) and its RDP column (the smaller of Zhu &
Wang's bound and the smoothing lemma's curve), with the grid's sigma and the slack Lambda of the T releases.
"""

from __future__ import annotations

import logging

from privcvx.algorithms import QDPSGD
from privcvx.privacy.accounting import PrivacyLedger, epsilon_report
from privcvx.privacy.grid import calibrate
from privcvx.privacy.mechanisms import PoissonSampledDiscreteGaussian

logging.getLogger("absl").setLevel(logging.ERROR)

ROUNDS, EPSILON, DELTA = 200, 1.0, 1e-5


def main() -> None:
    print("| q | d | seeded multiplier | secure multiplier | secure epsilon_pld | secure epsilon_rdp | grid sigma | "
          "Lambda |")
    print("|---|---|---|---|---|---|---|---|")
    for rate in (0.02, 0.1):
        algorithm = QDPSGD(variant=1, epsilon=EPSILON, delta=DELTA, clip=1.0, sampling_rate=rate)
        seeded = algorithm.calibrate(ROUNDS)
        for dim in (1, 5):
            secure = algorithm.calibrate(ROUNDS, grid=True, dim=dim)
            grid = calibrate("gaussian", secure, 1.0, dim)
            release = PoissonSampledDiscreteGaussian(rate, grid.scale, grid.sensitivity, dim)
            ledger = PrivacyLedger("agent")
            ledger.record(release, ROUNDS)
            report = epsilon_report(ledger, DELTA)
            print(f"| {rate} | {dim} | {seeded:.4f} | {secure:.4f} | {report['epsilon_pld']:.4f} | "
                  f"{report['epsilon_rdp']:.7f} | {grid.scale:.0f} | {ROUNDS * release.pld_slack:.2g} |")


if __name__ == "__main__":
    main()
