"""Algorithm 3 of Xiao, Ye & Devadas ("Local Differential Privacy in Decentralized Optimization", Appendix A) as one
agent's side of an exchange: the sum of every agent's vector by additive secret sharing mod p
(`privcvx.privacy.secret_sharing`), over the sealed pairwise channels Theorem 2.1 assumes
(`privcvx.privacy.secure_channel`), on a complete graph of N >= 3 agents.

`SecureSum.start` broadcasts the agent's X25519 public key (round 0). In round t, `SecureSum.exchange` runs three
phases: phase 0 seals a share of the agent's vector for every other agent (payload `SEALED_SHARE`; in round 1 it first
connects the channels from the keys), phase 1 opens the shares received and broadcasts their sum with the own share
(``partial``), and phase 2 reconstructs sum_j x_j (Eq. (15)) and returns the sum of the others'. The key pair is drawn
apart from the agent's noise stream, so a method's iterates are those of shares sent in the clear, bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext
from privcvx.errors import PrivacyError, PrivcvxError
from privcvx.messages import Message
from privcvx.privacy.secret_sharing import FixedPointSharing
from privcvx.privacy.secure_channel import KEY_BYTES, PairwiseChannels

#: The payload key of a sealed share (ChaCha20-Poly1305 ciphertext and tag, a uint8 array).
SEALED_SHARE = "sealed_share"


def exact_sum(values: list[np.ndarray]) -> np.ndarray:
    """sum_j x_j per coordinate, correctly rounded (``math.fsum``): the same bits as the secret-shared sum."""
    return np.array([math.fsum(column) for column in zip(*values, strict=True)])


class SecureSum:
    """One agent's side of Algorithm 3: its channels, the own share it keeps and the partial sum it broadcast."""

    def __init__(self, context: AgentContext, sharing: FixedPointSharing) -> None:
        self.context, self.sharing, self.name = context, sharing, context.name
        self.channels = PairwiseChannels(self.name, context.noise.key_material(KEY_BYTES))
        self.kept: list[int] = []     # the own share s_ii of the current vector
        self.partial: list[int] = []  # the own broadcast partial sum

    def start(self) -> list[Message]:
        """Round 0: the broadcast of the agent's public key (the shares follow once every peer's key is known)."""
        return [self.context.message(0, {"public_key": self.channels.public_key})]

    def exchange(self, t: int, inbox: list[Message], phase: int,
                 own: np.ndarray) -> tuple[list[Message], tuple[np.ndarray, int] | None]:
        """Round t's ``phase``: (the messages to send, None), and in phase 2 ([], (sum of the others' vectors, their
        number)). ``own`` is the vector the agent shares."""
        if phase == 0:  # round 1 of Algorithm 3: a sealed share of the own vector to every other agent
            if t == 1:
                self.channels.connect(self._from_each(0, 0, inbox, "public_key"))
            return self._send_shares(t, own), None
        if phase == 1:  # round 2 of Algorithm 3: the sum of the shares held, broadcast
            sealed = self._from_each(t, 1, inbox, SEALED_SHARE)
            shares = [self._open_share(sender, t, sealed[sender], own.size) for sender in sorted(sealed)]
            self.partial = self.sharing.add([self.kept, *shares])
            return [self.context.message(t, {"partial": self.sharing.to_limbs(self.partial)}, phase=2)], None
        partials = self._from_each(t, 2, inbox, "partial")
        total = self.sharing.add([self.partial, *map(self.sharing.from_limbs, partials.values())])  # (15): sum_j x_j
        others = self.sharing.add([total, [(-r) % self.sharing.modulus for r in self.sharing.encode(own)]])
        return [], (self.sharing.decode(others), len(partials))

    def _peers(self, t: int) -> list[str]:
        return [n for n in self.context.topology.graph(t) if n != self.name]

    def _from_each(self, t: int, phase: int, inbox: list[Message], key: str) -> dict[str, np.ndarray]:
        """Payload ``key`` of round t's messages in ``phase``, exactly one from every other agent."""
        received: dict[str, np.ndarray] = {}
        for m in inbox:
            if m.round == t and m.phase == phase and key in m.payload:
                if m.sender in received:
                    raise PrivacyError(f"round {t}: two {key!r} messages from {m.sender!r}", agent=self.name,
                                       argument="messages")
                received[m.sender] = m[key]
        expected = set(self._peers(t))
        if set(received) != expected:
            raise PrivcvxError(f"round {t}: {key!r} expected from {sorted(expected)}, received from "
                               f"{sorted(received)}", agent=self.name, argument="messages")
        return received

    def _send_shares(self, t: int, own: np.ndarray) -> list[Message]:
        """Algorithm 3, round 1: split the vector into N shares, keep the first, seal one for every other agent."""
        shares = self.sharing.split(self.sharing.encode(own, agent=self.name), self.context.noise)
        self.kept = shares[0]
        return [self.context.message(t, {SEALED_SHARE: self.channels.seal(other, t, 1, self.sharing.to_limbs(share))},
                                     receiver=other, phase=1)
                for other, share in zip(self._peers(t), shares[1:], strict=True)]

    def _open_share(self, sender: str, t: int, sealed: np.ndarray, dim: int) -> list[int]:
        """The residues of the share ``sender`` sealed for this agent in round t (little-endian uint64 limbs)."""
        plaintext = self.channels.open(sender, t, 1, sealed)
        limbs = np.frombuffer(plaintext, dtype="<u8")
        if limbs.size != dim * self.sharing.limbs:
            raise PrivacyError(f"round {t}: the share from {sender!r} has {limbs.size} limbs, expected "
                               f"{dim * self.sharing.limbs}", agent=self.name, argument="messages")
        return self.sharing.from_limbs(limbs.reshape(dim, self.sharing.limbs))

    def state_dict(self) -> dict[str, Any]:
        """The exchange's state; it holds the agent's private key (a secret like the noise state)."""
        return {"kept": list(self.kept), "partial": list(self.partial), "channels": self.channels.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict`."""
        self.kept, self.partial = list(state["kept"]), list(state["partial"])
        self.channels.load_state_dict(state["channels"])
