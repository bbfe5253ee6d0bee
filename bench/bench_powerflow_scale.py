"""Scale and convergence numbers of the zonal power-flow problem, for docs/powerflow.md.

    .venv/bin/python bench/bench_powerflow_scale.py            # PEGASE builds and one round (item 6)
    .venv/bin/python bench/bench_powerflow_scale.py --admm     # non-private ADMM on case14 / case118 (item 5)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import powerflow


def scale(cases: list[str], zone_counts: list[int], rounds: int) -> None:
    print("| case | zones | build s | cut branches | keys | local dims (min/median/max) | constraint rows "
          "(max) | round 1 s | later rounds s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        net = powerflow.load_case(case)
        start = time.perf_counter()
        reference = powerflow.socopf(net)
        print(f"<!-- {case}: centralized load shedding {reference.value:.3e} in {time.perf_counter() - start:.2f} s, "
              f"fixes: {net['privcvx_fixes']} -->")
        for zones in zone_counts:
            start = time.perf_counter()
            problem = powerflow.zonal_problem(net, zones)
            build = time.perf_counter() - start
            dims = [model.x.size for model in problem.info["models"]]
            rows = [sum(c.size for c in agent.constraints) for agent in problem.agents]
            eta = 1.0 / max(agent.smoothness for agent in problem.agents)
            result = problem.solve(rounds=rounds, local_updates=1, rho=100.0, eta=eta)
            times = np.diff(np.concatenate([[0.0], result.history["time_s"].to_numpy()]))
            print(f"| {case} | {zones} | {build:.2f} | {len(problem.info['cut_branches'])} | {len(problem.keys)} | "
                  f"{min(dims)}/{int(np.median(dims))}/{max(dims)} | {max(rows)} | {times[0]:.2f} | "
                  f"{np.mean(times[1:]):.2f} |", flush=True)


def admm(rounds: int) -> None:
    print("| case | rho | eta | E | rounds to objective <= 1e-4 and residual <= 1e-3 | time s | s / round |")
    print("|---|---|---|---|---|---|---|")
    for case, rho in (("case14", 10.0), ("case118", 30.0), ("case118", 100.0)):
        problem = powerflow.zonal_problem(case, 3)
        eta = 1.8 / max(agent.smoothness for agent in problem.agents)
        result = problem.solve(rounds=rounds, local_updates=1, rho=rho, eta=eta,
                               callback=lambda row: not (row["objective"] <= 1e-4
                                                         and row["consensus_residual"] <= 1e-3))
        last = result.history.iloc[-1]
        print(f"| {case} | {rho:g} | 1.8/{max(problem.info['smoothness']):g} | 1 | {int(last['round'])} "
              f"(objective {last['objective']:.1e}, residual {last['consensus_residual']:.1e}) | "
              f"{last['time_s']:.1f} | {last['time_s'] / last['round'] * 1e3:.0f} ms |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--admm", action="store_true", help="ADMM convergence on case14 and case118")
    parser.add_argument("--cases", nargs="+", default=["case1354pegase", "case2869pegase"])
    parser.add_argument("--zones", nargs="+", type=int, default=[8, 16])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)
    if args.admm:
        admm(max(args.rounds, 600))
    else:
        scale(args.cases, args.zones, args.rounds)


if __name__ == "__main__":
    main()
