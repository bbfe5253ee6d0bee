"""Server-side acceleration under privacy: ObjPert, Gaussian (epsilon = 1, delta = 1e-5), power-flow zones.

    nice -n 15 .venv/bin/python bench/bench_private_acceleration.py [--cases case14 case118] [--rounds 100]
        [--seeds 5] [--out bench/private_acceleration.csv]

For each case (3 zones, ``powerflow.zonal_problem``), each option and each seed: the objective (optimum 0)
and the consensus residual after ``rounds`` rounds, E = 1, eta="auto" (Eq. (25a) from the declared L_p).
Rows are appended to the CSV as runs finish; a row already in the file is not run again. The summary (mean
over seeds) is printed as a markdown table.
"""

from __future__ import annotations

import argparse
import csv
import time
import warnings
from pathlib import Path

import numpy as np

import privcvx as pc

#: The options compared: a label and the keyword arguments of ``problem.solve``.
OPTIONS = {
    "defaults": {},
    "relaxation=1.6": {"relaxation": 1.6},
    "anderson=5": {"anderson": 5},
    "rho=adaptive-per-key": {"rho": "adaptive-per-key"},
    "relaxation=1.6, rho=adaptive-per-key": {"relaxation": 1.6, "rho": "adaptive-per-key"},
    "rho=ResidualBalancing()": {"rho": pc.schedules.ResidualBalancing()},  # rho="adaptive" before issue 14's rule
}
FIELDS = ["case", "option", "seed", "rounds", "objective", "consensus_residual", "epsilon", "seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", nargs="+", default=["case14", "case118"])
    parser.add_argument("--options", nargs="+", default=list(OPTIONS))
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/private_acceleration.csv"))
    args = parser.parse_args()
    import powerflow

    warnings.simplefilter("ignore")  # integer seeds (reproducible noise) and CVXPY's inaccurate-solve notes
    done = set()
    if args.out.exists():
        with args.out.open() as handle:
            done = {(r["case"], r["option"], int(r["seed"])) for r in csv.DictReader(handle)}
    else:
        with args.out.open("w", newline="") as handle:
            csv.writer(handle).writerow(FIELDS)
    privacy = pc.ObjectivePerturbation(pc.Gaussian(1.0, 1e-5))
    for case in args.cases:
        problem = powerflow.zonal_problem(case, zones=3)
        for option in args.options:
            for seed in range(args.seeds):
                if (case, option, seed) in done:
                    continue
                start = time.perf_counter()
                history = problem.solve(rounds=args.rounds, privacy=privacy, seed=seed, diagnostics=True,
                                        **OPTIONS[option]).history
                row = [case, option, seed, args.rounds, float(history["objective"].iloc[-1]),
                       float(history["consensus_residual"].iloc[-1]), float(history["epsilon"].iloc[-1]),
                       round(time.perf_counter() - start, 1)]
                with args.out.open("a", newline="") as handle:
                    csv.writer(handle).writerow(row)
                print(*row, flush=True)
    summarize(args.out)


def summarize(path: Path) -> None:
    """The mean (and standard deviation) over seeds of the final objective and consensus residual."""
    import pandas as pd

    table = pd.read_csv(path)
    print("| case | option | seeds | objective after T (mean ± sd) | consensus residual (mean) | epsilon |")
    print("|---|---|---|---|---|---|")
    for (case, option), group in table.groupby(["case", "option"], sort=False):
        print(f"| {case} | {option} | {len(group)} | {group.objective.mean():.4g} ± {np.std(group.objective):.2g} | "
              f"{group.consensus_residual.mean():.3g} | {group.epsilon.iloc[0]:.3g} |")


if __name__ == "__main__":
    main()
