"""The diagnostics compiled once per agent (privcvx.diagnostics, issue 28): f_p's value and the W_p violation
equal CVXPY's ``.value`` and ``constraint.violation()`` (the reference, computed here with the variables set),
for several kinds of model, with parameters changed between evaluations."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

import privcvx as pc
from privcvx.diagnostics import row_maximum
from privcvx.gradients import GradientEvaluator

RNG = np.random.default_rng(28)
A = RNG.standard_normal((7, 4))
B = RNG.standard_normal(7)


def _evaluator(agent: pc.Agent) -> GradientEvaluator:
    problem = pc.DistributedProblem([agent])
    return GradientEvaluator(problem.agents[0], problem.layouts[0])


def _reference(agent: pc.Agent, z: np.ndarray) -> tuple[float, float]:
    """f_p and the largest constraint violation at z, by CVXPY's ``.value`` with the variables set from z."""
    offset = 0
    for var in agent.variables:
        var.value = z[offset:offset + var.size].reshape(var.shape, order="F")
        offset += var.size
    violation = max((float(np.max(c.violation(), initial=0.0)) for c in agent.constraints), default=0.0)
    return float(np.sum(agent.objective.value)), violation


def _models() -> dict[str, pc.Agent]:
    x = cp.Variable(4, name="x")
    W = cp.Variable((4, 3), name="W")
    labels = np.eye(3)[RNG.integers(0, 3, 7)]
    P = RNG.standard_normal((4, 4))
    t = cp.Variable(name="t")
    return {
        "quadratic, affine and box constraints": pc.Agent(
            cp.sum_squares(A @ x - B) + cp.quad_form(x, P @ P.T + np.eye(4)) + 0.5 * x @ B[:4],
            [A[:3] @ x <= 0.2, x[0] == 0.1, x >= -0.3, x <= 0.4], shared=x),
        "bounds with limits per entry": pc.Agent(
            cp.sum_squares(A @ x - B) + cp.sum_squares(W),
            [x <= np.array([0.4, 0.1, 0.6, 0.2]), x >= -0.5, x >= np.linspace(-0.4, 0, 4),
             W == np.arange(12.0).reshape(4, 3) / 20, W <= 0.6], shared=x),
        "logistic": pc.Agent(cp.sum(cp.logistic(A @ x)) - (B > 0) @ (A @ x) / 7, [cp.norm(x, 2) <= 1.5], shared=x),
        "log-sum-exp (federated logistic)": pc.Agent(
            (cp.sum(cp.log_sum_exp(A @ W, axis=1)) - cp.sum(cp.multiply(labels, A @ W))) / 7,
            [W <= 0.3, W >= -0.3], shared=W),
        "norms and SOC": pc.Agent(cp.norm(A @ x - B, 2) + cp.norm1(x) + 2 * cp.norm_inf(x - 0.1) + t,
                                  [cp.SOC(t, x - 0.2), cp.SOC(t + 1, A[:3] @ x), t <= 2, 0.3 == t], shared=x),
        "huber, exp and entropy": pc.Agent(
            cp.sum(cp.huber(A @ x - B, 0.7)) + cp.exp(x[1]) - cp.sum(cp.entr(x[2:] + 2)) + cp.inv_pos(x[0] + 3),
            [cp.exp(x[3]) <= 2, cp.abs(x) <= 1.8], shared=x),
        "PSD constraint and a slow atom": pc.Agent(
            cp.lambda_max(cp.reshape(W[:3, :], (3, 3), order="F") + cp.reshape(W[:3, :], (3, 3), order="F").T)
            + cp.sum_squares(W), [cp.reshape(W[:3, :], (3, 3), order="F") >> 0], shared=W),
        "scaled by constants (one variable)": pc.Agent(
            0.1 * cp.sum_squares(A @ x - B) + cp.quad_over_lin(x, 2.5) + 3.0 * cp.sum(x) + cp.sum(x) / 7.0,
            shared=x),
        "exponential cone (slow violation)": pc.Agent(
            cp.sum_squares(x), [cp.constraints.ExpCone(x[0], x[1] + 2, x[2] + 3), x[3] <= 1], shared=x),
    }


