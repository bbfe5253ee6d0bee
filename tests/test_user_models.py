"""A user's own model: the reference keeps the variables' attributes; unsupported variable kinds are refused;
an agent without private data (zero sensitivity) runs in every private method, without noise or charge."""

from __future__ import annotations

import sys
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
    numbers = [c for c in table.columns if c not in ("calibration", "steps", "delta")]
    assert all(operator[c] == 0.0 for c in numbers if np.isfinite(operator[c]))
    assert reference.loc["operator", "epsilon_rdp"] > 0  # the same agent with data is charged
    generators = [name for name in table.index if name != "operator"]
    pd.testing.assert_frame_equal(table.loc[generators], reference.loc[generators])  # the others: unchanged
    released = [m for m in public.transcript if m.sender == "operator" and m.round >= 1]
    assert released and all(np.all(np.isfinite(v)) for m in released for v in m.payload.values())
