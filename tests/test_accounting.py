"""The accountant: ledgers and every epsilon, checked against dp-accounting and closed forms.

PLD results here use value_discretization_interval = 1e-3 (privcvx's default, coarser than
dp-accounting's 1e-4) to keep the file fast; the PLD estimate is pessimistic, so it stays
an upper bound, and for the Gaussian it is within 1e-5 relative of the exact epsilon.
"""

from __future__ import annotations

import json
import math

import dp_accounting
import pytest
from dp_accounting import pld, rdp

from privcvx.errors import PrivacyError
from privcvx.privacy import (
    PRIVACY_COLUMNS,
    Budget,
    Gaussian,
    Laplace,
    PrivacyLedger,
    default_accounting_delta,
    epsilon_report,
    privacy_table,
    tightest_epsilon,
)

ROUNDS, LOCAL_UPDATES = 40, 5
STEPS = ROUNDS * LOCAL_UPDATES


def _ledger(*entries: tuple) -> PrivacyLedger:
    ledger = PrivacyLedger("agent-0")
    for mechanism, count in entries:
        for _ in range(count // LOCAL_UPDATES):
            ledger.record(mechanism, LOCAL_UPDATES)      # one record per round, as the run loop does
    return ledger


def _independent(entries: list[tuple[dp_accounting.DpEvent, int]], delta: float) -> tuple[float, float]:
    """RDP and PLD epsilon computed straight from dp-accounting."""
    rdp_accountant = rdp.RdpAccountant()
    pld_accountant = pld.PLDAccountant(value_discretization_interval=1e-3)
    for event, count in entries:
        rdp_accountant.compose(event, count)
        pld_accountant.compose(event, count)
    return rdp_accountant.get_epsilon(delta), pld_accountant.get_epsilon(delta)


@pytest.mark.parametrize("case", ["gaussian", "laplace", "mixed"])
def test_rdp_and_pld_match_dp_accounting(case: str) -> None:
    gaussian, laplace, other = Gaussian(0.6, 1e-5), Laplace(0.25), Gaussian(3.0, 1e-5, analytic=True)
    entries = {"gaussian": [(gaussian, STEPS)], "laplace": [(laplace, STEPS)],
               "mixed": [(gaussian, 100), (laplace, 50), (other, 50)]}[case]
    delta = 1e-5
    events = {"gaussian": [(dp_accounting.GaussianDpEvent(math.sqrt(2 * math.log(1.25e5)) / 0.6), STEPS)],
              "laplace": [(dp_accounting.LaplaceDpEvent(4.0), STEPS)],
              "mixed": [(dp_accounting.GaussianDpEvent(math.sqrt(2 * math.log(1.25e5)) / 0.6), 100),
                        (dp_accounting.LaplaceDpEvent(4.0), 50),
                        (dp_accounting.GaussianDpEvent(dp_accounting.get_sigma_gaussian(3.0, 1e-5)), 50)]}[case]
    report = epsilon_report(_ledger(*entries), delta)
    expected_rdp, expected_pld = _independent(events, delta)
    assert report["steps"] == STEPS
    assert report["epsilon_rdp"] == pytest.approx(expected_rdp, rel=1e-6)
    assert report["epsilon_pld"] == pytest.approx(expected_pld, rel=1e-6)


def test_pld_is_the_exact_gaussian_epsilon_for_one_sensitivity_unit() -> None:
    # T E Gaussian releases whose means differ by one sensitivity (the neighbouring pair of
    # the user's relation) are one Gaussian with multiplier s / sqrt(T E): Balle & Wang is exact.
    mechanism = Gaussian(0.5, 1e-6)
    exact = dp_accounting.get_epsilon_gaussian(mechanism.noise_multiplier / math.sqrt(STEPS), 1e-6)
    report = epsilon_report(_ledger((mechanism, STEPS)), 1e-6)
    assert exact <= report["epsilon_pld"] <= exact * (1 + 1e-5)
    assert report["epsilon_gdp"] == pytest.approx(exact, rel=1e-9)


def test_basic_advanced_and_paper_bounds() -> None:
    epsilon, delta = 0.2, 1e-4
    report = epsilon_report(_ledger((Gaussian(epsilon, delta), STEPS)), delta)
    assert report["epsilon_basic"] == pytest.approx(ROUNDS * LOCAL_UPDATES * epsilon, rel=1e-12)
    assert report["delta_basic"] == pytest.approx(ROUNDS * LOCAL_UPDATES * delta, rel=1e-12)
    # Dwork & Roth Thm. 3.20 with delta' = delta.
    advanced = epsilon * math.sqrt(2 * STEPS * math.log(1 / delta)) + STEPS * epsilon * math.expm1(epsilon)
    assert report["epsilon_advanced"] == pytest.approx(advanced, rel=1e-12)
    assert report["delta_advanced"] == pytest.approx(STEPS * delta + delta, rel=1e-12)
    # Thm. 4.9 as stated in the paper.
    paper = math.sqrt(ROUNDS * LOCAL_UPDATES * math.log(1 / delta) / math.log(1.25 / delta)) * epsilon
    assert report["epsilon_moments"] == pytest.approx(paper, rel=1e-12)
    assert math.isnan(epsilon_report(_ledger((Laplace(epsilon), STEPS)), delta)["epsilon_moments"])


def test_paper_thm_4_9_is_below_the_exact_epsilon_and_never_reported_as_tightest() -> None:
    # The erratum of docs/privacy.md: at the paper's power-flow setting (delta = 1e-2,
    # epsilon-bar = 1) and T E = 100, Thm. 4.9 claims less than the exact epsilon.
    mechanism = Gaussian(1.0, 1e-2)
    ledger = _ledger((mechanism, 100))
    exact = dp_accounting.get_epsilon_gaussian(mechanism.noise_multiplier / 10.0, 1e-2)
    report = epsilon_report(ledger, 1e-2)
    assert report["epsilon_moments"] < exact
    tightest = tightest_epsilon(ledger, 1e-2)
    assert tightest == report["epsilon_gdp"] == pytest.approx(exact, rel=1e-9)
    assert tightest <= min(report["epsilon_rdp"], report["epsilon_pld"])


def test_tightest_epsilon_uses_only_accountants_valid_at_delta() -> None:
    gaussian = _ledger((Gaussian(0.5, 1e-5), STEPS))
    report = epsilon_report(gaussian, 1e-5)
    assert report["delta_basic"] > 1e-5 and report["delta_advanced"] > 1e-5   # neither holds at delta
    assert report["epsilon_gdp"] <= min(report["epsilon_rdp"], report["epsilon_pld"])
    assert tightest_epsilon(gaussian, 1e-5) == report["epsilon_gdp"]
    mixed = _ledger((Gaussian(0.5, 1e-5), 10), (Laplace(2.0), 5))
    mixed_report = epsilon_report(mixed, 1e-5)
    assert math.isnan(mixed_report["epsilon_gdp"])
    assert tightest_epsilon(mixed, 1e-5) == min(mixed_report["epsilon_rdp"], mixed_report["epsilon_pld"])
    # Laplace is pure DP: basic composition holds at any delta and wins for few, loud updates.
    few = _ledger((Laplace(5.0), 5))
    few_report = epsilon_report(few, 1e-6)
    assert tightest_epsilon(few, 1e-6) == min(few_report[k] for k in
                                              ("epsilon_basic", "epsilon_advanced", "epsilon_rdp", "epsilon_pld"))
    assert tightest_epsilon(few, 1e-6) <= 25.0
    assert tightest_epsilon(PrivacyLedger("idle"), 1e-6) == 0.0


@pytest.mark.parametrize(("mechanism", "accountant"), [("gaussian", "pld"), ("gaussian", "rdp"),
                                                       ("laplace", "pld")])
def test_budget_hits_its_target(mechanism: str, accountant: str) -> None:
    budget = Budget(2.0, 1e-5, mechanism=mechanism, accountant=accountant)
    per_update = budget.per_update(STEPS)
    assert per_update.kind == mechanism and budget.per_update(STEPS) is per_update
    # Independent accountant of the same kind, composing the per-update event T E times.
    if accountant == "pld":
        independent = pld.PLDAccountant(value_discretization_interval=1e-3)
    else:
        independent = rdp.RdpAccountant()
    event_type = dp_accounting.GaussianDpEvent if mechanism == "gaussian" else dp_accounting.LaplaceDpEvent
    spent = independent.compose(event_type(per_update.noise_multiplier), STEPS).get_epsilon(1e-5)
    assert 0.99 * budget.epsilon <= spent <= budget.epsilon
    ledger = _ledger((per_update, STEPS))
    assert default_accounting_delta(per_update) == budget.delta
    assert tightest_epsilon(ledger, budget.delta) <= budget.epsilon


def test_ledger_round_trips_through_json_and_merges_records() -> None:
    ledger = _ledger((Gaussian(0.5, 1e-5), 20), (Budget(1.0, 1e-5).per_update(20), 20),
                     (Laplace(1.0), 10))
    assert len(ledger.entries) == 3 and ledger.steps == 50
    restored = PrivacyLedger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert restored.agent == ledger.agent and restored.signature() == ledger.signature()
    before, after = epsilon_report(ledger, 1e-5), epsilon_report(restored, 1e-5)
    assert math.isnan(before["epsilon_basic"])                      # the budget entry has no per-update eps
    assert all(before[k] == after[k] or (math.isnan(before[k]) and math.isnan(after[k])) for k in before)
    assert tightest_epsilon(restored, 1e-5) == tightest_epsilon(ledger, 1e-5)


def test_privacy_table_and_default_delta() -> None:
    ledgers = [_ledger((Gaussian(0.5, 1e-5), 10)), _ledger((Laplace(0.5), 10))]
    ledgers[1].agent = "agent-1"
    table = privacy_table(ledgers, 1e-5)
    assert list(table.columns) == list(PRIVACY_COLUMNS)
    assert list(table["agent"]) == ["agent-0", "agent-1"] and list(table["steps"]) == [10, 10]
    assert table["epsilon_basic"].tolist() == pytest.approx([5.0, 5.0])
    assert default_accounting_delta(Gaussian(0.5, 1e-3)) == 1e-3
    assert default_accounting_delta(Laplace(0.5)) == 1e-6


def test_the_accounting_column_says_which_bound_each_epsilon_column_is() -> None:
    """Q-DPSGD-1's secure release: epsilon_rdp is a looser bound (Zhu & Wang's or the smoothing lemma's),
    epsilon_pld dp-accounting's PLD of the Poisson-sampled discrete Gaussian (recomputed here from dp-accounting),
    for a vector release the smoothing lemma's (tests/test_qdpsgd_smoothing.py); the table says so, as it says why
    a discrete Gaussian's other columns are NaN."""
    from privcvx.privacy.mechanisms import DiscreteGaussian, PoissonSampledDiscreteGaussian

    scalar, vector = (_ledger((PoissonSampledDiscreteGaussian(0.02, 2.0, 1.0, d), 200)) for d in (1, 5))
    table = privacy_table([scalar, vector, _ledger((DiscreteGaussian(2.0, 1.0), 10)),
                           _ledger((Gaussian(0.5, 1e-5), 10))], 1e-5)
    exact = pld.privacy_loss_distribution.from_discrete_gaussian_mechanism(
        2.0, sensitivity=1, sampling_prob=0.02, value_discretization_interval=1e-3, use_connect_dots=True)
    tight = exact.self_compose(200).get_epsilon_for_delta(1e-5)
    assert table["epsilon_pld"][0] == pytest.approx(tight, rel=1e-9) and tight < table["epsilon_pld"][1] < 1.5 * tight
    assert table["epsilon_rdp"][0] > 1.1 * tight and table["epsilon_rdp"][1] > 1.1 * table["epsilon_pld"][1]
    notes = table["accounting"].tolist()
    assert "rdp = the smaller of Zhu & Wang" in notes[0] and "pld = dp-accounting's PLD" in notes[0]
    assert "(tight)" in notes[0]
    assert "smoothing lemma's slack" in notes[1]
    assert "continuous Gaussian's RDP curve" in notes[2] and math.isnan(table["epsilon_pld"][2])
    assert notes[3] == "dp-accounting"


def test_bad_ledger_input_names_agent_and_argument() -> None:
    ledger = PrivacyLedger("zone-2")
    for mechanism, count, argument in [(Laplace(1.0), 0, "count"), (Laplace(1.0), 1.5, "count"),
                                       ("laplace", 1, "mechanism")]:
        with pytest.raises(PrivacyError) as info:
            ledger.record(mechanism, count)
        assert (info.value.agent, info.value.argument) == ("zone-2", argument)
    for delta in (0.0, 1.0, math.nan, -1e-5):
        with pytest.raises(PrivacyError) as info:
            epsilon_report(ledger, delta)
        assert info.value.argument == "delta"


# ---- multipliers past the float range (issue 26 point 8) and O(1) accounting per round (issue 29 point 3) ----------

def _decaying_laplace_ledger(q: float = 0.05, epsilon: float = 1.0) -> tuple[PrivacyLedger, list[float]]:
    """DPDG's releases (safe calibration, S = c = 1): x(k) of sensitivity q^k, released with scale p^(k+1) / (epsilon
    (p - q)), until q^k underflows to 0 (k = 248 at q = 0.05), then three releases whose epsilon underflows (entries
    Laplace(5e-324), noise multiplier inf). Returns the ledger and the recorded epsilons."""
    from privcvx.algorithms.dp_gradient_accuracy import optimal_noise_decay
    from privcvx.privacy.mechanisms import laplace_release

    p = optimal_noise_decay(q)
    ledger, epsilons = PrivacyLedger("agent-0"), []
    for k in range(400):
        mechanism = laplace_release(q ** k, p ** (k + 1) / (epsilon * (p - q)))
        if mechanism is None:  # q^k == 0: a post-processing of releases, no entry
            assert q ** k == 0.0
            continue
        ledger.record(mechanism)
        epsilons.append(mechanism.epsilon)
    for _ in range(3):
        ledger.record(laplace_release(1e-320, 1e10))
        epsilons.append(math.ulp(0.0))
    return ledger, epsilons


def _dp_accounting_epsilon(accountant: dp_accounting.PrivacyAccountant, epsilons: list[float], delta: float) -> float:
    for epsilon in epsilons:
        accountant.compose(dp_accounting.LaplaceDpEvent(1.0 / epsilon))
    return float(accountant.get_epsilon(delta))


def test_a_ledger_whose_multipliers_pass_the_float_range_keeps_every_column_finite_and_right():
    from privcvx.privacy.accounting import RunningEpsilon

    ledger, epsilons = _decaying_laplace_ledger()
    assert max(m.noise_multiplier for m, _ in ledger.entries) == math.inf  # 1 / 5e-324
    assert sum(1.0 / e > 1.34e154 for e in epsilons) > 100  # their squares overflow a float
    delta = 1e-6
    # The releases that matter (epsilon >= 1e-150), composed by dp-accounting directly; the rest, by basic
    # composition, add at most their sum, below 1e-149.
    matter = [e for e in epsilons if e >= 1e-150]
    tail = math.fsum(e for e in epsilons if e < 1e-150)
    assert 0 < tail < 1e-149
    rdp_reference = _dp_accounting_epsilon(rdp.RdpAccountant(), matter, delta)
    pld_reference = _dp_accounting_epsilon(pld.PLDAccountant(value_discretization_interval=1e-3), matter, delta)
    report = epsilon_report(ledger, delta)
    assert report["steps"] == len(epsilons) == ledger.steps
    for key in ("epsilon_basic", "epsilon_advanced", "epsilon_rdp", "epsilon_pld"):
        assert math.isfinite(report[key]), key
    # Basic composition: the closed form epsilon (1 - (q/p)^K) of Theorem 5, here 1 - 1e-288 == 1.0.
    assert report["epsilon_basic"] == pytest.approx(math.fsum(epsilons), rel=1e-14)
    assert report["epsilon_basic"] == pytest.approx(1.0, rel=1e-14)
    assert report["epsilon_advanced"] == pytest.approx(
        math.sqrt(2 * math.log(1 / delta) * math.fsum(e * e for e in epsilons))
        + math.fsum(e * math.expm1(e) for e in epsilons), rel=1e-12)
    assert report["epsilon_rdp"] == pytest.approx(rdp_reference, rel=1e-12)
    # PLD: dp-accounting's pessimistic discretization charges each tiny release a little: at most 1e-3 above the
    # reference, never below it but for the PLD's own rounding (the two compose in different orders).
    assert pld_reference * (1 - 1e-9) <= report["epsilon_pld"] <= pld_reference + 1e-3
    # The per-round accountant, fed one release at a time, agrees with the whole-ledger one.
    account = RunningEpsilon(PrivacyLedger("agent-0"), delta)
    history = []
    for mechanism, count in ledger.entries:
        account.record(mechanism, count)
        history.append(account.epsilon())
    assert all(math.isfinite(value) for value in history)
    assert history[-1] == pytest.approx(min(rdp_reference, math.fsum(epsilons)), rel=1e-12)
    # A checkpoint of it restores exactly.
    restored = PrivacyLedger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert restored.signature() == ledger.signature() and restored.steps == ledger.steps


def test_gaussian_releases_with_huge_multipliers_add_nothing_and_overflow_nothing():
    from privcvx.privacy.mechanisms import _with_multiplier
    from privcvx.privacy.zcdp import ledger_rho

    release = Gaussian(0.5, 1e-6)
    alone, ledger = PrivacyLedger("agent-0"), PrivacyLedger("agent-0")
    alone.record(release, 10)
    ledger.record(release, 10)
    for multiplier in (1e155, 1e200, 1e300, math.inf):
        ledger.record(_with_multiplier(Gaussian, epsilon=math.nan, delta=1e-6, noise_multiplier=multiplier,
                                       budget=None), 1000)
    delta = 1e-5
    assert tightest_epsilon(ledger, delta) == tightest_epsilon(alone, delta)  # mu^2 + 4e3 * 1e-300: unchanged
    ours, reference = epsilon_report(ledger, delta), epsilon_report(alone, delta)
    for key in ("epsilon_moments", "epsilon_rdp", "epsilon_pld"):
        assert math.isfinite(ours[key]) and ours[key] == pytest.approx(reference[key], rel=1e-6), key
    assert ledger_rho(ledger) == pytest.approx(ledger_rho(alone), rel=1e-15)


def test_the_running_epsilon_does_not_walk_the_ledger(monkeypatch):
    """Issue 29: the per-round epsilon read ``len(ledger.entries)``, a list of every mechanism: O(t) per round."""
    from privcvx.privacy.accounting import RUNNING_ACCOUNTING_ENTRIES, RunningEpsilon

    account = RunningEpsilon(PrivacyLedger("agent-0"), 1e-6)
    for k in range(RUNNING_ACCOUNTING_ENTRIES + 5):
        account.record(Laplace(0.5 ** k))
    monkeypatch.setattr(PrivacyLedger, "entries", property(lambda self: pytest.fail("walked the ledger")))
    monkeypatch.setattr(PrivacyLedger, "signature", lambda self: pytest.fail("sorted the ledger"))
    account.record(Laplace(1e-9))
    assert account.epsilon() > 0 and account.ledger.steps == RUNNING_ACCOUNTING_ENTRIES + 6
    assert account.ledger.distinct == RUNNING_ACCOUNTING_ENTRIES + 6
