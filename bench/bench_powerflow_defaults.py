"""Rounds of the untuned default call on power-flow cases, and a full N-1 study, for docs/powerflow.md.

    PYTHONPATH=. .venv/bin/python bench/bench_powerflow_defaults.py                 # default rounds per case
    PYTHONPATH=. .venv/bin/python bench/bench_powerflow_defaults.py --n-minus-1     # N-1 of case14 and case39 (areas)

The default call is ``powerflow.zonal_problem(case, zones)`` and ``problem.solve(rounds=1000, tol=(1e-4, 1e-3))``:
Algorithm 1 with every setting at its default (rho "adaptive", eta "auto", E "auto"), stopped once Boyd et al.'s
residual test holds at its default tolerance (docs/algorithms.md, "Status"). Non-private runs.
"""

from __future__ import annotations

import argparse
import time
import warnings

import powerflow

#: (case, zones) of the default-rounds table.
CASES = [("case14", 3), ("case_ieee30", 3), ("case39", 3), ("case39", "area"), ("case30", "area"),
         ("case24_ieee_rts", "area"), ("case118", 3), ("GBreducednetwork", 3), ("case33bw", 3)]
#: The default call's run options.
DEFAULT_SOLVE = {"rounds": 1000, "tol": (1e-4, 1e-3)}


def default_rounds() -> None:
    print("| case | zones | rounds | status | objective (last round) | centralized optimum | seconds (build + solve) |")
    print("|---|---|---|---|---|---|---|")
    for case, zones in CASES:
        start = time.perf_counter()
        problem = powerflow.zonal_problem(case, zones)
        result = problem.solve(**DEFAULT_SOLVE)
        seconds = time.perf_counter() - start
        optimum = powerflow.socopf(case).value
        print(f"| {case} | {zones} | {len(result.history)} | {result.status} | "
              f"{result.history['objective'].iloc[-1]:.1e} | {optimum:.1e} | {seconds:.1f} |", flush=True)


def n_minus_1() -> None:
    for case, zones in (("case14", 3), ("case39", "area")):
        start = time.perf_counter()
        table = powerflow.n_minus_1(case, zones=zones)
        print(f"\n{case}, zones={zones!r}: {len(table)} outages in {time.perf_counter() - start:.0f} s")
        columns = [c for c in table.columns if c != "note"]
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for row in table.itertuples(index=False):
            print("| " + " | ".join(f"{getattr(row, c):.3g}" if isinstance(getattr(row, c), float) else
                                    str(getattr(row, c)) for c in columns) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-minus-1", action="store_true", help="the N-1 studies instead of the default rounds")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n_minus_1() if args.n_minus_1 else default_rounds()


if __name__ == "__main__":
    main()
