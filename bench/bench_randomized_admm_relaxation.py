"""Rounds to converge of RandomizedADMM (Xiao, Ye & Devadas, Algorithm 1) with over-relaxation: the table of
docs/ldp.md ("Over-relaxation").

    nice -n 15 .venv/bin/python bench/bench_randomized_admm_relaxation.py [--alphas 1.0 1.2 1.5 1.8] [--rounds 600]

Non-private, on three 8-agent consensus problems (privcvx.algorithms.conformance.consensus_problem, no box) on
random graphs with 14 edges. For each setting and alpha: the first round from which the relative objective gap to
the centralized optimum stays <= 1e-6 and <= 1e-8 (``-`` if it is not there at the last round). Round counts are
deterministic (seed 1).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import privcvx as pc
from privcvx.algorithms import RandomizedADMM
from privcvx.algorithms.conformance import consensus_problem

SETTINGS = {"random, default D": {}, "random, D = 10": {"D": 10.0}, "fixed": {"aggregator": "fixed"},
            "exact (12)": {"update": "exact"}}
INSTANCES = ((0, 3), (1, 5), (2, 7))  # (problem seed, graph seed)


def settled(gap: np.ndarray, tol: float) -> str:
    """The first round from which ``gap`` stays <= ``tol`` ("-" if the last round is above it)."""
    above = np.flatnonzero(~(gap <= tol))  # a NaN gap counts as above
    if above.size and above[-1] == gap.size - 1:
        return "-"
    return str(int(above[-1]) + 2 if above.size else 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alphas", type=float, nargs="+", default=[1.0, 1.2, 1.5, 1.8])
    parser.add_argument("--rounds", type=int, default=600)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print("| problem, graph seed | setting | " + " | ".join(f"alpha = {a}" for a in args.alphas) + " |")
    print("|---|---|" + "---|" * len(args.alphas))
    for problem_seed, graph_seed in INSTANCES:
        problem = consensus_problem(agents=8, seed=problem_seed, bound=None)
        topology = pc.Topology.random(edges=14, seed=graph_seed)
        reference = problem.solve_centralized()
        for label, settings in SETTINGS.items():
            cells = []
            for alpha in args.alphas:
                result = problem.solve(RandomizedADMM(relaxation=alpha, **settings), topology, rounds=args.rounds,
                                       seed=1)
                objective = result.history["objective"].to_numpy()
                gap = np.abs(objective - reference.value) / max(1.0, abs(reference.value))
                cells.append(f"{settled(gap, 1e-6)} / {settled(gap, 1e-8)}")
            print(f"| {problem_seed}, {graph_seed} | {label} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
