"""Checkpoints: the state of a run after a round, in files that reading cannot execute and that may be hostile.

A checkpoint at ``path`` is three files, each written so that a kill at any moment leaves a resumable run:

* ``path``: the *state file*, a small ``.npz`` archive of the round (`write_state`): a header (the format and
  library versions and a fingerprint of the run, `fingerprint`), the run's state as UTF-8 JSON, its arrays
  beside it, and a SHA-256 digest over all of them. Values of one structure (every agent's state, the monitor's
  releases, the undelivered messages) are stored as a table, one stacked array or JSON list per field
  (`_Encoder`). It holds no history: its size does not grow with the rounds.
  It is written to a temporary file and renamed: that rename is the *commit point* of the round. Owner-only: it
  holds the agents' noise states and iterates, so it is as secret as their data.
* ``path + ".transcript"``: every message of the run, and ``path + ".log"``: every history row and every
  ledger entry of the driver, each an append-only `Log` of length-prefixed records. The state file records
  each log's committed size and the SHA-256 chain over its records; resuming checks the chain and cuts off
  anything written after the commit.

The cost of a round's checkpoint is its new records plus the state file: constant in the round.

Every file read is treated as hostile (`open_regular`): symlinks, FIFOs and devices are refused on reading and
writing (``O_NOFOLLOW``, ``O_NONBLOCK``), every read is bounded by the file's size, and the archive's members are
checked (names, sizes, no compression, no encryption) before any is read. Every failure raises
[`CheckpointError`][privcvx.errors.CheckpointError].
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import stat
import struct
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from privcvx.errors import CheckpointError
from privcvx.messages import (
    ARRAY_KINDS,
    Message,
    array_from_bytes,
    decode_messages,
    integer_field,
    text_field,
)
from privcvx.problem import AgentSpec, data_leaves
from privcvx.version import __version__

#: Bumped whenever the layout of a checkpoint changes; a file of another format is refused.
FORMAT_VERSION = 4

#: The largest ``.npy`` header read (numpy's own default limit).
MAX_NPY_HEADER = 10_000

_LENGTH = struct.Struct("<Q")
_MEMBERS = {"__header__.npy", "__state__.npy", "__arrays__.npy", "__digest__.npy"}
_GENESIS = b"\0" * 32
_NPY_MAGIC = b"\x93NUMPY\x01\x00"

#: The least time in seconds between the starts of two commits of a run without per-host shards (`Committer.ready`):
#: the state file on disk lags by at most this (and the commit in flight); a kill recomputes at most that many rounds.
COMMIT_INTERVAL = 0.1

#: How long the run's thread sleeps, once a round, while a commit is in flight (`Committer.make_way`).
_MAKE_WAY = 5e-5


# ---- files that may be hostile ----------------------------------------------------------------------------

def open_regular(path: str | os.PathLike, argument: str, *, append: bool = False) -> int:
    """A file descriptor of the regular file at ``path``, never following a symlink nor blocking on a FIFO.

    ``append``: open (creating it, mode 0600) for appending. A symlink, FIFO, device or folder raises a
    CheckpointError naming ``argument``; a missing file raises FileNotFoundError.
    """
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_WRONLY | os.O_CREAT | os.O_APPEND if append
                                                            else os.O_RDONLY)
    try:
        descriptor = os.open(path, flags, 0o600)
    except FileNotFoundError:
        raise
    except OSError as exc:
        what = "a symlink" if exc.errno == errno.ELOOP else f"not usable ({exc.strerror})"
        raise CheckpointError(f"{os.fspath(path)!r} is {what}: checkpoint files must be regular files",
                              argument=argument) from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise CheckpointError(f"{os.fspath(path)!r} is not a regular file (a FIFO, device or folder)",
                              argument=argument)
    return descriptor


def read_regular(path: str | os.PathLike, argument: str, size: int | None = None) -> bytes:
    """The first ``size`` bytes (default: all) of the regular file at ``path``; a shorter file raises."""
    try:
        descriptor = open_regular(path, argument)
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint file at {os.fspath(path)!r}", argument=argument) from None
    with os.fdopen(descriptor, "rb") as handle:
        available = os.fstat(descriptor).st_size
        size = available if size is None else size
        if size > available:
            raise CheckpointError(f"{os.fspath(path)!r} is shorter than its checkpoint recorded", argument=argument)
        data = handle.read(size)
    if len(data) != size:
        raise CheckpointError(f"{os.fspath(path)!r} changed while it was read", argument=argument)
    return data


def _temporary_prefix(path: str | os.PathLike) -> tuple[str, str]:
    return os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}."


def write_atomically(path: str | os.PathLike, data: bytes, argument: str) -> None:
    """Write ``data`` to ``path`` owner-only, through a temporary file in its folder renamed over it (a kill leaves
    the old file or the new one). An existing ``path`` that is not a regular file (a symlink, FIFO) is refused."""
    replace_temporary(*write_temporary(path, data, argument), path)


def write_temporary(path: str | os.PathLike, data: bytes, argument: str) -> tuple[int, str]:
    """The first half of `write_atomically`: ``data`` written (not yet flushed) to a new owner-only temporary file
    beside ``path``; its open descriptor and name, for `replace_temporary`."""
    refuse_special(path, argument)
    directory, prefix = _temporary_prefix(path)
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=".tmp")  # 0600, O_EXCL
    try:
        written = 0
        while written < len(data):
            written += os.write(descriptor, data[written:])
    except BaseException:
        _discard(descriptor, temporary)
        raise
    return descriptor, temporary


def replace_temporary(descriptor: int, temporary: str, path: str | os.PathLike) -> None:
    """The second half of `write_atomically`: flush the temporary file to disk, close it, rename it over ``path``."""
    try:
        os.fsync(descriptor)
        os.close(descriptor)
        descriptor = -1
        os.replace(temporary, path)
    except BaseException:
        _discard(descriptor, temporary)
        raise


def _discard(descriptor: int, temporary: str) -> None:
    with contextlib.suppress(OSError):
        if descriptor >= 0:
            os.close(descriptor)
        os.unlink(temporary)


def refuse_special(path: str | os.PathLike, argument: str) -> None:
    """Raise a CheckpointError when ``path`` exists and is not a regular file (a symlink, FIFO, device)."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise CheckpointError(f"{os.fspath(path)!r} exists and is not a regular file (a symlink, FIFO or "
                                  "device): it is not overwritten", argument=argument)


