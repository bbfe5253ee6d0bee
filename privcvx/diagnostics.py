"""Diagnostics compiled once per agent: f_p's value and the W_p violation as numpy programs.

The per-round diagnostics of a research run (``diagnostics=True``) evaluate, for every agent and round, the
objective f_p and the largest violation of the constraints of W_p at a point z_p. CVXPY's ``.value`` walks the
expression tree in Python at each call (its checks, its parameter scan, scipy's wrappers) and cost 3.7x the
algorithm itself on digits (issue 28). Here each expression is compiled once, at the agent's first
diagnostic, into a *tape*: the tree's nodes in evaluation order, each a numpy step on its children's values.

* A variable is a view of z_p (its entries, reshaped in column-major order, as CVXPY stores them).
* A constant is read once. A ``cp.Parameter`` is read at every evaluation (a leaf's value, no expression
  evaluation): private data changed between rounds is honoured, with nothing to recompile.
* An atom applies its own ``numeric`` rule, the function ``.value`` calls, to its children's values: the same
  numbers as ``.value``. A sub-expression used twice (the scores X @ W of the logistic loss) is computed once.
  A few hot atoms have their own step (`FAST_ATOMS`): ``log_sum_exp`` written out (shift by the maximum, exp,
  sum, log: scipy's arithmetic without its wrappers, which cost 4-8x the arithmetic on one agent's digits
  data), and a matrix product on a C-order copy of its right factor (a matrix variable is a column-major view
  of z_p, on which BLAS is 2x slower). These agree with ``.value`` to rounding (the tests ask 1e-12 relative).
* The slower path, ``CvxpyValue``, is taken once per agent at compile time, for the sub-expressions privcvx has
  no numpy form of: leaves other than variables, parameters and constants, and the atoms whose ``.value``
  differs from their ``numeric`` rule (``lambda_max``, ``log_det``, ``tr_inv``, ``lambda_sum_largest``, support
  functions, partial optimization). It loads z_p into the CVXPY variables and takes ``.value``, as the old code
  did every round. The names of such sub-expressions are listed in ``CompiledExpression.slow``.

The violation of a constraint is the residual CVXPY's ``constraint.violation()`` computes, from the compiled
forms of its arguments (a constant bound on a whole variable compares a slice of z_p with an array):
``max(lhs - rhs, 0)`` for ``<=``, ``|lhs - rhs|`` for ``==``, the distance to the cone
for ``SOC`` (CVXPY's formula), ``max(0, -lambda_min((A + A^T) / 2))`` for ``>> 0``. Other cones (exponential,
power, ...) take the slower path ``CvxpyViolation`` (CVXPY solves a small projection problem for them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import cvxpy as cp
import numpy as np
from cvxpy.atoms.atom import Atom
from cvxpy.constraints import PSD, SOC, Equality, Inequality, NonNeg, NonPos, Zero

from privcvx.errors import DeclarationError


def _log_sum_exp(atom: Atom) -> Callable[[np.ndarray, list], np.ndarray]:
    """``log_sum_exp`` written out: m + log(sum(exp(x - m))) with m the maximum over the atom's axis (scipy's
    arithmetic), and the atom's own rule (scipy's ``logsumexp``) where a maximum is not finite."""
    axis, keepdims = atom.axis, atom.keepdims

    def step(z: np.ndarray, values: list) -> np.ndarray:
        x = values[0]
        if type(x) is not np.ndarray:
            return atom.numeric(values)
        top = np.maximum.reduce(x, axis=axis, keepdims=True)
        if not math.isfinite(np.add.reduce(top, axis=None)):  # an infinite or NaN entry (or a sum past 1e308)
            return atom.numeric(values)
        sums = np.log(np.add.reduce(np.exp(x - top), axis=axis, keepdims=keepdims))
        return sums + (top if keepdims else top.reshape(np.shape(sums)))
    return step


def _dense(numpy_rule: Callable[..., np.ndarray], atom: Atom,
           scalars: bool = False) -> Callable[[np.ndarray, list], np.ndarray]:
    """The rule of a unary or binary atom on numpy arrays: the numpy function its ``numeric`` calls, without
    its checks for sparse matrices (and for 0-d arrays and numpy floats unless ``scalars``); the rule itself on
    anything else."""
    def numeric(v: Any) -> bool:
        return (type(v) is np.ndarray and (scalars or v.ndim > 0)) or (scalars and type(v) is np.float64)

    def step(z: np.ndarray, values: list) -> np.ndarray:
        if numeric(values[0]):
            if len(values) == 1:
                return numpy_rule(values[0])
            if numeric(values[1]):
                return numpy_rule(values[0], values[1])
        return atom.numeric(values)
    return step


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b with b in C order: a variable's matrix is a column-major view of z_p, on which BLAS takes a path
    about 2x slower (digits: 45 against 24 us for X_p @ W); the sums then differ from ``.value``'s in rounding."""
    return a @ np.ascontiguousarray(b)


