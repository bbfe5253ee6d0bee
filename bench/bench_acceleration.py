"""Rounds to converge with each server-side acceleration (non-private): the table of docs/tuning.md.

    nice -n 15 .venv/bin/python bench/bench_acceleration.py [--problems core digits dispatch case14 case118]
        [--options defaults relaxation=1.6 ...] [--csv bench/acceleration.csv]

For each problem, each option of :data:`OPTIONS` (keyword arguments of ``problem.solve``) and each E: the first
round at which the relative objective gap to the centralized optimum is <= 1e-3 (power flow, whose optimum is 0:
the objective is <= 1e-3) and the consensus residual is <= 1e-3. The run stops there. ``rho=<number>`` rows are
the hand-tuned grid (eta="auto", a fixed rho). Round counts are deterministic; seconds depend on the machine's
load. Rows are appended to the CSV as they finish.
"""

from __future__ import annotations

import argparse
import ast
import csv
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))
from core_problems import box_l1_least_squares, general_form, soc_linear  # noqa: E402
from references import logistic_optimum  # noqa: E402

#: The accelerations compared, by label (parsed as ``key=value`` pairs separated by ", ").
OPTIONS = ("defaults", "relaxation=1.6", "relaxation=1.8", "anderson=5", "anderson=10", "rho='adaptive-per-key'",
           "relaxation=1.6, anderson=5", "relaxation=1.6, rho='adaptive-per-key'")
#: The hand-tuned fixed rho values per problem.
RHO_GRIDS = {"digits": (1e-3, 3e-3, 1e-2, 3e-2, 0.1), "dispatch": (0.1, 0.3, 1.0, 3.0),
             "case14": (1.0, 10.0, 100.0), "case118": (1.0, 10.0, 100.0)}
FIELDS = ("problem", "E", "setting", "rounds_to_1e-3", "max_rounds", "seconds")


def parse(label: str) -> dict[str, Any]:
    """``"relaxation=1.6, anderson=5"`` -> keyword arguments (``"defaults"`` -> none)."""
    if label == "defaults":
        return {}
    return {key: ast.literal_eval(value) for key, value in (part.split("=", 1) for part in label.split(", "))}


def problems(names: list[str]) -> list[tuple[str, Any, float, bool, int, tuple[int, ...]]]:
    """(name, problem, reference, absolute criterion, max rounds, E values) for each requested problem."""
    built = []
    if "core" in names:
        for name, builder in (("box + l1-ball LS", box_l1_least_squares), ("SOC + linear", soc_linear),
                              ("general form", general_form)):
            problem = builder()[0]
            built.append((name, problem, problem.solve_centralized().value, False, 300, (1,)))
    if "digits" in names:
        from problems import datasets, federated_logistic

        features, labels = datasets.load_digits()
        problem = federated_logistic(features, labels, agents=4, bound=1.0, seed=0)
        built.append(("digits", problem, logistic_optimum(features, labels, bound=1.0), False, 8000, (1, 5)))
    if "dispatch" in names:
        from economic_dispatch import dispatch_problem, fleet

        problem = dispatch_problem(fleet(4, 6))
        built.append(("dispatch", problem, problem.solve_centralized().value, False, 2000, (1,)))
    for case in ("case14", "case118"):
        if case in names:
            import powerflow

            built.append((case, powerflow.zonal_problem(case, zones=3), 0.0, True, 600, (1,)))
    return built


def first_round(problem: Any, reference: float, absolute: bool, rounds: int,
                options: dict[str, Any], tolerance: float = 1e-3) -> tuple[int | None, float]:
    """The first round meeting the criterion at ``tolerance`` (None if not within ``rounds``), and the run's
    seconds."""
    hit: list[int] = []

    def callback(row: dict[str, Any]) -> bool:
        gap = row["objective"] if absolute else abs(row["objective"] - reference) / abs(reference)
        if gap <= tolerance and row["consensus_residual"] <= tolerance:
            hit.append(int(row["round"]))
        return not hit

    start = time.perf_counter()
    problem.solve(rounds=rounds, callback=callback, **options)
    return (hit[0] if hit else None), time.perf_counter() - start


def record(emit: Callable[[str], None], path: Path | None, row: tuple[str, int, str, int | None, int, float]) -> None:
    """Emit one markdown row (problem, E, setting, rounds to 1e-3 or None, max rounds, seconds); append to the CSV."""
    name, e, label, hit, rounds, seconds = row
    emit(f"| {name} | {e} | {label} | {hit if hit is not None else f'> {rounds}'} | {seconds:.1f} |")
    if path is not None:
        new = not path.exists()
        with path.open("a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(FIELDS)
            writer.writerow([name, e, label, hit if hit is not None else "", rounds, round(seconds, 1)])


def main(argv: list[str] | None = None, emit: Callable[[str], None] = print) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--problems", nargs="+", default=["core", "digits", "dispatch", "case14", "case118"])
    parser.add_argument("--options", nargs="+", default=list(OPTIONS))
    parser.add_argument("--no-grid", action="store_true", help="leave out the hand-tuned rho grid")
    parser.add_argument("--local-updates", type=int, nargs="+", default=None, help="only these E")
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    emit("| problem | E | setting | rounds to 1e-3 | seconds |")
    emit("|---|---|---|---|---|")
    for name, problem, reference, absolute, rounds, local_updates in problems(args.problems):
        grid = () if args.no_grid else tuple(f"rho={rho:g}" for rho in RHO_GRIDS.get(name, ()))
        for e in (e for e in local_updates if args.local_updates is None or e in args.local_updates):
            for label in (*args.options, *grid):
                hit, seconds = first_round(problem, reference, absolute, rounds, {"local_updates": e, **parse(label)})
                record(emit, args.csv, (name, e, label, hit, rounds, seconds))


if __name__ == "__main__":
    main(emit=lambda line: print(line, flush=True))
