"""Federated multiclass logistic regression: Eq. (30) of the paper, Sec. 6.2.

Agent p holds the samples (x_i, y_i), i in I_p, of one share of the data and minimizes its share
of the total loss over the local box W_p = [-u, u]^{J x K}:

    f_p(W) = (1/I) sum_{i in I_p} [ logsumexp_k (x_i^T W)_k - y_i^T W^T x_i ]        (Eq. (30))

with I = sum_p I_p the total number of samples, so f_p = (I_p / I) * (mean loss of agent p) and
sum_p f_p is the mean loss over all the data. There is no intercept and no regularizer.

Every sample is scaled to ||x||_2 <= 1 by dividing its row by max(1, ||x||_2); the gradient
sensitivities (Eqs. (18), (21), (31)) rely on that bound.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import cvxpy as cp
import numpy as np
from scipy.special import expit, logsumexp, softmax

import privcvx as pc
from privcvx.errors import DeclarationError, ParameterError, require_positive

Split = Literal["iid", "dirichlet"]
SensitivityKind = Literal["paper", "worst_case"]

_DIRICHLET_TRIES = 200


def scale_to_unit_ball(X: np.ndarray) -> np.ndarray:
    """Divide every row of ``X`` by ``max(1, ||row||_2)``, so that every sample has norm <= 1.

    Rows already inside the unit ball are left unchanged; nothing else is done to the data.
    """
    X = np.asarray(X, dtype=float)
    return X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]


def split_indices(codes: np.ndarray, agents: int, split: Split = "iid", alpha: float = 0.5,
                  seed: int = 0) -> list[np.ndarray]:
    """Split the sample indices ``0..len(codes)-1`` into ``agents`` non-empty shares.

    - ``"iid"``: a random permutation cut into equal shares (sizes differ by at most one).
    - ``"dirichlet"``: label-skewed shares. For every class c, proportions q_c ~ Dir(alpha * 1_P)
      decide how the (shuffled) samples of class c are dealt to the agents; a smaller ``alpha``
      gives each agent fewer classes. Draws that leave an agent empty are redrawn.

    ``codes`` are integer class codes 0..K-1. The result is deterministic for a given ``seed``.
    """
    codes = np.asarray(codes)
    n = codes.shape[0]
    if isinstance(agents, bool) or not isinstance(agents, int | np.integer) or agents < 1:
        raise ParameterError(f"must be a positive integer, got {agents!r}", argument="agents")
    if agents > n:
        raise ParameterError(f"{agents} agents but only {n} samples: every agent needs at least one sample",
                             argument="agents")
    alpha = require_positive(alpha, argument="alpha")
    rng = np.random.default_rng(seed)
    if split == "iid":
        return [np.sort(share) for share in np.array_split(rng.permutation(n), agents)]
    if split != "dirichlet":
        raise ParameterError(f"must be 'iid' or 'dirichlet', got {split!r}", argument="split")
    by_class = [np.flatnonzero(codes == c) for c in np.unique(codes)]
    for _ in range(_DIRICHLET_TRIES):
        parts: list[list[np.ndarray]] = [[] for _ in range(agents)]
        for members in by_class:
            members = rng.permutation(members)
            q = rng.dirichlet(np.full(agents, alpha))
            cuts = np.floor(np.cumsum(q)[:-1] * members.size).astype(int)
            for p, piece in enumerate(np.split(members, cuts)):
                parts[p].append(piece)
        shares = [np.sort(np.concatenate(piece)) for piece in parts]
        if min(share.size for share in shares) > 0:
            return shares
    raise ParameterError(f"alpha={alpha} left some of the {agents} agents without samples in "
                         f"{_DIRICHLET_TRIES} draws; use a larger alpha or fewer agents", argument="alpha")


def label_skew(codes: np.ndarray, shares: Sequence[np.ndarray]) -> float:
    """Mean total-variation distance between each share's label distribution and the global one."""
    codes = np.asarray(codes)
    K = int(codes.max()) + 1
    overall = np.bincount(codes, minlength=K) / codes.size
    return float(np.mean([0.5 * np.abs(np.bincount(codes[s], minlength=K) / s.size - overall).sum()
                          for s in shares]))


