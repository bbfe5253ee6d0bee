"""Which agents' local steps the certificate covers (docs/privacy.md, "The solver's error", Limits (1)).

For every agent (the first three of each problem) it builds the step as PR-, PP- and IPP-ADMM do under privacy
(`LocalProblem(agent, layout, objective=True, certified=True, penalized=layout.shared_local)`) and the certified
projection, and prints whether each has a certifier, its error bound e (inf: refused by the private calibrations; a
smooth step's own 1e-8 without a certifier) and what decides: no conic data, a cone, or P_f (diagonal or not, and m,
the proven lower bound on lambda_min(P_f) of `proven.objective_margin`; -inf: not shown PSD enough). Problems: the
README's model, tests/core_problems.py, the builders of problems/ and powerflow/ (case14 and case39 zones), and
f = z'Mz + c'z with M = A'A (`cp.quad_form`) or ||Az - b||^2 (`cp.sum_squares`) for a wide (3 x 6) and a tall
(12 x 6) A over a box, an l2 ball and an l1 ball.

Then an implicit equality among the inequalities (x_0 + x_1 <= 1 and >= 1, beside a wedge and a ball), against the
same set with the equality stated: how many of 30 certified projections of random points (seed 0) are released and
how many end in `SolverError` (every certificate infinite: the Slater point's own block may lie outside K).

    PYTHONPATH=. python bench/certified_coverage.py [name filter ...]
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator

import cvxpy as cp
import numpy as np

import privcvx as pc
from privcvx.localsolve import LocalProblem
from privcvx.localsolve.certificate import certifiable_cones
from privcvx.localsolve.proven import objective_margin


def readme() -> pc.DistributedProblem:
    """The README's example (four agents, least squares over an l1 ball and a bound)."""
    rng = np.random.default_rng(0)
    agents = []
    for _ in range(4):
        a, b = rng.normal(size=(20, 5)), rng.normal(size=20)
        x = cp.Variable(5)
        agents.append(pc.Agent(cp.sum_squares(a @ x - b) / 20, [cp.norm1(x) <= 1, x >= -0.3], shared=x,
                               sensitivity=pc.Sensitivity(l1=0.1, l2=0.1), smoothness=8.0))
    return pc.DistributedProblem(agents)


def least_squares(rows: int, form: str, region: str) -> pc.DistributedProblem:
    """Two agents, f = ||A z - b||^2 (``form`` "sum_squares") or z'(A'A)z - 2(A'b)'z ("quad_form"), A rows x 6."""
    rng = np.random.default_rng(0)
    agents = []
    for _ in range(2):
        a, b, z = rng.normal(size=(rows, 6)), rng.normal(size=rows), cp.Variable(6)
        objective = cp.sum_squares(a @ z - b) if form == "sum_squares" else \
            cp.quad_form(z, a.T @ a) - 2.0 * (a.T @ b) @ z
        constraints = {"box": [z <= 1, z >= -1], "l2 ball": [cp.norm(z) <= 1], "l1 ball": [cp.norm1(z) <= 1]}[region]
        agents.append(pc.Agent(objective, constraints, shared=z))
    return pc.DistributedProblem(agents)


