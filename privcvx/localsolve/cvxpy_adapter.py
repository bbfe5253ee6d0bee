"""The one place where privcvx reads CVXPY's internals: a local problem's conic data, compiled once.

CVXPY compiles ``min f_p(z) + <k, z> s.t. z in W_p`` (``k`` a Parameter, so that every entry of z has a column)
once; `compile_local` evaluates it at k = 0 and returns the constant data of Clarabel's standard form

    min 1/2 x'Px + q'x   s.t.   -A x + s = b,  s in K

with the columns of z in x. The strategies of [`privcvx.localsolve`][privcvx.localsolve] add the round's
penalty 1/2 sum_i w_i z_i^2 - <b, z> to P and q in numpy, so a round never goes through CVXPY.

The internals used (``ParamConeProg.apply_parameters``, ``var_id_to_col``, ``dims_to_solver_cones``) are not
CVXPY's public API: `SUPPORTED_CVXPY` names the versions they were checked on. With another version
`compile_local` returns None and every local problem takes CVXPY's public solve path (the "cvxpy" strategy).
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

#: CVXPY versions (major, minor) whose internals this module was checked against.
SUPPORTED_CVXPY = ((1, 5), (1, 9))


def cvxpy_supported(version: str = cp.__version__) -> bool:
    """Whether CVXPY's internals used here are known to work with this version."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return SUPPORTED_CVXPY[0] <= (major, minor) <= SUPPORTED_CVXPY[1]


if cvxpy_supported():
    from cvxpy import settings as cvxpy_settings
    from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import dims_to_solver_cones
    from cvxpy.reductions.solvers.conic_solvers.conic_solver import ConicSolver


@dataclass(frozen=True)
class ConicData:
    """The constant conic data of one local problem (Clarabel's standard form), and where z sits in x.

    ``columns``: the column of every entry of z in x; ``zero`` and ``nonneg``: the number of equality and
    inequality rows at the top of A (CVXPY orders the cones so); ``cones``: Clarabel's cone list; ``qp``: whether
    K holds only zero and nonnegative cones (a QP)."""

    P: sp.csc_matrix
    q: np.ndarray
    A: sp.csc_matrix
    b: np.ndarray
    cones: list
    columns: np.ndarray
    zero: int
    nonneg: int
    qp: bool


def compile_local(objective: cp.Expression | float, constraints: list[cp.Constraint],
                  variables: list[cp.Variable], z: cp.Expression) -> ConicData | None:
    """The conic data of ``min objective s.t. constraints`` over the stacked variables z, or None when CVXPY's
    internals cannot give it (an unsupported version, a variable replaced by CVXPY's reductions (attributes), a
    problem that does not follow DPP, variable bounds passed to the solver apart)."""
    if not cvxpy_supported() or needs_integer_solver(constraints):
        return None
    k = cp.Parameter(z.size, name="compile_linear")
    k.value = np.zeros(z.size)
    problem = cp.Problem(cp.Minimize(objective + k @ z), constraints)
    try:
        data, _, _ = problem.get_problem_data(cp.CLARABEL, enforce_dpp=True)
    except (cp.error.SolverError, cp.error.DPPError, cp.error.DCPError):
        return None
    if data.get("lower_bounds") is not None or data.get("upper_bounds") is not None:
        return None
    program = data[cvxpy_settings.PARAM_PROB]
    positions = program.var_id_to_col
    if any(var.id not in positions for var in variables):
        return None
    columns = np.concatenate([positions[var.id] + np.arange(var.size) for var in variables])
    if program.P is None:  # a linear objective (a projection's data): P = 0
        q, _, matrix_a, b = program.apply_parameters(quad_obj=False)
        matrix_p = sp.csc_matrix((q.size, q.size))
    else:
        matrix_p, q, _, matrix_a, b = program.apply_parameters(quad_obj=True)
    dims = data[ConicSolver.DIMS]
    size = matrix_a.shape[0]
    qp = dims.zero + dims.nonneg == size
    return ConicData(P=sp.csc_matrix(matrix_p), q=np.asarray(q, dtype=float).reshape(-1), A=-sp.csc_matrix(matrix_a),
                     b=np.asarray(b, dtype=float).reshape(-1), cones=dims_to_solver_cones(dims), columns=columns,
                     zero=int(dims.zero), nonneg=int(dims.nonneg), qp=bool(qp))


def needs_integer_solver(constraints: list[cp.Constraint]) -> bool:
    """Whether a constraint makes the problem mixed-integer (CVXPY's FiniteSet becomes boolean variables, which the
    conic solvers would silently relax)."""
    return any(isinstance(constraint, cp.constraints.FiniteSet) for constraint in constraints)


def cone_names(problem: cp.Problem) -> list[str]:
    """The kinds of constraint (cones) of a problem, by CVXPY class name, for messages."""
    return sorted({type(constraint).__name__ for constraint in problem.constraints})