def remove_temporaries(path: str | os.PathLike) -> None:
    """Delete the temporary files `write_atomically` left for ``path`` when a run was killed mid-write."""
    directory, prefix = _temporary_prefix(path)
    for name in os.listdir(directory):
        if name.startswith(prefix) and name.endswith(".tmp"):
            _remove_regular(os.path.join(directory, name))


def _remove_regular(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)


# ---- append-only logs -------------------------------------------------------------------------------------

class Log:
    """An append-only file of length-prefixed records with a running SHA-256 chain c_k = H(c_{k-1} || record_k).

    It stays open for the run (opened once, never following a symlink). `append` keeps a round's records in memory,
    `write` writes them (`Committer.submit`, while no flush of the file runs) and `flush` flushes them to disk (the
    commit thread). ``position`` (the size and the chain, of every
    record appended) goes into the state file; `read_log` checks a file against it.
    """

    def __init__(self, path: str | os.PathLike, position: tuple[int, str] | None = None) -> None:
        self.path = Path(path)
        self.descriptor = open_regular(self.path, "checkpoint", append=True)
        try:
            os.ftruncate(self.descriptor, 0 if position is None else position[0])
        except BaseException:
            os.close(self.descriptor)
            raise
        self.size, self.chain = (0, _GENESIS) if position is None else (position[0], bytes.fromhex(position[1]))
        self._unwritten: list[bytes] = []  # appended, for `write`

    def append(self, records: Iterable[bytes]) -> None:
        """Append records (a round's): in memory until `write` (or `close`)."""
        parts = []
        for record in records:
            self.chain = hashlib.sha256(self.chain + record).digest()
            parts += [_LENGTH.pack(len(record)), record]
        data = b"".join(parts)
        self._unwritten.append(data)
        self.size += len(data)

    def write(self) -> None:
        """Write the records appended so far to the file (not flushed to disk)."""
        data, self._unwritten = memoryview(b"".join(self._unwritten)), []
        written = 0
        while written < len(data):
            written += os.write(self.descriptor, data[written:])

    def flush(self) -> None:
        """Flush the records written so far to disk."""
        os.fsync(self.descriptor)

    def close(self) -> None:
        """Write the records appended so far, and close the file."""
        try:
            self.write()
        finally:
            os.close(self.descriptor)

    @property
    def position(self) -> list[Any]:
        """[size in bytes, chain in hex]: what the state file records."""
        return [self.size, self.chain.hex()]


