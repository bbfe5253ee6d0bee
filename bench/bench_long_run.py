"""A long private run: time per round and memory, by where the transcript is kept (issue 29, points 3 and 4).

    PYTHONPATH=. .venv/bin/python bench/bench_long_run.py [--rounds 3000] [--agents 50]

``DPDistributedGradient(epsilon=1, q=0.9)`` (a new Laplace mechanism in every agent's ledger each round) on
``problems.rendezvous`` with ``--agents`` agents in R^2 on a ring, seed 1, ``diagnostics=False``, serial backend, once
per ``solve(transcript=...)`` mode, each in its own child process. A callback records the time stamp of every round
and the process's resident memory (VmRSS) at rounds 300 and the last. Reported: the mean ms per round of the first
and the last 100 rounds, RSS at round 300 and at the end, and the bytes per agent-round of the growth between them.
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

import numpy as np


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(mode: str, rounds: int, agents: int) -> None:
    """One run; print a JSON report on the last line of stdout."""
    import privcvx as pc
    from problems.rendezvous import rendezvous

    warnings.simplefilter("ignore")
    problem = rendezvous(np.random.default_rng(3).uniform(-1, 1, (agents, 2)), meeting=(-1.0, 0.2))
    stamps: list[float] = []
    rss: dict[int, float] = {}

    def record(row: dict) -> None:
        stamps.append(time.perf_counter())
        if row["round"] in (300, rounds):
            rss[row["round"]] = _rss_mib()

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "run.transcript") if mode == "disk" else None
        result = problem.solve(pc.algorithms.DPDistributedGradient(epsilon=1.0, q=0.9), pc.Topology.ring(),
                               rounds=rounds, seed=1, diagnostics=False, callback=record, transcript=mode,
                               transcript_path=path)
        size = os.path.getsize(path) if path else 0
    per_round = np.diff(stamps) * 1e3
    print(json.dumps({"mode": mode, "first": float(per_round[:100].mean()), "last": float(per_round[-100:].mean()),
                      "rss_300": rss[300], "rss_end": rss[rounds], "messages": len(result.transcript),
                      "file_mib": size / 2**20, "epsilon": float(result.history["epsilon"].iloc[-1])}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--child", default=None)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rounds, args.agents)
        return
    print(f"DPDG, {args.agents} agents, {args.rounds} rounds (load average {os.getloadavg()[0]:.1f})\n")
    print("| transcript | first 100 rounds | last 100 rounds | last / first | RSS at round 300 | RSS at the end | "
          "growth per agent-round | transcript file |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in ("memory", "disk", "none"):
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--rounds", str(args.rounds), "--agents",
                              str(args.agents)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        growth = (r["rss_end"] - r["rss_300"]) * 2**20 / (args.agents * (args.rounds - 300))
        print(f"| {mode} | {r['first']:.2f} ms | {r['last']:.2f} ms | {r['last'] / r['first']:.2f} | "
              f"{r['rss_300']:.0f} MiB | {r['rss_end']:.0f} MiB | {growth:.0f} B | {r['file_mib']:.1f} MiB |")


if __name__ == "__main__":
    main()
