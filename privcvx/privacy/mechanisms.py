"""Privacy mechanisms of one local update: Laplace and Gaussian noise (Thm. 4.8), and budgets.

A mechanism fixes the *noise multiplier*: the ratio of the noise scale to the
sensitivity. The perturbation (Eq. (10) or Eq. (12)) multiplies it by the
sensitivity of what it perturbs and draws the noise from the agent's stream:

* `Laplace` (Thm. 4.8(i)): scale ``b = Delta_1 / epsilon``, i.e. variance
  ``2 (Delta_1 / epsilon)^2``; (epsilon, 0)-DP per local update.
* `Gaussian` (Thm. 4.8(ii)): ``sigma^2 = 2 ln(1.25/delta) (Delta_2/epsilon)^2``,
  valid for epsilon <= 1 only (Dwork & Roth, Thm. A.1); ``analytic=True`` uses the
  exact calibration of Balle & Wang (2018), valid for every epsilon.
* `Budget`: one agent's total (epsilon, delta) for a whole run, turned into the
  per-update noise multiplier by a tight accountant (PLD or RDP from dp-accounting).

On the floating-point-safe path (``seed="secure"``, [`privcvx.privacy.grid`][privcvx.privacy.grid]) a release is not
Laplace or Gaussian but discrete noise on a public grid; the ledger records it as
`DiscreteLaplace` (pure DP, exact dp-accounting event) or `DiscreteGaussian` (zCDP,
Canonne, Kamath & Steinke 2020), with the grid's sensitivity and noise scale.

Sensitivities (`Sensitivity`) are the gradient sensitivities Eq. (18) (L1) and
Eq. (21) (L2), or an output sensitivity for OutPert (Eqs. (6b), (7)).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import dp_accounting
import numpy as np
from dp_accounting import pld, rdp
from dp_accounting.dp_event import DiscreteLaplaceDpEvent
from scipy.special import gammaln, logsumexp

from privcvx.errors import PrivacyError, check_int, check_scalar, require_positive

if TYPE_CHECKING:
    from privcvx.privacy.noise import SeededNoise

#: Value discretization interval of every PLD accountant privcvx builds. The PLD
#: accountant rounds pessimistically, so a coarser grid still gives an upper bound on
#: epsilon; at 1e-3 the Gaussian epsilon is within 1e-7 relative of the exact value
#: (measured, see docs/privacy.md) at a tenth of the cost of dp-accounting's 1e-4.
PLD_DISCRETIZATION = 1e-3

#: dp-accounting's neighbouring relation for every accountant privcvx builds. A
#: ``GaussianDpEvent(s)`` / ``LaplaceDpEvent(s)`` under ADD_OR_REMOVE_ONE is the pair of
#: noise distributions shifted by one sensitivity unit, which is exactly what a
#: privcvx mechanism releases when its sensitivity is the worst case over the user's
#: neighbouring datasets. See "Neighbouring relation" in docs/privacy.md.
NEIGHBOURING_RELATION = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE

#: The grid of the secure path keeps its inflation of the sensitivity below 2^-GRID_PRECISION_BITS
#: (`privcvx.privacy.grid.default_grid_step`), so a grid release's integer L1 sensitivity is at
#: least 2^GRID_PRECISION_BITS + 1.
GRID_PRECISION_BITS = 10

_NORMS = ("l1", "l2")

#: The largest noise multiplier the accountants compose (dp-accounting events, mu^2, rho). A larger one (a release
#: whose noise decays more slowly than its sensitivity, as in DPDG's Eq. (8), reaches 1e154 after a few hundred to a
#: few thousand rounds) is accounted at this one, see `accounted_multiplier`.
MAX_ACCOUNTED_MULTIPLIER = 1.0e150


def accounted_multiplier(noise_multiplier: float) -> float:
    """``noise_multiplier``, capped at `MAX_ACCOUNTED_MULTIPLIER`: the multiplier the accountants compose.

    Valid: more noise never costs more privacy. A Gaussian with multiplier s' > s is the one with s followed by
    independent N(0, s'^2 - s^2) noise (post-processing); a Laplace's privacy profile delta(eps) = max(0, 1 -
    e^((eps - 1/s)/2)) falls as s grows. So the capped release's accounting dominates the true one in every
    accountant. Exact to float: at the cap a release's epsilon is 1e-150 (Laplace), its mu^2, rho and every Renyi
    divergence of orders up to 1024 below 1e-297, far below the float resolution of any epsilon that matters
    (2.2e-16 relative), and the squares s^2 of the formulas stay below 1e300 instead of overflowing.
    """
    return min(noise_multiplier, MAX_ACCOUNTED_MULTIPLIER)


def discrete_laplace_rdp(parameter: float, sensitivity: int, orders: np.ndarray) -> np.ndarray:
    """Exact Renyi divergence of the discrete Laplace mechanism at each order alpha > 1.

    P has pmf tanh(a/2) e^{-a|k|} on the integers (a = ``parameter`` = 1/t) and Q is P shifted by the
    integer D = ``sensitivity`` >= 1 (the divergence is symmetric in P and Q). Splitting
    sum_k P(k)^alpha Q(k)^(1 - alpha) at k <= 0, 0 < k < D and k >= D gives three geometric series,
    e^{a(alpha-1)D} / (1 - e^{-a}), e^{a(alpha-1)D} r (1 - r^(D-1)) / (1 - r) with r = e^{-a(2 alpha - 1)},
    and e^{-a alpha D} / (1 - e^{-a}); D_alpha(P || Q) is ln(tanh(a/2) times their sum) / (alpha - 1),
    the Renyi divergence of Mironov's RDP (2017). Computed in log space.
    """
    a, d = float(parameter), int(sensitivity)
    alpha = np.asarray(orders, dtype=np.float64)
    log_tail = math.log(-math.expm1(-a))
    terms = [a * (alpha - 1.0) * d - log_tail, -a * alpha * d - log_tail]
    if d >= 2:
        log_r = -a * (2.0 * alpha - 1.0)
        terms.append(a * (alpha - 1.0) * d + log_r + np.log(-np.expm1((d - 1) * log_r)) - np.log(-np.expm1(log_r)))
    return (math.log(math.tanh(0.5 * a)) + logsumexp(np.stack(terms), axis=0)) / (alpha - 1.0)


class GridRdpAccountant(rdp.RdpAccountant):
    """dp-accounting's ``RdpAccountant`` (privcvx's neighbouring relation, default orders) that also composes
    a ``DiscreteLaplaceDpEvent``, with its exact Renyi divergence (`discrete_laplace_rdp`).

    dp-accounting's own RDP accountant does not support that event; composing the continuous
    ``LaplaceDpEvent`` of the same epsilon instead would understate the divergence: by up to 32% at
    D = 1 (epsilon <= 2), by a relative O(1/D^2) beyond: below 1e-6 at the grid's D >= 2^10.
    It also composes the binary ``RandomizedResponseDpEvent`` of `PureDP`, which dp-accounting accepts only
    under replace-one: randomized response is symmetric, so that curve holds under add-or-remove too.
    And it composes the secure path's `SampledDiscreteGaussianDpEvent` (`sampled_discrete_gaussian_rdp`).
    """

    def __init__(self) -> None:
        super().__init__(neighboring_relation=NEIGHBOURING_RELATION)

    def _maybe_compose(self, event: dp_accounting.DpEvent, count: int, do_compose: bool) -> object:
        if _is_poisson_gaussian(event):
            if do_compose:  # its RDP curve costs ~0.1 s: computed once per (q, s, orders), then scaled by count
                self._rdp += count * _poisson_gaussian_rdp(event.sampling_probability,
                                                           event.event.noise_multiplier, tuple(self._orders))
            return None
        if isinstance(event, SampledDiscreteGaussianDpEvent):
            if do_compose:  # the discrete Gaussian of the secure path, Poisson-subsampled (Q-DPSGD-1)
                self._rdp += count * sampled_discrete_gaussian_rdp(event, tuple(self._orders))
            return None
        if isinstance(event, dp_accounting.RandomizedResponseDpEvent) and event.num_buckets == 2:
            if do_compose:  # symmetric, so its replace-one curve bounds any relation under which it is epsilon-DP
                self._rdp += count * _randomized_response_rdp(event.noise_parameter, tuple(self._orders))
            return None
        if not isinstance(event, DiscreteLaplaceDpEvent):
            return super()._maybe_compose(event, count, do_compose)
        if do_compose:
            self._rdp += count * discrete_laplace_rdp(event.noise_parameter, event.sensitivity, self._orders)
        return None


def _is_poisson_gaussian(event: dp_accounting.DpEvent) -> bool:
    return isinstance(event, dp_accounting.PoissonSampledDpEvent) and isinstance(event.event,
                                                                                  dp_accounting.GaussianDpEvent)


@dataclass(frozen=True)
class SampledDiscreteGaussianDpEvent(dp_accounting.DpEvent):
    """The secure path's Poisson-sampled discrete Gaussian (`PoissonSampledDiscreteGaussian`) as a dp-accounting
    event: every record enters the sample with probability ``sampling_rate`` q, and the release is an integer vector
    of dimension ``dimension`` d and L2 sensitivity ``sensitivity`` D plus N_Z(0, ``sigma``^2 I_d). Only
    `GridRdpAccountant` composes it (`sampled_discrete_gaussian_rdp`); its PLD is the mechanism's own."""

    sampling_rate: float
    sigma: float
    sensitivity: float
    dimension: int