def read_log(path: str | os.PathLike, position: Any) -> list[bytes]:
    """The records of the first ``position[0]`` bytes of the log at ``path``, checked against the chain."""
    if not (isinstance(position, list) and len(position) == 2 and isinstance(position[0], int)
            and position[0] >= 0 and isinstance(position[1], str)):
        raise CheckpointError(f"the checkpoint's record of {os.fspath(path)!r} is damaged", argument="resume")
    data = read_regular(path, "resume", position[0])
    records, offset, chain = [], 0, _GENESIS
    while offset < len(data):
        if offset + _LENGTH.size > len(data):
            break
        (length,) = _LENGTH.unpack_from(data, offset)
        if length > len(data) - offset - _LENGTH.size:
            break
        record = data[offset + _LENGTH.size:offset + _LENGTH.size + length]
        chain = hashlib.sha256(chain + record).digest()
        records.append(record)
        offset += _LENGTH.size + length
    if offset != len(data) or chain.hex() != position[1]:
        raise CheckpointError(f"{os.fspath(path)!r} was edited or damaged: its records do not match the digest "
                              "the checkpoint recorded", argument="resume")
    return records


# ---- the transcript's and the history's records -----------------------------------------------------------

def transcript_path(path: str | os.PathLike) -> Path:
    """Where the transcript of the checkpoint at ``path`` is kept (``<path>.transcript``)."""
    return Path(os.fspath(path) + ".transcript")


def history_path(path: str | os.PathLike) -> Path:
    """Where the history rows and ledger entries of the checkpoint at ``path`` are kept (``<path>.log``)."""
    return Path(os.fspath(path) + ".log")


def read_messages(record: bytes) -> list[Message]:
    """The messages of a transcript record (`privcvx.messages.encode_messages`); a damaged one is a
    `CheckpointError`."""
    try:
        return decode_messages(record)
    except Exception as exc:  # noqa: BLE001 - every failure of an untrusted record is a damaged checkpoint
        raise CheckpointError(f"a message of the checkpoint's transcript is damaged: {type(exc).__name__}: {exc}",
                              argument="resume") from None


def json_record(value: Any) -> bytes:
    """A JSON record (a history row, ledger entries: numbers, strings, lists, dicts with string keys); numpy
    scalars become numbers, and non-finite floats are kept (``NaN``, ``Infinity``)."""
    return json.dumps(value, default=_plain).encode()


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic) and value.dtype.kind in ARRAY_KINDS:
        return value.item()
    raise CheckpointError(f"cannot store a {type(value).__name__} in a checkpoint's log", argument="checkpoint")


def read_json_record(record: bytes) -> Any:
    """The value of a record written by `json_record`."""
    try:
        return json.loads(record)
    except Exception as exc:  # noqa: BLE001 - a damaged record of an untrusted file
        raise CheckpointError(f"a record of the checkpoint's log is damaged: {type(exc).__name__}: {exc}",
                              argument="resume") from None


# ---- the state file ----------------------------------------------------------------------------------------

#: The keys that mark an array, a Message and a table in a state's JSON; a dict of the state may not use them.
_ARRAY, _MESSAGE, _TABLE = "\0array", "\0message", "\0table"
_RESERVED = frozenset({_ARRAY, _MESSAGE, _TABLE})
_PLAIN = frozenset({float, int, str, bool, type(None)})  # JSON as they are (a non-finite float as NaN, Infinity)
_TABLE_ROWS = 4  # the fewest values of a list or dict stored as a table
_NODES_PER_BYTE = 16  # a table's row may have at most this many nodes per byte it takes in the file (at least)


def _structure(value: Any, leaves: list[Any]) -> Any:
    """The structure of ``value`` (nested dicts, lists and Messages, with their keys; the dtype and shape of its
    arrays), its leaves appended to ``leaves`` in order: two values of one structure are one row of a table."""
    kind = type(value)
    if kind is dict:
        parts: list[Any] = [dict]
        for key, item in value.items():  # a leaf here, without a call (a state has hundreds)
            kind = type(item)
            if kind is dict or kind is list or kind is tuple or kind is Message:
                parts.append((key, _structure(item, leaves)))
            else:
                leaves.append(item)
                parts.append((key, (item.dtype, item.shape) if kind is np.ndarray else None))
        return tuple(parts)
    if kind is list or kind is tuple:
        return (list, *[_structure(v, leaves) for v in value])
    if kind is Message:  # its payload: numpy arrays (Message's constructor)
        payload = value.payload
        leaves += (value.round, value.phase, value.sender, value.receiver, *payload.values())
        return (Message, *[(k, array.dtype, array.shape) for k, array in payload.items()])
    leaves.append(value)
    return (value.dtype, value.shape) if kind is np.ndarray else None


