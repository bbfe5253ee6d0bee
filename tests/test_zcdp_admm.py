"""PR-ADMM, PP-ADMM and IPP-ADMM (Ding's thesis, Ch. 3): optimum, noise, certificates, zCDP accounting, graphs."""

from __future__ import annotations

import math

import cvxpy as cp
import dp_accounting
import networkx as nx
import numpy as np
import pytest
from dp_accounting import rdp

import privcvx as pc
from privcvx.algorithms import IPPADMM, PPADMM, PRADMM, AgentContext
from privcvx.algorithms.conformance import consensus_problem
from privcvx.algorithms.pp_admm import lambda_hat_lower_bound
from privcvx.algorithms.pr_admm import IterationDecay, PeriodicDecay, thm2_printed_total, thm3_total
from privcvx.errors import ParameterError, PrivacyError, UnsupportedError
from privcvx.privacy.zcdp import (
    ZCDPLedger,
    calibrate_first_sigma,
    dp_to_zcdp,
    ledger_rho,
    pure_dp_to_zcdp,
    zcdp_to_dp,
)
from problems.datasets import load_breast_cancer
from problems.l2_logistic import binary_labels, decentralized_logistic, thesis_preprocess

ETA = 0.05
pytestmark = pytest.mark.filterwarnings("ignore::privcvx.errors.ReproducibleNoiseWarning")


@pytest.fixture(scope="module")
def logistic():
    X, y = load_breast_cancer()
    problem = decentralized_logistic(thesis_preprocess(X), binary_labels(y, 1), agents=5, lam=0.1)
    return problem, problem.solve_centralized(), pc.Topology.random(seed=3)


def _private(problem, cls, epsilon, **extra):
    return cls(epsilon=epsilon, eta=ETA, strong_convexity=_mu_f(problem), **extra)  # PP/IPP-ADMM: h_i declared


def _mu_f(problem: pc.DistributedProblem) -> float:
    """lam_hat / N, the strong convexity every agent declares."""
    return min(declared.strong_convexity for declared in problem.declared.values())


# ---- (1) convergence and conformance ---------------------------------------------------------------------

def test_non_private_methods_reach_the_centralized_optimum_of_the_logistic_problem(logistic):
    problem, reference, topology = logistic
    for algorithm in (PRADMM(eta=ETA), PPADMM(eta=ETA), IPPADMM(eta=ETA, threshold=1e-5)):
        result = problem.solve(algorithm, topology, rounds=60)
        gap = abs(result.history["average_objective"].iloc[-1] - reference.value) / max(1.0, abs(reference.value))
        assert gap <= 1e-3, algorithm
        assert np.linalg.norm(result.w - reference.w) <= 0.03 * np.linalg.norm(reference.w), algorithm
        broadcasts = result.history["broadcasts"].sum()
        if isinstance(algorithm, IPPADMM):  # the gate saves broadcasts once the local losses settle
            assert broadcasts < 5 * 60
        else:
            assert broadcasts == 5 * 60


# ---- (2) noise and certificates --------------------------------------------------------------------------

def test_pr_admm_noise_matches_its_calibration(logistic):
    problem, _, topology = logistic
    algorithm = _private(problem, PRADMM, 1.0, schedule=PeriodicDecay(0.925, 1))
    rounds = 50
    bound = topology.bind(problem.names)
    context = AgentContext.for_agent(problem, 0, seed=11, topology=bound, rounds=rounds)
    program = algorithm.agent_program(problem.agents[0], context)
    degree = len(bound.neighbours(problem.names[0], 1))
    # Independently: Delta = (2/|D_0|) / (lam/N + 2 eta |V_0|); sum of the weights 0.925^-(k-1) in closed form.
    delta_sens = (2.0 / problem.info["shares"][0].size) / (_mu_f(problem) + 2 * ETA * degree)
    # The release is the computed step, L-BFGS-B's here, certified within SMOOTH_TARGET in l2 of the exact argmin
    # (`SmoothStep`): 2 of it more in l2 is charged and calibrated (the exact bound alone undercounted).
    from privcvx.localsolve.strategies import SMOOTH_TARGET
    assert program.solver.strategy == "lbfgsb"
    delta_sens += 2.0 * SMOOTH_TARGET
    assert program.sensitivity == pytest.approx(delta_sens, rel=1e-12)
    weights_sum = (1 - 0.925 ** -rounds) / (1 - 1 / 0.925)
    rho_star = (math.sqrt(math.log(1e4) + 1.0) - math.sqrt(math.log(1e4))) ** 2
    sigma_1 = delta_sens * math.sqrt(weights_sum / (2 * rho_star))
    draws = []
    zero = np.zeros(problem.dim)
    while len(draws) * problem.dim < 200_000:
        draws.append(program.release(1, zero))
    noise = np.concatenate(draws)[:200_000]
    assert abs(noise.std() / sigma_1 - 1.0) <= 0.01
    assert abs(noise.mean()) <= 5 * sigma_1 / math.sqrt(noise.size)
    # Release k = 10 uses sigma_1 0.925^(9/2).
    tenth = np.concatenate([program.release(10, zero) for _ in range(2000)])
    assert abs(tenth.std() / (sigma_1 * 0.925 ** 4.5) - 1.0) <= 0.02