MODELS = _models()


@pytest.mark.parametrize("name", list(MODELS))
def test_value_and_violation_equal_cvxpy(name: str) -> None:
    agent = MODELS[name]
    evaluator = _evaluator(agent)
    dim = sum(v.size for v in agent.variables)
    for scale in (0.05, 0.5, 2.0):  # inside and outside W_p
        z = RNG.uniform(-scale, scale, dim)
        value, violation = _reference(agent, z)
        assert evaluator.value(z) == pytest.approx(value, rel=1e-12, abs=1e-14)
        assert evaluator.violation(z) == pytest.approx(violation, rel=1e-12, abs=1e-14)
    if name == "exponential cone (slow violation)":
        assert evaluator.compiled_violation.slow == ["ExpCone"]
        assert violation > 0
    elif name == "PSD constraint and a slow atom":
        assert evaluator.compiled_objective.slow == ["lambda_max"]
        assert evaluator.compiled_violation.slow == []
        assert violation > 0
    else:
        assert evaluator.compiled_objective.slow == [] and evaluator.compiled_violation.slow == []


def test_scalar_constants_are_python_floats_with_numpys_numbers() -> None:
    """A product, quotient or quad_over_lin with a scalar constant runs as Python arithmetic on a float (no ufunc on a
    0-d array; the 1 of sum_squares is left out), and gives bitwise what numpy's ufuncs on the 0-d constants give."""
    evaluator = _evaluator(MODELS["scaled by constants (one variable)"])
    z = RNG.uniform(-1.0, 1.0, 4)
    value = evaluator.value(z)
    source = evaluator.compiled_objective.source
    assert ".item()" not in source and "np.multiply" not in source and "np.divide" not in source, source
    assert "v0 = z\n" in source  # the agent's one variable is z itself
    residual = A @ z - B
    numpys = (np.multiply(np.array(0.1), np.add.reduce(np.square(residual), axis=None) / np.array(1.0).item())
              + np.add.reduce(np.square(z), axis=None) / np.array(2.5).item()
              + np.multiply(np.array(3.0), np.add.reduce(z)) + np.divide(np.add.reduce(z), np.array(7.0)))
    assert value == float(numpys)


def test_variables_keep_their_values() -> None:
    """The slower paths load z_p into the CVXPY variables and restore what was there."""
    agent = MODELS["exponential cone (slow violation)"]
    evaluator = _evaluator(agent)  # the problem's feasibility check at set-up sets the variables
    before = np.arange(4.0)
    agent.variables[0].value = before
    assert evaluator.violation(np.ones(4)) > 0
    assert np.array_equal(agent.variables[0].value, before)


def test_parameters_changed_between_rounds_are_honoured() -> None:
    """A cp.Parameter (an agent's private data) is read at every evaluation: reassigned or changed in place,
    the compiled value follows CVXPY's .value (the tree compiled for the gradient kept the first value)."""
    x = cp.Variable(4)
    data = cp.Parameter((7, 4), value=A.copy())
    target = cp.Parameter(7, value=B.copy())
    radius = cp.Parameter(nonneg=True, value=1.0)
    agent = pc.Agent(cp.sum_squares(data @ x - target) + cp.sum(cp.huber(x, radius)), [cp.norm(x) <= radius],
                     shared=x)
    evaluator = _evaluator(agent)
    z = RNG.standard_normal(4)
    first = evaluator.value(z)
    assert first == pytest.approx(_reference(agent, z)[0], rel=1e-12)
    data.value = A[::-1].copy()  # reassigned
    target.value[:] = -B  # changed in place
    radius.value = 0.3
    value, violation = _reference(agent, z)
    assert abs(value - first) > 1e-3
    assert evaluator.value(z) == pytest.approx(value, rel=1e-12)
    assert evaluator.violation(z) == pytest.approx(violation, rel=1e-12)


