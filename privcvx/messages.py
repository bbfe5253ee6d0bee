"""Messages, the only values that cross an agent's boundary, and the transcript of a run.

A `Message` goes from a sender (an agent, or the server) to one receiver, or to all of
the sender's neighbours in that round's graph (``receiver=None``, a broadcast). Its payload is
a dict of numpy arrays. The run records every message in a `Transcript`, in the order
they were sent: this is exactly what an eavesdropper on every channel sees (for payloads sealed for
their receiver, such as RandomizedADMM's secret shares, only the ciphertext), and the public
metrics of a run (residuals, disagreement, the global vector) are computed from it alone.
"""

from __future__ import annotations

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
    """Every message of a run, in the order sent (`append` is the runtime's)."""

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
        rounds = max((m.round for m in self._messages), default=0)
        return f"Transcript(messages={len(self)}, rounds={rounds})"


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
