"""Schedules for the proximal step eta^t and the step sizes, and penalty rules for rho^t (Assumption 5.1(i)).

Every schedule is a small picklable object ``t -> value`` for rounds t = 1, 2, ...,
so that a run's configuration can be checkpointed and sent to worker processes.

A penalty rule (`PenaltyRule`) is what an ADMM server asks for rho^t: a schedule fixed in advance
(`ScheduledPenalty`) or a rule that adapts to the residuals (`ResidualBalancing`, `PerKeyBalancing`). The rules live
here, beside the schedules they generalize, because users name them as ``pc.schedules.*`` (docs/tuning.md).
"""

from __future__ import annotations

import copy
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from privcvx.errors import ParameterError, check_scalar, require_positive

Schedule = Callable[[int], float]


@dataclass(frozen=True)
class Constant:
    """The same value every round."""

    value: float

    def __call__(self, t: int) -> float:
        return self.value


@dataclass(frozen=True)
class InverseSqrt:
    """eta^t = scale / sqrt(t): the paper's rule for nonsmooth objectives, Eq. (26a)."""

    scale: float = 1.0

    def __call__(self, t: int) -> float:
        return self.scale / math.sqrt(t)


@dataclass(frozen=True)
class Power:
    """gamma_t = c / t^a: diminishing and non-summable for a <= 1 (a = 1/2 is Eq. (26a)'s rate)."""

    c: float
    a: float

    def __call__(self, t: int) -> float:
        return self.c / t ** self.a


@dataclass(frozen=True)
class Geometric:
    """gamma_t = c * q^(t-1): the summable step of Huang, Mitra & Vaidya, Eq. (8) (paper 001)."""

    c: float
    q: float

    def __call__(self, t: int) -> float:
        return self.c * self.q ** (t - 1)


@dataclass(frozen=True)
class PaperRho:
    """rho^t = min(1e9, c1 * 1.2^floor(t / Tc) + c2 / epsilon): Eq. (73) of Appendix E.

    It is nondecreasing and bounded above, so it satisfies Assumption 5.1(i).
    """

    c1: float
    c2: float
    epsilon: float
    period: int

    def __call__(self, t: int) -> float:
        return min(1e9, self.c1 * 1.2 ** math.floor(t / self.period) + self.c2 / self.epsilon)


def inverse_sqrt(scale: float = 1.0) -> InverseSqrt:
    """The schedule eta^t = scale / sqrt(t) of Eq. (26a)."""
    return InverseSqrt(require_positive(scale, argument="scale"))


def paper_rho(c1: float = 2.0, c2: float = 5.0, epsilon: float = 1.0, period: int = 10_000) -> PaperRho:
    """The paper's rho schedule, Eq. (73). Defaults are the authors' MNIST constants."""
    return PaperRho(require_positive(c1, argument="c1"),
                    require_positive(c2, argument="c2", allow_zero=True),
                    require_positive(epsilon, argument="epsilon"),
                    int(require_positive(period, argument="period")))


def as_schedule(value: float | Schedule, *, argument: str) -> Schedule:
    """A float becomes a constant schedule; a callable is checked at round 1."""
    if isinstance(value, str):
        raise ParameterError(f"unknown setting {value!r}", argument=argument)
    if callable(value):
        checked_value(value, 1, argument=argument)
        return value
    return Constant(require_positive(value, argument=argument))


def checked_value(schedule: Schedule, t: int, *, argument: str, underflow: bool = False) -> float:
    """The schedule's value at round t, which must be finite and > 0.

    ``underflow=True``: a `Geometric` schedule may be 0 (a caller that handles a zero step): c q^(t-1) is
    positive, but its float underflows to 0 once q^(t-1) < 5e-324 / c (after about 7000 rounds at q = 0.9), and
    that 0 is the value the run computes with.
    """
    try:
        raw = schedule(t)
    except Exception as exc:  # a user callable failed: name the argument and round
        raise ParameterError(f"the schedule failed at round {t}: {exc}", argument=argument) from exc
    underflowed = underflow and isinstance(schedule, Geometric)
    return require_positive(raw, argument=f"{argument}(t={t})", allow_zero=underflowed)


