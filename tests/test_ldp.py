"""Local DP with random local aggregators (Xiao, Ye & Devadas): RandomizedADMM, RandomizedDGD, the ex-post
accountant, secret-shared exchange (Algorithm 3), the Adult reader and the Figure 2 example."""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats
from sklearn.preprocessing import MinMaxScaler, OrdinalEncoder, normalize

import privcvx as pc
from privcvx.algorithms import RandomizedADMM, RandomizedDGD
from privcvx.algorithms.conformance import check_determinism, check_state_round_trip, consensus_problem
from privcvx.errors import ParameterError, PrivacyError, RunFailed, UnsupportedError
from privcvx.privacy.ex_post import (
    advanced_composition,
    basic_composition,
    ex_post_epsilon,
    expected_amplification,
    worst_case_epsilon,
)
from privcvx.privacy.noise import SeededNoise
from privcvx.privacy.secret_sharing import FixedPointSharing
from privcvx.schedules import Geometric
from problems.datasets import ADULT_COLUMNS, DatasetNotFoundError, load_adult

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("quiet_seeds")


def _gap(result, reference) -> float:
    return abs(result.history["objective"].iloc[-1] - reference.value) / max(1.0, abs(reference.value))


# ---- priority 1: convergence without noise, the printed dual sign, conformance -----------------------------
@pytest.mark.parametrize("algorithm, rounds", [
    (RandomizedADMM(), 300), (RandomizedADMM(aggregator="fixed"), 300), (RandomizedADMM(update="exact"), 150),
    (RandomizedADMM(D=10.0), 600), (RandomizedDGD(), 1000), (RandomizedDGD(variant="fixed"), 1000)],
    ids=["admm", "admm-fixed", "admm-exact", "admm-D10", "dgd-2*", "dgd-fixed"])
def test_non_private_methods_reach_the_centralized_optimum_on_a_random_graph(graph_problem, algorithm, rounds):
    problem, topology, reference = graph_problem
    result = problem.solve(algorithm, topology, rounds=rounds, seed=1)
    assert _gap(result, reference) <= 1e-3
    assert np.linalg.norm(result.w - reference.w) <= 0.05


def test_algorithm_2_on_a_complete_graph_reaches_the_optimum_and_is_refused_elsewhere(graph_problem):
    problem, topology, reference = graph_problem
    result = problem.solve(RandomizedDGD(variant="2"), pc.Topology.complete(), rounds=1000, seed=1)
    assert _gap(result, reference) <= 1e-3
    # the conformance checks that use the algorithm as given (its defaults are checked with RandomizedDGD() below)
    private = RandomizedDGD(variant="2", noise_rate=2.0)
    check_determinism(private, rounds=6, backends=("serial",))  # the process backend: check_algorithm below
    check_state_round_trip(private)
    with pytest.raises(UnsupportedError, match="RandomizedDGD.*complete"):
        problem.solve(RandomizedDGD(variant="2"), topology, rounds=5)


@pytest.mark.parametrize("algorithm", [RandomizedADMM(update="exact"), RandomizedADMM(), RandomizedDGD()],
                         ids=["admm-exact", "admm", "dgd-2*"])
def test_with_a_box_the_projected_updates_reach_the_constrained_optimum(algorithm):
    problem = consensus_problem(agents=6, bound=0.3)
    reference = problem.solve_centralized()
    result = problem.solve(algorithm, pc.Topology.random(edges=8, seed=2), rounds=1000 if "DGD" in repr(algorithm)
                           else 300, seed=1)
    assert _gap(result, reference) <= 1e-3
    assert np.max(np.abs(np.stack(result.z))) <= 0.3 + 1e-9


def test_the_printed_dual_sign_diverges_and_the_corrected_one_converges(graph_problem):
    problem, topology, reference = graph_problem
    try:
        printed = problem.solve(RandomizedADMM(dual_sign="printed"), topology, rounds=200, seed=1)
        final = printed.history["objective"].iloc[-1]
    except RunFailed:  # the iterates overflowed: divergence too
        final = math.inf
    corrected = problem.solve(RandomizedADMM(), topology, rounds=200, seed=1)
    assert final > 1e6 * max(1.0, abs(reference.value))
    assert _gap(corrected, reference) <= 1e-6


