"""Time per round of Algorithm 1 on the generic run loop (privcvx/runtime) against the old loop of
privcvx/orchestration.py, as a ratio measured in one run.

    .venv/bin/python bench/bench_loop_overhead.py [--rounds 60] [--repeats 5] [--old 88b68fb]

The old commit is checked out in a temporary git worktree (removed at the end). Each repetition runs
one child process per tree, alternating old, new, old, new, ... to cancel machine drift; the child
imports privcvx and powerflow from its tree (PYTHONPATH), builds case118 in 3 zones, warms up with a
short solve, then times ``problem.solve(rounds=R, local_updates=1, rho=30, eta=1.8 / max L_p)`` on the
serial backend without privacy. Per round is the median of the differences of ``history["time_s"]``;
total / rounds also counts the set-up of the timed solve. The final ``w`` of old and new is compared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WARM_UP_ROUNDS = 3


def child(rounds: int) -> None:
    """Time one solve with the privcvx on PYTHONPATH and print a JSON report on the last line of stdout."""
    import powerflow
    import privcvx

    warnings.simplefilter("ignore")
    problem = powerflow.zonal_problem("case118", zones=3)
    settings = {"local_updates": 1, "rho": 30.0, "eta": 1.8 / max(a.smoothness for a in problem.agents),
                "seed": 0}
    problem.solve(rounds=WARM_UP_ROUNDS, **settings)
    start = time.perf_counter()
    result = problem.solve(rounds=rounds, **settings)
    total = time.perf_counter() - start
    per_round = float(np.median(np.diff(result.history["time_s"].to_numpy())))
    print(json.dumps({"privcvx": privcvx.__file__, "powerflow": powerflow.__file__, "per_round": per_round,
                      "total_per_round": total / rounds, "w": result.w.tolist()}))


def measure(tree: Path, rounds: int) -> dict[str, Any]:
    """Run the child with the venv's Python on ``tree``; refuse a report whose privcvx or powerflow is elsewhere."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--rounds", str(rounds)]
    completed = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(tree)}, check=True, capture_output=True,
                               text=True)
    report = json.loads(completed.stdout.splitlines()[-1])
    for module in ("privcvx", "powerflow"):
        if not Path(report[module]).resolve().is_relative_to(tree):
            raise RuntimeError(f"the child imported {module} from {report[module]}, not from {tree}")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--old", default="88b68fb", help="the commit of the old loop")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.rounds)
        return
    old_commit = subprocess.run(["git", "rev-parse", "--short", args.old], cwd=REPO, check=True,
                                capture_output=True, text=True).stdout.strip()
    new_commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, check=True,
                                capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as scratch:
        old_tree = Path(scratch).resolve() / "old"
        subprocess.run(["git", "worktree", "add", "--detach", str(old_tree), old_commit], cwd=REPO, check=True,
                       capture_output=True)
        try:
            reports: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
            for _ in range(args.repeats):
                reports["old"].append(measure(old_tree, args.rounds))
                reports["new"].append(measure(REPO, args.rounds))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=REPO, check=True)
    print(f"case118, 3 zones, E = 1, no privacy, serial backend; {args.rounds} rounds after a "
          f"{WARM_UP_ROUNDS}-round warm-up, {args.repeats} repetitions alternating old, new")
    print(f"old ({old_commit}): privcvx from {reports['old'][0]['privcvx']}, "
          f"powerflow from {reports['old'][0]['powerflow']}")
    print(f"new ({new_commit}): privcvx from {reports['new'][0]['privcvx']}, "
          f"powerflow from {reports['new'][0]['powerflow']}")
    print()
    print("| repetition | old: per round (ms) | new: per round (ms) | old: total / rounds (ms) | "
          "new: total / rounds (ms) |")
    print("|---|---|---|---|---|")
    for k, (old, new) in enumerate(zip(reports["old"], reports["new"], strict=True), start=1):
        print(f"| {k} | {old['per_round'] * 1e3:.2f} | {new['per_round'] * 1e3:.2f} | "
              f"{old['total_per_round'] * 1e3:.2f} | {new['total_per_round'] * 1e3:.2f} |")
    medians = {(tree, column): float(np.median([r[column] for r in reports[tree]]))
               for tree in ("old", "new") for column in ("per_round", "total_per_round")}
    print(f"| median | {medians['old', 'per_round'] * 1e3:.2f} | {medians['new', 'per_round'] * 1e3:.2f} | "
          f"{medians['old', 'total_per_round'] * 1e3:.2f} | {medians['new', 'total_per_round'] * 1e3:.2f} |")
    print()
    print(f"new / old, per round: {medians['new', 'per_round'] / medians['old', 'per_round']:.3f}; "
          f"total / rounds: {medians['new', 'total_per_round'] / medians['old', 'total_per_round']:.3f}")
    difference = max(float(np.max(np.abs(np.subtract(old["w"], new["w"]))))
                     for old, new in zip(reports["old"], reports["new"], strict=True))
    print(f"final w, max |old - new| over the repetitions: {difference:.3g}")


if __name__ == "__main__":
    main()
