"""The cheap round of Algorithm 1 (issue 14, item 6): the shortcuts compute the same numbers as the long way.

bench/bench_numpy_floor.py times privcvx against a plain numpy Algorithm 1; here the same numpy method checks
that privcvx's iterates are its iterates, and each shortcut is checked against the computation it replaces.
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import cvxpy as cp
import dp_accounting
import numpy as np
import pytest
from scipy.special import softmax

import privcvx as pc
from privcvx.algorithms import LinearizedADMM
from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.linearized_admm import ADMMServer, ConsensusDuals
from privcvx.errors import PrivacyError
from privcvx.gradients import GradientEvaluator
from privcvx.privacy.accounting import (
    RUNNING_ACCOUNTING_ENTRIES,
    PrivacyLedger,
    RunningEpsilon,
    epsilon_report,
    gaussian_epsilon,
    tightest_epsilon,
)
from privcvx.schedules import as_schedule
from problems import datasets, federated_logistic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_numpy_floor import AGENTS, BOUND, LOCAL_UPDATES, NumpyAlgorithm1  # noqa: E402


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray, pc.DistributedProblem]:
    X, y = datasets.load_digits()
    return X, y, federated_logistic(X, y, agents=AGENTS, bound=BOUND, seed=0)


@pytest.mark.parametrize("diagnostics", [False, True])
def test_privcvx_computes_the_plain_numpy_iterates(digits, diagnostics) -> None:
    X, y, problem = digits
    rounds, rho = 25, 0.01
    floor = NumpyAlgorithm1(X, y, problem.info["shares"], rho=rho, private=False)
    for t in range(1, rounds + 1):
        floor.round(t)
    result = problem.solve(rounds=rounds, local_updates=LOCAL_UPDATES, rho=rho, eta="auto", seed=0,
                           diagnostics=diagnostics)
    assert np.max(np.abs(floor.w)) > 0.05  # the iterates moved away from 0 and reached the box
    np.testing.assert_allclose(result.w, floor.w.reshape(-1, order="F"), rtol=0, atol=1e-12)
    for z, release in zip(result.z, floor.released, strict=True):
        np.testing.assert_allclose(z, release.reshape(-1, order="F"), rtol=0, atol=1e-12)
    if diagnostics:
        assert result.history["objective"].iloc[-1] == pytest.approx(floor.objective(), rel=1e-12)


def test_gaussian_epsilon_is_dp_accountings_bitwise() -> None:
    sigmas = [*np.geomspace(1e-3, 1e4, 60), 0.0, math.inf]
    for sigma in sigmas:
        for delta in (0.0, 1e-9, 1e-5, 1e-2, 0.5, 1.0):
            assert gaussian_epsilon(sigma, delta) == dp_accounting.get_epsilon_gaussian(sigma, delta), (sigma, delta)
    with pytest.raises(PrivacyError, match="sigma"):
        gaussian_epsilon(-1.0, 1e-5)
    with pytest.raises(PrivacyError, match="delta"):
        gaussian_epsilon(1.0, 1.5)


class _CachingOracle:
    """An oracle that returns (and keeps) one array of its own, in the layout it was given: 2 (W - A)."""

    def __init__(self, target: np.ndarray) -> None:
        self.target = target
        self.out = None
        self.orders: list[bool] = []

    def __call__(self, W: np.ndarray) -> np.ndarray:
        self.orders.append(W.flags["C_CONTIGUOUS"])
        self.out = 2.0 * (W - self.target)
        return self.out


def test_one_variable_oracle_gets_a_c_ordered_matrix_and_returns_a_new_array() -> None:
    target = np.arange(12.0).reshape(3, 4)
    W = cp.Variable((3, 4))
    oracle = _CachingOracle(target)
    agent = pc.Agent(cp.sum_squares(W - target), shared=W, gradient=oracle)
    evaluator = GradientEvaluator(agent, pc.DistributedProblem([agent]).layouts[0])
    z = np.linspace(-1.0, 1.0, 12)
    gradient = evaluator.gradient(z)
    assert oracle.orders == [True]
    np.testing.assert_array_equal(gradient, (2.0 * (z.reshape(3, 4, order="F") - target)).reshape(-1, order="F"))
    assert not np.may_share_memory(gradient, oracle.out)
    x = cp.Variable(5)  # a vector: the oracle's array would be returned as it is, so it is copied
    vector_oracle = _CachingOracle(np.ones(5))
    agent = pc.Agent(cp.sum_squares(x - 1.0), shared=x, gradient=vector_oracle)
    evaluator = GradientEvaluator(agent, pc.DistributedProblem([agent]).layouts[0])
    gradient = evaluator.gradient(np.zeros(5))
    np.testing.assert_array_equal(gradient, np.full(5, -2.0))
    assert not np.may_share_memory(gradient, vector_oracle.out)


def test_release_only_agent_never_compiles_its_objective(digits) -> None:
    _, _, problem = digits
    program = LinearizedADMM(local_updates=2, rho=0.01).agent_program(problem.agents[0],
                                                                     AgentContext.for_agent(problem, 0))
    program.start()
    w_p = np.full(problem.layouts[0].dim, 0.05)
    program.step(1, [pc.Message(round=1, sender="server", receiver=program.layout.name,
                                         payload={"w": w_p, "rho": 0.01})])
    assert program.evaluator._root is None  # the gradient came from the oracle alone
    loss = problem.info["losses"][0]
    value = program.diagnostics(w_p)["objective"]  # compiles the tree now
    assert value == pytest.approx(loss.value(program.released.reshape(loss.shape, order="F")), rel=1e-12)


def _per_agent(duals: ConsensusDuals) -> ConsensusDuals:
    """The same duals, run agent by agent (the loop the stacked path of full consensus replaces)."""
    clone = copy.deepcopy(duals)
    clone.full = False
    return clone


@pytest.mark.parametrize("vector_rho", [False, True])
@pytest.mark.parametrize("relaxed", [False, True])
def test_full_consensus_line8_and_residuals_are_the_per_agent_loops_bitwise(digits, vector_rho, relaxed) -> None:
    _, _, problem = digits
    stacked = ConsensusDuals(problem.layouts)
    assert stacked.full
    looped = _per_agent(stacked)
    rng = np.random.default_rng(5)
    scale = 10.0 ** rng.integers(-6, 3, size=problem.dim)  # magnitudes that round differently in another order
    w_previous = np.zeros(problem.dim)
    for _ in range(4):
        w = rng.standard_normal(problem.dim) * scale
        released = [rng.standard_normal(problem.dim) * scale for _ in problem.layouts]
        rho = rng.uniform(0.1, 3.0, problem.dim) if vector_rho else 0.37
        used = [w + 0.3 * (w - z) for z in released] if relaxed else None
        expected = looped.update(w, w_previous, released, rho, used)
        assert stacked.update(w, w_previous, released, rho, used) == expected  # floats compared exactly
        for mine, theirs in zip(stacked.lam, looped.lam, strict=True):
            assert mine.tobytes() == theirs.tobytes()
        w_previous = w
    assert stacked.update(w, w, released, rho, residuals=False) == {}  # line 8 alone
    looped.update(w, w, released, rho)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(stacked.lam, looped.lam, strict=True))


def test_full_consensus_average_is_the_per_agent_sum_bitwise(digits) -> None:
    _, _, problem = digits
    server = ADMMServer(problem, as_schedule(0.5, argument="rho"))
    rng = np.random.default_rng(6)
    server.duals.lam = [rng.standard_normal(problem.dim) * 10.0 ** rng.integers(-4, 4) for _ in problem.layouts]
    released = [rng.standard_normal(problem.dim) for _ in problem.layouts]
    expected = np.zeros(problem.dim)
    for z_p, lam_p in zip(released, server.duals.lam, strict=True):
        expected += z_p - lam_p / 0.5
    expected /= len(problem.layouts)
    assert server._average(released, 0.5).tobytes() == expected.tobytes()


def test_a_run_without_tol_has_the_history_of_a_run_whose_tol_never_stops_it(digits) -> None:
    """A fixed rho's server computes no residuals without ``tol``; a tolerance that is never met makes it compute
    them, and changes nothing else."""
    _, _, problem = digits
    settings = {"rounds": 8, "local_updates": 2, "rho": 0.05, "seed": 0, "diagnostics": False}
    plain = problem.solve(**settings)
    checked = problem.solve(**settings, tol=(1e-300, 0.0))
    columns = [c for c in plain.history.columns if c != "time_s"]
    assert checked.info["stop"] == "rounds" and len(plain.history) == 8
    assert plain.history[columns].equals(checked.history[columns])
    assert plain.transcript.same_as(checked.transcript)


def test_logistic_oracle_is_scipys_softmax_formula_bitwise(digits) -> None:
    _, _, problem = digits
    loss = problem.info["losses"][3]
    rng = np.random.default_rng(7)
    for scale in (1e-3, 0.1, 10.0):
        W = rng.standard_normal(loss.shape) * scale
        expected = loss.X.T @ (softmax(loss.X @ W, axis=1) - loss.Y) / loss.normalizer
        assert loss.gradient(W).tobytes() == expected.tobytes()


def test_running_epsilon_past_sixteen_mechanisms_matches_the_whole_ledger() -> None:
    """The running epsilon queues releases and folds them in when it is read: it stays the ledger's epsilon,
    one Gaussian release at a time and then with Laplace releases mixed in."""
    delta = 1e-5
    running = RunningEpsilon(PrivacyLedger("a"), delta)
    mechanisms = [pc.Gaussian(0.2 + 0.03 * k, 1e-6) for k in range(24)]
    for k, mechanism in enumerate(mechanisms):
        running.record(mechanism, 2)
        whole = tightest_epsilon(running.ledger, delta, with_pld=False)
        if k < RUNNING_ACCOUNTING_ENTRIES:
            assert running.epsilon() == whole
        else:  # the same exact Gaussian composition, its terms summed in another order
            assert running.epsilon() == pytest.approx(whole, rel=1e-9)
    for k in range(3):
        running.record(pc.Laplace(0.1 + 0.01 * k))
    assert running.epsilon() == pytest.approx(epsilon_report(running.ledger, delta)["epsilon_rdp"], rel=1e-6)


def _ridge(agents: int, dim: int) -> pc.DistributedProblem:
    rng = np.random.default_rng(agents + dim)
    members = []
    for p in range(agents):
        x = cp.Variable(dim)
        features = rng.normal(size=(8, dim))
        members.append(pc.Agent(cp.sum_squares(features @ x - rng.normal(size=8)), shared=x, name=f"ridge-{p}"))
    return pc.DistributedProblem(members)


@pytest.mark.parametrize("agents, dim", [(12, 1), (12, 3), (3, 5)])
def test_entry_residuals_as_rows_are_the_loop_over_agents_bitwise(agents, dim):
    """Per-key balancing's residuals under full consensus (the agents as rows) against the loop over agents, with
    one entry too (where a reduction over a column would be numpy's pairwise sum)."""
    layouts = _ridge(agents, dim).layouts
    rng = np.random.default_rng(dim)
    w, w_previous = rng.normal(size=dim) * 1e3, rng.normal(size=dim)
    released = [w + rng.normal(size=dim) * 10.0 ** rng.uniform(-6, 2) for _ in range(agents)]
    rows, loop = ConsensusDuals(layouts), ConsensusDuals(layouts)
    loop.full = False
    assert rows.full
    for ours, theirs in zip(rows.entry_residuals(w, w_previous, released),
                            loop.entry_residuals(w, w_previous, released), strict=True):
        assert ours.tobytes() == theirs.tobytes()


def test_the_exact_steps_own_round_is_the_generic_round_bitwise(monkeypatch):
    """ExactStepAgent.step (no terms of Eq. (9), no average of E iterates) against ADMMAgent.step with the exact
    step as its one local update: the same history and releases, bit for bit."""
    from privcvx.algorithms.linearized_admm import ADMMAgent, ExactStepAgent

    problem = _ridge(4, 3)
    ours = problem.solve(rounds=30)
    monkeypatch.setattr(ExactStepAgent, "step", ADMMAgent.step)
    generic = problem.solve(rounds=30)
    columns = [c for c in ours.history.columns if c != "time_s"]
    assert ours.info["local_updates"] == "exact" and ours.history[columns].equals(generic.history[columns])
    assert ours.transcript.same_as(generic.transcript)


def test_the_rounds_run_with_the_heap_of_before_them_frozen_and_leave_the_collector_as_they_found_it():
    """The run loop's `frozen_heap`: during the rounds the collector's permanent generation holds the objects of
    before the run; after the run nothing is frozen; a caller's own freeze is left alone."""
    import gc

    problem = _ridge(3, 2)
    assert gc.get_freeze_count() == 0
    during: list[int] = []
    problem.solve(rounds=3, callback=lambda row: during.append(gc.get_freeze_count()))
    assert min(during) > 0 and gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        problem.solve(rounds=3, callback=lambda row: during.append(gc.get_freeze_count()))
        # nothing more frozen during the run (its set-up objects stay collectable), nothing unfrozen after it
        assert 0 < during[-1] <= frozen and 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
