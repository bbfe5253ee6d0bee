"""DPDistributedGradient (paper 001): optimum without privacy, bias of geometric steps, calibration, ledger."""

from __future__ import annotations

import itertools
import math

import dp_accounting
import networkx as nx
import numpy as np
import pytest
from core_problems import box_least_squares, general_form, soc_linear
from scipy import stats

import privcvx as pc
from privcvx.algorithms import AgentContext, DPDistributedGradient
from privcvx.algorithms.dp_gradient_accuracy import accuracy_bound, optimal_noise_decay
from privcvx.errors import ParameterError, PrivacyError, UnsupportedError


def _rendezvous(agents: int = 8, seed: int = 3) -> pc.DistributedProblem:
    from problems.rendezvous import rendezvous

    # The meeting box cuts the addresses' box, so the projection binds at the optimum.
    return rendezvous(np.random.default_rng(seed).uniform(-1, 1, (agents, 2)), meeting=(-1.0, 0.2))


def _relative_gap(result, reference) -> float:
    return abs(result.history["average_objective"].iloc[-1] - reference.value) / max(1.0, abs(reference.value))


PROBLEMS = {"rendezvous": (_rendezvous, 300), "box least squares": (box_least_squares, 400),
            "soc + linear": (lambda: soc_linear(agents=5)[0], 150)}
TOPOLOGIES = {"ring": lambda n: pc.Topology.ring(), "random": lambda n: pc.Topology.random(seed=1),
              "time-varying": lambda n: pc.Topology.random_sequence(edges=n, seed=2)}


@pytest.mark.parametrize("problem_name", sorted(PROBLEMS))
def test_non_summable_step_reaches_the_optimum_on_every_topology(problem_name):
    build, rounds = PROBLEMS[problem_name]
    problem = build()
    reference = problem.solve_centralized()
    for topology_name, topology in TOPOLOGIES.items():
        result = problem.solve(DPDistributedGradient(), topology(len(problem.agents)), rounds=rounds)
        assert _relative_gap(result, reference) <= 1e-3, topology_name
        assert np.linalg.norm(result.w - reference.w) <= 0.05, topology_name
        # Disagreement falls with gamma_t = c / t^(3/4): to at most half its round-10 value.
        disagreement = result.history["disagreement"].to_numpy()
        assert disagreement[-1] <= 0.5 * disagreement[9], topology_name


def test_every_message_goes_between_neighbours_of_its_rounds_graph():
    problem = _rendezvous(agents=6)
    topology = pc.Topology.random_sequence(edges=6, seed=8)
    result = problem.solve(DPDistributedGradient(epsilon=1.0), topology, rounds=12, seed=1)
    bound = topology.bind(problem.names)
    assert len(result.transcript) == 6 * 13  # one broadcast per agent per round, and the first one
    for message in result.transcript:
        assert message.receiver is None and set(message.payload) == {"y"}
        assert nx.is_connected(bound.graph(message.round)) and bound.graph(message.round).degree(message.sender) > 0
    # The aggregate of round t uses exactly round t's neighbours: replay agent 0's first update.
    agent = problem.names[0]
    row = bound.weight_row(agent, 1)
    received = {m.sender: m["y"] for m in result.transcript.round(1)}
    z = sum(row[j] * received[j] for j in sorted(row))
    assert set(row) - {agent} == set(bound.neighbours(agent, 1))
    assert np.all(np.isfinite(z))


