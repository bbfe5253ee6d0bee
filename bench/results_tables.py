"""docs/results.md's power-flow tables from a `privcvx compare` output folder (summary.csv and runs.csv).

* ``--kind nominal`` (Figures 3 and 4, per-update epsilon): objective and consensus residual as ``summary.csv``'s
  final-round mean ± std over seeds; ``max_violation_worst`` and ``noise_magnitude_avg`` the maximum and the mean
  of ``runs.csv`` over all rounds and seeds; ``epsilon_spent (nominal)`` the runs' report; ``epsilon_valid`` from
  the settings alone (`powerflow_calibration.table`, which also gets ``--solver-error``).
* ``--kind total`` (the same total epsilon): final-round mean ± std, ``noise_magnitude`` the final round's mean,
  ``epsilon_spent`` the largest over seeds.
* ``--kind digits`` (Figure 5's tables, either budget): as ``nominal`` with the test error, standard deviations to
  3 digits, and ``epsilon_spent`` the runs' report (valid: ObjG's ``worst_case`` sensitivity, OutG derived from it).
* ``--figure PATH`` also draws the runs as `privcvx compare` draws its figure.png (`privcvx.comparison.plot_rounds`,
  the centralized optima of the folders' reference.csv), on the merged runs when several folders are given, and
  saves it as a 256-colour palette PNG (as docs/figures holds it).

    python bench/results_tables.py out/case14_paper --kind nominal --case case14 --zones 3
    python bench/results_tables.py out/case118_total --kind total
    python bench/results_tables.py out/digits --kind digits
    python bench/results_tables.py part1 part2 ... --kind nominal   # folders merged run by run (later ones win)
    python bench/results_tables.py part1 part2 ... --kind nominal --figure docs/figures/case118.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from PIL import Image
from powerflow_calibration import table as calibration_table

from privcvx.comparison import plot_rounds, summarize


def _value(mean: float, std: float, digits: int = 2) -> str:
    return f"{mean:.3g} ± {std:.{digits}g}"


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


def _load(folders: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, runs) of one compare folder, or of several merged run by run: a run (method, setting, epsilon,
    seed) found in more than one is taken from the last folder given, and the summary is recomputed."""
    if len(folders) == 1:
        return pd.read_csv(folders[0] / "summary.csv"), pd.read_csv(folders[0] / "runs.csv")
    key = ["method", "setting", "epsilon", "seed"]
    runs = pd.concat([pd.read_csv(folder / "runs.csv", keep_default_na=False).assign(folder=i)
                      for i, folder in enumerate(folders)], ignore_index=True)
    runs = runs[runs["folder"] == runs.groupby(key)["folder"].transform("max")].drop(columns="folder")
    return summarize(runs), runs


def references(folders: list[Path]) -> dict[str, float]:
    """figure.png's reference lines (name: centralized optimum) from the folders' reference.csv, a method's from the
    last folder that has it (as `_load` takes its runs)."""
    frame = pd.concat([pd.read_csv(folder / "reference.csv") for folder in folders])
    frame = frame.drop_duplicates("method", keep="last")
    return dict(zip(frame["reference"], frame["objective"], strict=True))


def figure(folders: list[Path], path: Path) -> None:
    """`plot_rounds` of the folders' (merged) runs to ``path``, requantized to a 256-colour palette PNG."""
    plot_rounds(_load(folders)[1], references(folders), path)
    Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)


def _over_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Per method, setting and epsilon: the worst violation and the mean noise magnitude over all rounds and seeds."""
    return runs.groupby(["method", "setting", "epsilon"]).agg(
        worst=("max_violation", "max"), noise=("noise_magnitude", "mean"))


def _sorted(rows: list[dict[str, object]], keys: list[str]) -> str:
    frame = pd.DataFrame(rows).sort_values(keys)
    return _markdown(frame.assign(eps=frame["eps"].map("{:g}".format)))


def nominal(folders: list[Path], case: str, zones: str, solver_error: float | None) -> str:
    summary, runs = _load(folders)
    over_runs = _over_runs(runs)
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
    return _sorted(rows, ["method", "calibration", "eps", "E"])


def digits(folders: list[Path]) -> str:
    summary, runs = _load(folders)
    over_runs = _over_runs(runs)
    rows = []
    for row in summary.itertuples(index=False):
        method, calibration = _split(row.method)
        worst, noise = over_runs.loc[(row.method, row.setting, row.epsilon)]
        rows.append({"method": method, "calibration": "worst_case" if calibration == "paper" else calibration,
                     "eps": row.epsilon, "E": _local_updates(row.setting),
                     **{column: _value(getattr(row, f"{column}_mean"), getattr(row, f"{column}_std"), 3)
                        for column in ("objective", "consensus_residual", "test_error")},
                     "max_violation_worst": f"{worst:.3g}", "noise_magnitude_avg": f"{noise:.3g}",
                     "epsilon_spent": _value(row.epsilon_spent_mean, row.epsilon_spent_std, 3)})
    return _sorted(rows, ["method", "calibration", "eps", "E"])


def total(folders: list[Path]) -> str:
    summary = _load(folders)[0]
    rows = [{"method": row.method, "E": _local_updates(row.setting), "eps": row.epsilon,
             "objective": _value(row.objective_mean, row.objective_std),
             "consensus_residual": _value(row.consensus_residual_mean, row.consensus_residual_std),
             "noise_magnitude": f"{row.noise_magnitude_mean:.3g}", "epsilon_spent": f"{row.epsilon_spent_max:.3g}"}
            for row in summary.itertuples(index=False)]
    return _sorted(rows, ["method", "E", "eps"])


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", help="a compare output folder, or several to merge")
    parser.add_argument("--kind", choices=("nominal", "total", "digits"), required=True)
    parser.add_argument("--case", default="case14")
    parser.add_argument("--zones", default="3", help='number of zones or "standin" (case118)')
    parser.add_argument("--solver-error", type=float, default=None, help="OutPert's e, when the preset sets one")
    parser.add_argument("--figure", type=Path, default=None, help="also draw the runs' figure.png to this path")
    args = parser.parse_args(argv)
    if args.figure is not None:
        figure(args.folders, args.figure)
    text = {"nominal": lambda: nominal(args.folders, args.case, args.zones, args.solver_error),
            "total": lambda: total(args.folders), "digits": lambda: digits(args.folders)}[args.kind]()
    print(text)
    return text


if __name__ == "__main__":
    main()
