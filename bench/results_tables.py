"""docs/results.md's power-flow tables from a `privcvx compare` output folder (summary.csv and runs.csv).

* ``--kind nominal`` (Figures 3 and 4, per-update epsilon): objective and consensus residual as ``summary.csv``'s
  final-round mean ± std over seeds; ``max_violation_worst`` and ``noise_magnitude_avg`` the maximum and the mean
  of ``runs.csv`` over all rounds and seeds; ``epsilon_spent (nominal)`` the runs' report; ``epsilon_valid`` from
  the settings alone (`powerflow_calibration.table`, which also gets ``--solver-error``).
* ``--kind total`` (the same total epsilon): final-round mean ± std, ``noise_magnitude`` the final round's mean,
  ``epsilon_spent`` the largest over seeds.

    python bench/results_tables.py out/case14_paper --kind nominal --case case14 --zones 3
    python bench/results_tables.py out/case118_total --kind total
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from powerflow_calibration import table as calibration_table


def _value(mean: float, std: float) -> str:
    return f"{mean:.3g} ± {std:.2g}"


def _split(label: str) -> tuple[str, str]:
    """'OutG (derived)' -> ('OutG', 'derived'); ObjPert labels carry the paper's sensitivity."""
    method, _, calibration = label.partition(" (")
    return method, calibration.rstrip(")") or "paper"


def _local_updates(setting: str) -> int:
    return int(dict(part.split("=") for part in setting.split(", "))["local_updates"])


def _markdown(frame: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(str(value) for value in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def nominal(folder: Path, case: str, zones: str, solver_error: float | None) -> str:
    summary = pd.read_csv(folder / "summary.csv")
    runs = pd.read_csv(folder / "runs.csv")
    over_runs = runs.groupby(["method", "setting", "epsilon"]).agg(worst=("max_violation", "max"),
                                                                 noise=("noise_magnitude", "mean"))
    rounds = int(summary["rounds"].max())
    extra = {} if solver_error is None else {"solver_error": solver_error}
    valid = calibration_table(case, zones, sorted(summary["epsilon"].unique()), [1, 5], rounds, 1e-2, 0.01, 100.0,
                              **extra).set_index(["method", "calibration", "eps", "E"])["epsilon_valid"]
    rows = []
    for row in summary.itertuples(index=False):
        method, calibration = _split(row.method)
        updates = _local_updates(row.setting)
        worst, noise = over_runs.loc[(row.method, row.setting, row.epsilon)]
        rows.append({"method": method, "calibration": calibration, "eps": row.epsilon, "E": updates,
                     "objective": _value(row.objective_mean, row.objective_std),
                     "consensus_residual": _value(row.consensus_residual_mean, row.consensus_residual_std),
                     "max_violation_worst": f"{worst:.3g}", "noise_magnitude_avg": f"{noise:.3g}",
                     "epsilon_spent (nominal)": _value(row.epsilon_spent_mean, row.epsilon_spent_std),
                     "epsilon_valid": f"{valid.loc[(method, calibration, row.epsilon, updates)]:.3g}"})
    frame = pd.DataFrame(rows).sort_values(["method", "calibration", "eps", "E"])
    return _markdown(frame.assign(eps=frame["eps"].map("{:g}".format)))


def total(folder: Path) -> str:
    summary = pd.read_csv(folder / "summary.csv")
    rows = [{"method": row.method, "E": _local_updates(row.setting), "eps": row.epsilon,
             "objective": _value(row.objective_mean, row.objective_std),
             "consensus_residual": _value(row.consensus_residual_mean, row.consensus_residual_std),
             "noise_magnitude": f"{row.noise_magnitude_mean:.3g}", "epsilon_spent": f"{row.epsilon_spent_max:.3g}"}
            for row in summary.itertuples(index=False)]
    frame = pd.DataFrame(rows).sort_values(["method", "E", "eps"])
    return _markdown(frame.assign(eps=frame["eps"].map("{:g}".format)))


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--kind", choices=("nominal", "total"), required=True)
    parser.add_argument("--case", default="case14")
    parser.add_argument("--zones", default="3", help='number of zones or "standin" (case118)')
    parser.add_argument("--solver-error", type=float, default=None, help="OutPert's e, when the preset sets one")
    args = parser.parse_args(argv)
    text = (nominal(args.folder, args.case, args.zones, args.solver_error) if args.kind == "nominal"
            else total(args.folder))
    print(text)
    return text


if __name__ == "__main__":
    main()
