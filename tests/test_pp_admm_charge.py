"""Issue 26, point 4: PP-/IPP-ADMM are charged for the noise actually drawn, with the Jacobian term and no lost delta.

Every expected value is recomputed here from the definitions (Lemma 1, the Jacobian bound -2 ln(1 - h/mu), Lemma 4
with the additive xi) or taken from dp-accounting directly; none is read back from the code under test.
"""

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld
from sklearn.datasets import load_breast_cancer

import privcvx as pc
from privcvx.algorithms import PPADMM
from privcvx.privacy.mechanisms import PureDP, mechanism_from_dict
from problems.l2_logistic import binary_labels, decentralized_logistic, thesis_preprocess

ETA, EPSILON, DELTA, ROUNDS = 0.05, 2.0, 1e-4, 4


def _mu_f(problem: pc.DistributedProblem) -> float:
    """lam_hat / N, the strong convexity every agent declares."""
    return min(declared.strong_convexity for declared in problem.declared.values())


@pytest.fixture(scope="module")
def run():
    X, y = load_breast_cancer(return_X_y=True)
    problem = decentralized_logistic(thesis_preprocess(X), binary_labels(y, 1), agents=5, lam=0.1)
    algorithm = PPADMM(epsilon=EPSILON, delta=DELTA, eta=ETA, strong_convexity=_mu_f(problem))  # h_i: declared
    topology = pc.Topology.random(seed=3)
    result = problem.solve(algorithm, topology, rounds=ROUNDS, seed=5)
    return problem, topology.bind(problem.names).degrees(), result


def test_objective_charge_is_the_drawn_sigma_plus_the_jacobian_term(run, monkeypatch):
    problem, degrees, _ = run
    drawn = []  # (sensitivity, sigma) of every Gaussian perturb call: read from the noise draws themselves
    original = pc.privacy.noise.SeededNoise.perturb

    def spy(self, value, kind, scale, sensitivity, *args, **kwargs):
        drawn.append((kind, float(scale), float(np.max(sensitivity)) if np.ndim(sensitivity) else float(sensitivity)))
        return original(self, value, kind, scale, sensitivity, *args, **kwargs)

    monkeypatch.setattr(pc.privacy.noise.SeededNoise, "perturb", spy)
    algorithm = PPADMM(epsilon=EPSILON, delta=DELTA, eta=ETA, strong_convexity=_mu_f(problem))
    result = problem.solve(algorithm, pc.Topology.random(seed=3), rounds=ROUNDS, seed=5)
    assert drawn
    mu_f = _mu_f(problem)
    for report in result.info["agents"]:
        name = report["agent"]
        h, mu = problem.declared[name].hessian_change, mu_f + 2 * ETA * degrees[name]
        xi = -2.0 * math.log(1.0 - h / mu)  # rank-2 Hessian change: det ratio in [(1 - h/mu)^2, (1 + h/mu)^2]
        sensitivity = 2.0 / problem.info["shares"][problem.names.index(name)].size  # the thesis's 2 / |D_i|
        sigmas = {s for kind, s, d in drawn if kind == "gaussian" and d == pytest.approx(sensitivity)}
        assert len(sigmas) == 1
        rho_drawn = sensitivity ** 2 / (2.0 * sigmas.pop() ** 2)  # Lemma 1 for the sigma actually drawn
        charges = [c for c in report["zcdp"]["charges"] if c[1] == "objective"]
        assert len(charges) == ROUNDS
        for _, _, rho, charged_xi in charges:
            assert rho == pytest.approx(rho_drawn, rel=1e-9) and charged_xi == pytest.approx(xi, rel=1e-12)


def test_reported_epsilon_is_the_target_with_no_hidden_delta(run):
    problem, degrees, result = run
    mu_f = _mu_f(problem)
    worst = 0.0
    for report in result.info["agents"]:
        charges = report["zcdp"]["charges"]
        rho, xi = math.fsum(c[2] for c in charges), math.fsum(c[3] for c in charges)
        h, mu = problem.declared[report["agent"]].hessian_change, mu_f + 2 * ETA * degrees[report["agent"]]
        assert xi == pytest.approx(ROUNDS * -2.0 * math.log(1.0 - h / mu), rel=1e-12)
        # (xi, rho)-zCDP -> (xi + rho + 2 sqrt(rho ln 1/delta), delta): the only delta is the run's
        worst = max(worst, xi + rho + 2.0 * math.sqrt(rho * math.log(1.0 / DELTA)))
    assert worst == pytest.approx(EPSILON, rel=1e-9)  # calibrated so the corrected total is the target
    assert result.info["zcdp_epsilon"] == pytest.approx(worst, rel=1e-12)
    # the ledger's RDP column composes the same (xi, rho) events: dp-accounting's own ZCDpEvent curve
    table = result.privacy.set_index("agent")
    for report in result.info["agents"]:
        accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=pc.privacy.NEIGHBOURING_RELATION)
        for _, _, rho, xi in report["zcdp"]["charges"]:
            accountant.compose(dp_accounting.ZCDpEvent(rho=rho, xi=xi))
        assert table.loc[report["agent"], "epsilon_rdp"] == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-6)
        assert table.loc[report["agent"], "epsilon_rdp"] <= EPSILON + 1e-9
    assert result.history["epsilon"].iloc[-1] == pytest.approx(table["epsilon_rdp"].max(), rel=1e-6)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_pure_dp_event_is_randomized_response(epsilon):
    """The SVT's event: its RDP and (as a cross-check) dp-accounting's PLD of randomized response agree with pure
    epsilon-DP's tight profile, and it costs more than a Laplace of the same epsilon (today's understatement)."""
    ledger = pc.privacy.PrivacyLedger("svt")
    ledger.record(PureDP(epsilon), 5)
    report = pc.privacy.epsilon_report(ledger, 1e-6)
    reference = pld.privacy_loss_distribution.from_privacy_parameters(
        pld.common.DifferentialPrivacyParameters(epsilon, 0.0), value_discretization_interval=1e-4)
    tight = reference.self_compose(5).get_epsilon_for_delta(1e-6)
    rr = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    rr.compose(dp_accounting.RandomizedResponseDpEvent(2.0 / (1.0 + math.exp(epsilon)), 2), 5)
    assert report["epsilon_rdp"] == pytest.approx(rr.get_epsilon(1e-6), rel=1e-9)
    assert report["epsilon_rdp"] >= tight - 1e-3  # RDP is an upper bound on the tight profile
    laplace = pc.privacy.PrivacyLedger("laplace")
    laplace.record(pc.Laplace(epsilon), 5)
    assert report["epsilon_rdp"] > pc.privacy.epsilon_report(laplace, 1e-6)["epsilon_rdp"]
    assert mechanism_from_dict(PureDP(epsilon).to_dict()) == PureDP(epsilon)

