"""Privacy mechanisms of one local update: Laplace and Gaussian noise (Thm. 4.8), and budgets.

A mechanism fixes the *noise multiplier*: the ratio of the noise scale to the
sensitivity. The perturbation (Eq. (10) or Eq. (12)) multiplies it by the
sensitivity of what it perturbs and draws the noise from the agent's stream:

* :class:`Laplace` (Thm. 4.8(i)): scale ``b = Delta_1 / epsilon``, i.e. variance
  ``2 (Delta_1 / epsilon)^2``; (epsilon, 0)-DP per local update.
* :class:`Gaussian` (Thm. 4.8(ii)): ``sigma^2 = 2 ln(1.25/delta) (Delta_2/epsilon)^2``,
  valid for epsilon <= 1 only (Dwork & Roth, Thm. A.1); ``analytic=True`` uses the
  exact calibration of Balle & Wang (2018), valid for every epsilon.
* :class:`Budget`: one agent's total (epsilon, delta) for a whole run, turned into the
  per-update noise multiplier by a tight accountant (PLD or RDP from dp-accounting).

Sensitivities (:class:`Sensitivity`) are the gradient sensitivities Eq. (18) (L1) and
Eq. (21) (L2), or an output sensitivity for OutPert (Eqs. (6b), (7)).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import dp_accounting
import numpy as np
from dp_accounting import pld, rdp

from privcvx.errors import ParameterError, PrivacyError, require_positive

if TYPE_CHECKING:
    from privcvx.privacy.noise import NoiseSource

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

_NORMS = ("l1", "l2")


def _number(value: Any, *, argument: str, allow_zero: bool) -> float:
    """``value`` as a finite float > 0 (or >= 0), else a PrivacyError naming ``argument``."""
    if isinstance(value, bool):
        raise PrivacyError(f"expected a number, got {value!r}", argument=argument)
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
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise PrivacyError(f"must be an int >= 0, got {value!r}", argument=argument)
    return int(value)


@dataclass(frozen=True)
class Sensitivity:
    """Sensitivity bounds of the vector a mechanism perturbs.

    For ObjPert this is the gradient sensitivity: ``l1`` bounds Eq. (18) and ``l2``
    bounds Eq. (21), the largest change of ``f_p'(z; D_p)`` over neighbouring datasets.
    Each is ``None`` (not declared) or a finite number >= 0; at least one is required.
    """

    l1: float | None = None
    l2: float | None = None

    def __post_init__(self) -> None:
        if self.l1 is None and self.l2 is None:
            raise PrivacyError("declare at least one of l1 (Eq. (18)) and l2 (Eq. (21))", argument="l1")
        for name in _NORMS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _number(value, argument=name, allow_zero=True))

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
                           l2=None if self.l2 is None else self.l2 * factor)


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
    """The noise of one local update of one agent.

    Attributes
    ----------
    kind:
        ``"laplace"`` or ``"gaussian"``.
    norm:
        The sensitivity norm it is calibrated to: ``"l1"`` (Laplace) or ``"l2"`` (Gaussian).
    epsilon, delta:
        The per-update (epsilon-bar, delta-bar) of Thm. 4.8. For a mechanism calibrated
        from a :class:`Budget` there is no per-update pair for the Gaussian: its epsilon
        is NaN and its delta is the budget's delta (the run's delta).
    noise_multiplier:
        Noise scale over sensitivity: ``b / Delta_1 = 1/epsilon`` (Laplace),
        ``sigma / Delta_2`` (Gaussian).
    budget:
        The :class:`Budget` this mechanism was calibrated from, or ``None``.
    """

    kind: ClassVar[str]
    norm: ClassVar[str]

    def __init__(self, *, epsilon: float, delta: float, noise_multiplier: float,
                 budget: Budget | None = None) -> None:
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.noise_multiplier = float(noise_multiplier)
        self.budget = budget

    @property
    @abstractmethod
    def calibration(self) -> str:
        """How the noise multiplier was obtained: "classic", "analytic" or "budget"."""

    @abstractmethod
    def unit_noise(self, source: NoiseSource, size: int) -> np.ndarray:
        """``size`` draws of unit noise: standard Laplace (b = 1) or standard normal."""

    @abstractmethod
    def expected_abs(self, scale: float) -> float:
        """E|xi| of one coordinate of noise with scale ``scale`` (Laplace b, Gaussian sigma)."""

    @abstractmethod
    def dp_event(self) -> dp_accounting.DpEvent:
        """This update as a dp-accounting event, for the RDP and PLD accountants."""

    def scale(self, sensitivity: Sensitivity) -> float:
        """Noise scale for ``sensitivity``: ``noise_multiplier * sensitivity.get(self.norm)``."""
        if not isinstance(sensitivity, Sensitivity):
            raise PrivacyError(f"must be a pc.Sensitivity, got {sensitivity!r}", argument="sensitivity")
        return self.noise_multiplier * sensitivity.get(self.norm)

    def signature(self) -> tuple:
        epsilon = None if math.isnan(self.epsilon) else self.epsilon
        return (self.kind, self.calibration, epsilon, self.delta, self.noise_multiplier,
                None if self.budget is None else self.budget.signature())

    def to_dict(self) -> dict:
        """A JSON-serializable description that :func:`mechanism_from_dict` restores exactly."""
        return {"kind": self.kind, "calibration": self.calibration,
                "epsilon": None if math.isnan(self.epsilon) else self.epsilon,
                "delta": self.delta, "noise_multiplier": self.noise_multiplier,
                "budget": None if self.budget is None else self.budget.to_dict()}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon!r}, delta={self.delta!r}, "
                f"noise_multiplier={self.noise_multiplier!r}, calibration={self.calibration!r})")


class Laplace(Mechanism):
    """Laplace noise per local update, Thm. 4.8(i): scale ``Delta_1/epsilon``, (epsilon, 0)-DP."""

    kind = "laplace"
    norm = "l1"

    def __init__(self, epsilon: float) -> None:
        epsilon = check_epsilon(epsilon)
        super().__init__(epsilon=epsilon, delta=0.0, noise_multiplier=1.0 / epsilon)

    @property
    def calibration(self) -> str:
        return "classic" if self.budget is None else "budget"

    def unit_noise(self, source: NoiseSource, size: int) -> np.ndarray:
        return source.standard_laplace(check_size(size))

    def expected_abs(self, scale: float) -> float:
        return _number(scale, argument="scale", allow_zero=True)

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.LaplaceDpEvent(self.noise_multiplier)


class Gaussian(Mechanism):
    """Gaussian noise per local update, Thm. 4.8(ii): (epsilon, delta)-DP.

    Classic calibration ``sigma^2 = 2 ln(1.25/delta) (Delta_2/epsilon)^2`` needs
    ``epsilon <= 1`` (Dwork & Roth, Thm. A.1) and raises otherwise. ``analytic=True``
    takes the smallest sigma that gives (epsilon, delta)-DP exactly (Balle & Wang 2018,
    ``dp_accounting.get_sigma_gaussian``), for any epsilon.
    """

    kind = "gaussian"
    norm = "l2"

    def __init__(self, epsilon: float, delta: float, *, analytic: bool = False) -> None:
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        if not isinstance(analytic, bool):
            raise PrivacyError(f"must be True or False, got {analytic!r}", argument="analytic")
        if analytic:
            multiplier = dp_accounting.get_sigma_gaussian(epsilon, delta)
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

    def unit_noise(self, source: NoiseSource, size: int) -> np.ndarray:
        return source.standard_normal(check_size(size))

    def expected_abs(self, scale: float) -> float:
        return _number(scale, argument="scale", allow_zero=True) * math.sqrt(2.0 / math.pi)

    def dp_event(self) -> dp_accounting.DpEvent:
        return dp_accounting.GaussianDpEvent(self.noise_multiplier)


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
    """Inverse of :meth:`Mechanism.to_dict`: the same noise multiplier, bit for bit."""
    try:
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

    :meth:`per_update` returns the per-update mechanism with the smallest noise whose
    ``steps``-fold composition the chosen accountant (``"pld"`` or ``"rdp"``, dp-accounting)
    reports at epsilon <= target at this delta (``dp_accounting.calibrate_dp_mechanism``).
    """

    def __init__(self, epsilon: float, delta: float, *, mechanism: str = "gaussian",
                 accountant: str = "pld") -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        if mechanism not in ("gaussian", "laplace"):
            raise PrivacyError(f'must be "gaussian" or "laplace", got {mechanism!r}', argument="mechanism")
        if accountant not in ("pld", "rdp"):
            raise PrivacyError(f'must be "pld" or "rdp", got {accountant!r}', argument="accountant")
        self.mechanism = mechanism
        self.accountant = accountant
        self._calibrated: dict[int, Mechanism] = {}

    def make_accountant(self) -> dp_accounting.PrivacyAccountant:
        """A fresh accountant of the kind this budget is calibrated with."""
        if self.accountant == "pld":
            return pld.PLDAccountant(NEIGHBOURING_RELATION, value_discretization_interval=PLD_DISCRETIZATION)
        return rdp.RdpAccountant(neighboring_relation=NEIGHBOURING_RELATION)

    def per_update(self, steps: int) -> Mechanism:
        """The per-update mechanism that spends this budget over ``steps`` local updates."""
        if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
            raise ParameterError(f"must be an int >= 1 (rounds * local_updates), got {steps!r}",
                                 argument="steps")
        steps = int(steps)
        if steps not in self._calibrated:
            event_type = dp_accounting.GaussianDpEvent if self.mechanism == "gaussian" \
                else dp_accounting.LaplaceDpEvent
            multiplier = dp_accounting.calibrate_dp_mechanism(
                self.make_accountant, lambda s: dp_accounting.SelfComposedDpEvent(event_type(s), steps),
                self.epsilon, self.delta)
            if self.mechanism == "gaussian":
                mechanism = _with_multiplier(Gaussian, epsilon=math.nan, delta=self.delta,
                                             noise_multiplier=multiplier, budget=self)
            else:
                mechanism = _with_multiplier(Laplace, epsilon=1.0 / multiplier, delta=0.0,
                                             noise_multiplier=multiplier, budget=self)
            self._calibrated[steps] = mechanism
        return self._calibrated[steps]

    def signature(self) -> tuple:
        return (self.epsilon, self.delta, self.mechanism, self.accountant)

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta, "mechanism": self.mechanism,
                "accountant": self.accountant}

    @classmethod
    def from_dict(cls, data: dict) -> Budget:
        return cls(data["epsilon"], data["delta"], mechanism=data["mechanism"], accountant=data["accountant"])

    def __repr__(self) -> str:
        return (f"Budget(epsilon={self.epsilon!r}, delta={self.delta!r}, mechanism={self.mechanism!r}, "
                f"accountant={self.accountant!r})")
