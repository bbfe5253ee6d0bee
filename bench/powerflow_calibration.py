"""The valid epsilon of the power-flow runs calibrated to the paper's nominal sensitivities (issue 26).

A run's epsilon depends only on the noise it draws and how many releases it makes, not on the data: a release
with noise multiplier s (scale over the *declared* sensitivity) against a true sensitivity r times the declared one
is the same mechanism with noise multiplier s / r. So the valid epsilon of a nominal run follows from its settings
alone, composed with privcvx's own accountant (``privcvx.privacy.accounting.tightest_epsilon``):

* Gaussian: T E releases with multipliers s / r_t compose to mu-GDP, mu^2 = E sum_t r_t^2 / s^2;
* Laplace: a Laplace(epsilon) release is Laplace(r_t epsilon) against the true sensitivity.

r_t per zone: ObjPert ("paper", 2 beta) against the exact 2 beta max_i ||a_i||; OutPert against the derived
output sensitivity of the projected step (privcvx.privacy.perturbation.derived_output_sensitivity, which
``tests/test_powerflow_sensitivity.py`` checks against a replay), from the exact gradient sensitivity, at
eta^t = 1/sqrt(t) and rho = 100, with the conic projection's allowance 2e (e = OutPert's `solver_error`, by default
`pc.OutputPerturbation`'s, as the presets run; ``--solver-error`` for a preset that sets its own). The worst zone
is reported, as in the run's ``epsilon_spent``. The nominal column is the same computation with r_t = 1 (it
reproduces the ``epsilon_spent`` of docs/results.md). Gaussian runs are accounted at their delta (1e-2), Laplace runs at
privcvx's default 1e-6 (``privcvx.privacy.accounting.DEFAULT_LAPLACE_DELTA``), without the PLD accountant, as
the per-round ``epsilon_spent`` is (``RunningEpsilon``; the PLD is tighter for Laplace: 2.19 instead of 2.34 for
ObjL at 0.05, E = 1).

    python bench/powerflow_calibration.py --case case14            # docs/results.md, case14 table
    python bench/powerflow_calibration.py --case case118 --zones standin
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings

import numpy as np
import pandas as pd

import powerflow
import privcvx as pc
from privcvx.privacy.accounting import DEFAULT_LAPLACE_DELTA, PrivacyLedger, tightest_epsilon
from privcvx.privacy.perturbation import derived_output_sensitivity

METHODS = [("ObjG", "paper"), ("ObjL", "paper"), ("OutG", "derived"), ("OutG", "paper"), ("OutL", "derived"),
           ("OutL", "paper")]
#: OutPert's certified error bound e when a preset does not set one.
DEFAULT_SOLVER_ERROR = next(field.default for field in dataclasses.fields(pc.OutputPerturbation)
                            if field.name == "solver_error")


def ratios(problem_paper: pc.DistributedProblem, problem_exact: pc.DistributedProblem, method: str,
           calibration: str, rounds: int, rho: float, solver_error: float) -> list[np.ndarray]:
    """Per zone, r_t = valid / declared sensitivity of each round's releases (t = 1..rounds)."""
    norm = "l2" if method.endswith("G") else "l1"
    t = np.arange(1, rounds + 1)
    out = []
    for paper, exact, layout in zip(problem_paper.agents, problem_exact.agents, problem_paper.layouts, strict=True):
        if method.startswith("Obj"):
            out.append(np.full(rounds, exact.sensitivity.get(norm) / paper.sensitivity.get(norm)))
            continue
        valid, declared = [], []
        for step in t:
            weights = np.sqrt(step) + rho * layout.shared_mask
            valid.append(derived_output_sensitivity(exact.sensitivity, weights, False, solver_error).get(norm))
            declared.append(derived_output_sensitivity(paper.sensitivity, weights, False, solver_error).get(norm)
                            if calibration == "derived" else paper.declared.output_sensitivity.get(norm))
        out.append(np.array(valid) / np.array(declared))
    return out


def epsilon(method: str, epsilon_bar: float, delta: float, local_updates: int, ratio: np.ndarray) -> float:
    """The worst-case epsilon of T E releases of ``method`` at per-update ``epsilon_bar`` whose true sensitivity is
    ``ratio[t]`` times the declared one in round t."""
    ledger = PrivacyLedger("zone")
    if method.endswith("G"):  # the run's delta is the Gaussian's; Laplace runs are accounted at 1e-6
        multiplier = pc.Gaussian(epsilon_bar, delta).noise_multiplier
        mu = np.sqrt(local_updates * np.sum(ratio ** 2)) / multiplier
        return float(pc.privacy.accounting.gaussian_epsilon(1.0 / mu, delta))
    for value, count in zip(*np.unique(ratio, return_counts=True), strict=True):
        ledger.record(pc.Laplace(epsilon_bar * float(value)), int(count) * local_updates)
    return tightest_epsilon(ledger, DEFAULT_LAPLACE_DELTA, with_pld=False)


def table(case: str, zones: str, epsilons: list[float], local_updates: list[int], rounds: int, delta: float,
          beta: float, rho: float, solver_error: float = DEFAULT_SOLVER_ERROR) -> pd.DataFrame:
    mapping = powerflow.case118_zones() if zones == "standin" else int(zones)
    exact = powerflow.zonal_problem(case, mapping, beta=beta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.NominalPrivacyWarning)
        paper = powerflow.zonal_problem(case, mapping, beta=beta, sensitivity="paper")
    rows = []
    for method, calibration in METHODS:
        per_zone = ratios(paper, exact, method, calibration, rounds, rho, solver_error)
        for eps in epsilons:
            for e in local_updates:
                nominal = epsilon(method, eps, delta, e, np.ones(rounds))
                valid = max(epsilon(method, eps, delta, e, r) for r in per_zone)
                rows.append({"method": method, "calibration": calibration, "eps": eps, "E": e,
                             "ratio_round_1": max(r[0] for r in per_zone),
                             "ratio_round_T": max(r[-1] for r in per_zone),
                             "epsilon_nominal": nominal, "epsilon_valid": valid})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="case14")
    parser.add_argument("--zones", default="3", help='number of zones or "standin" (case118)')
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.05, 0.1, 0.5, 1.0])
    parser.add_argument("--local-updates", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--delta", type=float, default=1e-2)
    parser.add_argument("--beta", type=float, default=0.01)
    parser.add_argument("--rho", type=float, default=100.0)
    parser.add_argument("--solver-error", type=float, default=DEFAULT_SOLVER_ERROR)
    args = parser.parse_args(argv)
    frame = table(args.case, args.zones, args.epsilons, args.local_updates, args.rounds, args.delta, args.beta,
                  args.rho, args.solver_error)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return frame


if __name__ == "__main__":
    main()
