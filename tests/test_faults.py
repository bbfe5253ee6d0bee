"""Faults of worker processes: a stuck (stopped) worker fails the run within its timeout, keeping the history; a
real Ctrl-C to the process group returns the history with status "interrupted" and leaves no process behind."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import privcvx as pc

SCRIPT = Path(__file__).resolve().parent / "scripts" / "interrupted_run.py"
REPO = Path(__file__).resolve().parents[1]


def _problem() -> pc.DistributedProblem:
    from problems.rendezvous import rendezvous

    return rendezvous(np.random.default_rng(0).uniform(-1, 1, (4, 2)))


def _stat(pid: int | str) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, ...]; [] for a process gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return []


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which only waits to be reaped, does not)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] != "Z"


def _group(pgid: int, wait: float = 10.0) -> list[int]:
    """The live processes of process group ``pgid`` still there after up to ``wait`` seconds (Python's resource
    tracker exits just after its parent)."""
    deadline = time.monotonic() + wait
    while True:
        members = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                   and (fields := _stat(p.name)) and fields[2] == str(pgid) and fields[0] != "Z"]
        if not members or time.monotonic() > deadline:
            return members
        time.sleep(0.2)


def test_a_stopped_worker_fails_the_run_within_its_timeout_and_keeps_the_history():
    stopped: list[int] = []

    def stop_a_worker(row: dict) -> None:
        if row["round"] == 3:
            stopped.append(multiprocessing.active_children()[0].pid)
            os.kill(stopped[0], signal.SIGSTOP)

    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(pc.errors.RunFailed, match=r"did not answer within timeout=2 s") as info:
            _problem().solve(pc.algorithms.DPDistributedGradient(epsilon=1.0), pc.Topology.ring(), rounds=50,
                             seed=1, backend="process", timeout=2, callback=stop_a_worker)
    elapsed = time.monotonic() - start
    assert f"pid {stopped[0]}" in str(info.value)  # the host is named
    assert isinstance(info.value.__cause__, pc.errors.WorkerTimeout) and info.value.agent is not None
    partial = info.value.result
    assert partial.status == "failed" and list(partial.history["round"]) == [1, 2, 3]
    assert partial.privacy is not None and (partial.privacy["steps"] > 0).all()  # the driver's ledgers are kept
    assert elapsed < 60  # set-up and 3 rounds, then at most the 2 s timeout (no wait on the stopped worker)
    assert multiprocessing.active_children() == [] and not _alive(stopped[0])  # the stopped worker was killed


def _ray_services() -> set[int]:
    """The pids of Ray's helper processes (raylet, GCS server) on this machine."""
    found = set()
    for p in Path("/proc").iterdir():
        try:
            command = (p / "cmdline").read_bytes() if p.name.isdigit() else b""
        except OSError:
            continue
        if b"raylet" in command or b"gcs_server" in command:
            found.add(int(p.name))
    return found


def _terminal_sigint() -> None:
    """The child starts with SIGINT at its default and unblocked, as a terminal's foreground job does. A child
    inherits its parent's ignored or blocked SIGINT, and inside the full suite (xdist, 2 workers, clean clones) the
    children of one worker never saw the Ctrl-C and ran on to "converged"; alone, the test always passed. Which
    earlier test left the worker so was not found; a blocked SIGINT reproduces the failure."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.parametrize("backend, twice", [("process", True), ("serial", True),
                                            pytest.param("ray", True, id="ray-twice")])
def test_ctrl_c_to_the_process_group_returns_the_history_and_leaves_no_process(backend, twice):
    if backend == "ray":
        pytest.importorskip("ray", reason="the ray extra (installed by the test extra) runs this case")
    services = _ray_services()
    child = subprocess.Popen([sys.executable, str(SCRIPT), backend, "4", *(["--twice"] if twice else [])],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,  # its own process group
                             preexec_fn=_terminal_sigint)
    out, err = child.communicate(timeout=240)
    assert child.returncode == 0, err
    assert "Traceback" not in err and "ConnectionResetError" not in err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["status"] == "interrupted" and report["rounds"] == 4
    assert report["steps"] == [4, 4, 4, 4]  # every finished round's releases charged, nothing more
    assert report["transcript"] > 0
    for pid in report["pids"]:
        assert not _alive(pid)
    assert _group(child.pid) == []  # nothing is left in the run's process group
    deadline = time.monotonic() + 10
    while _ray_services() - services and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ray_services() - services == set()  # nor any Ray service the run started
