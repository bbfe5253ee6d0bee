"""Rounds to converge on the training set of grids (issue 14): zonal power flow, non-private.

    nice -n 15 .venv/bin/python bench/bench_grids.py [--cases case9 case118] [--zones 4] [--rounds 600]
        [--method linearized|exact] [--option rho=100 --option local_updates=5] [--label defaults]
        [--csv grids.csv] [--markdown grids.md]
    .venv/bin/python bench/bench_grids.py --summary grids.csv    # one column per setting, ratio to ExactADMM

For each case: zones from ``powerflow.partition`` (``--zones``, default 4), the centralized reference
``problem.solve_centralized()``, then one run of ``LinearizedADMM`` (``--method linearized``, the default) or
``ExactADMM`` (``--method exact``) with the ``--option key=value`` settings (values are Python literals, else
strings; they go to the algorithm's constructor), for at most ``--rounds`` rounds. The run stops as soon as both
criteria below are met. Criteria, per round t (docs/tuning.md, "The training set of grids"):

* **PowerModelsADA's**: mismatch < 0.01 and relative error < 1%, where the mismatch is the consensus residual
  ``sqrt(sum_p ||w_p - z_p||^2)`` over every shared copy (p.u.), and the relative error is
  ``|sqrt(f) - sqrt(f*)| / ||d||``: f the objective (squared mismatches, Eq. (28)), f* the centralized optimum and
  ``||d||`` the 2-norm of the loads ``[pd; qd]`` (p.u.). The load-shedding optimum is 0 on a feasible case, so
  PowerModelsADA's ``|f - f*| / |f*|`` is undefined; this is the unserved power relative to the load instead.
* **objective - f* <= 1e-3 and consensus residual <= 1e-3** (the issue's target, objective <= 1e-3, where the
  case can serve its load, f* = 0; case145, case_illinois200 and case300 cannot, see docs/powerflow.md).

Each row also has the seconds of the run, the set-up seconds (building the zonal problem and the reference
solve), the reference's status, and the local solves that came back inaccurate or through a fallback solver.
Rows are appended to the CSV as they finish.
"""

from __future__ import annotations

import argparse
import ast
import csv
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import powerflow
import privcvx as pc