def _sum(atom: Atom) -> Callable[[np.ndarray, list], np.ndarray]:
    axis, keepdims = atom.axis, atom.keepdims
    return _dense(lambda x: np.add.reduce(x, axis=axis, keepdims=keepdims), atom)  # np.sum's own call


def _quad_over_lin(atom: Atom) -> Callable[[np.ndarray, list], np.ndarray]:
    """``quad_over_lin`` (``sum_squares``): its rule with the test for complex data made once, not at every call
    (CVXPY walks the argument's tree for it, 30 us on a 4-entry ridge objective)."""
    if atom.args[0].is_complex():
        return lambda z, values: atom.numeric(values)
    axis, keepdims = atom.axis, atom.keepdims
    return _dense(lambda x, y: np.square(x).sum(axis=axis, keepdims=keepdims) / y.item(), atom, scalars=True)


#: Atoms with a faster numpy form than their ``numeric`` rule: ``log_sum_exp`` and ``MulExpression`` (``@`` on a
#: C-order copy) to rounding, the others the same numpy functions (multiply: ``np.multiply``; Sum:
#: ``np.add.reduce``; DivExpression: ``np.divide``; quad_over_lin: its own formula) on numpy arrays.
FAST_ATOMS: dict[str, Callable[[Atom], Callable[[np.ndarray, list], np.ndarray]]] = {
    "log_sum_exp": _log_sum_exp, "Sum": _sum, "quad_over_lin": _quad_over_lin,
    "MulExpression": lambda atom: _dense(_matmul, atom),
    "multiply": lambda atom: _dense(np.multiply, atom, scalars=True),
    "DivExpression": lambda atom: _dense(np.divide, atom, scalars=True)}


def _has_own_value(atom: Atom) -> bool:
    """Whether an atom's ``.value`` is not its ``numeric`` rule applied to its arguments' values."""
    cls = type(atom)
    return cls.value is not Atom.value or cls._value_impl is not Atom._value_impl


class CompiledExpression:
    """A CVXPY expression in an agent's variables as a numpy program of its flat local vector z_p.

    ``offsets`` maps each variable's id to where it starts in z_p. Calling the compiled expression at z
    returns what ``expr.value`` returns with the variables set from z.
    """

    def __init__(self, expr: cp.Expression, offsets: dict[int, int], agent: str | None = None) -> None:
        self.offsets = offsets
        self.agent = agent
        self.values: list = []  # a slot per node: the constants' values, None where a step computes it
        self.steps: list[tuple[int, Callable[[np.ndarray, list], Any], tuple[int, ...]]] = []
        self.slots: dict[int, int] = {}
        self.slow: list[str] = []
        self.expr = expr
        self.root = self._emit(expr)

    def __call__(self, z: np.ndarray) -> Any:
        values = self.values.copy()
        for slot, step, children in self.steps:
            values[slot] = step(z, [values[i] for i in children])
        return values[self.root]

    def _emit(self, expr: cp.Expression) -> int:
        """Add the slots and steps of ``expr`` (children first) and return the slot of its value."""
        key = id(expr)  # the tree is kept alive by self.expr, so its nodes' ids stay theirs
        if key in self.slots:
            return self.slots[key]
        children: tuple[int, ...] = ()
        step: Callable[[np.ndarray, list], Any] | None = None
        constant = None
        if isinstance(expr, cp.Variable) and expr.id in self.offsets:
            start, shape = self.offsets[expr.id], expr.shape
            stop = start + expr.size
            step = lambda z, _: z[start:stop].reshape(shape, order="F")  # noqa: E731
        elif isinstance(expr, cp.Parameter) and type(expr) is cp.Parameter:
            step = lambda z, _: _parameter_value(expr, self.agent)  # noqa: E731
        elif not expr.variables() and not expr.parameters() and expr.value is not None:
            constant = expr.value  # read once: no parameters, no variables
        elif isinstance(expr, Atom) and not _has_own_value(expr):
            children = tuple(self._emit(arg) for arg in expr.args)
            name = type(expr).__name__
            if 0 in expr.shape:
                step = lambda z, _: np.array([])  # noqa: E731
            elif name in FAST_ATOMS:
                step = FAST_ATOMS[name](expr)
            else:
                step = lambda z, values: expr.numeric(values)  # noqa: E731
        else:
            step = CvxpyValue(expr, self.offsets)
            self.slow.append(type(expr).__name__)
        slot = len(self.values)
        self.values.append(constant)
        if step is not None:
            self.steps.append((slot, step, children))
        self.slots[key] = slot
        return slot


