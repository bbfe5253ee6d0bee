"""The accuracy theory of `DPDistributedGradient` (paper 001, Huang, Mitra & Vaidya): Theorem 10's bound and the
noise decay p that minimizes its noise term (Sec. 4.5).

These are predictions about the method, not the method: the algorithm uses `optimal_noise_decay` only as the
default of its ``p``; `accuracy_bound` is for users choosing c, q and epsilon (examples/rendezvous_accuracy.py,
bench/bench_dpdg_steps.py and docs/algorithms.md compare it with measured runs).
"""

from __future__ import annotations

import math


def optimal_noise_decay(q: float, calibration: str = "safe") -> float:
    """The p in (q, 1) that minimizes the noise term of Eq. (15) for fixed c and q.

    Paper calibration: p* = q^(1/3) (condition (III) of Sec. 4.5 simplifies to p^3 = q). Safe
    calibration (noise M_t / p): the term is proportional to 1 / ((p - q)^2 (1 - p^2)), whose
    minimizer is p* = (q + sqrt(q^2 + 8)) / 4. Both derivations are in the paper-001 digest.
    """
    return q ** (1.0 / 3.0) if calibration == "paper" else (q + math.sqrt(q * q + 8.0)) / 4.0


def accuracy_bound(*, c: float, q: float, diameter: float, gradient_bound: float, strong_convexity: float,
                   n: int, epsilon: float | None = None, p: float | None = None, calibration: str = "safe",
                   rounds: int | None = None) -> float:
    """Theorem 10's bound d on E||xbar(t) - x*||^2, with the digest's corrections (C1^2, n^2, 1/p^2 when safe).

    ``rounds=None`` gives the limit; otherwise the finite-t bound (27). Without ``epsilon`` only the
    bias of the summable steps remains: C1^2 exp(-C3 c (1 - q^t)/(1 - q)) + C2^2 c^2 / (1 - q^2). The
    proof assumes x* minimizes every f_i (gap (a) of the digest), so for heterogeneous agents this is
    the paper's prediction, not a guarantee: docs/algorithms.md compares it with measured runs.
    """
    horizon = 1.0 if rounds is None else 1.0 - q ** rounds
    bias = diameter ** 2 * math.exp(-strong_convexity * c * horizon / (1.0 - q)) \
        + gradient_bound ** 2 * c ** 2 / (1.0 - q * q)
    if epsilon is None:
        return bias
    p = optimal_noise_decay(q, calibration) if p is None else p
    factor = 1.0 if calibration == "paper" else 1.0 / (p * p)
    noise = 8.0 * gradient_bound ** 2 * n ** 2 * c ** 2 * p ** 2 / (epsilon ** 2 * (p - q) ** 2 * (1.0 - p * p))
    return bias + factor * noise