@dataclass(frozen=True)
class Residuals:
    """What a penalty rule observes after line 8 of a round, all computed from released messages.

    ``totals``: Boyd et al.'s primal and dual residuals r, s and their scales max(||A w||, ||z||) and ||lambda||
    (``primal_residual``, ``dual_residual``, ``scale_primal``, ``scale_dual``), when the rule `reads_totals`.
    ``per_entry``: computes, per entry k of w, the squared primal residual over its copies and the squared change
    of its copies (`privcvx.algorithms.consensus.ConsensusDuals.entry_residuals`), when a rule asks for them.
    """

    totals: Mapping[str, float] = field(default_factory=dict)
    per_entry: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None


class PenaltyRule(ABC):
    """The penalty rho^t of an ADMM server as a rule (Assumption 5.1(i) for the rules that keep it).

    The server calls `start` before round 1, `value` for each round's rho^t, and `observe` after each round's line 8;
    `state_dict` and `load_state_dict` carry what the rule has learnt through a checkpoint. A rule sees only
    `Residuals` computed from released messages and the server's own w and lambda, so no rule costs privacy
    (docs/privacy.md). A run adapts its own copy (`as_penalty`).
    """

    #: Whether `observe` reads `Residuals.totals` (the server computes them with line 8 only then).
    reads_totals: ClassVar[bool] = False

    @property
    def needs_suggestion(self) -> bool:
        """Whether `start` takes rho^1 from its suggestion (the largest L_p, which the agents then send with their
        initial points: under privacy a declared, public bound)."""
        return False

    def start(self, suggestion: float, groups: np.ndarray) -> None:  # noqa: B027 (a rule may need no start)
        """Before round 1: ``suggestion`` is the largest L_p the agents sent (1 when none), ``groups`` the shared key
        of every entry of w (`privcvx.algorithms.consensus.key_groups`)."""

    def observe(self, residuals: Residuals) -> None:  # noqa: B027 (a fixed penalty observes nothing)
        """After line 8 of a round: adapt for the next round."""

    @abstractmethod
    def value(self, t: int) -> float | np.ndarray:
        """rho^t: a number, or a vector over the entries of w."""

    def state_dict(self) -> dict[str, Any]:
        """What the rule has learnt, for checkpoints."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (a fixed penalty keeps no state)
        """Restore a state written by `state_dict`."""


@dataclass(frozen=True)
class ScheduledPenalty(PenaltyRule):
    """rho^t fixed in advance: a number (`Constant`) or a schedule ``t -> rho^t`` such as `PaperRho`."""

    schedule: Schedule

    def value(self, t: int) -> float:
        """rho^t, checked finite and > 0 (`checked_value`); a `Constant`'s is checked once and kept."""
        if isinstance(self.schedule, Constant):
            return self._constant
        return checked_value(self.schedule, t, argument="rho")

    @functools.cached_property
    def _constant(self) -> float:
        """A `Constant` schedule's rho, checked (its value at every round)."""
        return checked_value(self.schedule, 1, argument="rho")


def as_penalty(value: float | Schedule | PenaltyRule | str) -> PenaltyRule:
    """``rho=``: "adaptive" is `adaptive`, "adaptive-per-key" `PerKeyBalancing`; a rule is copied (a run adapts its own
    copy, the caller's object stays as given); a number or a schedule is a `ScheduledPenalty`."""
    if isinstance(value, PenaltyRule):
        return copy.deepcopy(value)
    if isinstance(value, str) and value in ("adaptive", "adaptive-per-key"):
        return adaptive() if value == "adaptive" else PerKeyBalancing()
    return ScheduledPenalty(as_schedule(value, argument="rho"))