@lru_cache(maxsize=256)
def sampled_discrete_gaussian_rdp(event: SampledDiscreteGaussianDpEvent, orders: tuple[float, ...]) -> np.ndarray:
    """An RDP curve of one `SampledDiscreteGaussianDpEvent`: at each order the smaller of two valid bounds,

    * Zhu & Wang's general bound on the discrete Gaussian's rho = D^2 / (2 sigma^2) (`poisson_zcdp_rdp`);
    * the smoothing lemma (`smoothed_gaussian_pld`): dp-accounting's Poisson-sampled continuous Gaussian at
      multiplier sqrt(sigma^2 - r^2) / D plus lambda (2 alpha - 1) / (alpha - 1), lambda = `smoothing_slack` (r, d).
      With likelihood ratios P / P' and Q / Q' within e^(+-lambda) and 1 - alpha < 0, sum P^alpha Q^(1-alpha) <=
      e^(alpha lambda) e^((alpha - 1) lambda) sum P'^alpha Q'^(1-alpha), so D_alpha(P || Q) <= D_alpha(P' || Q') +
      lambda (2 alpha - 1) / (alpha - 1), and D_alpha(P' || Q') is at most the sampled Gaussian's (post-processing,
      and the dominance of `smoothed_gaussian_pld`, where exp((alpha - 1) D_alpha) is jointly convex).
    """
    width = smoothing_width(event.sigma)
    alphas = np.asarray(orders, dtype=np.float64)
    inner = math.sqrt(event.sigma ** 2 - width ** 2) / event.sensitivity
    smoothed = (_poisson_gaussian_rdp(event.sampling_rate, accounted_multiplier(inner), orders)
                + smoothing_slack(width, event.dimension) * (2.0 * alphas - 1.0) / (alphas - 1.0))
    rho = 0.5 * (event.sensitivity / event.sigma) ** 2
    curve = np.minimum(poisson_zcdp_rdp(event.sampling_rate, rho, orders), smoothed)
    curve.setflags(write=False)
    return curve


@lru_cache(maxsize=256)
def poisson_zcdp_rdp(rate: float, rho: float, orders: tuple[float, ...]) -> np.ndarray:
    """An RDP curve of a rho-zCDP mechanism (epsilon(l) = rho l) run on a Poisson sample of rate q.

    Zhu & Wang 2019 ("Poisson subsampled Renyi differential privacy", Thm. 6, the general upper bound, valid for
    any mechanism with that RDP curve), at an integer order alpha >= 2:

        (alpha - 1) epsilon'(alpha) <= log[ (1-q)^(alpha-1) (alpha q - q + 1)
                                           + C(alpha, 2) q^2 (1-q)^(alpha-2) e^(2 rho)
                                           + 3 sum_{l=3}^{alpha} C(alpha, l) q^l (1-q)^(alpha-l) e^((l-1) l rho) ],

    and never more than the unsampled rho alpha (joint quasi-convexity; the only bound at a fractional order).
    For the Gaussian curve it is the exact sampled-Gaussian sum with the terms l >= 3 tripled: O(q^3) for a small q.
    """
    alphas = np.asarray(orders, dtype=np.float64)
    curve = rho * alphas
    if rate >= 1.0:
        curve.setflags(write=False)
        return curve
    log_q, log_keep = math.log(rate), math.log1p(-rate)
    for index, alpha in enumerate(alphas):
        if alpha < 2 or alpha != math.floor(alpha) or alpha > 10_000:
            continue
        a = int(alpha)
        ells = np.arange(2, a + 1, dtype=np.float64)
        log_binomial = gammaln(a + 1) - gammaln(ells + 1) - gammaln(a - ells + 1)
        terms = log_binomial + ells * log_q + (a - ells) * log_keep + (ells - 1) * ells * rho
        terms[1:] += math.log(3.0)
        head = (a - 1) * log_keep + math.log1p((a - 1) * rate)
        curve[index] = min(curve[index], float(logsumexp(np.append(terms, head))) / (a - 1))
    curve.setflags(write=False)
    return curve


