"""The watchdog of a local Ray instance (privcvx.runtime.ray_watchdog), without Ray: a stand-in driver starts a
stand-in "Ray" process (a program under a stand-in package folder, with a child of its own, as the raylet's agents
are) and an unrelated child of its own, then starts the watchdog as `RayBackend` does (`start_watchdog`).

The run with real Ray (a driver killed with SIGKILL during a ``backend="ray"`` solve) takes about half a minute to
start Ray; it is ``bench/bench_ray_killed_driver.py`` (docs/deployment.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the watchdog reads /proc (Linux)")

REPO = Path(__file__).resolve().parents[1]

#: A program of the stand-in package: it starts a child (an "agent") and sleeps.
NODE = """
import subprocess, sys, time
agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(agent.pid, flush=True)
time.sleep(600)
"""

#: The stand-in driver: the "Ray" node, an unrelated child, then the watchdog; prints their pids and sleeps.
DRIVER = """
import json, os, subprocess, sys, time, types
from privcvx.runtime.backends import _WATCHDOGS, start_watchdog
package = sys.argv[1]
node = subprocess.Popen([sys.executable, os.path.join(package, "node.py")], stdout=subprocess.PIPE, text=True)
agent = int(node.stdout.readline())
user = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
start_watchdog(types.SimpleNamespace(__file__=os.path.join(package, "__init__.py")))
print(json.dumps({"node": node.pid, "agent": agent, "user": user.pid, "watchdog": _WATCHDOGS[-1].pid}), flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _until(condition, seconds: float) -> float:  # noqa: ANN001
    start = time.monotonic()
    while not condition() and time.monotonic() - start < seconds:
        time.sleep(0.1)
    return time.monotonic() - start


@pytest.mark.parametrize("ending", ["driver killed", "instance shut down"])
def test_the_watchdog_kills_the_instance_of_a_killed_driver_and_nothing_else(tmp_path, ending):
    package = tmp_path / "fakeray"
    package.mkdir()
    (package / "node.py").write_text(NODE)
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, os.path.join(package, "")], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    pids = json.loads(driver.stdout.readline())
    try:
        time.sleep(1.0)  # the watchdog has listed the instance's processes
        assert all(_running(pid) for pid in pids.values())
        if ending == "driver killed":
            os.kill(driver.pid, signal.SIGKILL)
            driver.wait()
            waited = _until(lambda: not _running(pids["node"]) and not _running(pids["agent"]), 10.0)
            assert not _running(pids["node"]) and not _running(pids["agent"]), "the instance outlived its driver"
            assert waited < 5.0
            _until(lambda: not _running(pids["watchdog"]), 10.0)  # it exits once it has killed them (a moment later)
        else:  # ray.shutdown(): the instance ends while the driver lives; the watchdog then ends, killing nothing
            os.kill(pids["agent"], signal.SIGKILL)
            os.kill(pids["node"], signal.SIGKILL)
            _until(lambda: not _running(pids["watchdog"]), 10.0)
            assert _running(driver.pid)
        assert not _running(pids["watchdog"])
        assert _running(pids["user"]), "the watchdog killed a process that is not Ray's"
    finally:
        for pid in (pids["user"], pids["agent"], pids["node"], driver.pid):
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        driver.wait()
