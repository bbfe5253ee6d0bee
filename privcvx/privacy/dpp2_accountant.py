"""The privacy accountant of DPP^2 (Theorem 3 of Ou, Wang, Liu & Lu, "Distributed Nonconvex Optimization
with Double Privacy Protection and Exact Convergence", arXiv 2511.02283).

Node i releases y_i^k (noise w_i^k ~ Lap(r_i^k u_{w,i}) per coordinate) and z_i^k (noise
e_i^k ~ Lap(r_i^k u_{e,i})) in iterations k = 0..K. For delta-adjacent objectives (Definition 1:
sup_x ||grad f^(1) - grad f^(2)|| <= delta, l2) and a fixed observation, Appendix E gives
||Delta e^k|| <= delta / (1 - alpha Mbar) and ||Delta w^k|| <= alpha delta / (1 - alpha Mbar) for k >= 1
(it needs alpha Mbar < 1), and the l1 norm costs a factor sqrt(d). Theorem 3:

    eps_i(K) = c_i * sum_{k=1}^{K} r_i^{-k},   c_i = sqrt(d) delta (1/u_{e,i} + alpha/u_{w,i}) / (1 - alpha Mbar).

The theorem's sum starts at k = 1, but z_i^0 is released too, with ||Delta e^0|| = ||Delta grad f(x^0)|| <= delta
and Delta w^0 = 0 (x^0 is public): the conservative accountant adds sqrt(d) delta / u_{e,i}
(``include_zero=True``, the default; the digest's erratum 3). Corollary 1's closed-form interval for r
does not imply Theorem 3 (erratum 1: its r gives 20-200 times the target), so the inverse calibration
here solves Theorem 3's own sum numerically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.optimize import brentq

from privcvx.errors import PrivacyError, check_int, require_positive


def _positive(value: float, argument: str) -> float:
    return require_positive(value, argument=argument, error=PrivacyError)


@dataclass(frozen=True)
class DPP2Privacy:
    """The public quantities of node i's Theorem 3 bound.

    ``delta``: the adjacency radius of Definition 1 (l2); ``dim``: d; ``alpha``: the step of G = alpha I - beta L;
    ``smoothness``: Mbar; ``u_e``, ``u_w``: the initial Laplace scales of e_i and w_i.
    """

    delta: float
    dim: int
    alpha: float
    smoothness: float
    u_e: float
    u_w: float

    def __post_init__(self) -> None:
        for name in ("delta", "alpha", "u_e", "u_w"):
            _positive(getattr(self, name), name)
        require_positive(self.smoothness, argument="smoothness", error=PrivacyError, allow_zero=True)
        check_int(self.dim, argument="dim", error=PrivacyError)
        if not self.alpha * self.smoothness < 1.0:
            raise PrivacyError(f"Theorem 3 needs alpha * Mbar < 1, got {self.alpha} * {self.smoothness} = "
                               f"{self.alpha * self.smoothness:.4g}", argument="alpha")

    # ---- the per-release sensitivities (Appendix E), l1 ------------------------------------------------
    @property
    def sensitivity_e(self) -> float:
        """sqrt(d) delta / (1 - alpha Mbar): the l1 sensitivity of z_i^k for k >= 1."""
        return math.sqrt(self.dim) * self.delta / (1.0 - self.alpha * self.smoothness)

    @property
    def sensitivity_e0(self) -> float:
        """sqrt(d) delta: the l1 sensitivity of z_i^0 (x^0 is public, so only the gradient differs)."""
        return math.sqrt(self.dim) * self.delta

    @property
    def sensitivity_w(self) -> float:
        """sqrt(d) alpha delta / (1 - alpha Mbar): the l1 sensitivity of y_i^k for k >= 1 (0 for k = 0)."""
        return self.alpha * self.sensitivity_e

    @property
    def coefficient(self) -> float:
        """c_i = sqrt(d) delta (1/u_e + alpha/u_w) / (1 - alpha Mbar): Theorem 3's factor of r^{-k}."""
        return self.sensitivity_e / self.u_e + self.sensitivity_w / self.u_w

    @property
    def zero_term(self) -> float:
        """sqrt(d) delta / u_e: the cost of z_i^0, which Theorem 3's sum leaves out."""
        return self.sensitivity_e0 / self.u_e

    # ---- Theorem 3 --------------------------------------------------------------------------------------
    def epsilon(self, iterations: int, r: float, *, include_zero: bool = True) -> float:
        """eps_i(K) = c_i sum_{k=1}^{K} r^{-k} (+ the k = 0 term): the closed form (r^{-K} - 1) / (1 - r)."""
        iterations = check_int(iterations, argument="iterations", minimum=0, error=PrivacyError)
        r = _decay(r)
        log_growth = -iterations * math.log(r)
        if log_growth > 700.0:
            return math.inf
        total = self.coefficient * math.expm1(log_growth) / (1.0 - r)
        return total + (self.zero_term if include_zero else 0.0)

    def calibrate_decay(self, target: float, iterations: int, *, include_zero: bool = True) -> float:
        """The r in (0, 1) with eps_i(K) = ``target`` (larger r: less decay, more privacy), by bracketing.

        eps_i is decreasing in r with infimum K c_i (+ the k = 0 term) as r -> 1, so the target must exceed it.
        """
        target = _positive(target, "target")
        iterations = check_int(iterations, argument="iterations", error=PrivacyError)
        floor = iterations * self.coefficient + (self.zero_term if include_zero else 0.0)
        if not target > floor:
            raise PrivacyError(f"no r in (0, 1) reaches epsilon {target:.6g} in {iterations} iterations: even "
                               f"r -> 1 gives {floor:.6g} (K c_i); raise u_e, u_w or lower alpha", argument="target")

        def gap(log_r: float) -> float:  # in log(eps) so that the tiny-r end does not overflow
            r = math.exp(log_r)
            value = self.epsilon(iterations, r, include_zero=include_zero)
            return (math.log(value) if math.isfinite(value) else 1e300) - math.log(target)

        low = math.log(1e-300)
        high = math.log1p(-1e-15)
        if gap(high) > 0:
            raise PrivacyError(f"epsilon {target:.6g} is too close to the floor {floor:.6g}", argument="target")
        return math.exp(brentq(gap, low, high, xtol=1e-15, rtol=4 * 2.0 ** -52, maxiter=500))

    def calibrate_scale(self, target: float, iterations: int, r: float, *, include_zero: bool = True) -> DPP2Privacy:
        """The same node with u_e and u_w scaled by one factor s so that eps_i(K) = ``target`` (eps is exactly 1/s)."""
        target = _positive(target, "target")
        factor = self.epsilon(iterations, r, include_zero=include_zero) / target
        if not math.isfinite(factor):
            raise PrivacyError(f"epsilon is infinite for r = {r} over {iterations} iterations", argument="r")
        return DPP2Privacy(delta=self.delta, dim=self.dim, alpha=self.alpha, smoothness=self.smoothness,
                           u_e=self.u_e * factor, u_w=self.u_w * factor)


def _decay(r: float) -> float:
    r = _positive(r, "r")
    if r >= 1.0:
        raise PrivacyError(f"the noise decay must lie in (0, 1), got {r!r}", argument="r")
    return r
