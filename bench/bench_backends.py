"""Time per round on the serial, process and Ray backends, measured in one run (docs/performance.md).

    .venv/bin/python bench/bench_backends.py [--rounds 6] [--case case1354pegase --zones 8 --local-updates 5]
                                             [--backends serial process ray]

The process backend runs one group of agents per core (2 here), the Ray backend one actor per CPU of a
local Ray instance started here (its start-up is reported apart). Set-up (spawning workers or actors,
compiling every agent's local step) is reported separately from the time per round; the ratios are
backend / serial per round, from the same run.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import powerflow


def timed_run(problem, backend: str, rounds: int, local_updates: int) -> tuple[float, float]:
    """(set-up seconds, seconds per round) of one run: set-up is the whole time minus the rounds' time."""
    start = time.perf_counter()
    result = problem.solve(rounds=rounds, local_updates=local_updates, rho=100.0, eta=0.02, backend=backend)
    total = time.perf_counter() - start
    times = result.history["time_s"].to_numpy()
    per_round = (times[-1] - times[0]) / (rounds - 1)
    return total - rounds * per_round, per_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--case", default="case1354pegase")
    parser.add_argument("--zones", type=int, default=8)
    parser.add_argument("--local-updates", type=int, default=5)
    parser.add_argument("--backends", nargs="+", default=["serial", "process", "ray"],
                        choices=["serial", "process", "ray"], help="the first is the ratios' denominator")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    print(f"Ray start-up: {time.perf_counter() - start:.1f} s; load average before the runs: "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    problem = powerflow.zonal_problem(args.case, zones=args.zones)
    print(f"| case | zones | E | backend | set-up (s) | per round (ms) | per round / {args.backends[0]} |")
    print("|---|---|---|---|---|---|---|")
    first = None
    for backend in args.backends:
        setup, per_round = timed_run(problem, backend, args.rounds, args.local_updates)
        first = first or per_round
        print(f"| {args.case} | {args.zones} | {args.local_updates} | {backend} | {setup:.1f} | "
              f"{per_round * 1e3:.0f} | {per_round / first:.2f} |", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
