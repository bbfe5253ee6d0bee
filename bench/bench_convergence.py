"""Rounds to reach the centralized optimum: hand-tuned (eta = 1/max L_p, a rho grid) against the defaults.

    .venv/bin/python bench/bench_convergence.py [--rounds 300] [--skip-slow]

For each problem and E in {1, 5}: the rounds until the relative objective gap and the consensus
residual are both <= 1e-3 and <= 1e-4 (power flow: objective <= 1e-4 and residual <= 1e-3, its
optimum is 0). Round counts are deterministic; times depend on the machine's load.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from core_problems import box_l1_least_squares, general_form, soc_linear  # noqa: E402
from references import logistic_optimum  # noqa: E402


def first_round(history, reference: float, tolerance: float, absolute: bool) -> int | None:
    objective = history["objective"].to_numpy()
    gap = objective if absolute else np.abs(objective - reference) / abs(reference)
    residual_tolerance = 1e-3 if absolute else tolerance
    hit = (gap <= tolerance) & (history["consensus_residual"].to_numpy() <= residual_tolerance)
    return int(history["round"].to_numpy()[hit][0]) if hit.any() else None


def logistic_problem():
    from problems import datasets, federated_logistic

    features, labels = datasets.load_digits()
    problem = federated_logistic(features, labels, agents=4, bound=1.0, seed=0)
    reference = logistic_optimum(features, labels, bound=1.0)
    return problem, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--skip-slow", action="store_true", help="leave out digits and case14")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    cases = []
    for name, builder in (("box + l1-ball LS", box_l1_least_squares), ("SOC + linear", soc_linear),
                          ("general form", general_form)):
        problem, eta, _ = builder()
        cases.append((name, problem, problem.solve_centralized().value, eta, (0.3, 1.0, 3.0), args.rounds, False))
    if not args.skip_slow:
        import powerflow

        problem = powerflow.zonal_problem("case14", zones=3)
        cases.append(("case14, 3 zones", problem, 0.0, 1 / max(a.smoothness for a in problem.agents),
                      (1.0, 10.0, 100.0), args.rounds, True))
        problem, reference = logistic_problem()
        cases.append(("digits logistic, bound 1", problem, reference, 1 / max(a.smoothness for a in problem.agents),
                      (1e-3, 1e-2, 1e-1), 3000, False))
    print("| problem | E | setting | rounds to 1e-3 | rounds to 1e-4 | seconds |")
    print("|---|---|---|---|---|---|")
    for name, problem, reference, eta, rhos, rounds, absolute in cases:
        for local_updates in (1, 5):
            settings = [(f"eta=1/max L_p, rho={rho:g}", {"eta": eta, "rho": rho}) for rho in rhos]
            settings.append(("defaults (eta=auto, rho=adaptive)", {}))
            for label, options in settings:
                start = time.perf_counter()
                history = problem.solve(rounds=rounds, local_updates=local_updates, **options).history
                seconds = time.perf_counter() - start
                coarse = first_round(history, reference, 1e-3 if not absolute else 1e-4, absolute)
                fine = first_round(history, reference, 1e-4 if not absolute else 1e-6, absolute)
                print(f"| {name} | {local_updates} | {label} | {coarse or f'> {rounds}'} | {fine or f'> {rounds}'} | "
                      f"{seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