@lru_cache(maxsize=256)
def _randomized_response_rdp(noise_parameter: float, orders: tuple[float, ...]) -> np.ndarray:
    """The RDP curve of one binary ``RandomizedResponseDpEvent`` (`PureDP`), from dp-accounting (replace-one)."""
    relation = dp_accounting.NeighboringRelation.REPLACE_ONE
    accountant = rdp.RdpAccountant(orders=list(orders), neighboring_relation=relation)
    accountant.compose(dp_accounting.RandomizedResponseDpEvent(noise_parameter, 2))
    curve = np.array(accountant._rdp, dtype=float)
    curve.setflags(write=False)
    return curve


@lru_cache(maxsize=256)
def _poisson_gaussian_rdp(rate: float, multiplier: float, orders: tuple[float, ...]) -> np.ndarray:
    """The RDP curve of one ``PoissonSampledDpEvent(rate, GaussianDpEvent(multiplier))``, from dp-accounting."""
    accountant = rdp.RdpAccountant(orders=list(orders), neighboring_relation=NEIGHBOURING_RELATION)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(multiplier)))
    curve = np.array(accountant._rdp, dtype=float)
    curve.setflags(write=False)
    return curve


def _number(value: Any, *, argument: str, allow_zero: bool) -> float:
    """``value`` as a finite float > 0 (or >= 0), else a PrivacyError naming ``argument`` (`check_scalar`: a bool is
    refused)."""
    return require_positive(value, argument=argument, error=PrivacyError, allow_zero=allow_zero)


def check_epsilon(value: Any, argument: str = "epsilon") -> float:
    """A privacy epsilon: finite and > 0."""
    return _number(value, argument=argument, allow_zero=False)


def check_delta(value: Any, argument: str = "delta") -> float:
    """A privacy delta: in the open interval (0, 1)."""
    number = _number(value, argument=argument, allow_zero=False)
    if number >= 1.0:
        raise PrivacyError(f"must lie in (0, 1), got {value!r}", argument=argument)
    return number


def check_size(value: Any, argument: str = "size") -> int:
    """A number of draws: an int >= 0."""
    return check_scalar(value, argument=argument, kind=int, low=0, error=PrivacyError)


@dataclass(frozen=True)
class Sensitivity:
    """Sensitivity bounds of the vector a mechanism perturbs.

    For ObjPert this is the gradient sensitivity: ``l1`` bounds Eq. (18) and ``l2``
    bounds Eq. (21), the largest change of ``f_p'(z; D_p)`` over neighbouring datasets.
    Each is ``None`` (not declared) or a finite number >= 0; at least one is required.

    ``nominal`` is ``None`` for a valid bound, or the reason why the numbers are a paper's printed constant
    that is not a valid bound (e.g. ``"Delta = 2 beta of Sec. 6.1.1"``): releases calibrated to it are labelled
    nominal in the privacy table ([`NominalPrivacyWarning`][privcvx.errors.NominalPrivacyWarning]).
    """

    l1: float | None = None
    l2: float | None = None
    nominal: str | None = None

    def __post_init__(self) -> None:
        if self.l1 is None and self.l2 is None:
            raise PrivacyError("declare at least one of l1 (Eq. (18)) and l2 (Eq. (21))", argument="l1")
        for name in _NORMS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _number(value, argument=name, allow_zero=True))
        if self.nominal is not None and (not isinstance(self.nominal, str) or not self.nominal.strip()):
            raise PrivacyError(f"must be None or a non-empty reason, got {self.nominal!r}", argument="nominal")

    def get(self, norm: str) -> float:
        """The bound in ``norm`` ("l1" or "l2"). A missing l2 falls back to l1, as ||v||_2 <= ||v||_1."""
        if norm not in _NORMS:
            raise PrivacyError(f'must be "l1" or "l2", got {norm!r}', argument="norm")
        value = self.l2 if norm == "l2" and self.l2 is not None else self.l1
        if value is None:
            raise PrivacyError("the Laplace mechanism needs an L1 sensitivity (Eq. (18)); only l2 is "
                               "declared", argument="l1")
        return value

    def scaled(self, factor: float) -> Sensitivity:
        """Both bounds multiplied by ``factor`` (finite, >= 0)."""
        factor = _number(factor, argument="factor", allow_zero=True)
        return Sensitivity(l1=None if self.l1 is None else self.l1 * factor,
                           l2=None if self.l2 is None else self.l2 * factor, nominal=self.nominal)