def _logistic_gradient(problem, index, x):
    """grad f_i computed from the data alone (independent of privcvx's evaluators)."""
    from problems.datasets import load_breast_cancer as load

    X, y = load()
    Z, labels = thesis_preprocess(X), binary_labels(y, 1)
    rows = problem.info["shares"][index]
    Z, labels = Z[rows], labels[rows]
    margins = labels * (Z @ x)
    return -(Z.T @ (labels / (1 + np.exp(margins)))) / rows.size + _mu_f(problem) * x


@pytest.mark.parametrize("beta", [10 ** -3.5, 1e-10])
def test_pp_admm_certificate_holds_on_every_local_solve(logistic, beta):
    problem, _, topology = logistic
    algorithm = _private(problem, PPADMM, 2.0, beta=beta)
    bound = topology.bind(problem.names)
    context = AgentContext.for_agent(problem, 1, seed=3, topology=bound, rounds=20)
    program = algorithm.agent_program(problem.agents[1], context)
    rng = np.random.default_rng(0)
    quadratic = 2 * ETA * program.degree
    for t in range(1, 11):
        linear = rng.normal(scale=0.3, size=problem.dim)
        x = program.local_solve(t, linear)
        assert np.linalg.norm(_logistic_gradient(problem, 1, x) + linear + quadratic * x) <= beta * (1 + 1e-6)
    assert len(program.certificates) == 10 and max(program.certificates) <= beta
    if beta < 1e-9:  # CVXPY's answer falls short of 1e-10: Newton polishing did the rest
        assert program.newton > 0


def test_pp_admm_run_certifies_every_solve(logistic):
    problem, _, topology = logistic
    result = problem.solve(_private(problem, PPADMM, 2.0), topology, rounds=8, seed=2)
    for report in result.info["agents"]:
        assert len(report["diagnostic_certificates"]) == 8 and max(report["diagnostic_certificates"]) <= 10 ** -3.5


def test_pp_admm_refuses_constrained_sets_and_checks_its_conditions(logistic):
    with pytest.raises(UnsupportedError, match="PPADMM") as error:
        consensus_problem(bound=0.4).solve(PPADMM(), pc.Topology.ring(), rounds=2)
    assert error.value.agent == "agent-0" and error.value.argument == "constraints"
    problem, _, topology = logistic
    undeclared = consensus_problem(bound=None)  # its agents declare no Hessian change: refused by name and entry
    with pytest.raises(PrivacyError, match="hessian_change") as error:
        undeclared.solve(PPADMM(epsilon=1.0), pc.Topology.ring(), rounds=2, seed=0)
    assert (error.value.agent, error.value.argument) == ("agent-0", "hessian_change")
    with pytest.raises(PrivacyError, match="Jacobian") as error:  # 2 rounds x xi_i ~ 0.0105 exceed epsilon = 0.02
        problem.solve(PPADMM(epsilon=0.02, eta=ETA), topology, rounds=2, seed=0)
    assert error.value.agent is not None


def test_private_runs_need_declared_sensitivities():
    x, y = cp.Variable(2), cp.Variable(2)
    declared = pc.Sensitivity(l2=0.1)
    problem = pc.DistributedProblem([pc.Agent(cp.sum_squares(x - 1), shared=x, name="a"),
                                     pc.Agent(cp.sum_squares(y), shared=y, name="b", sensitivity=declared)])
    with pytest.raises(PrivacyError) as error:
        problem.solve(PRADMM(epsilon=1.0), pc.Topology.ring(), rounds=2, seed=0)
    assert error.value.agent == "a" and error.value.argument == "sensitivity"
    with pytest.raises(ParameterError):
        PeriodicDecay(1.5)
    with pytest.raises(UnsupportedError, match="time-varying"):
        problem.solve(PRADMM(), pc.Topology.random_sequence(edges=1), rounds=2)


# ---- (3) zCDP accounting ---------------------------------------------------------------------------------

