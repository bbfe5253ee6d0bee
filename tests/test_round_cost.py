"""The cheap round of Algorithm 1 (issue 14, item 6): the shortcuts compute the same numbers as the long way.

bench/bench_numpy_floor.py times privcvx against a plain numpy Algorithm 1; here the same numpy method checks
that privcvx's iterates are its iterates, and each shortcut is checked against the computation it replaces.
"""

from __future__ import annotations

import math
import operator
import sys
from pathlib import Path

import cvxpy as cp
import dp_accounting
import numpy as np
import pytest
from core_problems import general_form
from scipy.special import softmax

import privcvx as pc
from privcvx.algorithms import LinearizedADMM
from privcvx.algorithms.admm_server import ADMMMonitor, ADMMServer
from privcvx.algorithms.base import AgentContext, Monitor
from privcvx.algorithms.consensus import ConsensusDuals, LineEight, read_only
from privcvx.errors import PrivacyError
from privcvx.gradients import GradientEvaluator
from privcvx.messages import Message
from privcvx.privacy.accounting import (
    RUNNING_ACCOUNTING_ENTRIES,
    PrivacyLedger,
    RunningEpsilon,
    epsilon_report,
    gaussian_epsilon,
    tightest_epsilon,
)
from privcvx.schedules import as_penalty
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


def _looped_line8(lam: list[np.ndarray], layouts: list, w: np.ndarray, w_previous: np.ndarray,
                  released: list[np.ndarray], rho: float | np.ndarray,
                  used: list[np.ndarray] | None) -> tuple[list[np.ndarray], dict[str, float]]:
    """Line 8 and the residuals agent by agent, each sum of squares a 1-d numpy sum added in agent order: the
    reference the one vectorized path of ConsensusDuals must match bitwise."""
    lam, primal_sq, z_sq, w_sq, dual_sq, lam_sq = list(lam), 0.0, 0.0, 0.0, 0.0, 0.0
    for p, (layout, z_new) in enumerate(zip(layouts, released, strict=True)):
        w_p = w[layout.shared_global]
        rho_p = rho[layout.shared_global] if np.ndim(rho) else rho
        gap = w_p - z_new
        lam[p] = lam_p = lam[p] + rho_p * (gap if used is None else used[p] - z_new)
        change = w_p - w_previous[layout.shared_global]
        change = rho_p * change if np.ndim(rho) else change
        primal_sq += float((gap * gap).sum())
        z_sq += float((z_new * z_new).sum())
        w_sq += float((w_p * w_p).sum())
        dual_sq += float((change * change).sum())
        lam_sq += float((lam_p * lam_p).sum())
    dual = math.sqrt(dual_sq)
    return lam, {"primal_residual": math.sqrt(primal_sq), "dual_residual": dual if np.ndim(rho) else rho * dual,
                 "scale_primal": math.sqrt(max(z_sq, w_sq)), "scale_dual": math.sqrt(lam_sq),
                 "entries": float(sum(layout.shared_local.size for layout in layouts))}


