"""Messages, the only values that cross an agent's boundary, and the transcript of a run.

A `Message` goes from a sender (an agent, or the server) to one receiver, or to all of
the sender's neighbours in that round's graph (``receiver=None``, a broadcast). Its payload is
a dict of numpy arrays. The run records every message in a `Transcript`, in the order
they were sent: this is exactly what an eavesdropper on every channel sees (for payloads sealed for
their receiver, such as RandomizedADMM's secret shares, only the ciphertext), and the public
metrics of a run (residuals, disagreement, the global vector) are computed from it alone.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from privcvx.errors import ParameterError, PrivcvxError
from privcvx.topology import SERVER, Topology


@dataclass(frozen=True)
class Message:
    """One value that leaves an agent (or the server).

    Attributes
    ----------
    round:
        The round t of the exchange (0 for the messages of ``start()``).
    sender:
        The sender's name (an agent's name, or ``"server"``).
    receiver:
        The receiver's name, or ``None`` for a broadcast to the sender's neighbours in round
        ``round``'s graph.
    payload:
        A dict of numpy arrays (scalars are stored as 0-d arrays).
    phase:
        The exchange within the round, for algorithms with several (``Algorithm.phases``).
    """

    round: int
    sender: str
    receiver: str | None
    payload: Mapping[str, np.ndarray] = field(default_factory=dict)
    phase: int = 0

    def __post_init__(self) -> None:
        payload = {}
        for key, value in self.payload.items():
            array = value if type(value) is np.ndarray else np.asarray(value)
            if array.dtype.hasobject:
                raise ParameterError(f"payload {key!r} must be numeric, got {type(value).__name__}",
                                     agent=self.sender, argument="payload")
            payload[key if type(key) is str else str(key)] = array
        object.__setattr__(self, "payload", payload)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.payload[key]

    def same_as(self, other: Message) -> bool:
        """Equal header and bitwise-equal payload arrays."""
        return (self.round, self.phase, self.sender, self.receiver) == (
            other.round, other.phase, other.sender, other.receiver) and self.payload.keys() == other.payload.keys() \
            and all(np.array_equal(self.payload[k], other.payload[k]) for k in self.payload)


class Transcript:
    """Every message of a run, in the order sent (`append` is the runtime's), kept in memory.

    ``solve(transcript=...)`` chooses where a run keeps it (`TRANSCRIPT_MODES`): ``"memory"`` (this class),
    ``"disk"`` (`TranscriptFile`: appended to a file, memory flat in the rounds) or ``"none"``
    (`DroppedTranscript`: nothing kept; the monitor's public metrics, ``result.average()`` and the release checks do
    not read the transcript, so they are unchanged).
    """

    #: Where the messages are: "memory", "disk" or "none".
    mode = "memory"

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self._messages: list[Message] = list(messages)

    def append(self, messages: Iterable[Message]) -> None:
        """Add one round's messages, in the order they were sent."""
        self._messages.extend(messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages)

    def __len__(self) -> int:
        return len(self._messages)

    def __getitem__(self, index: int) -> Message:
        return self._messages[index]

    def round(self, t: int) -> list[Message]:
        """The messages of round t, in order."""
        return [m for m in self._messages if m.round == t]

    def by_sender(self, name: str) -> list[Message]:
        """Every message ``name`` sent, in order."""
        return [m for m in self._messages if m.sender == name]

    def same_as(self, other: Transcript) -> bool:
        """Whether two transcripts hold the same messages in the same order, payloads bitwise equal."""
        return len(self) == len(other) and all(a.same_as(b) for a, b in zip(self, other, strict=True))

    def to_frame(self) -> pd.DataFrame:
        """One row per message: round, phase, sender, receiver ("*" for a broadcast) and payload keys."""
        return pd.DataFrame([{"round": m.round, "phase": m.phase, "sender": m.sender,
                              "receiver": "*" if m.receiver is None else m.receiver,
                              "payload": ",".join(m.payload)} for m in self._messages],
                            columns=["round", "phase", "sender", "receiver", "payload"])

    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(header list, arrays) for saving: headers are JSON-serializable, arrays keyed ``m<i>:<key>``."""
        headers, arrays = [], {}
        for i, m in enumerate(self._messages):
            headers.append([m.round, m.phase, m.sender, m.receiver, list(m.payload)])
            for key, value in m.payload.items():
                arrays[f"m{i}:{key}"] = value
        return {"messages": headers}, arrays

    @classmethod
    def from_arrays(cls, meta: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> Transcript:
        return cls(Message(round=int(r), phase=int(p), sender=s, receiver=rec,
                           payload={k: arrays[f"m{i}:{k}"] for k in keys})
                   for i, (r, p, s, rec, keys) in enumerate(meta["messages"]))

    def __repr__(self) -> str:
        rounds = max((m.round for m in self), default=0)
        return f"{type(self).__name__}(messages={len(self)}, rounds={rounds})"


#: ``solve(transcript=...)``: where a run keeps its messages.
TRANSCRIPT_MODES = ("memory", "disk", "none")

#: The array kinds a stored payload may hold: booleans, integers, floats, complex numbers (no objects, no void).
ARRAY_KINDS = "biufc"

_LENGTH = struct.Struct("<Q")


def integer_field(value: Any) -> int:
    """``value`` if it is an int (not a bool): a field read from an untrusted file; ``TypeError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def text_field(value: Any) -> str:
    """``value`` if it is a string: a field read from an untrusted file; ``TypeError`` otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def array_from_bytes(data: bytes, kind: Any, shape: Any) -> np.ndarray:
    """An array of ``kind`` and ``shape`` from the start of ``data`` (untrusted): only the kinds of `ARRAY_KINDS`, a
    shape of non-negative integers, and at most the bytes there are; ``ValueError`` or ``TypeError`` otherwise."""
    dtype = np.dtype(text_field(kind))
    if dtype.kind not in ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"arrays of dtype {dtype} are not allowed")
    if not isinstance(shape, list) or len(shape) > 32 or any(integer_field(n) < 0 for n in shape):
        raise ValueError(f"not a shape: {shape!r}")
    count = math.prod(shape)
    if count * dtype.itemsize > len(data):
        raise ValueError(f"an array of shape {shape} needs more bytes than the file has")
    return np.frombuffer(data, dtype=dtype, count=count).reshape(shape).copy()


def encode_messages(messages: Iterable[Message]) -> bytes:
    """Messages (a round's) as one record: a length-prefixed JSON list of their headers (round, phase, sender,
    receiver, and each payload array's key, dtype and shape), then their arrays' raw bytes in C order."""
    headers, chunks = [], []
    for message in messages:
        arrays = [(key, np.asarray(value)) for key, value in message.payload.items()]  # 0-d stays 0-d
        headers.append([message.round, message.phase, message.sender, message.receiver,
                        [[key, value.dtype.str, list(value.shape)] for key, value in arrays]])
        chunks += [value.tobytes(order="C") for _, value in arrays]
    header = json.dumps(headers).encode()
    return b"".join([_LENGTH.pack(len(header)), header, *chunks])


def decode_messages(record: bytes) -> list[Message]:
    """The messages of a record written by `encode_messages`. The record is untrusted: every field is checked, and
    a damaged one raises ``ValueError``, ``TypeError``, ``KeyError`` or ``struct.error``."""
    (length,) = _LENGTH.unpack_from(record, 0)
    headers = json.loads(record[_LENGTH.size:_LENGTH.size + length])
    offset = _LENGTH.size + length
    messages = []
    for round_, phase, sender, receiver, arrays in headers:
        payload = {}
        for key, kind, shape in arrays:
            value = array_from_bytes(record[offset:], kind, shape)
            payload[text_field(key)] = value
            offset += value.nbytes
        messages.append(Message(round=integer_field(round_), sender=text_field(sender), payload=payload,
                                receiver=None if receiver is None else text_field(receiver),
                                phase=integer_field(phase)))
    if offset != len(record):
        raise ValueError("the record's length does not match its arrays")
    return messages


class TranscriptFile(Transcript):
    """A transcript appended to a file as the run goes (``solve(transcript="disk")``): the driver's memory stays flat
    in the rounds (docs/performance.md, "Memory per agent-round"). Iterating reads the messages back one at a time.

    The file is created new, owner-only (mode 0600) and without following a symbolic link (``O_EXCL | O_NOFOLLOW``):
    a link or any existing file at ``path`` is refused, never overwritten. It holds every release, as the in-memory
    transcript does: one `encode_messages` record per round, each after its length.
    """

    mode = "disk"

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise ParameterError(f"cannot create the transcript file {self.path!r} (it must not exist yet): "
                                 f"{exc.strerror or exc}", argument="transcript_path") from None
        self._handle = os.fdopen(fd, "wb")
        self._count = 0
        self._size = 0

    def append(self, messages: Iterable[Message]) -> None:
        """Append one round's messages to the file as one record (flushed, so that a reader sees whole rounds)."""
        messages = list(messages)
        record = encode_messages(messages)
        self._handle.write(_LENGTH.pack(len(record)) + record)
        self._handle.flush()
        self._count += len(messages)
        self._size = self._handle.tell()

    def close(self) -> None:
        """Close the file for writing (the run's end); reading stays possible."""
        self._handle.close()

    def __iter__(self) -> Iterator[Message]:
        with open(self.path, "rb", buffering=1 << 16) as handle:
            while handle.tell() < self._size:
                try:
                    prefix = handle.read(_LENGTH.size)
                    (length,) = _LENGTH.unpack(prefix)
                    if length > self._size - handle.tell():
                        raise ValueError(f"a record of {length} bytes runs past the end of the file")
                    messages = decode_messages(handle.read(length))
                except (ValueError, KeyError, TypeError, struct.error) as exc:
                    raise PrivcvxError(f"the transcript file {self.path!r} was changed after it was written: {exc}",
                                       argument="transcript_path") from None
                yield from messages

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> Message:
        count = self._count
        position = index + count if isinstance(index, int) and index < 0 else index
        if not isinstance(position, int) or not 0 <= position < count:
            raise IndexError(f"transcript index {index!r} out of range ({count} messages)")
        for i, message in enumerate(self):
            if i == position:
                return message
        raise IndexError(index)  # pragma: no cover - the file holds count messages

    def round(self, t: int) -> list[Message]:
        return [m for m in self if m.round == t]

    def by_sender(self, name: str) -> list[Message]:
        return [m for m in self if m.sender == name]

    def to_frame(self) -> pd.DataFrame:
        return Transcript(self).to_frame()

    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return Transcript(self).to_arrays()


class DroppedTranscript(Transcript):
    """No transcript (``solve(transcript="none")``): the messages are routed and observed by the monitor, then
    dropped; the transcript stays empty and ``sent`` counts them."""

    mode = "none"

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def append(self, messages: Iterable[Message]) -> None:
        """Count the round's messages and keep none."""
        self.sent += sum(1 for _ in messages)


def make_transcript(mode: str, path: str | os.PathLike | None) -> Transcript:
    """The transcript of ``solve(transcript=mode, transcript_path=path)`` (`TRANSCRIPT_MODES`)."""
    if mode == "disk":
        if path is None:
            raise ParameterError('transcript="disk" needs transcript_path=<a new file>', argument="transcript_path")
        return TranscriptFile(path)
    if path is not None:
        raise ParameterError(f'a transcript file is written only with transcript="disk", not {mode!r}',
                             argument="transcript_path")
    return DroppedTranscript() if mode == "none" else Transcript()


class Router:
    """Delivers messages: each to its receiver, broadcasts to the sender's neighbours in the message's round."""

    def __init__(self, topology: Topology, names: list[str]) -> None:
        self.topology = topology
        self.names = names
        self.inboxes: dict[str, list[Message]] = {name: [] for name in [*names, SERVER]}
        self._round: int | None = None  # the round whose neighbour lists are cached (0 for every round: static)
        self._neighbours: dict[str, tuple[list[str], frozenset[str]]] = {}

    def neighbours(self, name: str, t: int) -> tuple[list[str], frozenset[str]]:
        """``topology.neighbours(name, t)`` and the same names as a set (a receiver is checked in O(1): the server
        sends to every agent), asked once per sender and round, or once per sender for a static graph."""
        key = t if self.topology.time_varying else 0
        if key != self._round:
            self._round, self._neighbours = key, {}
        found = self._neighbours.get(name)
        if found is None:
            names = self.topology.neighbours(name, t)
            found = self._neighbours[name] = (names, frozenset(names))
        return found

    def post(self, messages: list[Message], t: int) -> None:
        """Deliver messages sent in round ``t`` to their receivers' inboxes (broadcasts to the sender's neighbours);
        a message to a non-neighbour or stamped in the past is refused."""
        for message in messages:
            if message.round < t:
                raise PrivcvxError(f"a message sent in round {t} is stamped with round {message.round}",
                                   agent=message.sender, argument="messages")
            neighbours, known = self.neighbours(message.sender, message.round)
            if message.receiver is None:
                for receiver in neighbours:
                    self.inboxes[receiver].append(message)
            elif message.receiver in known:
                self.inboxes[message.receiver].append(message)
            else:
                raise PrivcvxError(f"{message.receiver!r} is not a neighbour in round {message.round}'s graph",
                                   agent=message.sender, argument="messages")

    def take(self, name: str) -> list[Message]:
        """Empty and return ``name``'s inbox."""
        inbox, self.inboxes[name] = self.inboxes[name], []
        return inbox

    def state_dict(self) -> dict[str, list[Message]]:
        """The undelivered messages, per receiver."""
        return {name: list(inbox) for name, inbox in self.inboxes.items()}

    def load_state_dict(self, state: dict[str, list[Message]]) -> None:
        """Restore the undelivered messages."""
        self.inboxes = {name: list(inbox) for name, inbox in state.items()}
