"""check_privacy (issue 27): every private method's claim survives an empirical audit that has the power to catch
a 0.75x under-noising; the audit fails the old DPDG calibration on an affine set."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from test_release_path import PRIVATE

import privcvx as pc
from privcvx import algorithms
from privcvx.algorithms import check_privacy, privacy_audit
from privcvx.algorithms.decentralized_admm import gradient_sensitivity
from privcvx.algorithms.pp_admm import PPADMMAgent, PPBudget
from privcvx.algorithms.privacy_audit import (
    PrivacyAuditFailure,
    epsilon_lower_bound,
    float_reachable,
    mu_lower_bound,
    quadratic_pair,
)
from privcvx.errors import PrivacyError
from privcvx.localsolve import CERTIFIED_ERROR
from privcvx.privacy import noise
from privcvx.privacy.grid import integer_noise
from privcvx.privacy.mechanisms import Sensitivity, ZCDPRelease
from privcvx.privacy.noise import SeededNoise
from privcvx.privacy.zcdp import dp_to_zcdp, gaussian_rho, gaussian_sigma, zcdp_gaussian
from privcvx.schedules import Geometric
from problems.binary_logistic import worst_case_pairs

#: The old PP-ADMM calibration's delta_i1 (ddc9214's default), and the runs that its audit needs.
OLD_DELTA_1 = 1e-4
OLD_PP_RUNS = 6000
BOX = {"set_kind": "box"}
LINE = {"set_kind": "free", "n": 1}
#: {x1 + x2 = 1} (not a box: projected by a solver), the gradient moved along (1, -1), which the projection keeps.
AFFINE_2 = {"set_kind": "affine", "n": 2, "direction": np.array([1.0, -1.0])}
#: Q-DPSGD's per-record pair: 30 records in 3 agents, agent 0 gains the record (e_1, +1) (a NeighbouringPair).
_RECORDS = np.random.default_rng(0).normal(size=(30, 2))
LOGISTIC = worst_case_pairs(_RECORDS, (_RECORDS[:, 0] > 0).astype(int), agents=3, bound=5.0)[0]


#: Runs per dataset of an audit of Laplace releases at epsilon = 2 with a one-coordinate pair: 0.75x under-noised
#: bounds 2.30-2.49 against 2 at 2000 runs (the functional mechanism's pdfc, the same discrete Laplace test).
LAPLACE_RUNS = 2000


def audited_pair(pair):
    """An AUDITED entry's pair: quadratic_pair's arguments, or a NeighbouringPair as is."""
    return quadratic_pair(**pair) if isinstance(pair, dict) else pair


#: Per private algorithm class: its audited configurations (algorithm, neighbouring pair, runs per dataset, and
#: optionally the statistic), or the reason it is not audited yet. A private method without an entry fails the walk
#: below. The configurations use a large per-release epsilon and one round: what gives the audit its power
#: (docs/privacy.md, "Empirical audit").
AUDITED = {
    algorithms.LinearizedADMM: [
        (algorithms.LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Laplace(2.0))), BOX, LAPLACE_RUNS),
        (algorithms.LinearizedADMM(privacy=pc.OutputPerturbation(pc.Laplace(2.0))), BOX, LAPLACE_RUNS),
        (algorithms.LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Gaussian(2.0, 1e-2, analytic=True))), BOX,
         3000),
        (algorithms.LinearizedADMM(privacy=pc.OutputPerturbation(pc.Gaussian(2.0, 1e-2, analytic=True))), BOX,
         3000)],
    algorithms.DPDistributedGradient: [(algorithms.DPDistributedGradient(epsilon=2.0, q=0.05), BOX, LAPLACE_RUNS)],
    # Unconstrained methods charging sqrt(n) l2 in l1: one coordinate (n = 1) attains it, with the sharpest test.
    algorithms.DPP2: [(algorithms.DPP2(mixing_seed=7, u_w=0.5, u_e=0.5, r=0.9), LINE, LAPLACE_RUNS)],
    algorithms.DiaDSP: [(algorithms.DiaDSP(alpha=0.1, u_x=0.5, u_y=0.5, r=0.9), LINE, LAPLACE_RUNS)],
    algorithms.PPDC: [(algorithms.PPDC(u_x=0.028, u_v=0.028, r=0.9), LINE, LAPLACE_RUNS)],
    # The local-DP aggregators charge each coordinate for the l_inf bound B_inf: one coordinate attains it.
    # On a set that is not a box ({x1 + x2 = 1}, projected by a solver) the charge is l1 d B_inf / D_i + 2 sqrt(d) e:
    # the direction (1, -1) survives the projection and has |d_l| = B_inf in both coordinates, so it attains it.
    algorithms.RandomizedADMM: [(algorithms.RandomizedADMM(noise_rate=Geometric(8.0, 1.02)), LINE, LAPLACE_RUNS),
                                # twice the runs: on this set projected by a solver the claim carries 2 sqrt(d) e,
                                # which thins the under-noised variant's margin (a clean clone once found no power
                                # at 2000)
                                (algorithms.RandomizedADMM(noise_rate=4.0 * math.sqrt(2.0), b_inf=math.sqrt(0.5)),
                                 AFFINE_2, 2 * LAPLACE_RUNS)],
    algorithms.RandomizedDGD: [(algorithms.RandomizedDGD(noise_rate=2.0), LINE, LAPLACE_RUNS),
                               (algorithms.RandomizedDGD(variant="2", noise_rate=2.0), LINE, LAPLACE_RUNS),
                               # twice the runs, as RandomizedADMM's on AFFINE_2 (session 38's clean clone found no
                               # power at 2000: the under-noised lower bound 1.9758 against the claim 1.9998)
                               (algorithms.RandomizedDGD(noise_rate=math.sqrt(2.0), b_inf=math.sqrt(0.5)), AFFINE_2,
                                2 * LAPLACE_RUNS)],
    # Output perturbation of the exact local step: its sensitivity S / (mu_f + 2 eta |V_i|) is attained when mu_f is
    # the quadratic's true modulus 1 (with the default mu_f = 0 the pair attains only (2 eta |V_i|) / (1 + 2 eta |V_i|)
    # = 2/3 of it). Its zCDP charge rho is audited as mu = sqrt(2 rho) (Gaussian releases).
    algorithms.PRADMM: [(algorithms.PRADMM(epsilon=6.0, delta=1e-2, strong_convexity=1.0), BOX, 800)],
    # Objective perturbation: b_i1 is drawn before the solve and charged with the broadcast, so the replay has no
    # likelihood of it; the audit projects the broadcast on its noise-free change (statistic="projection"). The
    # quadratic's Hessian does not depend on the data: h_i = 0 is its true bound, xi_i = 0, and the claim is the mu of
    # rho_i1 + rho_i2 (the map b_i1 -> x^ is affine, so the broadcast is exactly Gaussian).
    algorithms.PPADMM: [(algorithms.PPADMM(epsilon=8.0, hessian_change=0.0), LINE, 800, "projection")],
    # IPP-ADMM: PP-ADMM's broadcast behind an SVT gate whose Laplace noise is charged once as PureDP. A threshold
    # of -10^6 opens the gate with overwhelming probability (a silent run maps to -inf, a fixed function of the
    # transcript). The ledger's PureDP entry is randomized response's mu = 2 Phi^-1(e^eps / (1 + e^eps))
    # (privacy_audit.pure_dp_mu), so the claim is a mu (1.58 here: the SVT adds 0.013 to the broadcast's 1.567).
    algorithms.IPPADMM: [(algorithms.IPPADMM(epsilon=8.0, hessian_change=0.0, threshold=-1e6, svt_share=0.01), LINE,
                          1000, "projection")],
    # Q-DPSGD, one added record (e_1, +1) (binary_logistic.worst_case_pairs): its gradient at w = 0 has norm 1/2,
    # clipped to K = 1/4, so the released sum of clipped gradients moves by exactly K. Variant 1 at q = 1: a plain
    # Gaussian on that sum (exact LLR). Variant 2: a discrete Gaussian on the lattice codes of Q(x_i(1)), whose
    # quantizer draws uniforms the replay cannot repeat: the projection statistic; the public batch_size keeps
    # B = q m out of the data (add/remove changes m).
    algorithms.QDPSGD: [(algorithms.QDPSGD(noise_multiplier=0.5, clip=0.25), LOGISTIC, 2000),
                        (algorithms.QDPSGD(variant=2, noise_multiplier=0.5, clip=0.25, batch_size=10.0, bits=40),
                         LOGISTIC, 2000, "projection")],
}


def test_every_private_method_has_an_audit_entry():
    assert set(AUDITED) == {cls for cls, entry in PRIVATE.items() if entry is not None}


#: (algorithm, pair, runs, statistic, options): an entry without a statistic is audited by its exact LLR ("llr"),
#: options are further arguments of check_privacy.
CASES = [pytest.param(*(case + ("llr", {})[len(case) - 3:])[:5], id=f"{cls.__name__}-{i}")
         for cls, entry in AUDITED.items() if not isinstance(entry, str) for i, case in enumerate(entry)]


@pytest.mark.parametrize(("algorithm", "pair", "runs", "statistic", "options"), CASES)
def test_the_claim_survives_the_audit_which_catches_under_noising(algorithm, pair, runs, statistic, options):
    report = check_privacy(algorithm, neighbours=audited_pair(pair), runs=runs, statistic=statistic, **options)
    print(report)
    assert report.passed and report.lower_bound <= report.claimed < report.under_noised
    if statistic == "llr":
        # the pair is worst case: the replay attains the charge, up to the solver allowance the charge carries on top
        # of the exact sensitivity (PR-ADMM: Delta + 2 CERTIFIED_ERROR = Delta + 2e-4, Delta about 0.33 here;
        # RandomizedADMM/DGD: d alpha B_inf + 2 sqrt(d) e): at most 8e-4 below 1 on these pairs
        assert report.attained == pytest.approx(1.0, abs=10 * CERTIFIED_ERROR)
    assert report.impossible == 0                               # every grid release is reachable from the neighbour
    assert report.releases >= 1 and report.runs == runs


def test_a_method_that_draws_less_noise_than_it_charges_fails(monkeypatch):
    """Every grid release drawn at 0.75x the scale its ledger entry charges (charged one way, drawn another)."""
    monkeypatch.setattr(noise, "integer_noise", lambda kind, scale, size: integer_noise(kind, 0.75 * scale, size))
    with pytest.raises(PrivacyAuditFailure, match="exceeds the claimed epsilon") as failure:
        check_privacy(algorithms.LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Laplace(2.0))), runs=2000)
    report = failure.value.report
    assert report.lower_bound > report.claimed == pytest.approx(2.0, rel=1e-5)


#: The ring membership test's runs per dataset (10 rounds each): the whole transcript's LLR needs about as many runs
#: as one round's, because DPDG's geometric budget puts 0.93 of epsilon in round 1 (bench: 5000).
RING_RUNS = 3000


def test_a_ring_transcript_of_ten_rounds_passes_the_membership_test_with_power():
    """Issue 27 item 4: DPDG on a ring, 10 rounds, agent 0's data changed so that its declared sensitivity is
    attained in every round (the attacker's neighbour: the quadratic pair moves the gradient by d at every point);
    the test statistic is the LLR of agent 0's whole transcript (its 10 releases), given its neighbours' messages."""
    pair = quadratic_pair("box")
    ring = privacy_audit.NeighbouringPair(pair.original, pair.neighbour, 0, pc.Topology.ring())
    report = check_privacy(algorithms.DPDistributedGradient(epsilon=2.0, q=0.05), neighbours=ring, runs=RING_RUNS,
                           rounds=10)
    print(report)
    assert report.rounds == 10 and report.releases == 10
    assert report.lower_bound <= report.claimed < report.under_noised
    assert report.attained == pytest.approx(1.0, abs=1e-6)


def test_pure_dp_mu_is_the_smallest_gdp_of_randomized_response():
    """G_mu(q) = q at q = 1 / (1 + e^eps) (randomized response's corner), for mu = pure_dp_mu(eps); a smaller mu
    puts G_mu above the corner (not a valid mu)."""
    from scipy.stats import norm

    for epsilon in (0.1, 0.5, 2.0):
        q = 1.0 / (1.0 + math.exp(epsilon))
        mu = privacy_audit.pure_dp_mu(epsilon)
        assert norm.cdf(norm.ppf(1.0 - q) - mu) == pytest.approx(q, rel=1e-9)
        assert norm.cdf(norm.ppf(1.0 - q) - 0.99 * mu) > q


def _old_dpdg_rule(self, agent, kind, dim, step=1.0, solver_error=0.0):
    """DPDG's calibration before issue 26: the declared l1 gradient bound taken as the release's l1 sensitivity on
    any set (a Euclidean projection keeps l2, not l1)."""
    return self.declared_sensitivity(agent).l1 * step + solver_error


@pytest.mark.parametrize("set_kind", ["affine", "simplex"])
def test_the_audit_fails_the_old_dpdg_calibration_on_an_affine_set(monkeypatch, set_kind):
    """X = {sum x = 1} (and the simplex, whose faces the releases do not reach here), n = 3, d = e_1: the projected
    change has l1 norm 4/3 per unit l1; the old rule charged 1."""
    monkeypatch.setattr(algorithms.DPDistributedGradient, "release_sensitivity", _old_dpdg_rule)
    pair = quadratic_pair(set_kind, direction=np.eye(3)[0], shift=0.2)
    with pytest.raises(PrivacyAuditFailure) as failure:
        check_privacy(algorithms.DPDistributedGradient(epsilon=2.0, q=0.05), neighbours=pair, runs=300)
    report = failure.value.report
    print(report)
    # The replay catches it in every run: each release moves by 4/3 of its charge, so 300 runs suffice. The
    # statistical bound (2.04 against 1.861 at 10^4 runs, docs/privacy.md) is above the claim in expectation, but a
    # secure run is not reproducible and the margin even at 3000 runs is a few hundredths, so the test does not
    # require it.
    assert report.attained == pytest.approx(4 / 3, rel=1e-2)  # less the charged 2 sqrt(n) e (CERTIFIED_ERROR)
    assert "times the sensitivity it was charged for" in str(failure.value)


class _OldPPADMM(algorithms.PPADMM):
    """PP-ADMM's calibration before issue 26 (``git show ddc9214:privcvx/algorithms/pp_admm.py``, ``budget`` and
    ``fuzzed``; bench/bench_pp_admm_charge.py): per release rho = dp_to_zcdp(epsilon, delta) / T split as rho_i1,
    rho_i2; b_i1 drawn with the analytic Gaussian sigma_i1 of (epsilon_i3, delta_i1) = (0.99 epsilon_i1, 1e-4),
    epsilon_i1 = 2 sqrt(rho_i1 ln(1/delta_i1)), but charged rho_i1, with no Jacobian term (h = 0 here anyway)."""

    def budget(self, agent, degree, rounds):
        rho = dp_to_zcdp(self._epsilon, self._delta) / rounds
        rho_1, rho_2 = rho * (1.0 - self._splits), rho * self._splits
        epsilon_3 = 0.99 * 2.0 * math.sqrt(rho_1 * math.log(1.0 / OLD_DELTA_1))
        sigma_1 = gradient_sensitivity(agent) * float(dp_accounting.get_sigma_gaussian(epsilon_3, OLD_DELTA_1))
        return PPBudget(rho_1, rho_2, 0.0, sigma_1, gaussian_sigma(self.fuzz_sensitivity(degree), rho_2))

    def agent_program(self, agent, context):
        return _OldPPADMMAgent(agent, context, self)


class _OldPPADMMAgent(PPADMMAgent):
    """The release path refuses a draw whose scale is not its mechanism's, so b_i1 is drawn as the Gaussian it is
    (uncharged, as today), and the broadcast charges what ddc9214 recorded: a Gaussian of rho_i1, not of the sigma_i1
    drawn (the audit reads its claim from these charges)."""

    def perturbation(self, t):
        budget = self.budget
        return self.context.release(np.zeros(self.layout.dim), ZCDPRelease(gaussian_rho(self.sensitivity,
                                                                                         budget.sigma_1)),
                                    Sensitivity(l2=self.sensitivity), scale=budget.sigma_1, charge=False)

    def charge(self, t, mechanism, label):
        super().charge(t, zcdp_gaussian(self.budget.rho_1, self.settings._delta) if label == "objective"
                       else mechanism, label)


@pytest.mark.filterwarnings("ignore::privcvx.errors.ReproducibleNoiseWarning")
def test_the_audit_fails_the_old_pp_admm_calibration_at_small_beta(monkeypatch):
    """epsilon = 4, beta = 1e-6 (the fuzzing negligible), the quadratic pair (h = 0: the broadcast is exactly
    Gaussian): the old charge implies mu = 0.848, the noise drawn mu = 0.955 (bench/bench_pp_admm_charge.py's
    formulas at T = 1). The gap is small, so the runs are many: on the seeded path (deterministic, not flaky), and
    without the under-noised variant (CI time; the PP-ADMM entry of AUDITED shows the projection audit's power)."""
    audit = privacy_audit._audit
    monkeypatch.setattr(privacy_audit, "_audit", lambda *args: audit(*args) if args[6] == 1.0 else ("mu", math.inf,
                                                                                                   None, None))
    with pytest.raises(PrivacyAuditFailure, match="exceeds the claimed mu") as failure:
        check_privacy(_OldPPADMM(epsilon=4.0, beta=1e-6, hessian_change=0.0), neighbours=quadratic_pair(**LINE),
                      runs=OLD_PP_RUNS, statistic="projection", seed=1)
    report = failure.value.report
    print(report)
    assert report.claimed == pytest.approx(0.848, abs=1e-3)
    assert report.lower_bound > report.claimed


@pytest.mark.filterwarnings("ignore::privcvx.errors.ReproducibleNoiseWarning")
def test_the_audit_fails_the_seeded_float_path_by_reachability():
    """Mironov's attack: most float releases on D cannot be produced from D' (the grid's runs above had none)."""
    with pytest.raises(PrivacyAuditFailure, match="impossible under the other dataset") as failure:
        check_privacy(algorithms.LinearizedADMM(privacy=pc.OutputPerturbation(pc.Laplace(2.0))), runs=300, seed=1)
    report = failure.value.report
    print(report)
    assert report.impossible > 0.5 * 2 * 300   # measured: 513 of 600 runs
    assert report.lower_bound > report.claimed


def test_float_reachability_finds_every_true_preimage():
    source = SeededNoise(3)
    for subtract in (False, True):
        releases = source.perturb(np.full(200, 0.3), "laplace", 0.37, 1.0, subtract=subtract).value
        assert all(float_reachable(y, 0.3, 0.37, subtract) for y in releases)
        assert not all(float_reachable(y, 0.3 + 1e-3, 0.37, subtract) for y in releases)


def test_the_bounds_on_exact_laplace_and_gaussian_samples():
    """The statistics alone, on exact samples: below the truth, and above it for 0.75x the noise."""
    rng = np.random.default_rng(0)
    thresholds, runs = np.array([0.5, 0.999]), 20_000
    for factor in (1.0, 0.75):  # one Laplace release with epsilon 1: LLR / max = clip(y, -1, 1) for y ~ Lap(+-1)
        negatives = np.clip(rng.laplace(-0.5, factor, runs), -0.5, 0.5) / 0.5
        positives = np.clip(rng.laplace(0.5, factor, runs), -0.5, 0.5) / 0.5
        bound = epsilon_lower_bound(negatives, positives, thresholds, 0.0, 0.95)
        assert bound <= 1.0 / factor and (factor == 1.0 or bound > 1.0)
    z = np.array([0.0, 1.0])
    for factor in (1.0, 0.75):  # mu = 1: the z-score of the LLR is N(0, 1) on D' and N(-mu, 1) on D
        mu = 1.0 / factor
        bound = mu_lower_bound(rng.normal(-mu, 1.0, runs), rng.normal(0.0, 1.0, runs), z, 0.95)
        assert bound <= mu and (factor == 1.0 or bound > 1.0)


def test_check_privacy_refuses_what_it_cannot_audit():
    with pytest.raises(PrivacyError, match="no privacy claim to audit"):
        check_privacy(algorithms.DPDistributedGradient())
    with pytest.raises(PrivacyError, match="pass neighbours=NeighbouringPair"):
        check_privacy(PRIVATE[algorithms.QDPSGD][0][0])
    with pytest.raises(PrivacyError, match="nothing to project on"):  # an SVT gate that never opens: no broadcast
        check_privacy(algorithms.IPPADMM(epsilon=8.0, hessian_change=0.0, threshold=1e6), neighbours=quadratic_pair(
            **LINE), runs=50, statistic="projection")