@pytest.mark.parametrize("vector_rho", [False, True])
@pytest.mark.parametrize("relaxed", [False, True])
@pytest.mark.parametrize("layout", ["full", "general"])
def test_line8_and_residuals_are_the_per_agent_loops_bitwise(digits, layout, vector_rho, relaxed) -> None:
    problem = digits[2] if layout == "full" else general_form()[0]
    duals = ConsensusDuals(problem.layouts, problem.dim)
    assert duals.rows == (len(problem.layouts) if layout == "full" else 1)  # the copies as rows of equal entries
    lam = [np.zeros(layout.shared_local.size) for layout in problem.layouts]
    rng = np.random.default_rng(5)
    scale = 10.0 ** rng.integers(-6, 3, size=problem.dim)  # magnitudes that round differently in another order
    w_previous = np.zeros(problem.dim)
    for _ in range(4):
        w = rng.standard_normal(problem.dim) * scale
        released = [rng.standard_normal(layout.shared_local.size) * scale[layout.shared_global]
                    for layout in problem.layouts]
        rho = rng.uniform(0.1, 3.0, problem.dim) if vector_rho else 0.37
        used = [w[layout.shared_global] + 0.3 * (w[layout.shared_global] - z)
                for layout, z in zip(problem.layouts, released, strict=True)] if relaxed else None
        lam, expected = _looped_line8(lam, problem.layouts, w, w_previous, released, rho, used)
        got = duals.update(w, w_previous, released, rho, used)  # the scales computed when read (RoundResiduals)
        assert {key: got[key] for key in expected} == expected  # floats compared exactly
        assert [mine.tobytes() for mine in duals.lam] == [theirs.tobytes() for theirs in lam]
        w_previous = w
    assert duals.update(w, w, released, rho, residuals=False) == {}  # line 8 alone
    lam, _ = _looped_line8(lam, problem.layouts, w, w, released, rho, None)
    assert [mine.tobytes() for mine in duals.lam] == [theirs.tobytes() for theirs in lam]


@pytest.mark.parametrize("layout", ["full", "general"])
def test_line5_average_is_the_per_agent_sum_bitwise(digits, layout) -> None:
    problem = digits[2] if layout == "full" else general_form()[0]
    server = ADMMServer(problem, as_penalty(0.5))
    rng = np.random.default_rng(6)
    server.duals.assign([rng.standard_normal(layout.shared_local.size) * 10.0 ** rng.integers(-4, 4)
                         for layout in problem.layouts])
    released = [rng.standard_normal(layout.shared_local.size) for layout in problem.layouts]
    expected = np.zeros(problem.dim)
    for layout, z_p, lam_p in zip(problem.layouts, released, server.duals.lam, strict=True):
        expected[layout.shared_global] += z_p - lam_p / 0.5
    expected /= problem.multiplicity
    assert server.duals.average(released, 0.5, problem.multiplicity).tobytes() == expected.tobytes()


@pytest.mark.parametrize("layout", ["full", "general"])
@pytest.mark.parametrize("rho", [0.5, "adaptive-per-key"])
def test_the_servers_unchecked_messages_are_what_the_checked_constructor_builds(digits, layout, rho) -> None:
    """`Message.of_arrays` skips the constructor's checks for the server's own arrays: every message of a server round
    equals, bitwise, the message the constructor builds from its fields, and holds only float arrays."""
    problem = digits[2] if layout == "full" else general_form()[0]
    server = ADMMServer(problem, as_penalty(rho))
    rng = np.random.default_rng(8)
    for t in (1, 2):  # the initial points, then line 8 and line 5 on releases
        inbox = [Message(t - 1, layout.name, "server", {"z": rng.standard_normal(layout.shared_local.size)})
                 for layout in problem.layouts]
        for message in server.step(t, inbox):
            checked = Message(message.round, message.sender, message.receiver, dict(message.payload), message.phase)
            assert message.same_as(checked) and set(message.payload) == {"w", "rho"}
            assert all(type(value) is np.ndarray and value.dtype == float for value in message.payload.values())


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
        transposed = (softmax(W.T @ loss.X.T, axis=0) - loss.Y.T) @ loss.X / loss.normalizer  # the layout K x I_p
        assert loss.gradient(W).tobytes() == transposed.T.tobytes()
        textbook = loss.X.T @ (softmax(loss.X @ W, axis=1) - loss.Y) / loss.normalizer  # Eq. (30)'s, as the floor
        np.testing.assert_allclose(loss.gradient(W), textbook, rtol=1e-12, atol=1e-18)


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


