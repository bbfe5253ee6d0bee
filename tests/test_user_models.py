"""A user's own model: the reference keeps the variables' attributes; unsupported variable kinds are refused;
an agent without private data (zero sensitivity) runs in every private method, without noise or charge."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import cvxpy as cp
import numpy as np
import pandas as pd
import pytest

import privcvx as pc
from privcvx.errors import DeclarationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

TARGETS = (np.array([-4.0, 1.0, 1.0]), np.array([1.0, 1.0, 1.0]))


def _two_agents(make_variable) -> tuple[pc.DistributedProblem, np.ndarray]:
    """Two agents minimizing ||x - t_p||^2 over one shared x; with plain CVXPY's optimum of the same model."""
    variables = [make_variable() for _ in TARGETS]  # each agent declares its own x, with the same attributes
    agents = [pc.Agent(cp.sum_squares(x - t), shared=x, name=f"agent-{p}")
              for p, (x, t) in enumerate(zip(variables, TARGETS, strict=True))]
    x = make_variable()
    cp.Problem(cp.Minimize(sum(cp.sum_squares(x - t) for t in TARGETS))).solve()
    return pc.DistributedProblem(agents), np.asarray(x.value)


@pytest.mark.parametrize("make_variable", [lambda: cp.Variable(3, nonneg=True),
                                           lambda: cp.Variable(3, bounds=[0.0, 0.5])],
                         ids=["nonneg", "bounds"])
def test_reference_keeps_the_variables_attributes(make_variable):
    problem, plain = _two_agents(make_variable)
    assert plain.min() >= -1e-8  # the attribute binds: unconstrained, the first entry would be -1.5
    reference = problem.solve_centralized()
    np.testing.assert_allclose(reference.w, plain, atol=1e-6)
    result = problem.solve(rounds=300)
    np.testing.assert_allclose(result.w, plain, atol=1e-3)