def test_geometric_steps_stop_at_a_bias_below_the_papers_bound():
    problem = box_least_squares()
    reference = problem.solve_centralized()
    algorithm = DPDistributedGradient(step="geometric", q=0.9)
    short = problem.solve(algorithm, pc.Topology.ring(), rounds=300)
    long = problem.solve(algorithm, pc.Topology.ring(), rounds=600)
    bias = float(np.sum((long.w - reference.w) ** 2))
    assert bias == pytest.approx(float(np.sum((short.w - reference.w) ** 2)), rel=1e-6)  # stalled
    free = problem.solve(DPDistributedGradient(), pc.Topology.ring(), rounds=600)
    assert bias > 1e-5 and bias > 10 * float(np.sum((free.w - reference.w) ** 2))  # non-summable: no floor
    # Theorem 10 with the digest's constants: C1 the box diameter, C2 the largest gradient on X, C3 = min mu_i.
    blocks, r = problem.info["blocks"], problem.info["bound"]
    vertices = np.array(list(itertools.product([-r, r], repeat=4)))
    c2 = max(np.linalg.norm(2 * a.T @ (a @ v - b) / 15) for a, b in blocks for v in vertices)
    c3 = min(np.linalg.eigvalsh(2 * a.T @ a / 15).min() for a, b in blocks)
    c = 1.0 / max(agent.smoothness for agent in problem.agents)
    predicted = accuracy_bound(c=c, q=0.9, diameter=2 * r * 2.0, gradient_bound=c2, strong_convexity=c3, n=4)
    assert bias <= predicted


@pytest.mark.parametrize("calibration, factor", [("safe", 1.0), ("paper", None)])
def test_ledger_matches_the_closed_form_of_theorem_5(calibration, factor):
    epsilon, q, rounds = 0.8, 0.9, 25
    p = optimal_noise_decay(q, calibration)
    factor = factor or 1.0 / p  # Eq. (8) verbatim spends epsilon / p: erratum N1
    result = _rendezvous(agents=4).solve(DPDistributedGradient(epsilon=epsilon, q=q, calibration=calibration),
                                         pc.Topology.ring(), rounds=rounds, seed=2)
    spent = factor * epsilon * (1.0 - (q / p) ** rounds)
    np.testing.assert_allclose(result.privacy["epsilon_basic"], spent, rtol=1e-12)
    assert (result.privacy["steps"] == rounds).all()
    assert result.history["epsilon"].iloc[-1] <= spent * (1 + 1e-12)
    assert result.history["epsilon"].is_monotonic_increasing


def test_a_run_past_the_float_range_of_its_noise_multipliers_finishes_with_the_closed_form_epsilon():
    """Issue 26 point 8: at q = 0.05 the multiplier 1/epsilon_t passes 1e154 near round 135 (its square overflowed the
    accountant and lost the run), and gamma_t underflows to 0 in round 250: later releases are Proj[z], free."""
    epsilon, q, rounds = 1.0, 0.05, 300
    problem = _rendezvous(agents=3)
    algorithm = DPDistributedGradient(epsilon=epsilon, q=q)
    result = problem.solve(algorithm, pc.Topology.ring(), rounds=rounds, seed=4, diagnostics=False)
    step = algorithm.prepare(problem, pc.Topology.ring().bind(problem.names), rounds).schedule()
    charged = [t for t in range(2, rounds + 2) if step(t - 1) > 0]  # y(t) releases x(t-1), sensitivity S gamma_{t-1}
    assert 200 < len(charged) < rounds and (result.privacy["steps"] == len(charged)).all()
    p = optimal_noise_decay(q)
    per_release = [epsilon * (p - q) / p * (q / p) ** (t - 2) for t in charged]  # Theorem 5's epsilon_t
    assert math.fsum(per_release) == pytest.approx(epsilon, rel=1e-15)  # 1 - (q/p)^K, (q/p)^K ~ 1e-288
    for column in ("epsilon_basic", "epsilon_advanced", "epsilon_rdp", "epsilon_pld"):
        assert np.isfinite(result.privacy[column]).all(), column
    np.testing.assert_allclose(result.privacy["epsilon_basic"], math.fsum(per_release), rtol=1e-12)
    # The per-round epsilon: RDP (dp-accounting on the releases above 1e-150; the rest add < 1e-149) or basic.
    accountant = dp_accounting.rdp.RdpAccountant()
    for value in per_release:
        if value >= 1e-150:
            accountant.compose(dp_accounting.LaplaceDpEvent(1.0 / value))
    expected = min(accountant.get_epsilon(1e-6), math.fsum(per_release))
    assert result.history["epsilon"].iloc[-1] == pytest.approx(expected, rel=1e-9)
    # Nondecreasing up to the rounding of two summation orders: past 16 mechanisms the running sums take over.
    assert np.isfinite(result.history["epsilon"]).all() and np.diff(result.history["epsilon"]).min() >= -1e-15


