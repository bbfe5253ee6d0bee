"""Additive secret sharing of the exchanged sums: Algorithm 3 of Xiao, Ye & Devadas, "Local Differential
Privacy in Decentralized Optimization" (Appendix A, Theorem 2.1).

Every agent i splits its value v_i into N shares that sum to v_i mod p, keeps one and sends one to each
other agent over a secure pairwise channel (round 1; `privcvx.privacy.secure_channel` seals it: in the clear
the shares and the partial sums give every v_i away); each agent broadcasts the sum of the shares it holds
(round 2); the sum of the broadcasts is sum_i v_i mod p (Eq. (15)). Any N - 2 colluders see shares that
are uniform and independent of an honest agent's value (Theorem 2.1), so N >= 3 is required.

The paper gives no encoding of reals; this module's (the digest's erratum list asks for it):

* fixed point: v -> round(v * 2^scale_bits) in exact rational arithmetic (half to even), a Python integer,
  so the resolution is 2^-scale_bits and the encoding is *exact* for every float that is a multiple of it
  (every float of magnitude >= 2^(52 - scale_bits); every float at all when scale_bits >= 1074);
* signed values as centred residues mod p: an integer n in (-p/2, p/2) is stored as n mod p and read
  back from the centred representative, which needs p > 2 * bound * 2^scale_bits with ``bound`` the public
  bound on |sum of the values| (checked at construction; values above their own bound are refused);
* shares uniform on Z_p from the agent's private stream (`NoiseSource.below`: OS entropy on the
  secure path);
* residues travel as little-endian 32-bit limbs in uint64 arrays (messages carry numeric arrays; a share's are
  sealed before it leaves the agent).

Decoding the exact integer sum rounds once (``float(int)`` is correctly rounded), so a reconstructed
sum equals ``math.fsum`` of the values bitwise when the encoding is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from privcvx.errors import ParameterError, PrivacyError, check_int, require_positive
from privcvx.privacy.noise import NoiseSource

#: The default modulus: the Mersenne prime 2^127 - 1.
DEFAULT_MODULUS = 2 ** 127 - 1


@dataclass(frozen=True)
class FixedPointSharing:
    """The encoding and the modulus of one run's shares (public settings).

    Attributes
    ----------
    parties:
        N, the number of agents taking part (>= 3, Theorem 2.1).
    bound:
        A public bound on |v| for each shared coordinate; |sum| <= parties * bound.
    scale_bits:
        Values are encoded as round(v * 2^scale_bits).
    modulus:
        p, checked against 2 * parties * bound * 2^scale_bits.
    """

    parties: int
    bound: float
    scale_bits: int = 40
    modulus: int = DEFAULT_MODULUS

    def __post_init__(self) -> None:
        parties = check_int(self.parties, argument="parties", minimum=1)
        if parties < 3:
            raise PrivacyError(f"secret sharing (Algorithm 3) needs N >= 3 agents (Theorem 2.1 tolerates N - 2 "
                               f"colluders), got N = {parties}", argument="parties")
        require_positive(self.bound, argument="bound")
        check_int(self.scale_bits, argument="scale_bits", minimum=0)
        modulus = check_int(self.modulus, argument="modulus", minimum=3)
        needed = 2 * math.ceil(Fraction(self.bound) * parties * 2 ** self.scale_bits) + 1
        if modulus < needed:
            raise ParameterError(f"p = {modulus} is too small for centred residues of sums up to N * bound = "
                                 f"{parties * self.bound} at scale 2^{self.scale_bits}: need p >= {needed}",
                                 argument="modulus")

    @property
    def limbs(self) -> int:
        return -(-self.modulus.bit_length() // 32)

    def encode(self, values: np.ndarray, *, agent: str | None = None) -> list[int]:
        """round(v 2^scale_bits) mod p per coordinate; refuses |v| > bound (the sum could wrap around)."""
        values = np.asarray(values, dtype=float).ravel()
        if not np.all(np.isfinite(values)) or np.any(np.abs(values) > self.bound):
            raise PrivacyError(f"a shared value is not finite or above the declared bound {self.bound} "
                               f"(max |v| = {np.max(np.abs(values))}): raise share_bound", agent=agent,
                               argument="share_bound")
        return [round(Fraction(v) * (1 << self.scale_bits)) % self.modulus for v in values.tolist()]

    def exact(self, values: np.ndarray) -> bool:
        """Whether every value is a multiple of 2^-scale_bits (then encoding loses nothing)."""
        scale = 1 << self.scale_bits
        return all((Fraction(v) * scale).denominator == 1 for v in np.asarray(values, dtype=float).ravel())

    def decode(self, residues: Sequence[int]) -> np.ndarray:
        """The centred representative of each residue, divided by 2^scale_bits (one correct rounding)."""
        half = self.modulus // 2
        return np.array([_to_float(_centred(r, self.modulus, half), self.scale_bits) for r in residues])

    def split(self, residues: Sequence[int], source: NoiseSource) -> list[list[int]]:
        """N share vectors (one per party, in party order) summing to ``residues`` mod p; the first is
        s_i1 = v - sum of the others (Algorithm 3, round 1), the others uniform from ``source``."""
        d = len(residues)
        shares = [source.below(self.modulus, d) for _ in range(self.parties - 1)]
        first = [(r - sum(column)) % self.modulus for r, column in zip(residues, zip(*shares, strict=True),
                                                                          strict=True)] if shares else list(residues)
        return [first, *shares]

    def add(self, vectors: Sequence[Sequence[int]]) -> list[int]:
        """The coordinate-wise sum mod p (Algorithm 3, round 2, and the reconstruction (15))."""
        return [sum(column) % self.modulus for column in zip(*vectors, strict=True)]

    def to_limbs(self, residues: Sequence[int]) -> np.ndarray:
        """Residues as a (d, limbs) uint64 array of 32-bit limbs, least significant first."""
        mask = 2 ** 32 - 1
        return np.array([[(r >> (32 * k)) & mask for k in range(self.limbs)] for r in residues], dtype=np.uint64)

    def from_limbs(self, array: np.ndarray) -> list[int]:
        """The residues back from their 32-bit limbs (the inverse of `to_limbs`)."""
        return [sum(int(limb) << (32 * k) for k, limb in enumerate(row)) for row in np.asarray(array)]


def _to_float(n: int, scale_bits: int) -> float:
    """n / 2^scale_bits correctly rounded (Python's int / int is; a float() first would round twice)."""
    return n / (1 << scale_bits)


def _centred(residue: int, modulus: int, half: int) -> int:
    return residue - modulus if residue > half else residue
