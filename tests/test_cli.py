"""The command line end to end: tiny comparisons (2 rounds, 1 seed) through ``privcvx.cli.main``."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

import privcvx as pc
from privcvx.cli import main, make_experiment, make_parser
from privcvx.experiments import perturbation

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
    summary = _check_outputs(out, COLUMNS, settings=4 * 2, rounds=2)
    # valid by default: the zones' exact gradient sensitivity and OutPert's derived output sensitivity (issue 26)
    assert set(zip(summary["method"], summary["calibration"], strict=True)) == {
        ("ObjG", "exact"), ("ObjL", "exact"), ("OutG", "derived"), ("OutL", "derived")}
    # ObjPert releases lie in W_p (projection), so its violation is at solver tolerance.
    assert summary.loc[summary["method"].str.startswith("Obj"), "max_violation_worst"].max() <= 1e-6
    printed = capsys.readouterr().out
    assert "8 of 8 runs finished" in printed and str(out / "figure.png") in printed
    for extra in ("zones.png", "powerflow.png"):  # the power-flow figures, from the entry point privcvx.figures
        assert (out / extra).stat().st_size > 10_000 and str(out / extra) in printed


def test_powerflow_nominal_calibrations_run_only_on_request_and_warn():
    """The paper's constants (Sec. 6.1.1) are nominal: asked for by name, warned, and carried by what derives from
    them (the derived OutPert sensitivity of a nominal gradient sensitivity is nominal too)."""
    options = make_parser().parse_args(["compare", "powerflow", "--sensitivity", "paper", "--methods", "ObjG",
                                        "OutG:paper", "OutG"])
    experiment = make_experiment(options)
    assert {(s.method, s.calibration) for s in experiment.settings} == {
        ("ObjG", "paper"), ("OutG", "paper"), ("OutG", "derived")}
    with pytest.warns(pc.NominalPrivacyWarning, match="Sec. 6.1.1"):
        problem = experiment.builder(**experiment.builder_args)
    weights = np.ones(problem.layouts[0].dim)
    for setting in {(s.method, s.calibration): s for s in experiment.settings}.values():
        if setting.calibration == "paper" and setting.method == "OutG":
            with pytest.warns(pc.NominalPrivacyWarning, match="beta"):
                release = perturbation(problem, setting, experiment.delta)
        else:
            release = perturbation(problem, setting, experiment.delta)
        gradient = problem.agents[0].sensitivity
        assert release.release_sensitivity(gradient, weights, False).nominal is not None


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
    ('compare = "powerflow"\nrounds = "ten"\n', "rounds"),
    ('compare = "logistic"\nepsilons = [0.5, -1.0]\n', "epsilons"),
    ('compare = "logistic"\nno-progress = "yes"\n', "no-progress"),
])
def test_bad_config_names_the_key(tmp_path, capsys, text, fault):
    config = tmp_path / "bad.toml"
    config.write_text(text + f'out = "{tmp_path / "never"}"\n')
    assert main(["run", str(config)]) == 2
    assert f"argument '{fault}'" in capsys.readouterr().err
    assert not (tmp_path / "never" / "runs.csv").exists()


@pytest.mark.parametrize("argv, fault", [
    (["--epsilons", "0.1", "-1"], "epsilons"),
    (["--rho", "0"], "rho"),
    (["--delta", "1.5"], "delta"),
    (["--rounds", "0"], "rounds"),
    (["--workers", "0"], "workers"),
    (["--epsilons", "2", "--methods", "ObjG"], "epsilons"),  # the classic Gaussian calibration needs eps <= 1
])
def test_bad_options_exit_2_before_any_run(tmp_path, capsys, argv, fault):
    out = tmp_path / "never"
    assert main(["compare", "powerflow", "--case", "no-such-case", "--out", str(out), "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert f"argument '{fault}'" in err and "pc." not in err  # found before the (bad) case is ever loaded
    assert not out.exists()


def test_unknown_case_names_the_option_and_lists_the_transmission_cases(tmp_path, capsys):
    assert main(["compare", "powerflow", "--case", "no-such-case", "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "argument 'case'" in err and "iceland" in err and "GBreducednetwork" in err and "case14" in err


def test_help_shows_each_default_once_and_none_for_flags(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "powerflow", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "hide the progress bars (default" not in text
    assert "(default out/<case or dataset>)" in text and "(default: None)" not in text
    assert "(default: case14)" in text


def test_an_unwritable_out_exits_2(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["compare", "logistic", "--rounds", "1", "--out", str(blocker / "sub"), "--no-progress"]) == 2
    assert "argument 'out': cannot write the outputs" in capsys.readouterr().err


def test_version_help_defaults_and_no_progress_spellings(tmp_path, capsys):
    import privcvx

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"privcvx {privcvx.__version__}"
    with pytest.raises(SystemExit):
        main(["compare", "logistic", "--help"])
    shown = capsys.readouterr().out
    for default in ("(default: digits)", "(default: 10)", "(default: [0.05, 0.1, 0.5, 1.0])", "(default: 100)"):
        assert default in " ".join(shown.split()), default
    for spelling in ("no-progress", "no_progress"):
        out = tmp_path / spelling
        config = tmp_path / f"{spelling}.toml"
        config.write_text(f'compare = "logistic"\nagents = 3\nepsilons = [0.5]\nlocal_updates = [1]\nrounds = 1\n'
                          f'seeds = 1\nmethods = ["ObjG"]\n{spelling} = true\nout = "{out}"\n')
        assert main(["run", str(config)]) == 0
        assert (out / "runs.csv").exists()
