"""Utility of ObjPert vs OutPert (derived sensitivity) from per-update epsilon 1e4 to 0.1 (docs/privacy.md).

    .venv/bin/python bench/bench_utility.py
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import privcvx as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from core_problems import box_l1_least_squares  # noqa: E402


def main() -> None:
    warnings.simplefilter("ignore")
    sensitivity = pc.Sensitivity(l1=0.05, l2=0.05)
    problem, eta, _ = box_l1_least_squares(sensitivity=sensitivity)
    reference = problem.solve_centralized().value
    print("| mechanism (per update) | perturbation | final objective | relative gap | max_violation |"
          " final epsilon (history) |")
    print("|---|---|---|---|---|---|")
    for epsilon in (1e4, 10, 1, 0.1):
        for name, privacy in (("ObjPert", pc.ObjectivePerturbation(pc.Laplace(epsilon))),
                              ("OutPert derived", pc.OutputPerturbation(pc.Laplace(epsilon)))):
            history = problem.solve(rounds=60, rho=3.0, eta=eta, seed=0, privacy=privacy).history
            final = history["objective"].iloc[-1]
            print(f"| Laplace({epsilon:g}) | {name} | {final:.6f} | {abs(final - reference) / reference:.2e} | "
                  f"{history['max_violation'].max():.1e} | {history['epsilon'].iloc[-1]:.4g} |")
    print(f"centralized optimum {reference}")


if __name__ == "__main__":
    main()
