"""PR-ADMM's local steps on digits (examples/compare_digits.toml's problem): the certified L-BFGS-B step (`SmoothStep`)
against Clarabel on the same steps, and its statistics over whole PR-ADMM runs.

    PYTHONPATH=. .venv/bin/python bench/bench_smooth_step.py [--steps 3] [--rounds 100] [--epsilons 0.1 10]

(a) ``--steps`` random steps of agent 0 (weight 2 eta |V_i| = 3, linear terms N(0, 0.01^2) and one N(0, 1)): seconds
    and certified distance of the "lbfgsb" strategy, seconds of Clarabel (the next strategy of the chain) on the
    same (w, b), and the largest coordinate difference of the two answers;
(b) one PR-ADMM run of ``--rounds`` rounds per total epsilon (seed 0): the median and largest seconds of a step, the
    median and largest certified distance (`SmoothStep.certified_distance` recomputed at the answer), the share of
    steps at most 1e-12 and the fallbacks to Clarabel.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

from privcvx.algorithms import PRADMM
from privcvx.localsolve import LocalProblem, strategies
from privcvx.study_file import load

STUDY = Path(__file__).resolve().parents[1] / "examples" / "compare_digits.toml"


def side_by_side(problem, steps: int) -> None:
    agent, layout = problem.agents[0], problem.layouts[0]
    local = LocalProblem(agent, layout, objective=True)
    smooth, conic = local.chain[0], strategies.ClarabelStep(local)
    rng = np.random.default_rng(0)
    for k in range(steps):
        b = rng.normal(size=layout.dim) * (1.0 if k == steps - 1 else 0.01)
        start = time.perf_counter()
        z, _ = smooth.solve(3.0, b, None, False, local.stats)
        middle = time.perf_counter()
        reference, _ = conic.solve(3.0, b, None, False, local.stats)
        end = time.perf_counter()
        distance = smooth.certified_distance(z, smooth.evaluator.gradient(z) + 3.0 * z - b, np.full(b.size, 3.0))
        print(f"(a) step {k}: lbfgsb {middle - start:.3f} s (certified {distance:.1e}), clarabel {end - middle:.1f} s,"
              f" max difference {np.max(np.abs(z - reference)):.1e}")


def over_runs(problem, rounds: int, epsilons: list[float]) -> None:
    records: list[tuple[float, float]] = []
    solve = strategies.SmoothStep.solve

    def timed(self, w, b, point, warm, stats):
        start = time.perf_counter()
        z, inaccurate = solve(self, w, b, point, warm, stats)
        weights = np.broadcast_to(np.asarray(w, dtype=float), b.shape)
        records.append((time.perf_counter() - start,
                        self.certified_distance(z, self.evaluator.gradient(z) + weights * z - b, weights)))
        return z, inaccurate

    strategies.SmoothStep.solve = timed
    for epsilon in epsilons:
        records.clear()
        result = problem.solve(PRADMM(epsilon=epsilon, delta=1e-6), rounds=rounds, seed=0)
        seconds, distance = np.array(records).T
        fallbacks = sum(report["fallbacks"] for report in result.info["local_solve"].values())
        print(f"(b) epsilon {epsilon:g}: {seconds.size} steps, median {np.median(seconds) * 1e3:.1f} ms, largest "
              f"{seconds.max():.3f} s; certified distance median {np.median(distance):.1e}, largest "
              f"{distance.max():.1e}, share <= 1e-12 {np.mean(distance <= 1e-12):.2f}; fallbacks {fallbacks}")
    strategies.SmoothStep.solve = solve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 10.0])
    options = parser.parse_args()
    problem = load(STUDY).study.problem()
    warnings.simplefilter("ignore")
    side_by_side(problem, options.steps)
    over_runs(problem, options.rounds, options.epsilons)


if __name__ == "__main__":
    main()
