"""pc.compare: methods at the same total privacy, each calibrated through its own accountant (read back from the
ledgers, checked against dp-accounting for Algorithm 1), outputs written, uncalibratable methods refused."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pandas as pd
import pytest

import privcvx as pc
from privcvx.algorithms import PRADMM, Algorithm, DPDistributedGradient, LinearizedADMM, consensus_problem
from privcvx.errors import ParameterError, PrivacyError, UnsupportedError

pytestmark = pytest.mark.usefixtures("quiet_seeds")
OBJPERT = LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Gaussian(1.0, 1e-5)))


def _problem():
    return consensus_problem(agents=3)


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    study = pc.Study(problem=_problem, methods=[
        pc.Method("ObjPert", OBJPERT, grid={"local_updates": [1, 3]}),
        pc.Method("PR-ADMM", PRADMM()), pc.Method("DPDG", DPDistributedGradient())],
        epsilons=[0.5, 50.0], rounds=12, seeds=(0, 1))
    return pc.compare(study, out), out


def test_every_run_spends_at_most_its_total_and_nearly_all_of_it_for_algorithm_1(comparison):
    result, _ = comparison
    last = result.runs.loc[result.runs.groupby(["method", "setting", "epsilon", "seed"])["round"].idxmax()]
    assert len(last) == (2 + 1 + 1) * 2 * 2
    assert (last["epsilon_spent"] <= last["epsilon"] * (1 + 1e-6)).all()
    objpert = last[last["method"] == "ObjPert"]
    assert np.allclose(objpert["epsilon_spent"], objpert["epsilon"], rtol=1e-3)  # the budget is spent, T*E-fold
    dpdg = last[last["method"] == "DPDG"]  # its Laplace releases' ledger at the study's delta (was pure epsilon)
    assert np.allclose(dpdg["epsilon_spent"], dpdg["epsilon"], rtol=1e-6)


def test_algorithm_1_at_equal_total_privacy_matches_dp_accounting():
    """The per-update Gaussian that compare gives Algorithm 1 at total (epsilon, delta) over T*E updates composes,
    by dp-accounting's own PLD accountant, to that epsilon."""
    study = pc.Study(problem=_problem, methods=[pc.Method("ObjPert", OBJPERT)], epsilons=[2.0], rounds=5)
    ready = study.calibrated(OBJPERT.clone(local_updates=3), 2.0)
    per_update = ready.privacy.mechanism.per_update(15)
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(per_update.noise_multiplier), 15)
    assert accountant.get_epsilon(1e-5) == pytest.approx(2.0, rel=1e-2)


def test_more_total_privacy_budget_gives_a_better_answer(comparison):
    summary = comparison[0].summary
    for (method, setting), group in summary.groupby(["method", "setting"]):
        gaps = group.sort_values("epsilon")["relative_gap_mean"].to_numpy()
        assert gaps[1] < gaps[0], (method, setting, gaps)


def test_the_outputs_are_written(comparison):
    result, out = comparison
    assert {p.name for p in out.iterdir()} >= {"runs.csv", "summary.csv", "reference.csv", "accuracy.png"}
    runs = pd.read_csv(out / "runs.csv", keep_default_na=False)
    assert list(runs.columns) == list(result.runs.columns)
    assert set(runs["setting"]) == {"local_updates=1", "local_updates=3", ""}
    assert (runs["budget"] == "total").all()
    assert pd.read_csv(out / "reference.csv")["objective"].iloc[0] == pytest.approx(
        _problem().solve_centralized().value)


def test_per_update_budgets_are_labelled_and_only_for_algorithm_1():
    study = pc.Study(problem=_problem, methods=[pc.Method("ObjPert", OBJPERT)], epsilons=[1.0], rounds=3,
                     budget="per_update")
    runs = pc.compare(study).runs
    assert (runs["budget"] == "per_update").all()
    assert runs["epsilon_spent"].iloc[-1] > 1.0  # three updates at epsilon 1 each
    with pytest.raises(PrivacyError, match="per-update budget"):
        pc.compare(pc.Study(problem=_problem, methods=[pc.Method("PR", PRADMM())], epsilons=[1.0], rounds=3,
                            budget="per_update"))