class _SignatureEquality(ABC):
    """Equality and hashing by ``signature()``, so equal settings share ledger entries and caches."""

    @abstractmethod
    def signature(self) -> tuple:
        """A hashable identity: equal signatures mean equal noise and equal privacy accounting."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SignatureEquality) and self.signature() == other.signature()

    def __hash__(self) -> int:
        return hash(self.signature())


class Mechanism(_SignatureEquality):
    """The noise of one local update of one agent, as its ledger accounts it.

    Attributes
    ----------
    kind:
        ``"laplace"`` or ``"gaussian"`` (the float path and the mechanisms users configure), or
        ``"discrete_laplace"`` / ``"discrete_gaussian"`` (a release on the grid of the secure path).
    norm:
        The sensitivity norm it is calibrated to: ``"l1"`` (Laplace) or ``"l2"`` (Gaussian).
    pure:
        True when each release is (epsilon, 0)-DP (the Laplace kinds).
    epsilon, delta:
        The per-update (epsilon-bar, delta-bar) of Thm. 4.8. For a mechanism calibrated
        from a `Budget` there is no per-update pair for the Gaussian: its epsilon
        is NaN and its delta is the budget's delta (the run's delta). A discrete Gaussian
        claims no (epsilon, delta) pair: both are NaN (its accounting is zCDP).
    noise_multiplier:
        Noise scale over sensitivity: ``b / Delta_1 = 1/epsilon`` (Laplace),
        ``sigma / Delta_2`` (Gaussian), the same ratio in grid units for the discrete kinds.
    budget:
        The `Budget` this mechanism was calibrated from, or ``None``.
    budget_steps:
        The number of local updates it spends that budget over (``None`` without a budget).
    """

    kind: ClassVar[str]
    norm: ClassVar[str]
    pure: ClassVar[bool]
    #: The noise a release of this mechanism draws: "laplace" or "gaussian" (on the float path or the grid) or
    #: "discrete_gaussian" (integer noise on integer codes); None for a mechanism that is only a ledger entry.
    draws: ClassVar[str | None] = None
    #: The names of a subclass's own settings, after the common ones in `signature` and `to_dict`.
    settings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, epsilon: float, delta: float, noise_multiplier: float,
                 budget: Budget | None = None) -> None:
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.noise_multiplier = float(noise_multiplier)
        self.budget = budget
        self.budget_steps: int | None = None

    @property
    @abstractmethod
    def calibration(self) -> str:
        """How the noise multiplier was obtained: "classic", "analytic", "budget" or "grid"."""

    @abstractmethod
    def dp_event(self) -> dp_accounting.DpEvent:
        """This update as a dp-accounting event, for the RDP and PLD accountants."""

    @property
    def accounting_note(self) -> str | None:
        """What the privacy table's epsilon columns are for this kind of release, when they are not dp-accounting's
        own accountants on an exact event (the table's ``accounting`` column); None when they are."""
        return None

    def scale(self, sensitivity: Sensitivity) -> float:
        """Noise scale for ``sensitivity``: ``noise_multiplier * sensitivity.get(self.norm)``."""
        if not isinstance(sensitivity, Sensitivity):
            raise PrivacyError(f"must be a pc.Sensitivity, got {sensitivity!r}", argument="sensitivity")
        return self.noise_multiplier * sensitivity.get(self.norm)

    def signature(self) -> tuple:
        return (self.kind, self.calibration, _none_if_nan(self.epsilon), _none_if_nan(self.delta),
                self.noise_multiplier, None if self.budget is None else self.budget.signature(),
                *(getattr(self, name) for name in self.settings))

    def to_dict(self) -> dict:
        """A JSON-serializable description that `mechanism_from_dict` restores exactly."""
        return {"kind": self.kind, "calibration": self.calibration, "epsilon": _none_if_nan(self.epsilon),
                "delta": _none_if_nan(self.delta), "noise_multiplier": self.noise_multiplier,
                "budget": None if self.budget is None else self.budget.to_dict(),
                **{name: getattr(self, name) for name in self.settings}}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon!r}, delta={self.delta!r}, "
                f"noise_multiplier={self.noise_multiplier!r}, calibration={self.calibration!r})")


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else value


class _PureEpsilon(Mechanism):
    """A mechanism that is (epsilon, 0)-DP per release, with noise multiplier 1 / epsilon."""

    norm = "l1"
    pure = True

    def __init__(self, epsilon: float) -> None:
        epsilon = check_epsilon(epsilon)
        super().__init__(epsilon=epsilon, delta=0.0, noise_multiplier=1.0 / epsilon)


class Laplace(_PureEpsilon):
    """Laplace noise per local update, Thm. 4.8(i): scale ``Delta_1/epsilon``, (epsilon, 0)-DP."""

    kind = "laplace"
    draws = "laplace"

    @property
    def calibration(self) -> str:
        return "classic" if self.budget is None else "budget"

    def unit_noise(self, source: SeededNoise, size: int) -> np.ndarray:
        """``size`` draws of the standard Laplace (b = 1) from a float-path source."""
        return source.standard_laplace(check_size(size))

    def expected_abs(self, scale: float) -> float:
        """E|xi| of one coordinate of Laplace noise of scale b: b."""
        return _number(scale, argument="scale", allow_zero=True)

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.LaplaceDpEvent(accounted_multiplier(self.noise_multiplier))


def laplace_release(sensitivity: float, scale: float) -> Laplace | None:
    """The ledger entry of a value of L1 sensitivity Delta released with Laplace noise of scale b (Thm. 4.8(i)).

    ``Laplace(Delta / b)``; ``None`` for a data-independent value (Delta = 0), which costs nothing. Where Delta / b
    underflows to 0 (a true epsilon below 5e-324, e.g. late in a run whose noise decays more slowly than the
    sensitivity), the entry is ``Laplace(5e-324)``, the smallest positive float: an upper bound, so valid.
    """
    sensitivity = _number(sensitivity, argument="sensitivity", allow_zero=True)
    if sensitivity == 0.0:
        return None
    return Laplace(max(sensitivity / _number(scale, argument="scale", allow_zero=False), math.ulp(0.0)))


class Gaussian(Mechanism):
    """Gaussian noise per local update, Thm. 4.8(ii): (epsilon, delta)-DP.

    Classic calibration ``sigma^2 = 2 ln(1.25/delta) (Delta_2/epsilon)^2`` needs
    ``epsilon <= 1`` (Dwork & Roth, Thm. A.1) and raises otherwise. ``analytic=True``
    takes the smallest sigma that gives (epsilon, delta)-DP exactly (Balle & Wang 2018,
    ``dp_accounting.get_sigma_gaussian``), for any epsilon.
    """

    kind = "gaussian"
    norm = "l2"
    draws = "gaussian"
    pure = False

    def __init__(self, epsilon: float, delta: float, *, analytic: bool = False) -> None:
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        check_scalar(analytic, argument="analytic", kind=bool, error=PrivacyError)
        if analytic:
            try:
                multiplier = dp_accounting.get_sigma_gaussian(epsilon, delta)
            except (ValueError, OverflowError, ZeroDivisionError) as exc:  # its root search left float range
                raise PrivacyError(f"the analytic Gaussian has no noise multiplier computable in floating point at "
                                   f"epsilon={epsilon!r}, delta={delta!r} ({exc})", argument="epsilon") from None
        elif epsilon > 1.0:
            raise PrivacyError(
                "the classic Gaussian calibration sigma^2 = 2 ln(1.25/delta)(Delta_2/epsilon)^2 of "
                f"Thm. 4.8(ii) holds only for epsilon <= 1, got {epsilon!r}; use "
                "pc.Gaussian(epsilon, delta, analytic=True) (analytic Gaussian of Balle & Wang 2018, "
                "dp_accounting.get_sigma_gaussian) or a pc.Budget", argument="epsilon")
        else:
            multiplier = math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
        super().__init__(epsilon=epsilon, delta=delta, noise_multiplier=multiplier)
        self.analytic = analytic

    @property
    def calibration(self) -> str:
        if self.budget is not None:
            return "budget"
        return "analytic" if self.analytic else "classic"

    def unit_noise(self, source: SeededNoise, size: int) -> np.ndarray:
        """``size`` draws of N(0, 1) from a float-path source."""
        return source.standard_normal(check_size(size))

    def expected_abs(self, scale: float) -> float:
        """E|xi| of one coordinate of N(0, sigma^2): sigma sqrt(2/pi)."""
        return _number(scale, argument="scale", allow_zero=True) * math.sqrt(2.0 / math.pi)

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.GaussianDpEvent(accounted_multiplier(self.noise_multiplier))


