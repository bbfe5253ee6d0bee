"""The smoothing lemma behind the PLD of Q-DPSGD-1's vector releases on the secure path (docs/qdpsgd.md, "Noise
paths"; `privcvx.privacy.mechanisms.smoothed_gaussian_pld`): the lemma itself by quadrature, the ledger's epsilon
against an independent dp-accounting composition, and the bound against the exact hockey-stick divergence of a
Poisson-sampled 2-D discrete Gaussian."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld
from scipy import integrate

from privcvx.privacy.accounting import PrivacyLedger, epsilon_report
from privcvx.privacy.grid import calibrate
from privcvx.privacy.mechanisms import (
    PLD_DISCRETIZATION,
    SMOOTHING_WIDTH,
    PoissonSampledDiscreteGaussian,
    smoothed_gaussian_pld,
    smoothing_slack,
    smoothing_width,
)


def _discrete_gaussian(sigma: float, centre: int, support: np.ndarray) -> np.ndarray:
    weights = np.exp(-((support - centre) ** 2) / (2.0 * sigma ** 2))
    return weights / weights.sum()


def _kernel_normalizer(width: float, x: float) -> float:
    """rho_r(Z - x) by direct summation (r = ``width``)."""
    z = np.arange(math.floor(x) - 40, math.floor(x) + 42)
    return float(np.exp(-((z - x) ** 2) / (2.0 * width ** 2)).sum())


@pytest.mark.parametrize("width", [0.3, 0.5])
def test_the_smoothing_lemma_holds_by_quadrature_and_its_poisson_summation_step_is_sharp(width):
    """1-D, sigma = 2: the law p(z) of K_r(N(c, sigma^2 - r^2)) (by quadrature) over the discrete Gaussian D(z)
    stays within e^(+-lambda_1) at every z; and the step the constant comes from is sharp: rho_r(Z) / (r sqrt(2 pi))
    is 1 + eta exactly (lambda_1 = ln((1 + eta) / (1 - eta)), so eta = tanh(lambda_1 / 2)), and rho_r(Z + 1/2)
    comes within eta^4 of 1 - eta. The lemma as a whole is loose: the ratio measured is about 10% (r = 0.3) and
    1% (r = 0.5) of e^lambda_1's log, since the Gaussian average of 1 / rho_r(Z - x) cancels most of its swing."""
    sigma, centre = 2.0, 1
    lam = smoothing_slack(width, 1)
    eta = math.tanh(lam / 2.0)
    scale = width * math.sqrt(2.0 * math.pi)
    assert _kernel_normalizer(width, 0.0) / scale == pytest.approx(1.0 + eta, rel=1e-13)
    assert 0.0 <= _kernel_normalizer(width, 0.5) / scale - (1.0 - eta) <= eta ** 4
    inner = math.sqrt(sigma ** 2 - width ** 2)
    support = np.arange(centre - 12, centre + 13)
    exact = _discrete_gaussian(sigma, centre, support)
    smoothed = []
    for z in support:
        def density(x: float, z: int = int(z)) -> float:
            return (math.exp(-((x - centre) ** 2) / (2.0 * inner ** 2)) / (inner * math.sqrt(2.0 * math.pi))
                    * math.exp(-((z - x) ** 2) / (2.0 * width ** 2)) / _kernel_normalizer(width, x))
        peak = centre + (z - centre) * inner ** 2 / sigma ** 2  # where the integrand peaks
        value, _ = integrate.quad(density, peak - 10.0 * width, peak + 10.0 * width, limit=400, epsabs=0.0,
                                  epsrel=1e-12, points=[peak])
        smoothed.append(value)
    log_ratio = np.log(np.array(smoothed) / exact)
    assert np.all(np.abs(log_ratio) <= lam)
    assert np.max(np.abs(log_ratio)) > lam / 200.0  # the quadrature sees the discreteness (1e-2 lam at r = 0.5)


