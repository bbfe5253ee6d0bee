"""Empirical privacy audits: run real releases on neighbouring datasets and bound epsilon from below.

A threshold test "release >= tau" with Clopper-Pearson intervals gives a 95% lower bound on the epsilon
of any mechanism whose releases were sampled (Jagielski et al. 2020; Nasr et al. 2021): if
P[M(D') >= tau] - delta > e^epsilon P[M(D) >= tau], the mechanism is not (epsilon, delta)-DP.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
from scipy.stats import beta as beta_dist

import privcvx as pc
from privcvx.algorithms import AgentContext, LinearizedADMM


def one_update_releases(data: float, perturbation, sensitivity: pc.Sensitivity, draws: int, seed: int,
                        box: tuple[float, float] = (-50.0, 50.0)) -> np.ndarray:
    """Run the real local update of Algorithm 1 ``draws`` times on a one-sample dataset ``data``.

    f(x) = (x - data)^2 / 2 over W = ``box``, from z = 0 with w = lambda = 0, rho = 1, eta = 0.5: the
    noise-free release is clip(data / 3, box), and datasets d and d + Delta differ in gradient by Delta.
    """
    x = cp.Variable(1)
    agent = pc.Agent(0.5 * cp.sum_squares(x - data), [x <= box[1], x >= box[0]], shared=x, name="audited",
                     sensitivity=sensitivity)
    problem = pc.DistributedProblem([agent])
    role = LinearizedADMM(privacy=perturbation).agent_program(agent, AgentContext.for_agent(problem, seed=seed))
    z, w_p = np.zeros(1), np.zeros(1)
    return np.array([role.local_update(z, w_p, 1.0, 0.5)[0][0] for _ in range(draws)])


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    lower = beta_dist.ppf(alpha / 2, k, n - k + 1) if k > 0 else 0.0
    upper = beta_dist.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
    return float(lower), float(upper)


def threshold_bound(left: np.ndarray, right: np.ndarray, tau: float, delta: float) -> float:
    """95% Clopper-Pearson lower bound on epsilon from the test "release >= tau"."""
    p_low, _ = clopper_pearson(int(np.sum(right >= tau)), len(right))
    _, q_high = clopper_pearson(int(np.sum(left >= tau)), len(left))
    return float(np.log(max(p_low - delta, 1e-300) / q_high))


def epsilon_lower_bound(left: np.ndarray, right: np.ndarray, delta: float) -> float:
    """Best threshold test: choose tau on one half of the draws, bound epsilon on the other half."""
    half = len(left) // 2
    taus = np.quantile(right[:half], np.linspace(0.5, 0.995, 60))
    tau = max(taus, key=lambda t: threshold_bound(left[:half], right[:half], t, delta))
    return threshold_bound(left[half:], right[half:], tau, delta)