def test_the_papers_range_mixing_of_algorithm_2_star_settles_at_a_biased_point(graph_problem):
    # Documented in docs/ldp.md: the mid-range of the neighbourhood is not average preserving.
    problem, topology, reference = graph_problem
    paper = problem.solve(RandomizedDGD(interval="range"), topology, rounds=1000, seed=1)
    assert _gap(paper, reference) > 1e-2


# ---- priority 2: the accountants -------------------------------------------------------------------------
def _direct_ex_post(y: float, lo: float, hi: float, beta: float, shift: float) -> float:
    """Eq. (10) by quadrature of the Laplace likelihood of y over the interval and its two shifts."""
    def likelihood(a: float, b: float) -> float:
        points = [y] if a < y < b else None
        return integrate.quad(lambda m: 0.5 * beta * math.exp(-beta * abs(y - m)) / (b - a), a, b, points=points,
                              epsabs=1e-300, epsrel=1e-13, limit=200)[0]
    base = likelihood(lo, hi)
    return max(abs(math.log(base) - math.log(likelihood(lo + t, hi + t))) for t in (-shift, shift))


def test_ex_post_epsilon_matches_direct_integration_and_never_exceeds_the_worst_case():
    rng = np.random.default_rng(7)
    for _ in range(200):
        beta, shift = rng.uniform(0.5, 20.0), rng.uniform(1e-4, 0.05)
        lo = rng.normal()
        hi = lo + rng.choice([rng.uniform(1e-3, 0.05), rng.uniform(0.05, 2.0)])
        # the released value inside the interval half the time (the amplified case), else near or outside it
        y = rng.uniform(lo, hi) if rng.random() < 0.5 else rng.normal(lo, 1.0)
        closed = float(ex_post_epsilon(y, lo, hi, beta, shift))
        direct = _direct_ex_post(y, lo, hi, beta, shift)
        assert abs(closed - direct) <= 1e-9
        # Theorem 2.2's bound, on the independent quadrature (the closed form is also capped at it for rounding)
        assert direct <= worst_case_epsilon(1.0, beta, shift) * (1 + 1e-9)
        assert closed <= worst_case_epsilon(1.0, beta, shift)
    # inside a long interval the loss is strictly below the worst case; a fixed mean gets exactly the worst case
    assert ex_post_epsilon(0.5, 0.0, 1.0, 5.0, 0.001) < 0.5 * 5.0 * 0.001
    assert ex_post_epsilon(0.3, 0.2, 0.2, 5.0, 0.001) == 5.0 * 0.001


def test_ex_post_shift_maximum_is_at_the_ends_of_the_shift_range():
    # Appendix D: max over |t| <= s is attained at t = +-s; check on a grid of t.
    rng = np.random.default_rng(3)
    for _ in range(20):
        beta, shift, lo = rng.uniform(1, 10), rng.uniform(1e-3, 0.1), rng.normal()
        hi, y = lo + rng.uniform(0.01, 1.0), rng.normal(lo, 0.5)
        grid = max(float(ex_post_epsilon(y, lo, hi, beta, abs(t))) for t in np.linspace(0, shift, 21))
        assert grid <= float(ex_post_epsilon(y, lo, hi, beta, shift)) + 1e-15


def _exact_gamma(omega: float, beta: float, shift: float) -> float:
    """E[eps(y)] / (beta s) for y = m + Lap(0, beta), m ~ U(0, omega): quadrature of Eq. (10) against y's law."""
    def density(y: float) -> float:
        inside = [min(max(y, 0.0), omega)]
        return 0.5 * beta / omega * integrate.quad(lambda m: math.exp(-beta * abs(y - m)), 0.0, omega,
                                                   points=inside)[0]

    def integrand(y: float) -> float:
        return density(y) * float(ex_post_epsilon(y, 0.0, omega, beta, shift))

    total = integrate.quad(integrand, -40 / beta, omega + 40 / beta, points=[0.0, omega], limit=400)[0]
    return total / (beta * shift)