class _Encoder:
    """Turns nested dicts, lists, arrays, numbers, strings and Messages into JSON, the arrays' bytes laid end to end
    in one blob, in the order the JSON names them (an array is ``{"\\0array": [dtype, shape]}``).

    A list or dict of at least `_TABLE_ROWS` values of one structure (`_structure`: every agent's state, the
    monitor's releases, the undelivered messages) is a *table*, ``{"\\0table": [rows, schema]}``: ``rows`` is the
    number of values (a list) or their keys (a dict), and ``schema`` their structure with a column per leaf, all
    rows' arrays stacked into one array, all rows' other values in one JSON list. A state of 50 agents is then a few
    arrays and lists, not hundreds of small ones."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self.nodes = self.least_bytes = 0  # of one row of the table being built

    def _array(self, value: np.ndarray) -> dict[str, list[Any]]:
        if value.dtype.kind not in ARRAY_KINDS:
            raise CheckpointError(f"cannot store an array of dtype {value.dtype} in a checkpoint",
                                  argument="checkpoint")
        self.arrays.append(value)
        return {_ARRAY: [value.dtype.str, list(value.shape)]}

    def _keys(self, keys: Iterable[Any]) -> list[str]:
        keys = list(keys)
        if not all(type(k) is str for k in keys) or not _RESERVED.isdisjoint(keys):
            raise CheckpointError(f"checkpoint dictionaries need string keys (not {sorted(_RESERVED)}), got "
                                  f"{keys[:5]}", argument="checkpoint")
        return keys

    def _mapping(self, value: Mapping) -> dict[str, Any]:
        self._keys(value)
        return {k: v if type(v) in _PLAIN else self.encode(v) for k, v in value.items()}

    def _table(self, rows: Any, values: list[Any]) -> dict[str, Any] | None:
        """``values`` as a table (``rows``: their number or keys), or None when they differ in structure, are plain
        values (JSON stores those as they are), or would make a table the reader refuses (`_Decoder._rows`)."""
        if len({type(v) for v in values}) != 1 or type(values[0]) in _PLAIN:
            return None
        leaves: list[Any] = []
        first = _structure(values[0], leaves)
        table = [leaves]
        for value in values[1:]:
            leaves = []
            if _structure(value, leaves) != first:
                return None
            table.append(leaves)
        kept, self.nodes, self.least_bytes = len(self.arrays), 0, 0
        schema = self._schema(first, iter(list(zip(*table, strict=True))))
        if self.nodes > _NODES_PER_BYTE * self.least_bytes:  # rows of empty arrays and dicts: not as a table
            del self.arrays[kept:]
            return None
        return {_TABLE: [rows, schema]}

    def _schema(self, structure: Any, columns: Iterator[tuple[Any, ...]]) -> list[Any]:
        """The schema of a table's rows of ``structure``, taking their leaves' columns in order: ``["v", values]``,
        ``["a", array]`` (the rows' arrays stacked), ``["d", [[key, schema], ...]]``, ``["l", [schema, ...]]`` or
        ``["m", round, phase, sender, receiver, [[key, schema], ...]]`` (Messages)."""
        self.nodes += 1
        if structure is None:
            self.least_bytes += 2  # a JSON list's value and its separator
            return ["v", [v if type(v) in _PLAIN else self.encode(v) for v in next(columns)]]
        head, *parts = structure
        if head is dict:
            keys = self._keys(key for key, _ in parts)
            return ["d", [[key, self._schema(part, columns)] for key, (_, part) in zip(keys, parts, strict=True)]]
        if head is list:
            return ["l", [self._schema(part, columns) for part in parts]]
        if head is Message:
            fields = [self._schema(None, columns) for _ in range(4)]
            return ["m", *fields, [[key, self._schema((kind, shape), columns)] for key, kind, shape in parts]]
        stacked = np.stack(next(columns))
        self.least_bytes += stacked.nbytes // len(stacked)
        return ["a", self._array(stacked)]

    def encode(self, value: Any) -> Any:
        kind = type(value)  # the common types first, by identity
        if kind in _PLAIN:
            return value
        if kind is np.ndarray:
            return self._array(value)
        if kind is dict:
            table = self._table(self._keys(value), list(value.values())) if len(value) >= _TABLE_ROWS else None
            return self._mapping(value) if table is None else table
        if kind is list or kind is tuple:
            table = self._table(len(value), list(value)) if len(value) >= _TABLE_ROWS else None
            return [v if type(v) in _PLAIN else self.encode(v) for v in value] if table is None else table
        if kind is Message:
            return {_MESSAGE: [value.round, value.phase, value.sender, value.receiver,
                               {k: self._array(np.asarray(v)) for k, v in value.payload.items()}]}
        if isinstance(value, Mapping):
            return self._mapping(value)
        if isinstance(value, (list, tuple)):
            return [self.encode(v) for v in value]
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            return float(value)
        if isinstance(value, str):
            return str(value)
        if isinstance(value, np.ndarray):
            return self._array(np.asarray(value))
        raise CheckpointError(f"cannot store a {type(value).__name__} in a checkpoint", argument="checkpoint")

    def blob(self) -> bytes:
        """The arrays' bytes, end to end in C order."""
        return b"".join([array.tobytes(order="C") for array in self.arrays])


class _Decoder:
    """The inverse of `_Encoder` on untrusted input: the arrays must lie end to end in the blob, in the order the
    JSON names them, and fill it; the tables may build at most `_NODES_PER_BYTE` values per byte of the state (twice
    that: a table's value may hold a table), so that a small file cannot make a large state."""

    def __init__(self, blob: bytes, size: int) -> None:
        self.blob, self.position = memoryview(blob), 0
        self.budget = 2 * _NODES_PER_BYTE * size

    def _array(self, spec: Any) -> np.ndarray:
        kind, shape = spec
        array = array_from_bytes(self.blob[self.position:], kind, shape)
        self.position += array.nbytes
        return array

    def _message(self, round_: Any, phase: Any, sender: Any, receiver: Any, payload: dict[str, Any]) -> Message:
        return Message(round=integer_field(round_), sender=text_field(sender), payload=payload,
                       receiver=None if receiver is None else text_field(receiver), phase=integer_field(phase))

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if not _RESERVED.isdisjoint(value):
            if len(value) != 1:
                raise ValueError(f"a marker among other keys: {sorted(value)[:5]}")
            if _ARRAY in value:
                return self._array(value[_ARRAY])
            if _TABLE in value:
                rows, schema = value[_TABLE]
                if isinstance(rows, list):
                    return dict(zip(map(text_field, rows), self._rows(schema, len(rows)), strict=True))
                return self._rows(schema, integer_field(rows))
            round_, phase, sender, receiver, payload = value[_MESSAGE]
            return self._message(round_, phase, sender, receiver,
                                 {text_field(k): self._array(v[_ARRAY]) for k, v in payload.items()})
        return {k: self.decode(v) for k, v in value.items()}

    def _rows(self, schema: Any, count: int) -> list[Any]:
        """The ``count`` rows of a table's ``schema`` (`_Encoder._schema`)."""
        self.budget -= count
        if count < 0 or self.budget < 0:
            raise ValueError("a table with more values than its file can hold")
        kind, *parts = schema
        if kind == "v":
            (values,) = parts
            if not isinstance(values, list) or len(values) != count:
                raise ValueError(f"a table's column of {type(values).__name__} for {count} rows")
            return [self.decode(v) for v in values]
        if kind == "a":
            (spec,) = parts
            stacked = self._array(spec[_ARRAY])
            if stacked.shape[:1] != (count,):
                raise ValueError(f"a table's column of shape {stacked.shape} for {count} rows")
            return [stacked[i, ...] for i in range(count)]
        if kind == "d":
            (fields,) = parts
            columns = {text_field(key): self._rows(part, count) for key, part in fields}
            return [{key: column[i] for key, column in columns.items()} for i in range(count)]
        if kind == "l":
            (fields,) = parts
            columns = [self._rows(part, count) for part in fields]
            return [[column[i] for column in columns] for i in range(count)]
        if kind == "m":
            *fields, payload = parts
            heads = [self._rows(field, count) for field in fields]
            arrays = {text_field(key): self._rows(part, count) for key, part in payload}
            return [self._message(*[head[i] for head in heads], {key: column[i] for key, column in arrays.items()})
                    for i in range(count)]
        raise ValueError(f"unknown table column {kind!r}")

    def finish(self, value: Any) -> Any:
        """``value`` decoded, every byte of the blob used."""
        decoded = self.decode(value)
        if self.position != len(self.blob):
            raise ValueError(f"the state uses {self.position} of the {len(self.blob)} bytes of its arrays")
        return decoded


def _text_array(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), dtype=np.uint8)


