"""Core: declaration, the local update Eq. (9), Algorithm 1 without noise, results."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from core_problems import box_l1_least_squares, general_form, soc_linear

import privcvx as pc
from privcvx.algorithms import AgentContext, LinearizedADMM
from privcvx.algorithms.admm_server import ADMMServer
from privcvx.errors import DeclarationError, InfeasibleLocalSetError, NotDCPError, ParameterError
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import SOLVER_SETTINGS, LocalProblem, StrategyFailure


def _gap(history, reference) -> np.ndarray:
    return np.abs(history["objective"].to_numpy() - reference.value) / abs(reference.value)


@pytest.mark.parametrize("builder, rounds, local_updates, rho", [
    (box_l1_least_squares, 60, 1, 3.0),
    (soc_linear, 60, 1, 3.0),
    (general_form, 60, 5, 1.0),
])
def test_converges_to_centralized_optimum(builder, rounds, local_updates, rho):
    problem, eta, _ = builder()
    reference = problem.solve_centralized()
    result = problem.solve(rounds=rounds, local_updates=local_updates, rho=rho, eta=eta)
    assert _gap(result.history, reference)[-1] <= 1e-4
    assert result.history["consensus_residual"].iloc[-1] <= 1e-4
    assert result.history["max_violation"].max() <= 1e-6
    assert np.allclose(result.w, reference.w, atol=1e-3)


def test_local_updates_need_fewer_rounds():
    problem, eta, _ = box_l1_least_squares()
    reference = problem.solve_centralized()
    rounds_to_gap = {}
    for local_updates in (1, 5):
        history = problem.solve(rounds=60, local_updates=local_updates, rho=1.0, eta=eta).history
        reached = (_gap(history, reference) <= 1e-3) & (history["consensus_residual"].to_numpy() <= 1e-3)
        assert reached.any()
        rounds_to_gap[local_updates] = int(history["round"].to_numpy()[reached][0])
    assert rounds_to_gap[5] < rounds_to_gap[1]


def test_general_form_layout_and_private_variables():
    problem, _, _ = general_form()
    assert problem.keys == ["a", "b", "c"]
    assert problem.dim == 7
    assert problem.multiplicity.tolist() == [2.0] * 7
    for layout in problem.layouts:  # shared entries first, then the 2 private entries of y
        assert layout.dim == layout.shared_local.size + 2
        assert not layout.shared_mask[-2:].any() and layout.shared_mask[:-2].all()
    reference = problem.solve_centralized()
    parts = problem.unflatten(reference.w)
    assert parts["a"].shape == (3,)
    # Each agent's shared entries equal the global vector at the optimum.
    for layout, z in zip(problem.layouts, reference.z, strict=True):
        assert np.allclose(z[layout.shared_local], reference.w[layout.shared_global], atol=1e-6)


def test_server_and_agent_duals_stay_identical():
    problem, eta, rho = general_form()
    algorithm = LinearizedADMM(local_updates=3, rho=rho, eta=eta)
    roles = [algorithm.agent_program(agent, AgentContext.for_agent(problem, p))
             for p, agent in enumerate(problem.agents)]
    server = ADMMServer(problem, algorithm._rho)
    downlink = server.step(1, [message for role in roles for message in role.start()])
    for t in range(1, 16):
        uplink = [message for role, m in zip(roles, downlink, strict=True) for message in role.step(t, [m])]
        downlink = server.step(t + 1, uplink)  # line 8 on round t's releases, then round t + 1's w
        for role, lam in zip(roles, server.duals.lam, strict=True):
            assert np.array_equal(role.lam, lam)
    assert any(np.abs(lam).max() > 1e-3 for lam in server.duals.lam)  # the duals did move


def _eq9_fresh(agent, z_e, gradient, w_p, lam, rho, eta, layout):
    """Eq. (9) written out literally and solved by a freshly built CVXPY problem."""
    parts = [cp.vec(v, order="F") for v in agent.variables]
    z = parts[0] if len(parts) == 1 else cp.hstack(parts)
    objective = gradient @ z + cp.sum_squares(z - z_e) / (2 * eta) \
        + rho / 2 * cp.sum_squares(w_p - z[layout.shared_local] + lam / rho)
    problem = cp.Problem(cp.Minimize(objective), agent.constraints)
    solver = cp.OSQP if problem.is_qp() else cp.CLARABEL
    # A reference solve: take Clarabel's answer even when it stalls at the tight tolerances.
    extra = {"accept_unknown": True} if solver == cp.CLARABEL else {}
    problem.solve(solver=solver, **SOLVER_SETTINGS[solver], **extra)
    return np.asarray(z.value).reshape(-1)


@pytest.mark.parametrize("builder", [box_l1_least_squares, soc_linear, general_form])
def test_compiled_step_equals_fresh_solve_of_eq9(builder):
    problem, _, _ = builder()
    rng = np.random.default_rng(5)
    agent, layout = problem.agents[0], problem.layouts[0]
    projection = LocalProblem(agent, layout)
    for _ in range(5):
        rho, eta = rng.uniform(0.5, 5.0), rng.uniform(0.05, 1.0)
        z_e = rng.normal(size=layout.dim) * 0.3
        gradient = rng.normal(size=layout.dim)
        w_p = rng.normal(size=layout.shared_local.size)
        lam = rng.normal(size=layout.shared_local.size)
        weights = 1.0 / eta + rho * layout.shared_mask
        linear = z_e / eta - gradient
        linear[layout.shared_local] += rho * w_p + lam
        compiled = projection.project(linear / weights, weights)
        fresh = _eq9_fresh(agent, z_e, gradient, w_p, lam, rho, eta, layout)
        assert np.max(np.abs(compiled - fresh)) <= 1e-6


def test_closed_forms_for_free_and_box_sets():
    x = cp.Variable(4)
    y = cp.Variable(3)
    free = pc.Agent(cp.sum_squares(x), shared={"f": x}, name="free")
    box = pc.Agent(cp.sum_squares(y), [y <= 1.0, y >= np.array([-1.0, 0.0, 0.5])], shared={"b": y}, name="box")
    problem = pc.DistributedProblem([free, box])
    weights4, weights3 = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 2.0, 5.0])
    point3 = np.array([3.0, -0.5, 0.0])
    assert LocalProblem(free, problem.layouts[0]).kind == "free"
    assert np.array_equal(LocalProblem(free, problem.layouts[0]).project(np.arange(4.0), weights4), np.arange(4.0))
    projection = LocalProblem(box, problem.layouts[1])
    assert projection.kind == "box"
    assert np.array_equal(projection.project(point3, weights3), np.array([1.0, 0.0, 0.5]))
    fresh = cp.Problem(cp.Minimize(cp.sum(cp.multiply(weights3, cp.square(y - point3)))), box.constraints)
    fresh.solve(solver=cp.CLARABEL)
    assert np.allclose(projection.project(point3, weights3), y.value, atol=1e-6)


def test_gradient_evaluator_matches_cvxpy_grad():
    rng = np.random.default_rng(3)
    x = cp.Variable(5)
    m = cp.Variable((3, 2))
    a, b = rng.normal(size=(6, 5)), rng.normal(size=6)
    c = rng.normal(size=(4, 3))
    objective = (2 * cp.sum_squares(a @ x - b) + cp.norm(x, 2) + cp.sum(cp.logistic(a @ x))
                 + cp.sum(cp.log_sum_exp(c @ m, axis=1)) - cp.sum(cp.multiply(np.ones((4, 2)), c @ m)) / 3
                 + cp.sum(cp.huber(x, 0.5)) + cp.quad_form(x, np.eye(5)) + cp.sum(cp.exp(x)) / 4
                 + cp.norm1(x) - cp.sum(cp.log(x + 10)))
    agent = pc.Agent(objective, shared={"x": x, "m": m})
    layout = pc.DistributedProblem([agent]).layouts[0]
    evaluator = GradientEvaluator(agent, layout)
    for _ in range(3):
        z = rng.normal(size=layout.dim)
        for var, value in zip(agent.variables, layout.split(z), strict=True):
            var.value = value
        expected = layout.flatten([np.asarray(objective.grad[v].toarray() if hasattr(objective.grad[v], "toarray")
                                              else objective.grad[v]).reshape(v.shape, order="F")
                                   for v in agent.variables])
        assert np.allclose(evaluator.gradient(z), expected, rtol=1e-8, atol=1e-8)
        assert evaluator.value(z) == pytest.approx(objective.value, rel=1e-12)


def test_user_gradient_oracle_is_used():
    x = cp.Variable(3)
    calls = []

    def oracle(value):
        calls.append(value.copy())
        return 2 * value

    agent = pc.Agent(cp.sum_squares(x), [x >= 1], shared=x, gradient=oracle)
    result = pc.DistributedProblem([agent]).solve(rounds=5, rho=1.0, eta=0.2)
    assert len(calls) == 5
    assert result.history["max_violation"].max() == 0.0


def test_results_round_trip(tmp_path):
    problem, eta, rho = general_form()
    result = problem.solve(rounds=5, local_updates=2, rho=rho, eta=eta, reference=True)
    path = tmp_path / "run.npz"
    result.save(path)
    loaded = pc.load_result(path)
    pd_equal = loaded.history.equals(result.history)
    assert pd_equal and list(loaded.history.columns) == list(result.history.columns)
    assert np.array_equal(loaded.w, result.w)
    assert all(np.array_equal(a, b) for a, b in zip(loaded.z, result.z, strict=True))
    assert loaded.reference.value == result.reference.value
    assert loaded.info == result.info


def test_history_columns_and_stop_reason():
    problem, eta, rho = soc_linear()
    result = problem.solve(rounds=3, rho=rho, eta=eta, callback=lambda row: row["round"] < 2)
    for column in ["round", "objective", "consensus_residual", "primal_residual", "dual_residual",
                   "max_violation", "noise_magnitude", "epsilon", "time_s"]:
        assert column in result.history.columns
    assert result.history["round"].tolist() == [1, 2]
    assert result.info["stop"] == "callback"
    assert (result.history["noise_magnitude"] == 0).all() and (result.history["epsilon"] == 0).all()


def test_process_backend_matches_serial():
    problem, eta, rho = box_l1_least_squares(agents=3)
    serial = problem.solve(rounds=4, local_updates=2, rho=rho, eta=eta, seed=3,
                           privacy=None)
    process = problem.solve(rounds=4, local_updates=2, rho=rho, eta=eta, seed=3, backend="process")
    assert np.array_equal(serial.w, process.w)
    assert serial.history["objective"].equals(process.history["objective"])


def test_checkpoint_resume_is_bitwise_identical(tmp_path):
    problem, eta, rho = box_l1_least_squares(agents=2, sensitivity=pc.Sensitivity(l1=0.1, l2=0.1))
    privacy = pc.ObjectivePerturbation(pc.Gaussian(0.5, 1e-3))
    full = problem.solve(rounds=6, rho=rho, eta=eta, privacy=privacy, seed=11)
    path = tmp_path / "state.pkl"
    problem.solve(rounds=6, rho=rho, eta=eta, privacy=privacy, seed=11, checkpoint=path,
                  callback=lambda row: row["round"] < 3)
    resumed = problem.solve(rounds=6, rho=rho, eta=eta, privacy=privacy, seed=11, resume=path)
    assert np.array_equal(full.w, resumed.w)
    cols = ["objective", "noise_magnitude", "epsilon"]
    assert full.history[cols].equals(resumed.history[cols])


# ---- bad input -------------------------------------------------------------------------------------------

def test_bad_declarations_raise_named_errors():
    x, y = cp.Variable(2), cp.Variable(3)
    with pytest.raises(NotDCPError, match="objective"):
        pc.Agent(-cp.sum_squares(x), shared=x, name="concave")
    with pytest.raises(NotDCPError, match=r"\[agent 'bad'\] argument 'constraints'"):
        pc.Agent(cp.sum_squares(x), [cp.sum_squares(x) >= 1], shared=x, name="bad")
    with pytest.raises(DeclarationError, match="shared"):
        pc.Agent(cp.sum_squares(x), shared={"k": 2 * x}, name="expr")
    with pytest.raises(DeclarationError, match="agents"):
        pc.DistributedProblem([])
    a = pc.Agent(cp.sum_squares(x), shared={"k": x}, name="two")
    b = pc.Agent(cp.sum_squares(y), shared={"k": y}, name="three")
    with pytest.raises(DeclarationError, match=r"\[agent 'three'\].*shape"):
        pc.DistributedProblem([a, b])
    empty = pc.Agent(cp.sum_squares(y), [y >= 1, cp.sum(y) <= 0], shared=y, name="empty")
    with pytest.raises(InfeasibleLocalSetError, match=r"\[agent 'empty'\] argument 'constraints'"):
        pc.DistributedProblem([empty])


@pytest.mark.parametrize("kwargs, argument", [
    ({"rounds": 0}, "rounds"), ({"local_updates": 0}, "local_updates"),
    ({"rho": 0.0}, "rho"), ({"rho": -1.0}, "rho"), ({"eta": 0.0}, "eta"), ({"eta": float("nan")}, "eta"),
    ({"eta": lambda t: -1.0}, "eta"), ({"tol": (0.0, 0.0)}, "tol"), ({"backend": "gpu"}, "backend"),
])
def test_bad_run_parameters_raise(kwargs, argument):
    problem, eta, rho = soc_linear(agents=2)
    options = {"rounds": 2, "rho": rho, "eta": eta, **kwargs}
    with pytest.raises(ParameterError, match=argument):
        problem.solve(**options)


def test_failure_keeps_history():
    x = cp.Variable(2)
    rounds_seen = []

    def failing(value):
        rounds_seen.append(1)
        if len(rounds_seen) > 3:
            return np.array([np.nan, 0.0])
        return 2 * value

    problem = pc.DistributedProblem([pc.Agent(cp.sum_squares(x), [x >= 0], shared=x, gradient=failing,
                                              name="flaky")])
    with pytest.raises(pc.errors.RunFailed) as info:
        problem.solve(rounds=10, rho=1.0, eta=0.1)
    assert info.value.agent == "flaky"
    assert info.value.result.history["round"].tolist() == [1, 2, 3]


def test_solver_fallback_reuses_the_same_parameters():
    problem, _, _ = soc_linear(agents=1)
    agent, layout = problem.agents[0], problem.layouts[0]
    projection = LocalProblem(agent, layout)
    assert projection.strategy == "clarabel"  # a set with a cone: Clarabel, called directly
    point, weights = np.linspace(-1, 1, layout.dim), np.full(layout.dim, 2.0)
    expected = projection.project(point, weights)

    def failing_solve(*args):
        raise StrategyFailure("injected failure")

    projection.chain[0].solve = failing_solve  # fault injection: the first strategy in the chain fails
    assert np.allclose(projection.project(point, weights), expected, atol=1e-6)
    assert projection.stats.fallbacks == 1 and projection.stats.strategies.get("cvxpy") == 1


def test_result_reports_solver_counters():
    problem, eta, rho = soc_linear(agents=2)
    reports = list(problem.solve(rounds=3, local_updates=2, rho=rho, eta=eta).info["local_solve"].values())
    assert [r["kind"] for r in reports] == ["conic", "conic"]
    assert all(r["solves"] == 3 * 2 + 1 for r in reports)  # 6 local updates and the initial point


def test_non_finite_metric_is_refused_and_history_kept():
    x = cp.Variable(2)
    calls = []

    def metric(w):
        calls.append(1)
        return float("nan") if len(calls) == 3 else float(w.sum())

    problem = pc.DistributedProblem([pc.Agent(cp.sum_squares(x - 1), shared=x)], metrics={"total": metric})
    with pytest.raises(pc.errors.RunFailed, match="metrics\\['total'\\]") as info:
        problem.solve(rounds=5, rho=1.0, eta=0.2)
    assert info.value.result.history["round"].tolist() == [1, 2]
