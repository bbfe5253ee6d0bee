"""The distributed functional mechanism: each agent releases its own perturbed coefficients, then any
distributed method (e.g. ``LinearizedADMM`` without noise) solves the released problem.

This composes Ch. 5 of J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and
Fairness" (PhD dissertation, University of Houston, 2022) with the distributed layer of privcvx. Agent p holds
the tuples I_p and releases, once, theta_p = (a_p, M_p, c_p) of `problems.fair_logistic` on its own data, with
the noise of ``method`` from its own noise stream, and repairs M_p (PSD, post-processing). Its objective and
public local set are built from the release alone:

    f_p(w) = (a_p^T w + w^T M_p w + (lam/2) n_p ||w||^2) / n,        W_p = {w : |c_p^T w| <= tau n_p / n}.

**Guarantee.** Each release is epsilon-DP (pdfc) or (epsilon, delta)-DP (adfc, relaxed) for the agent's own tuples,
under replace-one within its share (the bounds of `problems.fair_logistic.coefficient_sensitivity`). The
shares are disjoint, so a tuple is covered by its owner's release alone (parallel composition), and everything
the distributed method computes reads only f_p and W_p, i.e. the releases: post-processing. The method must
therefore add no noise and needs no ledger: the run reports no privacy table (its history's epsilon is 0); the
guarantee is the release's.

**Fairness.** c_p = sum_{i in I_p} (z_i - zbar_p) x_i is agent p's own decision-boundary covariance, centred on
its own mean (the global mean zbar is not known to any agent). The constraints |c_p^T w| <= tau n_p / n imply
|sum_p c_p^T w| <= tau, but sum_p c_p differs from the global c by the between-agent term
sum_p n_p (zbar_p - zbar) xbar_p, so this is per-agent fairness, not the centralized constraint (it coincides
for one agent, which a test checks).
"""

from __future__ import annotations

import math
from typing import Any

import cvxpy as cp
import numpy as np

import privcvx as pc
from privcvx.errors import check_scalar, require_positive
from privcvx.privacy.accounting import PrivacyLedger
from privcvx.privacy.mechanisms import check_delta, check_epsilon
from privcvx.privacy.noise import agent_noise_sources
from privcvx.runtime.loop import resolve_seed
from problems.fair_logistic import (
    METHODS,
    Coefficients,
    Method,
    check_fair_data,
    perturb_coefficients,
    release_context,
)
from problems.logistic import split_indices


def distributed_fair_logistic(X: Any, y: Any, sensitive: Any, tau: float, agents: int = 4, method: Method = "pdfc",
                              epsilon: float | None = None, *, delta: float = 1e-5, attribute: int | None = None,
                              ratio: float = 0.5, lam: float = 1e-3, split_seed: int = 0,
                              seed: int | str | None = None
                              ) -> tuple[pc.DistributedProblem, list[Coefficients], list[PrivacyLedger]]:
    """The released fair logistic problem over ``agents`` iid shares, every agent's released coefficients, and
    every agent's ledger (its one release's charge; empty without noise).

    ``epsilon=None`` (or ``math.inf``) releases the exact coefficients (the Taylor surrogate without noise);
    the other arguments are those of `problems.fair_logistic.fair_logistic`. ``seed`` gives each agent its
    own noise stream, with the rules of ``pc.run``: None (default) is secure noise, an int warns
    ``ReproducibleNoiseWarning`` (``agent_noise_sources(resolve_seed(seed, private), agents)``).
    """
    X, y, z = check_fair_data(X, y, sensitive)
    n, d = X.shape
    tau = require_positive(tau, argument="tau", allow_zero=True)
    lam = require_positive(lam, argument="lam", allow_zero=True)
    method = check_scalar(method, argument="method", choices=METHODS)
    private = epsilon is not None and epsilon != math.inf
    if private:
        epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    noises = agent_noise_sources(resolve_seed(seed, private), agents)
    declared, released, ledgers = [], [], []
    for p, share in enumerate(split_indices(y.astype(int), agents, seed=split_seed)):
        exact = Coefficients.of(X[share], y[share], z[share])
        theta = exact
        context = release_context(f"agent-{p}", noises[p], exact.flat().size)
        if private:
            theta = Coefficients.from_flat(perturb_coefficients(exact.flat(), d, method, epsilon, delta, attribute,
                                                                ratio, context), d).repaired()
        released.append(theta)
        ledgers.append(context.ledger)
        w = cp.Variable(d)
        n_p = len(share)
        objective = (theta.a @ w + cp.quad_form(w, cp.psd_wrap(theta.M)) + lam * n_p / 2.0 * cp.sum_squares(w)) / n
        scale = max(float(np.linalg.norm(theta.c)), 1e-12)
        slab = [cp.abs((theta.c / scale) @ w) <= tau * n_p / n / scale]
        # L_p from the release: the Hessian is (2 M_p + lam n_p I) / n.
        smoothness = (2.0 * float(np.linalg.eigvalsh(theta.M).max()) + lam * n_p) / n
        declared.append(pc.Agent(objective, slab, shared=w, smoothness=smoothness))
    return pc.DistributedProblem(declared), released, ledgers
