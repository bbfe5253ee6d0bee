"""The digits round against the numpy floor, for several commits of privcvx, measured alternately on one machine.

    PYTHONPATH=. .venv/bin/python bench/bench_floor_commits.py COMMIT [COMMIT ...] [--rounds 100] [--repeats 5]
        [--passes 2] [--diagnostics] [--transcript-none] [--cpu]

Issue 28 was filed with diagnostics off at 0.91x the floor; on this machine today's code measures more than 1x. This
bench asks whether the code grew slower or the measurement changed: each commit is extracted with ``git archive``
into a temporary directory and run in a child process with that tree first on ``PYTHONPATH``. The child uses only
the public API that every commit since the floor was written has (``federated_logistic``, ``problem.solve`` with a
callback), so that old trees run as they are.

The set-up is ``bench_numpy_floor.py``'s (digits, 10 IID agents, the box [-0.1, 0.1], Algorithm 1 with E = 5,
rho = 0.01, eta = "auto", non-private, serial), and its floor ``NumpyAlgorithm1`` (this tree's file, the same for
every commit). Run by run, as ``bench_numpy_floor.py`` times them: in each repetition the floor's ``--rounds``
rounds, then privcvx's (the differences between the ends of successive rounds, taken by a callback); per round is
the median over the rounds, the ratio privcvx / floor per repetition, and the median of the repetitions' ratios is
printed. The children run one after the other, the commits in the given order, ``--passes`` times over, so that a
change of load hits every commit. ``--transcript-none``: privcvx runs with ``transcript="none"`` (keeping no message;
the default keeps every message in memory), for commits that have the option. ``--cpu``: both sides timed by the
thread's CPU clock (``time.thread_time``; the serial backend runs the whole round in this thread), which leaves out
the time the process waits for a core on a loaded machine; the default is the wall clock (``time.perf_counter``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def child(rounds: int, repeats: int, diagnostics: bool, transcript_none: bool, cpu: bool) -> None:
    """Run in the extracted tree: print the repetitions' ratios and their median."""
    sys.path.insert(0, str(HERE))
    from bench_numpy_floor import AGENTS, BOUND, LOCAL_UPDATES, NumpyAlgorithm1

    from problems import datasets, federated_logistic

    warnings.simplefilter("ignore")
    X, y = datasets.load_digits()
    problem = federated_logistic(X, y, agents=AGENTS, bound=BOUND, seed=0)
    shares = problem.info["shares"]
    clock = time.thread_time if cpu else time.perf_counter

    def floor() -> float:
        method = NumpyAlgorithm1(X, y, shares, rho=0.01, private=False)
        times = []
        for t in range(1, rounds + 1):
            start = clock()
            method.round(t)
            times.append(clock() - start)
        return float(np.median(times))

    def privcvx() -> float:
        ends: list[float] = []
        problem.solve(rounds=rounds, local_updates=LOCAL_UPDATES, rho=0.01, eta="auto", seed=0,
                      diagnostics=diagnostics, callback=lambda row: ends.append(clock()),
                      **({"transcript": "none"} if transcript_none else {}))
        return float(np.median(np.diff(ends)))

    floor(), privcvx()  # warm-up
    ratios = []
    for _ in range(repeats):
        numpy_time = floor()
        ratios.append(privcvx() / numpy_time)
    print(" ".join(f"{r:.3f}" for r in ratios), f"median {np.median(ratios):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("commits", nargs="*")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--diagnostics", action="store_true", help="privcvx with diagnostics on (default: off)")
    parser.add_argument("--transcript-none", action="store_true", help='privcvx with transcript="none"')
    parser.add_argument("--cpu", action="store_true", help="time by the thread's CPU clock (default: wall clock)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.rounds, args.repeats, args.diagnostics, args.transcript_none, args.cpu)
        return
    repository = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=HERE, check=True, capture_output=True,
                                text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as scratch:
        trees = {}
        for commit in args.commits:
            tree = Path(scratch) / commit
            tree.mkdir()
            archive = subprocess.run(["git", "archive", commit], cwd=repository, check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
            trees[commit] = tree
        print(f"digits, E = 5, diagnostics {'on' if args.diagnostics else 'off'}"
              f"{', transcript none' if args.transcript_none else ''}{', CPU clock' if args.cpu else ''}: privcvx / "
              "numpy floor per "
              f"repetition ({args.rounds} rounds run by run), median; load average {os.getloadavg()[0]:.2f}")
        for _ in range(args.passes):
            for commit, tree in trees.items():
                command = [sys.executable, __file__, "--child", "--rounds", str(args.rounds), "--repeats",
                           str(args.repeats), *(["--diagnostics"] if args.diagnostics else []),
                           *(["--transcript-none"] if args.transcript_none else []), *(["--cpu"] if args.cpu else [])]
                out = subprocess.run(command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True,
                                     capture_output=True, text=True).stdout.strip()
                print(f"{time.strftime('%H:%M:%S', time.gmtime())} {commit}: {out}")
        print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
