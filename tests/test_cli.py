"""The command line on `pc.compare`: TOML studies end to end (2 rounds, 1 seed), the paper-004 presets against the
runs they stand for, every bad key named, Ctrl-C and the exit codes."""

from __future__ import annotations

import contextlib
import importlib
import signal
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

import privcvx as pc
from privcvx.cli import main
from privcvx.schedules import inverse_sqrt, paper_rho
from privcvx.study_file import load

STUDY = importlib.import_module("privcvx.comparison")  # the module of pc.compare
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
KEYS = ["method", "setting", "epsilon"]
TINY = '''[problem]
builder = "powerflow"
case = "case14"

[study]
epsilons = [0.5]
rounds = 2
delta = 0.01
out = "{out}"

[[methods]]
label = "ObjG"
algorithm = "LinearizedADMM"
privacy = {{ perturbation = "objective" }}
settings = {{ rho = 100.0, eta = {{ schedule = "inverse_sqrt" }} }}
grid = {{ local_updates = [1, 2] }}
'''


def _read(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs.csv (floats read back exactly) and summary.csv."""
    return tuple(pd.read_csv(out / name, keep_default_na=False, float_precision="round_trip")
                 for name in ("runs.csv", "summary.csv"))


def _check_outputs(out: Path, runs_expected: int, rounds: int) -> pd.DataFrame:
    """runs.csv's shape, summary.csv recomputed from it, the reference, and the figures."""
    runs, summary = _read(out)
    assert list(runs.columns[:len(STUDY.RUN_COLUMNS)]) == STUDY.RUN_COLUMNS
    assert len(runs) == runs_expected * rounds
    assert sorted(runs["round"].unique()) == list(range(1, rounds + 1))
    for name in ("accuracy.png", "figure.png"):
        image = matplotlib.image.imread(out / name)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert len(summary) == runs.groupby(KEYS).ngroups
    final = runs[runs["round"] == rounds]
    for _, row in summary.iterrows():
        mine = final[(final["method"] == row["method"]) & (final["setting"] == row["setting"])
                     & (final["epsilon"] == row["epsilon"])]
        assert row["seeds"] == mine["seed"].nunique() and row["rounds"] == rounds
        for column in ("objective", "relative_gap", "epsilon_spent"):
            assert np.isclose(row[f"{column}_mean"], mine[column].mean(), rtol=1e-12, atol=0)
            assert np.isclose(row[f"{column}_max"], mine[column].max(), rtol=1e-12, atol=0)
    return runs


def test_a_preset_runs_end_to_end_and_writes_consistent_outputs(tmp_path, capsys):
    out = tmp_path / "case14"
    status = main(["compare", str(EXAMPLES / "case14.toml"), "--epsilons", "0.5", "--rounds", "2", "--seeds", "1",
                   "--out", str(out), "--no-progress"])
    assert status == 0
    runs = _check_outputs(out, runs_expected=4 * 2, rounds=2)
    assert set(runs["method"]) == {"ObjG", "ObjL", "OutG (derived)", "OutL (derived)"}
    assert set(runs["setting"]) == {"local_updates=1", "local_updates=5"} and (runs["budget"] == "per_update").all()
    assert (runs.loc[runs["method"].str.startswith("Obj"), "max_violation"] <= 1e-6).all()  # ObjPert is feasible
    problem = load(EXAMPLES / "case14.toml").study.problem()
    reference = pd.read_csv(out / "reference.csv")["objective"].iloc[0]
    assert reference == pytest.approx(problem.solve_centralized().value, rel=1e-9, abs=1e-12)
    printed = capsys.readouterr().out
    assert "8 of 8 runs finished" in printed and "| ObjG | local_updates=5 | 0.5 |" in printed
    for extra in ("zones.png", "powerflow.png"):  # the power-flow figures, from the entry point privcvx.figures
        assert (out / extra).stat().st_size > 10_000 and str(out / extra) in printed


def _paper_runs(problem: pc.DistributedProblem, privacy: pc.privacy.perturbation.Perturbation, epsilon: float,
                local_updates: int, rounds: int, rho: object) -> pd.DataFrame:
    """What experiments.run_setting ran before the presets (Sec. 6.1.1 / 6.2.1): solve with the paper's settings."""
    with pytest.warns(pc.errors.ReproducibleNoiseWarning):
        return problem.solve(rounds=rounds, local_updates=local_updates, rho=rho, eta=inverse_sqrt(),
                             privacy=privacy, seed=0, diagnostics=True).history


@pytest.mark.parametrize("preset", ["case14_paper", "digits"])
def test_a_preset_gives_the_numbers_of_the_paper_runs(tmp_path, preset):
    """Every method of the preset (ObjG/ObjL/OutG/OutL; OutPert at the paper's nominal beta, read from the problem's
    own declaration as the old runner did, and derived) at two E, 2 rounds, against the solve that the old runner
    (privcvx.experiments.run_setting) made: bitwise equal in every column."""
    out = tmp_path / preset
    study = tmp_path / f"{preset}.toml"
    text = (EXAMPLES / f"{preset}.toml").read_text()
    if preset == "digits":  # its settings on breast_cancer, 4 agents: digits' centralized reference takes minutes
        text = text.replace('"digits"', '"breast_cancer"').replace("agents = 10", "agents = 4")
    study.write_text(text)
    assert main(["compare", str(study), "--epsilons", "0.5", "--rounds", "2", "--seeds", "1", "--out", str(out),
                 "--no-progress"]) == 0
    runs, _ = _read(out)
    with pytest.warns(pc.NominalPrivacyWarning) if preset == "case14_paper" else contextlib.nullcontext():
        problem = load(study).study.problem()
    delta = 0.01 if preset == "case14_paper" else 1e-6
    rho = 100.0 if preset == "case14_paper" else paper_rho(2.0, 5.0, 0.5, 10_000)
    compared = 0
    for (label, setting), rows in runs.groupby(["method", "setting"]):
        mechanism = pc.Laplace(0.5) if label[3] == "L" else pc.Gaussian(0.5, delta)
        if label.startswith("Obj"):
            privacy = pc.ObjectivePerturbation(mechanism)
        elif "paper" in label:
            with pytest.warns(pc.NominalPrivacyWarning):
                privacy = pc.OutputPerturbation(mechanism, sensitivity=problem.agents[0].declared.output_sensitivity)
        else:
            privacy = pc.OutputPerturbation(mechanism, sensitivity="derived")
        history = _paper_runs(problem, privacy, 0.5, int(setting.split("=")[1]), 2, rho)
        for column in ("objective", "consensus_residual", "max_violation", "noise_magnitude", *problem.metrics):
            assert np.array_equal(rows[column].to_numpy(float), history[column].to_numpy(float)), (label, column)
        assert np.array_equal(rows["epsilon_spent"].to_numpy(float), history["epsilon"].to_numpy(float))
        compared += 1
    assert compared == (6 if preset == "case14_paper" else 2) * 2


def test_a_tiny_study_of_any_methods_at_equal_total_privacy(tmp_path, capsys):
    """A user's builder ("module:function"), two methods of different papers, a grid, a total budget."""
    out = tmp_path / "study"
    study = tmp_path / "study.toml"
    study.write_text(f'''[problem]
builder = "privcvx.algorithms:consensus_problem"
agents = 3

[study]
epsilons = [1.0, 20.0]
delta = 1e-6
rounds = 6
seeds = [0, 1]
out = "{out}"

[[methods]]
label = "ObjPert"
algorithm = "LinearizedADMM"
privacy = {{ perturbation = "objective" }}
grid = {{ local_updates = [1, 2] }}

[[methods]]
label = "PR-ADMM"
algorithm = "PRADMM"
settings = {{ eta = 0.5 }}
''')
    assert main(["compare", str(study), "--no-progress"]) == 0
    runs = _check_outputs(out, runs_expected=3 * 2 * 2, rounds=6)
    last = runs[runs["round"] == 6]
    assert (last["epsilon_spent"] <= last["epsilon"] * (1 + 1e-6)).all() and (runs["budget"] == "total").all()
    objpert = last[last["method"] == "ObjPert"]
    assert np.allclose(objpert["epsilon_spent"], objpert["epsilon"], rtol=1e-3)  # the total is spent over T * E
    assert "(total epsilon)" in capsys.readouterr().out


@pytest.mark.parametrize("text, fault", [
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\nroundz = 3\n', "study.roundz"),
    ('[problem]\nbuilder = "heat"\n', "problem.builder"),
    ('[problem]\nbuilder = "no.such.module:f"\n', "problem.builder"),
    ('[problem]\nbuilder = "powerflow"\ncas = "case14"\n', "problem.cas"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n', "methods"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [0.5, -1.0]\n', "study.epsilons"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\nrounds = "ten"\n', "study.rounds"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\nbudget = "per-round"\n', "study.budget"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\ndelta = 1.5\n', "study.delta"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\nseeds = []\n', "study.seeds"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "ADMM"\n', "methods[0].algorithm"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "PRADMM"\nsettings = { etta = 1 }\n', "methods[0].settings.etta"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "PRADMM"\nsettings = { eta = -1.0 }\n', "methods[0].settings.eta"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "LinearizedADMM"\ngrid = { local_updates = [1, 0] }\n', "methods[0].grid.local_updates"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "LinearizedADMM"\nsettings = { rho = { schedule = "cosine" } }\n',
     "methods[0].settings.rho.schedule"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "LinearizedADMM"\nsettings = { rho = { schedule = ["paper_rho"] } }\n',
     "methods[0].settings.rho.schedule"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "LinearizedADMM"\nprivacy = { perturbation = "input" }\n', "methods[0].privacy.perturbation"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "LinearizedADMM"\nprivacy = { perturbation = "output", sensitivity = { l3 = 1 } }\n',
     "methods[0].privacy.sensitivity.l3"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "LinearizedADMM"\nprivacy = { perturbation = "output", solver_error = -1e-6 }\n',
     "methods[0].privacy.solver_error"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "LinearizedADMM"\nprivacy = { perturbation = "objective", solver_error = 1e-6 }\n',
     "methods[0].privacy.solver_error"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "PRADMM"\nprivacy = { perturbation = "output" }\n', "methods[0].privacy"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\nalgorithm = "PRADMM"\n'
     '[[methods]]\nlabel = "A"\nalgorithm = "PRADMM"\n', "methods"),
    ('[problem]\nbuilder = "powerflow"\n[study]\nepsilons = [1.0]\n[[methods]]\nlabel = "A"\n'
     'algorithm = "DPDistributedGradient"\nproblem = { consensuz = "full" }\n', "methods[0].problem.consensuz"),
    ('[problem\n', "config"),
])
def test_a_bad_study_names_the_key_and_runs_nothing(tmp_path, capsys, text, fault):
    study = tmp_path / "bad.toml"
    study.write_text(text)
    assert main(["compare", str(study), "--out", str(tmp_path / "never"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"argument '{fault}'" in err and "Traceback" not in err
    assert not (tmp_path / "never").exists()


def test_a_bad_builder_argument_is_named_under_problem(tmp_path, capsys):
    """The builder's own checks name the TOML key: an unknown case lists the transmission cases."""
    study = tmp_path / "case.toml"
    study.write_text(TINY.format(out=tmp_path / "out").replace('case = "case14"', 'case = "no-such-case"'))
    assert main(["compare", str(study), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "argument 'problem.case'" in err and "iceland" in err and "case14" in err
    assert not (tmp_path / "out" / "runs.csv").exists()


def test_a_method_that_cannot_run_is_refused_before_any_run(tmp_path, capsys):
    """ExactADMM (non-private) has no total budget: exit 2, nothing run. DPDG does not support general-form keys
    (case14's zones): it is left out with its reason (refused.csv, stderr) and the others run (exit 0); alone, it leaves
    nothing to run (exit 2)."""
    def study(name: str, text: str) -> tuple[Path, Path]:
        path, out = tmp_path / f"{name}.toml", tmp_path / name
        path.write_text(text.format(out=out))
        return path, out

    extra = '\n[[methods]]\nlabel = "X"\nalgorithm = "{}"\n'
    path, out = study("exact", TINY + extra.format("ExactADMM"))
    assert main(["compare", str(path), "--no-progress"]) == 2
    assert "cannot be calibrated to a total budget" in capsys.readouterr().err
    assert not (out / "runs.csv").exists()
    path, out = study("dpdg", TINY + extra.format("DPDistributedGradient"))
    assert main(["compare", str(path), "--no-progress"]) == 0
    assert "method X refused (not run): argument 'shared'" in capsys.readouterr().err
    assert set(pd.read_csv(out / "runs.csv")["method"]) == {"ObjG"}
    refused = pd.read_csv(out / "refused.csv", keep_default_na=False)
    assert refused[["method", "setting"]].values.tolist() == [["X", ""]]
    assert "does not support general-form keys" in refused["reason"].iloc[0]
    alone = TINY[:TINY.index("[[methods]]")] + extra.format("DPDistributedGradient")
    path, out = study("alone", alone)
    assert main(["compare", str(path), "--no-progress"]) == 2
    assert "does not support general-form keys" in capsys.readouterr().err
    assert not (out / "runs.csv").exists()


def test_ctrl_c_keeps_the_finished_runs_and_exits_130(tmp_path, capsys, monkeypatch):
    run = STUDY._run
    calls = []

    def interrupted_at_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return run(*args, **kwargs)

    monkeypatch.setattr(STUDY, "_run", interrupted_at_the_second)
    out = tmp_path / "out"
    study = tmp_path / "tiny.toml"
    study.write_text(TINY.format(out=out))
    before = signal.getsignal(signal.SIGINT)
    assert main(["compare", str(study), "--no-progress"]) == 130
    # the caller's handler is back: an ignored SIGINT left behind is inherited by every process started later
    assert signal.getsignal(signal.SIGINT) is before
    runs, _ = _read(out)
    assert set(runs["setting"]) == {"local_updates=1"} and len(runs) == 2
    captured = capsys.readouterr()
    assert "1 of 2 runs finished" in captured.out and "interrupted" in captured.err


def test_a_failed_run_is_listed_and_exits_1(tmp_path, capsys, monkeypatch):
    run = STUDY._run

    def failing_at_e2(problem, study, plan, *args, **kwargs):
        if plan.setting == "local_updates=2":
            raise pc.errors.RunFailed("the local solve failed", result=None, agent="zone-1")
        return run(problem, study, plan, *args, **kwargs)

    monkeypatch.setattr(STUDY, "_run", failing_at_e2)
    out = tmp_path / "out"
    study = tmp_path / "tiny.toml"
    study.write_text(TINY.format(out=out))
    assert main(["compare", str(study), "--no-progress"]) == 1
    failures = pd.read_csv(out / "failures.csv")
    assert list(failures["setting"]) == ["local_updates=2"] and "local solve failed" in failures["error"].iloc[0]
    assert "failed: " in capsys.readouterr().err and len(pd.read_csv(out / "runs.csv")) == 2
    # the same study run again into the same folder, every run finished: the earlier failures.csv is gone
    monkeypatch.setattr(STUDY, "_run", run)
    assert main(["compare", str(study), "--no-progress"]) == 0
    assert not (out / "failures.csv").exists() and len(pd.read_csv(out / "runs.csv")) == 4


def test_an_unwritable_out_exits_2(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    study = tmp_path / "tiny.toml"
    study.write_text(TINY.format(out=blocker / "sub"))
    assert main(["compare", str(study), "--no-progress"]) == 2
    assert "argument 'out': cannot write the outputs" in capsys.readouterr().err


def test_version_and_help(capsys):
    import privcvx

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"privcvx {privcvx.__version__}"
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "hide the progress bars (default" not in text and "(default: None)" not in text
    assert "[problem], [study] and [[methods]]" in text
