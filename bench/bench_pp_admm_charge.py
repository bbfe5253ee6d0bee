"""PP-ADMM's objective perturbation: the old (thesis) calibration against the new one (issue 26, point 4).

The table of docs/zcdp_admm.md ("Old and new calibration, measured").

    nice -n 5 .venv/bin/python bench/bench_pp_admm_charge.py

    # cross-check against the old code itself (a copy outside the package, not restored in it):
    mkdir -p /tmp/ppadmm_old && git archive ddc9214 privcvx problems examples | tar -x -C /tmp/ppadmm_old
    PYTHONPATH=/tmp/ppadmm_old nice -n 5 .venv/bin/python bench/bench_pp_admm_charge.py --package-only

The old calibration is reproduced here from its formulas (privcvx before the fix, commit ddc9214,
``PPADMM.budget`` and ``fuzzed`` with the defaults delta_1 = 1e-4, epsilon_ratio = 0.99); the package is not
changed. Per release, rho = dp_to_zcdp(epsilon, delta) / R, rho_1 = (1 - splits) rho, rho_2 = splits rho,
epsilon_1 = 2 sqrt(rho_1 ln(1/delta_1)), epsilon_3 = 0.99 epsilon_1, sigma_1 = S * (analytic Gaussian sigma of
(epsilon_3, delta_1)); the ledger was charged rho_1 (= epsilon_1^2 / (4 ln(1/delta_1)), the thesis's Thm. 6) and
rho_2, both as Gaussians of noise multiplier 1/sqrt(2 rho), with no Jacobian term and no delta_1.

Four cases:

(a) exact quadratic case: f_i(x) = ||x - m_i||^2 / 2 with m_i the mean of n_i records of norm <= 1, so the
    gradient moves by a constant shift of norm <= S = 2/n_i and the Hessian does not depend on the data (h = 0):
    the privacy loss of the objective release is exactly Gaussian, and the tight epsilon of the noise drawn is the
    mu-GDP one with mu^2 = sum over releases of (S/sigma)^2. epsilon = 4, delta = 1e-4, T = 5, beta = 1e-6.
(b) breast cancer (L2 logistic regression, 5 agents with n_i = 100 records each, lam_hat = 0.01, eta = 1 so that
    the old Jacobian condition 2.8 h/mu <= epsilon_1 - epsilon_3 holds, Topology.random(edges=7, seed=1)),
    epsilon = 1, delta = 1e-4, T = 30, beta = 1e-6. Rigorous bound: the mu-GDP epsilon of the drawn noise plus the
    Jacobian terms T xi_i (the privacy loss is the Gaussian one plus at most xi_i per release; docs/zcdp_admm.md).
(c) the delta_1 that the old accounting dropped: the old objective steps as (epsilon_1, delta_1)-DP (Thm. 6 as
    printed), T = 30, composed by advanced composition (Dwork, Rothblum & Vadhan) and, tightly for generic
    (epsilon, delta)-DP steps, by dp-accounting's PLD; against the reported (epsilon, delta).
(d) the PP-/IPP-ADMM rows docs/results.md published before the fix (examples/zcdp_admm.py, epsilon_ratio = 0.3):
    the rigorous epsilon of the worst agent, from the noise drawn and the Jacobian terms the old code left out.

The new calibration is run through the package (PPADMM) on the same problems; its reported numbers are read from
the result, and the rigorous bound is recomputed here from the charges (each rho checked against the sigma drawn by
tests/test_pp_admm_charge.py).
"""

from __future__ import annotations

import argparse
import math
import warnings

import cvxpy as cp
import dp_accounting
import numpy as np
from dp_accounting import pld
from scipy.optimize import brentq
from scipy.stats import norm

import privcvx as pc
from examples.zcdp_admm import EPSILONS, ETA, build_problem
from privcvx.algorithms import PPADMM
from privcvx.errors import ReproducibleNoiseWarning
from privcvx.privacy.zcdp import dp_to_zcdp, zcdp_to_dp
from problems.datasets import load_breast_cancer
from problems.l2_logistic import binary_labels, decentralized_logistic, thesis_preprocess