@pytest.mark.parametrize(("rate", "dim", "rounds"), [(0.02, 5, 200), (0.1, 2, 50)])
def test_the_vector_pld_epsilon_is_dp_accountings_sampled_gaussian_at_the_smoothed_std_plus_the_slack(rate, dim,
                                                                                                   rounds):
    """The ledger's epsilon_pld of T vector releases equals an independent dp-accounting composition, the
    PLDAccountant of PoissonSampledDpEvent(q, GaussianDpEvent(sqrt(sigma^2 - r^2) / Delta)), to 1e-6 plus the slack
    2 T lambda; and a ledger of half that T and half a scalar release composes the two (slack from the vector part
    only)."""
    grid = calibrate("gaussian", 1.5, 1.0, dim)
    release = PoissonSampledDiscreteGaussian(rate, grid.scale, grid.sensitivity, dim)
    width = smoothing_width(grid.scale)
    assert width == SMOOTHING_WIDTH and grid.scale > 1000.0
    slack = rounds * smoothing_slack(width, dim)
    assert 0.0 < slack < 1e-70

    def independent(count: int) -> pld.PLDAccountant:
        accountant = pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                       value_discretization_interval=PLD_DISCRETIZATION)
        multiplier = math.sqrt(grid.scale ** 2 - width ** 2) / grid.sensitivity
        accountant.compose(dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(multiplier)),
                           count)
        return accountant

    ledger = PrivacyLedger("agent")
    ledger.record(release, rounds)
    epsilon = epsilon_report(ledger, 1e-5)["epsilon_pld"]
    assert abs(epsilon - independent(rounds).get_epsilon(1e-5)) <= 1e-6 + 2.0 * slack
    assert epsilon > independent(rounds).get_epsilon(1e-5) - 1e-6  # the slack is not subtracted
    scalar = PoissonSampledDiscreteGaussian(rate, grid.scale, math.floor(grid.sensitivity), 1)
    mixed = PrivacyLedger("agent")
    mixed.record(release, rounds // 2)
    mixed.record(scalar, rounds // 2)
    expected = independent(rounds // 2)
    expected.compose(dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(
        grid.scale / math.floor(grid.sensitivity))), rounds // 2)
    assert epsilon_report(mixed, 1e-5)["epsilon_pld"] == pytest.approx(expected.get_epsilon(1e-5), rel=1e-3)


def _exact_hockey_stick(sigma: float, shift: tuple[int, int], rate: float,
                        epsilons: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """delta(eps) of one Poisson-sampled 2-D discrete Gaussian release, by summation over the lattice (the tails
    beyond 20 sigma are below 1e-80): remove (Q || P) and add (P || Q), P = N_Z(0, sigma^2 I_2) and
    Q = (1 - q) P + q N_Z(shift, sigma^2 I_2)."""
    support = np.arange(-int(20 * sigma), int(20 * sigma) + 1)
    base = np.outer(_discrete_gaussian(sigma, 0, support), _discrete_gaussian(sigma, 0, support))
    moved = np.outer(_discrete_gaussian(sigma, shift[0], support), _discrete_gaussian(sigma, shift[1], support))
    mixture = (1.0 - rate) * base + rate * moved
    remove = np.array([np.maximum(mixture - math.exp(e) * base, 0.0).sum() for e in epsilons])
    add = np.array([np.maximum(base - math.exp(e) * mixture, 0.0).sum() for e in epsilons])
    return remove, add


def _bound(sigma: float, norm: float, rate: float, width: float, epsilons: np.ndarray, *,
           slack: bool = True) -> np.ndarray:
    """The smoothing bound's delta(eps) = e^lambda delta'(eps - 2 lambda), delta' the PLD of
    `smoothed_gaussian_pld`; with ``slack=False`` the same PLD without lambda (not a valid bound)."""
    distribution = smoothed_gaussian_pld(sigma, norm, rate, width)
    lam = smoothing_slack(width, 2) if slack else 0.0
    return math.exp(lam) * np.array([distribution.get_delta_for_epsilon(max(e - 2.0 * lam, 0.0)) for e in epsilons])


@pytest.mark.parametrize("shift", [(1, 1), (2, 1)])
def test_the_bound_dominates_the_exact_privacy_profile_of_a_sampled_2d_discrete_gaussian(shift):
    """sigma = 3, q = 0.3: the exact delta(eps) of the true release (both directions) stays below the bound at the
    mechanism's width (r = sigma / 2 here) and at r = 0.2 (lambda = 11.9: nearly vacuous). Without its slack the
    bound at r = 0.2, i.e. the continuous Gaussian at sqrt(9 - 0.04) = 2.993, is exceeded at shift (1, 1): the
    discrete Gaussian is NOT dominated by the continuous one of (about) the same sigma, so the slack is needed."""
    sigma, rate = 3.0, 0.3
    epsilons = np.linspace(0.0, 1.5, 31)
    norm = math.hypot(*shift)
    remove, add = _exact_hockey_stick(sigma, shift, rate, epsilons)
    width = smoothing_width(sigma)
    for r in (width, 0.2):
        bound = _bound(sigma, norm, rate, r, epsilons)
        assert np.all(remove <= bound) and np.all(add <= bound)
    unslacked = _bound(sigma, norm, rate, 0.2, epsilons, slack=False)
    if shift == (1, 1):
        assert np.any(remove > unslacked)


def test_the_rdp_column_is_the_smaller_of_zhu_and_wang_and_the_smoothed_sampled_gaussian():
    """The ledger's epsilon_rdp of T vector releases: dp-accounting's RDP of the Poisson-sampled continuous Gaussian
    at sqrt(sigma^2 - r^2) / Delta (the slack, 1e-74 here, is below float resolution) where that is below Zhu &
    Wang's bound, as at the seeded multiplier of Q-DPSGD-1 (q = 0.02, T = 200, epsilon = 1), where it spends
    1 + O(r^2 / sigma^2) against Zhu & Wang's 1.32; and never above Zhu & Wang's curve (sigma = 2: r = 1 there)."""
    from dp_accounting import rdp

    from privcvx.algorithms import QDPSGD
    from privcvx.privacy.mechanisms import GridRdpAccountant, poisson_zcdp_rdp, sampled_discrete_gaussian_rdp

    rate, rounds, dim = 0.02, 200, 5
    seeded = QDPSGD(variant=1, epsilon=1.0, delta=1e-5, clip=1.0, sampling_rate=rate).calibrate(rounds)
    grid = calibrate("gaussian", seeded, 1.0, dim)
    release = PoissonSampledDiscreteGaussian(rate, grid.scale, grid.sensitivity, dim)
    ledger = PrivacyLedger("agent")
    ledger.record(release, rounds)
    independent = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    multiplier = math.sqrt(grid.scale ** 2 - smoothing_width(grid.scale) ** 2) / grid.sensitivity
    independent.compose(dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(multiplier)), rounds)
    spent = epsilon_report(ledger, 1e-5)["epsilon_rdp"]
    assert spent == pytest.approx(independent.get_epsilon(1e-5), rel=1e-9) and 1.0 <= spent <= 1.0 + 1e-5
    zhu_wang = GridRdpAccountant()
    zhu_wang._rdp += rounds * poisson_zcdp_rdp(rate, 0.5 / seeded ** 2, tuple(zhu_wang._orders))
    assert zhu_wang.get_epsilon(1e-5) > 1.3
    small = PoissonSampledDiscreteGaussian(0.02, 2.0, 1.0, dim).dp_event()
    orders = tuple(GridRdpAccountant()._orders)
    assert np.all(sampled_discrete_gaussian_rdp(small, orders) <= poisson_zcdp_rdp(0.02, 0.125, orders))


def test_a_discrete_gaussian_too_narrow_for_the_lemma_falls_back_to_zhu_and_wang():
    """sigma = 0.3 (r = 0.15, eta > 1): the lemma says nothing, so a vector release's PLD epsilon is infinite (not a
    smaller number) and its RDP column is Zhu & Wang's bound alone."""
    from privcvx.privacy.mechanisms import GridRdpAccountant, poisson_zcdp_rdp

    release = PoissonSampledDiscreteGaussian(0.5, 0.3, 0.1, 3)
    assert release.pld_slack == math.inf
    ledger = PrivacyLedger("agent")
    ledger.record(release, 10)
    report = epsilon_report(ledger, 1e-5)
    zhu_wang = GridRdpAccountant()
    zhu_wang._rdp += 10 * poisson_zcdp_rdp(0.5, 0.5 * (0.1 / 0.3) ** 2, tuple(zhu_wang._orders))
    assert report["epsilon_pld"] == math.inf
    assert report["epsilon_rdp"] == pytest.approx(zhu_wang.get_epsilon(1e-5), rel=1e-12)