class ResidualBalancing(PenaltyRule):
    """Residual balancing for rho (Boyd et al. Sec. 3.4.1); ``rho="adaptive"`` is `adaptive`'s form of it.

    After each round, with the primal residual r = ||A w - z|| and the dual residual s = ||rho A (w^{t+1} - w^t)||
    (both normalized as ``relative`` says): rho <- tau * rho when r > mu * s, and rho <- rho / tau when
    s > mu * r. The normalization (``relative``):

    - ``False``: none, the absolute residuals (Boyd et al.'s rule);
    - ``True``: Wohlberg's relative residuals r / max(||A w||, ||z||) and s / ||lambda|| (lambda: all duals
      stacked), which make the rule invariant to the scale of the objective (B. Wohlberg, "ADMM penalty parameter
      selection by residual balancing", arXiv:1704.06209, 2017);
    - ``"peak"``: as ``True``, with s divided by the largest ||lambda|| seen so far instead of the current one.
      When the optimal duals are 0 (the power-flow zones, whose optimum serves every load), ||lambda|| tends to 0
      with s, s / ||lambda|| does not fall, and ``True`` drives rho down for ever; the running maximum keeps the
      scale of the duals the run has seen.

    The first ``warmup`` rounds only record ||lambda|| (the dual residual of round 1 measures the step from the
    server's initial w = 0, not a residual). After ``until`` rounds rho stays fixed.

    ``mode="nondecreasing"`` only ever multiplies, and stops at ``maximum``: rho^t is then
    nondecreasing and bounded, as Assumption 5.1(i) requires, so the paper's convergence
    and privacy statements hold. ``mode="free"`` also decreases rho; it usually converges
    faster but leaves Assumption 5.1(i), so Thms. 5.2-5.6 no longer apply. Either way rho
    depends only on the residuals and ||lambda||, which are functions of released vectors and of the
    server's own w and lambda, so adapting it costs no privacy (docs/privacy.md).
    ``ResidualBalancing()`` with its own defaults (absolute residuals, tau = 2, mu = 10, no warm-up) is the
    rule ``rho="adaptive"`` used before `adaptive`'s relative one (docs/tuning.md).
    """

    def __init__(self, initial: float | None = None, *, tau: float = 2.0, mu: float = 10.0, mode: str = "free",
                 relative: bool | str = False, warmup: int = 0, until: int | None = 100, minimum: float = 1e-6,
                 maximum: float = 1e6) -> None:
        mode = check_scalar(mode, argument="mode", choices=("free", "nondecreasing"))
        relative = check_scalar(relative, argument="relative", choices=(False, True, "peak"))  # 1 is not True
        self.tau = require_positive(tau, argument="tau")
        self.mu = require_positive(mu, argument="mu")
        if self.tau <= 1 or self.mu < 1:
            raise ParameterError(f"needs tau > 1 and mu >= 1, got tau={tau!r}, mu={mu!r}", argument="tau")
        self.mode = mode
        self.relative = relative
        self.warmup = int(require_positive(warmup, argument="warmup", allow_zero=True))
        self.until = None if until is None else int(require_positive(until, argument="until"))
        self.observed = 0
        self.peak = 0.0  # the largest ||lambda|| observed (relative="peak")
        self.minimum = require_positive(minimum, argument="minimum")
        self.maximum = require_positive(maximum, argument="maximum")
        #: rho for the next round (None until `start` when no ``initial`` is given).
        self.current = None if initial is None else require_positive(initial, argument="rho")

    reads_totals = True

    @property
    def needs_suggestion(self) -> bool:
        return self.current is None

    def start(self, suggestion: float, groups: np.ndarray) -> None:
        """Set the initial rho when none was given (privcvx suggests the largest L_p)."""
        if self.current is None:
            self.current = min(max(suggestion, self.minimum), self.maximum)

    def value(self, t: int) -> float:
        return 1.0 if self.current is None else self.current

    def observe(self, residuals: Residuals) -> None:
        """Update rho for the next round from the primal and dual residuals (normalized as ``relative`` says)."""
        if not self._adapting():
            return
        totals = residuals.totals
        primal, dual = totals["primal_residual"], totals["dual_residual"]
        if self.relative:
            self.peak = max(self.peak, totals["scale_dual"])
            primal /= max(totals["scale_primal"], 1e-300)
            dual /= max(self.peak if self.relative == "peak" else totals["scale_dual"], 1e-300)
        if self.observed <= self.warmup:
            return
        if primal > self.mu * dual:
            self.current = min(self.current * self.tau, self.maximum)
        elif dual > self.mu * primal and self.mode == "free":
            self.current = max(self.current / self.tau, self.minimum)

    def _adapting(self) -> bool:
        """Count one more observed round; whether rho still adapts after it (``until``)."""
        self.observed += 1
        return self.until is None or self.observed <= self.until

    def state_dict(self) -> dict[str, Any]:
        """The current rho, how many rounds the rule has observed and the largest ||lambda|| (checkpoints)."""
        return {"current": self.current, "observed": self.observed, "peak": self.peak}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.current, self.observed, self.peak = state["current"], int(state["observed"]), float(state["peak"])

    def __repr__(self) -> str:
        settings = {"tau": self.tau, "mu": self.mu, "mode": self.mode, "relative": self.relative,
                    "warmup": self.warmup, "until": self.until, **self._repr_extra()}
        shown = ", ".join(f"{name}={value!r}" for name, value in settings.items())
        return f"{type(self).__name__}({self.current!r}, {shown})"

    def _repr_extra(self) -> dict[str, Any]:
        return {}