def test_zcdp_conversions_and_the_thesis_fixtures():
    # Digest Sec. 2.1: eps = 10, delta = 1e-4 gives rho* = 1.817; the inverse is exact.
    assert dp_to_zcdp(10.0, 1e-4) == pytest.approx(1.817, abs=1e-3)
    for rho in (1e-6, 0.02, 3.0):
        assert dp_to_zcdp(zcdp_to_dp(rho, 1e-5), 1e-5) == pytest.approx(rho, rel=1e-12)
    assert pure_dp_to_zcdp(0.3) == pytest.approx(0.045)
    # The schedule sums: 595.79 (R_P = 0.925, T_p = 1, T = 50) and 625.75 (R_T = 0.015, T = 50).
    periodic = sum(PeriodicDecay(0.925, 1).weight(k) for k in range(1, 51))
    iteration = sum(IterationDecay(0.015).weight(k) for k in range(1, 51))
    assert periodic == pytest.approx(595.79, abs=0.01) and iteration == pytest.approx(625.75, abs=0.01)
    # Thm. 3's closed form is right; Thm. 2's printed "-1" undercounts by one rho^1 (erratum).
    assert thm3_total(0.015, 50) == pytest.approx(iteration, rel=1e-12)
    for period, rounds in ((1, 50), (5, 40)):
        exact = sum(PeriodicDecay(0.925, period).weight(k) for k in range(1, rounds + 1))
        assert thm2_printed_total(0.925, period, rounds) == pytest.approx(exact - 1.0, rel=1e-12)
    # Table of digest Sec. 2.2.1 (eps = 1): rho_i1 = 9.039e-4 gives eps_i1 = 0.1834 and lam_hat_min = 0.273.
    epsilon_1 = zcdp_to_dp(9.039e-4, 1e-4)
    assert epsilon_1 == pytest.approx(0.1834, abs=1e-4)
    assert lambda_hat_lower_bound(0.25, 7000, 5, epsilon_1, 0.99 * epsilon_1) == pytest.approx(0.273, abs=1e-3)


@pytest.mark.parametrize("schedule", [PeriodicDecay(0.925, 2), IterationDecay(0.015)], ids=["periodic", "iteration"])
def test_pr_admm_zcdp_ledger_matches_an_independent_computation(logistic, schedule):
    problem, _, topology = logistic
    rounds, epsilon, delta = 12, 2.0, 1e-4
    result = problem.solve(_private(problem, PRADMM, epsilon, schedule=schedule, delta=delta), topology,
                           rounds=rounds, seed=4)
    bound = topology.bind(problem.names)
    rho_star = (math.sqrt(math.log(1 / delta) + epsilon) - math.sqrt(math.log(1 / delta))) ** 2
    for index, name in enumerate(problem.names):
        degree = len(bound.neighbours(name, 1))
        sensitivity = (2.0 / problem.info["shares"][index].size) / (_mu_f(problem) + 2 * ETA * degree)
        weights = [schedule.weight(k) for k in range(1, rounds + 1)]
        sigma_1 = calibrate_first_sigma(epsilon, delta, sensitivity, weights)
        expected = [sensitivity ** 2 * w / (2 * sigma_1 ** 2) for w in weights]  # Lemma 1, release by release
        charges = result.info["agents"][index]["zcdp"]["charges"]
        assert [c[0] for c in charges] == list(range(1, rounds + 1))
        assert [c[2] for c in charges] == pytest.approx(expected, rel=1e-12)
        assert result.info["zcdp_rho"][name] == pytest.approx(rho_star, rel=1e-12)
        # The run's PrivacyLedger gives the same rho, and dp-accounting's RDP of the same Gaussian releases
        # is alpha * rho at every order (the Gaussian's RDP curve): an independent composition.
        ledger = pc.privacy.PrivacyLedger.from_dict({"agent": name, "entries": [
            {"mechanism": m.to_dict(), "count": 1} for m in _mechanisms(charges, delta)]})
        assert ledger_rho(ledger) == pytest.approx(rho_star, rel=1e-10)
        accountant = rdp.RdpAccountant(orders=[2.0, 8.0, 32.0])
        for k in range(rounds):
            accountant.compose(dp_accounting.GaussianDpEvent(sigma_1 / math.sqrt(weights[k]) / sensitivity))
        assert np.asarray(accountant._rdp) / np.array([2.0, 8.0, 32.0]) == pytest.approx(rho_star, rel=1e-10)
        assert accountant.get_epsilon(delta) <= zcdp_to_dp(rho_star, delta)
    assert result.info["zcdp_epsilon"] == pytest.approx(epsilon, rel=1e-10)
    assert result.history["epsilon"].iloc[-1] <= epsilon  # the run's tight (GDP) epsilon is below zCDP's


def _mechanisms(charges, delta):
    from privcvx.privacy.zcdp import zcdp_gaussian

    return [zcdp_gaussian(rho, delta) for _, _, rho, _ in charges]


