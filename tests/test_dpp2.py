"""DPP^2 (paper 003) and its baselines: the invariants of Algorithm 1, the compact form (20)-(21), Theorem 3's
accountant, the eavesdropper's replay, nonconvex support, and conformance of DPP2, DiaDSP and PPDC."""

from __future__ import annotations

import math
import warnings

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import DPP2, PPDC, AgentContext, DiaDSP, DPDistributedGradient, LinearizedADMM
from privcvx.algorithms.dpp2 import DPP2Agent, MixingSequence, TranscriptReplay, consensus_gap
from privcvx.algorithms.gradient_agents import laplacian
from privcvx.errors import NotDCPError, ParameterError, PrivacyError, UnsupportedError
from privcvx.privacy.dpp2_accountant import DPP2Privacy
from problems.nonconvex_logistic import PAPER_FEATURE_BOUND, nonconvex_logistic, paper_data

NODES, DIM = 6, 3


@pytest.fixture(scope="module")
def problem() -> pc.DistributedProblem:
    features, labels = paper_data(nodes=NODES, samples=40, dim=DIM, seed=1)
    return nonconvex_logistic(features, labels, feature_bound=PAPER_FEATURE_BOUND)


@pytest.fixture(scope="module")
def topology(problem) -> pc.Topology:
    graph = nx.cycle_graph(problem.names)
    graph.add_edges_from([(problem.names[0], problem.names[3]), (problem.names[1], problem.names[4])])
    return pc.Topology(graph)


def _quiet_solve(problem, algorithm, topology, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.errors.ReproducibleNoiseWarning)
        return problem.solve(algorithm, topology, **options)


def _traces(result) -> tuple[np.ndarray, np.ndarray]:
    """x_i^k and grad f_i(x_i^k) of every node: arrays (iterations, N, d)."""
    reports = result.info["agents"]
    return (np.stack([r["trace_x"] for r in reports], axis=1), np.stack([r["trace_gradient"] for r in reports], axis=1))


NOISY = {"u_w": 0.3, "u_e": 0.3, "r": 0.95}


# ---- the invariants of Algorithm 1 ---------------------------------------------------------------------------
def test_the_x_trajectory_does_not_depend_on_eta_but_the_messages_do(problem, topology):
    first = _quiet_solve(problem, DPP2(mixing_seed=1, trace=True, **NOISY), topology, rounds=150, seed=4)
    second = _quiet_solve(problem, DPP2(mixing_seed=2, trace=True, **NOISY), topology, rounds=150, seed=4)
    x1, x2 = _traces(first)[0], _traces(second)[0]
    assert x1.shape == (151, NODES, DIM)
    assert np.max(np.abs(x1 - x2)) <= 1e-10 * max(1.0, np.max(np.abs(x1)))
    assert "mixing_seed=<secret>" in first.info["algorithm"] and "=1," not in first.info["algorithm"]
    y1 = [m["y"] for m in first.transcript if "y" in m.payload]
    y2 = [m["y"] for m in second.transcript if "y" in m.payload]
    assert np.max(np.abs(np.array(y1[NODES:]) - np.array(y2[NODES:]))) > 0.1  # y^0 has d^0 = 0: equal


def _drive(problem, topology, algorithm, rounds, keys=None, seed=3):
    """Run the node programs by hand (every message to every node), yielding after each phase-0 step.

    ``keys``: one mixing key per node (a node-specific eta, which the library never does).
    """
    topology = topology.bind(problem.names)
    ready = algorithm.prepare(problem, topology, rounds)
    programs = []
    for i, agent in enumerate(problem.agents):
        context = AgentContext.for_agent(problem, i, seed=seed, topology=topology, rounds=rounds)
        key = ready.mixing_seed if keys is None else keys[i]
        programs.append(DPP2Agent(agent, context, ready, MixingSequence(key, ready.eta)))
    inbox = [m for program in programs for m in program.start()]
    for t in range(1, rounds + 1):
        for phase in (0, 1):
            inbox = [m for program in programs for m in program.step(t, inbox, phase=phase)]
            if phase == 0:
                yield t, programs


