"""`ConsensusDuals` alone, on a full-consensus layout and on a partial one (issue 32: one code path for both).

    PYTHONPATH=. .venv/bin/python bench/bench_consensus_duals.py [--calls 300] [--repeats 3]

- **full**: digits' layout (``federated_logistic``, 10 agents, every agent holds all 640 entries of w);
- **partial**: 10 agents, 10 keys of 64 entries, each agent holding 7 of them (4480 copies of 640 entries).

For each: line 5 (``average``), line 8 with the two residuals (``update``), and the per-entry residuals of a per-key
penalty (``entry_residuals``), on fresh random releases and w each call (read-only, as a run passes them). CPU time
of the thread (``time.thread_time``), the median of ``--calls`` calls after 30 (the first are not counted), the least
of ``--repeats`` such medians, in microseconds. Run it with each tree first on ``PYTHONPATH`` to compare commits.
"""

from __future__ import annotations

import argparse
import time
import warnings

import cvxpy as cp
import numpy as np

import privcvx as pc
from privcvx.algorithms.consensus import ConsensusDuals
from problems import datasets, federated_logistic


def partial_layout(rng: np.random.Generator) -> pc.DistributedProblem:
    agents = []
    for _ in range(10):
        keys = sorted(rng.choice(10, 7, replace=False))
        x = cp.Variable(7 * 64)
        agents.append(pc.Agent(cp.sum_squares(x), shared={f"k{k}": x[i * 64:(i + 1) * 64] for i, k in enumerate(keys)}))
    return pc.DistributedProblem(agents)


def median_call(problem: pc.DistributedProblem, what: str, calls: int, rng: np.random.Generator) -> float:
    duals = ConsensusDuals(problem.layouts, problem.dim)
    w_previous = rng.uniform(-0.1, 0.1, problem.dim)
    times = []
    for _ in range(calls + 30):
        w = rng.uniform(-0.1, 0.1, problem.dim)
        released = [rng.uniform(-0.1, 0.1, layout.shared_local.size) for layout in problem.layouts]
        for array in (w, *released):
            array.flags.writeable = False
        start = time.thread_time()
        if what == "average":
            duals.average(released, 0.01, problem.multiplicity)
        elif what == "update":
            duals.update(w, w_previous, released, 0.01)
        else:
            duals.entry_residuals(w, w_previous, released)
        times.append(time.thread_time() - start)
        w_previous = w
    return float(np.median(times[30:]) * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    X, y = datasets.load_digits()
    layouts = {"full": federated_logistic(X, y, agents=10, bound=0.1, seed=0), "partial": partial_layout(rng)}
    for name, problem in layouts.items():
        print(f"{name:8s}" + " | ".join(
            f"{what} {min(median_call(problem, what, args.calls, rng) for _ in range(args.repeats)):.1f} us"
            for what in ("average", "update", "entry_residuals")))


if __name__ == "__main__":
    main()
