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


def check_int(value: Any, *, argument: str, minimum: int = 1, agent: str | None = None,
              error: type[PrivcvxError] = ParameterError) -> int:
    """Return ``value`` as an int, or raise ``error`` if it is not an integer >= ``minimum`` (bools are refused)."""
    import numpy as np

    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise error(f"must be an integer >= {minimum}, got {value!r}", agent=agent, argument=argument)
    return int(value)


def require_positive(value: Any, *, argument: str, agent: str | None = None,
                     error: type[PrivcvxError] = ParameterError, allow_zero: bool = False) -> float:
    """Return ``value`` as a float, or raise ``error`` if it is not a finite positive number."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise error(f"expected a number, got {value!r}", agent=agent, argument=argument) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise error(f"must be finite, got {value!r}", agent=agent, argument=argument)
    if number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise error(f"must be {bound}, got {value!r}", agent=agent, argument=argument)
    return number


class SolverAccuracyWarning(UserWarning):
    """A local or reference solve that CVXPY's solver reported as "optimal_inaccurate": one warning per run, naming
    the agents and their counts (``result.info["inaccurate_solves"]``), in place of CVXPY's anonymous one per solve."""