def test_expected_amplification_of_eq_11_is_close_to_the_exact_expectation_but_not_a_bound():
    shift = 0.001  # alpha B_inf of Fig. 1
    for omega, beta in ((0.1, 10.0), (0.5, 5.0), (1.0, 2.0)):
        exact = _exact_gamma(omega, beta, shift)
        approximate = expected_amplification(omega, beta, shift)
        assert abs(approximate - exact) <= 0.005 * exact
        assert approximate < 1.0
    # the digest's counter-example: (11) is below the exact expectation at omega = 0.1, beta = 10
    assert expected_amplification(0.1, 10.0, shift) < _exact_gamma(0.1, 10.0, shift) - 0.002


def test_composition_formulas():
    eps = np.full((100, 14), 0.01)
    assert basic_composition(eps) == pytest.approx(14.0)
    # footnote 1 with equal epsilons: K eps (e^eps - 1)/(e^eps + 1) + eps sqrt(2 K log(1/delta))
    k = 1400
    expected = k * 0.01 * (math.exp(0.01) - 1) / (math.exp(0.01) + 1) + 0.01 * math.sqrt(2 * k * math.log(1e5))
    assert advanced_composition(eps, 1e-5) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(PrivacyError, match="delta"):
        advanced_composition(eps, 1.5)


def test_private_run_accounts_the_worst_case_and_the_ex_post_side_by_side(graph_problem):
    problem, topology, _ = graph_problem
    rounds, d, D, b_inf = 40, problem.dim, 10.0, 0.01
    result = problem.solve(RandomizedADMM(D=D, noise_rate=Geometric(1.02, 1.02), b_inf=b_inf), topology,
                           rounds=rounds, seed=4)
    worst = sum(d * 1.02 ** k * b_inf / D for k in range(1, rounds + 1))  # sum_k d alpha beta_k B_inf
    table = result.privacy
    assert np.allclose(table["epsilon_worst_case"], worst, rtol=1e-12)
    assert np.allclose(table["epsilon_basic"], worst, rtol=1e-12)  # the ledger's basic composition
    assert (table["epsilon_ex_post"] < table["epsilon_worst_case"]).all()
    assert ((table["ex_post_ratio"] > 0.3) & (table["ex_post_ratio"] < 1.0)).all()
    assert set(table["agent"]) == set(problem.names) and (table["steps"] == rounds).all()
    per_round = result.info["ex_post"][0]
    assert per_round["ex_post"].shape == (rounds,) and np.all(per_round["ex_post"] <= per_round["worst"] + 1e-15)
    # the fixed-penalty baseline has a fixed mean: its ex-post loss is the worst case
    fixed = problem.solve(RandomizedADMM(D=D, noise_rate=Geometric(1.02, 1.02), b_inf=b_inf, aggregator="fixed"),
                          topology, rounds=rounds, seed=4)
    assert np.allclose(fixed.privacy["ex_post_ratio"], 1.0, rtol=1e-12)
    # The ex-post account comes from each agent's private interval: a release-only run leaves it inside the agents.
    released = problem.solve(RandomizedADMM(D=D, noise_rate=Geometric(1.02, 1.02), b_inf=b_inf), topology,
                             rounds=rounds, seed=4, diagnostics=False)
    assert "epsilon_ex_post" not in released.privacy and "ex_post" not in released.info
    assert np.allclose(released.privacy["epsilon_basic"], worst, rtol=1e-12)


