"""Ray's processes after a driver killed with SIGKILL (issue 29, point 7): how long each outlives the driver.

    PYTHONPATH=. .venv/bin/python bench/bench_ray_killed_driver.py [--trials 3] [--limit 60]

Each trial runs tests/scripts/killed_ray_driver.py: ``solve(backend="ray")`` starts a local Ray instance, and after
round 1 the driver sleeps. The bench lists every descendant of the driver (from ``/proc``, independently of the
watchdog's own listing: GCS, raylet, dashboard, log monitor, the raylet's agents, the actors and the watchdog),
kills the driver with SIGKILL, and records when each descendant is gone (ended, or a zombie), for at most 90 s.
A trial passes when every one is gone within ``--limit`` seconds. Linux only.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "tests" / "scripts" / "killed_ray_driver.py"


def _table() -> dict[int, int]:
    """pid -> parent pid of every running process (zombies left out)."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != b"Z":
                table[int(name)] = int(fields[1])
    return table


def _descendants(root: int) -> list[int]:
    table, found, pending = _table(), [], [root]
    while pending:
        parent = pending.pop()
        children = [pid for pid, ppid in table.items() if ppid == parent]
        found += children
        pending += children
    return found


def _name(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    first = words[0].decode(errors="replace")
    script = next((w.decode() for w in words[1:] if w.endswith(b".py")), "")
    return os.path.basename(script or first)


def trial(folder: Path, horizon: float = 90.0) -> dict[str, float]:
    marker = folder / "driver.pid"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen([sys.executable, str(DRIVER), str(marker)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    start = time.monotonic()
    while not marker.exists():
        if driver.poll() is not None or time.monotonic() - start > 600:
            raise SystemExit("the driver did not reach round 1")
        time.sleep(0.2)
    processes = {pid: f"{_name(pid)} ({pid})" for pid in _descendants(driver.pid)}
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    killed, gone = time.monotonic(), {}
    while len(gone) < len(processes) and time.monotonic() - killed < horizon:
        running = _table()
        for pid in processes:
            if pid not in gone and pid not in running:
                gone[pid] = time.monotonic() - killed
        time.sleep(0.2)
    return {name: gone.get(pid, float("inf")) for pid, name in processes.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--limit", type=float, default=60.0)
    args = parser.parse_args()
    worst = []
    with tempfile.TemporaryDirectory() as name:
        for k in range(args.trials):
            folder = Path(name) / str(k)
            folder.mkdir()
            times = trial(folder)
            worst.append(max(times.values()))
            print(f"trial {k + 1}: {len(times)} processes, the last gone {worst[-1]:.1f} s after the kill (load "
                  f"average {os.getloadavg()[0]:.1f}): " + ", ".join(f"{n} {t:.1f} s" for n, t in sorted(
                      times.items(), key=lambda item: item[1])), flush=True)
    passed = sum(w <= args.limit for w in worst)
    print(f"\n{passed} of {args.trials} trials: every Ray process gone within {args.limit:g} s "
          f"(worst {max(worst):.1f} s)")
    if passed < args.trials:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