def encode_state(header: dict[str, Any] | str, state: dict[str, Any]) -> bytes:
    """The bytes of a state file: an uncompressed ``.npz`` of four byte arrays: the header (JSON; ``header`` is
    the dict or its JSON text, which a run writes once for all its rounds), the state (JSON), its arrays' bytes end
    to end, and the SHA-256 of the three."""
    encoder = _Encoder()
    text = json.dumps(encoder.encode(state))
    members = {"__header__": _text_array(header if isinstance(header, str) else json.dumps(header)),
               "__state__": _text_array(text), "__arrays__": np.frombuffer(encoder.blob(), dtype=np.uint8)}
    members["__digest__"] = _text_array(_digest(members))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:  # what np.savez writes, at a third of its cost
        for key, array in members.items():
            archive.writestr(f"{key}.npy", _npy_bytes(array.tobytes()))
    return buffer.getvalue()


def _npy_bytes(data: bytes) -> bytes:
    """``data`` as a one-dimensional ``uint8`` ``.npy`` (version 1.0; its header padded to 64 bytes, as numpy's)."""
    header = f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({len(data)},), }}"
    header = header.ljust(len(header) + -(len(_NPY_MAGIC) + 2 + len(header) + 1) % 64) + "\n"
    return _NPY_MAGIC + struct.pack("<H", len(header)) + header.encode() + data


