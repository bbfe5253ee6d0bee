"""Datasets that work offline: scikit-learn's bundled data, and MNIST read from local IDX files.

Every loader returns ``(X, y)``: a float feature matrix with one sample per row and a 1-D integer
label vector. No scaling is done here; `problems.federated_logistic` scales the rows.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import sklearn.datasets

from privcvx.errors import PrivcvxError, check_scalar

__all__ = ["ADULT_COLUMNS", "DatasetError", "DatasetNotFoundError", "load_adult", "load_breast_cancer", "load_digits",
           "load_mnist", "read_idx"]


class DatasetNotFoundError(PrivcvxError, FileNotFoundError):
    """A dataset's files are not where the loader looks for them."""


class DatasetError(PrivcvxError, ValueError):
    """A dataset file exists but is not in the expected format."""


# IDX type codes (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT"), stored big-endian.
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

_MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
                "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's handwritten digits: 1797 samples of 8x8 pixels (values 0..16), 10 classes."""
    data = sklearn.datasets.load_digits()
    return data.data.astype(float), data.target.astype(np.int64)


def load_breast_cancer() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's Wisconsin breast cancer data: 569 samples, 30 features, 2 classes."""
    data = sklearn.datasets.load_breast_cancer()
    return data.data.astype(float), data.target.astype(np.int64)


def read_idx(file: str | Path) -> np.ndarray:
    """Read one IDX file (gzipped when the name ends in ``.gz``) into an array of its declared shape."""
    file = Path(file)
    opener = gzip.open if file.suffix == ".gz" else open
    with opener(file, "rb") as stream:
        raw = stream.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DatasetError(f"{file} is not an IDX file (bad magic number {raw[:4].hex()})", argument="path")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"{file} is truncated in its header", argument="path")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise DatasetError(f"{file} holds {len(raw) - header} data bytes, its header {shape} needs {expected}",
                           argument="path")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)


def _find(folder: Path, stem: str) -> Path | None:
    """The file for ``stem`` in ``folder``, raw or gzipped, with '-idx' or '.idx' in its name."""
    for name in (stem, stem.replace("-idx", ".idx")):
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    return None


def load_mnist(path: str | Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Read MNIST from the standard IDX files in the folder ``path``.

    ``split="train"`` reads ``train-images-idx3-ubyte`` and ``train-labels-idx1-ubyte``,
    ``split="test"`` reads ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte``; each may be
    gzipped (``.gz``). Returns the images flattened to rows of raw pixel values (0..255, float)
    and the labels.
    """
    split = check_scalar(split, argument="split", choices=tuple(_MNIST_FILES), error=DatasetError)
    folder = Path(path).expanduser()
    stems = _MNIST_FILES[split]
    found = [_find(folder, stem) for stem in stems]
    if not folder.is_dir() or None in found:
        missing = [stem for stem, file in zip(stems, found, strict=True) if file is None]
        raise DatasetNotFoundError(
            f"MNIST {split} files {missing} not found in {folder.resolve()}. Download them from "
            f"http://yann.lecun.com/exdb/mnist/ (or a mirror) and put them, gzipped or not, in that "
            f"folder, named e.g. {stems[0]}.gz and {stems[1]}.gz", argument="path")
    images, labels = (read_idx(file) for file in found)
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise DatasetError(f"images of shape {images.shape} do not match labels of shape {labels.shape}",
                           argument="path")
    return images.reshape(images.shape[0], -1).astype(float), labels.astype(np.int64)


#: The 15 columns of the UCI Adult files (adult.data, adult.test): 14 features and the income label.
ADULT_COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
                 "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
                 "income")


def load_adult(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """UCI Adult from the user's local CSV (``adult.data`` or ``adult.test``), preprocessed as in Xiao, Ye &
    Devadas, "Local Differential Privacy in Decentralized Optimization", Sec. 5.

    Rows with a missing value ("?") are dropped; each categorical column is label-encoded (its sorted
    categories numbered 0, 1, ...: the paper's d = 14 rules out one-hot encoding); every column is scaled to
    [0, 1] (min-max) and then every row to unit l2 norm. Labels: income ">50K" -> +1, "<=50K" -> -1 (the
    paper writes {0, 1}, but its loss log(1 + exp(-L x^T z)) needs +-1; the digest's erratum 12).
    Returns X of shape (samples, 14), nonnegative with unit rows, and y in {-1, +1}.
    """
    import pandas as pd

    file = Path(path).expanduser()
    if not file.is_file():
        raise DatasetNotFoundError(f"the Adult CSV {file.resolve()} does not exist. Download adult.data from the UCI "
                                   "Machine Learning Repository (dataset 'Adult') and pass its path", argument="path")
    try:
        table = pd.read_csv(file, header=None, names=list(ADULT_COLUMNS), skipinitialspace=True, comment="|",
                            na_values=["?"], dtype=str)
    except (pd.errors.ParserError, UnicodeDecodeError) as error:
        raise DatasetError(f"{file} is not an Adult CSV: {error}", argument="path") from None
    if table.shape[0] and table.iloc[0, 0] == "age":  # a header line
        table = table.iloc[1:]
    table = table.dropna()
    if table.empty:
        raise DatasetError(f"{file} holds no complete Adult record", argument="path")
    labels = table["income"].str.rstrip(".")
    if not labels.isin([">50K", "<=50K"]).all():
        raise DatasetError(f"{file}: the 15th column must be the income '>50K' or '<=50K', got "
                           f"{sorted(set(labels) - {'>50K', '<=50K'})[:3]}", argument="path")
    columns = []
    for name in ADULT_COLUMNS[:-1]:
        numeric = pd.to_numeric(table[name], errors="coerce")
        columns.append(numeric.to_numpy(float) if numeric.notna().all()
                       else pd.Categorical(table[name]).codes.astype(float))
    X = np.column_stack(columns)
    span = X.max(axis=0) - X.min(axis=0)
    X = (X - X.min(axis=0)) / np.where(span > 0, span, 1.0)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    X = X / np.where(norms > 0, norms, 1.0)
    return X, np.where(labels.to_numpy() == ">50K", 1, -1).astype(np.int64)
