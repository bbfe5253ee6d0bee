"""Certified l2 distances of the local-solve layer's answers (privcvx/localsolve/certificate.py) and the calibrations
that count them (docs/privacy.md, "Solver error").

(a) On sets with closed-form projections (ball, halfspace, second-order cone, box intersect hyperplane, computed here
independently) the released point is within CERTIFIED_ERROR of the exact projection and the certificate bounds its
true distance. (b) An answer moved by 1e-5 gets a certificate at least its true distance. (c) OutPert's derived
sensitivity, DPDG's and PR-ADMM's add 2 e in l2 (2 sqrt(n) e in l1) on a conic set, recomputed here. (d) On case14's
zones under OutG every conic step is certified within CERTIFIED_ERROR.
"""

from __future__ import annotations

import math
import warnings

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

import privcvx as pc
from privcvx.algorithms import PRADMM, DPDistributedGradient, LinearizedADMM
from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.dp_gradient_accuracy import optimal_noise_decay
from privcvx.errors import PrivacyError
from privcvx.localsolve import CERTIFIED_ERROR, LocalProblem

RNG = np.random.default_rng(2026)


# ---- independent exact projections -------------------------------------------------------------------------------
def _ball(point: np.ndarray, radius: float = 1.0) -> np.ndarray:
    return point * min(1.0, radius / np.linalg.norm(point))


def _halfspace(point: np.ndarray, normal: np.ndarray, level: float) -> np.ndarray:
    return point - max(0.0, normal @ point - level) / (normal @ normal) * normal


def _second_order_cone(point: np.ndarray) -> np.ndarray:
    t, u = point[0], point[1:]
    norm = np.linalg.norm(u)
    if norm <= t:
        return point
    if norm <= -t:
        return np.zeros_like(point)
    return 0.5 * (1.0 + t / norm) * np.concatenate([[norm], u])


def _box_hyperplane(point: np.ndarray, low: float, high: float, total: float) -> np.ndarray:
    """clip(point - nu, low, high) with sum = total: nu by bisection to the last bit."""
    a, b = float(np.min(point) - high) - 1.0, float(np.max(point) - low) + 1.0
    for _ in range(200):
        mid = 0.5 * (a + b)
        if np.clip(point - mid, low, high).sum() > total:
            a = mid
        else:
            b = mid
    return np.clip(point - 0.5 * (a + b), low, high)


def _agent(constraints, x) -> tuple[pc.Agent, LocalProblem]:
    agent = pc.Agent(cp.sum_squares(x), constraints(x), shared=x)
    return agent, LocalProblem(agent, pc.DistributedProblem([agent]).layouts[0], certified=True)


NORMAL = np.array([1.0, -2.0, 0.5, 1.5])
SETS = {
    "ball": (lambda x: [cp.norm(x) <= 1.0], _ball),
    "halfspace": (lambda x: [NORMAL @ x <= 0.3], lambda p: _halfspace(p, NORMAL, 0.3)),
    "soc": (lambda x: [cp.SOC(x[0], x[1:])], _second_order_cone),
    "box_hyperplane": (lambda x: [x >= -0.5, x <= 0.8, cp.sum(x) == 1.0], lambda p: _box_hyperplane(p, -0.5, 0.8, 1.0)),
}


def _ulps(reference: np.ndarray) -> float:
    """The rounding of a float64 closed-form projection: 8 eps per unit of its norm."""
    return 8.0 * np.finfo(float).eps * (1.0 + float(np.linalg.norm(reference)))


@pytest.mark.parametrize("name", list(SETS))
def test_released_projections_are_within_the_certificate_of_the_exact_ones(name):
    constraints, exact = SETS[name]
    _, local = _agent(constraints, cp.Variable(4))
    assert local.certifier is not None and local.error_bound == CERTIFIED_ERROR
    for _ in range(6):
        point = 2.0 * RNG.normal(size=4)
        released = local.project(point, np.ones(4))
        reference = exact(point)
        distance = float(np.linalg.norm(released - reference))
        # the float64 reference is itself a few ulps off; certificates of refined points go below that
        # (tests/test_certified_reference.py checks them against rational-exact projections)
        assert distance <= local.certificate + _ulps(reference) and local.certificate <= CERTIFIED_ERROR, \
            (name, distance, local.certificate)