def write_state(path: str | os.PathLike, header: dict[str, Any], state: dict[str, Any]) -> str:
    """Write the header and the run state atomically (`write_atomically`); return the file's SHA-256."""
    data = encode_state(header, state)
    write_atomically(path, data, "checkpoint")
    return hashlib.sha256(data).hexdigest()


class Committer:
    """Commits a checkpoint's rounds; the flushes to disk and the rename run in a background thread, so that they
    overlap the next rounds.

    A round's commit (`submit`): on the run's thread, once the previous commit is done, the state file's bytes are
    written to a temporary file and the logs' new records to the logs (into the page cache: fast, and no flush of
    these files is running); then the thread flushes the logs and that file to disk (``os.fsync``) and renames it
    over the state file. The rename is the commit point, so a state file on disk never names log records that are
    not (the logs only grow, so a later round's records do not change an earlier round's). The thread makes four
    system calls a commit (the flushes and the rename); each gives the GIL back and waits to take it again, which
    while the run's thread computes takes milliseconds (docs/performance.md, "Checkpoints").

    `ready`: whether a round submitted now would be committed at once: always without ``coalesce`` (per-host
    shards: every round is committed, `submit` waiting for the previous one); with ``coalesce``, when the thread is
    idle and at least ``interval`` seconds (default `COMMIT_INTERVAL`) have passed since its last commit began. The
    run submits only such rounds (and its last one), so the thread wakes a few times a second, not every round.
    `wait` returns when every submitted round is committed, and raises the thread's first failure.
    """

    def __init__(self, *, coalesce: bool, interval: float | None = None) -> None:
        self.coalesce = coalesce
        self.interval = COMMIT_INTERVAL if interval is None else interval
        self._began = -float("inf")  # time.monotonic() at the start of the last commit
        self._condition = threading.Condition()
        self._waiting: tuple[list[Log], int, str, str | os.PathLike] | None = None  # the next round to commit
        self._busy = False
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="privcvx-checkpoint", daemon=True)
        self._thread.start()

    def submit(self, logs: Iterable[Log], path: str | os.PathLike, data: bytes) -> None:
        """Commit the state file's bytes ``data`` at ``path``, with the records appended to ``logs``: wait for the
        previous commit, write them, and flush and rename in the background."""
        self.wait()
        logs = list(logs)
        descriptor, temporary = write_temporary(path, data, "checkpoint")
        try:
            for log in logs:
                log.write()
        except BaseException:
            _discard(descriptor, temporary)
            raise
        with self._condition:
            self._waiting = (logs, descriptor, temporary, path)
            self._condition.notify_all()

    def ready(self) -> bool:
        """Whether a round submitted now would be committed at once (always, without ``coalesce``): no round in
        flight, and ``interval`` seconds since the last commit began."""
        return not self.coalesce or (not self._busy and self._waiting is None
                                     and time.monotonic() - self._began >= self.interval)

    def make_way(self) -> None:
        """While a commit is in flight, sleep briefly without the GIL, so that the commit thread, waiting to take the
        GIL back after one of its system calls, can. (The run's thread drops the GIL only for moments, e.g. in each
        noise draw, and takes it back before the waiting thread wakes; a waiting thread asks for it only after 5 ms
        without any switch, so it waited tens of milliseconds a system call.) The run's thread calls it once a
        round."""
        if self._busy:
            time.sleep(_MAKE_WAY)

    def wait(self) -> None:
        """Return when every submitted round is on disk (or replaced by a later one that is); raise a failure."""
        with self._condition:
            while self._busy or self._waiting is not None:
                self._condition.wait()
        self._raise()

    def close(self) -> None:
        """`wait`, then stop the thread."""
        try:
            self.wait()
        finally:
            with self._condition:
                self._closed = True
                self._condition.notify_all()
            self._thread.join()

    def _raise(self) -> None:
        with self._condition:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def _work(self) -> None:
        while True:
            with self._condition:
                while self._waiting is None and not self._closed:
                    self._condition.wait()
                if self._waiting is None:
                    return
                (logs, descriptor, temporary, path), self._waiting, self._busy = self._waiting, None, True
                self._began = time.monotonic()
            error = None
            try:
                try:
                    for log in logs:
                        log.flush()
                except BaseException:
                    _discard(descriptor, temporary)
                    raise
                replace_temporary(descriptor, temporary, path)
            except BaseException as exc:  # noqa: BLE001 - raised in the run's thread by the next submit or wait
                error = exc
            with self._condition:
                self._busy = False
                self._error = self._error or error
                self._condition.notify_all()


