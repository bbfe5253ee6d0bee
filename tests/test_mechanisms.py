"""Mechanisms (Thm. 4.8), sensitivities and noise sources: calibration, streams, bad input."""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from privcvx.errors import ParameterError, PrivacyError
from privcvx.privacy import (
    Budget,
    Gaussian,
    Laplace,
    NoiseSource,
    SecureNoise,
    SeededNoise,
    Sensitivity,
    agent_noise_sources,
    mechanism_from_dict,
)

DRAWS = 200_000


def _sources() -> list[tuple[str, NoiseSource]]:
    # Unit draws exist on the float path only; the grid path (seed="secure") is tested in test_secure_noise.py.
    return [("seeded", agent_noise_sources(20240611, 1)[0])]


@pytest.mark.parametrize(("name", "source"), _sources())
def test_gaussian_noise_has_calibrated_standard_deviation(name: str, source: NoiseSource) -> None:
    epsilon, delta, delta2 = 0.4, 1e-5, 2.5
    mechanism = Gaussian(epsilon, delta)
    scale = mechanism.scale(Sensitivity(l2=delta2))
    sigma = math.sqrt(2 * math.log(1.25 / delta)) * delta2 / epsilon      # Thm. 4.8(ii), written out
    noise = scale * mechanism.unit_noise(source, DRAWS)
    assert noise.shape == (DRAWS,)
    assert abs(noise.std() / sigma - 1) < 0.02
    assert abs(np.abs(noise).mean() / mechanism.expected_abs(scale) - 1) < 0.02
    assert abs(noise.mean()) < 0.02 * sigma


@pytest.mark.parametrize(("name", "source"), _sources())
def test_laplace_noise_has_calibrated_mean_absolute_value(name: str, source: NoiseSource) -> None:
    epsilon, delta1 = 0.3, 1.7
    mechanism = Laplace(epsilon)
    scale = mechanism.scale(Sensitivity(l1=delta1, l2=0.1))     # Laplace must use l1, not l2
    b = delta1 / epsilon                                          # Thm. 4.8(i): variance 2 b^2
    noise = scale * mechanism.unit_noise(source, DRAWS)
    assert abs(np.abs(noise).mean() / b - 1) < 0.02
    assert abs(noise.std() / (math.sqrt(2) * b) - 1) < 0.02
    assert mechanism.expected_abs(scale) == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize(("name", "source"), _sources())
def test_unit_noise_has_the_right_distribution(name: str, source: NoiseSource) -> None:
    # Kolmogorov-Smirnov against scipy's distributions; p < 1e-6 would flag a wrong transform.
    assert stats.kstest(source.standard_laplace(50_000), "laplace").pvalue > 1e-6
    assert stats.kstest(source.standard_normal(50_000), "norm").pvalue > 1e-6


def test_seeded_state_round_trips_bitwise_through_json() -> None:
    source = agent_noise_sources(7, 2)[1]
    source.standard_normal(13)
    state = json.loads(json.dumps(source.get_state()))
    first = np.concatenate([source.standard_laplace(1000), source.standard_normal(1001)])
    fresh = SeededNoise(99)                                       # a different stream, then restored
    fresh.set_state(state)
    again = np.concatenate([fresh.standard_laplace(1000), fresh.standard_normal(1001)])
    assert first.tobytes() == again.tobytes()


def test_streams_reproduce_per_seed_and_differ_per_agent() -> None:
    a, b = agent_noise_sources(5, 3), agent_noise_sources(5, 3)
    draws_a = [s.standard_normal(10_000) for s in a]
    draws_b = [s.standard_normal(10_000) for s in b]
    for x, y in zip(draws_a, draws_b, strict=True):
        assert x.tobytes() == y.tobytes()
    for i in range(3):
        for j in range(i + 1, 3):
            assert not np.array_equal(draws_a[i], draws_a[j])
            assert abs(np.corrcoef(draws_a[i], draws_a[j])[0, 1]) < 0.05
    other = agent_noise_sources(6, 1)[0].standard_normal(10_000)
    assert not np.array_equal(other, draws_a[0])
    unseeded = [s.standard_normal(8) for s in agent_noise_sources(None, 2)]
    assert not np.array_equal(unseeded[0], unseeded[1])


def test_secure_noise_is_not_reproducible_and_has_no_state() -> None:
    sources = agent_noise_sources("secure", 2)
    assert all(isinstance(s, SecureNoise) for s in sources)
    assert sources[0].get_state() == {"secure": True}
    sources[0].set_state({"secure": True})
    draws = [source.perturb(np.zeros(64), "gaussian", 1.0, 0.1).value for source in sources]
    assert not np.array_equal(draws[0], draws[1])
    with pytest.raises(PrivacyError) as info:
        sources[0].set_state(agent_noise_sources(1, 1)[0].get_state())
    assert info.value.argument == "state"
    with pytest.raises(PrivacyError):
        SeededNoise(1).set_state({"secure": True})


def test_classic_gaussian_above_one_raises_and_points_to_analytic() -> None:
    with pytest.raises(PrivacyError, match="analytic=True") as info:
        Gaussian(1.5, 1e-5)
    assert info.value.argument == "epsilon"
    Gaussian(1.0, 1e-5)                                            # the boundary is allowed


