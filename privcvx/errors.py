"""Exceptions raised by privcvx.

Every exception names what is at fault: the agent (when there is one) and the
argument. Messages read ``[agent 'zone-1'] argument 'constraints': ...`` so a
user can find the offending declaration at once.
"""

from __future__ import annotations

from typing import Any


class PrivcvxError(Exception):
    """Base class of all privcvx errors.

    Attributes
    ----------
    agent:
        Name of the agent at fault, or ``None`` when the error is not tied to one.
    argument:
        Name of the argument at fault, or ``None``.
    """

    def __init__(self, message: str, *, agent: str | None = None, argument: str | None = None) -> None:
        self.agent = agent
        self.argument = argument
        prefix = ""
        if agent is not None:
            prefix += f"[agent {agent!r}] "
        if argument is not None:
            prefix += f"argument {argument!r}: "
        super().__init__(prefix + message)

    def __reduce__(self) -> tuple:
        # Keep agent and argument when an error crosses a process boundary.
        return (_restore, (type(self), self.args, dict(self.__dict__)))


def _restore(cls: type[PrivcvxError], args: tuple, state: dict) -> PrivcvxError:
    error = Exception.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class DeclarationError(PrivcvxError, ValueError):
    """An agent or a distributed problem is declared wrongly (shapes, keys, types)."""


class NotDCPError(DeclarationError):
    """An objective or constraint does not follow CVXPY's DCP rules, or is not convex."""


class InfeasibleLocalSetError(DeclarationError):
    """An agent's public local set W_p is empty, found by a feasibility solve at set-up."""


class ParameterError(PrivcvxError, ValueError):
    """A run parameter (rounds, local_updates, rho, eta, tol, ...) is out of range."""


class PrivacyError(PrivcvxError, ValueError):
    """A privacy setting (epsilon, delta, sensitivity, mechanism) is invalid."""


class UnsupportedError(PrivcvxError, ValueError):
    """An algorithm is given a problem, topology or setting it does not support.

    ``algorithm`` names the method and ``feature`` what it does not support, e.g.
    ``[algorithm 'DPDistributedGradient'] does not support general-form keys``.
    """

    def __init__(self, message: str, *, algorithm: str, feature: str, agent: str | None = None,
                 argument: str | None = None) -> None:
        self.algorithm = algorithm
        self.feature = feature
        super().__init__(f"[algorithm {algorithm!r}] does not support {feature}: {message}", agent=agent,
                         argument=argument)


class AgentError(PrivcvxError, RuntimeError):
    """An agent's program raised an exception that is not a privcvx error (a user oracle, a library)."""


class CheckpointError(PrivcvxError, ValueError):
    """A checkpoint is missing, damaged, foreign, or belongs to another run (problem, data, settings, seed)."""


class CentralizedSolveError(PrivcvxError, RuntimeError):
    """The centralized reference solve (``solve_centralized``) failed in CVXPY or its solver."""


class SolverError(PrivcvxError, RuntimeError):
    """Every solver in the fallback chain failed on an agent's local update."""


class RunFailed(PrivcvxError, RuntimeError):
    """A run failed part-way. ``.result`` holds everything recorded up to the failure."""

    def __init__(self, message: str, *, result: Any, cause: BaseException | None = None,
                 agent: str | None = None, argument: str | None = None) -> None:
        super().__init__(message, agent=agent, argument=argument)
        self.result = result
        self.__cause__ = cause


class WorkerTimeout(PrivcvxError, TimeoutError):
    """A worker process or a Ray actor did not answer within ``solve(timeout=...)`` seconds (stuck, stopped, or
    overloaded). The message names the host (its process id or node) and the agents it holds; the run then fails
    with [`RunFailed`][privcvx.errors.RunFailed], which keeps the history."""


class ModelingWarning(UserWarning):
    """A declaration that is valid but looks like a mistake (a shared key no other agent holds, an unused variable)."""


class NominalPrivacyWarning(UserWarning):
    """A calibration that reproduces a paper's printed constant, which is not a valid bound for the model.

    Such a run's epsilon is *nominal*: the privacy table labels it so (column ``calibration``), and it must not
    be published as a guarantee. privcvx uses a nominal calibration only when asked for by name.
    """


class ConvergenceWarning(UserWarning):
    """A run ended without meeting its tolerance (``result.status`` is "max_rounds" or "diverging"), as
    scikit-learn's ``ConvergenceWarning``: the result is the last iterate, not a solution."""


