"""Decentralized L2-regularized binary logistic regression: the experiments of Ch. 3 of Ding's thesis.

J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness", PhD
dissertation, University of Houston, 2022, Eqs. (1)-(2) and Sec. 3.5.2. Agent i holds D_i and minimizes

    f_i(x) = (1/|D_i|) sum_n log(1 + exp(-y_n x^T z_n)) + (lam_hat / N) (1/2) ||x||^2,   y_n in {-1, +1}

with no constraint set. Preprocessing as the thesis (following Zhang et al.): every attribute is scaled so
that its largest absolute value is 1, then every sample so that its L2 norm is at most 1.

Declared on every agent (``agent.declared``, a `pc.Declared`), for the replace-one relation `RELATION` (one sample
of one agent replaced by any (z, y) with ||z|| <= 1, |D_i| public): the gradient sensitivity 2 / |D_i| (|L'| <= 1),
the smoothness 1/4 + lam_hat/N, the strong convexity lam_hat / N and the Hessian change c1 / |D_i| (c1 = 1/4, the
bound on L'' of the logistic loss), which PP-ADMM's objective perturbation needs.
"""

from __future__ import annotations

import inspect
from typing import Any

import cvxpy as cp
import numpy as np

import privcvx as pc
from privcvx.algorithms.privacy_audit import NeighbouringPair
from privcvx.errors import ParameterError, require_positive
from problems.logistic import scale_to_unit_ball, split_indices

#: sup L'' of the logistic loss L(u) = log(1 + e^-u): the thesis's c1.
LOGISTIC_CURVATURE = 0.25
#: The relation of the declared bounds: one sample of one agent replaced by any (z, y) with ||z|| <= 1.
RELATION = "replace_one: one sample of one agent replaced, ||z|| <= 1"


def thesis_preprocess(X: Any) -> np.ndarray:
    """Scale every attribute to max |value| = 1 (constant-zero columns dropped), then every row to norm <= 1."""
    X = np.asarray(X, dtype=float)
    scale = np.max(np.abs(X), axis=0)
    return scale_to_unit_ball(X[:, scale > 0] / scale[scale > 0])


def binary_labels(y: Any, positive: Any) -> np.ndarray:
    """+1 where ``y`` is in ``positive`` (a label or a collection of labels), -1 elsewhere."""
    members = np.atleast_1d(np.asarray(positive))
    labels = np.where(np.isin(np.asarray(y), members), 1.0, -1.0)
    if np.all(labels == labels[0]):
        raise ParameterError("every sample has the same label", argument="positive")
    return labels


def decentralized_logistic(X: Any, y: Any, agents: int = 5, lam: float = 1e-2, seed: int = 0,
                           test: tuple[Any, Any] | None = None) -> pc.DistributedProblem:
    """The consensus problem (2) of the thesis over ``agents`` iid shares of (X, y), y in {-1, +1}.

    ``X`` must already be preprocessed (`thesis_preprocess`; rows of norm <= 1 are checked). ``test``
    adds a ``test_error`` metric (misclassified fraction of the global model).
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    if X.ndim != 2 or y.shape != (X.shape[0],) or not np.all(np.isin(y, (-1.0, 1.0))):
        raise ParameterError("X must be n x d and y a vector of n labels in {-1, +1}", argument="y")
    if np.any(np.linalg.norm(X, axis=1) > 1.0 + 1e-12):
        raise ParameterError("every sample needs ||z||_2 <= 1 (thesis_preprocess)", argument="X")
    lam = require_positive(lam, argument="lam")
    shares = split_indices(np.zeros(X.shape[0], dtype=int), agents, "iid", seed=seed)
    declared = []
    for p, rows in enumerate(shares):
        x = cp.Variable(X.shape[1], name=f"x_{p}")
        n = rows.size
        margins = cp.multiply(y[rows], X[rows] @ x)
        objective = cp.sum(cp.logistic(-margins)) / n + (lam / agents) / 2.0 * cp.sum_squares(x)
        declared.append(pc.Agent(objective, shared=x, name=f"agent-{p}", declared=pc.Declared(
            sensitivity=pc.Sensitivity(l2=2.0 / n), smoothness=LOGISTIC_CURVATURE + lam / agents,
            strong_convexity=lam / agents, hessian_change=LOGISTIC_CURVATURE / n, relation=RELATION)))
    metrics = {}
    if test is not None:
        X_test, y_test = np.asarray(test[0], dtype=float), np.asarray(test[1], dtype=float)
        metrics["test_error"] = lambda w: float(np.mean(np.sign(X_test @ w) != y_test))
    return pc.DistributedProblem(declared, metrics=metrics, info={"shares": shares, "lam": lam})


def worst_case_pairs(X: Any, y: Any, *, agent: int = 0, **builder: Any) -> list[NeighbouringPair]:
    """Neighbours under `RELATION` (``privcvx.sensitivity_audit``): agent ``agent``'s first sample (e_1, +1) in
    D, replaced in D' by (e_2, -1) or (e_1, -1): the loss gradient -(1/|D_i|) y sigmoid(-y x^T z) z moves by up to
    sqrt(2) / |D_i| or 1 / |D_i|, against the declared 2 / |D_i|.

    ``builder``: the other arguments of `decentralized_logistic`; the split is kept.
    """
    X, y = np.array(X, dtype=float), np.array(y, dtype=float)
    options = inspect.signature(decentralized_logistic).bind_partial(X, y, **builder)
    options.apply_defaults()
    row = split_indices(np.zeros(X.shape[0], dtype=int), options.arguments["agents"], "iid",
                        seed=options.arguments["seed"])[agent][0]  # decentralized_logistic's split
    unit = np.eye(X.shape[1])[:2]
    problems = []
    for features, label in ((unit[0], 1.0), (unit[1], -1.0), (unit[0], -1.0)):
        X[row], y[row] = features, label
        problems.append(decentralized_logistic(X, y, **builder))
    return [NeighbouringPair(problems[0], neighbour, agent) for neighbour in problems[1:]]