@pytest.mark.parametrize(("epsilon", "delta"), [(0.3, 1e-5), (1.0, 1e-6), (2.0, 1e-5), (8.0, 1e-3)])
def test_analytic_gaussian_matches_balle_wang(epsilon: float, delta: float) -> None:
    mechanism = Gaussian(epsilon, delta, analytic=True)
    assert mechanism.noise_multiplier == pytest.approx(dp_accounting.get_sigma_gaussian(epsilon, delta),
                                                       rel=1e-12)
    # Exact: the release is (epsilon, delta)-DP and no tighter.
    assert dp_accounting.get_epsilon_gaussian(mechanism.noise_multiplier, delta) == pytest.approx(epsilon,
                                                                                                  rel=1e-6)
    if epsilon <= 1:
        assert mechanism.noise_multiplier < Gaussian(epsilon, delta).noise_multiplier


def test_mechanism_events_and_round_trip() -> None:
    gaussian, laplace = Gaussian(0.5, 1e-4), Laplace(2.0)
    assert gaussian.dp_event() == dp_accounting.GaussianDpEvent(gaussian.noise_multiplier)
    assert laplace.dp_event() == dp_accounting.LaplaceDpEvent(0.5)
    calibrated = Budget(1.0, 1e-5).per_update(10)
    for mechanism in (gaussian, laplace, Gaussian(3.0, 1e-5, analytic=True), calibrated):
        restored = mechanism_from_dict(json.loads(json.dumps(mechanism.to_dict())))
        assert restored == mechanism and type(restored) is type(mechanism)
        assert restored.noise_multiplier == mechanism.noise_multiplier
    assert math.isnan(calibrated.epsilon) and calibrated.delta == 1e-5


def test_sensitivity_norms() -> None:
    both = Sensitivity(l1=3.0, l2=1.0)
    assert (both.get("l1"), both.get("l2")) == (3.0, 1.0)
    assert Sensitivity(l1=2.0).get("l2") == 2.0                    # ||v||_2 <= ||v||_1
    only_l2 = Sensitivity(l2=1.0)
    with pytest.raises(PrivacyError) as info:
        Laplace(1.0).scale(only_l2)
    assert info.value.argument == "l1"
    assert Gaussian(0.5, 1e-5).scale(only_l2.scaled(2.0)) == pytest.approx(
        2 * Gaussian(0.5, 1e-5).noise_multiplier)
    assert both.scaled(0.5) == Sensitivity(l1=1.5, l2=0.5)
    assert Sensitivity(l1=1.0).scaled(2.0).l2 is None
    with pytest.raises(PrivacyError) as info:
        both.get("linf")
    assert info.value.argument == "norm"


BAD_INPUT = [
    (lambda: Laplace(0.0), "epsilon"),
    (lambda: Laplace(-1.0), "epsilon"),
    (lambda: Laplace(math.inf), "epsilon"),
    (lambda: Laplace(math.nan), "epsilon"),
    (lambda: Laplace("big"), "epsilon"),
    (lambda: Gaussian(0.0, 1e-5), "epsilon"),
    (lambda: Gaussian(math.nan, 1e-5, analytic=True), "epsilon"),
    (lambda: Gaussian(0.5, 0.0), "delta"),
    (lambda: Gaussian(0.5, 1.0), "delta"),
    (lambda: Gaussian(0.5, -1e-3), "delta"),
    (lambda: Gaussian(0.5, math.nan), "delta"),
    (lambda: Gaussian(2.0, 1.5, analytic=True), "delta"),
    (lambda: Gaussian(1.5, 1e-5), "epsilon"),
    (lambda: Sensitivity(l1=-1.0), "l1"),
    (lambda: Sensitivity(l2=-0.1), "l2"),
    (lambda: Sensitivity(l1=1.0, l2=math.inf), "l2"),
    (lambda: Sensitivity(l1=math.nan), "l1"),
    (lambda: Sensitivity(), "l1"),
    (lambda: Sensitivity(l1=1.0).scaled(-2.0), "factor"),
    (lambda: Laplace(1.0).scale(2.0), "sensitivity"),
    (lambda: Budget(0.0, 1e-5), "epsilon"),
    (lambda: Budget(1.0, 1.0), "delta"),
    (lambda: Budget(1.0, 1e-5, mechanism="exponential"), "mechanism"),
    (lambda: Budget(1.0, 1e-5, accountant="moments"), "accountant"),
    (lambda: Laplace(1.0).unit_noise(SeededNoise(0), -1), "size"),
]


@pytest.mark.parametrize(("make", "argument"), BAD_INPUT)
def test_bad_input_raises_privacy_error_naming_the_argument(make, argument: str) -> None:
    with pytest.raises(PrivacyError) as info:
        make()
    assert info.value.argument == argument


@pytest.mark.parametrize(("make", "argument"), [
    (lambda: agent_noise_sources("fast", 2), "seed"),
    (lambda: agent_noise_sources(-1, 2), "seed"),
    (lambda: agent_noise_sources(0, -2), "count"),
    (lambda: Budget(1.0, 1e-5).per_update(0), "steps"),
])
def test_bad_run_parameters_raise_parameter_error(make, argument: str) -> None:
    with pytest.raises(ParameterError) as info:
        make()
    assert info.value.argument == argument
