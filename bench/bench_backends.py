"""Time per round on the serial, process and Ray backends, measured in one run (docs/performance.md).

    .venv/bin/python bench/bench_backends.py [--rounds 6] [--case case1354pegase --zones 8 --local-updates 5]
                                             [--backends serial process ray] [--diagnostics on off]
    .venv/bin/python bench/bench_backends.py --grid [--csv bench/scale_grid.csv]   # the scale grid (issue 13)

The process backend runs one group of agents per core (2 here), the Ray backend one actor per CPU of a
local Ray instance started here (its start-up is reported apart); both balance the groups by the agents'
public sizes (``privcvx.runtime.backends.agent_sizes``). Set-up (spawning workers or actors, compiling every
agent's local step) is reported separately from the time per round; the ratios are backend / serial per
round, from the same run.

``--grid`` runs every case x zone count x backend (non-private, 20 rounds, E = 1, release-only) each in a
child process of its own, so that the driver's peak memory is that configuration's, and records per run: the
time per round, the set-up time, the peak resident memory of the driver and of each host process (read by
each host from its own ``getrusage``), and the fraction of the rounds' wall time that the busiest host spends
in its agents' local steps (each step: E local solves, the gradient and the noise; ``result.info["hosts"]``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import powerflow

FIELDS = ["case", "zones", "local_updates", "backend", "build_s", "ray_start_s", "setup_s", "round_ms", "round_1_ms",
          "driver_peak_mib", "hosts", "host_peak_mib", "steps_s_per_round", "busiest_host_cpu_ms",
          "busiest_host_step_fraction"]


def timed_run(problem, backend: str, rounds: int, local_updates: int, diagnostics: bool = True) -> dict:
    """One run's timings: set-up (the whole time but the rounds'), the time per round (rounds 2..R, round 1
    apart), and what the hosts report (``result.info["hosts"]``: peak memory, the agents' time in their steps)."""
    start = time.perf_counter()
    result = problem.solve(rounds=rounds, local_updates=local_updates, rho=100.0, eta=0.02, backend=backend,
                           diagnostics=diagnostics)
    total = time.perf_counter() - start
    times = result.history["time_s"].to_numpy()
    hosts: dict[int, dict] = {}
    for usage in result.info["hosts"]:
        host = hosts.setdefault(usage["pid"], {"peak_mib": usage["peak_memory_mib"], "busy_s": 0.0, "cpu_s": 0.0})
        host["busy_s"] += usage.get("busy_s", math.nan)  # step times: only in runs that keep diagnostics
        host["cpu_s"] += usage.get("cpu_s", math.nan)
    return {"setup_s": total - times[-1], "round_ms": 1e3 * (times[-1] - times[0]) / (rounds - 1),
            "round_1_ms": 1e3 * times[0], "hosts": len(hosts),
            "host_peak_mib": "/".join(f"{host['peak_mib']:.0f}" for host in hosts.values()),
            "steps_s_per_round": sum(host["busy_s"] for host in hosts.values()) / rounds,
            "busiest_host_cpu_ms": 1e3 * max(host["cpu_s"] for host in hosts.values()) / rounds,
            "busiest_host_step_fraction": max(host["busy_s"] for host in hosts.values()) / times[-1]}


def start_ray() -> float:
    """Start a local Ray instance (one CPU per core, as the Ray backend starts one); return its start-up time."""
    import ray

    from privcvx.runtime.backends import LOCAL_RAY_CONFIG

    start = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, _system_config=LOCAL_RAY_CONFIG)
    return time.perf_counter() - start


