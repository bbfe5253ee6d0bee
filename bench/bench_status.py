"""What ``result.status`` says for each method's defaults: the table of docs/algorithms.md ("Status").

    PYTHONPATH=.:tests nice -n 15 .venv/bin/python bench/bench_status.py

Part 1: Algorithm 1's defaults on the core test problems (tests/core_problems.py) at 100 and 300 rounds, and four
other methods on two of them at 300 rounds: the status (judged at the last round with each method's default
tolerance) and the relative objective gap to the centralized optimum. Part 2: the unbounded problem of
tests/test_status.py (a linear objective, no constraints): the status and the round at which each method stops.
Part 3: the README example (a private run; its noise is OS entropy, so its digits vary from run to run).
Deterministic but for part 3.
"""

from __future__ import annotations

import warnings

import cvxpy as cp
import numpy as np
from core_problems import box_l1_least_squares, box_least_squares, general_form, ill_conditioned, soc_linear
from test_status import _unbounded

import privcvx as pc

A = pc.algorithms


def _row(name: str, problem: pc.DistributedProblem, algorithm: pc.algorithms.Algorithm | None, rounds: int) -> None:
    result = problem.solve(algorithm, rounds=rounds, reference=True)
    value = result.reference.value
    gap = abs(result.history["objective"].iloc[-1] - value) / max(1.0, abs(value))
    label = type(algorithm).__name__ if algorithm is not None else "Algorithm 1"
    print(f"| {name} | {label} | {rounds} | {result.status} | {gap:.1e} |")


def main() -> None:
    warnings.simplefilter("ignore")
    problems = {"box_l1_least_squares": box_l1_least_squares()[0], "soc_linear": soc_linear()[0],
                "general_form": general_form()[0], "box_least_squares": box_least_squares(),
                "ill_conditioned": ill_conditioned()}
    print("| problem | method | rounds | status | relative gap |\n|---|---|---|---|---|")
    for name, problem in problems.items():
        for rounds in (100, 300):
            _row(name, problem, None, rounds)
    for name in ("box_least_squares", "ill_conditioned"):
        for algorithm in (A.DPDistributedGradient(), A.PRADMM(), A.RandomizedADMM(), A.ExactADMM()):
            _row(name, problems[name], algorithm, 300)
    print("\n| method | status | stopped at round |\n|---|---|---|")
    for algorithm in (None, A.DPDistributedGradient(), A.PRADMM(), A.RandomizedADMM(), A.ExactADMM()):
        result = _unbounded().solve(algorithm, rounds=200)
        print(f"| {type(algorithm).__name__ if algorithm else 'Algorithm 1'} | {result.status} | "
              f"{len(result.history)} |")
    agents = []
    rng = np.random.default_rng(0)
    for _ in range(4):
        a, b = rng.normal(size=(20, 5)), rng.normal(size=20)
        x = cp.Variable(5)
        agents.append(pc.Agent(cp.sum_squares(a @ x - b) / 20, [cp.norm1(x) <= 1, x >= -0.3], shared=x,
                               sensitivity=pc.Sensitivity(l1=0.1, l2=0.1), smoothness=8.0))
    problem = pc.DistributedProblem(agents)
    result = problem.solve(rounds=100, local_updates=5, reference=True,
                           privacy=pc.ObjectivePerturbation(pc.Gaussian(epsilon=0.5, delta=1e-5)))
    last = result.history.iloc[-1]
    print(f"\nREADME example: status {result.status}, objective {last['objective']:.3f} (optimum "
          f"{result.reference.value:.3f}), consensus residual {last['consensus_residual']:.3g}; the average's "
          f"{result.average().history['consensus_residual'].iloc[0]:.3g}")


if __name__ == "__main__":
    main()