def _solved(local: LocalProblem, point: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clarabel's raw answer (x, y) to the projection of point (weights 2, as `LocalProblem.project` scales them),
    with the certifier set up for it, and q."""
    import clarabel

    from privcvx.localsolve.strategies import clarabel_settings

    data, certifier = local.data, local.certifier
    hessian = (data.P + sp.diags(np.where(np.isin(np.arange(data.P.shape[0]), data.columns), 2.0, 0.0))).tocsc()
    q = data.q.copy()
    q[data.columns] -= 2.0 * point
    certifier.set_hessian(hessian)
    solution = clarabel.DefaultSolver(sp.triu(hessian, format="csc"), q, data.A, data.b, data.cones,
                                      clarabel_settings({})).solve()
    return np.asarray(solution.x), np.asarray(solution.z), q


@pytest.mark.parametrize("name", ["ball", "box_hyperplane"])
def test_a_perturbed_answer_gets_a_certificate_at_least_its_true_distance(name):
    """Moving the answer by 1e-5 (in z) is seen: the unpolished certificate of the moved point is at least its true
    distance, of the order of 1e-5 (the certificate has power: a move along the set's normal is repaired back, so
    only the largest is required to stay large); the polished one certifies its own point."""
    constraints, exact = SETS[name]
    _, local = _agent(constraints, cp.Variable(4))
    certifier, columns = local.certifier, local.data.columns
    rng, largest = np.random.default_rng(5), 0.0  # its own stream: the outcome does not depend on the test order
    for _ in range(4):
        point = 2.0 * rng.normal(size=4)
        x, y, q = _solved(local, point)
        moved = x.copy()
        direction = rng.normal(size=4)
        moved[columns] += 1e-5 * direction / np.linalg.norm(direction)
        plain = certifier.bound(moved, certifier.dual_cone_projection(y), q, 2.0)
        reference = exact(point)
        true = float(np.linalg.norm(plain.x[columns] - reference))
        assert true <= plain.distance
        largest = max(largest, true)
        polished = certifier.certify(moved, y, q, 2.0)
        assert float(np.linalg.norm(polished.x[columns] - reference)) <= polished.distance + _ulps(reference)
        assert polished.distance <= CERTIFIED_ERROR
    assert largest >= 5e-6


def test_an_unbounded_auxiliary_variable_is_not_certified_and_privacy_refuses_it():
    """||x||_2 <= t with t free above (no bound on the epigraph variable): the dual bound fails, the step has no
    certificate (error_bound inf), and a private calibration on it is refused, naming the agent."""
    from privcvx.privacy.sensitivity import projected_sensitivity

    x, t = cp.Variable(3), cp.Variable()
    agent = pc.Agent(t, [cp.norm(x) <= t, x[0] >= -1.0], shared=x, name="lifted")
    problem = pc.DistributedProblem([agent])
    local = LocalProblem(agent, problem.layouts[0], objective=True, penalized=problem.layouts[0].shared_local,
                         certified=True)
    assert local.certifier is None and local.error_bound == math.inf
    with pytest.raises(PrivacyError, match="lifted.*cannot be certified"):
        projected_sensitivity(pc.Sensitivity(l2=1.0), "conic", 3, solver_error=local.error_bound, agent="lifted")


# ---- (c) the calibrations ---------------------------------------------------------------------------------------
def _ball_agents(count: int = 2, box: bool = False) -> pc.DistributedProblem:
    agents = []
    for p in range(count):
        x = cp.Variable(3)
        target = np.random.default_rng(p).normal(size=3)
        constraints = [x >= -1.0, x <= 1.0] if box else [cp.norm(x) <= 1.0]
        agents.append(pc.Agent(cp.sum_squares(x - target) / 2, constraints, shared=x, name=f"ball-{p}",
                               declared=pc.Declared(sensitivity=pc.Sensitivity(l1=0.6, l2=0.3),
                                                    strong_convexity=1.0, smoothness=1.0)))
    return pc.DistributedProblem(agents)


@pytest.mark.parametrize("solver_error", [None, 3e-5])
def test_outpert_derived_sensitivity_adds_twice_the_l2_error_on_a_conic_set(solver_error):
    """OutPert's e is its own `solver_error` (default 1e-5, not the layer's CERTIFIED_ERROR): the projection is
    certified within it and Delta^out carries 2e."""
    problem = _ball_agents()
    options = {} if solver_error is None else {"solver_error": solver_error}
    privacy = pc.OutputPerturbation(pc.Gaussian(1.0, 1e-5), sensitivity="derived", **options)
    e = 1e-5 if solver_error is None else solver_error
    program = LinearizedADMM(privacy=privacy).agent_program(problem.agents[0],
                                                            AgentContext.for_agent(problem, 0, seed=1))
    assert program.projection.kind == "conic" and program.projection.error_bound == e
    weights = np.array([4.0, 5.0, 8.0])
    got = program._release_sensitivity(None, weights)
    assert got.l2 == pytest.approx(0.3 / 4.0 + 2 * e, rel=1e-14)  # Delta_2 / min m + 2 e
    assert got.l1 == pytest.approx(math.sqrt(3) * 0.3 / 4.0 + 2 * math.sqrt(3) * e, rel=1e-14)
    program.projection.project(np.array([2.0, -1.0, 0.5]), np.ones(3))
    assert program.projection.certificate <= e


@pytest.mark.parametrize("bad", [0.0, -1e-6, float("nan"), float("inf"), "1e-6", True])
def test_a_bad_solver_error_is_refused_naming_it(bad):
    with pytest.raises(PrivacyError, match="solver_error"):
        pc.OutputPerturbation(pc.Gaussian(1.0, 1e-5), solver_error=bad)


@pytest.mark.parametrize("privacy, certified", [
    (pc.ObjectivePerturbation(pc.Gaussian(1.0, 1e-5)), False),  # the step is post-processing of the noisy gradient
    (pc.OutputPerturbation(pc.Gaussian(1.0, 1e-5), sensitivity=pc.Sensitivity(l1=0.1, l2=0.1)), False),  # declared
    (pc.OutputPerturbation(pc.Gaussian(1.0, 1e-5), sensitivity="derived"), True),  # Delta_2^out + 2e needs e
])
def test_only_a_release_whose_sensitivity_covers_the_step_certifies_it(privacy, certified):
    problem = _ball_agents()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = LinearizedADMM(privacy=privacy).agent_program(problem.agents[0],
                                                                AgentContext.for_agent(problem, 0, seed=1))
    assert program.projection.certified is certified
    assert (program.projection.error_bound == 1e-5) is certified  # OutPert's default solver_error


def test_dpdg_sensitivity_adds_twice_sqrt_n_the_error_on_a_conic_set():
    problem = _ball_agents()
    algorithm = DPDistributedGradient(epsilon=0.5, q=0.8).prepare(problem, pc.Topology.ring().bind(problem.names), 1)
    program = algorithm.agent_program(problem.agents[0], AgentContext.for_agent(problem, seed=9))
    e = program.projection.error_bound
    assert e == 1e-5  # DPDG's own solver_error (as OutPert's), not the layer's CERTIFIED_ERROR
    # l1 on a conic set: sqrt(n) l2 gamma, plus 2 sqrt(n) e (an l2 error bound seen in l1)
    assert algorithm.release_sensitivity(problem.agents[0], "conic", 3, 0.25, e) == pytest.approx(
        math.sqrt(3) * 0.3 * 0.25 + 2 * math.sqrt(3) * 1e-5, rel=1e-14)
    assert program.solver_term == pytest.approx(2 * math.sqrt(3) * 1e-5, rel=1e-15)


def test_pr_admm_sensitivity_adds_twice_the_l2_error_on_a_conic_set():
    problem = _ball_agents(3)
    topology = pc.Topology.ring().bind(problem.names)
    algorithm = PRADMM(epsilon=1.0, delta=1e-5, eta=0.5, strong_convexity=1.0)
    context = AgentContext.for_agent(problem, 0, seed=11, topology=topology, rounds=5)
    program = algorithm.agent_program(problem.agents[0], context)
    assert program.solver.certifier is not None and program.solver.error_bound == CERTIFIED_ERROR
    degree = len(topology.neighbours(problem.names[0], 1))
    exact = 0.3 / (1.0 + 2 * 0.5 * degree)  # S_i / (mu_f + 2 eta |V_i|)
    assert program.sensitivity == pytest.approx(exact + 2 * CERTIFIED_ERROR, rel=1e-12)


# ---- (d) case14 -------------------------------------------------------------------------------------------------
def test_case14_outg_steps_are_all_certified():
    powerflow = pytest.importorskip("powerflow")
    from privcvx.localsolve import problem as local_problem

    seen: list[LocalProblem] = []
    original = local_problem.LocalProblem.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(self)

    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as patch:
        warnings.simplefilter("ignore")
        patch.setattr(local_problem.LocalProblem, "__init__", recording)
        problem = powerflow.zonal_problem("case14", 3)
        problem.solve(rounds=2, local_updates=1, rho=100.0, eta=pc.schedules.inverse_sqrt(),
                      privacy=pc.OutputPerturbation(pc.Gaussian(1.0, 0.01), sensitivity="derived"), seed=0)
    conic = [local for local in seen if local.kind == "conic" and local.stats.solves]
    assert conic and all(local.enforcing for local in conic)
    assert all(0.0 < local.largest_certificate <= CERTIFIED_ERROR for local in conic)


def test_dpdg_on_a_conic_set_pays_the_solver_term_from_its_share_with_bounded_noise():
    """The solver's E = 2 sqrt(n) e does not decay with the geometric step. Release t costs the geometric split's
    epsilon_t at (1 - share) epsilon plus share epsilon / T, so the run spends exactly their sum (closed form below)
    and the late noise stays near E T / (share epsilon). Before, M_{t+1} was scaled by Delta(t) / (S gamma_t), which
    grows like (p/q)^t (about 1e22 here by round 200): the case14 study's runs ended at objectives of 1e9-1e11."""
    problem = _ball_agents()
    epsilon, q, rounds, e = 0.5, 0.7, 200, 1e-5
    result = problem.solve(DPDistributedGradient(epsilon=epsilon, q=q), rounds=rounds, seed=3, diagnostics=True)
    p, share, dim = optimal_noise_decay(q), 0.5, 3
    spent = (1 - share) * epsilon * (1 - (q / p) ** rounds) + share * epsilon  # sum over the T releases
    np.testing.assert_allclose(result.privacy["epsilon_basic"], spent, rtol=1e-12)
    assert (result.privacy["epsilon_basic"] <= epsilon * (1 + 1e-12)).all()  # up to rounding
    floor = 2 * math.sqrt(dim) * e * rounds / (share * epsilon)  # E T / (share epsilon): 0.0139
    last = result.history["noise_magnitude"].iloc[-60:]  # sum |w| over 2 agents x 3 coordinates, mean 6 M
    assert last.mean() == pytest.approx(6 * floor, rel=0.25)