@dataclass(frozen=True)
class LogisticLoss:
    """One agent's term f_p of Eq. (30), with its numpy oracles.

    ``X`` (I_p x J) holds rows with ||x|| <= 1, ``Y`` (I_p x K) the one-hot labels and ``total``
    the number I of samples over all agents.
    """

    X: np.ndarray
    Y: np.ndarray
    total: int

    @property
    def shape(self) -> tuple[int, int]:
        """Shape (J, K) of the model W."""
        return (self.X.shape[1], self.Y.shape[1])

    def expression(self, W: cp.Expression) -> cp.Expression:
        """Eq. (30) as a DCP CVXPY expression in the J x K variable ``W``."""
        scores = self.X @ W
        return (cp.sum(cp.log_sum_exp(scores, axis=1)) - cp.sum(cp.multiply(self.Y, scores))) / self.total

    def value(self, W: np.ndarray) -> float:
        """Eq. (30) evaluated in numpy."""
        scores = self.X @ W
        return float((logsumexp(scores, axis=1).sum() - np.sum(self.Y * scores)) / self.total)

    def gradient(self, W: np.ndarray) -> np.ndarray:
        """Gradient of Eq. (30): (1/I) X_p^T (softmax(X_p W) - Y_p), shaped J x K like ``W``."""
        return self.X.T @ (softmax(self.X @ W, axis=1) - self.Y) / self.total

    def smoothness(self) -> float:
        """Lipschitz constant of the gradient: L_p = lambda_max(X_p^T X_p) / (2 I).

        The Hessian is (1/I) sum_i (diag(s_i) - s_i s_i^T) kron x_i x_i^T and the softmax block
        diag(s) - s s^T has eigenvalues <= 1/2, so H <= (1/(2I)) I_K kron X_p^T X_p. The bound is
        attained for K = 2 at W = 0 (s = (1/2, 1/2)); it is at most (I_p / I) * max ||x||^2 / 2.
        """
        return float(np.linalg.norm(self.X, 2) ** 2 / (2 * self.total))

    def paper_sensitivity(self, W: np.ndarray) -> tuple[float, float]:
        """Data-dependent (L1, L2) gradient sensitivity at ``W`` for adding one sample: Eq. (31) + renormalization.

        Adding (x*, y*) to agent p's data makes the total I+1, so the gradient changes by
        (grad l(W; x*, y*) - grad f_p(W; D)) / (I+1). Eq. (31) is the first term maximized over
        ||x*|| <= 1 and one-hot y* (the I in it is the total count, from the 1/I of Eq. (30)); it
        omits the second term, which we add by the triangle inequality. For the first term,
        ||x (s - e_k)^T||_F <= sqrt(2) (1 - s_k) and ||.||_1 <= 2 sqrt(J) (1 - s_k), and over the
        unit ball 1 - s_k(x) <= r_k = E_k / (1 + E_k) with E_k = sum_{j != k} exp(||w_j - w_k||_2).
        """
        J = self.X.shape[1]
        gaps = np.linalg.norm(W[:, :, None] - W[:, None, :], axis=0)
        np.fill_diagonal(gaps, -np.inf)
        escape = float(np.max(expit(logsumexp(gaps, axis=1))))
        g = self.gradient(W)
        n = self.total + 1
        return ((2 * np.sqrt(J) * escape + np.abs(g).sum()) / n,
                (np.sqrt(2) * escape + np.linalg.norm(g)) / n)

    def worst_case_sensitivity(self) -> tuple[float, float]:
        """Data-independent (L1, L2) gradient sensitivity for adding or removing one of agent p's samples.

        With ||x|| <= 1, every per-sample gradient x (s - y)^T has ||.||_F <= sqrt(2) and
        ||.||_1 <= 2 sqrt(J). Adding a sample changes the gradient by at most
        (1 + I_p/I) / (I+1) times that; removing one by (1 + (I_p-1)/(I-1)) / I. The counts I and
        I_p are treated as public. The larger factor is used.
        """
        J = self.X.shape[1]
        I, I_p = self.total, self.X.shape[0]
        factor = (1 + I_p / I) / (I + 1)
        if I > 1:
            factor = max(factor, (1 + (I_p - 1) / (I - 1)) / I)
        return (2 * np.sqrt(J) * factor, np.sqrt(2) * factor)


def _check_data(X: Any, y: Any, argument: str) -> tuple[np.ndarray, np.ndarray]:
    """Return (X, y) as a finite 2-D float array and a 1-D label array of matching length."""
    try:
        X = np.asarray(X, dtype=float)
    except (TypeError, ValueError) as exc:
        raise DeclarationError(f"features must be numeric: {exc}", argument=argument) from None
    y = np.asarray(y)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise DeclarationError(f"features must be a non-empty 2-D array, got shape {X.shape}", argument=argument)
    if not np.all(np.isfinite(X)):
        bad = int(np.flatnonzero(~np.all(np.isfinite(X), axis=1))[0])
        raise DeclarationError(f"features contain NaN or infinity (first in row {bad})", argument=argument)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise DeclarationError(f"labels must be 1-D with one label per row of the features: "
                               f"{X.shape[0]} rows, labels of shape {y.shape}", argument=argument)
    return X, y