def adaptive(initial: float | None = None, *, tau: float = 1.5, mu: float = 20.0, mode: str = "free",
             maximum: float = 1e6) -> ResidualBalancing:
    """``rho="adaptive"``: residual balancing on the residuals relative to max(||A w||, ||z||) and to the
    largest ||lambda|| so far (``relative="peak"``), in steps of tau = 1.5 within a band of mu = 20, after one
    warm-up round, frozen after 100 rounds, started at the largest L_p unless ``initial`` is given (docs/tuning.md
    measures it against hand-tuned rho). ``mode="nondecreasing"`` keeps Assumption 5.1(i)."""
    return ResidualBalancing(initial, tau=tau, mu=mu, mode=mode, relative="peak", warmup=1, maximum=maximum)


def meets_tolerance(residuals: Mapping[str, float], tol: tuple[float, float]) -> bool:
    """Boyd et al.'s stopping criterion (Sec. 3.3.1, Eq. (3.12)) at ``tol = (eps_abs, eps_rel)``: the primal residual
    r <= sqrt(n) eps_abs + eps_rel max(||A w||, ||z||) and the dual residual s <= sqrt(n) eps_abs + eps_rel ||lambda||
    (n: the number of shared entries, ``residuals["entries"]``; the scales as `ResidualBalancing` reads them)."""
    eps_abs, eps_rel = tol
    root = math.sqrt(residuals["entries"])
    return (residuals["primal_residual"] <= root * eps_abs + eps_rel * residuals["scale_primal"]
            and residuals["dual_residual"] <= root * eps_abs + eps_rel * residuals["scale_dual"])