def test_noise_follows_the_calibrated_laplace_scale():
    problem = _rendezvous(agents=2)
    algorithm = DPDistributedGradient(epsilon=0.5, q=0.8).prepare(problem, pc.Topology.ring().bind(problem.names), 1)
    sensitivity = algorithm.release_sensitivity(problem.agents[0], "box", 2)
    assert sensitivity == 8.0  # 2 ||hi - lo||_1 on [-1, 1]^2
    c, q, p = 0.5, 0.8, algorithm._p
    for t in (1, 4):  # M_t = S c p^(t-1) / (epsilon (p - q)), the safe calibration
        assert algorithm.noise_scale(sensitivity, t) == pytest.approx(8.0 * c * p ** (t - 1) / (0.5 * (p - q)))
    program = algorithm.agent_program(problem.agents[0], AgentContext.for_agent(problem, seed=9))
    draws = np.concatenate([program.start()[0]["y"] - program.x for _ in range(5000)])
    scale = algorithm.noise_scale(sensitivity, 1)
    assert stats.kstest(draws, stats.laplace(scale=scale).cdf).pvalue > 1e-3
    assert np.mean(np.abs(draws)) == pytest.approx(scale, rel=0.03)
    assert program.context.ledger.steps == 0  # y(1) perturbs the public x(0): no privacy spent


def test_accuracy_improves_with_epsilon_as_in_figure_1():
    problem = _rendezvous(agents=6, seed=0)
    reference = problem.solve_centralized()
    accuracy = []
    for epsilon in (0.2, 2.0, 20.0):
        errors = [float(np.sum((problem.solve(DPDistributedGradient(epsilon=epsilon), pc.Topology.ring(), rounds=60,
                                              seed=seed, diagnostics=False).w - reference.w) ** 2))
                  for seed in range(12)]
        accuracy.append(np.mean(errors))
    assert accuracy[0] > 10 * accuracy[1] > 100 * accuracy[2]


def test_refuses_what_it_does_not_support():
    general, _, _ = general_form()
    with pytest.raises(UnsupportedError, match=r"DPDistributedGradient.*general-form keys"):
        general.solve(DPDistributedGradient(), pc.Topology.ring(), rounds=2)
    problem = _rendezvous(agents=3)
    with pytest.raises(UnsupportedError, match=r"DPDistributedGradient.*star"):
        problem.solve(DPDistributedGradient(), pc.Topology.star(), rounds=2)
    with pytest.raises(PrivacyError, match="geometric"):
        DPDistributedGradient(epsilon=1.0, step="diminishing")
    with pytest.raises(ParameterError, match="noise decay"):
        DPDistributedGradient(q=0.9, p=0.5)
    undeclared = box_least_squares(agents=3)
    for agent in undeclared.agents:
        agent.smoothness = None
    with pytest.raises(PrivacyError, match="smoothness"):
        undeclared.solve(DPDistributedGradient(epsilon=1.0), rounds=2)
    undeclared.agents[0].sensitivity = lambda *values: pc.Sensitivity(l1=1.0)
    with pytest.raises(PrivacyError, match="constant pc.Sensitivity"):
        undeclared.solve(DPDistributedGradient(epsilon=1.0, c=0.1), rounds=2)


def test_the_accuracy_bound_is_finite_for_a_valid_setting():
    assert math.isfinite(accuracy_bound(c=0.1, q=0.9, diameter=1, gradient_bound=1, strong_convexity=1, n=2,
                                        epsilon=1.0))
