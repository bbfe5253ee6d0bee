"""DPDistributedGradient without privacy: which non-summable step c / t^a reaches the optimum, and how fast.

    .venv/bin/python bench/bench_dpdg_steps.py [--rounds 1000]

For a in {1/2, 3/4, 1} and c = 1/max L_i (the default), on a ring: the relative gap of the average
release, |sum_i f_i(w) - F*| / max(1, |F*|), at rounds 100, 300 and the last, and the first round at
which it is <= 1e-3. Problems: the conformance problem of check_algorithm (well conditioned, box
active), heterogeneous box least squares, and ill-conditioned least squares (condition number 1e4).
Round counts are deterministic.

Second table: the paper's geometric steps gamma_t = c q^(t-1) without noise stop at a bias. For q in
{0.9, 0.99}: the measured d = ||xbar(T) - x*||^2 at T = 300 and T = 600 (equal: the run has stalled)
against Theorem 10's noise-free bound C1^2 exp(-C3 c/(1-q)) + C2^2 c^2/(1-q^2)
(:func:`privcvx.algorithms.dp_gradient_accuracy.accuracy_bound`), with C1 the diameter of X, C2 the largest
gradient norm on X and C3 the smallest strong-convexity modulus.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

import privcvx as pc
from privcvx.algorithms import DPDistributedGradient
from privcvx.algorithms.conformance import consensus_problem
from privcvx.algorithms.dp_gradient_accuracy import accuracy_bound
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
    bias_table()


def bias_table() -> None:
    """Geometric steps: measured bias against Theorem 10 on box least squares and a clipped rendezvous."""
    from problems.rendezvous import rendezvous

    box = box_least_squares()
    blocks, r = box.info["blocks"], box.info["bound"]
    vertices = np.array(list(itertools.product([-r, r], repeat=4)))
    box_constants = (2 * r * 2.0, max(np.linalg.norm(2 * a.T @ (a @ v - b) / 15) for a, b in blocks for v in vertices),
                     min(np.linalg.eigvalsh(2 * a.T @ a / 15).min() for a, b in blocks), 4)
    meeting = rendezvous(np.random.default_rng(3).uniform(-1, 1, (8, 2)), meeting=(-1.0, 0.2))
    # X = [-1, 0.2]^2: diameter 1.2 sqrt(2); grad f_i = 2 (x - a_i) with a_i in [-1, 1]^2: at most 2 * 2 sqrt(2).
    meeting_constants = (1.2 * np.sqrt(2.0), 4.0 * np.sqrt(2.0), 2.0, 2)
    print("\n| problem | topology | q | c | d at 300 | d at 600 | Theorem 10 bound | measured / bound |")
    print("|---|---|---|---|---|---|---|---|")
    for name, problem, (diameter, gradient, strong, n) in [("box least squares", box, box_constants),
                                                          ("rendezvous, meeting box [-1, 0.2]^2", meeting,
                                                           meeting_constants)]:
        optimum = problem.solve_centralized().w
        c = 1.0 / max(agent.smoothness for agent in problem.agents)
        for label, topology in [("ring", pc.Topology.ring()), ("random", pc.Topology.random(seed=1))]:
            for q in (0.9, 0.99):
                algorithm = DPDistributedGradient(step="geometric", c=c, q=q)
                d = [float(np.sum((problem.solve(algorithm, topology, rounds=rounds).w - optimum) ** 2))
                     for rounds in (300, 600)]
                bound = accuracy_bound(c=c, q=q, diameter=diameter, gradient_bound=gradient, strong_convexity=strong,
                                       n=n)
                print(f"| {name} | {label} | {q} | {c:.3f} | {d[0]:.2e} | {d[1]:.2e} | {bound:.3g} "
                      f"| {d[1] / bound:.1e} |")


if __name__ == "__main__":
    main()
