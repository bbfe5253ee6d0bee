"""The command line end to end: tiny comparisons (2 rounds, 1 seed) through ``privcvx.cli.main``."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from privcvx.cli import main

COLUMNS = ["method", "calibration", "epsilon", "local_updates", "seed", "round", "objective",
           "consensus_residual", "max_violation", "noise_magnitude", "epsilon_spent"]
KEYS = ["method", "calibration", "epsilon", "local_updates"]


def _check_outputs(out: Path, columns: list[str], settings: int, rounds: int) -> pd.DataFrame:
    runs = pd.read_csv(out / "runs.csv")
    summary = pd.read_csv(out / "summary.csv")
    assert list(runs.columns) == columns
    assert len(runs) == settings * rounds
    assert sorted(runs["round"].unique()) == list(range(1, rounds + 1))
    image = matplotlib.image.imread(out / "figure.png")
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    # The references drawn as lines: the non-private run at every E and the centralized optimum.
    refs = pd.read_csv(out / "references.csv")
    updates = sorted(runs["local_updates"].unique())
    non_private = refs[refs["reference"] == "non-private"]
    assert sorted(non_private["local_updates"].unique()) == updates and len(non_private) == rounds * len(updates)
    assert (non_private["max_violation"] <= 1e-6).all()
    assert len(refs[refs["reference"] == "centralized"]) == 1
    # summary.csv recomputed independently from runs.csv: final round of every seed, then over seeds.
    assert len(summary) == runs.groupby(KEYS).ngroups
    final = runs[runs["round"] == rounds]
    values = [c for c in columns if c not in KEYS + ["seed", "round"]]
    for _, row in summary.iterrows():
        mine = final
        everything = runs
        for key in KEYS:
            mine = mine[mine[key] == row[key]]
            everything = everything[everything[key] == row[key]]
        assert row["seeds"] == mine["seed"].nunique() and row["rounds"] == rounds
        for column in values:
            assert np.isclose(row[f"{column}_mean"], mine[column].mean(), rtol=1e-12, atol=0)
            assert np.isclose(row[f"{column}_min"], mine[column].min(), rtol=1e-12, atol=0)
            assert np.isclose(row[f"{column}_max"], mine[column].max(), rtol=1e-12, atol=0)
        assert np.isclose(row["max_violation_worst"], everything["max_violation"].max(), rtol=1e-12, atol=0)
        assert np.isclose(row["noise_magnitude_avg"], everything["noise_magnitude"].mean(), rtol=1e-12)
    return summary


def test_compare_powerflow_writes_consistent_outputs(tmp_path, capsys):
    out = tmp_path / "case14"
    status = main(["compare", "powerflow", "--case", "case14", "--epsilons", "0.5",
                   "--local-updates", "1", "2", "--rounds", "2", "--seeds", "1", "--out", str(out),
                   "--no-progress"])
    assert status == 0
    summary = _check_outputs(out, COLUMNS, settings=6 * 2, rounds=2)
    assert set(zip(summary["method"], summary["calibration"], strict=True)) == {
        ("ObjG", "paper"), ("ObjL", "paper"), ("OutG", "paper"), ("OutL", "paper"),
        ("OutG", "derived"), ("OutL", "derived")}
    # ObjPert releases lie in W_p (projection), so its violation is at solver tolerance.
    assert summary.loc[summary["method"].str.startswith("Obj"), "max_violation_worst"].max() <= 1e-6
    printed = capsys.readouterr().out
    assert "12 of 12 runs finished" in printed and str(out / "figure.png") in printed
    for extra in ("zones.png", "powerflow.png"):  # the power-flow figures, from the entry point privcvx.figures
        assert (out / extra).stat().st_size > 10_000 and str(out / extra) in printed


def test_run_logistic_from_toml_in_two_processes(tmp_path):
    out = tmp_path / "digits"
    config = tmp_path / "digits.toml"
    config.write_text(f'compare = "logistic"\ndataset = "digits"\nagents = 4\nsplit = "dirichlet"\n'
                      f'epsilons = [0.5, 1.0]\nlocal_updates = [1]\nrounds = 2\nseeds = 1\nworkers = 2\n'
                      f'progress = false\nout = "{out}"\n')
    assert main(["run", str(config)]) == 0
    summary = _check_outputs(out, COLUMNS + ["test_error"], settings=2 * 2, rounds=2)
    assert set(summary["method"]) == {"ObjG", "OutG"}
    assert summary["test_error_mean"].between(0, 1).all()


@pytest.mark.parametrize("text, fault", [
    ('compare = "powerflow"\nroundz = 3\n', "roundz"),
    ('compare = "heat"\n', "compare"),
    ('compare = "powerflow"\nmethods = ["ObjX"]\n', "methods"),
    ('compare = "powerflow"\nmethods = ["ObjG:derived"]\n', "methods"),
])
def test_bad_config_names_the_key(tmp_path, capsys, text, fault):
    config = tmp_path / "bad.toml"
    config.write_text(text + f'out = "{tmp_path / "never"}"\n')
    assert main(["run", str(config)]) == 2
    assert f"argument '{fault}'" in capsys.readouterr().err
    assert not (tmp_path / "never" / "runs.csv").exists()
