"""The federated-learning problem of Sec. 6.2, as a ``privcvx compare`` study builds it (``builder = "logistic"``).

Registered under the entry-point group ``privcvx.builders`` (name ``logistic``, see pyproject.toml), so
that ``privcvx compare`` finds it without privcvx importing this package.
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import train_test_split

import privcvx as pc
from privcvx.errors import ParameterError, check_scalar

from . import datasets
from .logistic import federated_logistic


def load_dataset(dataset: str, data_path: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels: digits, breast_cancer (bundled) or mnist (IDX files in data_path)."""
    if dataset == "digits":
        return datasets.load_digits()
    if dataset == "breast_cancer":
        return datasets.load_breast_cancer()
    if dataset == "mnist":
        if data_path is None:
            raise ParameterError("mnist needs --data-path, the folder of the IDX files", argument="data_path")
        return datasets.load_mnist(data_path)
    raise ParameterError(f"unknown dataset {dataset!r}; expected digits, breast_cancer or mnist",
                         argument="dataset")


def build(dataset: str = "digits", data_path: str | None = None, agents: int = 10, split: str = "iid",
          alpha: float = 0.5, bound: float = 0.1, test_fraction: float = 0.25, data_seed: int = 0,
          sensitivity: str = "worst_case") -> pc.DistributedProblem:
    """Federated logistic regression Eq. (30) on a stratified train/test split of ``dataset`` (Sec. 6.2)."""
    test_fraction = check_scalar(test_fraction, argument="test_fraction", kind=float, low=0.0, high=1.0,
                                 closed="neither")
    X, y = load_dataset(dataset, data_path)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=test_fraction, random_state=data_seed,
                                                        stratify=y)
    return federated_logistic(X_train, y_train, agents=agents, split=split, alpha=alpha, bound=bound,
                                       test=(X_test, y_test), seed=data_seed, sensitivity=sensitivity)