def test_parameter_without_value_is_a_clear_error() -> None:
    """Refused at declaration, and, when the value is removed after it, by the compiled diagnostic."""
    x = cp.Variable(2)
    weight = cp.Parameter(nonneg=True)
    with pytest.raises(pc.errors.DeclarationError, match="zone-3.*has no value"):
        pc.Agent(weight * cp.sum_squares(x), shared=x, name="zone-3")
    weight.value = 1.0
    evaluator = _evaluator(pc.Agent(weight * cp.sum_squares(x), shared=x, name="zone-3"))
    weight.value = None
    with pytest.raises(pc.errors.DeclarationError, match="zone-3.*has no value"):
        evaluator.value(np.ones(2))


def test_run_objective_column_is_cvxpy_value_at_the_releases() -> None:
    """A run's last objective diagnostic is sum_p f_p(z_p) at the releases, as CVXPY computes it."""
    from problems import federated_logistic

    X = RNG.standard_normal((60, 5))
    y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int) + (X[:, 2] > 1)
    problem = federated_logistic(X, y, agents=3, bound=0.2, seed=1)
    result = problem.solve(rounds=4, local_updates=2, seed=0)
    expected = sum(_reference(agent, z)[0] for agent, z in zip(problem.agents, result.z, strict=True))
    assert result.history["objective"].iloc[-1] == pytest.approx(expected, rel=1e-12)
    assert result.history["max_violation"].iloc[-1] == 0.0


def test_gradient_reads_parameters_at_every_evaluation() -> None:
    """The gradient follows a cp.Parameter reassigned or changed in place between evaluations, as CVXPY's own
    ``expr.grad`` does (the reference, taken with the variable set); an affine term with a parameter is not frozen
    into J z + b."""
    x = cp.Variable(4)
    data = cp.Parameter((7, 4), value=A.copy())
    target = cp.Parameter(7, value=B.copy())
    radius = cp.Parameter(nonneg=True, value=1.0)
    weight = cp.Parameter(nonneg=True, value=2.0)
    scale = cp.Parameter(4, value=np.arange(1.0, 5.0))
    objective = (cp.sum_squares(data @ x - target) + weight * cp.sum(cp.huber(x, radius))
                 + cp.sum(cp.multiply(scale, x)) / weight + cp.quad_form(x, np.eye(4)) / weight)
    agent = pc.Agent(objective, shared=x)
    evaluator = _evaluator(agent)
    z = np.array([0.3, -0.2, 1.7, -2.4])  # away from the kinks of huber at radius 1 and 0.6

    def reference() -> np.ndarray:
        x.value = z
        return np.asarray(objective.grad[x].toarray()).ravel()

    first = evaluator.gradient(z)
    np.testing.assert_allclose(first, reference(), rtol=1e-12, atol=1e-12)
    data.value = A[::-1].copy()  # reassigned
    target.value[:] = -B  # changed in place
    radius.value = 0.6
    weight.value = 0.5
    scale.value = -scale.value
    changed = reference()
    assert np.max(np.abs(changed - first)) > 1.0
    np.testing.assert_allclose(evaluator.gradient(z), changed, rtol=1e-12, atol=1e-12)


def test_a_parameter_changed_between_solves_is_honoured() -> None:
    """Solved again after its parameter changed, a problem runs as one built with the new value: bitwise the same
    history (the linearized step takes the compiled gradient, the diagnostics the compiled value)."""
    def problem(target: cp.Parameter) -> pc.DistributedProblem:
        agents = []
        for p in range(3):
            x = cp.Variable(4, name=f"x_{p}")
            agents.append(pc.Agent(cp.sum_squares(A[p:p + 5] @ x - target[p:p + 5]), [x <= 1.0], shared=x,
                                   name=f"agent-{p}"))
        return pc.DistributedProblem(agents)

    settings = {"rounds": 5, "local_updates": 2, "rho": 1.0, "seed": 0}
    target = cp.Parameter(7, value=B.copy())
    reused = problem(target)
    first = reused.solve(**settings)
    target.value = 3.0 * B
    again = reused.solve(**settings)
    fresh = problem(cp.Parameter(7, value=3.0 * B)).solve(**settings)
    columns = [c for c in fresh.history.columns if c != "time_s"]
    assert not np.allclose(first.history["objective"], fresh.history["objective"])
    assert again.history[columns].equals(fresh.history[columns])
    assert np.array_equal(again.w, fresh.w)


