"""Offline datasets: scikit-learn's bundled data and the MNIST IDX reader on files written here."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from problems import datasets
from problems.datasets import DatasetError, DatasetNotFoundError, load_mnist, read_idx


def _write_idx(path: Path, array: np.ndarray, code: int) -> None:
    """Write ``array`` in the IDX format: 0, 0, type code, ndim, big-endian dims, big-endian data."""
    dtype = {0x08: ">u1", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    raw = (bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
           + np.asarray(array, dtype=dtype).tobytes())
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)


def _fake_mnist(folder: Path, split: str, n: int, gz: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    prefix = "train" if split == "train" else "t10k"
    suffix = ".gz" if gz else ""
    _write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", images, 0x08)
    _write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", labels, 0x08)
    return images, labels


def test_sklearn_datasets_load_offline():
    X, y = datasets.load_digits()
    assert X.shape == (1797, 64) and y.shape == (1797,)
    assert sorted(np.unique(y)) == list(range(10)) and X.max() == 16
    X, y = datasets.load_breast_cancer()
    assert X.shape == (569, 30) and sorted(np.unique(y)) == [0, 1]


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_reads_idx_files_back(tmp_path, gz):
    images, labels = _fake_mnist(tmp_path, "train", 7, gz, seed=0)
    test_images, test_labels = _fake_mnist(tmp_path, "test", 3, gz, seed=1)
    X, y = load_mnist(tmp_path)
    assert X.shape == (7, 784) and X.dtype == float
    np.testing.assert_array_equal(X, images.reshape(7, -1))
    np.testing.assert_array_equal(y, labels)
    X, y = load_mnist(tmp_path, split="test")
    np.testing.assert_array_equal(X, test_images.reshape(3, -1))
    np.testing.assert_array_equal(y, test_labels)


def test_mnist_accepts_dotted_names(tmp_path):
    images = np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28)
    _write_idx(tmp_path / "train-images.idx3-ubyte", images, 0x08)
    _write_idx(tmp_path / "train-labels.idx1-ubyte.gz", np.array([3, 1], dtype=np.uint8), 0x08)
    X, y = load_mnist(tmp_path)
    np.testing.assert_array_equal(X[1], images[1].ravel())
    assert y.tolist() == [3, 1]


@pytest.mark.parametrize(("code", "values"), [(0x0C, [[-5, 7], [1 << 20, 0]]), (0x0D, [[0.5, -2.25]]),
                                              (0x0E, [[1e-300, np.pi]])])
def test_read_idx_other_types(tmp_path, code, values):
    file = tmp_path / "a.idx"
    _write_idx(file, np.array(values), code)
    np.testing.assert_array_equal(read_idx(file), np.array(values))


def test_missing_mnist_says_where_to_put_the_files(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetNotFoundError) as caught:
        load_mnist(missing)
    message = str(caught.value)
    assert str(missing) in message and "train-images-idx3-ubyte" in message
    assert caught.value.argument == "path" and isinstance(caught.value, FileNotFoundError)
    _fake_mnist(tmp_path, "train", 2, True, seed=0)
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DatasetNotFoundError, match="train-labels-idx1-ubyte"):
        load_mnist(tmp_path)


def test_malformed_idx_files_raise(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x08\x03\x00\x00rest")
    with pytest.raises(DatasetError, match="magic"):
        read_idx(bad)
    truncated = tmp_path / "short"
    truncated.write_bytes(bytes([0, 0, 0x08, 1]) + np.asarray([5], dtype=">u4").tobytes() + b"\x01\x02")
    with pytest.raises(DatasetError, match="needs 5"):
        read_idx(truncated)
    _fake_mnist(tmp_path, "train", 3, False, seed=0)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(4, dtype=np.uint8), 0x08)
    with pytest.raises(DatasetError, match="do not match"):
        load_mnist(tmp_path)
    with pytest.raises(DatasetError):
        load_mnist(tmp_path, split="validation")
