"""Does a default run that met the target stay there? Zonal power flow, non-private, the defaults.

    nice -n 5 .venv/bin/python bench/bench_stays_converged.py [--cases iceland] [--zones 5] [--rounds 600]
        [--until N]

For each case: ``powerflow.zonal_problem(case, zones)``, its centralized reference, then one run of
``LinearizedADMM()`` (the defaults: the exact step and `exact_step_penalty`, which settles once the run meets
EXACT_STEP_SETTLE; with ``--until N``, the per-key penalty frozen after N rounds instead,
``rho=PerKeyBalancing(until=N)``) for all ``--rounds`` rounds (no early stop). Per run: the first round that meets
the target (objective - f* <= 1e-3 and consensus residual <= 1e-3, as in bench/bench_grids.py), how many of the
later rounds miss it, the largest consensus residual after it; the same from the first round that also has a dual
residual <= 1e-3 (a round where the consensus residual only dips through 1e-3 while w still moves is not
"converged"); the final residual and objective gap, the run's status and seconds. Issue 31: iceland (5 zones) left
the target it had met while the per-key penalty kept adapting; docs/tuning.md, "Iceland", has the runs before and
after the fix.

Last, from the transcript: the round from which the penalty no longer changes, and how often after it He & Yuan's
quantity V_t = sum_p sum_c rho_c ((w_p - z_p)_c^2 + (z_p^t - z_p^(t-1))_c^2) (over every agent p and shared copy c)
rises, and by what largest factor. For ADMM with a fixed (diagonal) rho and exact local steps V_t never rises
(B. He and X. Yuan, "On non-ergodic convergence rate of Douglas-Rachford alternating direction method of multipliers",
Numer. Math. 130, 2015: ||v^k - v^(k+1)||_H^2 is nonincreasing for v = (second block, multipliers), H = diag(rho B'B,
I / rho); here the second block is the agents' z, since the server's w comes first in a round), and the primal residual
r_t <= sqrt(V_t / min rho): a rise after the penalty has settled is a local step that was not exact.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import powerflow
import privcvx as pc
from privcvx.schedules import PerKeyBalancing
from privcvx.topology import SERVER


def stays(case: str, zones: int, rounds: int, until: int | None = None) -> dict[str, object]:
    """One default run (or with the per-key penalty frozen after ``until`` rounds) and its target record."""
    problem = powerflow.zonal_problem(case, zones)
    reference = problem.solve_centralized()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.ConvergenceWarning)
        algorithm = pc.algorithms.LinearizedADMM() if until is None else \
            pc.algorithms.LinearizedADMM(rho=PerKeyBalancing(until=until))
        result = problem.solve(algorithm, rounds=rounds)
    seconds = time.perf_counter() - start
    residual = result.history["consensus_residual"].to_numpy()
    gap = result.history["objective"].to_numpy() - reference.value
    met = (residual <= 1e-3) & (gap <= 1e-3)
    settled = met & (result.history["dual_residual"].to_numpy() <= 1e-3)
    return {"case": case, "zones": zones, **_after(met, residual, ""), **_after(settled, residual, "_settled"),
            "final_residual": float(residual[-1]), "final_gap": float(gap[-1]), "status": result.status,
            "seconds": seconds, **_he_yuan(result)}


def _he_yuan(result: pc.Result) -> dict[str, object]:
    """He & Yuan's V_t per round from the transcript (the module's docstring), the first round from which rho no
    longer changes, and the rises of V after it (count, largest factor)."""
    sent: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    released: dict[int, dict[str, np.ndarray]] = {}
    for message in result.transcript:
        if message.sender == SERVER:
            sent.setdefault(message.round, {})[message.receiver] = (message["w"], np.asarray(message["rho"]))
        elif message.receiver == SERVER:
            released.setdefault(message.round, {})[message.sender] = message["z"]
    rounds = sorted(t for t in sent if t - 1 in released and t in released)
    values, rhos = [], []
    for t in rounds:
        total = 0.0
        for agent, (w, rho) in sent[t].items():
            z, previous = released[t][agent], released[t - 1][agent]
            total += float(np.sum(rho * ((w - z) ** 2 + (z - previous) ** 2)))
        values.append(total)
        rhos.append(np.concatenate([np.ravel(sent[t][agent][1]) for agent in sorted(sent[t])]))
    fixed = len(rounds) - 1
    while fixed > 0 and np.array_equal(rhos[fixed - 1], rhos[-1]):
        fixed -= 1
    after = np.array(values[fixed:])
    ratios = after[1:] / after[:-1]
    return {"settled_round": rounds[fixed], "v_rises": int((ratios > 1).sum()),
            "v_largest_rise": float(ratios.max(initial=1.0))}


def _after(met: np.ndarray, residual: np.ndarray, suffix: str) -> dict[str, object]:
    """The first round that meets the target (1-based), how many later rounds miss it, and the largest residual."""
    first = int(np.argmax(met)) if met.any() else None
    return {f"first{suffix}": None if first is None else first + 1,
            f"missed_after{suffix}": None if first is None else int((~met[first:]).sum()),
            f"worst_after{suffix}": None if first is None else float(residual[first:].max())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["iceland"])
    parser.add_argument("--zones", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--until", type=int, default=None)
    args = parser.parse_args(argv)
    print("| case | zones | penalty | first round on target | later rounds off it | largest residual after "
          "| first with dual residual <= 1e-3 | later rounds off it | largest residual after "
          "| final residual | final f - f* | status | s | rho fixed from round | rises of V after it | largest rise |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for case in args.cases:
        row = stays(case, args.zones, args.rounds, args.until)
        penalty = "default" if args.until is None else f"frozen after {args.until}"
        cells = []
        for suffix in ("", "_settled"):
            worst = row[f"worst_after{suffix}"]
            cells += [row[f"first{suffix}"] or f"> {args.rounds}", row[f"missed_after{suffix}"],
                      "-" if worst is None else f"{worst:.2e}"]
        print(f"| {case} | {args.zones} | {penalty} | {' | '.join(str(c) for c in cells)} "
              f"| {row['final_residual']:.2e} | {row['final_gap']:.2e} | {row['status']} | {row['seconds']:.0f} "
              f"| {row['settled_round']} | {row['v_rises']} | {row['v_largest_rise']:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
