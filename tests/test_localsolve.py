"""The local-solve layer (issue 28, point 1): each strategy against a fresh CVXPY solve of the same local problem,
the strategy chosen for each kind of problem, factorizations reused until rho changes, one error policy
(fallbacks, RunFailed naming the agent, the round and the status), and UnsupportedError for a cone no strategy
takes."""

from __future__ import annotations

import math
import warnings

import cvxpy as cp
import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import PRADMM, ExactADMM, LinearizedADMM, RandomizedADMM
from privcvx.errors import PrivacyError, RunFailed, SolverError, UnsupportedError
from privcvx.localsolve import CERTIFIED_ERROR, STRATEGIES, LocalProblem, StrategyFailure, cvxpy_adapter, strategies

RNG = np.random.default_rng(28)
#: The reference: SCS (another algorithm than any strategy's) at 1e-12, from scratch.
REFERENCE = {"solver": cp.SCS, "eps_abs": 1e-12, "eps_rel": 1e-12, "max_iters": 500_000}
FEATURES, LABELS = RNG.normal(size=(12, 4)), RNG.normal(size=12)


def _agent(kind: str) -> pc.Agent:
    """One agent of each kind of local problem, on a least-squares objective in R^4."""
    x = cp.Variable(4, nonneg=kind == "attributes")
    loss = cp.sum(cp.logistic(-cp.multiply(np.sign(LABELS), FEATURES @ x))) if kind in ("smooth", "smooth_free") \
        else cp.sum_squares(FEATURES @ x - LABELS)
    objective = loss / 12 + 0.1 * cp.sum_squares(x)
    constraints = {"ridge": [], "smooth_free": [], "equality": [cp.sum(x) == 1], "box": [x >= -0.3, x <= 0.3],
                   "smooth": [x >= -0.3, x <= 0.3],
                   "polyhedral": [x >= -0.3, cp.sum(x) <= 0.2], "soc": [cp.norm(x) <= 0.5],
                   "attributes": [cp.sum(x) <= 1]}[kind]
    return pc.Agent(objective, constraints, shared=x, name=f"agent-{kind}")


def _local(kind: str, objective: bool) -> tuple[pc.Agent, LocalProblem]:
    agent = _agent(kind)
    return agent, LocalProblem(agent, pc.DistributedProblem([agent]).layouts[0], objective=objective)


def _fresh_step(agent: pc.Agent, linear: np.ndarray, weight: float) -> np.ndarray:
    """argmin f + <linear, x> + weight/2 ||x||^2 over W, built and solved from scratch by CVXPY and Clarabel."""
    (x,) = agent.variables
    problem = cp.Problem(cp.Minimize(agent.objective + linear @ x + weight / 2 * cp.sum_squares(x)), agent.constraints)
    problem.solve(**REFERENCE)
    assert problem.status == cp.OPTIMAL
    return np.asarray(x.value)


def _exact_projection(agent: pc.Agent, kind: str, point: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """argmin_{x in W} sum_i w_i (x_i - p_i)^2 in closed form (R^n, the box, the hyperplane sum x = 1, the ball
    ||x|| <= 0.5 under uniform weights), or by a fresh Clarabel solve for the polyhedron."""
    if kind == "ridge":
        return point
    if kind == "box":
        return np.clip(point, -0.3, 0.3)
    if kind == "equality":
        return point - (point.sum() - 1.0) / np.sum(1.0 / weights) / weights
    if kind == "soc":
        return point * min(1.0, 0.5 / np.linalg.norm(point))
    (x,) = agent.variables
    problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(weights, cp.square(x - point)))), agent.constraints)
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert problem.status == cp.OPTIMAL
    return np.asarray(x.value)


STEPS = {"ridge": "factorization", "equality": "factorization", "box": "osqp", "polyhedral": "osqp",
         "soc": "clarabel", "attributes": "cvxpy"}


@pytest.mark.parametrize("kind", list(STEPS))
def test_each_step_strategy_is_chosen_and_matches_a_fresh_solve(kind):
    """The step of each strategy against a fresh CVXPY solve at the reference tolerances, at its own draws (the
    module's generator made the draws depend on which tests ran before in the worker, and the test fail in some
    orders). On the ball, an interior-point answer with the cone active is as close as the layer's stated tolerance
    allows (`strategies.STANDARD_TOLERANCE` on the gap: sqrt(2 gap / weight) for a weight-strongly convex step; up to
    1.6e-5 from a Clarabel solve at 1e-13 in 200 draws, SCS's reference up to 5.4e-6); elsewhere 1e-7."""
    agent, local = _local(kind, objective=True)
    assert local.strategy == STEPS[kind] and local.kind == "exact"
    rng = np.random.default_rng(list(STEPS).index(kind))
    for weight in (0.5, 3.0):
        linear = rng.normal(size=4)
        step = local.step(linear, weight)
        tolerance = math.sqrt(2 * strategies.STANDARD_TOLERANCE / weight) if kind == "soc" else 1e-7
        assert np.max(np.abs(step - _fresh_step(agent, linear, weight))) <= tolerance
    assert local.stats.solves == 2 and local.stats.fallbacks == 0 and local.stats.inaccurate == 0
    assert local.stats.strategies == {STEPS[kind]: 2}


