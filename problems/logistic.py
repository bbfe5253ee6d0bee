"""Federated multiclass logistic regression: Eq. (30) of the paper, Sec. 6.2.

Agent p holds the samples (x_i, y_i), i in I_p, of one share of the data and minimizes its weighted
cross-entropy over the local box W_p = [-u, u]^{J x K}:

    f_p(W) = (1/n_p) sum_{i in I_p} [ logsumexp_k (x_i^T W)_k - y_i^T W^T x_i ]

with the normalizer n_p = I = sum_p I_p (``weighting="paper"``, Eq. (30): f_p = (I_p / I) * (mean loss
of agent p) and sum_p f_p is the mean loss over all the data) or n_p = I_p (``weighting="agent"``: f_p
is agent p's own mean loss, and depends on no other agent's count). There is no intercept and no
regularizer.

Every sample is scaled to ||x||_2 <= 1 by dividing its row by max(1, ||x||_2). The declared smoothness
and gradient sensitivities (Eqs. (18), (21), (31)) rely on that bound and on nothing else of the data:
they hold for every dataset of the builder's neighbouring relation (``relation=``). The derivations
are in docs/problems.md.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import cvxpy as cp
import numpy as np
from scipy.special import expit, logsumexp

import privcvx as pc
from privcvx.algorithms.privacy_audit import NeighbouringPair
from privcvx.errors import DeclarationError, ParameterError, check_int, check_scalar, require_positive

Split = Literal["iid", "dirichlet"]
SensitivityKind = Literal["paper", "worst_case"]
Relation = Literal["replace_one", "add_remove"]
Weighting = Literal["paper", "agent"]

#: The weighting each relation uses when none is given: Eq. (30) where the counts are fixed by the
#: relation, the agent's own count where adding a sample changes them.
DEFAULT_WEIGHTING: dict[str, Weighting] = {"replace_one": "paper", "add_remove": "agent"}
#: What each ``relation`` declares (every agent's ``declared.relation``).
RELATIONS = {"replace_one": "replace_one: one sample of one agent replaced by any (x, y) with ||x|| <= 1",
             "add_remove": "add_remove: one sample added to or removed from one agent"}

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
    agents = check_int(agents, argument="agents")
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
    """One agent's term f_p (Eq. (30) with normalizer n_p), with its numpy oracles and declared bounds.

    ``X`` (I_p x J) holds rows with ||x|| <= 1, ``Y`` (I_p x K) the one-hot labels and ``normalizer``
    the count n_p that divides the sum: the total I (Eq. (30)) or the agent's own I_p.
    """

    X: np.ndarray
    Y: np.ndarray
    normalizer: int

    def __post_init__(self) -> None:
        """The data are held transposed, X_p^T (J x I_p) and Y_p^T (K x I_p), as the C-order arrays CVXPY holds for
        them (its constants copy what they are given); ``X`` and ``Y`` become their transposes, views of the same
        memory. So the agent's data are kept once, and the gradient, f_p and the f_p compiled for the diagnostics
        (`expression`) all compute the scores as S = W^T X_p^T (K x I_p), one row per class: the softmax's reductions
        over the classes run across K rows of I_p entries instead of along I_p rows of K entries, and S @ X_p is
        G^T, whose C-order entries are vec(G) in the column-major order of z_p (no copy to reorder it). On digits a
        gradient takes 18 against 26 us in the layout X_p W (docs/performance.md, "The logistic gradient's
        layout")."""
        constants = (cp.Constant(np.asarray(self.X, dtype=float).T), cp.Constant(np.asarray(self.Y, dtype=float).T))
        object.__setattr__(self, "_constants", constants)
        self._hold((constants[0].value, constants[1].value))

    def _hold(self, transposed: tuple[np.ndarray, np.ndarray]) -> None:
        """Keep X_p^T and Y_p^T (read by the gradient at every local update) and make ``X`` and ``Y`` their views."""
        object.__setattr__(self, "_transposed", transposed)
        object.__setattr__(self, "X", transposed[0].T)
        object.__setattr__(self, "Y", transposed[1].T)

    def __getstate__(self) -> dict[str, Any]:
        """For pickling (the process and Ray backends send the agents): without ``X`` and ``Y``, which pickle would
        write as arrays of their own, a second copy of the data; `__setstate__` makes them views again."""
        return {key: value for key, value in self.__dict__.items() if key not in ("X", "Y")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._hold(state["_transposed"])

    @property
    def shape(self) -> tuple[int, int]:
        """Shape (J, K) of the model W."""
        return (self.X.shape[1], self.Y.shape[1])

    def expression(self, W: cp.Expression) -> cp.Expression:
        """f_p as a DCP CVXPY expression in the J x K variable ``W``: the log-sum-exp over the classes (the rows of
        S = W^T X_p^T) of every sample, less <Y_p^T, S>, over n_p."""
        XT, YT = self._constants  # X^T and Y^T themselves (`__post_init__`)
        scores = W.T @ XT
        return (cp.sum(cp.log_sum_exp(scores, axis=0)) - cp.sum(cp.multiply(YT, scores))) / self.normalizer

    def value(self, W: np.ndarray) -> float:
        """f_p evaluated in numpy."""
        XT, YT = self._transposed
        scores = W.T @ XT
        return float((logsumexp(scores, axis=0).sum() - np.sum(YT * scores)) / self.normalizer)

    def gradient(self, W: np.ndarray) -> np.ndarray:
        """Gradient of f_p: (1/n_p) X_p^T (softmax(X_p W) - Y_p), shaped J x K like ``W``.

        Computed transposed (`__post_init__`): S = W^T X_p^T, each column shifted by its maximum, exp, divided by
        its sum (``scipy.special.softmax``'s arithmetic over the classes, without its dispatch), less Y_p^T, then
        G^T = S X_p / n_p; G is returned as the transpose of G^T (a column-major view of the new array). Each step
        overwrites the one array of scores."""
        XT, YT = self._transposed
        scores = W.T @ XT
        scores -= np.maximum.reduce(scores, axis=0)
        np.exp(scores, out=scores)
        scores /= np.add.reduce(scores, axis=0)  # ndarray.sum without its wrapper
        scores -= YT
        transposed = scores @ self.X
        transposed /= self.normalizer
        return transposed.T

    def smoothness(self) -> float:
        """Data-independent Lipschitz constant of the gradient: L_p = I_p / (2 n_p).

        The Hessian of f_p in vec(W) (column-major) is (1/n_p) sum_i (diag(s_i) - s_i s_i^T) kron x_i x_i^T
        with s_i = softmax(W^T x_i). For any v, v^T (diag(s) - s s^T) v is the variance of v under the
        distribution s, at most (max v - min v)^2 / 4 <= ||v||^2 / 2 (Popoviciu), so the softmax block has
        eigenvalues <= 1/2, and x x^T has eigenvalue ||x||^2 <= 1. Each term is therefore <= 1/2 in the
        Loewner order and H <= I_p / (2 n_p): 1/2 for ``weighting="agent"``, I_p / (2I) for Eq. (30). It
        reads only the counts, never X_p; it is attained by one sample with ||x|| = 1 and K = 2 at W = 0.
        """
        return self.X.shape[0] / (2.0 * self.normalizer)

    def worst_case_sensitivity(self) -> tuple[float, float]:
        """Data-independent (L1, L2) gradient sensitivity (Eqs. (18), (21)): (4 sqrt(J), 2 sqrt(2)) / n_p.

        A per-sample gradient G = x (s - e_k)^T has ||G||_F = ||x||_2 ||s - e_k||_2 <= sqrt(2) (1 - s_k),
        since ||s - e_k||_2^2 = (1 - s_k)^2 + sum_{j != k} s_j^2 <= 2 (1 - s_k)^2, and
        ||G||_1 = ||x||_1 ||s - e_k||_1 <= 2 sqrt(J) (1 - s_k). Replacing sample i by (x*, y*) changes the
        gradient by (G* - G_i) / n_p (the counts stay), at most twice the per-sample bound over n_p. With
        n_p = I_p (``weighting="agent"``), adding a sample changes it by (G* - g_bar) / (I_p + 1), g_bar the
        mean of the I_p per-sample gradients, and removing sample i by (g_bar - G_i) / (I_p - 1) =
        sum_{j != i} (G_j - G_i) / (I_p (I_p - 1)): the renormalization term g_bar is what the paper's
        Eq. (31) drops. Both are at most 2 sqrt(2) / I_p in L2 (removing the only sample: sqrt(2)). So the
        bound holds under replace-one for either normalizer and under add/remove for n_p = I_p, the
        combinations `federated_logistic` allows.
        """
        J = self.X.shape[1]
        return (4 * np.sqrt(J) / self.normalizer, 2 * np.sqrt(2) / self.normalizer)

    def paper_sensitivity(self, W: np.ndarray) -> tuple[float, float]:
        """(L1, L2) gradient sensitivity at the iterate ``W``, in the manner of Eq. (31).

        Eq. (31) maximizes the added sample's term x* (s(W^T x*) - y*)^T / (I + 1) over ||x*|| <= 1 and
        one-hot y* at the iterate z_p^{t,e}. Over the unit ball 1 - s_k(x) <= r_k = E_k / (1 + E_k) with
        E_k = sum_{j != k} exp(||w_j - w_k||_2), so every per-sample gradient, the new one and those of the
        agent's data alike, obeys the bounds of `worst_case_sensitivity` times r = max_k r_k <= 1;
        the same two-term argument gives that bound times r. It reads the data only through ``W``.
        """
        gaps = np.linalg.norm(W[:, :, None] - W[:, None, :], axis=0)
        np.fill_diagonal(gaps, -np.inf)
        escape = float(np.max(expit(logsumexp(gaps, axis=1))))
        l1, l2 = self.worst_case_sensitivity()
        return (escape * l1, escape * l2)


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


def _check_shares(shares: Sequence[Any], n: int) -> list[np.ndarray]:
    """``shares`` as sorted integer index arrays: non-empty, and together every row 0..n-1 exactly once."""
    parts = [np.asarray(share) for share in shares]
    if not parts or any(part.ndim != 1 or part.size == 0 or part.dtype.kind not in "iu" for part in parts):
        raise ParameterError("must be a non-empty list of non-empty 1-D integer index arrays, one per agent",
                             argument="shares")
    if not np.array_equal(np.sort(np.concatenate(parts)), np.arange(n)):
        raise ParameterError(f"must hold every row index 0..{n - 1} exactly once", argument="shares")
    return [np.sort(part) for part in parts]


def _check_classes(y: np.ndarray, classes: Any) -> tuple[np.ndarray, np.ndarray]:
    """The sorted public label set and the class code of every label."""
    argument = "y" if classes is None else "classes"
    classes = np.unique(y if classes is None else np.asarray(classes))
    if classes.size < 2:
        raise DeclarationError(f"need at least two classes, got {classes.size}", argument=argument)
    unknown = np.setdiff1d(y, classes)
    if unknown.size:
        raise DeclarationError(f"labels {unknown[:5].tolist()} are not among the classes", argument=argument)
    return classes, np.searchsorted(classes, y)


def federated_logistic(X: Any, y: Any, agents: int = 10, split: Split = "iid", alpha: float = 0.5,
                       bound: float = 0.1, test: tuple[Any, Any] | None = None, seed: int = 0,
                       sensitivity: SensitivityKind = "worst_case", relation: Relation = "replace_one",
                       weighting: Weighting | None = None, shares: Sequence[Any] | None = None,
                       classes: Any = None) -> pc.DistributedProblem:
    """Build the federated multiclass logistic regression of Eq. (30) with W_p = [-bound, bound].

    Parameters
    ----------
    X, y:
        Features (I x J) and class labels (I,). Rows are scaled by 1 / max(1, ||x||_2).
    agents, split, alpha, seed:
        Number of agents and how the samples are dealt to them (see `split_indices`).
    bound:
        The half-width u of the box W_p = [-u, u]^{J x K} (Sec. 6.2.1).
    test:
        Optional ``(X_test, y_test)``; adds a ``test_error`` metric (misclassified fraction of
        the global model w, reshaped to J x K in column-major order).
    sensitivity:
        ``"paper"``: the callable W -> Sensitivity of `LogisticLoss.paper_sensitivity`, Eq. (31)
        at the iterate; not DP in the strict sense, because the noise scale depends on the unreleased
        iterates, hence on private data: nominal, on request only (a ``pc.NominalPrivacyWarning``; the
        privacy table labels its epsilon "nominal"). ``"worst_case"`` (default): the constant of
        `LogisticLoss.worst_case_sensitivity`, which is DP.
    relation:
        The neighbouring relation every declared bound holds for. ``"replace_one"`` (default): the
        paper's Def. 2.1, one sample of one agent replaced by any (x*, y*) with ||x*|| <= 1; the counts
        I and I_p are the same for both datasets, so they are public. ``"add_remove"``: one sample added
        to or removed from one agent; the counts then differ and the agent's own count is treated as
        public (docs/problems.md).
    weighting:
        The normalizer n_p of f_p: ``"paper"`` (n_p = I, Eq. (30)) or ``"agent"`` (n_p = I_p). Default:
        ``"paper"`` under replace-one, ``"agent"`` under add/remove. Add/remove with ``"paper"`` raises:
        adding a sample to agent p changes I and hence every agent's objective, a change no agent's
        sensitivity (and no per-agent ledger) covers.
    shares:
        Optional explicit row indices of each agent (a partition of 0..I-1); then ``agents``, ``split``,
        ``alpha`` and ``seed`` are not used.
    classes:
        Optional public label set (default: the labels in ``y``, which are then treated as public).

    Returns
    -------
    A ``pc.DistributedProblem`` with one agent ``"agent-<p>"`` per share in full consensus on the
    J x K model, each declaring (``agent.declared``, a `pc.Declared`) its ``smoothness``, ``sensitivity``
    and ``relation`` (`RELATIONS`). ``problem.info`` holds the builder's data and settings: ``shares`` (row
    indices of each agent), ``losses`` (the `LogisticLoss` of each agent), ``classes``, ``shape``, ``samples``,
    ``sensitivity`` (the kind) and ``weighting``.
    """
    X, y = _check_data(X, y, "X")
    bound = require_positive(bound, argument="bound")
    sensitivity = check_scalar(sensitivity, argument="sensitivity", choices=("paper", "worst_case"))
    if sensitivity == "paper":
        warnings.warn(f'sensitivity="paper" is nominal: {NOMINAL_PAPER}; sensitivity="worst_case" (the default) is '
                      "valid", pc.NominalPrivacyWarning, stacklevel=2)
    relation = check_scalar(relation, argument="relation", choices=tuple(DEFAULT_WEIGHTING))
    weighting = check_scalar(DEFAULT_WEIGHTING[relation] if weighting is None else weighting, argument="weighting",
                             choices=("paper", "agent"))
    if relation == "add_remove" and weighting == "paper":
        raise ParameterError("the paper's 1/I weighting couples the agents under add/remove: adding a sample "
                             "to one agent changes I and every agent's gradient; use weighting='agent' or "
                             "relation='replace_one'", argument="weighting")
    classes, codes = _check_classes(y, classes)
    X = scale_to_unit_ball(X)
    Y = np.eye(classes.size)[codes]
    shares = split_indices(codes, agents, split, alpha, seed) if shares is None else _check_shares(shares, X.shape[0])
    shape = (X.shape[1], classes.size)

    agent_list, losses = [], []
    for p, rows in enumerate(shares):
        loss = LogisticLoss(X[rows], Y[rows], X.shape[0] if weighting == "paper" else rows.size)
        W = cp.Variable(shape, name=f"W_{p}")
        agent_list.append(pc.Agent(loss.expression(W), [W <= bound, W >= -bound], shared=W,
                                   name=f"agent-{p}", gradient=loss.gradient, declared=pc.Declared(
                                       sensitivity=_declare(loss, sensitivity), smoothness=loss.smoothness(),
                                       relation=RELATIONS[relation])))
        losses.append(loss)

    metrics = {}
    if test is not None:
        metrics["test_error"] = _test_error(test, classes, shape)
    info = {"shares": shares, "losses": losses, "classes": classes, "shape": shape, "samples": X.shape[0],
            "sensitivity": sensitivity, "weighting": weighting}
    return pc.DistributedProblem(agent_list, metrics=metrics, info=info)


def _declare(loss: LogisticLoss, kind: SensitivityKind) -> Any:
    """The ``sensitivity`` argument of agent p's ``pc.Agent`` for the chosen kind."""
    if kind == "worst_case":
        l1, l2 = loss.worst_case_sensitivity()
        return pc.Sensitivity(l1=l1, l2=l2)

    return functools.partial(_paper_sensitivity, loss)  # picklable, for worker processes


#: Why ``sensitivity="paper"`` is nominal (the privacy table's ``calibration`` column).
NOMINAL_PAPER = ("Eq. (31) at the unreleased iterate: the noise scale depends on private data, so the epsilon "
                 "is not a DP guarantee")


def _paper_sensitivity(loss: LogisticLoss, W: np.ndarray) -> pc.Sensitivity:
    l1, l2 = loss.paper_sensitivity(W)
    return pc.Sensitivity(l1=l1, l2=l2, nominal=NOMINAL_PAPER)


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
        raise DeclarationError(f"test labels {unknown[:5].tolist()} are not among the classes", argument="test")
    X_test = scale_to_unit_ball(X_test)
    codes = np.searchsorted(classes, y_test)

    def test_error(w: np.ndarray) -> float:
        W = np.reshape(w, shape, order="F")
        return float(np.mean(np.argmax(X_test @ W, axis=1) != codes))

    return test_error


def worst_case_pairs(X: Any, y: Any, *, agent: int = 0, **builder: Any) -> list[NeighbouringPair]:
    """Neighbours under the builder's ``relation`` (``privcvx.sensitivity_audit``): agent ``agent``'s first sample
    set to (e_1, first class) in D (add/remove: every sample of its share, so that the mean per-sample gradient
    g_bar of the bound's derivation is as large as one sample's); in D' it is replaced by (-e_1, first class),
    (e_1, last class) or (-e_1, last class) (replace-one), or that sample is added to the agent's share (add/remove;
    the pair read backwards removes it).

    ``builder``: the other arguments of `federated_logistic`; the split is kept. A per-sample gradient
    x (s - e_k)^T then flips its sign or its class: the samples that come closest to the two-sample bound of
    `LogisticLoss.worst_case_sensitivity`.
    """
    X, y = _check_data(X, y, "X")
    first = federated_logistic(X, y, **builder)
    shares, classes, unit = first.info["shares"], first.info["classes"], np.eye(X.shape[1])[0]
    builder = {**builder, "shares": shares, "classes": classes}
    add_remove = first.agents[agent].declared.relation == RELATIONS["add_remove"]
    row = shares[agent] if add_remove else shares[agent][0]
    original_X, original_y = X.copy(), y.astype(classes.dtype, copy=True)
    original_X[row], original_y[row] = unit, classes[0]
    original = federated_logistic(original_X, original_y, **builder)
    pairs = []
    for features, label in ((-unit, classes[0]), (unit, classes[-1]), (-unit, classes[-1])):
        if add_remove:
            moved_X, moved_y = np.vstack([original_X, features]), np.append(original_y, label)
            grown = [np.append(share, len(original_y)) if p == agent else share for p, share in enumerate(shares)]
            neighbour = federated_logistic(moved_X, moved_y, **{**builder, "shares": grown})
        else:
            moved_X, moved_y = original_X.copy(), original_y.copy()
            moved_X[row], moved_y[row] = features, label
            neighbour = federated_logistic(moved_X, moved_y, **builder)
        pairs.append(NeighbouringPair(original, neighbour, agent))
    return pairs
