"""The accountant of Q-DPSGD (`privcvx.algorithms.qdpsgd.QDPSGD`): its privacy analysis and noise calibration.

Privacy, variant 1 (gradient perturbation, Theorem 11). The noisy sum is the sampled Gaussian mechanism: under
add/remove-one the sum of clipped gradients has L2 sensitivity K (2K under replace-one; over the mean that is
the thesis's 2K/|S|), the noise is N(0, (s K)^2), and each round is recorded as
[`PoissonSampledGaussian`][privcvx.privacy.mechanisms.PoissonSampledGaussian] (q, s): dp-accounting's
``PoissonSampledDpEvent(q, GaussianDpEvent(s))``, the RDP amplification by subsampling (Lemma 8). The thesis
divides by the realized |S| and uses the approximation 8 rho / (m^2 sigma^2) of the amplified RDP; privcvx
divides by the public B (``batch_size``; the realized size is data dependent) and uses dp-accounting's exact
RDP of the subsampled Gaussian. Q and the gossip are post-processing.

Privacy, variant 2 (output perturbation on the lattice, Theorems 14-15). What is released is Q(x_i(t)) plus
discrete Gaussian noise, so its sensitivity is that of the private state x_i(t), not of one gradient step (Lemma 19
bounds only the last step: a change in one record moves every later x_i, through the term (1 - eps + eps w_ii) x_i
and through the gradients of all the other records, evaluated at a different x_i). With D_0 = 0 (x_i(0) is public)
and the releases of the other agents fixed,

    ||x_i(t) - x_i'(t)||_2 <= D_t = (c_t + alpha_t eps L_rec / q) D_{t-1} + alpha_t eps K / B,

with c_t = 1 - eps (1 - w_ii(t)): the projection is non-expansive, clipping is 1-Lipschitz, each record's gradient
is L_rec-Lipschitz (``SampledAgent(record_smoothness=...)``), at most m = B / q records are sampled, and the
differing record adds at most K / B (on a set projected by a solver, its error adds 2 sqrt(n) e per round:
`privcvx.privacy.sensitivity`). This bound grows geometrically when c_t + alpha_t eps L_rec / q > 1, and the
noise with it: it is what can be proved without further assumptions, not a tight account. With the quantizer's
uniforms fixed, Q moves each coordinate by at most one extra lattice step, so Q(x)/eta has L2 sensitivity D_t/eta +
sqrt(p) (the thesis's Lemma 19 has 2 eta sqrt(p)), and the mixture over the uniforms keeps the bound. The integer
noise has sigma_t = s (D_t/eta + sqrt(p)), each release is 1/(2 s^2)-zCDP (CKS20;
`DiscreteGaussian` in the ledger) and the thesis's subsampling amplification is
not claimed: a record changes the state in every round it is sampled, which Lemma 8 (one release per sample) does
not cover. The release is then saturated to the s-bit range (post-processing). Noise comes from
`discrete_gaussian`: OpenDP's sampler under ``seed="secure"``, a seeded
CKS sampler otherwise.

Variant 1's Gaussian goes through the agent's noise source (``perturb``): on the secure path it becomes a
discrete Gaussian on a fine grid, and the Poisson sample is drawn from the same source (``SecureNoise.uniform``,
the operating system's entropy). The release is recorded as
`PoissonSampledDiscreteGaussian`, which keeps the subsampling amplification: its RDP is the smaller of Zhu & Wang
2019's general bound (`poisson_zcdp_rdp`) and the smoothing lemma's curve (`sampled_discrete_gaussian_rdp`), and its
PLD, which the ledger composes, is dp-accounting's exact one of the Poisson-subsampled discrete Gaussian for a
scalar release, and for a vector release the Poisson-sampled continuous Gaussian's at std sqrt(sigma^2 - 9) (sigma
>= about 1000 grid units) plus a proved slack of 2.8e-77 d per release (the smoothing lemma,
`smoothed_gaussian_pld`). With ``epsilon`` the agent draws the seeded path's multiplier when that PLD spends at most
epsilon with it, else the smallest that does (`QDPSGD.calibrate` with ``grid=True``, `QDPSGD.multiplier_for`): the
seeded multiplier itself for scalar and vector releases at the settings of docs/qdpsgd.md (0.887 and 0.912 spent at
q = 0.02 and 0.1, T = 200, epsilon = 1).

With ``epsilon`` the noise multiplier s is calibrated in `QDPSGD.prepare` so that T rounds spend
(epsilon, delta) under dp-accounting's RDP accountant; ``noise_multiplier`` fixes s instead.
"""