def _digest(members: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of every member (key, dtype, shape, bytes), the header's and the state's included."""
    digest = hashlib.sha256()
    for key in sorted(members):
        array = np.ascontiguousarray(members[key])
        digest.update(f"{key}:{array.dtype.str}:{array.shape}".encode() + array.tobytes())
    return digest.hexdigest()


def _members(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of a state file, every member checked before it is read: its name, no encryption, stored (not
    compressed), its size within the file's; then its ``.npy`` header (a plain dtype of `ARRAY_KINDS`, a shape
    of non-negative integers matching the bytes there are)."""
    members: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        if len(infos) > len(data) // 30:  # a zip entry takes at least 30 bytes
            raise ValueError("more members than the file can hold")
        for info in infos:
            if info.filename not in _MEMBERS or info.filename[:-4] in members:
                raise ValueError(f"unexpected member {info.filename[:80]!r}")
            if info.flag_bits & 0x1:
                raise ValueError(f"member {info.filename!r} is encrypted")
            if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size \
                    or info.file_size > len(data):
                raise ValueError(f"member {info.filename!r} is compressed or larger than the file")
            members[info.filename[:-4]] = _npy(archive.read(info))
    return members


def _npy(content: bytes) -> np.ndarray:
    handle = io.BytesIO(content)
    version = np.lib.format.read_magic(handle)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"unsupported .npy version {version}")
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(handle, max_header_size=MAX_NPY_HEADER)
    array = array_from_bytes(content[handle.tell():], dtype.str, list(shape))
    if array.nbytes != len(content) - handle.tell():
        raise ValueError("the member's size does not match its header")
    return array.reshape(shape, order="F") if fortran else array


def read_state(path: str | os.PathLike, expected: dict[str, Any], argument: str = "resume",
               data: bytes | None = None) -> dict[str, Any]:
    """Read a state written by `write_state` (or its bytes ``data``), after checking its header against
    ``expected``.

    Nothing in the file is executed. A missing, damaged, hostile or foreign file, or one written by another run
    (another problem, data, algorithm, setting, seed or version), raises
    [`CheckpointError`][privcvx.errors.CheckpointError] saying what differs.
    """
    name = os.fspath(path)
    data = read_regular(path, argument) if data is None else data
    try:
        members = _members(data)
        if set(members) != {name[:-4] for name in _MEMBERS}:
            raise ValueError(f"members {sorted(members)}")
        texts = {key: bytes(members.pop(key)).decode() for key in ("__header__", "__state__", "__digest__")}
    except Exception as exc:  # noqa: BLE001 - every zip, npy or text failure of an untrusted file
        raise CheckpointError(f"{name!r} is not a privcvx checkpoint (or is damaged): {type(exc).__name__}: {exc}",
                              argument=argument) from None
    blob = members["__arrays__"].tobytes()
    members.update({key: _text_array(texts[key]) for key in ("__header__", "__state__")})
    if texts["__digest__"] != _digest(members):
        raise CheckpointError(f"{name!r} was edited or damaged: its content does not match its digest",
                              argument=argument)
    try:
        header = json.loads(texts["__header__"])
        if not isinstance(header, dict):
            raise TypeError(f"the header is a {type(header).__name__}")
    except Exception as exc:  # noqa: BLE001 - a damaged header
        raise CheckpointError(f"{name!r} has a damaged header: {exc}", argument=argument) from None
    if "format" in expected and header.get("format") != expected["format"]:
        raise CheckpointError(f"{name!r} is a checkpoint of format {header.get('format')!r}; this privcvx reads "
                              f"format {expected['format']} only (resume it with the privcvx that wrote it)",
                              argument=argument)
    differences = [f"{key}: the file has {header.get(key)!r}, this run has {value!r}"
                   for key, value in expected.items() if header.get(key) != value]
    if differences:
        raise CheckpointError("the checkpoint belongs to another run; " + "; ".join(differences), argument=argument)
    try:
        state = _Decoder(blob, len(blob) + len(texts["__state__"])).finish(json.loads(texts["__state__"]))
        if not isinstance(state, dict):
            raise TypeError(f"the state is a {type(state).__name__}")
    except Exception as exc:  # noqa: BLE001 - a damaged state
        raise CheckpointError(f"the checkpoint's state is damaged: {type(exc).__name__}: {exc}",
                              argument=argument) from None
    return state


