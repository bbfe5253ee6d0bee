"""The nonconvex test problem of the DPP^2 paper (Ou, Wang, Liu & Lu, arXiv 2511.02283, Sec. VI).

Node i holds m labelled samples (z_is, y_is), y in {-1, 1}, and

    f_i(x) = (1/m) sum_s log(1 + exp(-y_is x^T z_is)) + sum_t lambda omega [x]_t^2 / (1 + omega [x]_t^2),

a logistic loss with a smooth nonconvex regularizer. The regularizer is computed as lambda (1 - 1/(1 + omega x^2)),
which cannot overflow, and the loss through ``cp.logistic`` / ``np.logaddexp``. Each agent declares:

* its gradient oracle (the objective is not convex, so privcvx needs one: only gradient-only methods run it);
* ``smoothness`` M_i = lambda_max(Z_i^T Z_i) / (4m) + 2 lambda omega (the regularizer's curvature peaks at 0);
* ``sensitivity`` l2 = 2 B / m: the delta of delta-adjacency for replacing one sample whose features have norm
  <= B, as the gradient of the regularizer does not depend on the data. B (``feature_bound``) is a required,
  declared public value: it must not be read off the private data (a largest norm is a function of one record),
  and the builder refuses data outside it.

`paper_data` draws the random data of the experiment (the paper does not give its distribution: Gaussian
features, uniform labels) and scales the features so that Mbar = max_i M_i equals the paper's 5.03.
"""

from __future__ import annotations

from collections.abc import Sequence

import cvxpy as cp
import numpy as np
from scipy.special import expit

import privcvx as pc
from privcvx.algorithms.privacy_audit import NeighbouringPair
from privcvx.errors import ParameterError, require_positive

#: The paper's Mbar.
PAPER_SMOOTHNESS = 5.03
#: The public feature-norm bound B the experiment declares (the paper gives none): `paper_data` clips rows to
#: it (at the paper's sizes its rows have norm at most 21.74 for seeds 0-4, so none is clipped there).
PAPER_FEATURE_BOUND = 22.0
#: The delta-adjacency of the DPP^2 paper: one sample of one node replaced by any sample with feature norm <= B.
RELATION = "replace_one: one sample of one node replaced, feature norm <= feature_bound"


def _gradient(z: np.ndarray, y: np.ndarray, lam: float, omega: float):
    m = len(y)

    def gradient(x: np.ndarray) -> np.ndarray:
        loss = -(z.T @ (y * expit(-y * (z @ x)))) / m
        return loss + lam * 2.0 * omega * x / (1.0 + omega * x * x) ** 2

    return gradient


def local_smoothness(z: np.ndarray, lam: float = 0.001, omega: float = 1.0) -> float:
    """M_i = lambda_max(Z^T Z) / (4m) + 2 lambda omega."""
    return float(np.linalg.eigvalsh(z.T @ z)[-1]) / (4 * len(z)) + 2.0 * lam * omega


def nonconvex_logistic(features: Sequence[np.ndarray], labels: Sequence[np.ndarray], *, feature_bound: float,
                       lam: float = 0.001, omega: float = 1.0) -> pc.DistributedProblem:
    """One agent per (Z_i, y_i): the nonconvex regularized logistic problem, full consensus on x in R^d.

    ``feature_bound``: the declared public bound B on every sample's feature norm (the adjacency delta = 2 B / m).
    """
    bound = require_positive(feature_bound, argument="feature_bound")
    agents = []
    for i, (z, y) in enumerate(zip(features, labels, strict=True)):
        z, y = np.asarray(z, dtype=float), np.asarray(y, dtype=float)
        if z.ndim != 2 or not np.all(np.linalg.norm(z, axis=1) <= bound):
            raise ParameterError(f"every sample needs a feature norm <= the declared feature_bound {bound:g}",
                                 agent=f"node-{i:02d}", argument="feature_bound")
        x = cp.Variable(z.shape[1], name=f"x{i}")
        loss = cp.sum(cp.logistic(-cp.multiply(y, z @ x))) / len(y)
        regularizer = lam * (z.shape[1] - cp.sum(cp.inv_pos(1.0 + omega * cp.square(x))))
        agents.append(pc.Agent(loss + regularizer, shared=x, name=f"node-{i:02d}", gradient=_gradient(z, y, lam, omega),
                               declared=pc.Declared(smoothness=local_smoothness(z, lam, omega), relation=RELATION,
                                                    sensitivity=pc.Sensitivity(l2=2.0 * bound / len(y)))))
    return pc.DistributedProblem(agents, info={"lam": lam, "omega": omega, "feature_bound": bound})


def paper_data(nodes: int = 50, samples: int = 200, dim: int = 10, *, smoothness: float = PAPER_SMOOTHNESS,
               lam: float = 0.001, omega: float = 1.0, seed: int = 0,
               feature_bound: float = PAPER_FEATURE_BOUND) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Gaussian features and uniform labels, the features scaled so that max_i M_i = ``smoothness``, then every row
    of norm above ``feature_bound`` scaled down to it (the bound to declare to `nonconvex_logistic`)."""
    rng = np.random.default_rng(seed)
    features = [rng.standard_normal((samples, dim)) for _ in range(nodes)]
    labels = [rng.choice([-1.0, 1.0], samples) for _ in range(nodes)]
    raw = max(local_smoothness(z, 0.0) for z in features)
    scale = np.sqrt((smoothness - 2.0 * lam * omega) / raw)
    scaled = [scale * z for z in features]
    return [z / np.maximum(1.0, np.linalg.norm(z, axis=1) / feature_bound)[:, None] for z in scaled], labels



def worst_case_pairs(features: Sequence[np.ndarray], labels: Sequence[np.ndarray], *, feature_bound: float,
                     agent: int = 0, **builder: float) -> list[NeighbouringPair]:
    """Neighbours under `RELATION` (``privcvx.sensitivity_audit``): node ``agent``'s first sample (B e_1, +1)
    in D, replaced in D' by (B e_2, -1) or (B e_1, -1). The loss gradient -(1/m) y sigmoid(-y x^T z) z then moves by
    up to sqrt(2) B / m (orthogonal y z) or B / m (opposite y z), against the declared 2 B / m.

    ``builder``: ``lam`` and ``omega`` of `nonconvex_logistic`.
    """
    unit = np.eye(np.asarray(features[agent]).shape[1])[:2] * feature_bound
    problems = []
    for row, label in ((unit[0], 1.0), (unit[1], -1.0), (unit[0], -1.0)):
        z, y = [np.array(f, dtype=float) for f in features], [np.array(v, dtype=float) for v in labels]
        z[agent][0], y[agent][0] = row, label
        problems.append(nonconvex_logistic(z, y, feature_bound=feature_bound, **builder))
    return [NeighbouringPair(problems[0], neighbour, agent) for neighbour in problems[1:]]
