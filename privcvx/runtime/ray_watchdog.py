"""The watchdog of a local Ray instance that privcvx started: when the driver dies, it kills the instance's processes.

    python ray_watchdog.py DRIVER_PID RAY_PACKAGE_DIR

Started by [`RayBackend`][privcvx.runtime.backends.RayBackend] (`start_watchdog`) only for a local instance it started
itself (never for a cluster given by address, nor for an instance the user had started). Killed with SIGKILL, a
driver cannot shut Ray down: its direct children (GCS, raylet, dashboard, log monitor) fate-share with it and end
within seconds, but the raylet's agents (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) then block on a call to
the dead GCS and outlive the driver by about 64 s (measured with Ray 2.60; docs/deployment.md).

The watchdog keeps the set of the instance's processes: the driver's children whose command line runs a program of
the Ray package (``RAY_PACKAGE_DIR``), and all their descendants, refreshed every `REFRESH_S` seconds, each with its
start time. When its own parent changes (the driver died, so the watchdog was re-parented) it sends SIGKILL to every
process of the last set still running with the same start time (a reused pid is left alone), then exits. It also
exits, killing nothing, when the set becomes empty (``ray.shutdown()``). Linux only (it reads ``/proc``); it uses
nothing but the standard library, so that it runs with any interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

#: Seconds between two checks of the driver.
POLL_S = 0.5

#: Seconds between two refreshes of the set of the instance's processes.
REFRESH_S = 2.0


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in clock ticks) of every process in ``/proc``."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
                table[int(name)] = (int(fields[1]), int(fields[19]))  # fields 4 (ppid) and 22 (starttime)
            except (OSError, IndexError, ValueError):  # a process that ended meanwhile
                continue
    return table


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def instance_processes(driver: int, package: str, table: dict[int, tuple[int, int]]) -> dict[int, int]:
    """pid -> start time of the Ray processes of ``driver``: its children running a program under ``package`` (but
    this watchdog) and all their descendants."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found = [pid for pid in children.get(driver, []) if pid != os.getpid() and package in _command(pid)]
    pending = list(found)
    while pending:
        more = children.get(pending.pop(), [])
        found += more
        pending += more
    return {pid: table[pid][1] for pid in found if pid in table}


def kill(processes: dict[int, int]) -> list[int]:
    """SIGKILL every process of ``processes`` that still runs with its recorded start time; return their pids."""
    table = process_table()
    killed = [pid for pid, start in processes.items() if table.get(pid, (0, -1))[1] == start]
    for pid in killed:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return killed


def watch(driver: int, package: str) -> None:
    """Watch ``driver`` (this process's parent) until it dies, then kill its Ray processes; or until they end."""
    processes: dict[int, int] = {}
    refreshed = -REFRESH_S
    while os.getppid() == driver:
        if time.monotonic() - refreshed >= REFRESH_S:
            processes = instance_processes(driver, package, process_table())
            if not processes:
                return  # no instance (any more): ray.shutdown(), or none was found
            refreshed = time.monotonic()
        time.sleep(POLL_S)
    kill(processes)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C to the driver's group is the driver's to handle
    watch(int(sys.argv[1]), sys.argv[2])