class PerKeyBalancing(ResidualBalancing):
    """rho="adaptive-per-key": residual balancing (Boyd et al. Sec. 3.4.1) for each shared key on its own.

    rho becomes a vector over the entries of w, constant on each group (``groups="key"``: the entries of one
    shared key; ``"entry"``: every entry alone). After each round, for each group g with primal residual
    r_g = ||A w - z|| over the copies of its entries and dual residual s_g = rho_g ||A (w^{t+1} - w^t)||
    over the same copies: rho_g <- tau * rho_g when r_g > mu * s_g, rho_g <- rho_g / tau when s_g > mu * r_g
    (``mode="free"``). Every group starts at the same value as `ResidualBalancing` and stops adapting
    after ``until`` rounds. The residuals are functions of released vectors and of the server's own w and
    lambda, so the vector rho costs no privacy (docs/privacy.md).

    ``settle=(eps_abs, eps_rel)``: rho also stops adapting, for good, after the first round whose residuals meet
    Boyd et al.'s criterion at that tolerance (`meets_tolerance`). rho then changes finitely often, so from that round
    on the run is ADMM with a fixed (per-key, i.e. diagonal) rho, whose residuals tend to 0 (Boyd et al. Sec. 3.2 and
    Appendix A, for exact local steps): a run that has met its target is not pushed out of it by a penalty still
    reacting to residuals at the level of the solver's accuracy (docs/tuning.md, "Iceland"). With exact steps, He &
    Yuan's V_t = sum_c rho_c ((A w - z)_c^2 + (z^t - z^(t-1))_c^2) is then nonincreasing (Numer. Math. 130, 2015) and
    bounds the primal residual, r_t <= sqrt(V_t / min rho); a local step off by e on a copy c can raise V_t by about
    rho_c e^2 and r_t by about e, which no penalty rule prevents (docs/tuning.md, "Iceland": zone-1's steps are off
    by up to 5.1e-4). Before it settles the rule may still move rho on every round, and the residuals with it.
    """

    def __init__(self, initial: float | None = None, *, groups: str = "key", tau: float = 2.0, mu: float = 10.0,
                 mode: str = "free", until: int | None = 100, minimum: float = 1e-6, maximum: float = 1e6,
                 settle: tuple[float, float] | None = None) -> None:
        super().__init__(initial, tau=tau, mu=mu, mode=mode, until=until, minimum=minimum, maximum=maximum)
        self.groups = check_scalar(groups, argument="groups", choices=("key", "entry"))
        self.settle = None if settle is None else tuple(require_positive(v, argument="settle", allow_zero=True)
                                                        for v in settle)
        self.settled = False
        #: rho of each group, and the group of every entry of w (set by `start`).
        self.vector: np.ndarray | None = None
        self.index: np.ndarray | None = None

    def start(self, suggestion: float, groups: np.ndarray) -> None:
        """Set the start value (as `ResidualBalancing`) for every group: ``groups`` (the shared key of every entry of
        w) with ``groups="key"``, every entry alone with ``"entry"``."""
        super().start(suggestion, groups)
        self.index = groups if self.groups == "key" else np.arange(groups.size)
        if self.vector is None:
            self.vector = np.full(int(self.index.max()) + 1, self.current)

    def value(self, t: int) -> np.ndarray:
        """rho over the entries of w."""
        return self.vector[self.index]

    @property
    def reads_totals(self) -> bool:  # type: ignore[override]
        """With ``settle``, `observe` reads the round's total residuals (`meets_tolerance`) until the rule settles."""
        return self.settle is not None and not self.settled

    def observe(self, residuals: Residuals) -> None:
        """Update each group's rho from its squared primal residual and squared change of A w (``per_entry``); with
        ``settle``, the round's total residuals (``totals``) first settle the rule once they meet its tolerance."""
        if self.settle is not None and not self.settled:
            self.settled = meets_tolerance(residuals.totals, self.settle)
        if self.settled or not self._adapting():
            return
        primal_sq, change_sq = residuals.per_entry()
        groups = self.vector.size
        primal = np.sqrt(np.bincount(self.index, weights=primal_sq, minlength=groups))
        dual = self.vector * np.sqrt(np.bincount(self.index, weights=change_sq, minlength=groups))
        up, down = primal > self.mu * dual, (dual > self.mu * primal) & (self.mode == "free")
        self.vector = np.where(up, np.minimum(self.vector * self.tau, self.maximum),
                               np.where(down, np.maximum(self.vector / self.tau, self.minimum), self.vector))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "vector": self.vector, "index": self.index, "settled": self.settled}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.vector, self.index, self.settled = state["vector"], state["index"], bool(state["settled"])

    def _repr_extra(self) -> dict[str, Any]:
        return {"groups": self.groups, "settle": self.settle}