def test_methods_without_a_total_budget_and_bad_studies_are_refused():
    class Unregistered(Algorithm):  # a method without a total-budget argument: refused before any run
        agent_program = monitor = None

    with pytest.raises(PrivacyError, match="Unregistered.*total budget"):
        pc.compare(pc.Study(problem=_problem, methods=[pc.Method("X", Unregistered())], epsilons=[1.0], rounds=3))
    with pytest.raises(PrivacyError, match="privacy mode"):
        pc.compare(pc.Study(problem=_problem, methods=[pc.Method("A1", LinearizedADMM())], epsilons=[1.0], rounds=3))
    with pytest.raises(ParameterError, match="distinct"):
        pc.Study(problem=_problem, methods=[pc.Method("A", OBJPERT), pc.Method("A", OBJPERT)], epsilons=[1.0])
    with pytest.raises(ParameterError, match="budget"):
        pc.Study(problem=_problem, methods=[pc.Method("A", OBJPERT)], epsilons=[1.0], budget="per-round")


def test_the_case14_study_of_the_example_runs_at_equal_total_privacy(tmp_path):
    """examples/compare_case14.toml, cut to 3 rounds, one seed and one epsilon: Algorithm 1 and PR-ADMM (with
    powerflow's release bounds, computed from the built problem) on the zones' general form, DPDG and RandomizedADMM
    (which need full consensus) on its full-consensus form (their ``problem = { consensus = "full" }``), all run and
    spend at most the total; both forms have the same optimum, and without the override the two are refused."""
    from pathlib import Path

    from privcvx.study_file import load

    study = load(Path(__file__).resolve().parents[1] / "examples" / "compare_case14.toml",
                 {"rounds": 3, "seeds": [0], "epsilons": [1.0]}).study
    assert [dict(method.problem) for method in study.methods][-2:] == [{"consensus": "full"}] * 2
    assert study.problem(consensus="full").solve_centralized().value == pytest.approx(
        study.problem().solve_centralized().value, abs=1e-9)
    result = pc.compare(study, tmp_path, keep_going=True)
    runs = result.runs
    assert set(runs["method"]) == {"ObjPert", "OutPert", "PR-ADMM", "DPDG", "RandomizedADMM"}
    assert result.planned == 5 and not result.failed and not result.refused
    assert (runs["epsilon_spent"] <= 1.0 + 1e-6).all() and (runs["budget"] == "total").all()
    general = pc.Study(problem=study.problem, methods=[pc.Method(m.label, m.algorithm) for m in study.methods[-2:]],
                       epsilons=[1.0], rounds=3)
    with pytest.raises(UnsupportedError, match="DPDistributedGradient.*general-form keys"):
        pc.compare(general)
    with pytest.raises(ParameterError, match="'DPDG'.*takes no arguments \\['consensus'\\]"):
        pc.Study(problem=_problem, methods=study.methods, epsilons=[1.0])


def test_a_laplace_total_budget_is_spent_but_not_overspent_by_the_ledger():
    """Algorithm 1 with Laplace noise at a total budget: the ledger's epsilon (its own accountant) ends within the
    total and spends nearly all of it (a PLD calibration was overspent by the ledger's RDP reckoning)."""
    laplace = LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Laplace(1.0)), local_updates=2)
    runs = pc.compare(pc.Study(problem=_problem, methods=[pc.Method("ObjL", laplace)], epsilons=[0.05, 1.0],
                               delta=1e-2, rounds=10)).runs
    last = runs.loc[runs.groupby("epsilon")["round"].idxmax()]
    assert (last["epsilon_spent"] <= last["epsilon"] * (1 + 1e-6)).all()
    assert (last["epsilon_spent"] >= 0.99 * last["epsilon"]).all()


BUILT: list[dict] = []


def _problem_of(options: dict | None = None, scale: list | None = None) -> pc.DistributedProblem:
    """consensus_problem with builder arguments that are a table and a list (as TOML gives them)."""
    BUILT.append({"options": options, "scale": scale})
    return consensus_problem(agents=3, **(options or {}))


