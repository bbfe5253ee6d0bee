"""Private cost OPF: ObjPert on the DP-ready objective "cost+shedding" of case14 and case39 (issue 30, item 1).

Each zone minimizes its generation cost plus gamma times its squared mismatches (Eq. (28)), its loads private in
f_p. The declared gradient sensitivity is gamma times Eq. (28)'s exact one (`powerflow.zonal.gradient_sensitivity`),
so ObjPert's noise grows with gamma. Printed per case: the total generation cost, the shed load (the sum of the
absolute active mismatches, MW) and the largest zone's epsilon, for the non-private run of the same objective
(defaults), and for ObjPert with the Gaussian mechanism at the epsilons below, beside socopf's cost.

Run: ``PYTHONPATH=. python examples/cost_opf_private.py`` (about 10 minutes on 2 cores); ``--quick`` runs case14 only,
briefly; ``--penalty 1e5 --cases case14`` another gamma on one case; ``--tradeoff`` the centralized optimum per gamma.
"""

from __future__ import annotations

import argparse
import warnings

import cvxpy as cp
import numpy as np

import powerflow
import privcvx as pc
from powerflow import zonal

#: (case, zones), the total epsilon per zone of each private run, delta, and the rounds of Algorithm 1.
CASES = (("case14", 3), ("case39", 3))
EPSILONS = (1.0, 10.0)
DELTA = 1e-5
ROUNDS = 200
#: The pull of each zone's shared entries to the released consensus in `dispatch` ($/h per p.u.^2).
HOLD = 1e7


def dispatch(problem: pc.DistributedProblem, w: np.ndarray) -> tuple[float, float]:
    """Generation cost and shed load (MW: the sum over the buses of |active mismatch|) of the dispatch the zones
    settle on: each zone's own f_p over W_p with its shared entries pulled to the released consensus w (the
    penalty `HOLD` on the distance; exact equality can be infeasible for a noisy w). Each zone computes its part
    on its own data; the totals here are for this report."""
    for agent, layout, model in zip(problem.agents, problem.layouts, problem.info["models"], strict=True):
        shared = model.x[layout.shared_local]
        cp.Problem(cp.Minimize(agent.objective + HOLD * cp.sum_squares(shared - w[layout.shared_global])),
                   agent.constraints).solve(solver=cp.CLARABEL)
    return totals(problem)


def totals(problem: pc.DistributedProblem) -> tuple[float, float]:
    """Generation cost and shed load (MW) of the zones' current variable values."""
    models = problem.info["models"]
    return (sum(float(model.generation_cost().value) for model in models),
            sum(float(np.abs(model.mismatch.value[: model.pd.size]).sum()) * model.data.base_mva for model in models))


def tradeoff(case: str = "case14", zones: int = 3, penalties: tuple[float, ...] = (1e4, 1e5, 1e6, 1e7)) -> None:
    """The weight/noise trade-off without noise: the centralized optimum of "cost+shedding" per gamma (its cost and
    shed load) beside the largest zone's declared l2 gradient sensitivity, which ObjPert's noise is proportional to."""
    print("| gamma ($/h per p.u.^2) | generation cost ($/h) | shed load (MW) | largest l2 gradient sensitivity |")
    print("|---|---|---|---|")
    for penalty in penalties:
        problem = powerflow.zonal_problem(case, zones, objective="cost+shedding", penalty=penalty)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problem.solve_centralized()
        cost, shed = totals(problem)
        sensitivity = max(agent.sensitivity.l2 for agent in problem.agents)
        print(f"| {penalty:g} | {cost:.1f} | {shed:.2f} | {sensitivity:.4g} |")


def main(quick: bool = False, penalty: float = zonal.DEFAULT_PENALTY, cases: tuple[str, ...] = ()) -> None:
    """Print the table; ``penalty`` is gamma, ``cases`` a subset of `CASES` by name."""
    rounds = 30 if quick else ROUNDS
    chosen = [(case, zones) for case, zones in CASES if case in cases] if cases else list(CASES)
    print(f"gamma = {penalty:g}")
    print("| case | run | rounds | generation cost ($/h) | shed load (MW) | epsilon per zone (delta = 1e-5) |")
    print("|---|---|---|---|---|---|")
    for case, zones in chosen[:1] if quick else chosen:
        reference = powerflow.socopf(case, objective="cost")
        problem = powerflow.zonal_problem(case, zones, objective="cost+shedding", penalty=penalty)
        print(f"| {case} | socopf(objective='cost') | - | {reference.value:.1f} | 0 | - |")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs = {"non-private, defaults": problem.solve(rounds=rounds)}
            for epsilon in EPSILONS:
                runs[f"ObjG, total eps = {epsilon:g}"] = problem.solve(
                    rounds=rounds, seed=0, privacy=pc.ObjectivePerturbation(pc.Budget(epsilon, DELTA)))
            for label, result in runs.items():
                cost, shed = dispatch(problem, result.w)
                eps = float(result.privacy["epsilon_pld"].max()) if result.privacy is not None else float("nan")
                eps_text = "-" if label.startswith("non-private") else f"{eps:.3g}"
                print(f"| {case} | {label} | {rounds} | {cost:.1f} | {shed:.2f} | {eps_text} |", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="case14 only, 30 rounds")
    parser.add_argument("--penalty", type=float, default=zonal.DEFAULT_PENALTY, help="gamma ($/h per p.u.^2)")
    parser.add_argument("--cases", nargs="*", default=[], help="a subset of case14 case39")
    parser.add_argument("--tradeoff", action="store_true", help="only the centralized optimum per gamma on case14")
    arguments = parser.parse_args()
    if arguments.tradeoff:
        tradeoff()
    else:
        main(arguments.quick, arguments.penalty, tuple(arguments.cases))