PROJECTIONS = {"ridge": ("free", "closed_form"), "box": ("box", "closed_form"), "equality": ("conic", "factorization"),
               "polyhedral": ("conic", "clarabel"), "soc": ("conic", "clarabel")}


@pytest.mark.parametrize("kind", list(PROJECTIONS))
def test_each_projection_strategy_is_chosen_and_matches_a_fresh_solve(kind):
    agent, local = _local(kind, objective=False)
    assert (local.kind, local.strategy) == PROJECTIONS[kind]
    assert local.error_bound == (0.0 if local.strategy == "closed_form" else math.inf)  # not asked: not certified
    certified = LocalProblem(agent, local.layout, certified=True)
    assert certified.error_bound == (0.0 if local.strategy == "closed_form" else CERTIFIED_ERROR)
    weights = np.full(4, 3.0) if kind == "soc" else np.array([1.0, 2.0, 2.0, 5.0])
    for _ in range(3):
        point = RNG.normal(size=4)
        assert np.max(np.abs(local.project(point, weights) - _exact_projection(agent, kind, point, weights))) <= 1e-7


@pytest.mark.parametrize("kind", ["ridge", "box", "soc"])
def test_factorizations_are_reused_until_rho_changes(kind):
    _, local = _local(kind, objective=True)
    counts = []
    for rho in (1.0, 1.0, 1.0, 2.0, 2.0, 1.0):
        local.step(RNG.normal(size=4), rho)
        counts.append(local.stats.refactors)
    assert counts == [1, 1, 1, 2, 2, 3]


def test_a_failing_strategy_falls_back_with_the_same_data_and_is_counted():
    agent, local = _local("box", objective=True)
    linear = RNG.normal(size=4)
    expected = local.step(linear, 2.0)

    def failing(*args):
        raise StrategyFailure("OSQP status 'injected'")

    local.chain[0].solve = failing
    assert np.max(np.abs(local.step(linear, 2.0) - expected)) <= 1e-7
    assert local.stats.fallbacks == 1 and local.stats.strategies == {"osqp": 1, "clarabel": 1}
    assert local.report(diagnostics=False) == {"kind": "exact", "strategy": "osqp", "solves": 2}
    assert set(local.report(diagnostics=True)) == {"kind", "strategy", "solves", "fallbacks", "retries", "inaccurate",
                                                   "refactors", "seconds", "strategies"}


@pytest.mark.parametrize("kind", ["smooth", "smooth_free"])
def test_a_smooth_step_is_chosen_and_matches_a_fresh_solve(kind):
    """A logistic loss (not a QP: exponential cones) over a box or R^n: L-BFGS-B with its certificate."""
    agent, local = _local(kind, objective=True)
    assert local.strategy == "lbfgsb" and local.kind == "exact"
    rng = np.random.default_rng(32)
    for weight in (0.5, 3.0):
        linear = rng.normal(size=4)
        assert np.max(np.abs(local.step(linear, weight) - _fresh_step(agent, linear, weight))) <= 1e-7
    assert local.stats.solves == 2 and local.stats.fallbacks == 0 and local.stats.strategies == {"lbfgsb": 2}


