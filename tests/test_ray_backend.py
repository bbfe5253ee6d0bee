"""backend="ray": the same seed gives bitwise-identical runs on serial, process and Ray; lost actors fail cleanly.

One local Ray instance (2 CPUs) serves the whole module and is shut down at its end.
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
import warnings
from multiprocessing import reduction
from pathlib import Path

import cvxpy as cp
import numpy as np
import pytest

import privcvx as pc
from privcvx.errors import RunFailed

ray = pytest.importorskip("ray", reason="the ray extra (installed by the test extra) runs these tests")

HERE = Path(__file__).resolve().parent
ROWS, N = 12, 4
SENSITIVITY = pc.Sensitivity(l1=0.2, l2=0.1)
PRIVACY = pc.ObjectivePerturbation(pc.Gaussian(1.0, 1e-4))
SMOOTHNESS = 12.0  # a public declaration (the runs below give eta and rho as numbers)
#: The secret: one entry of agent 1's private data, which must never reach the driver.
SENTINEL = 0.6180339887498949 * 0.123456789


def data_of(p: int) -> tuple[np.ndarray, np.ndarray]:
    """Agent p's private data (a least-squares fit), drawn from its own seed."""
    rng = np.random.default_rng(100 + p)
    a = rng.normal(size=(ROWS, N))
    return a, a @ rng.uniform(-0.4, 0.4, size=N) + 0.1 * rng.normal(size=ROWS)


def build_agent(p: int, a: np.ndarray, b: np.ndarray, gradient: object = None) -> pc.Agent:
    """Agent p: a box-constrained least-squares fit on the shared key "w", with a private offset u."""
    x, u = cp.Variable(N), cp.Variable(2)
    objective = cp.sum_squares(a @ x - b) / ROWS + cp.sum_squares(u - 0.1 * p)
    return pc.Agent(objective, [x <= 0.5, x >= -0.5, cp.sum(u) <= 1.0], shared={"w": x}, name=f"site-{p}",
                    sensitivity=SENSITIVITY, smoothness=SMOOTHNESS, gradient=gradient)


def ordinary_problem(agents: int = 3) -> pc.DistributedProblem:
    """The problem with every agent built in this process."""
    return pc.DistributedProblem([build_agent(p, *data_of(p)) for p in range(agents)])


def same_run(first: pc.Result, second: pc.Result) -> bool:
    """Bitwise-identical transcripts, histories (but wall time), final iterates and privacy tables."""
    columns = [c for c in first.history.columns if c != "time_s"]
    return (first.transcript.same_as(second.transcript) and first.history[columns].equals(second.history[columns])
            and np.array_equal(first.w, second.w) and first.privacy.equals(second.privacy))


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance for the module; its workers import this folder's modules and the tested privcvx."""
    started = not ray.is_initialized()
    if started:
        tested = str(Path(pc.__file__).resolve().parent.parent)
        path = os.pathsep.join(filter(None, [str(HERE), tested, os.environ.get("PYTHONPATH")]))
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    if started:
        ray.shutdown()


