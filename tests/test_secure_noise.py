"""The floating-point-safe noise path (seed="secure"): OpenDP's integer noise on a public grid.

Goodness of fit of the grid noise, the grid's inflation of the sensitivity, Mironov's reachability
attack (fails on the grid, succeeds on the seeded float path), the accounting of grid releases, and
secure runs end to end. docs/privacy.md, "Floating-point-safe noise", describes what is tested.
"""

from __future__ import annotations

import math
import warnings

import cvxpy as cp
import dp_accounting
import numpy as np
import opendp.prelude as dp
import pytest
from dp_accounting import pld
from dp_accounting.dp_event import DiscreteLaplaceDpEvent
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import stats
from scipy.special import logsumexp

import privcvx as pc
from privcvx.algorithms import AgentContext, DPDistributedGradient, LinearizedADMM
from privcvx.algorithms.privacy_audit import float_reachable
from privcvx.errors import PrivacyError
from privcvx.privacy.accounting import PrivacyLedger, epsilon_report, tightest_epsilon
from privcvx.privacy.grid import calibrate, default_grid_step, from_grid, integer_noise, to_grid
from privcvx.privacy.mechanisms import (
    NEIGHBOURING_RELATION,
    PLD_DISCRETIZATION,
    DiscreteGaussian,
    DiscreteLaplace,
    GridRdpAccountant,
    discrete_laplace_rdp,
    mechanism_from_dict,
)
from privcvx.privacy.noise import GRID_PATH, SEEDED_PATH, SecureNoise, SeededNoise, agent_noise_sources
from privcvx.privacy.perturbation import derived_output_sensitivity

ORDERS = np.array(rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=np.float64)


# ---- distributions ------------------------------------------------------------------------------------------

def _discrete_laplace_cdf(k: np.ndarray, scale: float) -> np.ndarray:
    """P[K <= k] for the pmf tanh(a/2) e^{-a|k|}, a = 1/scale: e^{a(k+1)}... summed as geometric series."""
    a = 1.0 / scale
    k = np.asarray(k, dtype=np.float64)
    return np.where(k < 0, np.exp(a * k) / (1 + math.exp(-a)), 1 - np.exp(-a * (k + 1)) / (1 + math.exp(-a)))