def federated_logistic(X: Any, y: Any, agents: int = 10, split: Split = "iid", alpha: float = 0.5,
                       bound: float = 0.1, test: tuple[Any, Any] | None = None, seed: int = 0,
                       sensitivity: SensitivityKind = "paper") -> pc.DistributedProblem:
    """Build the federated multiclass logistic regression of Eq. (30) with W_p = [-bound, bound].

    Parameters
    ----------
    X, y:
        Features (I x J) and class labels (I,). Rows are scaled by 1 / max(1, ||x||_2).
    agents, split, alpha, seed:
        Number of agents and how the samples are dealt to them (see :func:`split_indices`).
    bound:
        The half-width u of the box W_p = [-u, u]^{J x K} (Sec. 6.2.1).
    test:
        Optional ``(X_test, y_test)``; adds a ``test_error`` metric (misclassified fraction of
        the global model w, reshaped to J x K in column-major order).
    sensitivity:
        ``"paper"``: the data-dependent callable W -> Sensitivity of Eq. (31) (plus the
        renormalization term, see :meth:`LogisticLoss.paper_sensitivity`); not DP in the strict
        sense, because the noise scale depends on private data. ``"worst_case"``: the constant of
        :meth:`LogisticLoss.worst_case_sensitivity`, which is.

    Returns
    -------
    A ``pc.DistributedProblem`` with one agent ``"agent-<p>"`` per share in full consensus on the
    J x K model. ``problem.info`` holds ``smoothness`` (L_p per agent), ``shares`` (row indices of
    each agent), ``losses`` (the :class:`LogisticLoss` of each agent), ``classes``, ``shape``,
    ``samples`` and ``sensitivity``.
    """
    X, y = _check_data(X, y, "X")
    bound = require_positive(bound, argument="bound")
    if sensitivity not in ("paper", "worst_case"):
        raise ParameterError(f"must be 'paper' or 'worst_case', got {sensitivity!r}", argument="sensitivity")
    classes, codes = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise DeclarationError(f"need at least two classes, got {classes.size}", argument="y")
    X = scale_to_unit_ball(X)
    Y = np.eye(classes.size)[codes]
    shares = split_indices(codes, agents, split, alpha, seed)
    shape = (X.shape[1], classes.size)

    agent_list, losses = [], []
    for p, rows in enumerate(shares):
        loss = LogisticLoss(X[rows], Y[rows], X.shape[0])
        W = cp.Variable(shape, name=f"W_{p}")
        agent_list.append(pc.Agent(loss.expression(W), [W <= bound, W >= -bound], shared=W,
                                   name=f"agent-{p}", gradient=loss.gradient,
                                   sensitivity=_declare(loss, sensitivity), smoothness=loss.smoothness()))
        losses.append(loss)

    metrics = {}
    if test is not None:
        metrics["test_error"] = _test_error(test, classes, shape)
    info = {"smoothness": [loss.smoothness() for loss in losses], "shares": shares, "losses": losses,
            "classes": classes, "shape": shape, "samples": X.shape[0], "sensitivity": sensitivity}
    return pc.DistributedProblem(agent_list, metrics=metrics, info=info)


def _declare(loss: LogisticLoss, kind: SensitivityKind) -> Any:
    """The ``sensitivity`` argument of agent p's ``pc.Agent`` for the chosen kind."""
    if kind == "worst_case":
        l1, l2 = loss.worst_case_sensitivity()
        return pc.Sensitivity(l1=l1, l2=l2)

    return functools.partial(_paper_sensitivity, loss)  # picklable, for worker processes


def _paper_sensitivity(loss: LogisticLoss, W: np.ndarray) -> pc.Sensitivity:
    l1, l2 = loss.paper_sensitivity(W)
    return pc.Sensitivity(l1=l1, l2=l2)


def _test_error(test: tuple[Any, Any], classes: np.ndarray, shape: tuple[int, int]) -> Any:
    """The ``test_error`` metric: fraction of test samples whose argmax score is not their label."""
    if not isinstance(test, tuple | list) or len(test) != 2:
        raise DeclarationError("must be a pair (X_test, y_test)", argument="test")
    X_test, y_test = _check_data(test[0], test[1], "test")
    if X_test.shape[1] != shape[0]:
        raise DeclarationError(f"test features have {X_test.shape[1]} columns, training has {shape[0]}",
                               argument="test")
    unknown = np.setdiff1d(y_test, classes)
    if unknown.size:
        raise DeclarationError(f"test labels {unknown[:5].tolist()} do not occur in y", argument="test")
    X_test = scale_to_unit_ball(X_test)
    codes = np.searchsorted(classes, y_test)

    def test_error(w: np.ndarray) -> float:
        W = np.reshape(w, shape, order="F")
        return float(np.mean(np.argmax(X_test @ W, axis=1) != codes))

    return test_error
