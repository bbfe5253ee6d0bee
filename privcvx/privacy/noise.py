"""Noise sources: where each agent draws the noise of its releases, on one of two paths.

Every agent owns one source and perturbs each of its releases with it (`NoiseSource.perturb`:
the value, the mechanism's kind, the float-path noise scale and the value's sensitivity), so a run
does not depend on the order in which agents are processed. The source's ``path`` says which
path a run used (the runtime reports it):

* `SeededNoise`, path `SEEDED_PATH`: numpy ``Generator(PCG64)`` on one child of
  ``numpy.random.SeedSequence(seed).spawn(P)``, releasing ``value + scale * u`` with u standard
  Laplace or normal in floating point. Reproducible: its state is JSON-serializable and restoring it
  reproduces the following draws bit for bit (checkpoints). **Not floating-point safe**: the low-order
  bits of a float Laplace or Gaussian release depend on the noise-free value, and many releases
  cannot be produced from a neighbouring dataset at all (Mironov, CCS 2012; ``tests/test_secure_noise.py``
  measures it). For experiments.
* `SecureNoise`, path `GRID_PATH` (``seed="secure"``): the release is
  ``gamma * (round(value / gamma) + K)`` with K integer noise drawn by OpenDP's exact samplers from
  the operating system's entropy, discrete Laplace or discrete Gaussian, calibrated to the grid's
  inflated sensitivity ([`privcvx.privacy.grid`][privcvx.privacy.grid]). Not reproducible, by design.

The privacy guarantee assumes the adversary does not know the noise: a run seeded with
a published integer seed has no privacy at all. Use ``seed="secure"`` for anything but experiments.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privcvx.errors import ParameterError, PrivacyError, check_scalar
from privcvx.privacy.grid import GridCalibration, calibrate, from_grid, integer_noise, to_grid
from privcvx.privacy.mechanisms import Mechanism, PoissonSampledDiscreteGaussian, PoissonSampledGaussian, check_size

#: ``SeededNoise.path``: the reproducible research path.
SEEDED_PATH = "seeded-float (reproducible, not floating-point safe)"
#: ``SecureNoise.path``: the path of ``seed="secure"``.
GRID_PATH = "opendp-grid (floating-point safe)"

_KINDS = ("laplace", "gaussian")
#: The spawn-key entry of a seeded agent's key material (``SeededNoise.key_material``): "key" in ASCII.
KEY_SPAWN = 0x6B6579


@dataclass(frozen=True)
class Perturbed:
    """One noisy release.

    Attributes
    ----------
    value:
        The released vector.
    magnitude:
        Sum of |noise| over its coordinates (Eq. (29)): |xi| on the float path, gamma |K| on the grid
        (the rounding to the grid is not noise and is not counted).
    grid:
        The grid it was released on, or ``None`` on the float path (and for a noise-free release).
    """

    value: np.ndarray
    magnitude: float
    grid: GridCalibration | None

    def accounted(self, mechanism: Mechanism) -> Mechanism:
        """The ledger entry of this release, whose float-path mechanism is ``mechanism``.

        Float path: ``mechanism``. Grid: the grid release's own mechanism (``DiscreteLaplace`` or
        ``DiscreteGaussian`` with the inflated sensitivity and the noise actually drawn), except for a
        data-independent release (sensitivity 0), which keeps ``mechanism``: a valid, conservative entry. A
        ``PoissonSampledGaussian`` keeps its amplification: ``PoissonSampledDiscreteGaussian`` (its sample is drawn
        from the same source, e.g. ``SecureNoise.uniform``).
        """
        if self.grid is None or self.grid.sensitivity == 0.0:
            return mechanism
        if isinstance(mechanism, PoissonSampledGaussian) and self.grid.kind == "gaussian":
            return PoissonSampledDiscreteGaussian(mechanism.sampling_rate, self.grid.scale, self.grid.sensitivity,
                                                  int(self.value.size))
        return self.grid.mechanism()


@runtime_checkable
class NoiseSource(Protocol):
    """One agent's noise: how its releases are perturbed, and which path they take (``path``)."""

    path: str

    def calibrated(self, mechanism: Mechanism) -> Mechanism:
        """The mechanism whose noise this source draws where ``mechanism`` is configured (differs for a budget)."""
        ...

    def perturb(self, value: np.ndarray, kind: str, scale: float, sensitivity: float, *,
                subtract: bool = False) -> Perturbed:
        """``value`` with noise of kind ``kind`` ("laplace" or "gaussian").

        ``scale`` is the float-path noise scale (Laplace b or Gaussian sigma) and ``sensitivity`` the
        bound Delta of ``value`` over neighbouring datasets in the kind's norm (L1 or L2), so that
        ``scale / sensitivity`` is the noise multiplier. ``subtract=True`` releases value - noise
        (ObjPert's g - xi).
        """
        ...

    def uniform(self, size: int) -> np.ndarray:
        """``size`` private draws of U(0, 1) (an agent's secret random parameters, e.g. its penalties)."""
        ...

    def below(self, modulus: int, size: int) -> list[int]:
        """``size`` private integers uniform on {0, ..., modulus - 1} (secret shares; any modulus >= 1)."""
        ...

    def key_material(self, size: int) -> bytes:
        """``size`` secret bytes for a key (an X25519 private key), drawn without advancing the noise stream."""
        ...

    def get_state(self) -> dict:
        """A JSON-serializable state; `set_state` with it reproduces the following draws."""
        ...

    def set_state(self, state: dict) -> None:
        """Restore a state returned by `get_state`."""
        ...