# ---- what identifies a run ---------------------------------------------------------------------------------

def data_digest(expressions: Iterable[cp.Expression | cp.Constraint]) -> str:
    """SHA-256 of every constant and parameter value in the expressions (the agent's data), in tree order."""
    digest = hashlib.sha256()
    for _, value in data_leaves(list(expressions)):
        if sp.issparse(value):
            value = sp.csr_array(value)
            parts = [np.asarray(value.shape), value.indptr, value.indices, np.asarray(value.data, dtype=float)]
        else:
            parts = [np.asarray(np.nan if value is None else value, dtype=float)]
        for part in parts:
            digest.update(repr(part.shape).encode() + np.ascontiguousarray(part).tobytes())
    return digest.hexdigest()


def fingerprint(problem: Any, algorithm: Any, topology: Any, seed: Any, *, rounds: int,
                diagnostics: bool) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: versions, the problem, its data (of an agent built by a factory:
    the factory and its arguments; its host checks the data, `shard_header`), the agents' declarations
    (`pc.Declared`, which the noise is calibrated to), the algorithm, the seed (by value),
    ``diagnostics``, and ``rounds`` when the algorithm's calibration depends on T
    ([`Algorithm.calibrated_to_rounds`][privcvx.algorithms.base.Algorithm])."""
    header = {
        "format": FORMAT_VERSION,
        "privcvx": __version__,
        "agents": list(problem.names),
        "keys": [[str(key), list(shape)] for key, shape in problem.key_shapes.items()],
        "layouts": [[list(map(list, layout.shapes)), layout.shared_local.tolist()] for layout in problem.layouts],
        "data": [f"factory {factory_description(agent)}" if isinstance(agent, AgentSpec)
                 else data_digest([agent.objective, *agent.constraints]) for agent in problem.agents],
        "declared": [_stable(repr(agent.declared)) for agent in problem.agents],  # what the calibration assumed
        "algorithm": _stable(repr(algorithm)),
        "topology": _stable(repr(topology)),
        "seed": int(seed) if isinstance(seed, int | np.integer) else seed if seed is None or isinstance(seed, str)
        else repr(seed),  # by value: np.int64(1) is 1
        "diagnostics": bool(diagnostics),
    }
    if algorithm.calibrated_to_rounds:
        header["rounds"] = rounds
    return header


def factory_description(spec: AgentSpec) -> str:
    """An agent factory and its arguments, without memory addresses."""
    return _stable(repr(spec.factory))


def _stable(text: str) -> str:
    """A description without memory addresses (a default repr of a function or object has one)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


# ---- per-host shards ---------------------------------------------------------------------------------------

def shard_file(path: str | os.PathLike, next_round: int) -> Path:
    """The shard of the state before ``next_round``: ``<shard>.r<next_round>`` (shards are stamped with their
    round, so that a new shard never replaces the one the driver's committed state file names)."""
    return Path(f"{os.fspath(path)}.r{next_round}")


def stamped_shards(path: str | os.PathLike) -> Iterator[tuple[int, Path]]:
    """(round, file) of every stamped shard of ``path`` in its folder."""
    folder, base = os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    pattern = re.compile(re.escape(base) + r"\.r(\d{1,12})")
    for name in os.listdir(folder):
        match = pattern.fullmatch(name)
        if match:
            yield int(match.group(1)), Path(folder) / name


def remove_shard(file: Path) -> None:
    """Delete a shard (a regular file only)."""
    _remove_regular(os.fspath(file))