def test_a_smooth_step_is_certified_or_handed_to_clarabel(monkeypatch):
    """The logistic step over the box (some coordinates at a bound) is accepted with a certified distance: it lies
    within SMOOTH_TARGET of SCS's answer at 1e-12. Stopped after one L-BFGS-B iteration, the gradient-only polish
    brings it to a certified answer; without the polish the certificate fails, and Clarabel answers the same (w, b),
    counted as a fallback; a step built for a private release (``certified=True``) cannot take that fallback (the
    exponential cones cannot be certified): SolverError names the agent and the certificate."""
    agent, local = _local("smooth", objective=True)
    linear = np.array([3.0, -3.0, 0.2, -0.1])  # pushes two coordinates onto the box
    step = local.step(linear, 2.0)
    assert np.sum(np.abs(step) == 0.3) == 2
    reference = _fresh_step(agent, linear, 2.0)
    assert np.linalg.norm(step - reference) <= strategies.SMOOTH_TARGET
    monkeypatch.setitem(strategies.LBFGSB_OPTIONS, "maxiter", 1)
    agent, polished = _local("smooth", objective=True)
    assert np.linalg.norm(polished.step(linear, 2.0) - reference) <= strategies.SMOOTH_TARGET
    assert polished.stats.fallbacks == 0 and polished.stats.strategies == {"lbfgsb": 1}
    monkeypatch.setattr(strategies, "POLISH_STEPS", 0)
    agent, stopped = _local("smooth", objective=True)
    assert np.max(np.abs(stopped.step(linear, 2.0) - reference)) <= 1e-7
    assert stopped.stats.fallbacks == 1 and stopped.stats.strategies == {"clarabel": 1}
    assert stopped.error_bound == math.inf  # Clarabel's answers on exponential cones are not certified
    private = LocalProblem(agent, stopped.layout, objective=True, certified=True)
    assert private.certifier is None and private.error_bound == strategies.SMOOTH_TARGET  # L-BFGS-B alone
    with pytest.raises(SolverError, match="agent-smooth.*certified distance"):
        private.step(linear, 2.0)


def test_pr_admm_releases_certified_smooth_steps_and_refuses_uncertified_conic_ones(monkeypatch):
    """PR-ADMM on three logistic agents: L-BFGS-B's steps are certified and released; without it the conic form
    (exponential cones) on Clarabel cannot be certified, and the calibration refuses it (PrivacyError naming the
    agent) instead of releasing a step with no error bound."""
    def problem() -> pc.DistributedProblem:
        agents = []
        for p in range(3):
            x = cp.Variable(4)
            data = np.random.default_rng(p).normal(size=(10, 4))
            agents.append(pc.Agent(cp.sum(cp.logistic(data @ x)) / 10, [x >= -1.0, x <= 1.0], shared=x,
                                   name=f"site-{p}", declared=pc.Declared(sensitivity=pc.Sensitivity(l2=0.2))))
        return pc.DistributedProblem(agents)

    method = PRADMM(epsilon=5.0, delta=1e-5)
    smooth = problem().solve(method, rounds=6, seed=3)
    assert {r["strategy"] for r in smooth.info["local_solve"].values()} == {"lbfgsb"}
    monkeypatch.setattr(strategies.SmoothStep, "accepts", classmethod(lambda cls, local: False))
    with pytest.raises(PrivacyError, match="site-0.*cannot be certified"):
        problem().solve(method, rounds=6, seed=3)


def _box_agents(count: int = 3) -> pc.DistributedProblem:
    """Agents with box-constrained least squares in R^4 (their exact step is a QP on OSQP)."""
    rng = np.random.default_rng(7)
    agents = []
    for p in range(count):
        x = cp.Variable(4)
        features, labels = rng.normal(size=(10, 4)), rng.normal(size=10)
        agents.append(pc.Agent(cp.sum_squares(features @ x - labels) / 10, [x >= -0.3, x <= 0.3], shared=x,
                               name=f"box-{p}"))
    return pc.DistributedProblem(agents)


def test_a_warm_started_qp_step_resumes_bitwise_and_moves_answers_only_at_the_solvers_tolerance(tmp_path, monkeypatch):
    """ExactADMM's QP steps start from OSQP's last answer, which the checkpoint keeps: a run stopped after round 4 and
    resumed repeats the uninterrupted run bitwise, and a resumed run that lost the point does not. The warm starts
    move the answers only within OSQP's tolerances: the run's steps stay within 1e-8 of steps started cold."""
    clean = _box_agents().solve(ExactADMM(rho=1.0), rounds=8)
    assert clean.info["local_solve"]["box-0"]["strategy"] == "osqp"
    columns = [c for c in clean.history.columns if c != "time_s"]

    def resumed() -> pc.Result:
        path = tmp_path / f"run-{len(list(tmp_path.iterdir()))}.ckpt"
        _box_agents().solve(ExactADMM(rho=1.0), rounds=8, checkpoint=path, callback=lambda row: row["round"] < 4)
        return _box_agents().solve(ExactADMM(rho=1.0), rounds=8, resume=path)

    assert resumed().history[columns].equals(clean.history[columns])
    with monkeypatch.context() as patch:
        patch.setattr(strategies.OSQPStep, "load_warm_state", lambda self, state: None)
        assert not resumed().history[columns].equals(clean.history[columns])
    with monkeypatch.context() as patch:  # every step from OSQP's fresh state
        original = strategies.OSQPStep.solve
        patch.setattr(strategies.OSQPStep, "solve", lambda self, w, b, point, warm, stats: original(
            self, w, b, point, False, stats))
        cold = _box_agents().solve(ExactADMM(rho=1.0), rounds=8)
    assert 0.0 < np.max(np.abs(np.asarray(cold.w) - np.asarray(clean.w))) <= 1e-8