def solve(problem: pc.DistributedProblem, backend: object, **options: object) -> pc.Result:
    """The seeded research run every test compares (ObjPert, Gaussian noise)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.errors.ReproducibleNoiseWarning)
        return problem.solve(**{"rounds": 4, "local_updates": 2, "rho": 1.0, "eta": 0.05, "privacy": PRIVACY,
                                "seed": 7, "backend": backend, **options})


def test_the_same_seed_gives_bitwise_identical_runs_on_every_backend(local_ray):
    problem = ordinary_problem()
    serial = solve(problem, "serial")
    assert serial.history["noise_magnitude"].gt(0).all()  # the noise is really drawn
    assert same_run(serial, solve(problem, "process"))
    assert same_run(serial, solve(problem, "ray"))  # two actors (one per CPU) host the three agents
    one_each = pc.runtime.Ray(agent_options={"site-1": {"num_cpus": 0.5}})  # one actor per agent
    assert same_run(serial, solve(problem, one_each))
    with pytest.raises(pc.errors.ParameterError, match="site-9"):
        solve(problem, pc.runtime.Ray(agent_options={"site-9": {}}))
    with pytest.raises(pc.errors.ParameterError, match="actors"):
        solve(problem, pc.runtime.Ray(actors=0))
    other_seed = problem.solve(rounds=4, local_updates=2, rho=1.0, eta=0.05, privacy=PRIVACY, seed="secure")
    assert not other_seed.transcript.same_as(serial.transcript)  # the comparison can fail


class DieAfter:
    """A gradient oracle that kills its process (as a crashed node would) after ``calls`` calls."""

    def __init__(self, a: np.ndarray, b: np.ndarray, calls: int) -> None:
        self.a, self.b, self.calls = a, b, calls

    def __call__(self, x: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.calls -= 1
        if self.calls < 0:
            os._exit(3)
        return 2.0 * self.a.T @ (self.a @ x - self.b) / ROWS, 2.0 * (u - 0.2)


class FailAfter(DieAfter):
    """A gradient oracle that raises after ``calls`` calls."""

    def __call__(self, x: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.calls <= 0:
            raise FloatingPointError("injected failure")
        return super().__call__(x, u)


@pytest.mark.parametrize("oracle, message", [(FailAfter, "injected failure"), (DieAfter, "was lost")])
def test_a_failing_or_lost_actor_raises_run_failed_with_the_history(local_ray, oracle, message):
    a, b = data_of(0)
    problem = pc.DistributedProblem([build_agent(0, a, b, gradient=oracle(a, b, calls=6)),
                                     build_agent(1, *data_of(1)), build_agent(2, *data_of(2))])
    with pytest.raises(RunFailed, match=message) as info:
        problem.solve(rounds=8, local_updates=2, rho=1.0, eta=0.05, seed=7, backend="ray")
    assert info.value.agent == "site-0"  # a lost actor is named by its first agent (site-0 and site-2 here)
    history = info.value.result.history
    assert history["round"].tolist() == [1, 2, 3]  # E = 2 gradient calls a round: the 7th, in round 4, fails
    assert info.value.result.info["stop"] == "failed"
    assert info.value.result.info.get("hosts_lost", False) == (oracle is DieAfter)


# ---- agents built where they run ---------------------------------------------------------------------------

def load_agent(p: int, path: str) -> pc.Agent:
    """An agent's factory: it loads the agent's data file on the host that calls it."""
    with np.load(path) as data:
        return build_agent(p, data["a"], data["b"])


@pytest.fixture(scope="module")
def data_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """One data file per agent; agent 1's holds the sentinel."""
    folder = tmp_path_factory.mktemp("sites")
    paths = []
    for p in range(3):
        a, b = data_of(p)
        if p == 1:
            b[0] = SENTINEL
        paths.append(str(folder / f"site-{p}.npz"))
        np.savez(paths[-1], a=a, b=b)
    return paths


def specs(paths: list[str], shapes: dict | None = None, shards: Path | None = None) -> list[pc.AgentSpec]:
    return [pc.AgentSpec(f"site-{p}", functools.partial(load_agent, p, path), shapes or {"w": (N,)},
                                 sensitivity=SENSITIVITY, smoothness=SMOOTHNESS,
                                 shard=None if shards is None else shards / f"site-{p}.shard")
            for p, path in enumerate(paths)]


def test_factories_give_the_same_runs_as_ordinary_agents(local_ray, data_files):
    ordinary = pc.DistributedProblem([load_agent(p, path) for p, path in enumerate(data_files)])
    reference = solve(ordinary, "serial")
    local = pc.DistributedProblem.from_factories(specs(data_files))
    for backend in ("serial", "process", "ray"):
        assert same_run(reference, solve(local, backend)), backend
    assert local.layouts[1].shared_global.tolist() == ordinary.layouts[1].shared_global.tolist()
    with pytest.raises(pc.errors.CentralizedSolveError, match="factories"):
        local.solve_centralized()
    with pytest.raises(pc.errors.ParameterError, match="shard path"):
        solve(local, "serial", checkpoint=str(Path(data_files[0]).with_suffix(".ckpt")))
    with pytest.raises(pc.errors.DeclarationError, match="the built agent shares") as info:
        solve(pc.DistributedProblem.from_factories(specs(data_files, {"w": (N + 1,)})), "serial")
    assert info.value.agent == "site-0"
    with pytest.raises(pc.errors.DeclarationError, match="no objective"):  # L_p would be estimated in the driver
        pc.DistributedProblem.from_factories([pc.AgentSpec(
            f"site-{p}", functools.partial(load_agent, p, path), {"w": (N,)}, sensitivity=SENSITIVITY)
            for p, path in enumerate(data_files)]).solve(rounds=2, privacy=PRIVACY, seed=1)