def test_nonneg_example_of_the_issue():
    problem, plain = _two_agents(lambda: cp.Variable(3, nonneg=True))
    np.testing.assert_allclose(plain, [0.0, 1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(problem.solve_centralized().w, [0.0, 1.0, 1.0], atol=1e-6)


@pytest.mark.parametrize(("attribute", "kind"), [({"integer": True}, "integer"), ({"boolean": True}, "boolean"),
                                                  ({"complex": True}, "complex")])
def test_integer_boolean_complex_variables_are_refused(attribute, kind):
    x = cp.Variable(3, **attribute)
    with pytest.raises(DeclarationError, match=rf"\[agent 'operator'\].*variable {x.name()} is {kind}"):
        pc.Agent(cp.sum_squares(cp.abs(x)), shared=x, name="operator")


from economic_dispatch import dispatch_problem, fleet  # noqa: E402

# ---- an agent without private data -------------------------------------------------------------------------------
GENERATOR_SENSITIVITY = pc.Sensitivity(l1=0.5, l2=0.5)  # a declared bound on the change of a generator's cost gradient


def _dispatch(operator: pc.Sensitivity) -> pc.DistributedProblem:
    """examples/economic_dispatch.py's quick fleet (3 generators, 4 periods), the generators private."""
    problem = dispatch_problem(fleet(3, 4))
    for agent in problem.agents:
        agent.sensitivity = operator if agent.name == "operator" else GENERATOR_SENSITIVITY
    return problem


def _consensus_dispatch(operator: pc.Sensitivity) -> pc.DistributedProblem:
    """The same market in full consensus (DPDG needs it): every agent holds the whole dispatch x, one entry per
    generator; the operator only the balance sum(x) = demand."""
    a, b = np.array([0.01, 0.02, 0.015]), np.array([20.0, 30.0, 25.0])
    pmax, demand = np.array([100.0, 80.0, 90.0]), 150.0
    agents = []
    for g in range(3):
        x = cp.Variable(3, name=f"x_{g}")
        agents.append(pc.Agent(a[g] * cp.square(x[g]) + b[g] * x[g], [x >= 0, x <= pmax], shared=x,
                               name=f"generator-{g}", smoothness=2 * a[g], sensitivity=GENERATOR_SENSITIVITY))
    x = cp.Variable(3, name="x_operator")
    agents.append(pc.Agent(cp.Constant(0.0), [cp.sum(x) == demand, x >= 0, x <= pmax], shared=x, name="operator",
                           smoothness=0.0, sensitivity=operator))
    return pc.DistributedProblem(agents)


PUBLIC = pc.Sensitivity(l1=0.0, l2=0.0)


@pytest.mark.parametrize(("build", "algorithm"), [
    (_dispatch, pc.algorithms.PRADMM(epsilon=1.0)),
    (_dispatch, pc.algorithms.LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Laplace(epsilon=0.1)))),
    (_dispatch, pc.algorithms.LinearizedADMM(privacy=pc.OutputPerturbation(pc.Gaussian(epsilon=0.5, delta=1e-5)))),
    (_consensus_dispatch, pc.algorithms.DPDistributedGradient(epsilon=1.0)),
], ids=["PRADMM", "Algorithm1", "Algorithm1-OutPert", "DPDG"])
@pytest.mark.filterwarnings("ignore::privcvx.errors.ReproducibleNoiseWarning")
def test_an_agent_without_private_data_is_charged_nothing(build, algorithm):
    public = build(PUBLIC).solve(algorithm, rounds=8, seed=3)
    private = build(pc.Sensitivity(l1=0.5, l2=0.5)).solve(algorithm, rounds=8, seed=3)
    table, reference = public.privacy.set_index("agent"), private.privacy.set_index("agent")
    operator = table.loc["operator"]
    assert operator["calibration"] == "public (no private data)"
    assert operator["steps"] == 0
    numbers = [c for c in table.select_dtypes("number").columns if c not in ("steps", "delta")]  # the epsilons
    assert all(operator[c] == 0.0 for c in numbers if np.isfinite(operator[c]))
    assert reference.loc["operator", "epsilon_rdp"] > 0  # the same agent with data is charged
    generators = [name for name in table.index if name != "operator"]
    pd.testing.assert_frame_equal(table.loc[generators], reference.loc[generators])  # the others: unchanged
    released = [m for m in public.transcript if m.sender == "operator" and m.round >= 1]
    assert released and all(np.all(np.isfinite(v)) for m in released for v in m.payload.values())


def _operator(dim: int, box: bool) -> pc.Agent:
    """A public agent: a public regularizer 0.05 ||w||^2 (in a box, if ``box``), pc.Sensitivity(l1=0, l2=0)."""
    w = cp.Variable(dim, name="w_operator")
    return pc.Agent(0.05 * cp.sum_squares(w), [w >= -1, w <= 1] if box else [], shared=w, name="operator",
                    smoothness=0.1, sensitivity=PUBLIC)


def _learners_and_operator() -> pc.DistributedProblem:
    """Three private learners (binary logistic, per-record gradients, box |w| <= 1) and the public operator."""
    from sklearn.datasets import load_breast_cancer

    from problems.binary_logistic import binary_logistic

    X, y = load_breast_cancer(return_X_y=True)
    X, y = X[:150, :5], y[:150]
    learners = binary_logistic((X - X.mean(axis=0)) / X.std(axis=0), y, agents=3, bound=1.0)
    return pc.DistributedProblem([*learners.agents, _operator(5, box=True)])


def _regression_and_operator() -> pc.DistributedProblem:
    """Three private least-squares agents (unconstrained, delta-adjacency 0.1) and the public operator."""
    rng = np.random.default_rng(0)
    agents = []
    for i in range(3):
        a, b, x = rng.normal(size=(10, 3)), rng.normal(size=10), cp.Variable(3)
        agents.append(pc.Agent(cp.sum_squares(a @ x - b) / 10, shared=x, name=f"agent-{i}",
                               smoothness=2 * float(np.linalg.eigvalsh(a.T @ a).max()) / 10,
                               sensitivity=pc.Sensitivity(l2=0.1)))
    return pc.DistributedProblem([*agents, _operator(3, box=False)])


