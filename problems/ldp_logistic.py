"""Regularized logistic regression for local DP with random aggregators (Xiao, Ye & Devadas, Example (a)).

Agent i holds b_i samples (z_j, L_j) and minimizes

    f_i(x) = (1/b_i) sum_j log(1 + exp(-L_j x^T z_j)) + ||x||^2 / 2.

The releases of `RandomizedADMM` are calibrated to B_inf, the largest change of one
gradient coordinate when one sample is replaced (Theorem 2.2; the digest's erratum 3). It follows from the loss
and the declared public domain of one sample, never from the data:

* labels L in ``labels`` (the library's {-1, +1} by default; the paper's B_inf = 1/b_i holds for {0, 1});
* feature coordinates z_l in ``feature_range`` (``load_adult``: [0, 1]) and rows of l2 norm <= ``row_norm`` (1).

The data term's gradient is -(1/b_i) u z with u = L sigmoid(-L x^T z), which lies strictly between 0 and L.
So the l-th coordinate u z_l ranges over the products of [min(L, 0), max(L, 0)] (over the labels) and
``feature_range``, and B_inf = (largest - smallest product) / b_i: 2/b_i for ±1 labels and features in [0, 1].
The regularizer does not depend on the data. The l2 change is at most 2 max|L| ``row_norm`` / b_i, the declared
``pc.Sensitivity``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cvxpy as cp
import numpy as np

import privcvx as pc
from privcvx.algorithms.privacy_audit import NeighbouringPair
from privcvx.errors import ParameterError, check_int, require_positive

#: sup L'' of the logistic loss: the declared smoothness of f_i is this times row_norm^2, plus 1 (the regularizer).
LOGISTIC_CURVATURE = 0.25
#: The neighbouring relation of B_inf (Theorem 2.2): one sample of one agent replaced by any sample of the domain.
RELATION = "replace_one: one sample of one agent replaced within the declared domain"


def coordinate_sensitivity(samples: int, labels: Sequence[float] = (-1.0, 1.0),
                           feature_range: tuple[float, float] = (0.0, 1.0)) -> float:
    """B_inf = sup |grad_l f_i(x; D) - grad_l f_i(x; D')| over x, l and D, D' differing in one sample (above)."""
    samples = check_int(samples, argument="samples")
    low, high = (float(v) for v in feature_range)
    if not (np.isfinite(low) and np.isfinite(high) and low <= high):
        raise ParameterError(f"must be a finite (low, high) with low <= high, got {feature_range!r}",
                             argument="feature_range")
    values = np.asarray(labels, dtype=float)
    if values.ndim != 1 or values.size < 2 or not np.all(np.isfinite(values)):
        raise ParameterError(f"must be at least two finite labels, got {labels!r}", argument="labels")
    weights = (min(values.min(), 0.0), max(values.max(), 0.0))  # the closure of the range of L sigmoid(-L m)
    products = [u * z for u in weights for z in (low, high)]
    return (max(products) - min(products)) / samples


def ldp_logistic(X: Any, y: Any, *, agents: int = 10, samples: int = 100, seed: int = 0,
                 labels: Sequence[float] = (-1.0, 1.0), feature_range: tuple[float, float] = (0.0, 1.0),
                 row_norm: float = 1.0) -> pc.DistributedProblem:
    """``agents`` agents with ``samples`` distinct random rows of (X, y) each, drawn with ``seed``.

    ``labels``, ``feature_range`` and ``row_norm`` declare the public domain of one sample (checked on the data;
    ``problem.info`` repeats them); every agent declares the B_inf they imply (`coordinate_sensitivity`), for
    ``RandomizedADMM``, as its ``declared.coordinate_sensitivity`` (`pc.Declared`, for `RELATION`).
    """
    X, y = np.asarray(X, dtype=float), np.asarray(y, dtype=float)
    agents, samples = check_int(agents, argument="agents"), check_int(samples, argument="samples")
    row_norm = require_positive(row_norm, argument="row_norm")
    b_inf = coordinate_sensitivity(samples, labels, feature_range)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ParameterError(f"X must be n x d and y n labels, got {X.shape} and {y.shape}", argument="X")
    if agents * samples > len(y):
        raise ParameterError(f"{agents} agents x {samples} samples need {agents * samples} rows, got {len(y)}",
                             argument="samples")
    if not np.all(np.isin(y, np.asarray(labels, dtype=float))):
        raise ParameterError(f"every label must be one of the declared labels {list(labels)}", argument="y")
    low, high = feature_range
    if not (np.all(np.isfinite(X)) and np.all((X >= low) & (X <= high))
            and np.all(np.linalg.norm(X, axis=1) <= row_norm * (1 + 1e-12))):
        raise ParameterError(f"every feature must lie in {tuple(feature_range)} and every row have l2 norm <= "
                             f"{row_norm} (the declared domain)", argument="X")
    picks = np.random.default_rng(seed).choice(len(y), size=agents * samples, replace=False)
    declared = []
    for p, rows in enumerate(picks.reshape(agents, samples)):
        x = cp.Variable(X.shape[1], name=f"x_{p}")
        loss = cp.sum(cp.logistic(-cp.multiply(y[rows], X[rows] @ x))) / samples + cp.sum_squares(x) / 2
        l2 = 2.0 * float(np.max(np.abs(labels))) * row_norm / samples
        declared.append(pc.Agent(loss, shared=x, name=f"agent-{p}", declared=pc.Declared(
            sensitivity=pc.Sensitivity(l2=l2), coordinate_sensitivity=b_inf, relation=RELATION,
            smoothness=LOGISTIC_CURVATURE * row_norm ** 2 * float(np.max(np.abs(labels))) ** 2 + 1.0)))
    info = {"labels": [float(v) for v in labels], "feature_range": (float(low), float(high)), "row_norm": row_norm}
    return pc.DistributedProblem(declared, info=info)



def worst_case_pairs(X: Any, y: Any, *, agent: int = 0, **builder: Any) -> list[NeighbouringPair]:
    """Neighbours under `RELATION` (``privcvx.sensitivity_audit``): agent ``agent``'s first sample set to
    (high e_1, smallest label) in D and replaced in D' by (high e_2, largest label) or (high e_1, largest label),
    features ``low`` elsewhere (``feature_range`` = (low, high)). Its gradient term -(1/b) L sigmoid(-L x^T z) z then
    moves between the extremes of the products of the module docstring.

    ``builder``: the other arguments of `ldp_logistic`; the rows each agent draws are kept.
    """
    X, y = np.array(X, dtype=float), np.array(y, dtype=float)
    options = {**ldp_logistic.__kwdefaults__, **builder}
    samples, labels = options["samples"], np.asarray(options["labels"], dtype=float)
    low, high = options["feature_range"]
    row = np.random.default_rng(options["seed"]).choice(len(y), size=options["agents"] * samples,
                                                        replace=False)[agent * samples]  # ldp_logistic's draw
    corner = [np.where(np.arange(X.shape[1]) == k, float(high), float(low)) for k in (0, 1)]
    problems = []
    for features, label in ((corner[0], labels.min()), (corner[1], labels.max()), (corner[0], labels.max())):
        X[row], y[row] = features, label
        problems.append(ldp_logistic(X, y, **builder))
    return [NeighbouringPair(problems[0], neighbour, agent) for neighbour in problems[1:]]