def _check_kind(kind: Any) -> str:
    if kind not in _KINDS:
        raise PrivacyError(f'must be "laplace" or "gaussian", got {kind!r}', argument="kind")
    return kind


class SeededNoise(NoiseSource):
    """Reproducible floating-point noise: numpy ``Generator(PCG64)`` seeded from a ``SeedSequence``."""

    path = SEEDED_PATH

    def __init__(self, seed: np.random.SeedSequence | int) -> None:
        if not isinstance(seed, np.random.SeedSequence):
            seed = np.random.SeedSequence(_check_seed(seed))
        self._seed = seed
        self._generator = np.random.Generator(np.random.PCG64(seed))

    def calibrated(self, mechanism: Mechanism) -> Mechanism:
        """``mechanism`` itself: the float path releases what it accounts."""
        return mechanism

    def perturb(self, value: np.ndarray, kind: str, scale: float, sensitivity: float, *,
                subtract: bool = False) -> Perturbed:
        """``value + xi`` (or ``value - xi``) with xi = ``scale`` * u, u one draw of the standard Laplace or normal."""
        unit = self.standard_laplace(value.size) if _check_kind(kind) == "laplace" else self.standard_normal(value.size)
        noise = scale * unit
        return Perturbed(value - noise if subtract else value + noise, float(np.abs(noise).sum()), None)

    def standard_laplace(self, size: int) -> np.ndarray:
        """``size`` draws of Laplace(0, 1) from the seeded generator (research runs only)."""
        return self._generator.laplace(0.0, 1.0, check_size(size))

    def standard_normal(self, size: int) -> np.ndarray:
        """``size`` draws of N(0, 1) from the seeded generator (research runs only)."""
        return self._generator.standard_normal(check_size(size))

    def uniform(self, size: int) -> np.ndarray:
        return self._generator.random(check_size(size))

    def below(self, modulus: int, size: int) -> list[int]:
        """Rejection sampling on ``modulus.bit_length()`` random bits (32-bit words): exactly uniform."""
        bits = _check_modulus(modulus).bit_length()
        words = -(-bits // 32)
        draws: list[int] = []
        while len(draws) < check_size(size):
            block = self._generator.integers(0, 2 ** 32, size=(size - len(draws), words), dtype=np.uint64).tolist()
            for row in block:
                value = 0
                for word in row:
                    value = (value << 32) | word
                value >>= 32 * words - bits
                if value < modulus:
                    draws.append(value)
        return draws

    def key_material(self, size: int) -> bytes:
        """Bytes of the child ``KEY_SPAWN`` of this source's ``SeedSequence`` (which nothing else spawns): as
        reproducible from the seed as the noise, and independent of the noise draws, which it does not shift."""
        child = np.random.SeedSequence(self._seed.entropy, spawn_key=(*self._seed.spawn_key, KEY_SPAWN),
                                       pool_size=self._seed.pool_size)
        return child.generate_state(-(-check_size(size) // 4), np.uint32).astype("<u4").tobytes()[:size]

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


class SecureNoise(NoiseSource):
    """Floating-point-safe noise: OpenDP's integer samplers on a public grid; not reproducible by design.

    A release is ``gamma * (round(value / gamma) + K)`` ([`privcvx.privacy.grid`][privcvx.privacy.grid]): gamma and the
    integer noise's scale come from [`calibrate`][privcvx.privacy.grid.calibrate] (public quantities only), K
    is discrete Laplace or discrete Gaussian noise drawn by OpenDP from the operating system's entropy
    (Canonne, Kamath & Steinke 2020), and the ledger records the grid's mechanism
    (`Perturbed.accounted`). The integer noise is symmetric, so ``subtract`` is irrelevant here.
    """

    path = GRID_PATH

    def calibrated(self, mechanism: Mechanism) -> Mechanism:
        """``mechanism``, or for a budget-calibrated one the multiplier that meets the budget with grid releases.

        A budget is calibrated for Laplace or Gaussian releases; the grid's discrete mechanisms are accounted
        differently (no PLD for the discrete Gaussian), so the budget is spent with ``Budget.per_update(steps,
        grid=True)`` instead.
        """
        if mechanism.budget is None:
            return mechanism
        if mechanism.budget_steps is None:
            raise PrivacyError("a budget-calibrated mechanism without its number of steps (restored from a "
                               "description?): resolve the budget with Budget.per_update(steps)", argument="mechanism")
        return mechanism.budget.per_update(mechanism.budget_steps, grid=True)

    def perturb(self, value: np.ndarray, kind: str, scale: float, sensitivity: float, *,
                subtract: bool = False) -> Perturbed:
        """``value`` rounded to the grid plus integer noise calibrated to the grid's sensitivity."""
        values = np.asarray(value, dtype=np.float64)
        if scale == 0.0 and sensitivity == 0.0:  # a data-independent value that takes no noise
            return Perturbed(values.copy(), 0.0, None)
        grid = calibrate(_check_kind(kind), scale, sensitivity, values.size)
        noise = integer_noise(kind, grid.scale, values.size)
        return Perturbed(from_grid(to_grid(values, grid.step) + noise, grid.step),
                         grid.step * float(np.abs(noise).sum()), grid)

    def uniform(self, size: int) -> np.ndarray:
        """U(0, 1) with 53 random bits from the operating system's entropy (``secrets``)."""
        return np.array([secrets.randbits(53) for _ in range(check_size(size))], dtype=np.float64) * 2.0 ** -53

    def below(self, modulus: int, size: int) -> list[int]:
        return [secrets.randbelow(_check_modulus(modulus)) for _ in range(check_size(size))]

    def key_material(self, size: int) -> bytes:
        """``size`` bytes of the operating system's entropy (``secrets.token_bytes``)."""
        return secrets.token_bytes(check_size(size))

    def get_state(self) -> dict:
        return {"secure": True}

    def set_state(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("secure") is not True:
            raise PrivacyError(f"a SecureNoise has no state to restore, got {state!r}", argument="state")


def _check_modulus(modulus: Any) -> int:
    return check_scalar(modulus, argument="modulus", kind=int, low=1)


def _check_seed(seed: Any) -> int:
    """An integer seed >= 0 (the other seeds, None and "secure", are handled by the callers)."""
    return check_scalar(seed, argument="seed", kind=int, low=0)


def agent_noise_sources(seed: int | None | str, count: int) -> list[NoiseSource]:
    """One independent noise stream per agent.

    ``seed`` int: ``SeedSequence(seed).spawn(count)``, one `SeededNoise` each, so
    the same seed gives the same draws. ``None``: the same from a fresh OS-seeded
    ``SeedSequence`` (reproducible only through `SeededNoise.get_state`).
    ``"secure"``: one `SecureNoise` each (the floating-point-safe grid path).
    """
    count = check_scalar(count, argument="count", kind=int, low=0)
    if isinstance(seed, str):
        if seed != "secure":
            raise ParameterError(f'must be an int >= 0, None or "secure", got {seed!r}', argument="seed")
        return [SecureNoise() for _ in range(count)]
    root = np.random.SeedSequence() if seed is None else np.random.SeedSequence(_check_seed(seed))
    return [SeededNoise(child) for child in root.spawn(count)]
