"""Checkpoints: the whole state of a run after a round, in a format that reading cannot execute.

A checkpoint is two files:

* ``path``: a ``.npz`` archive (read with ``allow_pickle=False``) holding the run state (the
  coordinator's, every agent program's, the monitor's, the undelivered messages, the history so
  far, the driver's copy of the ledgers) as JSON with its arrays stored beside it, and a header:
  the format and library versions and a fingerprint of the run (`fingerprint`: the problem's
  public structure, a digest of every agent's data, the algorithm and its settings, the topology,
  the seed). `read_state` refuses a file whose header does not match the run being resumed,
  and says what differs. It is written to a temporary file and renamed after every round, owner-only:
  it holds the agents' noise states and iterates, so it is as secret as their data.
* ``path + ".transcript"``: every message of the run, appended round by round (a length-prefixed
  JSON header per message, then its arrays' raw bytes). The state records how many bytes of it belong
  to the checkpoint, and resuming cuts off anything written after.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import struct
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from privcvx.errors import CheckpointError
from privcvx.messages import Message
from privcvx.problem import AgentSpec, data_leaves

#: Bumped whenever the layout of a checkpoint changes; a file of another format is refused.
FORMAT_VERSION = 1

_LENGTH = struct.Struct("<I")


# ---- the transcript file ----------------------------------------------------------------------------------

def transcript_path(path: str | os.PathLike) -> Path:
    """Where the transcript of the checkpoint at ``path`` is kept (``<path>.transcript``)."""
    return Path(os.fspath(path) + ".transcript")


def _write_message(handle: Any, message: Message) -> None:
    arrays = [(key, np.asarray(value)) for key, value in message.payload.items()]  # 0-d stays 0-d
    header = json.dumps({"round": message.round, "phase": message.phase, "sender": message.sender,
                         "receiver": message.receiver,
                         "arrays": [[key, value.dtype.str, list(value.shape)] for key, value in arrays]}).encode()
    handle.write(_LENGTH.pack(len(header)) + header)
    for _, value in arrays:
        handle.write(value.tobytes(order="C"))


def append_messages(path: str | os.PathLike, messages: Iterable[Message]) -> int:
    """Append messages to the transcript file of checkpoint ``path``; return the file's new size."""
    with open(transcript_path(path), "ab") as handle:
        for message in messages:
            _write_message(handle, message)
        handle.flush()
        os.fsync(handle.fileno())
        return handle.tell()


def read_messages(path: str | os.PathLike, size: int) -> list[Message]:
    """The messages in the first ``size`` bytes of checkpoint ``path``'s transcript; later bytes are cut off."""
    file = transcript_path(path)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"the checkpoint's transcript {file} is missing", argument="resume") from None
    if len(data) < size:
        raise CheckpointError(f"the checkpoint's transcript {file} is shorter than recorded", argument="resume")
    messages, offset = [], 0
    try:
        while offset < size:
            (length,) = _LENGTH.unpack_from(data, offset)
            header = json.loads(data[offset + 4:offset + 4 + length])
            offset += 4 + length
            payload = {}
            for key, dtype, shape in header["arrays"]:
                kind = np.dtype(dtype)
                if kind.hasobject:
                    raise ValueError(f"object arrays are not allowed ({dtype})")
                count = int(np.prod(shape, dtype=int))
                payload[key] = np.frombuffer(data, dtype=kind, count=count, offset=offset).reshape(tuple(shape)).copy()
                offset += count * kind.itemsize
            messages.append(Message(round=int(header["round"]), sender=str(header["sender"]),
                                    receiver=header["receiver"], payload=payload, phase=int(header["phase"])))
    except (ValueError, KeyError, TypeError, struct.error, json.JSONDecodeError) as exc:
        raise CheckpointError(f"the checkpoint's transcript {file} is damaged: {exc}", argument="resume") from None
    with open(file, "r+b") as handle:
        handle.truncate(size)
    return messages


def start_transcript(path: str | os.PathLike) -> None:
    """Begin an empty transcript file for a new run checkpointed at ``path``."""
    transcript_path(path).write_bytes(b"")
    os.chmod(transcript_path(path), 0o600)


# ---- the state file ----------------------------------------------------------------------------------------