class ReproducibleNoiseWarning(UserWarning):
    """A private run was given an explicit integer seed: anyone who knows it can regenerate the noise."""


#: The intervals `check_scalar` checks: which of the ends ``low`` and ``high`` belong to the interval.
_CLOSED = {"both": (True, True), "left": (True, False), "right": (False, True), "neither": (False, False)}


def check_scalar(value: Any, *, argument: str, kind: type | None = None, low: float | None = None,
                 high: float | None = None, closed: str = "both", choices: Any = None, agent: str | None = None,
                 error: type[PrivcvxError] = ParameterError) -> Any:
    """The one check of every scalar setting, in the manner of scikit-learn's ``check_scalar``; return the value
    converted to ``kind``, or raise ``error`` naming ``argument`` (and ``agent``).

    * ``kind=bool``: a ``bool`` (or numpy bool); the string ``"false"`` and the number 0 are refused.
    * ``kind=int``: an integer (numpy integers too), never a bool, a float or a string.
    * ``kind=float``: an int or a float (numpy's too), never a bool or a string; it must be finite (NaN and
      infinities are refused), and is returned as a float.
    * ``kind=str``: a string.
    * ``low``, ``high``: bounds of the interval, ``closed`` says which ends belong to it ("both", "left",
      "right", "neither").
    * ``choices``: the allowed values, compared by value; an unhashable value is refused, as is a bool
      unless a choice is one. The matching choice is returned (a ``numpy.str_`` comes back as the ``str``).
    """
    import numpy as np

    if choices is not None:
        try:
            hash(value)
        except TypeError:
            raise error(f"must be one of {list(choices)}, got an unhashable {type(value).__name__}", agent=agent,
                        argument=argument) from None
        for choice in choices:
            if isinstance(value, bool | np.bool_) == isinstance(choice, bool) and value == choice:
                return choice
        raise error(f"must be one of {list(choices)}, got {value!r}", agent=agent, argument=argument)
    if kind is bool:
        if not isinstance(value, bool | np.bool_):
            raise error(f"must be True or False, got {value!r}", agent=agent, argument=argument)
        return bool(value)
    if kind is str:
        if not isinstance(value, str):
            raise error(f"must be a string, got {value!r}", agent=agent, argument=argument)
        return str(value)
    if kind is int:
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
            raise error(f"must be an integer{'' if low is None else f' >= {low:g}'}, got {value!r}", agent=agent,
                        argument=argument)
        number: Any = int(value)
    elif kind is float:
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
            raise error(f"expected a number, got {value!r}", agent=agent, argument=argument)
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range
            number = float("inf") if value > 0 else float("-inf")
        if number != number or number in (float("inf"), float("-inf")):
            raise error(f"must be finite, got {value!r}", agent=agent, argument=argument)
    else:
        raise TypeError(f"check_scalar: kind must be bool, int, float or str, got {kind!r}")
    left, right = _CLOSED[closed]
    what = "an integer " if kind is int else ""
    if low is not None and (number < low or (number == low and not left)):
        raise error(f"must be {what}{'>=' if left else '>'} {low:g}, got {value!r}", agent=agent, argument=argument)
    if high is not None and (number > high or (number == high and not right)):
        raise error(f"must be {what}{'<=' if right else '<'} {high:g}, got {value!r}", agent=agent, argument=argument)
    return number


def check_int(value: Any, *, argument: str, minimum: int = 1, agent: str | None = None,
              error: type[PrivcvxError] = ParameterError) -> int:
    """Return ``value`` as an int, or raise ``error`` if it is not an integer >= ``minimum`` (`check_scalar`: bools,
    floats and strings are refused)."""
    return check_scalar(value, argument=argument, kind=int, low=minimum, agent=agent, error=error)


def require_positive(value: Any, *, argument: str, agent: str | None = None,
                     error: type[PrivcvxError] = ParameterError, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, or raise ``error`` if it is not a finite positive number (`check_scalar`:
    bools and strings are refused)."""
    return check_scalar(value, argument=argument, kind=float, low=0.0, closed="both" if allow_zero else "right",
                        agent=agent, error=error)


class SolverAccuracyWarning(UserWarning):
    """A local or reference solve that CVXPY's solver reported as "optimal_inaccurate": one warning per run, naming
    the agents and their counts (``result.info["inaccurate_solves"]``), in place of CVXPY's anonymous one per solve."""
