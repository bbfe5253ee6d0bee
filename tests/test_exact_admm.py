"""ExactADMM, the non-private yardstick of rounds: conforming, exact, and never slower than the linearized step."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from core_problems import box_l1_least_squares, general_form, soc_linear

import privcvx as pc
from privcvx.algorithms import ExactADMM


def _first_round(result: pc.Result, optimum: float, tolerance: float = 1e-4) -> int | None:
    history = result.history
    hit = (np.abs(history["objective"] - optimum) <= tolerance * abs(optimum)) \
        & (history["consensus_residual"] <= tolerance)
    return int(history["round"][hit].iloc[0]) if hit.any() else None


@pytest.mark.parametrize("builder", [box_l1_least_squares, general_form, soc_linear])
def test_exact_admm_reaches_the_optimum_in_fewer_rounds_than_the_linearized_step(builder):
    built = builder()
    problem = built[0] if isinstance(built, tuple) else built
    optimum = problem.solve_centralized().value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # CVXPY's "Solution may be inaccurate" on a rare step
        exact = _first_round(problem.solve(ExactADMM(), rounds=120), optimum)
        linearized = _first_round(problem.solve(rounds=120), optimum)
    assert exact is not None and linearized is not None
    assert exact <= linearized  # the exact step is the yardstick: no linearization error to work off


def test_exact_admm_refuses_privacy_and_the_linearized_settings():
    with pytest.raises(TypeError):
        ExactADMM(privacy=pc.ObjectivePerturbation(pc.Gaussian(1.0, 1e-5)))  # not private: no such setting
    assert not ExactADMM().private
    assert ExactADMM(rho=2.0).get_params() == {"rho": 2.0, "tol": None, "relaxation": 1.0, "anderson": None}