def test_the_ex_post_account_is_eq_10_on_the_interval_replayed_from_the_transcript(graph_problem):
    # Agent 0's round-2 release of Algorithm 1, recomputed outside the agent: the dual from the public x^1, the
    # interval [x_0^1 + c, mean_{N_0} x^1 + c] with c = (lambda - grad f_0(x_0^1)) / D, and y = x_0^2.
    from privcvx.gradients import GradientEvaluator

    problem, topology, _ = graph_problem
    D, zeta, b_inf, rate = 10.0, 0.5, 0.01, Geometric(1.02, 1.02)
    result = problem.solve(RandomizedADMM(D=D, zeta=zeta, noise_rate=rate, b_inf=b_inf), topology, rounds=3, seed=6)
    name = problem.names[0]
    x1 = {m.sender: m["x"] for m in result.transcript.round(2)}
    y = next(m["x"] for m in result.transcript.round(3) if m.sender == name)
    neighbours = topology.bind(problem.names).neighbours(name, 2)
    total = sum(x1[j] for j in neighbours)
    lam = zeta * (total - len(neighbours) * x1[name])
    c = (lam - GradientEvaluator(problem.agents[0], problem.layouts[0]).gradient(x1[name])) / D
    expected = ex_post_epsilon(y, x1[name] + c, total / len(neighbours) + c, rate(2), b_inf / D)
    assert result.info["ex_post"][0]["ex_post"][1] == pytest.approx(expected.sum(), rel=1e-12)
    assert result.info["ex_post"][0]["worst"][1] == pytest.approx(problem.dim * rate(2) * b_inf / D, rel=1e-12)


def test_randomized_dgd_reports_both_accounts(graph_problem):
    problem, topology, _ = graph_problem
    result = problem.solve(RandomizedDGD(noise_rate=Geometric(1.02, 1.02), b_inf=0.01, step=Geometric(0.93, 0.93)),
                           topology, rounds=30, seed=2)
    worst = sum(problem.dim * 0.93 ** k * 1.02 ** k * 0.01 for k in range(1, 31))  # alpha_k = eta_k
    assert np.allclose(result.privacy["epsilon_worst_case"], worst, rtol=1e-12)
    assert (result.privacy["ex_post_ratio"] < 1.0).all()


def test_the_secure_path_accounts_the_grid_release_in_both_columns():
    problem = consensus_problem(agents=4, bound=None)
    result = problem.solve(RandomizedADMM(D=10.0, noise_rate=5.0, b_inf=0.01), pc.Topology.complete(), rounds=10,
                           seed="secure")
    table = result.privacy
    assert result.info["noise"] == pc.privacy.GRID_PATH
    assert np.allclose(table["epsilon_worst_case"], table["epsilon_basic"], rtol=1e-12)
    worst = 10 * 3 * 5.0 * 0.01 / 10.0  # rounds d beta B_inf / D: the grid's noise is calibrated to stay below it
    assert ((table["epsilon_basic"] <= worst) & (table["epsilon_basic"] > 0.99 * worst)).all()
    assert np.allclose(table["ex_post_ratio"], 1.0)


def test_bad_settings_raise_clear_errors():
    with pytest.raises(ParameterError, match="dual_sign"):
        RandomizedADMM(dual_sign="minus")
    with pytest.raises(PrivacyError, match="update"):
        RandomizedADMM(update="exact", noise_rate=1.0)
    with pytest.raises(ParameterError, match="variant"):
        RandomizedDGD(variant="3")
    problem = consensus_problem(agents=3, bound=None)
    for agent in problem.agents:
        agent.sensitivity = None
    with pytest.raises(PrivacyError, match="agent-0.*sensitivity|sensitivity.*agent-0"):
        problem.solve(RandomizedADMM(noise_rate=1.0), rounds=2, seed=1)