class _Encoder:
    """Turns nested dicts, lists, arrays, floats and Messages into JSON plus a dict of arrays."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def _array(self, value: np.ndarray) -> dict[str, str]:
        if value.dtype.hasobject:
            raise CheckpointError(f"cannot store an object array in a checkpoint: {value!r}", argument="checkpoint")
        key = f"a{len(self.arrays)}"
        self.arrays[key] = value
        return {"__array__": key}

    def encode(self, value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return self._array(value)
        if isinstance(value, Message):
            return {"__message__": [value.round, value.phase, value.sender, value.receiver,
                                    {k: self._array(np.asarray(v)) for k, v in value.payload.items()}]}
        if isinstance(value, Mapping):
            if not all(isinstance(k, str) for k in value):
                raise CheckpointError(f"checkpoint dictionaries need string keys, got {list(value)[:5]}",
                                      argument="checkpoint")
            return {"__dict__": {k: self.encode(v) for k, v in value.items()}}
        if isinstance(value, (list, tuple)):
            return [self.encode(v) for v in value]
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            value = float(value)
            return value if math.isfinite(value) else {"__float__": repr(value)}
        if value is None or isinstance(value, str):
            return value
        raise CheckpointError(f"cannot store a {type(value).__name__} in a checkpoint", argument="checkpoint")


def _decode(value: Any, arrays: Mapping[str, np.ndarray], used: set[str]) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays, used) for v in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        used.add(value["__array__"])
        array = arrays[value["__array__"]]
        if not isinstance(array, np.ndarray):
            raise TypeError(f"member {value['__array__']!r} is not an array")
        return array
    if "__float__" in value:
        return float(value["__float__"])
    if "__message__" in value:
        round_, phase, sender, receiver, payload = value["__message__"]
        return Message(round=int(round_), sender=str(sender), receiver=receiver, phase=int(phase),
                       payload={k: _decode(v, arrays, used) for k, v in payload.items()})
    return {k: _decode(v, arrays, used) for k, v in value["__dict__"].items()}


def write_state(path: str | os.PathLike, header: dict[str, Any], state: dict[str, Any]) -> None:
    """Write the header and the run state atomically (a temporary file in the same folder, then a rename)."""
    encoder = _Encoder()
    encoded = json.dumps(encoder.encode(state), allow_nan=False)
    buffer = io.BytesIO()
    np.savez(buffer, __header__=np.array(json.dumps(header)), __state__=np.array(encoded),
             __digest__=np.array(_digest(encoded, encoder.arrays)), **encoder.arrays)
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("wb", dir=directory, delete=False) as handle:
        handle.write(buffer.getvalue())
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(handle.name, 0o600)
    os.replace(handle.name, path)


def _digest(state_text: str, arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 of the state and of every array (key, dtype, shape, bytes): it detects edits and damage."""
    digest = hashlib.sha256(state_text.encode())
    for key in sorted(arrays):
        array = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}:{array.dtype.str}:{array.shape}".encode() + array.tobytes())
    return digest.hexdigest()


def read_state(path: str | os.PathLike, expected: dict[str, Any]) -> dict[str, Any]:
    """Read a state written by `write_state`, after checking its header against ``expected``.

    Nothing in the file is executed (``allow_pickle=False``). A missing, damaged or foreign file, or one
    written by another run (another problem, data, algorithm, setting, seed or version), raises
    [`CheckpointError`][privcvx.errors.CheckpointError] saying what differs.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            header = json.loads(str(archive["__header__"]))
            state_text = str(archive["__state__"])
            digest = str(archive["__digest__"])
            arrays = {key: archive[key] for key in archive.files if not key.startswith("__")}
    except FileNotFoundError:
        raise CheckpointError(f"no checkpoint at {os.fspath(path)!r}", argument="resume") from None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{os.fspath(path)!r} is not a privcvx checkpoint (or is damaged): {exc}",
                              argument="resume") from None
    if any(not isinstance(value, np.ndarray) for value in arrays.values()) or digest != _digest(state_text, arrays):
        raise CheckpointError(f"{os.fspath(path)!r} was edited or damaged: its content does not match its digest",
                              argument="resume")
    differences = [f"{key}: the file has {header.get(key)!r}, this run has {value!r}"
                   for key, value in expected.items() if header.get(key) != value]
    if differences:
        raise CheckpointError("the checkpoint belongs to another run; " + "; ".join(differences), argument="resume")
    used: set[str] = set()
    try:
        state = _decode(json.loads(state_text), arrays, used)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"the checkpoint's state is damaged: {exc}", argument="resume") from None
    if used != set(arrays):
        raise CheckpointError(f"the checkpoint holds members its state does not use: {sorted(set(arrays) - used)}; "
                              "it was edited", argument="resume")
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


def fingerprint(problem: Any, algorithm: Any, topology: Any, seed: Any) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: versions, the problem, its data, the algorithm, the seed."""
    from privcvx import __version__

    return {
        "format": FORMAT_VERSION,
        "privcvx": __version__,
        "agents": list(problem.names),
        "keys": [[str(key), list(shape)] for key, shape in problem.key_shapes.items()],
        "layouts": [[list(map(list, layout.shapes)), layout.shared_local.tolist()] for layout in problem.layouts],
        "data": [f"factory {_stable(repr(agent.factory))}" if isinstance(agent, AgentSpec)
                 else data_digest([agent.objective, *agent.constraints]) for agent in problem.agents],
        "algorithm": _stable(repr(algorithm)),
        "topology": _stable(repr(topology)),
        "seed": repr(seed),
    }


def _stable(text: str) -> str:
    """A description without memory addresses (a default repr of a function or object has one)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)
