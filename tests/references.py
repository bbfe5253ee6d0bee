"""Independent reference optima, written without privcvx, shared by tests/ and bench/."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax


def logistic_optimum(X: np.ndarray, y: np.ndarray, bound: float) -> float:
    """Direct scipy L-BFGS-B solve of Eq. (30) on the box [-bound, bound]: mean cross-entropy, no intercept.

    Rows are scaled to norm <= 1 by max(1, ||x||), the rule of ``problems.federated_logistic``.
    """
    X = X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    Y = (y[:, None] == np.unique(y)[None, :]).astype(float)
    shape = (X.shape[1], Y.shape[1])

    def fun(v: np.ndarray) -> tuple[float, np.ndarray]:
        S = X @ v.reshape(shape)
        value = np.mean(logsumexp(S, axis=1) - np.sum(Y * S, axis=1))
        return value, (X.T @ (softmax(S, axis=1) - Y) / X.shape[0]).ravel()

    result = minimize(fun, np.zeros(np.prod(shape)), jac=True, method="L-BFGS-B",
                      bounds=[(-bound, bound)] * int(np.prod(shape)),
                      options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 20000, "maxfun": 40000})
    return float(result.fun)