@pytest.mark.parametrize(("build", "algorithm"), [
    (_learners_and_operator, pc.algorithms.QDPSGD(epsilon=1.0, clip=1.0)),
    (_learners_and_operator, pc.algorithms.QDPSGD(variant=2, epsilon=1.0, clip=1.0)),
    (_learners_and_operator, pc.algorithms.RandomizedADMM(noise_rate=2.0, b_inf=0.5)),
    (_regression_and_operator, pc.algorithms.DPP2(mixing_seed=7, u_w=0.5, u_e=0.5, r=0.9)),
], ids=["QDPSGD-1", "QDPSGD-2", "RandomizedADMM", "DPP2"])
@pytest.mark.filterwarnings("ignore::privcvx.errors.ReproducibleNoiseWarning")
@pytest.mark.filterwarnings("ignore::privcvx.errors.ConvergenceWarning")
def test_a_public_agent_is_released_without_noise_under_every_method(build, algorithm):
    """The operator (pc.Sensitivity(l1=0, l2=0), a plain pc.Agent) runs next to private agents: its row is labelled
    public with no release charged, the others are charged (DPP2: the operator's y^0 is x^0 = 0 exactly, a private
    agent's is noisy)."""
    result = build().solve(algorithm, rounds=4, seed=3)
    table = result.privacy.set_index("agent")
    assert table.loc["operator", "calibration"] == "public (no private data)"
    assert table.loc["operator", "steps"] == 0 and table.loc["operator", "epsilon_rdp"] == 0.0
    others = table.drop(index="operator")
    assert (others["steps"] > 0).all() and (others["epsilon_rdp"] > 0).all()

    def first(result: pc.Result, sender: str) -> list[np.ndarray]:
        return [np.asarray(v, dtype=float) for m in result.transcript if m.sender == sender
                for v in m.payload.values() if m.round == 1 and m.phase == 0]

    if isinstance(algorithm, pc.algorithms.DPP2):
        assert all(np.array_equal(v, np.zeros(3)) for v in first(result, "operator"))
        assert not all(np.array_equal(v, np.zeros(3)) for v in first(result, "agent-0"))


def _svm(hinge: bool) -> pc.DistributedProblem:
    """Three agents' classifiers on 20 Gaussian points each in R^2: hinge loss (nonsmooth) or logistic (smooth)."""
    rng = np.random.default_rng(1)
    agents = []
    for i in range(3):
        X = rng.normal(size=(20, 2))
        y = np.sign(X @ np.array([1.0, -1.0]) + 0.1)
        w = cp.Variable(2, name=f"w_{i}")
        margin = cp.multiply(y, X @ w)
        loss = cp.sum(cp.pos(1 - margin)) if hinge else cp.sum(cp.logistic(-margin))
        agents.append(pc.Agent(loss / 20 + 0.05 * cp.sum_squares(w), [w >= -5, w <= 5], shared=w, name=f"svm-{i}"))
    return pc.DistributedProblem(agents)


@pytest.mark.parametrize("algorithm", [pc.algorithms.DPDistributedGradient(),
                                       pc.algorithms.RandomizedADMM()], ids=["DPDG", "RandomizedADMM"])
def test_a_nonsmooth_objective_under_gradient_defaults_warns(algorithm):
    """DPDG's default c = 1 / max L_i and the linearized RandomizedADMM need gradients: a hinge loss gets a
    ConvergenceWarning naming the method and the agents; the logistic loss (smooth) gets none."""
    with pytest.warns(pc.ConvergenceWarning, match=r"defaults need smooth objectives.*'svm-0', 'svm-1', 'svm-2'"):
        _svm(hinge=True).solve(algorithm, rounds=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _svm(hinge=False).solve(algorithm, rounds=2)
    assert not [w for w in caught if "smooth objectives" in str(w.message)]