class _GridMechanism(Mechanism):
    """A release on the public grid (`privcvx.privacy.grid`): integer noise of scale ``grid_scale``
    on an integer vector of sensitivity ``grid_sensitivity`` (both in grid units)."""

    def __init__(self, grid_scale: float, grid_sensitivity: float, *, epsilon: float, delta: float) -> None:
        self.grid_scale = _number(grid_scale, argument="grid_scale", allow_zero=False)
        self.grid_sensitivity = grid_sensitivity
        noise_multiplier = self.grid_scale / _number(grid_sensitivity, argument="grid_sensitivity", allow_zero=False)
        super().__init__(epsilon=epsilon, delta=delta, noise_multiplier=noise_multiplier)

    settings = ("grid_scale", "grid_sensitivity")

    @property
    def calibration(self) -> str:
        return "grid"


class DiscreteLaplace(_GridMechanism):
    """Discrete Laplace noise (pmf proportional to exp(-|k|/t)) on an integer query of L1 sensitivity D.

    Pure DP with epsilon = D/t: the pmf ratio at any k of two shifts at L1 distance <= D is at most
    exp(D/t). Its dp-accounting event is the exact ``DiscreteLaplaceDpEvent(1/t, D)``: dp-accounting's
    PLD accountant composes it, and `GridRdpAccountant` adds its exact Renyi divergence.
    """

    kind = "discrete_laplace"
    norm = "l1"
    pure = True

    def __init__(self, grid_scale: float, grid_sensitivity: int) -> None:
        grid_sensitivity = check_scalar(grid_sensitivity, argument="grid_sensitivity", kind=int, low=1,
                                        error=PrivacyError)
        super().__init__(grid_scale, grid_sensitivity, epsilon=grid_sensitivity / float(grid_scale), delta=0.0)

    def dp_event(self) -> dp_accounting.DpEvent:
        return DiscreteLaplaceDpEvent(1.0 / self.grid_scale, self.grid_sensitivity)


class DiscreteGaussian(_GridMechanism):
    """Discrete Gaussian noise (pmf proportional to exp(-k^2 / (2 sigma^2))) on an integer query of L2
    sensitivity D.

    rho-zCDP with rho = D^2 / (2 sigma^2) (Canonne, Kamath & Steinke 2020, for the multivariate
    discrete Gaussian): the Renyi divergences are at most those of the continuous Gaussian with the
    same noise multiplier, so ``ZCDpEvent(rho)`` gives a valid RDP bound. The continuous Gaussian's
    exact (epsilon, delta) (Balle & Wang, mu-GDP) and its PLD do not carry over, so this mechanism
    claims no per-update (epsilon, delta) and the PLD accountant does not apply to it.
    """

    kind = "discrete_gaussian"
    norm = "l2"
    draws = "discrete_gaussian"
    pure = False

    def __init__(self, grid_scale: float, grid_sensitivity: float) -> None:
        super().__init__(grid_scale, float(grid_sensitivity), epsilon=math.nan, delta=math.nan)

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.ZCDpEvent(rho=0.5 * (self.grid_sensitivity / self.grid_scale) ** 2)

    @property
    def accounting_note(self) -> str:
        return ("discrete Gaussian: rdp = the continuous Gaussian's RDP curve (zCDP, valid); no per-update "
                "(epsilon, delta) and no PLD, so basic, advanced, moments and pld are NaN")


class PoissonSampledGaussian(Mechanism):
    """Gaussian noise on a sum over a Poisson-subsampled minibatch: the sampled Gaussian mechanism.

    Every record enters the batch independently with probability ``sampling_rate`` q, and the release is
    the sum of the sampled records' contributions (each of L2 norm <= Delta_2) plus N(0, (s Delta_2)^2 I),
    s = ``noise_multiplier``. Its RDP is amplified by the subsampling (Mironov, Talwar & Zhang 2019; the
    thesis's Lemma 8): dp-accounting's ``PoissonSampledDpEvent(q, GaussianDpEvent(s))``, which the RDP and
    PLD accountants compose exactly. It claims no per-update (epsilon, delta): both are NaN.
    """

    kind = "poisson_gaussian"
    norm = "l2"
    draws = "gaussian"
    pure = False

    def __init__(self, sampling_rate: float, noise_multiplier: float) -> None:
        rate = _number(sampling_rate, argument="sampling_rate", allow_zero=False)
        if rate > 1.0:
            raise PrivacyError(f"must lie in (0, 1], got {sampling_rate!r}", argument="sampling_rate")
        self.sampling_rate = rate
        super().__init__(epsilon=math.nan, delta=math.nan,
                         noise_multiplier=_number(noise_multiplier, argument="noise_multiplier", allow_zero=False))

    settings = ("sampling_rate",)

    @property
    def calibration(self) -> str:
        return "subsampled"

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.PoissonSampledDpEvent(
            self.sampling_rate, dp_accounting.GaussianDpEvent(accounted_multiplier(self.noise_multiplier)))