def test_an_unsupported_cvxpy_version_takes_cvxpys_public_path(monkeypatch):
    assert cvxpy_adapter.cvxpy_supported("1.9.3") and not cvxpy_adapter.cvxpy_supported("1.4.2")
    agent, fast = _local("box", objective=True)
    monkeypatch.setattr(cvxpy_adapter, "cvxpy_supported", lambda: False)
    slow = LocalProblem(agent, pc.DistributedProblem([agent]).layouts[0], objective=True)
    assert slow.strategy == "cvxpy"
    linear = RNG.normal(size=4)
    assert np.max(np.abs(slow.step(linear, 1.0) - fast.step(linear, 1.0))) <= 1e-7


def _finite_set_problem() -> pc.DistributedProblem:
    x = cp.Variable(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pc.DistributedProblem([pc.Agent(cp.sum_squares(x - 1), [cp.constraints.FiniteSet(x[0], [0.0, 1.0])],
                                               shared=x, name="lattice")])


def test_a_local_problem_no_strategy_accepts_names_the_agent_and_the_cone():
    problem = _finite_set_problem()
    with pytest.raises(UnsupportedError, match=r"\[agent 'lattice'\].*FiniteSet") as info:
        LocalProblem(problem.agents[0], problem.layouts[0], objective=True)
    assert info.value.agent == "lattice" and "FiniteSet" in info.value.feature
    with pytest.raises(pc.errors.PrivcvxError, match=r"lattice.*FiniteSet"):
        problem.solve(ExactADMM(), rounds=2)


def _two_agents() -> pc.DistributedProblem:
    agents = []
    for p in range(2):
        x = cp.Variable(3)
        data = np.random.default_rng(p).normal(size=(8, 3))
        agents.append(pc.Agent(cp.sum_squares(data @ x - 1.0), [x >= -0.5, x <= 0.5], shared=x, name=f"zone-{p}"))
    return pc.DistributedProblem(agents)


def test_a_solver_failure_in_round_t_raises_run_failed_with_agent_round_status_and_history(monkeypatch):
    problem = _two_agents()
    calls = {"n": 0}
    for kind in STRATEGIES:
        def solve(self, *args, original=kind.solve):
            if self.local.agent_name == "zone-1" and calls["n"] >= 3:  # zone-1's fourth exact step: round 4
                raise StrategyFailure(f"{self.name} status 'InjectedFailure'")
            return original(self, *args)

        monkeypatch.setattr(kind, "solve", solve)
    original_step = LocalProblem.tilted_step  # every step's (`LocalProblem.step` negates its linear term into it)

    def counted(self, *args, **kwargs):
        answer = original_step(self, *args, **kwargs)
        calls["n"] += self.agent_name == "zone-1"
        return answer

    monkeypatch.setattr(LocalProblem, "tilted_step", counted)
    with pytest.raises(RunFailed, match=r"round 4.*zone-1.*osqp status 'InjectedFailure'") as info:
        problem.solve(ExactADMM(), rounds=10)
    assert info.value.agent == "zone-1"
    assert info.value.result.history["round"].tolist() == [1, 2, 3]


def test_every_method_reports_its_local_solves_the_same_way():
    problem = _two_agents()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = {"exact": problem.solve(ExactADMM(), rounds=3),
                "linearized": problem.solve(LinearizedADMM(local_updates=2), rounds=3),
                "pr_admm": problem.solve(PRADMM(), rounds=3),
                "proximal": problem.solve(RandomizedADMM(D=4.0, update="exact"), rounds=3, seed=1),
                "private": problem.solve(ExactADMM(), rounds=3, diagnostics=False)}
    for name, result in runs.items():
        reports = result.info["local_solve"]
        assert list(reports) == ["zone-0", "zone-1"], name
        keys = {"kind", "strategy", "solves"} | (set() if name == "private" else
                                                 {"fallbacks", "retries", "inaccurate", "refactors", "seconds",
                                                  "strategies"})
        assert all(set(report) == keys for report in reports.values()), name
    assert runs["exact"].info["local_solve"]["zone-0"]["strategy"] == "osqp"
    assert runs["linearized"].info["local_solve"]["zone-0"] == {**runs["linearized"].info["local_solve"]["zone-0"],
                                                                "kind": "box", "strategy": "closed_form", "solves": 7}