def test_q_equals_rho_p_d_at_every_iteration(problem, topology):
    order, p = laplacian(topology.bind(problem.names), "metropolis")
    rho = 10.0
    worst = 0.0
    for _, programs in _drive(problem, topology, DPP2(rho=rho, mixing_seed=5, **NOISY), rounds=200):
        by_name = {program.context.name: program for program in programs}
        d = np.stack([by_name[name].d for name in order])
        q = np.stack([by_name[name].q for name in order])
        worst = max(worst, float(np.max(np.abs(q - rho * p @ d))) / max(1.0, float(np.max(np.abs(q)))))
    assert worst <= 1e-12


def test_converges_to_a_stationary_point_without_and_with_decaying_noise(problem, topology):
    reference = problem.solve_centralized()
    assert reference.status == "local_optimum"
    for settings, tolerance in (({}, 1e-20), (NOISY, 1e-14)):
        result = _quiet_solve(problem, DPP2(mixing_seed=3, trace=True, **settings), topology, rounds=800, seed=6)
        x, g = _traces(result)
        gaps = np.array([consensus_gap(x[k], g[k]) for k in range(len(x))])
        assert gaps[-1] <= tolerance * max(1.0, gaps[0]), settings
        assert np.max(np.abs(x[-1] - reference.w)) <= 1e-6, settings  # the stationary point the reference found
        if settings:  # the decaying noise first slows it: the gap at k = 100 is above the noise-free one
            assert gaps[100] > 0


def test_a_node_specific_eta_breaks_convergence(problem, topology):
    def final_gap(keys):
        for t, programs in _drive(problem, topology, DPP2(mixing_seed=9), rounds=600, keys=keys):
            if t == 600:
                x = np.stack([program.x for program in programs])
                g = np.stack([program.gradient(program.x) for program in programs])
                return consensus_gap(x, g)

    common = final_gap(None)
    assert common <= 1e-12
    with np.errstate(all="ignore"):
        try:
            specific = final_gap(list(range(NODES)))
        except pc.errors.PrivcvxError:  # the gradient overflowed: it diverged
            specific = math.inf
    assert specific >= 1e3 * max(common, 1e-12) and specific > 1.0


# ---- the compact form (20)-(21) --------------------------------------------------------------------------------
def test_node_level_equals_the_compact_form_to_1e_10_over_200_iterations(problem, topology):
    settings = DPP2(mixing_seed=11, trace=True, **NOISY)
    result = _quiet_solve(problem, settings, topology, rounds=200, seed=8)
    x, g = _traces(result)
    order, p = laplacian(topology.bind(problem.names), "metropolis")
    positions = [problem.names.index(name) for name in order]
    x, g = x[:, positions], g[:, positions]
    # The noise, recovered from the transcript with the key and the traced states: w^k = (x + w)^k - x^k, etc.
    replay = TranscriptReplay(order, p, rho=10.0, etas=MixingSequence(11))
    for t in range(1, 201):
        replay.feed([m for m in result.transcript if m.round == t])
    w = np.array(replay.states) - x[:200]
    e = np.array(replay.gradients) - g[:200]
    assert np.max(np.abs(w[0])) > 0 and np.max(np.abs(e[0])) > 0
    gradients = {name: pc.gradients.GradientEvaluator(agent, layout)
                 for name, agent, layout in zip(problem.names, problem.agents, problem.layouts, strict=True)}
    alpha, beta, rho = 0.1, 0.05, 10.0
    big_g = alpha * np.eye(NODES) - beta * p
    xc, qc = np.zeros((NODES, DIM)), np.zeros((NODES, DIM))
    worst = 0.0
    for k in range(200):
        grad = np.stack([gradients[name].gradient(xc[j]) for j, name in enumerate(order)])
        moved = xc + w[k]
        xc, qc = moved - big_g @ (grad + qc + rho * p @ moved) + beta * p @ e[k], qc + rho * p @ moved  # (20)-(21)
        worst = max(worst, float(np.max(np.abs(xc - x[k + 1]))))
    assert worst <= 1e-10


