"""Schedules for the penalty rho^t and the proximal step eta^t (Assumption 5.1(i)).

Every schedule is a small picklable object ``t -> value`` for rounds t = 1, 2, ...,
so that a run's configuration can be checkpointed and sent to worker processes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from privcvx.errors import ParameterError, require_positive

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
    if callable(value):
        checked_value(value, 1, argument=argument)
        return value
    return Constant(require_positive(value, argument=argument))


def checked_value(schedule: Schedule, t: int, *, argument: str) -> float:
    """The schedule's value at round t, which must be finite and > 0."""
    try:
        raw = schedule(t)
    except Exception as exc:  # a user callable failed: name the argument and round
        raise ParameterError(f"the schedule failed at round {t}: {exc}", argument=argument) from exc
    return require_positive(raw, argument=f"{argument}(t={t})")