class PoissonSampledDiscreteGaussian(_GridMechanism):
    """The secure path's `PoissonSampledGaussian`: a discrete Gaussian (the grid's,
    `DiscreteGaussian`) on the sum over a Poisson sample of rate ``sampling_rate``, drawn from the operating
    system's entropy. Its RDP (`SampledDiscreteGaussianDpEvent`, `GridRdpAccountant`) is at each order the smaller
    of Zhu & Wang's amplified curve on the discrete Gaussian's rho = D^2 / (2 sigma^2) (`poisson_zcdp_rdp`) and the
    smoothing lemma's (`sampled_discrete_gaussian_rdp`: the continuous sampled Gaussian's at sqrt(sigma^2 - r^2) / D
    plus a slack of 2.8e-77 d), looser than the PLD.

    Its PLD (`privacy_loss_distribution`, composed by the ledger with `pld_slack`): for a scalar release
    (``dimension`` 1) dp-accounting's exact one of the Poisson-subsampled discrete Gaussian (Canonne, Kamath &
    Steinke 2020; add and remove, connect-the-dots) at sigma = ``grid_scale`` and the integer sensitivity
    ceil(``grid_sensitivity``), which dp-accounting states for a scalar query. For a vector release (``dimension``
    d > 1) the smoothing lemma of `smoothed_gaussian_pld`: the PLD of the Poisson-sampled *continuous* Gaussian of
    std sqrt(sigma^2 - r^2) at L2 sensitivity ``grid_sensitivity`` (r = `smoothing_width`), plus the slack
    lambda = `smoothing_slack` (r, d) per release (2.8e-77 d at r = 3), which the ledger adds to epsilon.
    """

    kind = "poisson_discrete_gaussian"
    norm = "l2"
    pure = False

    def __init__(self, sampling_rate: float, grid_scale: float, grid_sensitivity: float, dimension: int = 1) -> None:
        self.sampling_rate = PoissonSampledGaussian(sampling_rate, 1.0).sampling_rate
        self.dimension = check_int(dimension, argument="dimension")
        super().__init__(grid_scale, float(grid_sensitivity), epsilon=math.nan, delta=math.nan)

    settings = (*_GridMechanism.settings, "sampling_rate", "dimension")

    def dp_event(self) -> dp_accounting.DpEvent:
        return SampledDiscreteGaussianDpEvent(self.sampling_rate, self.grid_scale, self.grid_sensitivity,
                                              self.dimension)

    @property
    def accounting_note(self) -> str:
        pld_column = ("pld = dp-accounting's PLD of the Poisson-sampled discrete Gaussian (tight)"
                      if self.dimension == 1 else
                      "pld = the Poisson-sampled continuous Gaussian's PLD at sqrt(sigma^2 - r^2), plus the "
                      "smoothing lemma's slack (proved, docs/qdpsgd.md)")
        return ("Poisson-sampled discrete Gaussian: rdp = the smaller of Zhu & Wang's general subsampling bound and "
                f"the smoothing lemma's sampled Gaussian curve (valid, looser than pld); {pld_column}")

    @property
    def pld_slack(self) -> float:
        """lambda of one release: the ledger reports epsilon_PLD(delta e^-Lambda) + 2 Lambda, Lambda the sum over
        its releases (`smoothed_epsilon`); 0 for a scalar release, whose PLD is exact."""
        return 0.0 if self.dimension == 1 else smoothing_slack(smoothing_width(self.grid_scale), self.dimension)

    def privacy_loss_distribution(self) -> pld.privacy_loss_distribution.PrivacyLossDistribution:
        """One release's PLD under add-or-remove (class docstring), at `PLD_DISCRETIZATION`; a vector release's
        holds with `pld_slack`."""
        if self.dimension == 1:
            return _sampled_discrete_gaussian_pld(self.grid_scale, math.ceil(self.grid_sensitivity),
                                                  self.sampling_rate)
        return smoothed_gaussian_pld(self.grid_scale, self.grid_sensitivity, self.sampling_rate,
                                     smoothing_width(self.grid_scale))


@lru_cache(maxsize=64)
def _sampled_discrete_gaussian_pld(sigma: float, sensitivity: int,
                                   rate: float) -> pld.privacy_loss_distribution.PrivacyLossDistribution:
    """dp-accounting's PLD of the discrete Gaussian of ``sigma`` at integer ``sensitivity``, Poisson-sampled at
    ``rate`` (both adjacency directions), discretized at `PLD_DISCRETIZATION` with connect-the-dots."""
    return pld.privacy_loss_distribution.from_discrete_gaussian_mechanism(
        sigma, sensitivity=sensitivity, sampling_prob=rate, value_discretization_interval=PLD_DISCRETIZATION,
        use_connect_dots=True)


#: The width r of the smoothing kernel behind a vector release's PLD (`smoothed_gaussian_pld`): its slack is
#: lambda = d ln((1 + eta) / (1 - eta)) with eta = 2 e^(-18 pi^2) + ... = 1.4e-77, and the std it keeps,
#: sqrt(sigma^2 - 9), is sigma (1 - 4.5 / sigma^2): within 5e-6 of sigma on the secure grid (sigma >= about 1000).
SMOOTHING_WIDTH = 3.0


def smoothing_width(sigma: float) -> float:
    """The lemma's r for a discrete Gaussian of scale ``sigma``: `SMOOTHING_WIDTH`, at most sigma / 2 (the secure
    grid's sigma is about 1000 and more, so 3 in practice)."""
    return min(SMOOTHING_WIDTH, 0.5 * sigma)


def smoothing_slack(width: float, dimension: int) -> float:
    """The smoothing lemma's lambda = d ln((1 + eta) / (1 - eta)), eta = sum_{k != 0} exp(-2 pi^2 r^2 k^2), at
    r = ``width`` (`smoothed_gaussian_pld`); infinite (the lemma says nothing) when eta >= 1, i.e. r below about
    0.2 (a discrete Gaussian of sigma below 0.4, far below the secure grid's)."""
    k = np.arange(1, math.ceil(6.0 / width) + 2, dtype=np.float64)  # the terms beyond are below e^(-700)
    eta = 2.0 * float(np.exp(-2.0 * math.pi ** 2 * width ** 2 * k * k).sum())
    return dimension * (math.log1p(eta) - math.log1p(-eta)) if eta < 1.0 else math.inf