def one(case: str, zones: int, backend: str, rounds: int, local_updates: int) -> dict:
    """One configuration of the grid, in this (child) process."""
    ray_start = start_ray() if backend == "ray" else 0.0
    start = time.perf_counter()
    problem = powerflow.zonal_problem(case, zones=zones)
    row = {"case": case, "zones": zones, "local_updates": local_updates, "backend": backend,
           "build_s": time.perf_counter() - start, "ray_start_s": ray_start,
           **timed_run(problem, backend, rounds, local_updates, diagnostics=True)}  # the hosts' step times
    row["driver_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def grid(args: argparse.Namespace) -> None:
    print(f"load average before the grid: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    print("| case | zones | backend | set-up (s) | per round (ms) | driver peak (MiB) | hosts' peaks (MiB) | "
          "local steps / round (s, all agents) | busiest host: fraction of the round in local steps |")
    print("|---|---|---|---|---|---|---|---|---|")
    with open(args.csv, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for case in args.cases:
            for zones in args.zone_counts:
                for backend in args.backends:
                    child = subprocess.run([sys.executable, __file__, "--one", case, str(zones), backend,
                                            "--rounds", str(args.rounds), "--local-updates", str(args.local_updates)],
                                           capture_output=True, text=True, check=True)
                    row = json.loads(child.stdout.strip().splitlines()[-1])
                    writer.writerow(row)
                    handle.flush()
                    print(f"| {case} | {zones} | {backend} | {row['setup_s']:.1f} | {row['round_ms']:.0f} | "
                          f"{row['driver_peak_mib']:.0f} | {row['host_peak_mib']} | {row['steps_s_per_round']:.2f} | "
                          f"{row['busiest_host_step_fraction']:.2f} |",
                          flush=True)
    print(f"load average after the grid: {os.getloadavg()[0]:.1f}")


def compare(args: argparse.Namespace) -> None:
    ray_start = start_ray() if "ray" in args.backends else 0.0
    print(f"Ray start-up: {ray_start:.1f} s; load average before the runs: {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    problem = powerflow.zonal_problem(args.case, zones=args.zones)
    print(f"| case | zones | E | diagnostics | backend | set-up (s) | per round (ms) | "
          f"per round / {args.backends[0]} | busiest host: CPU in steps per round (ms) | that / {args.backends[0]}'s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for diagnostics in args.diagnostics:
        first = first_cpu = None
        for backend in args.backends:
            row = timed_run(problem, backend, args.rounds, args.local_updates, diagnostics == "on")
            first, first_cpu = first or row["round_ms"], first_cpu or row["busiest_host_cpu_ms"]
            print(f"| {args.case} | {args.zones} | {args.local_updates} | {diagnostics} | {backend} | "
                  f"{row['setup_s']:.1f} | {row['round_ms']:.0f} | {row['round_ms'] / first:.2f} | "
                  f"{row['busiest_host_cpu_ms']:.0f} | {row['busiest_host_cpu_ms'] / first_cpu:.2f} |", flush=True)
    print(f"load average after the runs: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=None, help="default: 6 (20 with --grid)")
    parser.add_argument("--case", default="case1354pegase")
    parser.add_argument("--zones", type=int, default=8)
    parser.add_argument("--local-updates", type=int, default=None, help="E; default: 5 (1 with --grid)")
    parser.add_argument("--backends", nargs="+", default=["serial", "process", "ray"],
                        choices=["serial", "process", "ray"], help="the first is the ratios' denominator")
    parser.add_argument("--diagnostics", nargs="+", default=["on"], choices=["on", "off"],
                        help="run each backend with diagnostics on (research runs) and/or off (release-only)")
    parser.add_argument("--grid", action="store_true", help="the scale grid, each configuration in a child process")
    parser.add_argument("--cases", nargs="+", default=["case1354pegase", "case2869pegase"])
    parser.add_argument("--zone-counts", nargs="+", type=int, default=[8, 16, 32])
    parser.add_argument("--csv", default=str(Path(__file__).with_name("scale_grid.csv")))
    parser.add_argument("--one", nargs=3, metavar=("CASE", "ZONES", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.rounds = args.rounds or (20 if args.grid or args.one else 6)
    args.local_updates = args.local_updates or (1 if args.grid or args.one else 5)
    warnings.simplefilter("ignore")
    if args.one:
        row = one(args.one[0], int(args.one[1]), args.one[2], args.rounds, args.local_updates)
        print(json.dumps({key: float(value) if isinstance(value, np.floating) else value
                          for key, value in row.items()}))
    elif args.grid:
        grid(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
