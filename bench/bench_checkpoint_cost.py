"""The cost of checkpointing every round (issue 29, point 2): a long private DPDG run with and without checkpoints.

    PYTHONPATH=. .venv/bin/python bench/bench_checkpoint_cost.py [--rounds 600] [--agents 50] [--no-fsync]

``DPDistributedGradient(epsilon=1, q=0.9)`` on ``problems.rendezvous`` with ``--agents`` agents in R^2 on a ring,
seed 1, ``diagnostics=False``, serial backend: once without a checkpoint, once with ``checkpoint=`` (written after
every round). Each run reports its total time, the mean ms per round over its first and last 100 rounds (from a
callback's time stamps), and, with the checkpoint, the size of its files at the end. Both runs include the
accounting's own cost per round (whatever the tree's `RunningEpsilon` costs). A checkpoint flushes three files to
disk each round (the two logs' new records, then the state file: ``os.fsync``), whose cost depends on the disk;
``--no-fsync`` replaces ``os.fsync`` by a no-op in this process to show the rest (what a process kill needs: the
page cache survives it; a power loss needs the flushes).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def run(rounds: int, agents: int, checkpoint: Path | None) -> dict[str, float]:
    import privcvx as pc
    from privcvx.algorithms import DPDistributedGradient
    from problems.rendezvous import rendezvous

    problem = rendezvous(np.random.default_rng(3).uniform(-1, 1, (agents, 2)), meeting=(-1.0, 0.2))
    stamps: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        problem.solve(DPDistributedGradient(epsilon=1.0, q=0.9), pc.Topology.ring(), rounds=rounds, seed=1,
                      diagnostics=False, checkpoint=checkpoint, callback=lambda row: stamps.append(time.perf_counter()))
        total = time.perf_counter() - start
    per_round = np.diff([start, *stamps]) * 1e3
    return {"total_s": total, "first_ms": float(per_round[:100].mean()), "last_ms": float(per_round[-100:].mean())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args()
    if args.no_fsync:
        os.fsync = lambda descriptor: None
    plain = run(args.rounds, args.agents, None)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.ckpt"
        saved = run(args.rounds, args.agents, path)
        sizes = {p.name: p.stat().st_size for p in Path(folder).iterdir()}
    print(f"DPDG, {args.agents} agents, {args.rounds} rounds, serial{', no fsync' if args.no_fsync else ''} "
          f"(load average {os.getloadavg()[0]:.1f})\n")
    print("| run | total | first 100 rounds | last 100 rounds |")
    print("|---|---|---|---|")
    for label, r in (("no checkpoint", plain), ("checkpoint every round", saved)):
        print(f"| {label} | {r['total_s']:.1f} s | {r['first_ms']:.2f} ms | {r['last_ms']:.2f} ms |")
    print(f"\nwith / without: {saved['total_s'] / plain['total_s']:.2f}x in total; checkpoint files at the end: "
          + ", ".join(f"{name} {size / 1e3:.0f} kB" for name, size in sorted(sizes.items())))


if __name__ == "__main__":
    main()