TRAINING_SET = ("case9", "case24_ieee_rts", "case89pegase", "case118", "case145", "case_illinois200", "case300")
FIELDS = ("case", "zones", "method", "label", "options", "rounds", "rounds_pmada", "rounds_target", "objective",
          "optimum", "consensus_residual", "relative_error", "seconds", "setup_seconds", "reference_status",
          "solves", "inaccurate", "fallbacks", "stop")


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` with a Python-literal value (a string when it is not one)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def load_norm(problem: pc.DistributedProblem) -> float:
    """2-norm of every load ``[pd; qd]`` of the network (p.u.), over the zones' own buses."""
    return float(np.sqrt(sum(np.sum(m.pd.value ** 2) + np.sum(m.qd.value ** 2) for m in problem.info["models"])))


def relative_error(objective: float, optimum: float, norm: float) -> float:
    """``|sqrt(f) - sqrt(f*)| / ||d||``: the unserved power's distance to the optimum's, relative to the load."""
    return abs(np.sqrt(max(objective, 0.0)) - np.sqrt(max(optimum, 0.0))) / norm


def run_case(case: str, zones: int, method: str, options: dict[str, Any], rounds: int) -> dict[str, Any]:
    """One run; returns a row of :data:`FIELDS` (without ``label``)."""
    start = time.perf_counter()
    problem = powerflow.zonal_problem(case, zones)
    reference = problem.solve_centralized()
    setup = time.perf_counter() - start
    norm = load_norm(problem)
    hits: dict[str, int | None] = {"pmada": None, "target": None}

    def callback(row: dict[str, Any]) -> bool:
        residual, objective = row["consensus_residual"], row["objective"]
        if hits["pmada"] is None and residual < 1e-2 and relative_error(objective, reference.value, norm) < 1e-2:
            hits["pmada"] = int(row["round"])
        if hits["target"] is None and objective - reference.value <= 1e-3 and residual <= 1e-3:
            hits["target"] = int(row["round"])
        return hits["pmada"] is None or hits["target"] is None

    algorithm = pc.algorithms.ExactADMM(**options) if method == "exact" else pc.algorithms.LinearizedADMM(**options)
    start = time.perf_counter()
    try:
        result = problem.solve(algorithm, rounds=rounds, callback=callback)
    except pc.errors.RunFailed as exc:
        result = exc.result
    seconds = time.perf_counter() - start
    last = result.history.iloc[-1]
    reports = result.info.get("projection", [])
    return {"case": case, "zones": zones, "method": method,
            "options": " ".join(f"{k}={v}" for k, v in options.items()),
            "rounds": int(last["round"]), "rounds_pmada": hits["pmada"], "rounds_target": hits["target"],
            "objective": float(last["objective"]), "optimum": reference.value,
            "consensus_residual": float(last["consensus_residual"]),
            "relative_error": relative_error(float(last["objective"]), reference.value, norm),
            "seconds": seconds, "setup_seconds": setup, "reference_status": reference.status,
            "solves": sum(r.get("solves", 0) for r in reports),
            "inaccurate": sum(r.get("inaccurate", 0) for r in reports),
            "fallbacks": sum(r.get("fallbacks", 0) for r in reports), "stop": result.info.get("stop")}


def markdown(rows: list[dict[str, Any]], rounds: int) -> str:
    """The rows as a markdown table."""
    lines = ["| case | zones | method | setting | rounds to PMADA criterion | rounds to obj, res <= 1e-3 | "
             "final objective | f* | final residual | s | set-up s | inaccurate / solves | reference |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        pmada = row["rounds_pmada"] if row["rounds_pmada"] is not None else f"> {rounds}"
        target = row["rounds_target"] if row["rounds_target"] is not None else f"> {rounds}"
        lines.append(f"| {row['case']} | {row['zones']} | {row['method']} | {row['label']} | {pmada} | {target} | "
                     f"{row['objective']:.2e} | {row['optimum']:.1e} | {row['consensus_residual']:.2e} | "
                     f"{row['seconds']:.1f} | {row['setup_seconds']:.1f} | {row['inaccurate']} / {row['solves']} | "
                     f"{row['reference_status']} |")
    return "\n".join(lines)


def summary(path: Path, yardstick: str = "exact") -> str:
    """Rounds (to objective - f*, residual <= 1e-3), seconds and the ratio to the ``yardstick`` method's
    rounds, one column per setting of the CSV at ``path``."""
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    labels = list(dict.fromkeys(row["label"] for row in rows))
    cases = list(dict.fromkeys(row["case"] for row in rows))
    cell = {(row["case"], row["label"]): row for row in rows}
    lines = ["| case | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for case in cases:
        base = next((cell[case, label] for label in labels
                     if (case, label) in cell and cell[case, label]["method"] == yardstick), None)
        entries = []
        for label in labels:
            row = cell.get((case, label))
            if row is None:
                entries.append("")
                continue
            text = row["rounds_target"] or f"> {row['rounds']} (obj {float(row['objective']):.1e})"
            if row["rounds_target"] and base is not None and base["rounds_target"] and row is not base:
                text += f", {int(row['rounds_target']) / int(base['rounds_target']):.1f}x"
            entries.append(f"{text}; {float(row['seconds']):.0f} s")
        lines.append(f"| {case} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(TRAINING_SET))
    parser.add_argument("--zones", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--method", choices=("linearized", "exact"), default="linearized")
    parser.add_argument("--option", type=parse_option, action="append", default=[],
                        help="key=value for the algorithm's constructor (repeatable)")
    parser.add_argument("--label", default=None, help="the setting's name in the table (default: the options)")
    parser.add_argument("--csv", type=Path, default=None, help="append one row per case to this CSV")
    parser.add_argument("--markdown", type=Path, default=None, help="write the markdown table here")
    parser.add_argument("--summary", type=Path, default=None,
                        help="only print the comparison table of this CSV (rounds, seconds, ratio to ExactADMM)")
    args = parser.parse_args()
    if args.summary is not None:
        print(summary(args.summary))
        return
    warnings.simplefilter("ignore")
    options = dict(args.option)
    label = args.label or (" ".join(f"{k}={v}" for k, v in options.items()) or "defaults")
    rows = []
    for case in args.cases:
        try:
            row = {**run_case(case, args.zones, args.method, options, args.rounds), "label": label}
        except pc.errors.PrivcvxError as exc:  # e.g. a zone whose local set is empty (docs/powerflow.md)
            print(f"| {case} | {args.zones} | {args.method} | {label} | failed: {exc} |", flush=True)
            continue
        rows.append(row)
        print(markdown([row], args.rounds).splitlines()[-1], flush=True)
        if args.csv is not None:
            new = not args.csv.exists()
            with args.csv.open("a", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=FIELDS + ("label",))
                if new:
                    writer.writeheader()
                writer.writerow(row)
    table = markdown(rows, args.rounds)
    if args.markdown is not None:
        args.markdown.write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
