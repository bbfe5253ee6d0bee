"""Authenticated, encrypted pairwise channels for the secret-shared exchange.

Theorem 2.1 of Xiao, Ye & Devadas (Algorithm 3) assumes *secure pairwise channels*: the share an agent sends
to another is seen by that receiver alone. A share sent in the clear is not: an eavesdropper who also sees the
broadcast partial sums recovers every x_i (x_i = partial_i - sum of the shares i received + sum of the shares i
sent). This module provides the channels, with the ``cryptography`` package's primitives only (OpenSSL);
privcvx implements none:

* **Keys.** Each agent holds one X25519 key pair for the run (RFC 7748), its private key drawn from its noise
  source's key material (`NoiseSource.key_material`: the operating system's entropy on the secure path).
  The public keys are broadcast in the open before round 1 (payload ``"public_key"``).
* **One key per direction.** For the ordered pair i -> j both ends compute the X25519 shared secret and derive a
  256-bit key with HKDF-SHA256 (RFC 5869) whose ``info`` names the direction and both public keys, so i -> j and
  j -> i never share a key.
* **Sealing.** ChaCha20-Poly1305 (RFC 8439). The nonce is the round (8 bytes) and the phase (4 bytes), big
  endian: a directional key seals at most one message per round and phase, so no nonce repeats under a key, and
  the nonce needs no randomness (a seeded run's transcript stays bitwise reproducible). The associated data name
  the sender, the receiver, the round and the phase, so a ciphertext replayed in another round or phase, claimed
  by another sender or redirected to another receiver fails authentication (`PrivacyError`
  naming the receiving agent).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from privcvx.errors import PrivacyError

#: Bytes of an X25519 key (private or public).
KEY_BYTES = 32
#: Domain separation of the derived keys and of the associated data (a new protocol version changes it).
CONTEXT = b"privcvx secret-share channel v1"


def key_bytes(value: Any, *, agent: str, argument: str) -> bytes:
    """A 32-byte X25519 key from its uint8 array (as messages and checkpoints carry it); refused otherwise."""
    array = np.asarray(value)
    if array.shape != (KEY_BYTES,) or array.dtype != np.uint8:
        raise PrivacyError(f"an X25519 key is {KEY_BYTES} bytes (a uint8 array of shape ({KEY_BYTES},)), got "
                           f"shape {array.shape} and dtype {array.dtype}", agent=agent, argument=argument)
    return array.tobytes()


def _fields(*parts: bytes) -> bytes:
    """The parts, each prefixed by its length (so no two different tuples give the same bytes)."""
    return b"".join(struct.pack(">I", len(part)) + part for part in parts)


class PairwiseChannels:
    """One agent's sealed channels to its peers: its X25519 key pair and a ChaCha20-Poly1305 key per direction.

    Parameters
    ----------
    name:
        The agent's name (bound into every key and associated data).
    private_key:
        Its 32-byte X25519 private key (the agent's secret; see the module docstring for where it comes from).
    """

    def __init__(self, name: str, private_key: bytes) -> None:
        self.name = name
        if len(private_key) != KEY_BYTES:
            raise PrivacyError(f"an X25519 private key is {KEY_BYTES} bytes, got {len(private_key)}", agent=name,
                               argument="private_key")
        self._private = X25519PrivateKey.from_private_bytes(bytes(private_key))
        self._peers: dict[str, bytes] = {}
        self._sealers: dict[str, ChaCha20Poly1305] = {}
        self._openers: dict[str, ChaCha20Poly1305] = {}

    @property
    def public_key(self) -> np.ndarray:
        """The agent's public key as a uint8 array (broadcast in the open)."""
        return np.frombuffer(self._public_bytes(), dtype=np.uint8).copy()

    def _public_bytes(self) -> bytes:
        return self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def connect(self, peers: Mapping[str, np.ndarray]) -> None:
        """Derive the keys of both directions with every peer from its public key (name -> uint8 array)."""
        own = self._public_bytes()
        for peer, value in peers.items():
            public = key_bytes(value, agent=self.name, argument=f"public_key of {peer}")
            try:
                secret = self._private.exchange(X25519PublicKey.from_public_bytes(public))
            except ValueError as error:  # a low-order point: the shared secret would be all zeros
                raise PrivacyError(f"the public key of {peer!r} is not usable for key agreement: {error}",
                                   agent=self.name, argument="public_key") from None
            self._peers[peer] = public
            self._sealers[peer] = ChaCha20Poly1305(self._derive(secret, self.name, peer, own, public))
            self._openers[peer] = ChaCha20Poly1305(self._derive(secret, peer, self.name, public, own))

    @staticmethod
    def _derive(secret: bytes, sender: str, receiver: str, sender_key: bytes, receiver_key: bytes) -> bytes:
        info = _fields(CONTEXT, sender.encode(), receiver.encode(), sender_key, receiver_key)
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)

    @staticmethod
    def _nonce_and_data(sender: str, receiver: str, t: int, phase: int) -> tuple[bytes, bytes]:
        header = struct.pack(">QI", t, phase)
        return header, _fields(CONTEXT, sender.encode(), receiver.encode(), header)

    def seal(self, receiver: str, t: int, phase: int, plaintext: np.ndarray) -> np.ndarray:
        """``plaintext``'s bytes encrypted and authenticated for ``receiver`` in round t, phase ``phase``
        (a uint8 array: the ciphertext followed by the 16-byte Poly1305 tag)."""
        sealer = self._sealers.get(receiver)
        if sealer is None:
            raise PrivacyError(f"no channel to {receiver!r}: its public key was not received", agent=self.name,
                               argument="messages")
        nonce, data = self._nonce_and_data(self.name, receiver, t, phase)
        return np.frombuffer(sealer.encrypt(nonce, np.ascontiguousarray(plaintext).tobytes(), data), dtype=np.uint8)

    def open(self, sender: str, t: int, phase: int, ciphertext: np.ndarray) -> bytes:
        """The plaintext bytes ``sender`` sealed for this agent in round t, phase ``phase``; a ciphertext that was
        altered, replayed from another round or phase, or meant for another agent is refused."""
        opener = self._openers.get(sender)
        if opener is None:
            raise PrivacyError(f"round {t}: a sealed message from {sender!r}, which has no channel to this agent",
                               agent=self.name, argument="messages")
        nonce, data = self._nonce_and_data(sender, self.name, t, phase)
        try:
            return opener.decrypt(nonce, np.asarray(ciphertext, dtype=np.uint8).tobytes(), data)
        except InvalidTag:
            raise PrivacyError(f"round {t}, phase {phase}: the sealed share from {sender!r} fails authentication "
                               "(altered, replayed from another round or phase, or meant for another agent)",
                               agent=self.name, argument="messages") from None

    # ---- checkpoints: the private key is a secret like the noise state ------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The private key and the peers' public keys (uint8 arrays): a checkpoint that holds them is secret."""
        private = self._private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return {"private_key": np.frombuffer(private, dtype=np.uint8).copy(),
                "peers": {peer: np.frombuffer(key, dtype=np.uint8).copy() for peer, key in self._peers.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the keys of `state_dict` (read from an untrusted checkpoint: each key is checked)."""
        if not isinstance(state, Mapping) or not isinstance(state.get("peers"), Mapping):
            raise PrivacyError("not the state of sealed channels (a mapping with 'private_key' and 'peers')",
                               agent=self.name, argument="state")
        restored = PairwiseChannels(self.name, key_bytes(state.get("private_key"), agent=self.name,
                                                         argument="private_key"))
        restored.connect(state["peers"])
        self.__dict__.update(restored.__dict__)
