"""The L_p behind eta="auto": privcvx's estimate against closed forms and declared bounds (docs/tuning.md).

    .venv/bin/python bench/bench_smoothness.py
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

from privcvx.gradients import GradientEvaluator
from privcvx.tuning import estimate_smoothness

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from core_problems import box_l1_least_squares, general_form, soc_linear  # noqa: E402


def quadratic_closed_form(agent) -> float:
    """2 lambda_max(A^T A) / rows for the test problems' objective sum_squares(A z - b) / rows."""
    quad_over_lin = agent.objective.args[0]
    rows = float(agent.objective.args[1].value)
    affine = quad_over_lin.args[0]
    matrix = next(arg for arg in affine.args[0].args if not arg.variables()).value
    return 2.0 * float(np.linalg.eigvalsh(matrix.T @ matrix).max()) / rows


def main() -> None:
    warnings.simplefilter("ignore")
    print("| problem | agent | reference L_p | privcvx estimate | estimate time (ms) |")
    print("|---|---|---|---|---|")
    for name, builder in (("box + l1-ball LS", box_l1_least_squares), ("SOC + linear", soc_linear),
                          ("general form", general_form)):
        problem, _, _ = builder()
        for agent, layout in zip(problem.agents, problem.layouts, strict=True):
            start = time.perf_counter()
            estimate = estimate_smoothness(GradientEvaluator(agent, layout), np.zeros(layout.dim))
            elapsed = (time.perf_counter() - start) * 1e3
            print(f"| {name} | {agent.name} | {quadratic_closed_form(agent):.6f} (closed form) | {estimate:.6f} | "
                  f"{elapsed:.1f} |")
    from problems import datasets, federated_logistic

    features, labels = datasets.load_digits()
    problem = federated_logistic(features, labels, agents=4, bound=1.0, seed=0)
    for agent, layout in zip(problem.agents, problem.layouts, strict=True):
        declared = agent.smoothness
        start = time.perf_counter()
        estimate = estimate_smoothness(GradientEvaluator(agent, layout), np.zeros(layout.dim))
        elapsed = (time.perf_counter() - start) * 1e3
        print(f"| digits logistic | {agent.name} | {declared:.6f} (declared bound) | {estimate:.6f} | {elapsed:.1f} |")


if __name__ == "__main__":
    main()
