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
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

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
        for key, value in dict(self.payload).items():
            array = np.asarray(value)
            if array.dtype == object:
                raise ParameterError(f"payload {key!r} must be numeric, got {type(value).__name__}",
                                     agent=self.sender, argument="payload")
            payload[str(key)] = array
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

_LENGTH = struct.Struct("<I")

#: The largest message header `read_message` accepts (a header names a few arrays: kilobytes).
MAX_HEADER_BYTES = 1 << 20


def write_message(handle: IO[bytes], message: Message) -> None:
    """Append one message to a binary file: a little-endian uint32 length, a JSON header (round, phase, sender,
    receiver, and each payload array's key, dtype and shape), then the arrays' raw bytes in C order."""
    arrays = [(key, np.asarray(value)) for key, value in message.payload.items()]  # 0-d stays 0-d
    header = json.dumps({"round": message.round, "phase": message.phase, "sender": message.sender,
                         "receiver": message.receiver,
                         "arrays": [[key, value.dtype.str, list(value.shape)] for key, value in arrays]}).encode()
    handle.write(_LENGTH.pack(len(header)) + header + b"".join(value.tobytes(order="C") for _, value in arrays))


def read_message(handle: IO[bytes], end: int) -> Message:
    """The message written by `write_message` at the handle's position; every read is bounded by the header's
    sizes and by ``end`` (the file's recorded length). A damaged record raises ``ValueError``."""
    start = handle.tell()
    prefix = handle.read(_LENGTH.size)
    (length,) = _LENGTH.unpack(prefix) if len(prefix) == _LENGTH.size else (-1,)
    if not 0 < length <= min(MAX_HEADER_BYTES, end - start - _LENGTH.size):
        raise ValueError(f"a message header of {length} bytes at offset {start}")
    header = json.loads(handle.read(length))
    payload = {}
    for key, dtype, shape in header["arrays"]:
        kind = np.dtype(dtype)
        if kind.hasobject or kind.itemsize == 0 or kind.fields is not None or \
                not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError(f"array {key!r} of dtype {dtype} and shape {shape} is not a payload")
        size = int(np.prod(shape, dtype=object)) * kind.itemsize
        if size > end - handle.tell():
            raise ValueError(f"array {key!r} runs past the end of the file")
        payload[str(key)] = np.frombuffer(handle.read(size), dtype=kind).reshape(tuple(shape)).copy()
    return Message(round=int(header["round"]), sender=str(header["sender"]), receiver=header["receiver"],
                   payload=payload, phase=int(header["phase"]))


class TranscriptFile(Transcript):
    """A transcript appended to a file as the run goes (``solve(transcript="disk")``): the driver's memory stays flat
    in the rounds (docs/performance.md, "Memory per agent-round"). Iterating reads the messages back one at a time.

    The file is created new, owner-only (mode 0600) and without following a symbolic link (``O_EXCL | O_NOFOLLOW``):
    a link or any existing file at ``path`` is refused, never overwritten. It holds every release, as the in-memory
    transcript does (`write_message`'s format).
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
        """Append one round's messages to the file (flushed, so that a reader sees whole rounds)."""
        for message in messages:
            write_message(self._handle, message)
            self._count += 1
        self._handle.flush()
        self._size = self._handle.tell()

    def close(self) -> None:
        """Close the file for writing (the run's end); reading stays possible."""
        self._handle.close()

    def __iter__(self) -> Iterator[Message]:
        with open(self.path, "rb", buffering=1 << 16) as handle:
            for _ in range(self._count):
                try:
                    yield read_message(handle, self._size)
                except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
                    raise PrivcvxError(f"the transcript file {self.path!r} was changed after it was written: {exc}",
                                       argument="transcript_path") from None

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
        self._round: int | None = None  # the round whose neighbour lists are cached
        self._neighbours: dict[str, list[str]] = {}

    def neighbours(self, name: str, t: int) -> list[str]:
        """``topology.neighbours(name, t)``, asked once per sender and round (a server sends to every agent)."""
        if t != self._round:
            self._round, self._neighbours = t, {}
        found = self._neighbours.get(name)
        if found is None:
            found = self._neighbours[name] = self.topology.neighbours(name, t)
        return found

    def post(self, messages: list[Message], t: int) -> None:
        """Deliver messages sent in round ``t`` to their receivers' inboxes (broadcasts to the sender's neighbours);
        a message to a non-neighbour or stamped in the past is refused."""
        for message in messages:
            if message.round < t:
                raise PrivcvxError(f"a message sent in round {t} is stamped with round {message.round}",
                                   agent=message.sender, argument="messages")
            neighbours = self.neighbours(message.sender, message.round)
            if message.receiver is None:
                receivers = neighbours
            elif message.receiver in neighbours:
                receivers = [message.receiver]
            else:
                raise PrivcvxError(f"{message.receiver!r} is not a neighbour in round {message.round}'s graph",
                                   agent=message.sender, argument="messages")
            for receiver in receivers:
                self.inboxes[receiver].append(message)

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