# ---- secret sharing --------------------------------------------------------------------------------------
def test_secret_sharing_gives_bitwise_the_plain_iterates_with_an_exact_encoding():
    problem = consensus_problem(agents=4, bound=None)
    plain = problem.solve(RandomizedADMM(), pc.Topology.complete(), rounds=40, seed=2)
    exact = dict(exchange="secret_sharing", scale_bits=1074, modulus=2 ** 1279 - 1)  # every float is exact
    shared = problem.solve(RandomizedADMM(**exact), pc.Topology.complete(), rounds=40, seed=2)
    assert np.array_equal(np.stack(plain.z), np.stack(shared.z))
    # result.w under secret sharing is the last reconstructed sum / N: round 40's, of the iterates x^39
    before_last = np.mean([m["x"] for m in plain.transcript.round(40)], axis=0)
    assert np.allclose(shared.w, before_last, rtol=0, atol=1e-15)
    frame = shared.transcript.to_frame()
    keys = frame[frame["payload"] == "public_key"]
    shares = frame[frame["payload"] == "sealed_share"]
    partials = frame[frame["payload"] == "partial"]
    assert len(keys) == 4 and (keys["round"] == 0).all() and (keys["receiver"] == "*").all()
    assert len(shares) == 40 * 4 * 3 and (shares["phase"] == 1).all() and (shares["receiver"] != "*").all()
    assert len(partials) == 40 * 4 and (partials["phase"] == 2).all() and (partials["receiver"] == "*").all()
    assert set(frame["payload"]) == {"public_key", "sealed_share", "partial"}  # no iterate, no share in the clear
    released = problem.solve(RandomizedADMM(exchange="secret_sharing"), pc.Topology.complete(), rounds=3, seed=2,
                             diagnostics=False)
    assert all(z.size == 0 for z in released.z)  # so a release-only run returns no individual iterate


def test_secret_sharing_reconstructs_the_sum_to_the_encoding_resolution():
    rng = np.random.default_rng(0)
    sharing = FixedPointSharing(5, bound=10.0, scale_bits=30)
    source = SeededNoise(1)
    values = rng.uniform(-10, 10, (5, 6))
    held = [sharing.split(sharing.encode(v), source) for v in values]  # held[i][j]: agent i's share for j
    partials = [sharing.add([held[i][j] for i in range(5)]) for j in range(5)]
    total = sharing.decode(sharing.add(partials))
    assert np.max(np.abs(total - values.sum(axis=0))) <= 5 * 2.0 ** -31 + 1e-12
    assert not sharing.exact(values) and sharing.exact(np.array([0.5, -3.25, 2.0 ** -30]))
    assert FixedPointSharing(5, bound=10.0, scale_bits=1074, modulus=2 ** 1279 - 1).exact(values)


def test_any_n_minus_2_colluders_see_shares_independent_of_the_honest_value_and_n_minus_1_recover_it():
    sharing = FixedPointSharing(4, bound=1.0, scale_bits=2, modulus=37)  # small p: the joint law is testable
    source = SeededNoise(11)
    samples = 20000
    views = {}
    for value in (-1.0, 0.75):
        encoded = sharing.encode(np.array([value]))
        # the honest agent keeps share 0; two colluders (N - 2) receive shares 1 and 2
        views[value] = [tuple(s[0] for s in sharing.split(encoded, source)[1:3]) for _ in range(samples)]
    counts = {value: Counter(view) for value, view in views.items()}
    table = np.array([[counts[v][(a, b)] for a in range(37) for b in range(37)] for v in views])
    # the two colluders' joint view is the same law for both values (chi-square homogeneity) and uniform
    assert stats.chi2_contingency(table)[1] > 1e-3
    assert stats.chisquare(table[0])[1] > 1e-3
    # N - 1 colluders also see the honest agent's broadcast partial sum, and recover its value exactly
    encoded = sharing.encode(np.array([0.75]))
    shares = sharing.split(encoded, source)
    others = [sharing.split(sharing.encode(np.array([0.0])), source) for _ in range(3)]
    partial = sharing.add([shares[0], *[o[0] for o in others]])  # the honest agent's broadcast
    kept = sharing.add([partial, *[[(-o[0][0]) % 37] for o in others]])
    assert sharing.decode(sharing.add([kept, *shares[1:]]))[0] == 0.75