def problems() -> Iterator[tuple[str, Callable[[], pc.DistributedProblem]]]:
    from powerflow.experiment import build as powerflow
    from powerflow.zonal import zonal_problem
    from problems import datasets
    from problems.binary_logistic import binary_logistic
    from problems.experiment import build as federated
    from problems.l2_logistic import binary_labels, decentralized_logistic, thesis_preprocess
    from problems.ldp_logistic import ldp_logistic
    from problems.nonconvex_logistic import PAPER_FEATURE_BOUND, nonconvex_logistic, paper_data
    from problems.rendezvous import rendezvous
    from tests import core_problems as core

    features, labels = datasets.load_breast_cancer()
    features = thesis_preprocess(features)
    yield "README", readme
    for name in ("box_l1_least_squares", "soc_linear", "general_form"):
        yield f"core.{name}", lambda name=name: getattr(core, name)()[0]
    yield "core.box_least_squares", core.box_least_squares
    yield "core.ill_conditioned", core.ill_conditioned
    yield "problems.rendezvous", lambda: rendezvous(np.array([[0.1, 0.2], [0.5, -0.3], [-0.4, 0.4]]))
    yield "problems.binary_logistic", lambda: binary_logistic(features, labels, agents=3, bound=1.0)
    yield "problems.decentralized_logistic", lambda: decentralized_logistic(features, binary_labels(labels, 1),
                                                                            agents=3)
    yield "problems.ldp_logistic", lambda: ldp_logistic(np.clip(features, 0, 1), binary_labels(labels, 1), agents=3,
                                                        samples=50)
    yield "problems.nonconvex_logistic", lambda: nonconvex_logistic(*paper_data(nodes=3, samples=50),
                                                                    feature_bound=PAPER_FEATURE_BOUND)
    yield "problems.experiment (digits)", lambda: federated(agents=3)
    yield "powerflow case14 3 zones", lambda: powerflow("case14", "3", sensitivity="exact")
    yield "powerflow case14 3 zones full consensus", lambda: powerflow("case14", "3", consensus="full")
    yield "powerflow case39 3 zones", lambda: powerflow("case39", "3", sensitivity="exact")
    yield "powerflow case14 cost+shedding", lambda: zonal_problem("case14", 3, objective="cost+shedding")
    for rows in (3, 12):
        for form in ("sum_squares", "quad_form"):
            for region in ("box", "l2 ball", "l1 ball"):
                yield f"{form} {rows}x6 {region}", lambda r=rows, f=form, g=region: least_squares(r, f, g)


def describe(local: LocalProblem) -> str:
    """Certified or not, the error bound, and what P_f is."""
    if local.kind in ("free", "box"):
        return f"closed form ({local.kind})"
    data = local.data
    verdict = f"{'certifier' if local.certifier is not None else 'NO certifier'} (e = {local.error_bound:.0e})"
    if data is None:
        return f"{verdict}: no conic data"
    if not certifiable_cones(data.cones):
        return f"{verdict}: cones {', '.join(sorted({type(cone).__name__ for cone in data.cones}))}"
    matrix = data.P.toarray()
    shape = "diagonal" if not np.any(matrix - np.diag(np.diag(matrix))) else "not diagonal"
    margin = local.certifier.objective_margin if local.certifier is not None else objective_margin(matrix)
    return f"{verdict}: P_f {shape}, m = {margin:.3g}"


def main(filters: list[str]) -> None:
    warnings.simplefilter("ignore")
    for name, build in problems():
        if filters and not any(word in name for word in filters):
            continue
        problem = build()
        for agent, layout in list(zip(problem.agents, problem.layouts, strict=True))[:3]:
            try:
                step = describe(LocalProblem(agent, layout, objective=True, certified=True,
                                             penalized=layout.shared_local))
            except pc.errors.UnsupportedError as exc:
                step = f"refused: {exc}"[:90]
            projection = describe(LocalProblem(agent, layout, certified=True))
            print(f"{name} / {layout.name}: step {step} | projection {projection}", flush=True)


def implicit_equality(runs: int = 30) -> None:
    """The projections of the module docstring's last paragraph."""
    rng = np.random.default_rng(0)
    for form in ("two inequalities", "equality"):
        x = cp.Variable(4)
        stated = [x[0] + x[1] == 1.0] if form == "equality" else [x[0] + x[1] <= 1.0, x[0] + x[1] >= 1.0]
        agent = pc.Agent(cp.sum_squares(x), [*stated, x[3] >= 1.0, x[3] >= 1e-6 * x[2] + 1.0, cp.norm(x) <= 3.0],
                         shared=x, name="implicit")
        local = LocalProblem(agent, pc.DistributedProblem([agent]).layouts[0], certified=True)
        released = failed = 0
        for _ in range(runs):
            try:
                local.project(2.0 * rng.normal(size=4), np.ones(4))
                released += 1
            except pc.errors.SolverError:
                failed += 1
        print(f"implicit equality as {form}: {released} released, {failed} SolverError", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
    if not sys.argv[1:] or "implicit" in sys.argv[1:]:
        implicit_equality()