from __future__ import annotations

import dp_accounting
from scipy.optimize import brentq

from privcvx.errors import PrivacyError
from privcvx.privacy.accounting import composed_pld_epsilon
from privcvx.privacy.grid import calibrate as grid_calibration
from privcvx.privacy.mechanisms import GridRdpAccountant, PoissonSampledDiscreteGaussian, PoissonSampledGaussian
from privcvx.privacy.noise import NoiseSource, SecureNoise


class QDPSGDAccountant:
    """The noise multiplier s of `QDPSGD`'s releases for a target (epsilon, delta), on the seeded and the secure path
    (``variant``, ``_epsilon``, ``_delta``, ``_rate``, ``_clip`` and ``_multiplier`` are the method's settings)."""

    variant: int
    _epsilon: float | None
    _delta: float
    _rate: float
    _clip: float | None
    _multiplier: float | None

    def calibrate(self, rounds: int, *, grid: bool = False, dim: int = 1) -> float:
        """The smallest noise multiplier s whose ``rounds`` releases spend (epsilon, delta) (RDP accountant of
        `release_event`: variant 1's exact Poisson-sampled Gaussian, variant 2's (discrete) Gaussian zCDP).

        ``grid=True`` (variant 1 on the secure path, releases of dimension ``dim``): the same s when the ledger's
        account of those releases, `secure_epsilon` (the PLD of `PoissonSampledDiscreteGaussian`, with its slack
        for d > 1), also spends at most epsilon with it, as it does where the PLD is tighter than the RDP bound
        (0.887 at q = 0.02, T = 200, epsilon = 1, for any d); else the smallest s for which it does. Both paths then
        draw the same noise.
        """
        if self._epsilon is None:
            raise PrivacyError("calibration needs epsilon", argument="epsilon")
        seeded = dp_accounting.calibrate_dp_mechanism(
            GridRdpAccountant, lambda s: dp_accounting.SelfComposedDpEvent(self.release_event(s), rounds),
            self._epsilon, self._delta, bracket_interval=dp_accounting.LowerEndpointAndGuess(1e-3, 1.0))
        if not grid or self.variant != 1 or self.secure_epsilon(seeded, rounds, dim) <= self._epsilon:
            return seeded
        upper = 2.0 * seeded
        while self.secure_epsilon(upper, rounds, dim) > self._epsilon:
            upper *= 2.0
        return float(brentq(lambda s: self.secure_epsilon(s, rounds, dim) - self._epsilon, seeded, upper,
                            xtol=1e-6 * seeded))

    def secure_epsilon(self, multiplier: float, rounds: int, dim: int) -> float:
        """The ledger's PLD epsilon at delta of ``rounds`` variant-1 releases of dimension ``dim`` on the secure grid
        at noise multiplier s (`PoissonSampledDiscreteGaussian` on the grid `privcvx.privacy.grid.calibrate` gives
        the clipped sum, sensitivity K), with a vector release's smoothing slack (`composed_pld_epsilon`)."""
        clip = 1.0 if self._clip is None else self._clip
        on_grid = grid_calibration("gaussian", multiplier * clip, clip, dim)
        release = PoissonSampledDiscreteGaussian(self._rate, on_grid.scale, on_grid.sensitivity, dim)
        return composed_pld_epsilon(((release, rounds),), self._delta)

    def release_event(self, multiplier: float) -> dp_accounting.DpEvent:
        """One round's release as a dp-accounting event at noise multiplier s > 0."""
        if self.variant == 1:
            return PoissonSampledGaussian(self._rate, multiplier).dp_event()
        return dp_accounting.ZCDpEvent(rho=0.5 / multiplier ** 2)

    def multiplier_for(self, noise: NoiseSource, rounds: int, dim: int) -> float | None:
        """The noise multiplier an agent drawing from ``noise`` uses: the prepared one, except for a calibrated
        variant 1 on the secure path (`calibrate` with ``grid=True`` for releases of dimension ``dim``)."""
        if self._epsilon is not None and self.variant == 1 and isinstance(noise, SecureNoise):
            return self.calibrate(rounds, grid=True, dim=dim)
        return self._multiplier