@lru_cache(maxsize=64)
def smoothed_gaussian_pld(sigma: float, sensitivity: float, rate: float,
                          width: float) -> pld.privacy_loss_distribution.PrivacyLossDistribution:
    """The PLD that, with the slack `smoothing_slack` (``width``, d), accounts a Poisson-sampled d-dimensional
    discrete Gaussian N_Z(m, sigma^2 I_d) (m in Z^d, L2 sensitivity ``sensitivity`` D): dp-accounting's PLD of the
    Poisson-sampled continuous Gaussian of std s' = sqrt(sigma^2 - r^2) at sensitivity D (r = ``width``; both
    adjacency directions, `PLD_DISCRETIZATION`, connect-the-dots).

    The smoothing lemma (Peikert 2010-style smoothing, proved here directly by Poisson summation), per coordinate,
    with phi_s the N(0, s^2) density and rho_r(x) = exp(-x^2 / (2 r^2)): Poisson summation gives
    rho_r(Z + c) = r sqrt(2 pi) sum_k exp(-2 pi^2 r^2 k^2) e^(2 pi i k c), so rho_r(Z + c) / (r sqrt(2 pi)) lies in
    [1 - eta, 1 + eta] for every real c. The public kernel K_r maps x in R to z in Z with probability
    rho_r(z - x) / rho_r(Z - x). For x ~ N(c, s'^2) with c in Z, z has the law p(z) = int phi_s'(x - c)
    rho_r(z - x) / rho_r(Z - x) dx, and int phi_s'(x - c) rho_r(z - x) dx = r sqrt(2 pi) phi_sigma(z - c), so
    p(z) / phi_sigma(z - c) lies in [1/(1 + eta), 1/(1 - eta)]. The discrete Gaussian rho_sigma(z - c) / rho_sigma(Z)
    = phi_sigma(z - c) sigma sqrt(2 pi) / rho_sigma(Z) lies in the same range (eta(sigma) <= eta since sigma > r).
    So p / N_Z(c, sigma^2) lies in [e^-lambda_1, e^lambda_1], and over d coordinates (products) within e^(+-lambda),
    lambda = d lambda_1.

    The release M = m + N_Z(0, sigma^2 I_d) and M' = K_r(m + N(0, s'^2 I_d)) (never run: it only shows that M' exists)
    then have likelihood ratios within e^(+-lambda) for every Poisson sample, hence for their mixture, and within
    e^(+-Lambda) over T adaptive releases (Lambda = the sum of their lambdas, whatever else the ledger composes). M'
    is post-processing of the Poisson-sampled continuous Gaussian of std s' on an integer vector of L2 sensitivity
    <= D, which dp-accounting's scalar pair at D dominates for any d (joint convexity of the hockey-stick divergence
    over the sample, rotation invariance, and a smaller shift is post-processing of the shift D). If M' is
    (eps1, delta1)-DP then M is (eps1 + 2 Lambda, e^Lambda delta1)-DP: P[M(D) in S] <= e^L P[M'(D) in S]
    <= e^L (e^eps1 P[M'(D') in S] + delta1) <= e^(eps1 + 2 L) P[M(D') in S] + e^L delta1 (`smoothed_epsilon`).
    """
    return pld.privacy_loss_distribution.from_gaussian_mechanism(
        math.sqrt(sigma * sigma - width * width), sensitivity=sensitivity, sampling_prob=rate,
        value_discretization_interval=PLD_DISCRETIZATION, use_connect_dots=True)


def smoothed_epsilon(distribution: pld.privacy_loss_distribution.PrivacyLossDistribution, slack: float,
                     delta: float) -> float:
    """Epsilon at ``delta`` of a composition whose PLD is ``distribution`` up to the likelihood-ratio slack
    Lambda = ``slack`` (`smoothed_gaussian_pld`): eps(delta e^-Lambda) + 2 Lambda, rounded up (Lambda is
    2.8e-77 d T at r = 3 and vanishes in the float sum), eps(delta) itself when Lambda = 0, infinite when it is."""
    if slack == 0.0:
        return float(distribution.get_epsilon_for_delta(delta))
    if slack == math.inf:
        return math.inf
    epsilon = float(distribution.get_epsilon_for_delta(math.nextafter(delta * math.exp(-slack), 0.0)))
    return math.nextafter(epsilon + 2.0 * slack, math.inf)


class LaplaceBeyondFloat(Mechanism):
    """A Laplace release whose epsilon lies beyond floating point (a noise scale decayed to below
    ``sensitivity / 1e100``, as in the DPP^2 paper's own regime): charged as no privacy at all.

    Every accountant reports epsilon = inf for a ledger that holds one (dp-accounting's ``NonPrivateDpEvent``):
    the true value exceeds any float, so inf is the one valid statement. Any noise is consistent with this charge.
    """

    kind = "laplace_beyond_float"
    norm = "l1"
    pure = True
    draws = "laplace"

    def __init__(self) -> None:
        super().__init__(epsilon=math.inf, delta=0.0, noise_multiplier=0.0)

    @property
    def calibration(self) -> str:
        return "beyond-float"

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.NonPrivateDpEvent()


class PureDP(_PureEpsilon):
    """A generic epsilon-DP release (e.g. the sparse vector test), accounted by its tightest valid profile.

    An epsilon-DP mechanism about which nothing else is known is dominated only by binary randomized
    response with flip probability 1 / (1 + e^epsilon) (Kairouz, Oh & Viswanath 2015): dp-accounting's
    ``RandomizedResponseDpEvent(2 / (1 + e^epsilon), 2)`` (with probability p it answers a uniform bucket, so it
    flips with probability p / 2). A ``LaplaceDpEvent`` of the same epsilon would understate the RDP and PLD of a
    mechanism that is not a Laplace. `GridRdpAccountant` composes its RDP curve; the PLD accountant, run
    under add-or-remove, does not take the event, so a ledger with it has no PLD column (NaN).
    """

    kind = "pure_dp"

    @property
    def calibration(self) -> str:
        return "generic"

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.RandomizedResponseDpEvent(2.0 / (1.0 + math.exp(self.epsilon)), 2)


class ZCDPRelease(Mechanism):
    """A release known to be (xi, rho)-zCDP (Bun & Steinke 2016, Def. 1.1): D_alpha <= xi + rho alpha for all alpha > 1.

    Used for PP-ADMM's objective perturbation (docs/zcdp_admm.md): rho = S^2 / (2 sigma^2) of the Gaussian b_i1
    actually drawn, xi the Jacobian term. Its dp-accounting event is ``ZCDpEvent(rho, xi)`` (RDP accountant
    only; no PLD). ``epsilon``, ``delta``: a per-update pair it satisfies (``privcvx.privacy.zcdp.zcdp_to_dp`` at the
    run's delta, for basic and advanced composition), NaN if not given. ``noise_multiplier`` is 1 / sqrt(2 rho).
    """

    kind = "zcdp"
    norm = "l2"
    pure = False
    draws = "gaussian"

    def __init__(self, rho: float, xi: float = 0.0, *, epsilon: float = math.nan, delta: float = math.nan) -> None:
        self.rho = _number(rho, argument="rho", allow_zero=False)
        self.xi = _number(xi, argument="xi", allow_zero=True)
        super().__init__(epsilon=epsilon, delta=delta, noise_multiplier=1.0 / math.sqrt(2.0 * self.rho))

    settings = ("rho", "xi")

    @property
    def calibration(self) -> str:
        return "zcdp"

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.ZCDpEvent(rho=self.rho, xi=self.xi)


def _with_multiplier(cls: type[Mechanism], *, epsilon: float, delta: float, noise_multiplier: float,
                     budget: Budget | None, analytic: bool = False) -> Mechanism:
    """A mechanism with a given noise multiplier (budget calibration, checkpoint restore)."""
    mechanism = cls.__new__(cls)
    Mechanism.__init__(mechanism, epsilon=epsilon, delta=delta, noise_multiplier=noise_multiplier,
                       budget=budget)
    if isinstance(mechanism, Gaussian):
        mechanism.analytic = analytic
    return mechanism


