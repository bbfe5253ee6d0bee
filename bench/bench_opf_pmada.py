"""privcvx's distributed cost OPF beside PowerModelsADA's published SOC-relaxation table (issue 30, item 4).

For each case: ``powerflow.zonal_problem(net, zones, objective="cost")`` solved with the library's defaults
(``problem.solve(rounds=MAX_ROUNDS)``: no rho, no eta, no tuning), and PowerModelsADA's success criterion
(docs/src/comparison.md of PowerModelsADA): the l2 norm of the consensus mismatches below 0.01
(`powerflow.zonal.consensus_mismatch`) and the cost within 1% of the centralized optimum
(``powerflow.socopf(net, objective="cost")``, Clarabel). Reported: the first round that meets both, the wall time
of the distributed run up to that round (serial over the zones, on this machine), and the centralized solve's
seconds. Beside the defaults: the penalty rule the defaults use for Eq. (28) (free per-key residual balancing from
the largest L_p, ``privcvx.algorithms.linearized_admm.exact_step_penalty``), which was the cost OPF's default before
``powerflow.zonal.cost_penalty_rule``. pandapower's cases are MATPOWER's, not PGLib's: their limits and costs
differ from PowerModelsADA's. case118 is not in PowerModelsADA's table; case300 gets one data fix (below).

Areas: ``zones="area"``, the partition in ``net.bus.zone`` (case24_ieee_rts, case30, case39), taken as it is (case39's
area 3 is in two pieces, which one zone's agent owns).

Run: ``PYTHONPATH=. python bench/bench_opf_pmada.py`` (about 5 minutes on 2 cores), or give case names.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

import powerflow
from powerflow.zonal import consensus_mismatch
from privcvx.schedules import PerKeyBalancing

#: PowerModelsADA v0.1.1's SOC-relaxation ADMM table (hand-tuned alpha; Julia 1.8, Ipopt, 16 cores): case ->
#: (areas, iterations, seconds).
PMADA = {"case14": (2, 12, 1.29), "case24_ieee_rts": (4, 39, 3.85), "case30": (3, 12, 1.32),
         "case39": (3, 41, 5.34), "case300": (4, 11, 5.64), "case118": (None, None, float("nan"))}
#: The zones of each case: a count (Louvain, `powerflow.partition`) or "area" (``net.bus.zone``).
ZONES = {"case14": 2, "case24_ieee_rts": "area", "case30": "area", "case39": "area", "case300": 4, "case118": 3}
#: case300's data fix: the slack's reactive limits widened to +-this (MVAr); the cost is then the SOC optimum.
CASE300_SLACK_Q_MVAR = 9999.0
#: PowerModelsADA's thresholds: l2 consensus mismatch and relative cost error.
MISMATCH_TOL, COST_TOL = 0.01, 0.01
#: Rounds before a case counts as not converged (PowerModelsADA allows 10,000 iterations).
MAX_ROUNDS = 300


def run(case: str) -> dict[str, object]:
    net = powerflow.load_case(case)
    if case == "case300":  # as shipped, its SOC relaxation (and AC OPF) is infeasible: the slack's Q is in [0, 10] MVAr
        net.ext_grid["min_q_mvar"], net.ext_grid["max_q_mvar"] = -CASE300_SLACK_Q_MVAR, CASE300_SLACK_Q_MVAR
    zones = ZONES[case]
    reference = powerflow.socopf(net, objective="cost")
    problem = powerflow.zonal_problem(net, zones, objective="cost")
    runs = {"defaults": {}, "Eq. (28)'s rule": {"local_updates": "exact", "rho": PerKeyBalancing(until=None)}}
    areas, iterations, seconds = PMADA[case]
    row: dict[str, object] = {"case": case, "zones": len(set(problem.info["zones"].values())),
                              "central_s": reference.solve_time, "pmada_areas": areas,
                              "pmada_iterations": iterations, "pmada_seconds": seconds}
    for label, settings in runs.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = problem.solve(rounds=MAX_ROUNDS, **settings)
        mismatch = consensus_mismatch(problem, result)
        error = np.abs(result.history["objective"].to_numpy() - reference.value) / abs(reference.value)
        met = np.flatnonzero((mismatch < MISMATCH_TOL) & (error < COST_TOL))
        rounds = int(met[0]) + 1 if len(met) else None
        row[label] = (rounds, float(result.history["time_s"].iloc[rounds - 1]) if rounds else float("nan"))
    return row


def main(cases: list[str]) -> None:
    print("| case (pandapower: MATPOWER data) | zones | privcvx defaults: rounds | s | Eq. (28)'s rule: rounds | s "
          "| centralized Clarabel s | PMADA (PGLib) areas | PMADA ADMM iterations (tuned alpha) | PMADA s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        row = run(case)
        cells = []
        for label in ("defaults", "Eq. (28)'s rule"):
            rounds, seconds = row[label]
            cells += [str(rounds) if rounds is not None else f"> {MAX_ROUNDS}", f"{seconds:.2f}"]
        print(f"| {case} | {row['zones']} | {' | '.join(cells)} | {row['central_s']:.3f} | {row['pmada_areas']} | "
              f"{row['pmada_iterations']} | {row['pmada_seconds']:.2f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(ZONES))