DELTA = DELTA_1 = 1e-4
EPSILON_RATIO = 0.99
SPLITS = 0.001
BETA = 1e-6
AGENTS = 5


def gdp_epsilon(mu: float, delta: float) -> float:
    """The exact epsilon of mu-GDP at delta (Dong, Roth & Su, Cor. 2.13), solved for epsilon."""
    def excess(epsilon: float) -> float:
        return norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2) - delta
    return brentq(excess, 0.0, 200.0) if excess(0.0) > 0 else 0.0


def old_calibration(epsilon: float, releases: int, ratio: float = EPSILON_RATIO,
                    svt_share: float = 0.0) -> dict[str, float]:
    """The pre-fix per-release budget (ddc9214 ``PPADMM.budget``; IPP-ADMM kept ``svt_share`` of rho for the SVT), in
    units of S = 1 for sigma_1."""
    rho = (1.0 - svt_share) * dp_to_zcdp(epsilon, DELTA) / releases
    rho_1, rho_2 = rho * (1.0 - SPLITS), rho * SPLITS
    epsilon_1 = 2.0 * math.sqrt(rho_1 * math.log(1.0 / DELTA_1))
    epsilon_3 = ratio * epsilon_1
    multiplier = float(dp_accounting.get_sigma_gaussian(epsilon_3, DELTA_1))  # sigma_1 / S
    charged_1 = epsilon_1 ** 2 / (4.0 * math.log(1.0 / DELTA_1))  # thesis_dp_to_zcdp(epsilon_1, delta_1) = rho_1
    return {"rho_1": charged_1, "rho_2": rho_2, "drawn_1": 1.0 / (2.0 * multiplier ** 2), "epsilon_1": epsilon_1,
            "epsilon_3": epsilon_3}


def rdp_of_gaussians(rhos: list[float], releases: int) -> float:
    """dp-accounting's RDP epsilon of ``releases`` rounds of Gaussians of noise multipliers 1/sqrt(2 rho)."""
    accountant = dp_accounting.rdp.RdpAccountant()
    for rho in rhos:
        accountant.compose(dp_accounting.GaussianDpEvent(1.0 / math.sqrt(2.0 * rho)), releases)
    return accountant.get_epsilon(DELTA)


def old_report(epsilon: float, releases: int, jacobian: float) -> dict[str, float]:
    """What the old code reported, and what its noise really gives (the worst agent's Jacobian term)."""
    old = old_calibration(epsilon, releases)
    charged = releases * (old["rho_1"] + old["rho_2"])
    drawn = releases * (old["drawn_1"] + old["rho_2"])
    return {"reported_zcdp": zcdp_to_dp(charged, DELTA), "reported_history": gdp_epsilon(math.sqrt(2.0 * charged),
                                                                                          DELTA),
            "reported_rdp": rdp_of_gaussians([old["rho_1"], old["rho_2"]], releases),
            "mu_recorded": math.sqrt(2.0 * charged),
            "mu_drawn": math.sqrt(2.0 * drawn), "drawn_over_charged": old["drawn_1"] / old["rho_1"],
            "true": gdp_epsilon(math.sqrt(2.0 * drawn), DELTA) + releases * jacobian, **old}


def package_report(result: pc.Result) -> str:
    """What the package reports: the zCDP conversion, the history's last epsilon, the privacy table's RDP column."""
    return (f"zcdp_epsilon {result.info['zcdp_epsilon']:.4f}, history {result.history['epsilon'].iloc[-1]:.4f}, "
            f"epsilon_rdp {result.privacy['epsilon_rdp'].max():.4f}")


def new_report(result: pc.Result) -> dict[str, float]:
    """The new run's reported numbers, and the rigorous bound recomputed from its charges (worst agent)."""
    true = 0.0
    for agent in result.info["agents"]:
        charges = agent["zcdp"]["charges"]
        rho, xi = math.fsum(c[2] for c in charges), math.fsum(c[3] for c in charges)
        true = max(true, gdp_epsilon(math.sqrt(2.0 * rho), DELTA) + xi)
    return {"reported_zcdp": result.info["zcdp_epsilon"], "reported_history": float(result.history["epsilon"].iloc[-1]),
            "xi": max(result.info.get("zcdp_xi", {"": 0.0}).values()), "true": true}


