"""The public grid of the floating-point-safe noise path (``seed="secure"``).

Floating-point Laplace and Gaussian samplers leak the noise-free value through the low-order bits
of the release (Mironov, CCS 2012). On the secure path privcvx releases a vector v in R^n as

    v_released = gamma * (m + K),    m = round(v / gamma),

where gamma = 2^k is a public grid step and K in Z^n is integer noise drawn by OpenDP's exact
samplers from the operating system's entropy: discrete Laplace for the Laplace mechanisms,
discrete Gaussian for the Gaussian ones (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian
for Differential Privacy", CKS20). Everything that depends on the data is the integer vector m; the
noise is exact integer arithmetic, and the released doubles are a function of the integers m + K
alone (post-processing), so no bit of the release depends on v except through m + K.

**Rounding rule** (`to_grid`, `from_grid`). m = rint(v / gamma), rounding half to even.
gamma is a power of two, so v / gamma is exact (a change of exponent; it can only round where it
underflows below 2^-1022, and m = 0 there anyway): m is the integer nearest to the real number
v / gamma, and |v_i / gamma - m_i| <= 1/2. Back: gamma * float(m + K), exact while |m + K| < 2^53
(and a deterministic function of m + K beyond).

**Sensitivity on the grid** (`grid_sensitivity`). If ||v - v'||_1 <= Delta_1 then
m - m' = (v - v')/gamma + (e' - e) with rounding errors |e_i|, |e'_i| <= 1/2, so
||m - m'||_1 <= Delta_1/gamma + n, an integer, hence <= floor(Delta_1/gamma) + n; and
||m - m'||_2 <= Delta_2/gamma + sqrt(n) (triangle inequality, ||e' - e||_2 <= sqrt(n)).
In real units: Delta_1 + n gamma and Delta_2 + sqrt(n) gamma.

**Default step** (`default_grid_step`): the largest power of two with
c_n gamma <= 2^-10 Delta (c_n = n for L1, sqrt(n) for L2), so the inflation of the sensitivity is
at most 2^-10 (< 0.1%). It uses public quantities only: the declared sensitivity and n.

**Calibration** (`calibrate`): a mechanism with noise multiplier s = scale / Delta draws
integer noise of scale s * (Delta/gamma + c_n) (discrete Laplace scale t, or discrete Gaussian
sigma), i.e. the noise is calibrated to the inflated sensitivity, so the stated privacy holds on the
grid: epsilon = (floor(Delta_1/gamma) + n) / t <= 1/s for the discrete Laplace (pure DP), and
rho = (Delta_2/gamma + sqrt(n))^2 / (2 sigma^2) = 1/(2 s^2) for the discrete Gaussian (CKS20: the
multivariate discrete Gaussian is (||m - m'||_2^2 / (2 sigma^2))-zCDP, the continuous Gaussian's RDP
curve).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from privcvx.errors import PrivacyError
from privcvx.privacy.mechanisms import GRID_PRECISION_BITS, DiscreteGaussian, DiscreteLaplace, Mechanism

_KINDS = ("laplace", "gaussian")
_INT64_SAFE = 2.0 ** 62  # |m| below this leaves room for any noise that OpenDP can draw in 64 bits


def _dimension_factor(kind: str, size: int) -> float:
    """c_n: the grid's worst-case rounding distance in the mechanism's norm, n (L1) or sqrt(n) (L2)."""
    return float(size) if kind == "laplace" else math.sqrt(size)


#: Below this ratio of sensitivity to noise scale, `calibrate` takes the grid step from the noise scale.
NOISE_DOMINATED = 2.0 ** -20


def default_grid_step(bound: float, size: int, kind: str) -> float:
    """gamma = 2^floor(log2(bound / (2^10 c_n))): the grid inflates the sensitivity by at most 2^-10.

    ``bound`` is the declared sensitivity Delta (or, for a data-independent release, the noise scale);
    ``kind`` is "laplace" (c_n = n) or "gaussian" (c_n = sqrt(n)).
    """
    if kind not in _KINDS:
        raise PrivacyError(f'must be "laplace" or "gaussian", got {kind!r}', argument="kind")
    if not (math.isfinite(bound) and bound > 0) or size < 1:
        raise PrivacyError(f"a grid step needs a finite bound > 0 and size >= 1, got {bound!r}, {size!r}",
                           argument="sensitivity")
    exponent = math.floor(math.log2(bound / (2.0 ** GRID_PRECISION_BITS * _dimension_factor(kind, size))))
    if exponent < -1022:
        raise PrivacyError(f"the grid step 2^{exponent} for sensitivity {bound!r} is below the smallest normal "
                           "double", argument="sensitivity")
    return math.ldexp(1.0, exponent)


def grid_sensitivity(sensitivity: float, size: int, step: float, kind: str) -> float:
    """The sensitivity of m = round(v / step) in grid units: floor(Delta_1/step) + n, or Delta_2/step + sqrt(n)."""
    if kind == "laplace":
        return float(math.floor(sensitivity / step) + size)
    return sensitivity / step + math.sqrt(size)


def to_grid(values: np.ndarray, step: float) -> np.ndarray:
    """m = rint(values / step) as int64 (round half to even; exact for a power-of-two step)."""
    scaled = np.asarray(values, dtype=np.float64) / step
    if not np.all(np.isfinite(scaled)) or (scaled.size and np.max(np.abs(scaled)) >= _INT64_SAFE):
        raise PrivacyError(f"the values are not finite or too large for the grid step {step!r} (|v / step| must "
                           "stay below 2^62)", argument="value")
    return np.rint(scaled).astype(np.int64)


def from_grid(integers: np.ndarray, step: float) -> np.ndarray:
    """step * integers as doubles: exact while |integers| < 2^53 (the significand of a double)."""
    return np.asarray(integers, dtype=np.int64).astype(np.float64) * step


@dataclass(frozen=True)
class GridCalibration:
    """How one release is put on the grid; every field is public (computed from the declared sensitivity).

    Attributes
    ----------
    kind:
        "laplace" (discrete Laplace noise) or "gaussian" (discrete Gaussian noise).
    step:
        gamma, the grid step.
    sensitivity:
        The sensitivity of m in grid units (`grid_sensitivity`); 0 for a data-independent release.
    scale:
        The integer noise's scale: t of the discrete Laplace (pmf proportional to exp(-|k|/t)) or
        sigma of the discrete Gaussian (pmf proportional to exp(-k^2 / (2 sigma^2))).
    """

    kind: str
    step: float
    sensitivity: float
    scale: float

    def mechanism(self) -> Mechanism:
        """The ledger entry of a release with this calibration: a ``DiscreteLaplace`` or ``DiscreteGaussian``."""
        if self.kind == "laplace":
            return DiscreteLaplace(self.scale, int(self.sensitivity))
        return DiscreteGaussian(self.scale, self.sensitivity)


def calibrate(kind: str, scale: float, sensitivity: float, size: int) -> GridCalibration:
    """The grid and the integer noise of a release whose float-path noise would have scale ``scale``.

    With Delta = ``sensitivity`` > 0 and s = scale / Delta: gamma = `default_grid_step` (Delta), and the
    integer noise has scale s (Delta / gamma + c_n), the noise multiplier times the inflated sensitivity.
    With Delta = 0 (a data-independent release, e.g. x_i(0) of DPDistributedGradient) the grid follows the
    noise scale instead, and the integer noise has scale ``scale`` / gamma.

    With 0 < Delta < `NOISE_DOMINATED` * ``scale`` (a release whose epsilon is below 2^-20, e.g. DPDG's late
    rounds, where Delta = S c q^t decays faster than the noise), the grid follows 2^-20 ``scale`` instead of
    Delta, the integer noise keeps scale ``scale`` / gamma, and the ledger charges the grid's own sensitivity
    (`grid_sensitivity`): epsilon <= (Delta + n gamma) / scale <= Delta / scale + 2^-30 (Laplace), or
    rho = (Delta + sqrt(n) gamma)^2 / (2 scale^2) with sqrt(n) gamma <= 2^-30 scale (Gaussian). A grid that
    followed Delta there would need |v / gamma| >= 2^62 once Delta < 2^-52 c_n |v| (DPDG at q = 0.5 failed so at
    round 51).
    """
    if kind not in _KINDS:
        raise PrivacyError(f'must be "laplace" or "gaussian", got {kind!r}', argument="kind")
    if not (math.isfinite(scale) and scale > 0) or not (math.isfinite(sensitivity) and sensitivity >= 0):
        raise PrivacyError(f"a grid release needs a finite scale > 0 and a finite sensitivity >= 0, got scale "
                           f"{scale!r} and sensitivity {sensitivity!r}", argument="scale")
    if sensitivity == 0.0:
        step = default_grid_step(scale, size, kind)
        return GridCalibration(kind, step, 0.0, scale / step)
    if sensitivity < NOISE_DOMINATED * scale:
        step = default_grid_step(NOISE_DOMINATED * scale, size, kind)
        return GridCalibration(kind, step, grid_sensitivity(sensitivity, size, step, kind), scale / step)
    step = default_grid_step(sensitivity, size, kind)
    inflated = sensitivity / step + _dimension_factor(kind, size)
    return GridCalibration(kind, step, grid_sensitivity(sensitivity, size, step, kind), scale / sensitivity * inflated)


@lru_cache(maxsize=256)
def _measurement(kind: str, size: int, scale: float) -> Any:
    """OpenDP's integer measurement: discrete Laplace (``make_laplace``) or discrete Gaussian (``make_gaussian``).

    opendp is imported here, not at module level: it takes about 2 s to load and only the secure path needs it.
    """
    import opendp.prelude as dp

    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T="i64"), size=size)
    if kind == "laplace":
        return dp.m.make_laplace(domain, dp.l1_distance(T="i64"), scale=scale)
    return dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=scale)


def integer_noise(kind: str, scale: float, size: int) -> np.ndarray:
    """``size`` iid integers from OpenDP's exact sampler: discrete Laplace (scale t) or discrete Gaussian (sigma).

    OpenDP samples with exact arithmetic from the operating system's entropy (CKS20's algorithms); its
    samplers cannot be seeded, so these draws are not reproducible.
    """
    return np.asarray(_measurement(kind, size, float(scale))([0] * size), dtype=np.int64)