def _parameter_value(parameter: cp.Parameter, agent: str | None) -> Any:
    value = parameter.value
    if value is None:
        raise DeclarationError(f"the parameter {parameter.name()!r} has no value", agent=agent, argument="objective")
    return value


class LoadedVariables:
    """CVXPY variables set from z_p for the length of a ``with`` block, their previous values restored after: the
    slower paths, which evaluate through CVXPY."""

    def __init__(self, variables: Sequence[cp.Variable], offsets: dict[int, int]) -> None:
        self.variables = [(v, offsets[v.id]) for v in variables]

    @contextmanager
    def at(self, z: np.ndarray) -> Iterator[None]:
        """The variables hold z_p's entries inside the block."""
        saved = [v.value for v, _ in self.variables]
        for var, start in self.variables:
            var.save_value(z[start:start + var.size].reshape(var.shape, order="F"))
        try:
            yield
        finally:
            for (var, _), value in zip(self.variables, saved, strict=True):
                var.save_value(value)


class CvxpyValue:
    """The slower path: a sub-expression privcvx has no numpy form of, evaluated by CVXPY's ``.value`` with
    z_p loaded into its variables."""

    def __init__(self, expr: cp.Expression, offsets: dict[int, int]) -> None:
        self.expr = expr
        self.loaded = LoadedVariables(expr.variables(), offsets)

    def __call__(self, z: np.ndarray, values: Sequence = ()) -> Any:
        with self.loaded.at(z):
            return self.expr.value


def soc_residual(t: Any, X: Any, axis: int) -> np.ndarray:
    """Distance of (t, X) to the second-order cone ||X_i|| <= t_i (row i, or column i for ``axis=0``):
    ||(t, X) - proj(t, X)|| with the projection of CVXPY's ``SOC.residual`` (Parikh and Boyd, Proximal
    Algorithms, Sec. 6.3.2)."""
    t, X = np.atleast_1d(t), np.atleast_1d(X)
    if axis == 0:
        X = X.T
    promoted = X.ndim == 1
    X = np.atleast_2d(X)
    t_proj, X_proj = np.zeros(t.shape), np.zeros(X.shape)
    norms = np.linalg.norm(X, ord=2, axis=1)
    inside = t >= norms
    t_proj[inside], X_proj[inside] = t[inside], X[inside]
    between = np.abs(t) < norms
    scale = 0.5 * (1 + t / norms)
    X_proj[between] = scale[between, None] * X[between]
    t_proj[between] = scale[between] * norms[between]
    resid = np.linalg.norm(np.concatenate([X, t[:, None]], axis=1) - np.concatenate([X_proj, t_proj[:, None]], axis=1),
                           ord=2, axis=1)
    return resid[0] if promoted else resid


def psd_residual(A: Any) -> float:
    """CVXPY's ``PSD.residual``: max(0, -lambda_min((A + A^T) / 2))."""
    A = np.asarray(A, dtype=float)
    return max(0.0, -float(np.linalg.eigvalsh(A + A.T).min()) / 2)