def quadratic_problem(samples: int, dim: int = 3, seed: int = 0) -> pc.DistributedProblem:
    """f_i(x) = ||x - m_i||^2 / 2, m_i the mean of ``samples`` records in the unit ball: S = 2 / n_i, h = 0."""
    rng = np.random.default_rng(seed)
    agents = []
    for p in range(AGENTS):
        records = rng.normal(size=(samples, dim))
        records /= np.maximum(1.0, np.linalg.norm(records, axis=1, keepdims=True))
        x = cp.Variable(dim, name=f"x_{p}")
        agents.append(pc.Agent(cp.sum_squares(x - records.mean(axis=0)) / 2, shared=x, name=f"agent-{p}",
                               sensitivity=pc.Sensitivity(l2=2.0 / samples)))
    return pc.DistributedProblem(agents)


def run_a() -> pc.Result:
    """Case (a) through the package: epsilon = 4, T = 5, the exact quadratic problem."""
    problem = quadratic_problem(samples=100)
    return problem.solve(PPADMM(epsilon=4.0, delta=DELTA, eta=0.5, beta=BETA, hessian_change=0.0, strong_convexity=1.0),
                         pc.Topology.random(seed=3), rounds=5, seed=1)


def breast_cancer() -> tuple[pc.DistributedProblem, pc.Topology]:
    """Case (b)'s problem: 5 agents with n_i = 100 breast-cancer records each (a seeded draw of 500 of 569)."""
    X, y = load_breast_cancer()
    rows = np.random.default_rng(0).permutation(len(y))[:AGENTS * 100]
    problem = decentralized_logistic(thesis_preprocess(X)[rows], binary_labels(y, 1)[rows], agents=AGENTS, lam=0.01)
    return problem, pc.Topology.random(edges=7, seed=1)


def declared_mu(problem: pc.DistributedProblem) -> float:
    """lam_hat / N, the strong convexity every agent declares (pc.Declared)."""
    return min(declared.strong_convexity for declared in problem.declared.values())


def run_b(eta: float = 1.0) -> pc.Result:
    """Case (b) through the package: epsilon = 1, T = 30."""
    problem, topology = breast_cancer()
    return problem.solve(PPADMM(epsilon=1.0, delta=DELTA, eta=eta, beta=BETA,
                                strong_convexity=declared_mu(problem)), topology, rounds=30, seed=1)  # h_i declared


def old_line(old: dict[str, float]) -> str:
    return (f"rho drawn / charged = {old['drawn_over_charged']:.3f}; mu recorded {old['mu_recorded']:.4f}, drawn "
            f"{old['mu_drawn']:.4f}; reported zcdp_epsilon {old['reported_zcdp']:.4f}, history (GDP of the recorded "
            f"events) {old['reported_history']:.4f}, epsilon_rdp {old['reported_rdp']:.4f}")


def case_a() -> None:
    old = old_report(4.0, 5, jacobian=0.0)
    result = run_a()
    new = new_report(result)
    print(f"(a) exact quadratic, epsilon = 4, T = 5, beta = {BETA:g}, delta = {DELTA:g}")
    print(f"    old: {old_line(old)}; true (GDP of the drawn noise) {old['true']:.4f}")
    print(f"    new: {package_report(result)}; true (GDP of the drawn noise) {new['true']:.4f}")