def test_secret_sharing_refuses_fewer_than_three_agents_a_small_modulus_and_values_above_the_bound():
    with pytest.raises(UnsupportedError, match="N >= 3"):
        consensus_problem(agents=2, bound=None).solve(RandomizedADMM(exchange="secret_sharing"), rounds=2)
    with pytest.raises(PrivacyError, match="N >= 3"):
        FixedPointSharing(2, bound=1.0)
    with pytest.raises(ParameterError, match="too small"):
        FixedPointSharing(4, bound=1.0, scale_bits=40, modulus=2 ** 40)
    with pytest.raises(PrivacyError, match="bound"):
        FixedPointSharing(4, bound=1.0).encode(np.array([2.0]), agent="agent-3")
    with pytest.raises(UnsupportedError, match="complete"):
        consensus_problem(agents=5, bound=None).solve(RandomizedADMM(exchange="secret_sharing"), pc.Topology.ring(),
                                                      rounds=2)


# ---- data and the Figure 2 example -----------------------------------------------------------------------
def _write_adult(path: Path, rows: int = 60) -> None:
    rng = np.random.default_rng(5)
    lines = []
    for r in range(rows):
        record = [str(rng.integers(17, 90)), rng.choice(["Private", "State-gov", "?"] if r % 7 == 0 else
                                                         ["Private", "State-gov"]),
                  str(rng.integers(10_000, 900_000)), rng.choice(["Bachelors", "HS-grad"]), str(rng.integers(1, 17)),
                  "Never-married", rng.choice(["Sales", "Tech-support"]), "Husband", "White",
                  rng.choice(["Male", "Female"]), str(rng.integers(0, 5000)), "0", str(rng.integers(1, 99)),
                  "United-States", rng.choice([">50K", "<=50K."])]
        lines.append(", ".join(record))
    path.write_text("\n".join(lines) + "\n")


def test_adult_reader_preprocesses_as_the_paper_and_fails_clearly_when_absent(tmp_path):
    file = tmp_path / "adult.data"
    _write_adult(file)
    X, y = load_adult(file)
    dropped = sum(1 for line in file.read_text().splitlines() if "?" in line)
    assert X.shape == (60 - dropped, len(ADULT_COLUMNS) - 1) == (60 - dropped, 14)
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0) and X.min() >= 0.0
    assert set(np.unique(y)) <= {-1, 1} and (y == 1).any() and (y == -1).any()
    # the same preprocessing with scikit-learn: ordinal codes of the sorted categories, min-max columns, unit rows
    raw = pd.read_csv(file, header=None, skipinitialspace=True, na_values=["?"], dtype=str).dropna()
    categorical = [1, 3, 5, 6, 7, 8, 9, 13]
    features = raw.iloc[:, :14].copy()
    features[categorical] = OrdinalEncoder().fit_transform(features[categorical])
    expected = normalize(MinMaxScaler().fit_transform(features.to_numpy(float)))
    assert np.allclose(X, expected, rtol=0, atol=1e-12)
    assert np.array_equal(y, np.where(raw[14].str.rstrip(".") == ">50K", 1, -1))
    with pytest.raises(DatasetNotFoundError, match="Adult"):
        load_adult(tmp_path / "missing.csv")


def test_the_figure_2_example_runs_quick_and_shows_the_amplification(tmp_path):
    completed = subprocess.run([sys.executable, str(ROOT / "examples" / "ldp_figure2.py"), "--quick", "--out",
                                str(tmp_path)], check=True, capture_output=True, text=True, timeout=300)
    assert "SYNTHETIC" in completed.stdout
    summary = pd.read_csv(tmp_path / "summary.csv", index_col=0)
    private = summary.loc["Algorithm 1 (random penalties), private"]
    worst = 14 * 0.002 * sum(1.02 ** k for k in range(1, 101))  # d B_inf sum_k beta_k / D, B_inf = 2/b
    assert private["epsilon_worst_case"] == pytest.approx(worst)
    assert 0.3 < private["ex_post_ratio"] < 0.95
    assert summary.loc["fixed penalties (Gamma = D/2), private", "ex_post_ratio"] == pytest.approx(1.0)
    assert summary.loc["Algorithm 1 (random penalties), no noise", "final_log_accuracy"] < -5
    assert (tmp_path / "figure2.png").exists()