def test_ipp_admm_ledger_counts_exactly_the_broadcast_rounds(logistic):
    problem, _, topology = logistic
    rounds, epsilon, delta = 20, 2.0, 1e-4
    algorithm = _private(problem, IPPADMM, epsilon, delta=delta, max_broadcasts=8, query="decrease", threshold=1e-3)
    result = problem.solve(algorithm, topology, rounds=rounds, seed=7)
    table = result.privacy.set_index("agent")
    degrees = topology.bind(problem.names).degrees()
    for report in result.info["agents"]:
        name = report["agent"]
        mu = algorithm._mu + 2 * ETA * degrees[name]
        jacobian = -2.0 * math.log(1.0 - problem.declared[name].hessian_change / mu)
        total = dp_to_zcdp(epsilon, delta, xi=8 * jacobian)  # the corrected total is the target (docs/zcdp_admm.md)
        svt, per_release = 0.1 * total, 0.9 * total / 8
        sent = sorted(m.round - 1 for m in result.transcript.by_sender(name) if m.round > 1)
        ledger = ZCDPLedger.from_dict(report["zcdp"])
        assert ledger.rounds("output") == sent == ledger.rounds("objective")
        assert ledger.rounds("svt") == [1] and len(sent) <= 8
        assert table.loc[name, "steps"] == 1 + 2 * len(sent)
        assert ledger.total == pytest.approx(svt + len(sent) * per_release, rel=1e-10)  # Thm. 10
        assert ledger.total_xi == pytest.approx(len(sent) * jacobian, rel=1e-12)
        assert report["broadcasts"] == len(sent)
    assert 0 < sum(r["broadcasts"] for r in result.info["agents"]) < 5 * rounds


# ---- graph quantities ------------------------------------------------------------------------------------

def test_graph_quantities_against_networkx():
    graph = nx.relabel_nodes(nx.petersen_graph(), {i: f"agent-{i}" for i in range(10)})
    topology = pc.Topology(graph)
    order, signed, signless = topology.laplacians()
    laplacian = nx.laplacian_matrix(graph, nodelist=order).toarray()
    assert np.array_equal(signed, laplacian)
    assert np.array_equal(signless, 2 * np.diag(np.diag(laplacian)) - laplacian)
    assert topology.degrees() == dict.fromkeys(order, 3)
    constants = topology.admm_constants()
    # The Petersen graph: Laplacian spectrum {0, 2^5, 5^4}; signless {6, 4^5, 1^4}.
    assert constants["phi_min_signed"] == pytest.approx(2.0) and constants["phi_max_signless"] == pytest.approx(6.0)
    assert constants["phi_max_q"] == pytest.approx(math.sqrt(2.5))
    _, w = topology.gossip_weights(kappa=5.0)
    assert np.allclose(w, np.eye(10) - laplacian / 5.0)
    assert topology.spectral_gap(kappa=5.0) == pytest.approx(0.4)  # 1 - max(|1 - 2/5|, |1 - 5/5|)
    with pytest.raises(ParameterError, match="kappa"):
        topology.gossip_weights(kappa=2.5)
    split = nx.Graph([("a", "b"), ("c", "d")])
    with pytest.raises(ParameterError):
        pc.Topology(split).gossip_weights()


def test_robustness_threshold_filters_deviating_neighbours(logistic):
    problem, _, topology = logistic
    off = problem.solve(PRADMM(eta=ETA), topology, rounds=5)
    huge = problem.solve(PRADMM(eta=ETA, threshold=1e9), topology, rounds=5)
    assert off.transcript.same_as(huge.transcript)
    tight = problem.solve(PRADMM(eta=ETA, threshold=1e-9), topology, rounds=5)
    assert all(report["filtered"] for report in tight.info["agents"])
    assert not tight.transcript.same_as(off.transcript)


# ---- the experiment script ----------------------------------------------------------------------------------

def test_the_zcdp_admm_example_runs_in_quick_mode(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, str(root / "examples" / "zcdp_admm.py"), "--quick", "--out", str(tmp_path)],
                   check=True, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(root)})
    summary = pd.read_csv(tmp_path / "summary.csv")
    private = summary[summary["method"] != "Non-private"]
    assert np.allclose(private["zcdp_epsilon"], private["epsilon"])  # every method spends exactly its budget
    ipp = summary[summary["method"] == "IPP-ADMM"]
    assert (ipp["broadcasts"] <= 5 * 5).all()  # at most c = T/2 broadcasts per agent
    per = summary[summary["method"] == "PR-ADMM (Per)"].set_index("epsilon")["loss"]
    assert per[10.0] < per[1.0]
    assert (tmp_path / "zcdp_admm.png").exists() and (tmp_path / "target.csv").exists()
