"""Noise sources: where each agent draws the unit noise of its local updates.

Every agent owns one stream and draws from it once per local update, so a run is
reproducible from its seed regardless of the order in which agents are processed:

* :class:`SeededNoise`: numpy ``Generator(PCG64)`` on one child of
  ``numpy.random.SeedSequence(seed).spawn(P)``. Its state is JSON-serializable and
  restoring it reproduces the following draws bit for bit (checkpoints).
* :class:`SecureNoise`: bytes from the operating system (``os.urandom``) turned into
  draws by inverse-CDF transforms. Not reproducible, by design.

The privacy guarantee assumes the adversary does not know the noise: a run seeded with
a published integer seed has no privacy at all. Use ``seed="secure"`` (or a secret
seed) for anything but experiments.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

import numpy as np
from scipy.special import ndtri

from privcvx.errors import ParameterError, PrivacyError
from privcvx.privacy.mechanisms import check_size


@runtime_checkable
class NoiseSource(Protocol):
    """One agent's stream of unit noise."""

    def standard_laplace(self, size: int) -> np.ndarray:
        """``size`` iid draws of the Laplace distribution with mean 0 and scale 1."""
        ...

    def standard_normal(self, size: int) -> np.ndarray:
        """``size`` iid draws of N(0, 1)."""
        ...

    def get_state(self) -> dict:
        """A JSON-serializable state; :meth:`set_state` with it reproduces the following draws."""
        ...

    def set_state(self, state: dict) -> None:
        """Restore a state returned by :meth:`get_state`."""
        ...


class SeededNoise:
    """Reproducible noise: numpy ``Generator(PCG64)`` seeded from a ``SeedSequence``."""

    def __init__(self, seed: np.random.SeedSequence | int) -> None:
        if not isinstance(seed, np.random.SeedSequence):
            seed = np.random.SeedSequence(_check_seed(seed))
        self._generator = np.random.Generator(np.random.PCG64(seed))

    def standard_laplace(self, size: int) -> np.ndarray:
        return self._generator.laplace(0.0, 1.0, check_size(size))

    def standard_normal(self, size: int) -> np.ndarray:
        return self._generator.standard_normal(check_size(size))

    def get_state(self) -> dict:
        state = self._generator.bit_generator.state
        # PCG64's 128-bit integers are written as hex strings so that any JSON reader keeps them exact.
        return {"secure": False, "bit_generator": state["bit_generator"],
                "state": hex(state["state"]["state"]), "inc": hex(state["state"]["inc"]),
                "has_uint32": int(state["has_uint32"]), "uinteger": int(state["uinteger"])}

    def set_state(self, state: dict) -> None:
        try:
            if state["secure"] or state["bit_generator"] != "PCG64":
                raise ValueError("not the state of a SeededNoise")
            self._generator.bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {"state": int(state["state"], 16), "inc": int(state["inc"], 16)},
                "has_uint32": int(state["has_uint32"]), "uinteger": int(state["uinteger"])}
        except (KeyError, TypeError, ValueError) as error:
            raise PrivacyError(f"cannot restore {state!r}: {error}", argument="state") from None


class SecureNoise:
    """Noise from the operating system's entropy (``os.urandom``); not reproducible by design.

    Each draw takes one 64-bit word: its top 53 bits give ``v`` uniform on (0, 1)
    (never 0 or 1), its lowest bit the sign. The magnitude is ``-ln v`` (Exp(1)) for the
    Laplace, ``-ndtri(v/2)`` (the half-normal inverse CDF) for the normal.
    """

    def standard_laplace(self, size: int) -> np.ndarray:
        v, sign = _uniform_and_sign(check_size(size))
        return sign * -np.log(v)

    def standard_normal(self, size: int) -> np.ndarray:
        v, sign = _uniform_and_sign(check_size(size))
        return sign * -ndtri(0.5 * v)

    def get_state(self) -> dict:
        return {"secure": True}

    def set_state(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("secure") is not True:
            raise PrivacyError(f"a SecureNoise has no state to restore, got {state!r}", argument="state")


def _uniform_and_sign(size: int) -> tuple[np.ndarray, np.ndarray]:
    words = np.frombuffer(os.urandom(8 * size), dtype="<u8")
    v = ((words >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53
    sign = np.where(words & np.uint64(1), -1.0, 1.0)
    return v, sign


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f'must be an int >= 0, None or "secure", got {seed!r}', argument="seed")
    return int(seed)


def agent_noise_sources(seed: int | None | str, count: int) -> list[NoiseSource]:
    """One independent noise stream per agent.

    ``seed`` int: ``SeedSequence(seed).spawn(count)``, one :class:`SeededNoise` each, so
    the same seed gives the same draws. ``None``: the same from a fresh OS-seeded
    ``SeedSequence`` (reproducible only through :meth:`SeededNoise.get_state`).
    ``"secure"``: one :class:`SecureNoise` each.
    """
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ParameterError(f"must be an int >= 0, got {count!r}", argument="count")
    if isinstance(seed, str):
        if seed != "secure":
            raise ParameterError(f'must be an int >= 0, None or "secure", got {seed!r}', argument="seed")
        return [SecureNoise() for _ in range(count)]
    root = np.random.SeedSequence() if seed is None else np.random.SeedSequence(_check_seed(seed))
    return [SeededNoise(child) for child in root.spawn(int(count))]