def test_dpdg_refuses_a_run_past_its_horizon_and_resumes_only_the_same_rounds(tmp_path):
    problem = _ball_agents()
    topology = pc.Topology.ring().bind(problem.names)
    with pytest.raises(pc.errors.ParameterError, match="horizon") as raised:
        DPDistributedGradient(epsilon=0.5, horizon=10).prepare(problem, topology, 11)
    assert raised.value.argument == "horizon"
    ready = DPDistributedGradient(epsilon=0.5).prepare(problem, topology, 12)
    assert ready.horizon == 12 and ready.calibrated_to_rounds
    boxes = _ball_agents(box=True)
    assert DPDistributedGradient(epsilon=0.5).prepare(boxes, topology, 12).horizon is None  # no solver term: extends


@pytest.mark.parametrize("setting, bad", [("solver_share", 0.0), ("solver_share", 1.0), ("solver_share", "half"),
                                          ("solver_error", -1e-6), ("solver_error", float("nan")), ("horizon", 0),
                                          ("horizon", 2.5), ("q", 1.0), ("q", 0.0), ("q", True)])
def test_dpdg_refuses_bad_settings_naming_them(setting, bad):
    with pytest.raises(pc.errors.PrivcvxError) as raised:
        DPDistributedGradient(epsilon=0.5, **{setting: bad})
    assert raised.value.argument == setting