def test_a_constant_step_rule_is_checked_once_and_a_varying_one_every_round(monkeypatch):
    """`ADMMAgent.step_size`: 1/L_p without privacy (and a number) is checked at its first round only, with the same
    history as a check in every round; a callable eta is still checked in every round (a bad value at round 3 stops
    the run there, naming the round)."""
    from privcvx.algorithms import admm_agent
    from privcvx.errors import RunFailed
    from privcvx.schedules import checked_value

    problem = _ridge(4, 3)
    calls = []

    def counted(rule, t, **kwargs):
        calls.append(t)
        return checked_value(rule, t, **kwargs)

    monkeypatch.setattr(admm_agent, "checked_value", counted)
    algorithm = LinearizedADMM(local_updates=2, rho=1.0, eta="auto")
    kept = problem.solve(algorithm, rounds=6, seed=0)
    assert calls == [1] * len(problem.agents)
    calls.clear()
    never_kept = property(lambda self: None, lambda self, value: None)  # every round's eta checked, as before
    monkeypatch.setattr(admm_agent.ADMMAgent, "_constant_eta", never_kept, raising=False)
    checked_every_round = problem.solve(algorithm, rounds=6, seed=0)
    assert calls == [t for t in range(1, 7) for _ in problem.agents]
    columns = [c for c in kept.history.columns if c != "time_s"]
    assert kept.history[columns].equals(checked_every_round.history[columns])
    with pytest.raises(RunFailed, match=r"round 3: argument 'eta\(t=3\)'"):
        problem.solve(LinearizedADMM(local_updates=2, rho=1.0, eta=lambda t: 0.1 if t < 3 else -1.0), rounds=6)


@pytest.mark.parametrize("settings", [{"rho": 0.05}, {"rho": "adaptive-per-key"}, {"rho": 0.05, "relaxation": 1.5},
                                      {"rho": 0.05, "anderson": 2}, {"rho": "adaptive", "general": True}])
def test_the_server_takes_its_monitors_line8_and_the_run_is_the_run_that_computes_it_twice(digits, monkeypatch,
                                                                                           settings) -> None:
    """The server runs line 8 on round t's releases at round t + 1, on the inputs its monitor replayed it on in round
    t's row: it takes the monitor's answer (every round after the first), and the history, w and the transcript are
    those of a run whose server computes line 8 itself, bitwise."""
    settings = dict(settings)
    problem = general_form()[0] if settings.pop("general", False) else digits[2]
    taken = []
    ran_on = LineEight.ran_on
    monkeypatch.setattr(LineEight, "ran_on", lambda *args: taken.append(ran_on(*args)) or taken[-1])
    run = {"rounds": 6, "local_updates": 2, "seed": 0, "diagnostics": False}
    paired = problem.solve(**run, **settings)
    assert taken == [True] * 5
    monkeypatch.setattr(ADMMMonitor, "pair", Monitor.pair)
    alone = problem.solve(**run, **settings)
    assert taken == [True] * 5  # no monitor to follow: the server computed every line 8 itself
    columns = [c for c in paired.history.columns if c != "time_s"]
    assert paired.history[columns].equals(alone.history[columns]) and paired.w.tobytes() == alone.w.tobytes()
    assert paired.transcript.same_as(alone.transcript)


def _led(problem: pc.DistributedProblem, seed: int) -> tuple[ConsensusDuals, ConsensusDuals, ConsensusDuals,
                                                              list[np.ndarray], np.ndarray, np.ndarray]:
    """A leader that ran line 8 on random releases, w and previous w (writeable arrays), its follower, and a third
    `ConsensusDuals` that follows nobody."""
    leader, follower, alone = (ConsensusDuals(problem.layouts, problem.dim) for _ in range(3))
    follower.follow(leader)
    rng = np.random.default_rng(seed)
    released = [rng.standard_normal(layout.shared_local.size) for layout in problem.layouts]
    w, w_previous = rng.standard_normal(problem.dim), rng.standard_normal(problem.dim)
    leader.update(w, w_previous, released, 0.5)
    return leader, follower, alone, released, w, w_previous


