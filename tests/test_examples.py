"""The examples run: the worked example of docs/algorithms.md is a conforming algorithm."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import AgentProgram, check_algorithm
from privcvx.algorithms.conformance import consensus_problem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from gradient_tracking import GradientTracking  # noqa: E402


def test_the_one_file_example_algorithm_conforms_and_is_exact():
    report = check_algorithm(GradientTracking(), rounds=300)
    assert "consensus: refused (constraints)" in report["optimum"]
    problem = consensus_problem(agents=6, bound=None)
    result = problem.solve(GradientTracking(), pc.Topology.random_sequence(edges=7, seed=0), rounds=300)
    assert np.linalg.norm(result.w - problem.solve_centralized().w) <= 1e-6  # exact with a constant step


def test_the_private_one_file_example_conforms_spends_its_total_and_survives_the_audit():
    """examples/gradient_tracking.py (under 200 lines): private, it passes check_algorithm; its ledger reports the
    total (the T-fold composition of its per-release Gaussian by dp-accounting's own PLD accountant); and its claim
    survives check_privacy over two rounds (the second release's sensitivity is the recursion's argument), which
    catches the 0.75x under-noised variant."""
    import dp_accounting

    from privcvx.algorithms import check_privacy

    source = Path(__file__).resolve().parents[1] / "examples" / "gradient_tracking.py"
    assert len(source.read_text().splitlines()) < 200
    private = GradientTracking(epsilon=5.0, clip=1.0)
    check_algorithm(private, rounds=300, backends=("serial",))
    problem = consensus_problem(agents=6, bound=None)
    result = problem.solve(private, pc.Topology.ring(), rounds=40, seed=0)
    multiplier = private.budget.per_update(40).noise_multiplier
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(multiplier), 40)
    assert result.privacy["steps"].tolist() == [40] * 6
    assert result.history["epsilon"].iloc[-1] == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-3)
    assert result.history["epsilon"].iloc[-1] == pytest.approx(5.0, rel=1e-6)
    # own noise kept out of the tracker: with it in, the trackers' sum random-walks (|w - w*| ~ 1e2 after 50 rounds)
    assert np.linalg.norm(result.w - problem.solve_centralized().w) < 2.0
    report = check_privacy(GradientTracking(epsilon=2.0, delta=1e-2, clip=10.0), rounds=2, runs=2000)
    assert report.passed and report.lower_bound <= report.claimed < report.under_noised
    assert report.attained == pytest.approx(1.0, abs=1e-6) and report.releases == 2


def test_the_private_example_charges_the_smaller_of_the_declared_bound_and_the_clip():
    import cvxpy as cp

    x = cp.Variable(2)
    printed = pc.Agent(cp.sum_squares(x), shared=x, sensitivity=pc.Sensitivity(l1=1.0, l2=0.5, nominal="printed"))
    assert GradientTracking(epsilon=1.0).sensitivity(printed) == pc.Sensitivity(l2=0.5, nominal="printed")
    assert GradientTracking(epsilon=1.0, clip=0.1).sensitivity(printed) == pc.Sensitivity(l2=0.2)  # valid: the clip
    with pytest.raises(pc.errors.PrivacyError, match="give clip"):
        GradientTracking(epsilon=1.0).sensitivity(pc.Agent(cp.sum_squares(x), shared=x))


def test_the_rendezvous_accuracy_example_runs_and_shows_the_trend(tmp_path):
    import subprocess

    import pandas as pd

    script = Path(__file__).resolve().parents[1] / "examples" / "rendezvous_accuracy.py"
    subprocess.run([sys.executable, str(script), "--quick", "--workers", "1", "--out", str(tmp_path)], check=True,
                   capture_output=True, text=True, timeout=300)
    table = pd.read_csv(tmp_path / "accuracy.csv")
    assert list(table["epsilon"]) == [0.1, 1.0, 10.0] and (tmp_path / "accuracy.png").exists()
    assert table["mean_d"].iloc[0] > 10 * table["mean_d"].iloc[2]  # d falls with epsilon
    assert np.allclose(table["epsilon_spent"], table["epsilon"] * (1 - (0.9 / 0.9670) ** 100), rtol=1e-3)


def test_the_quickstart_runs_as_written():
    import subprocess

    script = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"
    output = subprocess.run([sys.executable, str(script)], check=True, capture_output=True, text=True,
                            timeout=300).stdout
    lines = {line[:27].strip(): line[27:].split()[0] for line in output.splitlines()}  # label, then the value
    assert abs(float(lines["centralized optimum"]) - float(lines["Algorithm 1, no privacy"])) <= 1e-3


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: How the test suite runs each example script (its quick mode); every script in examples/ must be here.
QUICK = {"quickstart.py": [], "gradient_tracking.py": None, "rendezvous_accuracy.py": None,
         "economic_dispatch.py": ["--quick"], "lasso_general_form.py": ["--quick"], "pandapower_case.py": ["--quick"],
         "ldp_figure2.py": None, "dpp2_experiment.py": None, "zcdp_admm.py": None,
         "ding_qdpsgd_fair.py": ["--quick"], "pradmm_case14.py": None,
         "cost_opf_private.py": None}


def test_every_example_script_runs_in_the_suite():
    """None: run by a dedicated test (gradient_tracking: conformance; rendezvous_accuracy: the trend above;
    ldp_figure2: tests/test_ldp.py; dpp2_experiment: tests/test_dpp2.py; zcdp_admm: tests/test_zcdp_admm.py;
    pradmm_case14: tests/test_general_form_admm.py; cost_opf_private: tests/test_powerflow_cost.py)."""
    assert sorted(path.name for path in EXAMPLES.glob("*.py")) == sorted(QUICK)


def test_every_example_config_is_valid():
    """Each TOML of examples/ is a valid study (`privcvx compare FILE`): keys, values and every method's settings
    checked, nothing run."""
    from privcvx.study_file import load

    configs = sorted(EXAMPLES.glob("*.toml"))
    assert len(configs) == 8
    for config in configs:
        spec = load(config)
        assert spec.study.methods and spec.study.rounds >= 1 and spec.out == Path("out") / config.stem


def test_economic_dispatch_matches_plain_cvxpy_to_a_milliwatt(capsys):
    from economic_dispatch import main

    gap = main(["--quick"])
    assert gap <= 1e-3  # MW, against the same dispatch solved by plain CVXPY
    assert "largest difference from plain CVXPY" in capsys.readouterr().out


def test_general_form_lasso_matches_plain_cvxpy():
    from lasso_general_form import main

    assert main(["--quick"]) <= 1e-6


def test_pandapower_case_example_gives_an_answer_pandapower_accepts():
    from pandapower_case import main

    numbers = main(["--quick"])
    assert numbers["ac_converged"] == 1.0  # pandapower's AC power flow converges from the distributed answer
    assert numbers["tie_disagreement"] <= 1e-2 and numbers["consensus_residual"] <= 1e-2


def test_the_ding_example_shows_the_trends_of_chapters_4_and_5(capsys):
    from ding_qdpsgd_fair import main

    quantized, fair = main(["--quick"])
    gap = {(r.variant, r.bits, r.epsilon): r.relative_gap for r in quantized.itertuples()}
    assert gap[1, 8, 8.0] < gap[1, 8, 1.0] and gap[2, 16, 128.0] < gap[2, 16, 8.0]  # the loss falls as epsilon grows
    assert gap[1, 8, 8.0] < gap[2, 16, 8.0]  # Q-DPSGD-2 is slower than Q-DPSGD-1 (Remark 10)
    bits = quantized.set_index(["variant", "bits", "epsilon"])["total_bits"]
    assert bits[1, 16, 1.0] == 4 * bits[1, 4, 1.0]  # the bits sent scale with s
    exact = fair[fair["method"] == "exact"].set_index("tau")
    assert exact.loc[0.1, "risk_difference"] < exact.loc[float("inf"), "risk_difference"]
    assert "Functional mechanism" in capsys.readouterr().out


def test_the_state_check_continues_the_restored_program_and_catches_forgotten_state():
    """A program whose state_dict omits the gradient it keeps round-trips its state dict, yet continues differently:
    check_state_round_trip compares the next round's messages, and fails it."""
    from gradient_tracking import TrackingAgent

    from privcvx.algorithms.conformance import check_state_round_trip

    class ForgetfulAgent(TrackingAgent):
        def state_dict(self):
            return {"x": self.x, "y": self.y}

        def load_state_dict(self, state):
            self.x, self.y = state["x"], state["y"]

    class Forgetful(GradientTracking):
        def agent_program(self, agent, context):
            return ForgetfulAgent(agent, context, self)

    check_state_round_trip(GradientTracking())
    with pytest.raises(AssertionError, match="next messages differ"):
        check_state_round_trip(Forgetful())


def test_a_program_that_forgets_a_protocol_method_cannot_be_built():
    from gradient_tracking import TrackingAgent

    class Incomplete(AgentProgram):
        start = TrackingAgent.start

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()
