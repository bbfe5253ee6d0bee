"""A total (epsilon, delta) for the methods of Laplace releases (RandomizedADMM, RandomizedDGD, DPP2, DiaDSP, PPDC):
each run's ledger reports the target, and the calibrated noise composes to it by an independent computation: the
per-release epsilons written out from the papers' statements, composed by basic composition, advanced composition
(Dwork & Roth, Thm. 3.20) and dp-accounting's own RDP accountant, and summed by each paper's closed form."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import DPP2, PPDC, DiaDSP, RandomizedADMM, RandomizedDGD, consensus_problem
from privcvx.algorithms.conformance import check_determinism
from privcvx.errors import PrivacyError

pytestmark = [pytest.mark.usefixtures("quiet_seeds"),
              pytest.mark.filterwarnings("ignore::privcvx.errors.ConvergenceWarning")]
TARGET, DELTA, ROUNDS, B, D = 2.0, 1e-5, 25, 0.1, 3  # B: the problem's declared sensitivity; D: its dimension


def _problem():
    return consensus_problem(agents=3, bound=None)


def _randomized_admm(ready, problem):
    worst = max(D * B / (2.0 * (agent.smoothness + 0.5 * 2)) for agent in problem.agents)  # D_i = 2 (L_i + zeta 2)
    return [ready.noise_rate * worst] * ROUNDS


def _randomized_dgd(ready, problem):
    c = 1.0 / max(agent.smoothness for agent in problem.agents)
    return [D * ready.noise_rate * c / k ** 0.75 * B for k in range(1, ROUNDS + 1)]


def _dpp2(ready, problem):
    root = math.sqrt(D) * B
    shrink = 1.0 - ready.alpha * max(agent.smoothness for agent in problem.agents)
    return [root / ready.u_e, *(root / (shrink * ready.u_e * ready.r ** k) for k in range(1, ROUNDS)),
            *(ready.alpha * root / (shrink * ready.u_w * ready.r ** k) for k in range(1, ROUNDS))]


def _diadsp(ready, problem):
    return [math.sqrt(D) * B * (1 if k == 0 else 2) / (ready.u_y * ready.r ** k) for k in range(ROUNDS)]


def _ppdc(ready, problem):
    return [math.sqrt(D) * ready.eta * B / (ready.u_x * ready.r ** k) for k in range(1, ROUNDS + 1)]


def _closed_form(ready, problem):
    """Each paper's (or module's) closed-form basic composition of the calibrated run, or None."""
    if isinstance(ready, DPP2):
        return ready.privacy_of(problem.agents[0], D).epsilon(ROUNDS - 1, ready.r)  # Theorem 3
    if isinstance(ready, DiaDSP):
        return ready.epsilon_bound(B, D, ROUNDS - 1)
    if isinstance(ready, PPDC):
        return ready.epsilon_bound(B, D, ROUNDS)
    return None


CASES = [(RandomizedADMM(), _randomized_admm), (RandomizedDGD(), _randomized_dgd),
         (DPP2(mixing_seed=3, u_w=1.0, u_e=2.0, r=0.97), _dpp2),
         (DiaDSP(alpha=0.1, u_x=1.0, u_y=1.0, r=0.97), _diadsp), (PPDC(u_x=1.0, u_v=1.0, r=0.97), _ppdc)]


def _independent(epsilons: list[float]) -> dict[str, float]:
    accountant = dp_accounting.rdp.RdpAccountant()
    for epsilon in epsilons:
        accountant.compose(dp_accounting.LaplaceDpEvent(1.0 / epsilon))
    squares = math.fsum(e * e for e in epsilons)
    return {"basic": math.fsum(epsilons), "rdp": accountant.get_epsilon(DELTA),
            "advanced": math.sqrt(2 * math.log(1 / DELTA) * squares) + math.fsum(e * math.expm1(e) for e in epsilons)}


@pytest.mark.parametrize(("template", "releases"), CASES, ids=[type(case[0]).__name__ for case in CASES])
def test_a_total_budget_is_spent_exactly_and_matches_an_independent_composition(template, releases):
    study = pc.Study(problem=_problem, methods=[pc.Method("m", template)], epsilons=[TARGET], delta=DELTA,
                     rounds=ROUNDS)
    problem = _problem()
    algorithm = study.calibrated(template, TARGET)
    ready = algorithm.prepare(problem, algorithm.default_topology().bind(problem.names), ROUNDS)
    epsilons = releases(ready, problem)
    composed = _independent(epsilons)
    # the calibration composes the secure grid's discrete Laplace (total_budget._dominating), whose RDP lies a
    # relative O(2^-20) above the continuous one: the continuous composition is within 1e-7 below the target
    assert TARGET * (1 - 1e-7) <= min(composed.values()) <= TARGET
    assert composed["basic"] > 1.1 * TARGET  # calibrated to basic composition alone, less would be spent
    if _closed_form(ready, problem) is not None:
        assert _closed_form(ready, problem) == pytest.approx(composed["basic"], rel=1e-12)
    result = problem.solve(algorithm, rounds=ROUNDS, seed=1)
    spent = result.history["epsilon"].iloc[-1]
    assert TARGET * (1 - 1e-7) <= spent <= TARGET
    table = result.privacy
    assert table["epsilon_basic"].max() == pytest.approx(composed["basic"], rel=1e-9)  # the run charged these
    assert (table["epsilon_pld"].dropna() <= TARGET * (1 + 1e-9)).all()


def test_pc_compare_runs_them_at_the_same_total():
    methods = [pc.Method(type(template).__name__, template) for template, _ in CASES]
    summary = pc.compare(pc.Study(problem=_problem, methods=methods, epsilons=[0.5, 50.0], delta=DELTA,
                                  rounds=ROUNDS)).summary
    spent = summary["epsilon_spent_max"].to_numpy()
    assert (spent <= summary["epsilon"]).all() and np.allclose(spent, summary["epsilon"], rtol=1e-6)
    for method, group in summary.groupby("method"):
        gaps = group.sort_values("epsilon")["relative_gap_mean"].to_numpy()
        assert gaps[1] < gaps[0], (method, gaps)


def test_a_total_needs_the_noise_template_and_excludes_a_rate():
    with pytest.raises(PrivacyError, match="template"):
        DPP2(epsilon=1.0)
    with pytest.raises(PrivacyError, match="not both"):
        RandomizedADMM(epsilon=1.0, noise_rate=2.0)
    with pytest.raises(PrivacyError, match="template"):
        pc.compare(pc.Study(problem=_problem, methods=[pc.Method("P", PPDC())], epsilons=[1.0], rounds=3))


@pytest.mark.parametrize("template", [case[0] for case in CASES], ids=[type(case[0]).__name__ for case in CASES])
def test_a_run_at_a_total_is_deterministic_and_resumes_bitwise(template):
    """The calibration happens in prepare, from public settings only: a checkpoint's resume repeats it."""
    check_determinism(template.clone(epsilon=TARGET, delta=DELTA), rounds=6, backends=("serial",))