# ---- B_inf from the declared label set and feature range (issue 26, point 5) --------------------------------
def _worst_neighbour(samples: int) -> tuple[float, np.ndarray, np.ndarray, float, np.ndarray, float]:
    """The largest change of the first gradient coordinate of (1/b) log(1 + exp(-L x^T z)) found when one sample
    (z, L) is replaced by (z', L'), over x in [-60, 60]^2, z, z' in [0, 1]^2 with ||z|| <= 1 and L, L' in {-1, 1}:
    (change, x, z, L, z', L'), by differential evolution on each label pair (an independent search, no bound)."""
    from scipy.optimize import differential_evolution
    from scipy.special import expit

    def sample(r: float, angle: float) -> np.ndarray:  # the quarter disc: [0, 1]^2 with norm <= 1
        return r * np.array([np.cos(angle), np.sin(angle)])

    best = (-1.0,)
    for label, other in ((1.0, -1.0), (-1.0, 1.0), (1.0, 1.0), (-1.0, -1.0)):
        def change(p, label=label, other=other):
            x, z, w = p[:2], sample(*p[2:4]), sample(*p[4:6])
            g, h = -label * expit(-label * (x @ z)) * z[0], -other * expit(-other * (x @ w)) * w[0]
            return -abs(g - h) / samples
        bounds = [(-60, 60)] * 2 + [(0, 1), (0, np.pi / 2)] * 2
        found = differential_evolution(change, bounds, seed=0, tol=1e-12, maxiter=400, polish=True)
        if -found.fun > best[0]:
            p = found.x
            best = (-found.fun, p[:2], sample(*p[2:4]), label, sample(*p[4:6]), other)
    return best


def test_ldp_logistic_b_inf_bounds_the_searched_worst_neighbour_and_is_tight():
    from privcvx.gradients import GradientEvaluator
    from problems.ldp_logistic import coordinate_sensitivity, ldp_logistic

    samples = 4
    change, x, z, label, z_other, other = _worst_neighbour(samples)
    filler = np.array([[0.6, 0.0], [0.0, 0.3], [0.5, 0.5]])
    X, X_other = np.vstack([z, filler]), np.vstack([z_other, filler])
    y, y_other = np.array([label, 1.0, -1.0, 1.0]), np.array([other, 1.0, -1.0, 1.0])
    problems = [ldp_logistic(A, b, agents=1, samples=samples) for A, b in ((X, y), (X_other, y_other))]
    gradients = [GradientEvaluator(p.agents[0], p.layouts[0]).gradient(x) for p in problems]
    assert abs(gradients[0][0] - gradients[1][0]) == pytest.approx(change, rel=1e-6)  # the builder's own loss
    b_inf = problems[0].agents[0].declared.coordinate_sensitivity
    assert change <= b_inf  # a valid bound ...
    assert change >= 0.97 * b_inf  # ... and a tight one: the search comes within 3% of it
    assert b_inf == coordinate_sensitivity(samples) == pytest.approx(2 / samples)
    assert coordinate_sensitivity(samples, labels=(0.0, 1.0)) == pytest.approx(1 / samples)  # the paper's labels


def test_ldp_logistic_refuses_data_outside_the_declared_domain():
    from problems.ldp_logistic import ldp_logistic

    X, y = np.full((4, 2), 0.5), np.array([1.0, -1.0, 1.0, -1.0])
    with pytest.raises(ParameterError, match="declared domain"):
        ldp_logistic(-X, y, agents=1, samples=4)
    with pytest.raises(ParameterError, match="declared labels"):
        ldp_logistic(X, y + 1, agents=1, samples=4)