def case_bc(eta: float = 1.0) -> None:
    epsilon, rounds = 1.0, 30
    problem, topology = breast_cancer()
    degrees = topology.bind(problem.names).degrees()
    mu_f, change = declared_mu(problem), {name: d.hessian_change for name, d in problem.declared.items()}
    # the worst agent's Jacobian term -2 ln(1 - h_i / mu_i), mu_i = mu_f + 2 eta |V_i|, which the old code left out
    jacobian = max(-2.0 * math.log1p(-change[name] / (mu_f + 2 * eta * degrees[name])) for name in problem.names)
    old = old_report(epsilon, rounds, jacobian)
    # the old code's Jacobian condition of Thm. 6 holds at this eta, so the old code ran this set-up
    assert 2.8 * max(change.values()) / min(mu_f + 2 * eta * d for d in degrees.values()) <= (
        old["epsilon_1"] - old["epsilon_3"])
    result = run_b(eta)
    new = new_report(result)
    print(f"(b) breast cancer, n_i = 100, epsilon = {epsilon}, T = {rounds}, eta = {eta}, beta = {BETA:g}")
    print(f"    old: {old_line(old)}; rigorous (GDP of the drawn noise + T xi_i, T xi_i = {rounds * jacobian:.4f}) "
          f"{old['true']:.4f}")
    print(f"    new: {package_report(result)} (T xi_i = {new['xi']:.4f}); rigorous (GDP of the charged rho + "
          f"T xi_i) {new['true']:.4f}")
    # (c): the old objective steps as (epsilon_1, delta_1)-DP, composed keeping delta_1
    epsilon_1, slack = old["epsilon_1"], DELTA
    advanced = (math.sqrt(2 * rounds * math.log(1 / slack)) * epsilon_1
                + rounds * epsilon_1 * math.expm1(epsilon_1))
    total_delta = rounds * DELTA_1 + slack
    step = pld.privacy_loss_distribution.from_privacy_parameters(
        pld.common.DifferentialPrivacyParameters(epsilon_1, DELTA_1), value_discretization_interval=1e-4)
    tight = step.self_compose(rounds).get_epsilon_for_delta(total_delta)
    print(f"(c) epsilon = {epsilon}, T = {rounds}: old steps (epsilon_1, delta_1) = ({epsilon_1:.4f}, {DELTA_1:g}); "
          f"advanced composition ({advanced:.3f}, {total_delta:.2g}); optimal composition (PLD) at delta "
          f"{total_delta:.2g}: {tight:.3f}; the old code reported ({old['reported_zcdp']:.3f}, {DELTA:g})")
    print(f"    new: no delta_1; reported ({new['reported_zcdp']:.3f}, {DELTA:g}), the only delta")


def case_d() -> None:
    """The rows docs/results.md published before the fix: examples/zcdp_admm.py with epsilon_ratio = 0.3."""
    problem = build_problem()
    degrees = pc.Topology.random(edges=7, seed=1).bind(problem.names).degrees()
    mu_f, change = declared_mu(problem), {name: d.hessian_change for name, d in problem.declared.items()}
    print("(d) examples/zcdp_admm.py before the fix (epsilon_i3 / epsilon_i1 = 0.3, T = 40, c = 20, SVT 10%): "
          "rigorous epsilon of the worst agent (its T xi_i never charged)")
    for method, releases, svt_share in (("PP-ADMM", 40, 0.0), ("IPP-ADMM", 20, 0.1)):
        for epsilon in EPSILONS:
            old = old_calibration(epsilon, releases, ratio=0.3, svt_share=svt_share)
            gaussian = releases * (old["drawn_1"] + old["rho_2"])
            svt = svt_share * dp_to_zcdp(epsilon, DELTA)  # the SVT's pure-DP share, (e1 + e2)^2 / 2 (Lemma 3)
            worst = max(releases * -2.0 * math.log1p(-change[n] / (mu_f + 2 * ETA * degrees[n])) for n in problem.names)
            bound = (gdp_epsilon(math.sqrt(2.0 * gaussian), DELTA) + worst if not svt_share
                     else zcdp_to_dp(gaussian + svt, DELTA, worst))
            print(f"    {method} epsilon = {epsilon:g}: rho drawn / charged {old['drawn_1'] / old['rho_1']:.3f}, "
                  f"T xi_i {worst:.3f}, rigorous {bound:.3f} ({'GDP + T xi' if not svt_share else 'Lemma 4 with xi'})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package-only", action="store_true",
                        help="run cases (a) and (b) through the privcvx on the path (old or new); print its report")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # seeded on purpose
    if args.package_only:
        print(f"{pc.__file__}\n(a) {package_report(run_a())}\n(b) {package_report(run_b())}")
        return
    case_a()
    case_bc()
    case_d()


if __name__ == "__main__":
    main()
