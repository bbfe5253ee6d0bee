"""L2-regularized binary logistic regression with per-record gradients, for Q-DPSGD (Ding's thesis, Ch. 4).

Agent i holds the records (x_j, y_j), y_j in {-1, +1}, of one share of the data and minimizes the mean loss

    f_i(w) = (1/m_i) sum_j [ log(1 + exp(-y_j x_j^T w)) + (lam/2) ||w||^2 ],

declared both as a CVXPY expression and record by record (`RecordLoss`, the
[`SampleLoss`][privcvx.declared.SampleLoss] that clipping and Poisson subsampling need). Every row is scaled
to ||x||_2 <= 1, so the declared smoothness 1/4 + lam, of f_i and of every record's loss, holds for every dataset
(the logistic's second derivative is at most 1/4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cvxpy as cp
import numpy as np
from scipy.special import expit

import privcvx as pc
from privcvx.algorithms.privacy_audit import NeighbouringPair
from privcvx.errors import ParameterError, require_positive
from problems.logistic import scale_to_unit_ball, split_indices

#: Q-DPSGD's relation for this builder: one record added to (or removed from) one agent's share.
RELATION = "add_remove: one record added to one agent"


@dataclass(frozen=True)
class RecordLoss:
    """The records of one agent: rows ``X`` (||x|| <= 1), labels ``y`` in {-1, +1}, and lam."""

    X: np.ndarray
    y: np.ndarray
    lam: float

    @property
    def count(self) -> int:
        """m_i, the number of records."""
        return int(self.X.shape[0])

    def gradients(self, w: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """Per-record gradients -y_j sigmoid(-y_j x_j^T w) x_j + lam w, one row per index."""
        X, y = self.X[indices], self.y[indices]
        return (-y * expit(-y * (X @ w)))[:, None] * X + self.lam * w[None, :]

    def expression(self, w: cp.Variable) -> cp.Expression:
        """f_i as a DCP expression: the mean of the records' losses."""
        return cp.sum(cp.logistic(-cp.multiply(self.y, self.X @ w))) / self.count + self.lam / 2 * cp.sum_squares(w)


def binary_logistic(X: Any, y: Any, agents: int = 5, lam: float = 0.1, seed: int = 0,
                    bound: float | None = None) -> pc.DistributedProblem:
    """The distributed problem sum_i f_i(w) over ``agents`` iid shares of (X, y), each agent a ``SampledAgent``.

    ``y`` holds two distinct labels (mapped to -1, +1 in sorted order); ``bound`` adds the box |w| <= bound.
    Each agent declares its share's size public (``record_count``): the iid split's sizes follow from len(y) and
    ``agents`` alone, and QDPSGD's default normaliser B = q m_i uses them.
    """
    X = np.asarray(X, dtype=float)
    labels = np.asarray(y)
    if X.ndim != 2 or labels.shape != (X.shape[0],) or not np.all(np.isfinite(X)):
        raise ParameterError(f"X must be a finite n x d array and y n labels, got {X.shape} and {labels.shape}",
                             argument="X")
    classes = np.unique(labels)
    if classes.size != 2:
        raise ParameterError(f"needs exactly two labels, got {classes.tolist()[:5]}", argument="y")
    lam = require_positive(lam, argument="lam")
    signs = np.where(labels == classes[1], 1.0, -1.0)
    X = scale_to_unit_ball(X)
    shares = split_indices((signs > 0).astype(int), agents, seed=seed)
    return pc.DistributedProblem([_agent(RecordLoss(X[share], signs[share], lam), bound) for share in shares])


def _agent(loss: RecordLoss, bound: float | None) -> pc.SampledAgent:
    """The agent of one share: f_i as a mean of records, the box |w| <= bound if given, smoothness 1/4 + lam."""
    w = cp.Variable(loss.X.shape[1])
    box = [] if bound is None else [w >= -bound, w <= bound]
    return pc.SampledAgent(loss.expression(w), box, shared=w, samples=loss, declared=pc.Declared(
        record_count=loss.count, smoothness=0.25 + loss.lam, record_smoothness=0.25 + loss.lam, relation=RELATION))


def worst_case_pairs(X: Any, y: Any, *, agent: int = 0, **builder: Any) -> list[NeighbouringPair]:
    """Neighbours under `RELATION` (``privcvx.sensitivity_audit``): agent ``agent``'s records in D, and in D'
    one more record (e_1, +1), (e_1, -1) or (-e_1, +1), a unit feature vector, whose gradient -y sigmoid(-y x^T w) x
    + lam w has norm up to 1 + lam ||w||: at least the clipping norm wherever the clip binds.

    ``builder``: the other arguments of `binary_logistic`.
    """
    original = binary_logistic(X, y, **builder)
    records: RecordLoss = original.agents[agent].samples
    bound, unit = builder.get("bound"), np.eye(records.X.shape[1])[0]
    pairs = []
    for features, label in ((unit, 1.0), (unit, -1.0), (-unit, 1.0)):
        added = RecordLoss(np.vstack([records.X, features]), np.append(records.y, label), records.lam)
        agents = list(original.agents)
        agents[agent] = _agent(added, bound)
        pairs.append(NeighbouringPair(original, pc.DistributedProblem(agents), agent))
    return pairs