class CvxpyViolation:
    """The slower path for a constraint privcvx has no numpy residual of (exponential, power cones, ...):
    CVXPY's ``constraint.violation()`` with z_p loaded into its variables."""

    def __init__(self, constraint: cp.Constraint, offsets: dict[int, int]) -> None:
        self.constraint = constraint
        self.loaded = LoadedVariables(constraint.variables(), offsets)

    def __call__(self, z: np.ndarray) -> Any:
        with self.loaded.at(z):
            return self.constraint.violation()


class ConstraintViolation:
    """The largest violation of an agent's constraints at z_p, compiled once (0 when z_p is in W_p).

    Equal to ``max(np.max(c.violation()) for c in constraints)`` with the variables set from z_p. The
    constraints without a numpy residual are listed in ``slow``.
    """

    def __init__(self, constraints: Sequence[cp.Constraint], offsets: dict[int, int],
                 agent: str | None = None) -> None:
        self.residuals: list[Callable[[np.ndarray], float]] = []
        self.slow: list[str] = []
        for constraint in constraints:
            self.residuals.append(self._compile(constraint, offsets, agent))

    def _compile(self, constraint: cp.Constraint, offsets: dict[int, int],
                 agent: str | None) -> Callable[[np.ndarray], float]:
        def form(expr: cp.Expression) -> CompiledExpression:
            compiled = CompiledExpression(expr, offsets, agent)
            self.slow.extend(compiled.slow)
            return compiled

        bound = _bound(constraint, offsets)
        if bound is not None:  # a constant bound on a whole variable: a slice of z_p against an array
            start, stop, sign, limit = bound
            if isinstance(constraint, Equality):
                return lambda z: _largest(np.abs(z[start:stop] - limit))
            if sign > 0:
                return lambda z: _largest(z[start:stop] - limit)
            return lambda z: _largest(limit - z[start:stop])
        if isinstance(constraint, (Inequality, NonPos)):  # max(expr, 0) entry by entry: max(0, its largest entry)
            upper = form(constraint.expr)
            return lambda z: _largest(upper(z))
        if isinstance(constraint, NonNeg):  # |min(expr, 0)|
            lower = form(constraint.expr)
            return lambda z: _largest(np.negative(lower(z)))
        if isinstance(constraint, (Equality, Zero)):
            gap = form(constraint.expr)
            return lambda z: _largest(np.abs(gap(z)))
        if isinstance(constraint, SOC):
            t, X, axis = form(constraint.args[0]), form(constraint.args[1]), constraint.axis
            return lambda z: _largest(soc_residual(t(z), X(z), axis))
        if type(constraint) is PSD:
            matrix = form(constraint.args[0])
            return lambda z: psd_residual(matrix(z))
        self.slow.append(type(constraint).__name__)
        slow = CvxpyViolation(constraint, offsets)
        return lambda z: _largest(slow(z))

    def __call__(self, z: np.ndarray) -> float:
        worst = 0.0
        for residual in self.residuals:
            largest = residual(z)
            if not largest <= worst:  # larger, or NaN (which the history's check then reports)
                worst = largest
        return worst


def _bound(constraint: cp.Constraint, offsets: dict[int, int]) -> tuple[int, int, int, np.ndarray] | None:
    """(start, stop, sign, limit) if the constraint is ``x <= c``, ``c <= x`` or ``x == c`` for a whole variable x of
    z_p and a constant c without parameters: its residual is then ``z[start:stop] - limit`` (sign 1) or
    ``limit - z[start:stop]`` (sign -1), the entries of CVXPY's ``lhs - rhs`` in column-major order."""
    if not isinstance(constraint, (Inequality, Equality)):
        return None
    lhs, rhs = constraint.args
    for var, const, sign in ((lhs, rhs, 1), (rhs, lhs, -1)):
        if isinstance(var, cp.Variable) and var.id in offsets and not const.variables() and not const.parameters():
            start = offsets[var.id]
            limit = np.broadcast_to(np.asarray(const.value, dtype=float), var.shape).reshape(-1, order="F")
            return start, start + var.size, sign, limit.copy()
    return None


def _largest(residual: Any) -> float:
    """max(0, the largest entry), NaN if an entry is NaN (as ``np.max(np.maximum(residual, 0))``)."""
    if type(residual) is np.ndarray:
        return float(np.maximum.reduce(residual, axis=None, initial=0.0))
    return float(np.max(residual, initial=0.0))