def test_method_problem_overrides_may_be_tables_and_lists_and_bad_ones_are_named():
    """A method's problem overrides with a table or list value run (they were keyed by hash: TypeError 'unhashable');
    equal overrides share one problem; overrides that are not a mapping of names are refused naming the method."""
    methods = [pc.Method("A", OBJPERT, problem={"options": {"seed": 1}, "scale": [1, 2]}),
               pc.Method("B", OBJPERT, problem={"options": {"seed": 1}, "scale": [1, 2]})]
    BUILT.clear()
    runs = pc.compare(pc.Study(problem=_problem_of, methods=methods, epsilons=[1.0], rounds=2)).runs
    assert BUILT == [{"options": {"seed": 1}, "scale": [1, 2]}]
    final = runs.groupby("method")["objective"].last()
    assert final["A"] == final["B"]  # the same problem (and seeds): the same run
    for bad in (["consensus"], {1: "full"}):
        with pytest.raises(ParameterError, match="method 'A': problem must map"):
            pc.Study(problem=_problem_of, methods=[pc.Method("A", OBJPERT, problem=bad)], epsilons=[1.0])


def test_a_wrong_method_problem_value_in_toml_names_the_method_key():
    """``problem = { consensus = 3 }`` under [[methods]] is named as methods[0].problem.consensus (it was named as
    the study's problem.consensus)."""
    from privcvx.study_file import from_config

    config = {"problem": {"builder": "powerflow", "case": "case14"}, "study": {"epsilons": [1.0], "rounds": 2},
              "methods": [{"label": "A", "algorithm": "DPDistributedGradient", "problem": {"consensus": 3}}]}
    study = from_config(config).study
    with pytest.raises(ParameterError, match="argument 'methods\\[0\\].problem.consensus': must be one of"):
        pc.compare(study)


def _seeded(seed: int = 0) -> pc.DistributedProblem:
    return consensus_problem(agents=3, seed=seed)


def test_each_method_problem_has_its_own_reference_in_the_outputs(tmp_path):
    """A method whose problem overrides change the optimum gets its own centralized reference: in its relative gap,
    in ``Comparison.references`` and in reference.csv (one row per method; one value for the study was written)."""
    study = pc.Study(problem=_seeded, methods=[pc.Method("A", OBJPERT), pc.Method("B", OBJPERT, problem={"seed": 5})],
                     epsilons=[1.0], rounds=2)
    result = pc.compare(study, tmp_path)
    optimum = {"A": _seeded().solve_centralized().value, "B": _seeded(5).solve_centralized().value}
    assert abs(optimum["A"] - optimum["B"]) > 0.01  # the override changes the optimum (0.458 against 0.415)
    assert result.references == pytest.approx(optimum, rel=1e-9)
    table = pd.read_csv(tmp_path / "reference.csv")
    assert list(table["method"]) == ["A", "B"] and list(table["reference"]) == ["centralized", "centralized (seed=5)"]
    assert table["objective"].to_numpy() == pytest.approx([optimum["A"], optimum["B"]], rel=1e-9)
    final = result.runs[result.runs["round"] == 2].set_index("method")
    for label in ("A", "B"):
        gap = abs(final.loc[label, "objective"] - optimum[label]) / max(1.0, abs(optimum[label]))
        assert final.loc[label, "relative_gap"] == pytest.approx(gap, rel=1e-9)


def test_a_nominal_setting_warns_once_per_study_not_once_per_run():
    """Each run re-calibrates its method's template, and a nominal sensitivity warns at each: the study shows the
    warning once (it showed it at every calibration: each plan's up-front one and again in each run)."""
    nominal = LinearizedADMM(privacy=pc.OutputPerturbation(pc.Gaussian(1.0, 1e-5), sensitivity=pc.Sensitivity(
        l1=0.1, l2=0.1, nominal="a printed constant of no paper")))
    study = pc.Study(problem=_problem, methods=[pc.Method("OutPert", nominal)], epsilons=[1.0, 2.0], rounds=2,
                     seeds=(0, 1))
    with pytest.warns(pc.NominalPrivacyWarning) as caught:
        pc.compare(study)
    assert [str(w.message) for w in caught if w.category is pc.NominalPrivacyWarning] == [
        "the output sensitivity is nominal, not a valid bound: a printed constant of no paper"]