def _discrete_gaussian_pmf(sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Support [-12 sigma, 12 sigma] (the mass beyond is below 1e-31) and the pmf proportional to
    exp(-k^2 / (2 sigma^2)) on it."""
    support = np.arange(-math.ceil(12 * sigma), math.ceil(12 * sigma) + 1)
    log_mass = -support.astype(np.float64) ** 2 / (2 * sigma * sigma)
    return support, np.exp(log_mass - logsumexp(log_mass))


def _chi_square_pvalue(draws: np.ndarray, edges: np.ndarray, masses: np.ndarray) -> float:
    """Chi-square test of integer draws binned at ``edges`` (bin i: edges[i] <= k < edges[i+1]) against ``masses``."""
    counts = np.histogram(draws, bins=edges)[0]
    expected = masses / masses.sum() * counts.sum()
    assert expected.min() >= 5 and counts.sum() == draws.size  # every draw fell in a bin
    return float(stats.chisquare(counts, expected).pvalue)


def _laplace_bins(scale: float, bins: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """Integer bin edges at the quantiles of the continuous Laplace, open-ended, and their exact masses."""
    inner = np.unique(np.round(stats.laplace(scale=scale).ppf(np.linspace(0, 1, bins + 1)[1:-1])))
    edges = np.concatenate([[-np.inf], inner, [np.inf]])
    cdf = np.concatenate([[0.0], _discrete_laplace_cdf(inner - 1, scale), [1.0]])  # P[K < edge]
    return edges, np.diff(cdf)


def _gaussian_masses(sigma: float, edges: np.ndarray) -> np.ndarray:
    """Exact discrete Gaussian masses of the integer bins edges[i] <= k < edges[i+1]."""
    support, pmf = _discrete_gaussian_pmf(sigma)
    below = np.concatenate([[0.0], np.cumsum(pmf)])                  # below[j] = P[K < support[j]]
    positions = np.searchsorted(support, np.clip(edges, support[0], support[-1] + 1))
    return np.diff(below[positions])


def _gaussian_bins(sigma: float, bins: int = 24) -> tuple[np.ndarray, np.ndarray]:
    inner = np.unique(np.round(stats.norm(scale=sigma).ppf(np.linspace(0, 1, bins + 1)[1:-1])))
    edges = np.concatenate([[-np.inf], inner, [np.inf]])
    return edges, _gaussian_masses(sigma, edges)


def test_integer_noise_fits_the_discrete_laplace_and_gaussian_pmfs_on_integer_counts():
    draws = 40_000
    laplace, gaussian = integer_noise("laplace", 2.5, draws), integer_noise("gaussian", 2.5, draws)
    assert laplace.dtype == np.int64 and gaussian.dtype == np.int64
    edges = np.concatenate([[-np.inf], np.arange(-12, 13), [np.inf]])  # one bin per integer in [-12, 12), tails
    for scale, p_min in ((2.5, 1e-4), (2.5 * 1.15, None)):  # the true scale fits; 15% off is rejected (power)
        masses = np.diff(np.concatenate([[0.0], _discrete_laplace_cdf(edges[1:-1] - 1, scale), [1.0]]))
        pvalue = _chi_square_pvalue(laplace, edges, masses)
        assert pvalue > p_min if p_min else pvalue < 1e-6
    edges = np.concatenate([[-np.inf], np.arange(-7, 8), [np.inf]])
    for sigma, p_min in ((2.5, 1e-4), (2.5 * 1.15, None)):
        pvalue = _chi_square_pvalue(gaussian, edges, _gaussian_masses(sigma, edges))
        assert pvalue > p_min if p_min else pvalue < 1e-6


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_secure_releases_have_the_calibrated_grid_noise(kind):
    """One release of 20 000 zeros: gamma K, with K of the calibrated integer scale, a pmf fit and the std."""
    size, sensitivity, multiplier = 20_000, 0.7, 3.0
    scale = multiplier * sensitivity                                 # the float path's b or sigma
    perturbed = SecureNoise().perturb(np.zeros(size), kind, scale, sensitivity)
    grid = perturbed.grid
    step = grid.step
    assert step == default_grid_step(sensitivity, size, kind) and math.log2(step).is_integer()
    factor = size if kind == "laplace" else math.sqrt(size)
    assert 2.0 ** -11 < factor * step / sensitivity <= 2.0 ** -10    # the inflation: at most 2^-10, >= half of it
    # The integer scale is the noise multiplier times the inflated sensitivity (Delta / gamma + c_n).
    assert grid.scale == pytest.approx(multiplier * (sensitivity / step + factor), rel=1e-12)
    assert scale <= step * grid.scale <= scale * (1 + 2.0 ** -10)
    integers = perturbed.value / step
    assert np.array_equal(integers, np.round(integers))             # on the grid, exactly
    assert perturbed.magnitude == pytest.approx(step * np.abs(integers).sum(), rel=1e-12)
    edges, masses = (_laplace_bins if kind == "laplace" else _gaussian_bins)(grid.scale)
    assert _chi_square_pvalue(integers, edges, masses) > 1e-4
    a = 1 / grid.scale
    variance = 2 * math.exp(-a) / (1 - math.exp(-a)) ** 2 if kind == "laplace" else grid.scale ** 2
    assert perturbed.value.std() == pytest.approx(step * math.sqrt(variance), rel=0.03)


# ---- the grid: rounding and the inflation of the sensitivity ------------------------------------------------

def test_rounding_is_to_the_nearest_grid_point_half_to_even_and_exact():
    step = 2.0 ** -20
    values = np.array([0.5, 1.5, 2.5, -0.5, 0.49999999, 3.75, -7.25]) * step + 12345 * step
    assert to_grid(values, step).tolist() == [12346, 12346, 12348, 12344, 12345, 12349, 12338]  # ties to even
    assert np.array_equal(from_grid(to_grid(values, step), step) / step, to_grid(values, step).astype(float))
    with pytest.raises(PrivacyError):
        to_grid(np.array([np.inf]), step)
    with pytest.raises(PrivacyError):
        to_grid(np.array([2.0 ** 70]), step)


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_a_worst_case_pair_reaches_the_grid_sensitivity_and_the_calibration_covers_it(kind):
    """Two inputs whose rounding adds the whole worst case: every coordinate moves one grid point further apart."""
    size, epsilon, step, eta = 6, 0.5, 2.0 ** -12, 2.0 ** -20
    shifts = np.array([1100, 1200, 1000, 1150, 1050, 1175])        # Delta / gamma lands in the default step's range
    a = (100 + 0.5 + eta + np.arange(size)) * step                  # a / gamma = j + 1/2 + eta rounds up, and
    b = a - (shifts + 2 * eta) * step                                # b / gamma = j - shift + 1/2 - eta rounds down
    gap = to_grid(a, step) - to_grid(b, step)
    assert np.array_equal(gap, shifts + 1)                          # each coordinate: |a - b| / gamma + 1 - 2 eta
    sensitivity = float(np.abs(a - b).sum() if kind == "laplace" else np.linalg.norm(a - b))
    multiplier = 1 / epsilon
    grid = calibrate(kind, multiplier * sensitivity, sensitivity, size)
    assert grid.step == step
    uninflated = multiplier * sensitivity / step                     # the noise scale without the grid's inflation
    if kind == "laplace":
        assert grid.sensitivity == np.abs(gap).sum()               # floor(Delta_1 / gamma) + n is attained
        beyond = to_grid(a, step) + 5                                # an output beyond both points in every coordinate
        log_ratio = np.sum(np.abs(beyond - to_grid(b, step)) - np.abs(beyond - to_grid(a, step))) / grid.scale
        assert log_ratio == pytest.approx(np.abs(gap).sum() / grid.scale, rel=1e-12)
        assert log_ratio <= grid.mechanism().epsilon <= epsilon     # the pure-DP bound covers the worst case
        assert np.abs(gap).sum() / uninflated > epsilon              # noise calibrated to Delta_1 alone would not
    else:
        rho = np.sum(gap.astype(float) ** 2) / (2 * grid.scale ** 2)  # this pair's zCDP (Renyi divergence / alpha)
        assert np.linalg.norm(gap) <= grid.sensitivity and rho <= 1 / (2 * multiplier ** 2)
        assert rho == pytest.approx(grid.mechanism().dp_event().rho * np.sum(gap.astype(float) ** 2)
                                    / grid.sensitivity ** 2, rel=1e-12)
        assert np.sum(gap.astype(float) ** 2) / (2 * uninflated ** 2) > 1 / (2 * multiplier ** 2)


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_a_sensitivity_far_below_the_noise_takes_the_grid_from_the_noise(kind):
    """Delta = 1e-16 under noise of scale 1e-4 (DPDG's round 52 at q = 0.5): a grid from Delta would have step
    ~1e-20, so |v / step| >= 2^62 for v = 1; the grid follows 2^-20 of the noise instead, the integer noise is not
    inflated, and the charge, recomputed from the rounding's worst case, stays within 2^-30 of Delta / scale."""
    size, scale, sensitivity = 3, 1e-4, 1e-16
    with pytest.raises(PrivacyError):
        to_grid(np.ones(size), default_grid_step(sensitivity, size, kind))
    grid = calibrate(kind, scale, sensitivity, size)
    assert grid.step == default_grid_step(2.0 ** -20 * scale, size, kind)
    assert grid.scale == scale / grid.step                           # the float path's noise, on the grid
    to_grid(np.ones(size), grid.step)                                # representable
    if kind == "laplace":
        worst = math.floor(sensitivity / grid.step) + size             # every coordinate's rounding flips
        assert grid.mechanism().epsilon == pytest.approx(worst / grid.scale, rel=1e-12)
        assert sensitivity / scale <= grid.mechanism().epsilon <= sensitivity / scale + 2.0 ** -30
    else:
        worst = sensitivity / grid.step + math.sqrt(size)
        assert grid.mechanism().dp_event().rho == pytest.approx(worst ** 2 / (2 * grid.scale ** 2), rel=1e-12)
        assert grid.mechanism().dp_event().rho <= (sensitivity + 2.0 ** -30 * scale) ** 2 / (2 * scale ** 2)


def test_dpdg_at_q_half_runs_on_the_secure_path():
    """DPDG(q=0.5) on the secure path failed at round 51 ("too large for the grid step"): Delta(t) = S c q^(t-2)
    decays faster than the noise. It now runs 100 rounds, and its epsilon stays within 100 * 2^-30 of the
    seeded float path's (the Laplace ledger of Theorem 5)."""
    from privcvx.algorithms.conformance import consensus_problem

    algorithm = DPDistributedGradient(epsilon=1.0, q=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.ConvergenceWarning)
        warnings.simplefilter("ignore", pc.errors.ReproducibleNoiseWarning)
        secure = consensus_problem().solve(algorithm, rounds=100)
        seeded = consensus_problem().solve(algorithm, rounds=100, seed=1)
    assert secure.info["noise"] == GRID_PATH and len(secure.history) == 100
    assert secure.privacy["epsilon_basic"].max() <= seeded.privacy["epsilon_basic"].max() + 100 * 2.0 ** -30


# ---- Mironov's reachability attack on one OutPert Laplace release (epsilon = 0.5) ---------------------------

SENSITIVITY = pc.Sensitivity(l1=0.2, l2=0.2)    # datasets 0 and 0.2: the gradients x - d differ by exactly 0.2
OUTPERT = pc.OutputPerturbation(pc.Laplace(0.5))


def _update_role(data: float, privacy: pc.OutputPerturbation | None, seed: int | str):
    """The local update of Algorithm 1 on the one-sample dataset ``data`` (tests/audit_tools.py's setup)."""
    x = cp.Variable(1)
    agent = pc.Agent(0.5 * cp.sum_squares(x - data), [x <= 50, x >= -50], shared=x, name="audited",
                     sensitivity=SENSITIVITY)
    problem = pc.DistributedProblem([agent])
    return LinearizedADMM(privacy=privacy).agent_program(agent, AgentContext.for_agent(problem, seed=seed))


def _release(role) -> float:
    return role.local_update(np.zeros(1), np.zeros(1), 1.0, 0.5)[0][0]   # z = w = lambda = 0, rho 1, eta 0.5


def _noise_free_releases() -> tuple[float, float]:
    """v and v': the projected points of datasets 0 and 0.2 (clip(d / 3)), computed by the same update."""
    return _release(_update_role(0.0, None, 0)), _release(_update_role(0.2, None, 0))


def _output_scale() -> tuple[pc.Sensitivity, float]:
    """The derived output sensitivity (Delta / (1/eta + rho) = 0.2 / 3) and the Laplace scale b it calibrates."""
    output = derived_output_sensitivity(SENSITIVITY, np.array([3.0]), True)
    return output, OUTPERT.mechanism.scale(output)


def test_reachability_attack_succeeds_on_the_seeded_float_path():
    """Most float releases of dataset 0 cannot be produced from dataset 0.2: one release tells them apart."""
    v, v_other = _noise_free_releases()
    _, scale = _output_scale()
    role = _update_role(0.0, OUTPERT, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        releases = [_release(role) for _ in range(2000)]
    assert role.context.noise.path == SEEDED_PATH
    assert all(float_reachable(r, v, scale) for r in releases)     # the check finds every true preimage
    unreachable = np.mean([not float_reachable(r, v_other, scale) for r in releases])
    assert unreachable > 0.5                                         # measured: 0.82 (2000 releases)


def test_reachability_attack_fails_on_the_grid_path():
    """Every grid release of either dataset is producible from the other, with a likelihood ratio <= e^epsilon."""
    v, v_other = _noise_free_releases()
    output, scale = _output_scale()
    epsilon = OUTPERT.mechanism.epsilon
    grid = calibrate("laplace", scale, output.l1, 1)
    roles = {0.0: _update_role(0.0, OUTPERT, "secure"), 0.2: _update_role(0.2, OUTPERT, "secure")}
    log_ratios = []
    for data, role in roles.items():
        assert role.context.noise.path == GRID_PATH
        releases = np.array([_release(role) for _ in range(1500)])
        assert role.context.ledger.entries == [(grid.mechanism(), 1500)]   # each release accounted on the grid
        integers = releases / grid.step
        assert np.array_equal(integers, np.round(integers))          # every release is a grid point
        own, other = (v, v_other) if data == 0.0 else (v_other, v)
        noise = integers - to_grid(np.array([own]), grid.step)[0]   # K: the noise that produced each release
        implied = integers - to_grid(np.array([other]), grid.step)[0]  # K': the noise the other dataset needs
        log_pmf = math.log(math.tanh(0.5 / grid.scale)) - np.abs(implied) / grid.scale
        assert np.all(np.isfinite(log_pmf))                          # K' is an integer of positive probability
        log_ratios.append((np.abs(implied) - np.abs(noise)) / grid.scale)
    log_ratios = np.concatenate(log_ratios)
    assert np.max(np.abs(log_ratios)) <= epsilon                     # the likelihood ratio stays within e^epsilon
    assert np.max(np.abs(log_ratios)) >= 0.99 * epsilon              # and reaches it: the bound is not vacuous


# ---- accounting of grid releases ----------------------------------------------------------------------------

def _brute_force_rdp(a: float, shift: int, order: float) -> float:
    k = np.arange(-int(shift + 80 / a + 10), int(2 * shift + 80 / a + 10))
    log_p = math.log(math.tanh(a / 2)) - a * np.abs(k)
    log_q = math.log(math.tanh(a / 2)) - a * np.abs(k - shift)
    return float(logsumexp(order * log_p + (1 - order) * log_q) / (order - 1))


def test_discrete_laplace_rdp_is_exact_above_the_continuous_curve_and_covers_vector_releases():
    for epsilon, shift in ((0.05, 1), (0.5, 7), (2.0, 300)):
        a = epsilon / shift
        curve = discrete_laplace_rdp(a, shift, ORDERS)
        for i in (0, 20, 90, len(ORDERS) - 1):
            assert curve[i] == pytest.approx(_brute_force_rdp(a, shift, ORDERS[i]), rel=1e-9)
        continuous = np.array([rdp_privacy_accountant._laplace_rdp(epsilon, order) for order in ORDERS])
        assert np.all(curve >= continuous * (1 - 1e-12)) and np.any(curve > continuous * (1 + 1e-6))
    # A vector release at L1 distance D is accounted as one coordinate shifted by D: the split shifts compose
    # (their Renyi divergences add) to less.
    a = 0.3
    for parts in ((1, 1), (1, 2), (2, 3, 4), (1, 1, 1, 1)):
        split = sum(discrete_laplace_rdp(a, part, ORDERS) for part in parts)
        assert np.all(split <= discrete_laplace_rdp(a, sum(parts), ORDERS) * (1 + 1e-12))


def test_grid_releases_are_accounted_with_valid_bounds_only():
    steps, delta = 50, 1e-5
    laplace, gaussian = DiscreteLaplace(4100.0, 2050), DiscreteGaussian(6000.0, 2000.5)
    for mechanism in (laplace, gaussian):
        assert mechanism_from_dict(mechanism.to_dict()) == mechanism
    # OpenDP's own privacy maps agree with the recorded epsilon (pure) and rho (zCDP).
    domain = dp.vector_domain(dp.atom_domain(T="i64"), size=3)
    dp.enable_features("contrib")
    assert dp.m.make_laplace(domain, dp.l1_distance(T="i64"), scale=4100.0).map(2050) == pytest.approx(
        laplace.epsilon, rel=1e-12)
    assert dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=6000.0).map(2000.5) == pytest.approx(
        gaussian.dp_event().rho, rel=1e-12)

    ledger = PrivacyLedger("p")
    ledger.record(laplace, steps)
    report = epsilon_report(ledger, delta)
    assert report["epsilon_basic"] == pytest.approx(steps * 2050 / 4100.0)
    exact = pld.PLDAccountant(NEIGHBOURING_RELATION, value_discretization_interval=PLD_DISCRETIZATION).compose(
        DiscreteLaplaceDpEvent(1 / 4100.0, 2050), steps).get_epsilon(delta)
    assert report["epsilon_pld"] == pytest.approx(exact, rel=1e-12)
    assert report["epsilon_rdp"] == pytest.approx(GridRdpAccountant().compose(laplace.dp_event(), steps)
                                                   .get_epsilon(delta), rel=1e-12)

    ledger = PrivacyLedger("p")
    ledger.record(gaussian, steps)
    report = epsilon_report(ledger, delta)
    rdp = dp_accounting.rdp.RdpAccountant(neighboring_relation=NEIGHBOURING_RELATION).compose(
        dp_accounting.GaussianDpEvent(6000.0 / 2000.5), steps).get_epsilon(delta)
    assert report["epsilon_rdp"] == pytest.approx(rdp, rel=1e-12)  # zCDP: the continuous Gaussian's RDP curve
    for column in ("epsilon_basic", "epsilon_advanced", "epsilon_moments", "epsilon_pld", "epsilon_gdp"):
        assert math.isnan(report[column]), column                   # the continuous Gaussian's bounds do not apply
    assert tightest_epsilon(ledger, delta) == report["epsilon_rdp"]
    # The exact continuous-Gaussian epsilon would be smaller: it is not what a discrete Gaussian may claim.
    assert dp_accounting.get_epsilon_gaussian(6000.0 / 2000.5 / math.sqrt(steps), delta) < report["epsilon_rdp"]


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_a_budget_is_met_by_the_grid_releases_it_calibrates(mechanism):
    steps, target, delta, size, sensitivity = 20, 2.0, 1e-5, 8, 0.05
    budget = pc.Budget(target, delta, mechanism=mechanism)
    kind = mechanism
    norm = "l1" if kind == "laplace" else "l2"
    for grid_path, source in ((False, SeededNoise(0)), (True, SecureNoise())):
        configured = budget.per_update(steps)
        spent = source.calibrated(configured)
        assert (spent is budget.per_update(steps, grid=True)) == grid_path
        declared = pc.Sensitivity(l1=sensitivity, l2=sensitivity)
        entry = source.perturb(np.zeros(size), kind, spent.scale(declared), declared.get(norm)).accounted(spent)
        ledger = PrivacyLedger("p")
        ledger.record(entry, steps)
        assert 0.98 * target <= tightest_epsilon(ledger, delta) <= target
    if mechanism == "gaussian":  # the float calibration spent on the grid would overspend (RDP is all that applies)
        ledger = PrivacyLedger("p")
        grid = calibrate("gaussian", budget.per_update(steps).scale(declared), sensitivity, size)
        ledger.record(grid.mechanism(), steps)
        assert tightest_epsilon(ledger, delta) > 1.05 * target


def test_a_laplace_budget_calibrates_with_the_rdp_accountant():
    """Budget(mechanism="laplace", accountant="rdp") raised ZeroDivisionError (a Laplace multiplier of 0)."""
    mechanism = pc.Budget(2.0, 1e-5, mechanism="laplace", accountant="rdp").per_update(20)
    spent = dp_accounting.rdp.RdpAccountant(neighboring_relation=NEIGHBOURING_RELATION).compose(
        mechanism.dp_event(), 20).get_epsilon(1e-5)
    assert 0.99 * 2.0 <= spent <= 2.0


# ---- the two paths, end to end ------------------------------------------------------------------------------

def test_seeded_path_is_the_textbook_float_release_bit_for_bit():
    value = np.linspace(-1.0, 1.0, 7)
    released = SeededNoise(5).perturb(value, "laplace", 0.3, 1.0, subtract=True)
    assert released.value.tobytes() == (value - 0.3 * SeededNoise(5).standard_laplace(7)).tobytes()
    released = SeededNoise(5).perturb(value, "gaussian", 0.3, 1.0)
    assert released.value.tobytes() == (value + 0.3 * SeededNoise(5).standard_normal(7)).tobytes()
    assert released.grid is None and released.accounted(pc.Laplace(1.0)) == pc.Laplace(1.0)
    assert [source.path for source in agent_noise_sources(1, 1) + agent_noise_sources("secure", 1)] == \
        [SEEDED_PATH, GRID_PATH]


def test_secure_runs_release_grid_points_and_account_them():
    from problems.rendezvous import rendezvous

    problem = rendezvous(np.array([[0.3, -0.2], [-0.5, 0.6], [0.1, 0.9]]))
    explicit = pc.Sensitivity(l1=0.01, l2=0.01)
    result = problem.solve(rounds=5, eta=0.5, rho=1.0, seed="secure",
                           privacy=pc.OutputPerturbation(pc.Laplace(1.0), sensitivity=explicit))
    step = default_grid_step(0.01, 2, "laplace")
    released = np.concatenate([m["z"] for m in result.transcript if m.round >= 1 and "z" in m.payload])
    assert released.size == 3 * 5 * 2 and np.array_equal(released / step, np.round(released / step))
    assert (result.privacy["epsilon_basic"] <= 5 * 1.0).all() and (result.privacy["epsilon_basic"] > 4.99).all()

    algorithm = DPDistributedGradient(epsilon=1.0, c=0.2, q=0.8)
    result = problem.solve(algorithm, pc.Topology.ring(), rounds=6, seed="secure")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seeded = problem.solve(algorithm, pc.Topology.ring(), rounds=6, seed=0)
    for message in result.transcript:
        if message.round >= 2:  # y(t) = x(t-1) + noise, sensitivity S gamma_{t-1}
            agent = problem.agents[problem.names.index(message.sender)]
            sensitivity = algorithm.release_sensitivity(agent, "box", 2) * 0.2 * 0.8 ** (message.round - 2)
            step = default_grid_step(sensitivity, 2, "laplace")
            assert np.array_equal(message["y"] / step, np.round(message["y"] / step))
    # Pure epsilon on the grid: at most the float path's, short of it only by the grid's floor.
    assert np.all(result.privacy["epsilon_basic"] <= seeded.privacy["epsilon_basic"] * (1 + 1e-12))
    assert np.all(result.privacy["epsilon_basic"] >= 0.999 * seeded.privacy["epsilon_basic"])
