"""Rounds to converge with each penalty rule (non-private): the rho="adaptive" table of docs/tuning.md.

    nice -n 15 .venv/bin/python bench/bench_rho_rules.py [--problems core digits dispatch case14 case118]
        [--rules defaults old ...] [--no-grid] [--csv bench/rho_rules.csv]

For each problem, each E of :data:`LOCAL_UPDATES` and each rule of :data:`RULES` (and, unless ``--no-grid``, each
fixed rho of ``bench_acceleration.RHO_GRIDS``, widened on digits to :data:`DIGITS_GRID`): the first round at which
the relative objective gap to the centralized optimum is <= 1e-3 (power flow, whose optimum is 0: the objective is
<= 1e-3) and the consensus residual is <= 1e-3 (``--tolerance`` for another threshold), as in
``bench/bench_acceleration.py``; eta="auto" throughout.
Round counts are deterministic; seconds depend on the machine's load. Rows are appended to the CSV as they finish.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_acceleration import RHO_GRIDS, first_round, problems, record  # noqa: E402

from privcvx.schedules import ResidualBalancing, adaptive  # noqa: E402

#: The penalty rules compared, by label: a factory of the ``rho`` argument (None: the default).
RULES: dict[str, Callable[[], Any]] = {
    "defaults": lambda: None,
    "old": ResidualBalancing,  # the absolute rule that was rho="adaptive" before
    "relative": lambda: ResidualBalancing(relative=True),  # Wohlberg's
    "peak, tau=2, mu=10": lambda: ResidualBalancing(relative="peak"),
    "peak, tau=2, mu=10, warm-up": lambda: ResidualBalancing(relative="peak", warmup=1),
    "defaults with tau=2": lambda: adaptive(tau=2.0),
    "defaults with mu=10": lambda: adaptive(mu=10.0),
    "defaults without warm-up": lambda: ResidualBalancing(relative="peak", tau=1.5, mu=20.0),
}
#: E per problem (digits at E = 1 needs thousands of rounds with every rule).
LOCAL_UPDATES = {"digits": (5,), "dispatch": (1,), "case118": (1,)}
#: Fixed rho on digits: the grid of docs/tuning.md, widened below 1e-3.
DIGITS_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1)
#: Round limits (digits: the fixed rho = 0.1 needs 4722).
LIMITS = {"digits": 5000, "dispatch": 2000, "case118": 600}


def main(argv: list[str] | None = None, emit: Callable[[str], None] = print) -> None:
    warnings.simplefilter("ignore")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--problems", nargs="+", default=["core", "digits", "dispatch", "case14", "case118"])
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    parser.add_argument("--no-grid", action="store_true", help="leave out the fixed rho values")
    parser.add_argument("--tolerance", type=float, default=1e-3, help="of the gap and the consensus residual")
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args(argv)
    emit(f"| problem | E | rule | rounds to {args.tolerance:g} | seconds |\n|---|---|---|---|---|")
    for name, problem, reference, absolute, rounds, _ in problems(args.problems):
        rounds = LIMITS.get(name, rounds)
        grid = () if args.no_grid else (DIGITS_GRID if name == "digits" else RHO_GRIDS.get(name, ()))
        settings = [(label, RULES[label]()) for label in args.rules] + [(f"rho={rho:g}", rho) for rho in grid]
        for e in LOCAL_UPDATES.get(name, (1, 5)):
            for label, rho in settings:
                options = {"local_updates": e} if rho is None else {"local_updates": e, "rho": rho}
                hit, seconds = first_round(problem, reference, absolute, rounds, options, args.tolerance)
                tag = label if args.tolerance == 1e-3 else f"{label} (to {args.tolerance:g})"
                record(emit, args.csv, (name, e, tag, hit, rounds, seconds))

if __name__ == "__main__":
    main(emit=lambda line: print(line, flush=True))