def _counted_values(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every read of a CVXPY expression's ``.value`` (Atom's, Leaf's and the classes' that define their own)."""
    def classes(cls: type) -> list[type]:
        return [sub for direct in cls.__subclasses__() for sub in (direct, *classes(direct))]

    count = [0]
    for cls in {cls for cls in classes(cp.Expression) if "value" in cls.__dict__}:
        prop = cls.__dict__["value"]

        def getter(self: cp.Expression, prop: property = prop) -> object:
            count[0] += 1
            return prop.fget(self)
        monkeypatch.setattr(cls, "value", property(getter, prop.fset))
    return count


def _ridge() -> pc.DistributedProblem:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_diagnostics import ridge_problem

    return ridge_problem()[0]


@pytest.mark.parametrize("case", ["digits, E = 5", "ridge, defaults (exact step)", "ridge, E = 1 (compiled gradient)"])
def test_no_cvxpy_value_in_the_round_loop(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: after the first round (where the diagnostics and the gradient are compiled), a round with
    diagnostics on reads no CVXPY ``.value``: f_p, the violation and the gradient come from compiled numpy forms."""
    from problems import datasets, federated_logistic

    if case.startswith("digits"):
        X, y = datasets.load_digits()
        problem = federated_logistic(X, y, agents=10, bound=0.1, seed=0)
        settings = {"local_updates": 5, "rho": 0.01, "eta": "auto"}
    else:
        problem = _ridge()
        settings = {"rho": 1.0} if "defaults" in case else {"local_updates": 1, "rho": 1.0}
    count = _counted_values(monkeypatch)
    seen: list[int] = []
    result = problem.solve(rounds=4, seed=0, diagnostics=True, callback=lambda row: seen.append(count[0]), **settings)
    assert result.history["objective"].notna().all() and len(seen) == 4
    assert seen[1:] == [seen[0]] * 3, f"CVXPY .value read in rounds 2-4: {np.diff(seen).tolist()}"


@pytest.mark.parametrize("name", ["log-sum-exp (federated logistic)", "bounds with limits per entry"])
def test_a_nan_entry_gives_a_nan_violation(name: str) -> None:
    """Batched bounds (a box by its extremes, limits per entry by one array) report a NaN entry as NaN, wherever
    the bound that sees it is."""
    evaluator = _evaluator(MODELS[name])
    dim = sum(v.size for v in MODELS[name].variables)
    for entry in (0, dim - 1):
        z = np.zeros(dim)
        z[entry] = np.nan
        assert np.isnan(evaluator.violation(z))


def test_row_maximum_is_numpys_row_maximum_bitwise() -> None:
    """`row_maximum` (np.maximum.reduceat over the rows' starts) against np.maximum.reduce along the rows: the same
    values and shapes, the signs of zeros and NaN rows included, for C-order and other layouts."""
    rng = np.random.default_rng(7)
    for trial in range(400):
        rows, columns = int(rng.integers(1, 60)), int(rng.integers(1, 13))
        x = rng.standard_normal((rows, columns)) * 10.0 ** float(rng.integers(-3, 4))
        x[rng.random(x.shape) < 0.3] = 0.0
        x[rng.random(x.shape) < 0.2] = -0.0
        if trial % 7 == 0:
            x[rng.integers(rows), rng.integers(columns)] = np.nan
        for layout in (x, np.asfortranarray(x), x[::-1]):
            expected = np.maximum.reduce(layout, axis=1, keepdims=True)
            got = row_maximum(layout)
            assert got.shape == expected.shape == (rows, 1)
            assert np.array_equal(got, expected, equal_nan=True)
            assert np.array_equal(np.signbit(got), np.signbit(expected))
    with pytest.raises(ValueError):  # numpy's own error for a maximum over no entries
        row_maximum(np.zeros((3, 0)))
