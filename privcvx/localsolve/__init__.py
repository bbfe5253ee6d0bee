"""The local-solve layer: every local step of every algorithm, compiled once per agent.

[`LocalProblem`][privcvx.localsolve.LocalProblem] holds an agent's step (a projection onto W_p, or f_p plus a
penalty over W_p) with the round's weights and linear term as its only changing data; it answers by the first
of the [`strategies`][privcvx.localsolve.strategies] that accepts it (closed form, cached KKT factorization,
warm-started OSQP, Clarabel, CVXPY), falling back along the chain under one error policy, and keeps one
[`SolveStats`][privcvx.localsolve.SolveStats]. Every solver answer of a step a private release depends on is certified
within the problem's declared e of the exact step in l2 (`LocalProblem(..., certified=e)`; ``True`` is
`CERTIFIED_ERROR`; [`certificate`][privcvx.localsolve.certificate]), which `LocalProblem.error_bound` states for
the private calibrations. CVXPY's internals are read in one module,
[`cvxpy_adapter`][privcvx.localsolve.cvxpy_adapter], behind a version check.
"""

from privcvx.localsolve.certificate import CERTIFIED_ERROR
from privcvx.localsolve.problem import LocalProblem, SolveStats, box_bounds, set_kind
from privcvx.localsolve.strategies import (
    ACCEPTABLE_RESIDUAL,
    SOLVER_SETTINGS,
    STANDARD_TOLERANCE,
    STRATEGIES,
    StrategyFailure,
)

__all__ = ["ACCEPTABLE_RESIDUAL", "CERTIFIED_ERROR", "SOLVER_SETTINGS", "STANDARD_TOLERANCE", "STRATEGIES",
           "LocalProblem", "SolveStats", "StrategyFailure", "box_bounds", "set_kind"]
