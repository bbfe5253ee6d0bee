"""Checkpoints: the whole state of a run after a round, written atomically, and its transcript.

A checkpoint is two files:

* ``path``: the run state (the coordinator's, every agent's program, the monitor's, the
  undelivered messages, the history so far, the driver's copy of the ledgers), written to a
  temporary file and renamed after every round. It holds the agents' noise states, so it is as
  secret as their data. It is a pickle, read back with ``pickle.load``: only resume from files
  you wrote (a safe format is planned, issue 12).
* ``path + ".transcript"``: every message of the run, appended round by round in a plain
  format (a length-prefixed JSON header per message, then its arrays' raw bytes) that reading
  cannot execute. The state file records how many bytes of it belong to the checkpoint, and
  resuming cuts off anything written after.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from privcvx.errors import ParameterError
from privcvx.messages import Message

_LENGTH = struct.Struct("<I")


def transcript_path(path: str | os.PathLike) -> Path:
    return Path(os.fspath(path) + ".transcript")


def append_messages(path: str | os.PathLike, messages: Iterable[Message]) -> int:
    """Append messages to the transcript file of checkpoint ``path``; return the file's new size."""
    with open(transcript_path(path), "ab") as handle:
        for message in messages:
            arrays = [(key, np.asarray(value)) for key, value in message.payload.items()]  # 0-d stays 0-d
            header = json.dumps({"round": message.round, "phase": message.phase, "sender": message.sender,
                                 "receiver": message.receiver,
                                 "arrays": [[key, value.dtype.str, list(value.shape)] for key, value in arrays]})
            encoded = header.encode()
            handle.write(_LENGTH.pack(len(encoded)) + encoded)
            for _, value in arrays:
                handle.write(value.tobytes(order="C"))
        handle.flush()
        os.fsync(handle.fileno())
        return handle.tell()


def read_messages(path: str | os.PathLike, size: int) -> list[Message]:
    """The messages in the first ``size`` bytes of checkpoint ``path``'s transcript; later bytes are cut off."""
    file = transcript_path(path)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise ParameterError(f"the checkpoint's transcript {file} is missing", argument="resume") from None
    if len(data) < size:
        raise ParameterError(f"the checkpoint's transcript {file} is shorter than recorded", argument="resume")
    messages, offset = [], 0
    while offset < size:
        (length,) = _LENGTH.unpack_from(data, offset)
        header = json.loads(data[offset + 4:offset + 4 + length])
        offset += 4 + length
        payload = {}
        for key, dtype, shape in header["arrays"]:
            kind = np.dtype(dtype)
            count = int(np.prod(shape, dtype=int))
            payload[key] = np.frombuffer(data, dtype=kind, count=count, offset=offset).reshape(tuple(shape)).copy()
            offset += count * kind.itemsize
        messages.append(Message(round=header["round"], sender=header["sender"], receiver=header["receiver"],
                                payload=payload, phase=header["phase"]))
    with open(file, "r+b") as handle:
        handle.truncate(size)
    return messages


def start_transcript(path: str | os.PathLike) -> None:
    """Begin an empty transcript file for a new run checkpointed at ``path``."""
    transcript_path(path).write_bytes(b"")


def write_state(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write the run state atomically (a temporary file in the same folder, then a rename), owner-only."""
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("wb", dir=directory, delete=False) as handle:
        pickle.dump(state, handle)
    os.chmod(handle.name, 0o600)
    os.replace(handle.name, path)


def read_state(path: str | os.PathLike) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return pickle.load(handle)
    except FileNotFoundError:
        raise ParameterError(f"no checkpoint at {os.fspath(path)!r}", argument="resume") from None
