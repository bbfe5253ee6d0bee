"""The cost of checkpointing every round (issue 29, point 2): a long private DPDG run with and without checkpoints.

    PYTHONPATH=. .venv/bin/python bench/bench_checkpoint_cost.py [--rounds 600] [--agents 50] [--repeats 3]
                                                                  [--no-fsync]

``DPDistributedGradient(epsilon=1, q=0.9)`` on ``problems.rendezvous`` with ``--agents`` agents in R^2 on a ring,
seed 1, ``diagnostics=False``, serial backend: without a checkpoint and with ``checkpoint=`` (written after every
round), alternately, ``--repeats`` times each (the machine is shared: the medians are reported). Each run reports
its total time, its CPU time (``time.process_time``: every thread of the process, less sensitive to the machine's
load than the wall time), and the mean ms per round over its first and last 100 rounds (from a callback's time
stamps); the checkpointed runs also report the checkpoint's own cost per round: the time the run loop spends in
``Run.commit`` (the logs' records, the state's encoding, and the wait for the previous round's commit, whose
writes, flushes and rename run in a background thread), as the mean over rounds 1-11 (about round 6) and over the
last 11 rounds (about round 600), the CPU time per round of ``Run.commit`` on the run's thread and of the commit
thread (``time.thread_time``), and the size of the files at the end. Per round, both runs also report the run's
thread's CPU time, the process's system time and its voluntary context switches (``getrusage``: the commit
thread's waits for the disk and the two threads' hand-offs of the GIL). Both runs include the accounting's own cost per
round. Every round appends its records to the logs; its state file is committed when the commit thread is
ready for it (at most every ``checkpoint.COMMIT_INTERVAL`` seconds) and at the end: the runs report how many state
files they committed, and how long a commit took from its submit to its rename. A commit flushes three files to
disk (the two logs' new records, then the state file: ``os.fsync``), whose cost depends on the disk;
``--no-fsync`` replaces ``os.fsync`` by a no-op in this process to
show the rest (what a process kill needs: the page cache survives it; a power loss needs the flushes).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def run(rounds: int, agents: int, checkpoint: Path | None) -> dict[str, float]:
    import privcvx as pc
    from privcvx.algorithms import DPDistributedGradient
    from privcvx.runtime import checkpoint as checkpoints
    from privcvx.runtime import loop
    from problems.rendezvous import rendezvous

    problem = rendezvous(np.random.default_rng(3).uniform(-1, 1, (agents, 2)), meeting=(-1.0, 0.2))
    stamps: list[float] = []
    commits: list[float] = []
    cpu_times = {"commit": 0.0, "background": 0.0}
    commit, work, replace = loop.Run.commit, checkpoints.Committer._work, checkpoints.replace_temporary
    submit = checkpoints.Committer.submit
    submitted, latencies = [0.0], []  # the time of the last submit; from each submit to its state file's rename

    def handed(committer: object, *args: object) -> None:
        submitted[0] = time.perf_counter()
        submit(committer, *args)

    def renamed(*args: object) -> None:
        replace(*args)
        latencies.append(time.perf_counter() - submitted[0])

    def timed(*args: object, **kwargs: object) -> None:
        begin, begin_cpu = time.perf_counter(), time.thread_time()
        commit(*args, **kwargs)
        commits.append(time.perf_counter() - begin)
        cpu_times["commit"] += time.thread_time() - begin_cpu

    def background(committer: object) -> None:  # the commit thread's CPU time, at its end
        try:
            work(committer)
        finally:
            cpu_times["background"] += time.thread_time()

    loop.Run.commit, checkpoints.Committer._work, checkpoints.replace_temporary = timed, background, renamed
    checkpoints.Committer.submit = handed
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start, cpu, main = time.perf_counter(), time.process_time(), time.thread_time()
            usage = resource.getrusage(resource.RUSAGE_SELF)
            problem.solve(DPDistributedGradient(epsilon=1.0, q=0.9), pc.Topology.ring(), rounds=rounds, seed=1,
                          diagnostics=False, checkpoint=checkpoint,
                          callback=lambda row: stamps.append(time.perf_counter()))
            total, cpu, main = time.perf_counter() - start, time.process_time() - cpu, time.thread_time() - main
            after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        loop.Run.commit, checkpoints.Committer._work, checkpoints.replace_temporary = commit, work, replace
        checkpoints.Committer.submit = submit
    per_round = np.diff([start, *stamps]) * 1e3
    out = {"total_s": total, "cpu_s": cpu, "main_cpu_ms": main / rounds * 1e3,
           "system_ms": (after.ru_stime - usage.ru_stime) / rounds * 1e3,
           "switches": (after.ru_nvcsw - usage.ru_nvcsw) / rounds, "first_ms": float(per_round[:100].mean()),
           "last_ms": float(per_round[-100:].mean())}
    if commits:
        out.update(commit_first_ms=float(np.mean(commits[:11])) * 1e3,
                   commit_last_ms=float(np.mean(commits[-11:])) * 1e3,
                   commit_cpu_ms=cpu_times["commit"] / len(commits) * 1e3, state_files=float(len(latencies)),
                   latency_ms=float(np.median(latencies)) * 1e3, latency_max_ms=max(latencies) * 1e3,
                   background_cpu_ms=cpu_times["background"] / len(commits) * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args()
    if args.no_fsync:
        os.fsync = lambda descriptor: None
    plain, saved, loads = [], [], [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            plain.append(run(args.rounds, args.agents, None))
            path = Path(folder) / f"run{repeat}.ckpt"
            saved.append(run(args.rounds, args.agents, path))
            sizes = {p.name.replace(f"run{repeat}", "run"): p.stat().st_size
                     for p in Path(folder).glob(f"run{repeat}.*")}
            loads.append(os.getloadavg()[0])
    median = {label: {key: float(np.median([r[key] for r in runs])) for key in runs[0]}
              for label, runs in (("no checkpoint", plain), ("checkpoint every round", saved))}
    print(f"DPDG, {args.agents} agents, {args.rounds} rounds, serial{', no fsync' if args.no_fsync else ''}, "
          f"median of {args.repeats} alternating runs (load average {min(loads):.1f}-{max(loads):.1f})\n")
    print("| run | total | CPU time | first 100 rounds | last 100 rounds | checkpoint, rounds 1-11 | "
          "checkpoint, last 11 rounds |")
    print("|---|---|---|---|---|---|---|")
    for label, r in median.items():
        own = (f"{r['commit_first_ms']:.2f} ms | {r['commit_last_ms']:.2f} ms" if "commit_first_ms" in r else "- | -")
        print(f"| {label} | {r['total_s']:.2f} s | {r['cpu_s']:.2f} s | {r['first_ms']:.2f} ms | "
              f"{r['last_ms']:.2f} ms | {own} |")
    ratios = [s["total_s"] / p["total_s"] for p, s in zip(plain, saved, strict=True)]
    print(f"\nwith / without: {median['checkpoint every round']['total_s'] / median['no checkpoint']['total_s']:.2f}x "
          f"(medians; per pair {', '.join(f'{r:.2f}' for r in ratios)}), in CPU time "
          f"{median['checkpoint every round']['cpu_s'] / median['no checkpoint']['cpu_s']:.2f}x; checkpoint files at "
          "the end: "
          + ", ".join(f"{name} {size / 1e3:.0f} kB" for name, size in sorted(sizes.items())))
    saved_median = median["checkpoint every round"]
    files = ", ".join(f"{int(r['state_files'])} ({r['latency_ms']:.0f}, {r['latency_max_ms']:.0f} ms)" for r in saved)
    print(f"CPU time of the checkpoint per round: {saved_median['commit_cpu_ms']:.2f} ms on the run's thread "
          f"(Run.commit), {saved_median['background_cpu_ms']:.2f} ms on the commit thread; the round without a "
          f"checkpoint: {median['no checkpoint']['cpu_s'] / args.rounds * 1e3:.2f} ms of CPU time; state files "
          f"committed per run (of {args.rounds} rounds; from submit to rename, median and max): {files}")
    for label, r in median.items():
        print(f"{label}: the run's thread {r['main_cpu_ms']:.2f} ms of CPU time per round, the process "
              f"{r['system_ms']:.2f} ms of system time and {r['switches']:.1f} voluntary context switches per round")


if __name__ == "__main__":
    main()
