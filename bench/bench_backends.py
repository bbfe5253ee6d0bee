"""Time per round on the serial and the process backend, measured in one run (docs/performance.md).

    .venv/bin/python bench/bench_backends.py [--rounds 20]

The process backend runs one group of agents per core (2 here); the ratio is serial / process.
Set-up (spawning workers, compiling every agent's local step) is reported separately.
"""

from __future__ import annotations

import argparse
import time
import warnings

import powerflow


def timed_run(problem, backend: str, rounds: int, local_updates: int) -> tuple[float, float]:
    """(set-up seconds, seconds per round) of one run: set-up is the time before round 1 ends minus a round."""
    start = time.perf_counter()
    result = problem.solve(rounds=rounds, local_updates=local_updates, rho=100.0, eta=0.02, backend=backend)
    total = time.perf_counter() - start
    times = result.history["time_s"].to_numpy()
    per_round = (times[-1] - times[0]) / (rounds - 1)
    return total - rounds * per_round, per_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print("| case | zones | E | serial: set-up (s) | serial: per round (ms) | process: set-up (s) | "
          "process: per round (ms) | serial / process per round |")
    print("|---|---|---|---|---|---|---|---|")
    for case, zones in (("case118", 3), ("case1354pegase", 8)):
        problem = powerflow.zonal_problem(case, zones=zones)
        for local_updates in (1, 5):
            serial = timed_run(problem, "serial", args.rounds, local_updates)
            process = timed_run(problem, "process", args.rounds, local_updates)
            print(f"| {case} | {zones} | {local_updates} | {serial[0]:.1f} | {serial[1] * 1e3:.0f} | "
                  f"{process[0]:.1f} | {process[1] * 1e3:.0f} | {serial[1] / process[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