def mechanism_from_dict(data: dict) -> Mechanism:
    """Inverse of `Mechanism.to_dict`: the same noise multiplier, bit for bit."""
    try:
        if data["kind"] == "discrete_laplace":
            return DiscreteLaplace(float(data["grid_scale"]), int(data["grid_sensitivity"]))
        if data["kind"] == "discrete_gaussian":
            return DiscreteGaussian(float(data["grid_scale"]), float(data["grid_sensitivity"]))
        if data["kind"] == "laplace_beyond_float":
            return LaplaceBeyondFloat()
        if data["kind"] == "poisson_discrete_gaussian":
            return PoissonSampledDiscreteGaussian(float(data["sampling_rate"]), float(data["grid_scale"]),
                                                  float(data["grid_sensitivity"]), int(data.get("dimension", 1)))
        if data["kind"] == "poisson_gaussian":
            return PoissonSampledGaussian(float(data["sampling_rate"]), float(data["noise_multiplier"]))
        if data["kind"] == "pure_dp":
            return PureDP(float(data["epsilon"]))
        if data["kind"] == "zcdp":
            return ZCDPRelease(float(data["rho"]), float(data["xi"]), epsilon=float(data["epsilon"] or math.nan),
                               delta=float(data["delta"] or math.nan))
        cls = {"laplace": Laplace, "gaussian": Gaussian}[data["kind"]]
        budget = None if data["budget"] is None else Budget.from_dict(data["budget"])
        epsilon = math.nan if data["epsilon"] is None else float(data["epsilon"])
        return _with_multiplier(cls, epsilon=epsilon, delta=float(data["delta"]),
                                noise_multiplier=float(data["noise_multiplier"]), budget=budget,
                                analytic=data["calibration"] == "analytic")
    except (KeyError, TypeError, ValueError) as error:
        raise PrivacyError(f"not a mechanism description: {data!r} ({error})", argument="data") from None


class Budget(_SignatureEquality):
    """One agent's total (epsilon, delta) for a whole run of ``steps = T * E`` local updates.

    `per_update` returns the per-update mechanism with the smallest noise whose
    ``steps``-fold composition the chosen accountant (``"pld"`` or ``"rdp"``, dp-accounting)
    reports at epsilon <= target at this delta (``dp_accounting.calibrate_dp_mechanism``).
    """

    def __init__(self, epsilon: float, delta: float, *, mechanism: str = "gaussian",
                 accountant: str = "pld") -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.mechanism = check_scalar(mechanism, argument="mechanism", choices=("gaussian", "laplace"),
                                      error=PrivacyError)
        self.accountant = check_scalar(accountant, argument="accountant", choices=("pld", "rdp"), error=PrivacyError)
        self._calibrated: dict[tuple[int, bool], Mechanism] = {}

    def make_accountant(self) -> dp_accounting.PrivacyAccountant:
        """A fresh accountant of the kind this budget is calibrated with."""
        if self.accountant == "pld":
            return pld.PLDAccountant(NEIGHBOURING_RELATION, value_discretization_interval=PLD_DISCRETIZATION)
        return GridRdpAccountant()

    def per_update(self, steps: int, *, grid: bool = False) -> Mechanism:
        """The per-update mechanism that spends this budget over ``steps`` local updates.

        ``grid=True``: the noise multiplier for releases on the grid of the secure path
        (`privcvx.privacy.grid`), whose ledger entries are discrete mechanisms: calibrated on the
        accountants that apply to them. A discrete Gaussian: the RDP accountant whatever this budget's
        accountant (its PLD is not available, and its zCDP curve is the continuous Gaussian's RDP curve).
        A discrete Laplace: this budget's accountant on ``DiscreteLaplaceDpEvent`` at the smallest grid
        sensitivity D = 2^10 + 1 (at a fixed noise multiplier its divergences fall towards the continuous
        Laplace's as D grows: measured, the RDP excess is O(1/D^2); the release's epsilon D/t is at most
        the multiplier's 1/s).
        """
        key = (check_int(steps, argument="steps"), bool(grid))
        if key not in self._calibrated:
            multiplier = self._calibrate(*key)
            if self.mechanism == "gaussian":
                mechanism = _with_multiplier(Gaussian, epsilon=math.nan, delta=self.delta,
                                             noise_multiplier=multiplier, budget=self)
            else:
                mechanism = _with_multiplier(Laplace, epsilon=1.0 / multiplier, delta=0.0,
                                             noise_multiplier=multiplier, budget=self)
            mechanism.budget_steps = key[0]
            self._calibrated[key] = mechanism
        return self._calibrated[key]

    def _calibrate(self, steps: int, grid: bool) -> float:
        """The noise multiplier: ``dp_accounting.calibrate_dp_mechanism`` on ``steps`` self-composed events."""
        if self.mechanism == "gaussian":
            return dp_accounting.calibrate_dp_mechanism(
                GridRdpAccountant if grid else self.make_accountant,
                lambda s: dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(s), steps),
                self.epsilon, self.delta)
        smallest = 2 ** GRID_PRECISION_BITS + 1

        def event(s: float) -> dp_accounting.DpEvent:
            single = DiscreteLaplaceDpEvent(1.0 / (s * smallest), smallest) if grid else dp_accounting.LaplaceDpEvent(s)
            return dp_accounting.SelfComposedDpEvent(single, steps)

        # A Laplace multiplier of 0 is not an event the RDP accountant (or the discrete event) can take. At
        # 1/(2 epsilon) one release alone exceeds the target; at steps/epsilon basic composition meets it.
        bracket = dp_accounting.LowerEndpointAndGuess(0.5 / self.epsilon, steps / self.epsilon)
        return dp_accounting.calibrate_dp_mechanism(self.make_accountant, event, self.epsilon, self.delta,
                                                    bracket_interval=bracket)

    def signature(self) -> tuple:
        return (self.epsilon, self.delta, self.mechanism, self.accountant)

    def to_dict(self) -> dict:
        """The budget as JSON-able data (checkpoints and saved results)."""
        return {"epsilon": self.epsilon, "delta": self.delta, "mechanism": self.mechanism,
                "accountant": self.accountant}

    @classmethod
    def from_dict(cls, data: dict) -> Budget:
        return cls(data["epsilon"], data["delta"], mechanism=data["mechanism"], accountant=data["accountant"])

    def __repr__(self) -> str:
        return (f"Budget(epsilon={self.epsilon!r}, delta={self.delta!r}, mechanism={self.mechanism!r}, "
                f"accountant={self.accountant!r})")