def test_a_study_file_passes_outperts_solver_error(tmp_path):
    """``privacy = { perturbation = "output", solver_error = ... }`` reaches OutputPerturbation; the default is 1e-5."""
    from privcvx.study_file import load

    path = tmp_path / "study.toml"
    method = ('[[methods]]\nlabel = "{label}"\nalgorithm = "LinearizedADMM"\n'
              'privacy = {{ perturbation = "output"{extra} }}\n')
    path.write_text('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n'
                    + method.format(label="A", extra=", solver_error = 3e-5") + method.format(label="B", extra=""))
    first, second = load(path, {}).study.methods
    assert first.algorithm.privacy.solver_error == 3e-5 and second.algorithm.privacy.solver_error == 1e-5


@pytest.mark.parametrize("bad", [-1e-4, float("nan"), float("inf"), "1e-4"])
def test_a_bad_declared_error_of_a_local_problem_is_refused_naming_the_agent(bad):
    from privcvx.errors import ParameterError

    x = cp.Variable(3)
    agent = pc.Agent(cp.sum_squares(x), [cp.norm(x) <= 1.0], shared=x, name="ball")
    with pytest.raises(ParameterError, match="ball.*certified"):
        LocalProblem(agent, pc.DistributedProblem([agent]).layouts[0], certified=bad)
