"""Per-host checkpoints under random kills (issue 29): a factory-built private DPDG run, killed with SIGKILL at a
random step of its checkpoint writes, resumed in a new process, compared bitwise with the uninterrupted run.
``--case`` runs another case of tests/scripts/resumable_run.py instead (no shards: the state file is committed
at most every ``checkpoint.COMMIT_INTERVAL`` and at the end, every round's records appended to the logs).

    PYTHONPATH=. .venv/bin/python bench/bench_kill_resume.py [--kills 30] [--backends serial process] [--seed 0]
        [--case objpert-gaussian --operations 24]

The run is tests/scripts/resumable_run.py's ``dpdg-factory`` case (4 agents on a ring, each built by its host from
a row of an addresses file, shards beside the checkpoint, 12 rounds, DPDG(epsilon=1, q=0.9), seed 17). Each trial
draws N uniformly from the driver's file operations of the checkpoint code (``--kill-at N``: a shard's write to a
temporary file and its rename, a shard deletion, a log append, the state file's write and its rename, which runs in
the background thread of the commit; in the process backend the shards are written by
the workers, so N falls on the driver's appends and state file) and kills before (N even) or after (N odd) it. A
draw past the run's last operation finishes the run unkilled, and a kill before the first commit leaves nothing to
resume (the resume must then be refused with a CheckpointError): both are drawn again. The resumed result must
equal the uninterrupted one: history, w, z, transcript and privacy table.
"""

from __future__ import annotations

import argparse
import itertools
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "scripts" / "resumable_run.py"
#: An upper bound of the driver's checkpoint file operations in the 12-round run, per backend.
OPERATIONS = {"serial": 200, "process": 60}


def _same(reference: object, result: object) -> bool:
    columns = [c for c in reference.history.columns if c != "time_s"]
    return bool(reference.history[columns].equals(result.history[columns]) and np.array_equal(reference.w, result.w)
                and all(np.array_equal(a, b) for a, b in zip(reference.z, result.z, strict=True))
                and reference.transcript.same_as(result.transcript) and reference.privacy.equals(result.privacy))


def trials(backend: str, kills: int, rng: np.random.Generator, folder: Path, case: str, full: object) -> list[str]:
    import privcvx as pc

    outcomes = []
    for attempt in itertools.count():
        if len(outcomes) == kills:
            break
        trial = folder / f"{backend}-{attempt}"
        trial.mkdir()
        n = int(rng.integers(1, OPERATIONS[backend] + 1))
        killed = subprocess.run([sys.executable, str(SCRIPT), case, backend, str(trial / "killed.npz"),
                                 "--checkpoint", str(trial / "run.ckpt"), "--kill-at", str(n)], capture_output=True)
        if killed.returncode != -signal.SIGKILL:
            continue  # past the last operation: the run finished
        if not (trial / "run.ckpt").exists():  # killed before the first commit: nothing to resume
            refused = subprocess.run([sys.executable, str(SCRIPT), case, backend, str(trial / "resumed.npz"),
                                      "--resume", str(trial / "run.ckpt")], capture_output=True, text=True)
            assert "CheckpointError" in refused.stderr and "no checkpoint file" in refused.stderr, refused.stderr
            print(f"{backend} kill at operation N={n}: before the first commit, resume refused cleanly", flush=True)
            continue
        resumed = subprocess.run([sys.executable, str(SCRIPT), case, backend, str(trial / "resumed.npz"),
                                  "--resume", str(trial / "run.ckpt"), "--checkpoint", str(trial / "run.ckpt")],
                                 capture_output=True, text=True)
        ok = resumed.returncode == 0 and _same(full, pc.load_result(trial / "resumed.npz"))
        outcomes.append(f"N={n}: " + ("bitwise equal" if ok else f"FAILED {resumed.stderr.strip()[-300:]}"))
        print(f"{backend} kill {len(outcomes):2d} at operation {outcomes[-1]}", flush=True)
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--backends", nargs="+", default=["serial", "process"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--case", default="dpdg-factory", help="a case of tests/scripts/resumable_run.py")
    parser.add_argument("--operations", type=int, help="the largest N drawn (default: OPERATIONS of the backend)")
    args = parser.parse_args()
    import privcvx as pc

    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        np.save(folder / "addresses.npy", np.random.default_rng(5).uniform(-1, 1, (4, 2)))
        case = f"dpdg-factory:{folder / 'addresses.npy'}" if args.case == "dpdg-factory" else args.case
        subprocess.run([sys.executable, str(SCRIPT), case, "serial", str(folder / "full.npz")], check=True)
        full = pc.load_result(folder / "full.npz")
        start = time.perf_counter()
        if args.operations is not None:
            OPERATIONS.update(dict.fromkeys(args.backends, args.operations))
        summary = {backend: trials(backend, args.kills, rng, folder, case, full) for backend in args.backends}
    print(f"\n{time.perf_counter() - start:.0f} s")
    for backend, outcomes in summary.items():
        good = sum(outcome.endswith("bitwise equal") for outcome in outcomes)
        print(f"| {backend} | {len(outcomes)} kills | {good} resumed bitwise equal |")


if __name__ == "__main__":
    main()
