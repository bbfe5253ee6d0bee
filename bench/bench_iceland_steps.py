"""How accurate is the exact step on iceland's zones? The local solves behind issue 31's drift.

    nice -n 5 .venv/bin/python bench/bench_iceland_steps.py [--rounds 250] [--every 12]

Runs ``powerflow.zonal_problem("iceland", 5)`` with ``LinearizedADMM(rho=PerKeyBalancing(until=100))`` (the exact
step, the penalty frozen after 100 rounds) and records every zone's exact step (its linear term and weights). For
every ``--every``-th step from the 6th it then solves the step three ways: Clarabel's first solve alone at the tight
settings (``SOLVER_SETTINGS``), the whole strategy (``ClarabelStep.solve``: retries, and on this branch the
refinements) and a reference (Clarabel's defaults without equilibration, then two solves centred at the answer).
Per zone: the largest distance of the shared entries to the reference, for the first solve alone and for the
strategy, and the first solve's largest duality gap. The same script on an older commit measures its strategy.
"""

from __future__ import annotations

import argparse
import warnings

import clarabel
import cvxpy as cp
import numpy as np

import powerflow
import privcvx as pc
from privcvx.localsolve import LocalProblem, strategies
from privcvx.localsolve.problem import SolveStats
from privcvx.schedules import PerKeyBalancing

REFERENCE = {"direct_solve_method": "qdldl", "equilibrate_enable": False}


def captured_steps(rounds: int) -> tuple[pc.DistributedProblem, dict[str, list[tuple[np.ndarray, object]]]]:
    """The zones' exact steps (linear term, weights) of one run."""
    steps: dict[str, list[tuple[np.ndarray, object]]] = {}
    step = LocalProblem.tilted_step  # the exact step's entry point (`LocalProblem.step` negates into it)

    def recorded(self: LocalProblem, tilt: np.ndarray, weight: object, warm_start: bool = False) -> np.ndarray:
        steps.setdefault(self.agent_name, []).append((-np.array(tilt), np.array(weight)))
        return step(self, tilt, weight, warm_start)

    LocalProblem.tilted_step = recorded
    try:
        problem = powerflow.zonal_problem("iceland", 5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problem.solve(pc.algorithms.LinearizedADMM(rho=PerKeyBalancing(until=100)), rounds=rounds,
                          progress=False)
    finally:
        LocalProblem.tilted_step = step
    return problem, steps


def solved(step: strategies.ClarabelStep, q: np.ndarray, b: np.ndarray, settings: dict) -> clarabel.DefaultSolution:
    return clarabel.DefaultSolver(step.P, q, step.data.A, b, step.data.cones,
                                  strategies.clarabel_settings(settings)).solve()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=250)
    parser.add_argument("--every", type=int, default=12)
    args = parser.parse_args(argv)
    problem, steps = captured_steps(args.rounds)
    print("| zone | steps | first solve: largest shared error | strategy: largest shared error "
          "| first solve: largest duality gap |")
    print("|---|---|---|---|---|")
    for agent, layout in zip(problem.agents, problem.layouts, strict=True):
        local = LocalProblem(agent, layout, objective=True, penalized=layout.shared_local)
        shared = layout.shared_local
        first_error = strategy_error = first_gap = 0.0
        chosen = steps[layout.name][5::args.every]
        for linear, weight in chosen:
            weights = float(weight) if weight.ndim == 0 else weight
            step = strategies.ClarabelStep(local)
            step.prepare(weights, SolveStats())
            q = step.linear_term(-linear)
            hessian = step.hessian(weights)
            x = np.asarray(solved(step, q, step.data.b, REFERENCE).x)
            for _ in range(2):
                x = x + np.asarray(solved(step, hessian @ x + q, step.data.b - step.data.A @ x, REFERENCE).x)
            reference = x[step.data.columns][shared]
            first = solved(step, q, step.data.b, strategies.SOLVER_SETTINGS[cp.CLARABEL])
            first_gap = max(first_gap, abs(first.obj_val - first.obj_val_dual))
            first_error = max(first_error, np.abs(np.asarray(first.x)[step.data.columns][shared] - reference).max())
            answer, _ = step.solve(weights, -linear, None, False, SolveStats())
            strategy_error = max(strategy_error, np.abs(answer[shared] - reference).max())
        print(f"| {layout.name} | {len(chosen)} | {first_error:.1e} | {strategy_error:.1e} | {first_gap:.1e} |",
              flush=True)


if __name__ == "__main__":
    main()
