"""backend="ray": the same seed gives bitwise-identical runs on serial, process and Ray; lost actors fail cleanly.

One local Ray instance (2 CPUs) serves the whole module and is shut down at its end.
"""

from __future__ import annotations

import os
import warnings
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


def data_of(p: int) -> tuple[np.ndarray, np.ndarray]:
    """Agent p's private data (a least-squares fit), drawn from its own seed."""
    rng = np.random.default_rng(100 + p)
    a = rng.normal(size=(ROWS, N))
    return a, a @ rng.uniform(-0.4, 0.4, size=N) + 0.1 * rng.normal(size=ROWS)


def build_agent(p: int, a: np.ndarray, b: np.ndarray, gradient: object = None) -> pc.Agent:
    """Agent p: a box-constrained least-squares fit on the shared key "w", with a private offset u."""
    x, u = cp.Variable(N), cp.Variable(2)
    objective = cp.sum_squares(a @ x - b) / ROWS + cp.sum_squares(u - 0.1 * p)
    smoothness = 2.0 * float(np.linalg.eigvalsh(a.T @ a).max()) / ROWS + 2.0
    return pc.Agent(objective, [x <= 0.5, x >= -0.5, cp.sum(u) <= 1.0], shared={"w": x}, name=f"site-{p}",
                    sensitivity=SENSITIVITY, smoothness=smoothness, gradient=gradient)


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.errors.ReproducibleNoiseWarning)
        return problem.solve(rounds=4, local_updates=2, rho=1.0, eta=0.05, privacy=PRIVACY, seed=7,
                             backend=backend, **options)


def test_the_same_seed_gives_bitwise_identical_runs_on_every_backend(local_ray):
    problem = ordinary_problem()
    serial = solve(problem, "serial")
    assert serial.history["noise_magnitude"].gt(0).all()  # the noise is really drawn
    assert same_run(serial, solve(problem, "process"))
    assert same_run(serial, solve(problem, "ray"))  # two actors (one per CPU) host the three agents
    assert same_run(serial, solve(problem, pc.runtime.Ray(actors=3)))  # one actor per agent
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
    a, b = data_of(2)
    problem = pc.DistributedProblem([build_agent(0, *data_of(0)), build_agent(1, *data_of(1)),
                                     build_agent(2, a, b, gradient=oracle(a, b, calls=6))])
    with pytest.raises(RunFailed, match=message) as info:
        problem.solve(rounds=8, local_updates=2, rho=1.0, eta=0.05, seed=7, backend=pc.runtime.Ray(actors=3))
    assert info.value.agent == "site-2"
    history = info.value.result.history
    assert history["round"].tolist() == [1, 2, 3]  # E = 2 gradient calls a round: the 7th, in round 4, fails
    assert info.value.result.info["stop"] == "failed"
    assert info.value.result.info.get("hosts_lost", False) == (oracle is DieAfter)