def test_a_spec_carries_the_agents_declared_record_and_the_host_checks_it(data_files):
    """pc.AgentSpec holds the same pc.Declared record as pc.Agent (its sensitivity= and smoothness= are entries of it);
    the host refuses a built agent whose record differs in any entry, naming the agent and the entry."""
    record = pc.Declared(sensitivity=SENSITIVITY, smoothness=SMOOTHNESS)
    spec, *others = specs(data_files)
    pc.DistributedProblem.from_factories([spec, *others])  # lays out w
    assert spec.declared == record == spec.build()[0].declared and spec.smoothness == SMOOTHNESS
    assert pc.AgentSpec("site-0", spec.factory, {"w": (N,)}, declared=record).declared == record
    looser = pc.AgentSpec("site-0", spec.factory, {"w": (N,)}, declared=record.replace(coordinate_sensitivity=0.1))
    pc.DistributedProblem.from_factories([looser, *others])
    with pytest.raises(pc.errors.DeclarationError, match="coordinate_sensitivity") as info:
        looser.build()
    assert (info.value.agent, info.value.argument) == ("site-0", "coordinate_sensitivity")
    with pytest.raises(pc.errors.DeclarationError, match="declared twice") as info:
        pc.AgentSpec("site-0", spec.factory, {"w": (N,)}, smoothness=1.0, declared=record)
    assert (info.value.agent, info.value.argument) == ("site-0", "smoothness")


def sentinel_in_driver_memory() -> bool:
    """Whether an array held by any Python object of this process contains the sentinel."""
    gc.collect()
    return any(isinstance(value, np.ndarray) and value.dtype.kind == "f" and bool(np.any(value == SENTINEL))
               for holder in gc.get_objects() for value in gc.get_referents(holder))


def sentinel_in(blob: bytes) -> bool:
    """Whether bytes hold the sentinel, as a float64 or as text."""
    return np.float64(SENTINEL).tobytes() in blob or repr(SENTINEL).encode() in blob


class PickleSpy:
    """Records every pickle this process sends to or receives from a worker (spawn arguments and pipe traffic)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.blobs: list[bytes] = []
        dumps, loads = reduction.ForkingPickler.dumps, reduction.ForkingPickler.loads

        def spy_dumps(obj: object, protocol: int | None = None) -> memoryview:
            blob = dumps(obj, protocol)
            self.blobs.append(bytes(blob))
            return blob

        def spy_loads(blob: bytes, **kwargs: object) -> object:
            self.blobs.append(bytes(blob))
            return loads(blob, **kwargs)

        def spy_dump(obj: object, file: object, protocol: int | None = None) -> None:
            blob = bytes(dumps(obj, protocol))
            self.blobs.append(blob)
            file.write(blob)

        monkeypatch.setattr(reduction.ForkingPickler, "dumps", classmethod(lambda cls, obj, protocol=None:
                                                                            spy_dumps(obj, protocol)))
        monkeypatch.setattr(reduction.ForkingPickler, "loads", staticmethod(spy_loads))
        monkeypatch.setattr(reduction, "dump", spy_dump)

    def leaked(self) -> bool:
        return any(sentinel_in(blob) for blob in self.blobs)


class RaySpy:
    """Records what Ray serializes and deserializes in this process (the driver): the pickles of the actors'
    creation and of every remote call's arguments, the objects it puts in the object store, and the actors'
    return values that ``ray.get`` reads, each with its out-of-band buffers (where numpy arrays travel).

    Ray pickles every Python value through the ``pickle`` (``ray.cloudpickle``) of
    ``ray._private.serialization``; the spy stands in for it and keeps every pickle stream and buffer.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from ray._private import serialization

        self.blobs: list[bytes] = []
        real = serialization.pickle
        blobs = self.blobs

        class Spy:
            def __getattr__(self, name: str) -> object:
                return getattr(real, name)

            def dumps(self, obj: object, protocol: int | None = None, buffer_callback: object = None,
                      **kwargs: object) -> bytes:
                def keep(buffer: pickle.PickleBuffer) -> object:
                    blobs.append(memoryview(buffer).tobytes())
                    return buffer_callback(buffer)

                blob = real.dumps(obj, protocol=protocol, buffer_callback=keep if buffer_callback else None, **kwargs)
                blobs.append(bytes(blob))
                return blob

            def loads(self, data: bytes, *args: object, buffers: object = (), **kwargs: object) -> object:
                blobs.append(bytes(data))
                blobs.extend(memoryview(buffer).tobytes() for buffer in buffers or ())
                return real.loads(data, *args, buffers=buffers, **kwargs)

        monkeypatch.setattr(serialization, "pickle", Spy())

    def leaked(self) -> bool:
        return any(sentinel_in(blob) for blob in self.blobs)


