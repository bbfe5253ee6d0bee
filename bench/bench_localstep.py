"""Cost of one local update: the compiled projection of Eq. (9) against a fresh CVXPY build, and the
compiled gradient evaluator against ``expr.grad``. Ratios are measured in the same run.

    .venv/bin/python bench/bench_localstep.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import time
import warnings

import cvxpy as cp
import numpy as np

import privcvx as pc
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import SOLVER_SETTINGS, LocalProblem
from privcvx.localsolve.strategies import CLARABEL_RETRIES


def local_set(kind: str, x: cp.Variable) -> list[cp.Constraint]:
    n = x.size
    if kind == "box+l1 (QP)":
        return [x <= 1, x >= -1, cp.norm1(x) <= n / 10]
    return [cp.norm(x[: n // 2]) <= 2, x >= -1, cp.sum(x) <= 3]


def median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def projection_row(kind: str, n: int, repeats: int, rng: np.random.Generator) -> str:
    """Median time of the compiled projection and of a fresh CVXPY build of the same weighted projection."""
    x = cp.Variable(n)
    constraints = local_set(kind, x)
    agent = pc.Agent(cp.sum_squares(x), constraints, shared=x)
    projection = LocalProblem(agent, pc.DistributedProblem([agent]).layouts[0])
    weights = np.full(n, 3.0)  # a fully shared agent: m = 1/eta + rho on every coordinate
    points = iter([rng.normal(size=n) for _ in range(2 * repeats)])
    solver = projection.strategy
    reference_solver = cp.OSQP if solver == "osqp" else cp.CLARABEL
    reference_settings = SOLVER_SETTINGS[reference_solver]
    failures: list[np.ndarray] = []

    def fresh(point: np.ndarray) -> np.ndarray:
        problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(weights, cp.square(x - point)))), constraints)
        for settings in (reference_settings, CLARABEL_RETRIES[0]):  # the same retry as privcvx's own direct path
            try:
                problem.solve(solver=reference_solver, **settings)
                return np.asarray(x.value)
            except cp.error.SolverError:
                failures.append(point)
        problem.solve(solver=cp.SCS, **SOLVER_SETTINGS[cp.SCS])
        return np.asarray(x.value)

    compiled = median_seconds(lambda: projection.project(next(points), weights), repeats)
    rebuilt = median_seconds(lambda: fresh(next(points)), repeats)
    def accurate(point: np.ndarray) -> np.ndarray:  # the weights are uniform: the plain Euclidean projection
        problem = cp.Problem(cp.Minimize(cp.sum_squares(x - point)), constraints)
        problem.solve(solver=cp.SCS, eps_abs=1e-12, eps_rel=1e-12, max_iters=500_000)
        return np.asarray(x.value)

    samples = [rng.normal(size=n) for _ in range(3)]
    ours = [projection.project(p, weights) for p in samples]
    diff = max(float(np.max(np.abs(z - fresh(p)))) for z, p in zip(ours, samples, strict=True))
    error = max(float(np.max(np.abs(z - accurate(p)))) for z, p in zip(ours, samples, strict=True))
    return (f"| {kind} | {n} | {solver} | {compiled * 1e3:.2f} | {rebuilt * 1e3:.2f} | "
            f"{rebuilt / compiled:.1f}x | {diff:.1e} | {error:.1e} | {len(failures)} |")


def projection_rows(repeats: int) -> list[str]:
    rng = np.random.default_rng(0)
    rows = ["| W_p | n | solver | compiled (ms) | fresh build (ms) | speed-up | max abs diff to fresh | "
            "max abs error vs SCS 1e-12 | fresh solves that failed |", "|---|---|---|---|---|---|---|---|---|"]
    rows += [projection_row(kind, n, repeats, rng) for kind in ("box+l1 (QP)", "SOC + linear")
             for n in (50, 200, 500)]
    return rows


def gradient_rows(repeats: int) -> list[str]:
    rng = np.random.default_rng(1)
    n, m = 500, 300
    a, b = rng.normal(size=(m, n)), rng.normal(size=m)
    x = cp.Variable(n)
    objective = cp.sum_squares(a @ x + b)
    agent = pc.Agent(objective, shared=x)
    evaluator = GradientEvaluator(agent, pc.DistributedProblem([agent]).layouts[0])
    z = rng.normal(size=n)
    x.value = z
    ours = median_seconds(lambda: evaluator.gradient(z), repeats)
    theirs = median_seconds(lambda: objective.grad[x], max(5, repeats // 3))
    expected = 2 * a.T @ (a @ z + b)
    error = float(np.max(np.abs(evaluator.gradient(z) - expected)))
    return ["| gradient of sum_squares(A x + b), n=500, m=300 | time (ms) |", "|---|---|",
            f"| compiled evaluator (privcvx) | {ours * 1e3:.3f} |",
            f"| CVXPY `expr.grad` | {theirs * 1e3:.3f} |",
            f"| speed-up | {theirs / ours:.0f}x (max abs error vs numpy closed form {error:.1e}) |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print("\n".join(projection_rows(args.repeats)))
    print()
    print("\n".join(gradient_rows(args.repeats)))


if __name__ == "__main__":
    main()
