"""The discrete Gaussian on the integers (and on eta * Z): samplers, its pmf and its exact Renyi divergence.

N_Z(0, sigma^2) has pmf proportional to exp(-k^2 / (2 sigma^2)) on the integers (Canonne, Kamath & Steinke,
"The Discrete Gaussian for Differential Privacy", NeurIPS 2020: CKS20; Definition 8 of Ding's thesis
"Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness", Univ. of Houston 2022).
Scaled by eta it is the noise of Q-DPSGD-2 on the quantization lattice eta * Z (the thesis's Corollary 1).

Two samplers, one per noise path (`privcvx.privacy.noise`), chosen by the class of the agent's source:

* [`SecureNoise`][privcvx.privacy.noise.SecureNoise]: OpenDP's exact sampler (``make_gaussian`` on integers, CKS20's
  algorithm in exact arithmetic, operating-system entropy): `privcvx.privacy.grid.integer_noise`.
* [`SeededNoise`][privcvx.privacy.noise.SeededNoise]: CKS20's Algorithm 3 (a discrete Laplace proposal of scale
  t = floor(sigma) + 1, accepted with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))) driven by the
  source's seeded uniforms: reproducible, for experiments; the uniforms are doubles, so it is exact only up to
  floating point (like every draw of the seeded path).

Privacy (CKS20, Theorem 4 and Proposition 5, the thesis's Theorem 14): adding N_Z(0, sigma^2)^p to an integer
vector of L2 sensitivity D is (D^2 / (2 sigma^2))-zCDP, the continuous Gaussian's RDP curve
alpha D^2 / (2 sigma^2); `discrete_gaussian_rdp` computes the exact divergence of one coordinate, which
equals that curve when alpha D is an integer and lies below it otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.special import logsumexp

from privcvx.errors import PrivacyError, require_positive
from privcvx.privacy.grid import integer_noise
from privcvx.privacy.mechanisms import check_size
from privcvx.privacy.noise import NoiseSource, SecureNoise, SeededNoise

#: The pmf is summed over |k| <= TAIL_SIGMAS sigma + 1: the mass left out is below exp(-TAIL_SIGMAS^2 / 2).
TAIL_SIGMAS = 40.0


def _check_sigma(sigma: float) -> float:
    return require_positive(sigma, argument="sigma", error=PrivacyError)


def _seeded(source: SeededNoise, sigma: float, size: int) -> np.ndarray:
    """CKS20 Algorithm 3 on the source's seeded uniforms (geometric differences for the discrete Laplace)."""
    t = math.floor(sigma) + 1
    log_ratio = -1.0 / t  # the discrete Laplace proposal: P(Y = y) proportional to exp(-|y| / t)
    accepted: list[np.ndarray] = []
    remaining = size
    while remaining > 0:
        batch = 2 * remaining + 16
        u = source.uniform(3 * batch).reshape(3, batch)
        # 1 - u lies in (0, 1]: a geometric draw floor(log(1 - u) / log r) on {0, 1, ...}, with r = e^(-1/t).
        first, second = (np.floor(np.log1p(-u[k]) / log_ratio) for k in (0, 1))
        y = first - second
        keep = u[2] < np.exp(-(np.abs(y) - sigma * sigma / t) ** 2 / (2.0 * sigma * sigma))
        accepted.append(y[keep][:remaining])
        remaining -= accepted[-1].size
    return np.concatenate(accepted).astype(np.int64)


def _secure(source: SecureNoise, sigma: float, size: int) -> np.ndarray:
    """OpenDP's exact discrete Gaussian sampler (operating-system entropy; not reproducible)."""
    return integer_noise("gaussian", sigma, size)


#: The sampler of each noise path, keyed by the class of the agent's noise source.
SAMPLERS: dict[type, Callable[..., np.ndarray]] = {SeededNoise: _seeded, SecureNoise: _secure}


def discrete_gaussian(source: NoiseSource, sigma: float, size: int) -> np.ndarray:
    """``size`` iid draws of N_Z(0, sigma^2) from the agent's noise ``source`` (see the module docstring)."""
    sigma, size = _check_sigma(sigma), check_size(size)
    sampler = SAMPLERS.get(type(source))
    if sampler is None:
        raise PrivacyError(f"no discrete Gaussian sampler for a {type(source).__name__}", argument="noise")
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    return sampler(source, sigma, size)


def discrete_gaussian_pmf(sigma: float, support: np.ndarray) -> np.ndarray:
    """P[X = k] of N_Z(0, sigma^2) at the integers ``support`` (normalized over |k| <= 40 sigma + 1)."""
    sigma = _check_sigma(sigma)
    bound = math.ceil(TAIL_SIGMAS * sigma) + 1
    log_norm = logsumexp(-np.arange(-bound, bound + 1, dtype=float) ** 2 / (2.0 * sigma * sigma))
    k = np.asarray(support, dtype=float)
    return np.exp(-k * k / (2.0 * sigma * sigma) - log_norm)


def discrete_gaussian_rdp(sigma: float, shift: float, orders: np.ndarray) -> np.ndarray:
    """The exact Renyi divergence D_alpha(N_Z(shift, sigma^2) || N_Z(0, sigma^2)) of one coordinate.

    Both laws live on the integers shifted by ``shift`` and by 0. For an integer shift the sum runs over the
    common support, |k| <= 40 sigma + (max order + 1) |shift| + 1 (past the peak of its terms near
    k = alpha shift), in log space. For a non-integer shift the supports are disjoint and the divergence is
    infinite: a release on a lattice must round first, as Q-DPSGD-2 does.
    """
    sigma = _check_sigma(sigma)
    if not float(shift).is_integer():
        return np.full(np.shape(orders), np.inf)
    alpha = np.asarray(orders, dtype=float)[:, None]
    # The terms p^alpha q^(1 - alpha) peak near k = alpha * shift: the sum runs well past it.
    bound = math.ceil(TAIL_SIGMAS * sigma + (float(alpha.max()) + 1.0) * abs(shift)) + 1
    k = np.arange(-bound, bound + 1, dtype=float)
    log_p = -(k - shift) ** 2 / (2.0 * sigma * sigma)
    log_q = -k * k / (2.0 * sigma * sigma)
    log_p -= logsumexp(log_p)
    log_q -= logsumexp(log_q)
    return logsumexp(alpha * log_p + (1.0 - alpha) * log_q, axis=1) / (alpha[:, 0] - 1.0)
