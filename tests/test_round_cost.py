"""The cheap round of Algorithm 1 (issue 14, item 6): the shortcuts compute the same numbers as the long way.

bench/bench_numpy_floor.py times privcvx against a plain numpy Algorithm 1; here the same numpy method checks
that privcvx's iterates are its iterates, and each shortcut is checked against the computation it replaces.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import cvxpy as cp
import dp_accounting
import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import LinearizedADMM
from privcvx.algorithms.base import AgentContext
from privcvx.errors import PrivacyError
from privcvx.gradients import GradientEvaluator
from privcvx.privacy.accounting import gaussian_epsilon
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
