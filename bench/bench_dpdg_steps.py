"""DPDistributedGradient without privacy: which non-summable step c / t^a reaches the optimum, and how fast.

    .venv/bin/python bench/bench_dpdg_steps.py [--rounds 1000]

For a in {1/2, 3/4, 1} and c = 1/max L_i (the default), on a ring: the relative gap of the average
release, |sum_i f_i(w) - F*| / max(1, |F*|), at rounds 100, 300 and the last, and the first round at
which it is <= 1e-3. Problems: the conformance problem of check_algorithm (well conditioned, box
active), heterogeneous box least squares, and ill-conditioned least squares (condition number 1e4).
Round counts are deterministic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import privcvx as pc
from privcvx.algorithms import DPDistributedGradient
from privcvx.algorithms.conformance import consensus_problem
from privcvx.schedules import Power

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from core_problems import box_least_squares, ill_conditioned  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    rounds = parser.parse_args().rounds
    print("| problem | a | gap at 100 | gap at 300 | gap at last | first round <= 1e-3 |")
    print("|---|---|---|---|---|---|")
    for name, problem in [("conformance (check_algorithm)", consensus_problem()),
                          ("box least squares", box_least_squares()), ("ill-conditioned", ill_conditioned())]:
        reference = problem.solve_centralized()
        c = 1.0 / max(agent.smoothness for agent in problem.agents)
        for power in (0.5, 0.75, 1.0):
            history = problem.solve(DPDistributedGradient(step=Power(c, power), c=c), pc.Topology.ring(),
                                    rounds=rounds, diagnostics=True).history
            gap = np.abs(history["average_objective"].to_numpy() - reference.value) / max(1.0, abs(reference.value))
            reached = np.flatnonzero(gap <= 1e-3)
            first = int(reached[0]) + 1 if reached.size else f"> {rounds}"
            print(f"| {name} | {power:g} | {gap[99]:.1e} | {gap[299]:.1e} | {gap[-1]:.1e} | {first} |")


if __name__ == "__main__":
    main()
