"""Over-relaxation of RandomizedADMM (Algorithm 1 of Xiao, Ye & Devadas with the relaxed neighbours' average (R)):
the update replayed from the transcript, the unchanged ledger, convergence to the centralized optimum,
conformance and the validation of ``relaxation``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privcvx.algorithms import RandomizedADMM
from privcvx.errors import ParameterError
from privcvx.gradients import GradientEvaluator
from privcvx.privacy.ex_post import ex_post_epsilon
from privcvx.schedules import Geometric

pytestmark = pytest.mark.usefixtures("quiet_seeds")


def _replay(problem, topology, result, alpha: float, D: float, zeta: float, rounds: int) -> dict[str, list]:
    """Every agent's iterates of the fixed-penalty (Gamma = D/2), noise-free method recomputed in numpy from the
    released x^{k} of the transcript: (6) itself for alpha = 1, the relaxed (R)/(R-dual) otherwise."""
    bound = topology.bind(problem.names)
    replayed: dict[str, list] = {}
    for agent, layout in zip(problem.agents, problem.layouts, strict=True):
        name, gradient = agent.name, GradientEvaluator(agent, layout).gradient
        lam, out = np.zeros(problem.dim), []
        for t in range(1, rounds + 1):
            released = {m.sender: m["x"] for m in result.transcript.round(t)}
            x, neighbours = released[name], sorted(bound.neighbours(name, t))
            total = np.array([math.fsum(column) for column in zip(*[released[j] for j in neighbours], strict=True)])
            degree = len(neighbours)
            if alpha == 1.0:  # Algorithm 1, Eq. (6), with the corrected dual sign
                if t >= 2:
                    lam = lam + zeta * (total - degree * x)
                average = total / degree
            else:
                if t >= 2:
                    lam = lam + zeta * degree * ((alpha * total / degree + (1 - alpha) * x) - x)
                average = alpha * total / degree + (1 - alpha) * x
            out.append((D / 2 * x + (D - D / 2) * average + lam) / D - gradient(x) / D)
        replayed[name] = out
    return replayed


@pytest.mark.parametrize("alpha", [1.0, 1.5])
def test_the_releases_are_the_relaxed_update_replayed_from_the_transcript(graph_problem, alpha):
    problem, topology, _ = graph_problem
    rounds, D, zeta = 25, 10.0, 0.5
    result = problem.solve(RandomizedADMM(D=D, zeta=zeta, aggregator="fixed", relaxation=alpha), topology,
                           rounds=rounds, seed=1)
    replayed = _replay(problem, topology, result, alpha, D, zeta, rounds)
    for t in range(1, rounds):
        for m in result.transcript.round(t + 1):
            if alpha == 1.0:  # relaxation = 1 is Algorithm 1 bit for bit
                assert np.array_equal(m["x"], replayed[m.sender][t - 1])
            else:
                assert np.allclose(m["x"], replayed[m.sender][t - 1], rtol=1e-12, atol=1e-14)


def test_relaxation_one_is_bitwise_the_default_with_random_penalties(graph_problem):
    problem, topology, _ = graph_problem
    default = problem.solve(RandomizedADMM(), topology, rounds=30, seed=2)
    explicit = problem.solve(RandomizedADMM(relaxation=1.0), topology, rounds=30, seed=2)
    relaxed = problem.solve(RandomizedADMM(relaxation=1.5), topology, rounds=30, seed=2)
    assert np.array_equal(np.stack(default.z), np.stack(explicit.z))
    assert not np.allclose(np.stack(default.z), np.stack(relaxed.z))  # the option does act


def test_the_ledger_is_the_same_for_every_relaxation_and_the_ex_post_uses_the_relaxed_interval(graph_problem):
    problem, topology, _ = graph_problem
    rounds, D, zeta, b_inf, rate = 30, 10.0, 0.5, 0.01, Geometric(1.02, 1.02)
    runs = {alpha: problem.solve(RandomizedADMM(D=D, zeta=zeta, noise_rate=rate, b_inf=b_inf, relaxation=alpha),
                                 topology, rounds=rounds, seed=4) for alpha in (1.0, 1.5)}
    plain, relaxed = runs[1.0].privacy, runs[1.5].privacy
    worst = sum(problem.dim * 1.02 ** k * b_inf / D for k in range(1, rounds + 1))  # Theorem 2.2, summed
    ledger = [column for column in plain.columns if "ex_post" not in column]  # every accountant of the ledger
    assert "epsilon_pld" in ledger and plain[ledger].equals(relaxed[ledger])
    for before, after in zip(runs[1.0].info["ex_post"], runs[1.5].info["ex_post"], strict=True):
        assert np.array_equal(before["worst"], after["worst"])
    assert np.allclose(relaxed["epsilon_worst_case"], worst, rtol=1e-12)
    assert (relaxed["epsilon_ex_post"] < relaxed["epsilon_worst_case"]).all()
    assert not np.array_equal(np.stack(runs[1.0].z), np.stack(runs[1.5].z))
    # Agent 0's round-2 ex-post loss, Eq. (10) on [x_0^1 + c, m~_0^1 + c] recomputed from the transcript
    result, name, alpha = runs[1.5], problem.names[0], 1.5
    x1 = {m.sender: m["x"] for m in result.transcript.round(2)}
    y = next(m["x"] for m in result.transcript.round(3) if m.sender == name)
    neighbours = topology.bind(problem.names).neighbours(name, 2)
    total = sum(x1[j] for j in neighbours)
    relaxed_average = alpha * total / len(neighbours) + (1 - alpha) * x1[name]
    lam = zeta * len(neighbours) * (relaxed_average - x1[name])
    c = (lam - GradientEvaluator(problem.agents[0], problem.layouts[0]).gradient(x1[name])) / D
    expected = ex_post_epsilon(y, x1[name] + c, relaxed_average + c, rate(2), b_inf / D)
    assert result.info["ex_post"][0]["ex_post"][1] == pytest.approx(expected.sum(), rel=1e-10)


@pytest.mark.parametrize("settings", [{}, {"D": 10.0}, {"update": "exact"}], ids=["default-D", "D10", "exact"])
def test_a_relaxed_non_private_run_reaches_the_centralized_optimum(graph_problem, settings):
    problem, topology, reference = graph_problem
    result = problem.solve(RandomizedADMM(relaxation=1.5, **settings), topology, rounds=300, seed=1)
    gap = abs(result.history["objective"].iloc[-1] - reference.value) / max(1.0, abs(reference.value))
    assert gap <= 1e-6
    assert np.linalg.norm(result.w - reference.w) <= 1e-4
    assert max(np.linalg.norm(z - reference.w) for z in result.z) <= 1e-4


@pytest.mark.parametrize("value", [0.5, 2.0, 2.5, float("nan"), "1.5x", None])
def test_a_relaxation_outside_one_to_two_is_refused_naming_the_argument(value):
    with pytest.raises(ParameterError, match="relaxation"):
        RandomizedADMM(relaxation=value)
