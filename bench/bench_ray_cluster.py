"""The Ray cluster commands of docs/deployment.md, run for real on this machine (two Ray nodes on one host).

    .venv/bin/python bench/bench_ray_cluster.py [--keep]

1. ``ray start --head`` (site-0's node) and ``ray start --address=...`` (site-1's node), each declaring the
   custom resource of its site, in a temporary directory of their own and on free ports, so that other Ray
   instances of the machine are left alone;
2. a problem of agent factories (each agent loads its own data file) solved through
   ``pc.runtime.Ray(address=..., agent_options=...)``, every agent placed on its site's node, and compared with
   the same problem solved on the serial backend (bitwise-identical transcripts and histories);
3. the cluster stopped: this script ends exactly the processes of its two nodes (``ray stop`` would end every
   Ray process of the machine, other users' included).

It prints each step's time and where each agent ran. ``--keep`` leaves the temporary directory (logs).
"""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import cvxpy as cp
import numpy as np

import privcvx as pc

ROOT = Path(__file__).resolve().parent.parent
SITES = 3
SENSITIVITY = pc.Sensitivity(l1=0.2, l2=0.1)


def load_site(path: str, name: str) -> pc.Agent:
    """An agent's factory (docs/deployment.md): runs on the agent's node and loads that site's data file."""
    with np.load(path) as data:
        a, b = data["a"], data["b"]
    x = cp.Variable(a.shape[1])
    return pc.Agent(cp.sum_squares(a @ x - b) / len(b), [cp.norm_inf(x) <= 1], shared={"w": x}, name=name,
                    sensitivity=SENSITIVITY, smoothness=12.0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ray_start(arguments: list[str], folder: Path) -> None:
    """``ray start`` with this tree's privcvx importable by the node's workers."""
    environment = {**os.environ, "RAY_worker_niceness": "0",  # the actors at normal priority (Ray's default: 15)
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    print(f"$ RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={os.environ['RAY_AUTH_TOKEN_PATH']} RAY_worker_niceness=0 \\",
          flush=True)
    head = ["--include-dashboard=false", "--disable-usage-stats"] if "--head" in arguments else []
    command = [str(Path(sys.executable).with_name("ray")), "start", *arguments, *head, "--temp-dir", str(folder),
               f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}"]
    print("$ ray", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, env=environment, stdout=subprocess.DEVNULL)


def cluster_processes(folder: Path) -> list[int]:
    """The processes of the nodes started here: those whose command line names their temporary directory."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:  # the process ended meanwhile
                continue
    return pids


def stop_cluster(folder: Path) -> int:
    """End the started nodes' processes (SIGTERM, then SIGKILL after 10 s); return how many there were."""
    pids = cluster_processes(folder)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while cluster_processes(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in cluster_processes(folder):
        print(f"  SIGKILL {pid}: {Path(f'/proc/{pid}/cmdline').read_bytes()[:80]!r}", flush=True)
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while cluster_processes(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    return len(pids)


def worker_nodes(folder: Path) -> dict[int, str]:
    """{pid: the resources its node declares} for every worker process of the started nodes (a worker is a
    child of its node's raylet)."""
    raylets = {}
    for pid in cluster_processes(folder):
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if arguments and arguments[0].endswith(b"raylet"):
            listed = next((a.decode().split("=", 1)[1] for a in arguments
                           if a.startswith(b"--static_resource_list=")), "").split(",")
            raylets[pid] = " ".join(f"{key}:{value}" for key, value in zip(listed[::2], listed[1::2], strict=True)
                                    if key.startswith("site-"))
    workers = {}
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) if entry.name.isdigit() else 0
        except OSError:
            continue
        if parent in raylets:
            workers[int(entry.name)] = raylets[parent]
    return workers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (the nodes' logs)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    folder = Path(tempfile.mkdtemp(prefix="pcray-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    # Token authentication: every node and the driver read the cluster's token (``ray get-auth-token --generate``
    # makes one in ~/.ray; this script's own, in its folder, leaves other Ray instances' tokens alone).
    token = folder / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    import ray  # after the settings above, which Ray reads once

    paths = []
    for p in range(SITES):
        rng = np.random.default_rng(p)
        a = rng.normal(size=(12, 4))
        paths.append(str(folder / f"site-{p}.npz"))
        np.savez(paths[-1], a=a, b=a @ rng.uniform(-0.5, 0.5, size=4))
    specs = [pc.problem.AgentSpec(f"site-{p}", functools.partial(load_site, path, f"site-{p}"), {"w": (4,)},
                                  sensitivity=SENSITIVITY, smoothness=12.0) for p, path in enumerate(paths)]
    problem = pc.DistributedProblem.from_factories(specs)
    options = {"rounds": 20, "rho": 1.0, "eta": 0.05, "seed": 3, "diagnostics": False,
               "privacy": pc.ObjectivePerturbation(pc.Gaussian(1.0, 1e-5))}
    head = f"127.0.0.1:{free_port()}"
    try:
        start = time.perf_counter()
        ray_start(["--head", f"--port={head.rsplit(':', 1)[1]}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                   '--resources={"site-0": 1, "site-2": 1}'], folder)
        ray_start([f"--address={head}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                   '--resources={"site-1": 1}'], folder)
        print(f"two nodes up in {time.perf_counter() - start:.1f} s", flush=True)
        placement = {f"site-{p}": {"resources": {f"site-{p}": 1}, "num_cpus": 0.5} for p in range(SITES)}
        start = time.perf_counter()
        seen: dict[int, str] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pc.errors.ReproducibleNoiseWarning)
            on_cluster = problem.solve(backend=pc.runtime.Ray(address=head, agent_options=placement),
                                       callback=lambda row: seen.update(worker_nodes(folder)), **options)
            nodes = len([node for node in ray.nodes() if node["Alive"]])
            ray.shutdown()
            print(f"solved on the cluster ({nodes} nodes) in {time.perf_counter() - start:.1f} s "
                  "(connection, actors, 20 rounds)", flush=True)
            serial = problem.solve(backend="serial", **options)
        for name, host in zip(problem.names, on_cluster.info["hosts"], strict=True):
            print(f"  {name} ran in process {host['pid']}, on the node declaring {seen.get(host['pid'])}")
        same = on_cluster.transcript.same_as(serial.transcript) and on_cluster.history.drop(columns="time_s").equals(
            serial.history.drop(columns="time_s"))
        print(f"bitwise-identical to the serial run: {same}; final w = {np.round(on_cluster.w, 4)}")
    finally:
        start = time.perf_counter()
        ended = stop_cluster(folder)
        print(f"stopped the cluster: ended its {ended} processes in {time.perf_counter() - start:.1f} s; "
              f"{len(cluster_processes(folder))} left", flush=True)
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