def no_sentinel_in_messages(result: pc.Result) -> bool:
    return not any(sentinel_in(np.asarray(value).tobytes()) for message in result.transcript
                   for value in message.payload.values())


def test_private_data_stays_on_the_hosts(local_ray, data_files, monkeypatch):
    spy, ray_spy = PickleSpy(monkeypatch), RaySpy(monkeypatch)
    seen: list[bool] = []

    def look(row: dict) -> None:  # runs in the driver while the hosts are up
        if row["round"] == 1:
            seen.append(sentinel_in_driver_memory())

    local = pc.DistributedProblem.from_factories(specs(data_files))
    assert not sentinel_in_driver_memory()
    process = solve(local, "process", callback=look, diagnostics=False)
    ray_run = solve(local, "ray", callback=look, diagnostics=False)
    assert seen == [False, False] and len(spy.blobs) > 10 and not spy.leaked()
    assert len(ray_spy.blobs) > 10 and not ray_spy.leaked()  # 2 actors' creation, 4 rounds of calls, the replies
    assert any(data_files[1].encode() in blob for blob in ray_spy.blobs)  # the spy saw the factories go out
    assert no_sentinel_in_messages(process) and no_sentinel_in_messages(ray_run)
    assert not sentinel_in(pickle.dumps((process.w, process.z, process.history, ray_run.w, ray_run.z)))
    # The checks can fail: the serial backend builds the agents in the driver, and the process and Ray
    # backends pickle ordinary agents, data included, into their workers.
    solve(local, "serial", callback=look)
    assert seen[-1]
    ordinary = pc.DistributedProblem([load_agent(p, path) for p, path in enumerate(data_files)])
    solve(ordinary, "process")
    assert spy.leaked()
    solve(ordinary, "ray")
    assert ray_spy.leaked()


def test_per_host_checkpoint_shards_resume_bitwise(local_ray, data_files, tmp_path):
    local = pc.DistributedProblem.from_factories(specs(data_files, shards=tmp_path))
    full = solve(local, "process", rounds=6)
    driver = tmp_path / "driver.ckpt"
    solve(local, "process", rounds=6, checkpoint=driver, callback=lambda row: row["round"] < 3)
    # Shards stamped with their round: round 3's state (next round 4) and round 2's, deleted on the next write.
    assert sorted(p.name for p in tmp_path.glob("site-1.shard*")) == ["site-1.shard.r3", "site-1.shard.r4"]
    content = driver.read_bytes()
    assert not any(sentinel_in(file.read_bytes()) for file in tmp_path.glob("driver.ckpt*"))
    assert b'"noise"' not in content  # the agents' noise states are in the shards only
    assert b'"noise"' in (tmp_path / "site-1.shard.r4").read_bytes()
    resumed = solve(local, "ray", rounds=6, resume=driver, checkpoint=driver)
    assert same_run(full, resumed)
    shard = tmp_path / "site-2.shard.r7"
    shard.write_bytes(shard.read_bytes()[:-1] + b"x")
    with pytest.raises(pc.errors.CheckpointError, match="not the one the driver's checkpoint recorded") as info:
        solve(local, "serial", rounds=6, resume=driver)
    assert info.value.agent == "site-2"