# ---- Theorem 3 --------------------------------------------------------------------------------------------------
def test_theorem_3_accountant_matches_a_direct_sum_and_the_ledger(problem, topology):
    node = DPP2Privacy(delta=0.4, dim=10, alpha=0.0994, smoothness=5.03, u_e=1.0, u_w=0.994)
    for iterations, r in ((50, 0.9), (500, 0.99), (20, 0.5)):
        direct = sum(math.sqrt(10) * (1 / (0.0994 * 1.0) + 1 / 0.994) * 0.0994 * 0.4 / (r ** k * (1 - 0.0994 * 5.03))
                     for k in range(1, iterations + 1))
        assert node.epsilon(iterations, r, include_zero=False) == pytest.approx(direct, rel=1e-12)
        assert node.epsilon(iterations, r) == pytest.approx(direct + math.sqrt(10) * 0.4 / 1.0, rel=1e-12)
    # A run's ledger (basic composition) is Theorem 3 with the k = 0 term, K = T - 1.
    rounds = 40
    result = _quiet_solve(problem, DPP2(mixing_seed=1, **NOISY), topology, rounds=rounds, seed=2)
    mbar = max(agent.smoothness for agent in problem.agents)
    for agent, (_, row) in zip(problem.agents, result.privacy.iterrows(), strict=True):
        bound = DPP2Privacy(delta=agent.sensitivity.l2, dim=DIM, alpha=0.1, smoothness=mbar, u_e=0.3, u_w=0.3)
        assert row["epsilon_basic"] == pytest.approx(bound.epsilon(rounds - 1, 0.95), rel=1e-9)
        assert row["steps"] == 2 * rounds - 1  # z^0..z^{T-1} and y^1..y^{T-1}


def test_inverse_calibration_hits_its_target():
    node = DPP2Privacy(delta=0.1, dim=10, alpha=0.1, smoothness=5.03, u_e=1.0, u_w=1.0)
    for target, iterations in ((1e3, 100), (50.0, 20), (1e6, 500)):
        r = node.calibrate_decay(target, iterations)
        assert 0 < r < 1
        assert node.epsilon(iterations, r) == pytest.approx(target, rel=1e-6)
        scaled = node.calibrate_scale(target / 10, iterations, r)
        assert scaled.epsilon(iterations, r) == pytest.approx(target / 10, rel=1e-6)
    with pytest.raises(PrivacyError, match="even r -> 1"):
        node.calibrate_decay(10.0, 500)  # below K c_i: no decay rate reaches it
    with pytest.raises(PrivacyError, match="alpha \\* Mbar < 1"):
        DPP2Privacy(delta=0.1, dim=10, alpha=0.2, smoothness=5.03, u_e=1.0, u_w=1.0)


# ---- the eavesdropper ------------------------------------------------------------------------------------------
def test_the_eavesdropper_reconstructs_the_states_with_eta_and_not_without(problem, topology):
    result = _quiet_solve(problem, DPP2(mixing_seed=21, trace=True), topology, rounds=300)
    x = _traces(result)[0]
    order, p = laplacian(topology.bind(problem.names), "metropolis")
    x = x[:, [problem.names.index(name) for name in order]]

    def replay(etas: MixingSequence) -> np.ndarray:
        attacker = TranscriptReplay(order, p, rho=10.0, etas=etas)
        for t in range(1, 301):
            attacker.feed([m for m in result.transcript if m.round == t])
        return np.array(attacker.states)

    scale = float(np.max(np.abs(x[-1])))
    with_key = replay(MixingSequence(21))
    assert np.max(np.abs(with_key - x[:300])) <= 1e-9 * max(1.0, scale)
    for guess in (MixingSequence(22), MixingSequence(0, eta=0.5)):  # a wrong key; the mean of eta
        error = np.abs(replay(guess) - x[:300]).max(axis=(1, 2))
        assert np.min(error[10:]) > 0.05 * scale  # it never recovers the states, even as they converge


# ---- nonconvex support -----------------------------------------------------------------------------------------
def test_a_nonconvex_objective_needs_an_oracle_and_a_gradient_only_method(problem, topology):
    x = cp.Variable(2)
    with pytest.raises(NotDCPError, match="gradient oracle"):
        pc.Agent(2 - cp.sum(cp.inv_pos(1 + cp.square(x))), shared=x, name="bumpy")
    for method in (LinearizedADMM(), DPDistributedGradient()):
        with pytest.raises(UnsupportedError, match="nonconvex objectives") as refused:
            problem.solve(method, topology, rounds=2)
        assert type(method).__name__ in str(refused.value) and refused.value.agent == problem.names[0]
    result = problem.solve(DPP2(mixing_seed=0), topology, rounds=5, reference=True)
    assert result.reference.status == "local_optimum"


