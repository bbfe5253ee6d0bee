"""Private cost OPF: ObjPert on the DP-ready objective "cost+shedding" of case14 and case39 (issue 30, item 1).

Each zone minimizes its generation cost plus gamma times its squared mismatches (Eq. (28)), its loads private in
f_p. The declared gradient sensitivity is gamma times Eq. (28)'s exact one (`powerflow.zonal.gradient_sensitivity`),
so ObjPert's noise grows with gamma. Printed per case: the total generation cost, the shed load (the sum of the
absolute active mismatches, MW) and the largest zone's epsilon, for the non-private run of the same objective
(defaults), and for ObjPert with the Gaussian mechanism at the epsilons below, beside socopf's cost.

Run: ``PYTHONPATH=. python examples/cost_opf_private.py`` (a few minutes); ``--quick`` runs case14 only, briefly.
"""

from __future__ import annotations

import sys
import warnings

import cvxpy as cp
import numpy as np

import powerflow
import privcvx as pc

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
    cost = shed = 0.0
    for agent, layout, model in zip(problem.agents, problem.layouts, problem.info["models"], strict=True):
        shared = model.x[layout.shared_local]
        cp.Problem(cp.Minimize(agent.objective + HOLD * cp.sum_squares(shared - w[layout.shared_global])),
                   agent.constraints).solve(solver=cp.CLARABEL)
        cost += float(model.generation_cost().value)
        shed += float(np.abs(model.mismatch.value[: model.pd.size]).sum()) * model.data.base_mva
    return cost, shed


def main(quick: bool = False) -> None:
    rounds = 30 if quick else ROUNDS
    print("| case | run | rounds | generation cost ($/h) | shed load (MW) | epsilon per zone (delta = 1e-5) |")
    print("|---|---|---|---|---|---|")
    for case, zones in CASES[:1] if quick else CASES:
        reference = powerflow.socopf(case, objective="cost")
        problem = powerflow.zonal_problem(case, zones, objective="cost+shedding")
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
    main(quick="--quick" in sys.argv)