def test_line8_is_computed_when_the_leaders_inputs_differ_by_a_bit(digits) -> None:
    """A follower takes its leader's line 8 only on bitwise the same inputs: w one ulp apart is computed again."""
    problem = digits[2]
    leader, follower, alone, released, w, w_previous = _led(problem, 3)
    nudged = w.copy()
    nudged[7] = np.nextafter(nudged[7], np.inf)
    assert follower.update(nudged, w_previous, released, 0.5) == alone.update(nudged, w_previous, released, 0.5)
    assert follower.flat.tobytes() == alone.flat.tobytes() != leader.flat.tobytes()
    copied = ConsensusDuals(problem.layouts, problem.dim)  # the same inputs in other arrays: taken
    copied.follow(leader)
    assert copied.update(w.copy(), w_previous.copy(), [z_p.copy() for z_p in released], 0.5) == \
        leader.last.residuals
    assert copied.flat is leader.flat


def test_line8_is_computed_when_an_input_was_written_in_place_after_the_leaders_record(digits) -> None:
    """A record of line 8 keeps a writeable input as a read-only copy (`LineEight.of`): a follower given the same
    array objects, written into after the leader ran, computes line 8 on their new values; read-only inputs (the
    server's w, the releases as sent) are kept as they are and taken by identity. The duals are read-only."""
    problem = digits[2]
    leader, follower, alone, released, w, w_previous = _led(problem, 4)
    assert leader.last.w is not w and leader.last.released[3] is not released[3]  # writeable: copied
    w[7] += 1.0  # the same objects, new values
    released[3][0] -= 1.0
    assert follower.update(w, w_previous, released, 0.5) == alone.update(w, w_previous, released, 0.5)
    assert follower.flat.tobytes() == alone.flat.tobytes() != leader.flat.tobytes()
    with pytest.raises(ValueError, match="read-only"):
        follower.lam[0][0] = 1.0
    leader, follower = (ConsensusDuals(problem.layouts, problem.dim) for _ in range(2))
    follower.follow(leader)
    fixed = [read_only(z_p.copy()) for z_p in released]
    w_fixed = alone.average(fixed, 0.5, problem.multiplicity)  # line 5's w: a new read-only array
    leader.update(w_fixed, w, fixed, 0.5)
    assert leader.last.w is w_fixed and all(map(operator.is_, leader.last.released, fixed))  # kept, not copied
    assert follower.update(w_fixed, w, fixed, 0.5) == leader.last.residuals and follower.flat is leader.flat


@pytest.mark.parametrize("tol", [None, (1e-3, 1e-2)])
def test_a_run_without_diagnostics_ends_as_the_run_with_them(tol: tuple[float, float] | None) -> None:
    """The scales of the residuals are computed only when read (`RoundResiduals`): a run without diagnostics has the
    same status, w, public history columns and average as the same run with them, bitwise; and the status is read from
    the last round's scales (a converged ridge run: "converged" needs them)."""
    rng = np.random.default_rng(3)
    agents = []
    for p in range(3):
        A, x = rng.standard_normal((12, 3)), cp.Variable(3, name=f"x_{p}")
        agents.append(pc.Agent(cp.sum_squares(A @ x - A @ np.ones(3)) + 0.1 * cp.sum_squares(x), shared=x,
                               name=f"a{p}"))
    problem = pc.DistributedProblem(agents)
    runs = [problem.solve(algorithm=LinearizedADMM(local_updates=1, rho=1.0, tol=tol), rounds=300, seed=0,
                          diagnostics=diagnostics) for diagnostics in (True, False)]
    on, off = runs
    assert on.status == off.status == "converged"
    assert on.w.tobytes() == off.w.tobytes()
    public = [c for c in off.history.columns if c in on.history.columns]
    assert public and on.history[public].equals(off.history[public])
    assert on.info["average"] == off.info["average"]