def test_an_indefinite_g_is_refused(problem, topology):
    graph = topology.bind(problem.names).graph(1)  # Metropolis weights by hand: P = I - W
    degree = dict(graph.degree)
    w = np.zeros((NODES, NODES))
    for i, j in graph.edges:
        a, b = problem.names.index(i), problem.names.index(j)
        w[a, b] = w[b, a] = 1.0 / (1 + max(degree[i], degree[j]))
    w += np.diag(1.0 - w.sum(axis=1))
    largest = float(np.linalg.eigvalsh(np.eye(NODES) - w)[-1])
    assert largest > 1.0
    with pytest.raises(ParameterError, match="not positive definite") as refused:
        problem.solve(DPP2(alpha=0.1, beta=0.1 / largest * (1 + 1e-9), mixing_seed=0), topology, rounds=2)
    assert refused.value.argument == "beta"
    problem.solve(DPP2(alpha=0.1, beta=0.99 * 0.1 / largest, mixing_seed=0), topology, rounds=2)


# ---- the baselines' stated epsilon -------------------------------------------------------------------------------
@pytest.mark.parametrize("method", [DiaDSP(alpha=0.05, u_x=0.5, u_y=0.5, r=0.9),
                                    PPDC(u_x=0.5, u_v=0.5, r=0.9)])
def test_baseline_ledgers_match_their_stated_epsilon(problem, topology, method):
    rounds = 30
    result = _quiet_solve(problem, method, topology, rounds=rounds, seed=1)
    iterations = rounds - 1 if isinstance(method, DiaDSP) else rounds  # DiaDSP sends yt^0..yt^{T-1}; PPDC xt^1..T
    for agent, (_, row) in zip(problem.agents, result.privacy.iterrows(), strict=True):
        assert row["epsilon_basic"] == pytest.approx(method.epsilon_bound(agent.sensitivity.l2, DIM, iterations),
                                                     rel=1e-9)


# ---- the experiment's quick mode ---------------------------------------------------------------------------------
def test_the_experiment_runs_in_quick_mode(tmp_path):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "examples" / "dpp2_experiment.py"
    spec = importlib.util.spec_from_file_location("dpp2_experiment", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--quick", "--out", str(tmp_path)])
    assert {p.name for p in tmp_path.iterdir()} == {"dpp2_fig1.png", "dpp2_fig2.png", "dpp2_fig3.png",
                                                    "dpp2_experiment.json"}
    curve = out["fig1"]["no noise"]
    assert out["fig1_final"]["no noise"] <= 1e-3 * curve[0]  # the noise-free run converges
    assert out["fig2_peak"]["u = 3.0"] > out["fig2_peak"]["u = 0.3"] > out["fig2_peak"]["u = 0"]
    # The same-budget baselines spend DPP2's epsilon by their own accountants (checked where it is finite).
    row = out["fig3"][-1]
    info, dim, iterations = out["graph"], out["config"]["dim"], out["config"]["compare_rounds"] - 1
    target = DPP2Privacy(delta=info["delta"], dim=dim, alpha=0.0994, smoothness=info["mbar"], u_e=1.0,
                         u_w=0.994).epsilon(iterations, row["r"])
    diadsp = DiaDSP(alpha=0.01, u_x=2.0, u_y=row["same_budget_u"]["DiaDSP u_y"], r=row["r"])
    ppdc = PPDC(gamma=65, omega=5, eta=0.01, u_x=row["same_budget_u"]["PPDC u_x"], u_v=1.0, r=row["r"])
    assert diadsp.epsilon_bound(info["delta"], dim, iterations) == pytest.approx(target, rel=1e-9)
    assert ppdc.epsilon_bound(info["delta"], dim, iterations + 1) == pytest.approx(target, rel=1e-9)  # xt^1..xt^T


def test_a_release_beyond_the_ledger_is_refused_clearly(problem, topology):
    with pytest.raises(pc.errors.RunFailed) as failed:  # 0.1^k: the noise vanishes, a release costs > 1e100
        _quiet_solve(problem, DPP2(mixing_seed=0, u_w=1.0, u_e=1.0, r=0.1), topology, rounds=120, seed=1)
    assert isinstance(failed.value.__cause__, PrivacyError) and "decayed" in str(failed.value.__cause__)
