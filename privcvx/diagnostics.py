"""Diagnostics compiled once per agent: f_p's value and the W_p violation as numpy programs.

The per-round diagnostics of a research run (``diagnostics=True``) evaluate, for every agent and round, the
objective f_p and the largest violation of the constraints of W_p at a point z_p. CVXPY's ``.value`` walks the
expression tree in Python at each call (its checks, its parameter scan, scipy's wrappers) and cost 3.7x the
algorithm itself on digits (issue 28). Here each expression is compiled once, at the agent's first
diagnostic, into one Python function, generated from the tree (``CompiledExpression.source``): a line per node
in evaluation order, each a numpy call on its children's values. Running it costs the numpy calls and nothing per
node besides (no dispatch, no list of values); where the type of a child's value is known when the code is
generated (a variable, a constant, a numpy answer on numpy values) the line has no type test either.

* A variable is a view of z_p (its entries, reshaped in column-major order, as CVXPY stores them; a vector is its
  slice).
* A constant is read once. A ``cp.Parameter`` is read at every evaluation (a leaf's value, no expression
  evaluation): private data changed between rounds is honoured, with nothing to recompile.
* An atom applies its own ``numeric`` rule, the function ``.value`` calls, to its children's values: the same
  numbers as ``.value`` (a sum and a negation are written out: ``a + b``, ``-a``, what their rules compute).
  A sub-expression used twice (the scores X @ W of the logistic loss) is computed once.
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
forms of its arguments (the constant bounds on a whole variable are batched: `batched_bounds`):
``max(lhs - rhs, 0)`` for ``<=``, ``|lhs - rhs|`` for ``==``, the distance to the cone
for ``SOC`` (CVXPY's formula), ``max(0, -lambda_min((A + A^T) / 2))`` for ``>> 0``. Other cones (exponential,
power, ...) take the slower path ``CvxpyViolation`` (CVXPY solves a small projection problem for them).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import cvxpy as cp
import numpy as np
from cvxpy.atoms.affine.add_expr import AddExpression
from cvxpy.atoms.affine.binary_operators import DivExpression, MulExpression, multiply
from cvxpy.atoms.affine.sum import Sum
from cvxpy.atoms.affine.unary_operators import NegExpression
from cvxpy.atoms.atom import Atom
from cvxpy.constraints import PSD, SOC, Equality, Inequality, NonNeg, NonPos, Zero

from privcvx.errors import DeclarationError

#: What the generated code knows of a value's type at compile time (`CompiledExpression.kinds`): a numpy array with
#: at least one dimension, a numpy float; a name without a kind is checked when the code runs.
ARRAY, FLOAT = "array", "float"


@functools.lru_cache(maxsize=64)
def _row_starts(rows: int, columns: int) -> np.ndarray:
    """The flat index of each row's first entry in a C-order rows x columns matrix (read-only, kept)."""
    starts = np.arange(0, rows * columns, columns)
    starts.flags.writeable = False
    return starts


def row_maximum(x: np.ndarray) -> np.ndarray:
    """The maximum of each row of the matrix ``x``, as a column: ``np.maximum.reduce(x, axis=1, keepdims=True)``.

    For a C-order matrix it is ``np.maximum.reduceat`` over the flat array at each row's start, which takes one
    pass where numpy's reduction along a short last axis restarts its loop for every row (digits, 180 x 10 scores:
    2.7 against 6.3 us). A maximum is exact, so the value is the same bitwise in any order, the sign of a zero
    included (checked on 20000 random matrices with signed zeros; tests/test_diagnostics_compiled.py)."""
    rows, columns = x.shape
    if rows == 0 or columns == 0 or not x.flags.c_contiguous:
        return np.maximum.reduce(x, axis=1, keepdims=True)
    return np.maximum.reduceat(x.reshape(-1), _row_starts(rows, columns))[:, None]


def _log_sum_exp(atom: Atom) -> Callable[[Any], Any]:
    """``log_sum_exp`` written out: m + log(sum(exp(x - m))) with m the maximum over the atom's axis (scipy's
    arithmetic), and the atom's own rule (scipy's ``logsumexp``) where a maximum is not finite."""
    axis, keepdims = atom.axis, atom.keepdims

    def step(x: Any) -> Any:
        if type(x) is not np.ndarray:
            return atom.numeric([x])
        top = row_maximum(x) if axis == 1 and x.ndim == 2 else np.maximum.reduce(x, axis=axis, keepdims=True)
        if not math.isfinite(np.add.reduce(top, axis=None)):  # an infinite or NaN entry (or a sum past 1e308)
            return atom.numeric([x])
        sums = np.log(np.add.reduce(np.exp(x - top), axis=axis, keepdims=keepdims))
        return sums + (top if keepdims else top.reshape(np.shape(sums)))
    return step


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b with b in C order: a variable's matrix is a column-major view of z_p, on which BLAS takes a path
    about 2x slower (digits: 45 against 24 us for X_p @ W); the sums then differ from ``.value``'s in rounding."""
    return a @ np.ascontiguousarray(b)


class FastAtom(NamedTuple):
    """The numpy form of an atom's ``numeric`` rule on numpy values: ``code`` formats the call from the names of the
    children's values (``{0}``, ``{1}``); it applies when every child is a numpy array
    (``scalars``: or a numpy float, a 0-d array included), else the atom's own rule runs."""

    code: Callable[[Atom], str]
    scalars: bool = False


def _squares_total(atom: Atom) -> str:
    """The code of ``quad_over_lin``'s numerator: the sum of the squares of its first argument ``{0}``."""
    return f"np.add.reduce(np.square({{0}}), axis={atom.axis!r}, keepdims={atom.keepdims!r})"


#: Atoms with a faster numpy form than their ``numeric`` rule: ``log_sum_exp`` and ``MulExpression`` (``@`` on a
#: C-order copy) to rounding, the others the same numpy functions (multiply: ``np.multiply``; Sum:
#: ``np.add.reduce``; DivExpression: ``np.divide``; quad_over_lin: its own formula, with the test for complex data
#: made once, where CVXPY walks the argument's tree at each call, 30 us on a 4-entry ridge objective; ``ndarray.sum``
#: is ``np.add.reduce`` behind a Python wrapper) on numpy arrays. A product with a vector on the right is ``@``
#: itself (BLAS reads a vector's entries with their stride). Keyed by the atom's own class, as
#: `privcvx.gradients.ATOM_RULES` (a subclass has its own ``numeric`` and is not matched).
FAST_ATOMS: dict[type[Atom], FastAtom] = {
    Sum: FastAtom(lambda atom: f"np.add.reduce({{0}}, axis={atom.axis!r}, keepdims={atom.keepdims!r})"),
    cp.quad_over_lin: FastAtom(lambda atom: f"{_squares_total(atom)} / {{1}}.item()", scalars=True),
    MulExpression: FastAtom(lambda atom: "_matmul({0}, {1})" if atom.args[1].ndim > 1 else "{0} @ {1}"),
    multiply: FastAtom(lambda atom: "np.multiply({0}, {1})", scalars=True),
    DivExpression: FastAtom(lambda atom: "np.divide({0}, {1})", scalars=True),
}


def _has_own_value(atom: Atom) -> bool:
    """Whether an atom's ``.value`` is not its ``numeric`` rule applied to its arguments' values."""
    cls = type(atom)
    return cls.value is not Atom.value or cls._value_impl is not Atom._value_impl


class CompiledExpression:
    """A CVXPY expression in an agent's variables as a numpy program of its flat local vector z_p.

    ``offsets`` maps each variable's id to where it starts in z_p. Calling the compiled expression at z
    returns what ``expr.value`` returns with the variables set from z. The program is one Python function,
    generated once (``source``): a line per node of the tree, each a numpy call on its children's values, with no
    per-node dispatch when it runs.
    """

    def __init__(self, expr: cp.Expression, offsets: dict[int, int], agent: str | None = None) -> None:
        self.offsets = offsets
        self.agent = agent
        self.expr = expr
        self.slow: list[str] = []
        self.names: dict[int, str] = {}  # a node's id: the name of its value in the generated code
        self.computed = 0  # the values computed so far (v0, v1, ...)
        self.kinds: dict[str, str] = {}  # a name: ARRAY or FLOAT where known at compile time
        self.namespace: dict[str, Any] = {"np": np, "_matmul": _matmul, "_no_value": _no_value}
        self.lines: list[str] = []
        root = self._emit(expr)
        self.source = "def evaluate(z):\n" + "".join(f"    {line}\n" for line in self.lines) + f"    return {root}\n"
        exec(compile(self.source, f"<f_p of {agent}>", "exec"), self.namespace)  # noqa: S102 (privcvx's own code)
        self.evaluate: Callable[[np.ndarray], Any] = self.namespace["evaluate"]

    def __call__(self, z: np.ndarray) -> Any:
        return self.evaluate(z)

    def _bind(self, prefix: str, value: Any) -> str:
        """A name for ``value`` in the generated code's namespace."""
        name = f"{prefix}{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def _emit(self, expr: cp.Expression) -> str:
        """Add the lines computing ``expr`` (children first) and return the name of its value."""
        key = id(expr)  # the tree is kept alive by self.expr, so its nodes' ids stay theirs
        if key not in self.names:
            self.names[key] = self._value_of(expr)
        return self.names[key]

    def _fresh(self) -> str:
        self.computed += 1
        return f"v{self.computed - 1}"

    def _value_of(self, expr: cp.Expression) -> str:
        if isinstance(expr, cp.Variable) and expr.id in self.offsets:
            name, start = self._fresh(), self.offsets[expr.id]
            # a vector: the slice itself, or z when the agent has this variable alone (z is the variable)
            entries = "z" if len(self.offsets) == 1 else f"z[{start}:{start + expr.size}]"
            self.lines.append(f"{name} = {entries}" if expr.shape == (expr.size,)
                              else f"{name} = {entries}.reshape({expr.shape!r}, order='F')")
            self.kinds[name] = ARRAY if expr.shape else FLOAT
            return name
        if isinstance(expr, cp.Parameter) and type(expr) is cp.Parameter:  # read at every evaluation
            name, parameter = self._fresh(), self._bind("p", expr)
            self.lines += [f"{name} = {parameter}.value", f"if {name} is None: _no_value({parameter}, {self.agent!r})"]
            return name
        if not expr.variables() and not expr.parameters() and expr.value is not None:
            value = expr.value
            name = self._bind("c", value)  # read once: no parameters, no variables
            if type(value) is np.ndarray or type(value) is np.float64:
                self.kinds[name] = ARRAY if np.ndim(value) else FLOAT
            return name
        if isinstance(expr, Atom) and not _has_own_value(expr):
            children = [self._emit(arg) for arg in expr.args]
            name = self._fresh()
            self.lines.append(f"{name} = {self._atom(expr, children, name)}")
            return name
        name = self._fresh()
        self.lines.append(f"{name} = {self._bind('s', CvxpyValue(expr, self.offsets))}(z)")
        self.slow.append(type(expr).__name__)
        return name

    def _atom(self, atom: Atom, children: list[str], name: str) -> str:
        """The code of an atom's value from its children's, and the kind of that value (in ``kinds``)."""
        kind = type(atom)  # the atom's own class (`FAST_ATOMS`), not a base's
        if 0 in atom.shape:
            return "np.array([])"
        if kind in (AddExpression, NegExpression):
            if all(child in self.kinds for child in children):  # numpy values: a numpy value
                self.kinds[name] = ARRAY if atom.shape else FLOAT
            return " + ".join(children) if kind is AddExpression else f"-{children[0]}"
        rule = self._bind("a", atom)
        generic = f"{rule}.numeric([{', '.join(children)}])"
        if kind is cp.log_sum_exp:
            if atom.shape:
                self.kinds[name] = ARRAY
            return f"{self._bind('s', _log_sum_exp(atom))}({children[0]})"
        fast = FAST_ATOMS.get(kind)
        if fast is None or (kind is cp.quad_over_lin and atom.args[0].is_complex()):
            return generic
        scaled = self._scaled_by_constant(atom, kind, children)
        if scaled is not None:
            self.kinds[name] = ARRAY if atom.shape else FLOAT
            return scaled
        checks = [self._check(child, fast.scalars) for child in children]
        if None in checks:  # a child that is never a numpy value (a constant's sparse matrix)
            return generic
        code = fast.code(atom).format(*children)
        runtime = [check for check in checks if check]
        if runtime:
            return f"({code} if {' and '.join(runtime)} else {generic})"
        self.kinds[name] = ARRAY if atom.shape else FLOAT  # numpy's answer on numpy values
        return code

    def _scaled_by_constant(self, atom: Atom, kind: type[Atom], children: list[str]) -> str | None:
        """The code of a product, quotient or ``quad_over_lin`` with a scalar float constant (``0.1 * sum_squares``,
        the 1 of ``sum_squares``) as Python arithmetic on a Python float: the same IEEE operation as numpy's ufunc
        on the 0-d constant, without the ufunc's call; a division by 1 is left out (x / 1 is x). None when no child
        is such a constant or the other is not known to be a numpy value."""
        constants = [self._float_constant(child) for child in children]
        if kind is cp.quad_over_lin and constants[1] is not None and children[0] in self.kinds \
                and self.kinds[children[0]] == ARRAY:
            total = _squares_total(atom).format(children[0])
            return total if self.namespace[constants[1]] == 1.0 else f"{total} / {constants[1]}"
        if kind not in (multiply, DivExpression) or len(children) != 2:
            return None
        first, second = constants
        if kind is multiply and first is not None and children[1] in self.kinds:
            return f"{first} * {children[1]}"
        if second is not None and children[0] in self.kinds:
            return f"{children[0]} {'*' if kind is multiply else '/'} {second}"
        return None

    def _float_constant(self, child: str) -> str | None:
        """A name bound to ``child``'s value as a Python float when it is a 0-d float64 constant, else None."""
        value = self.namespace.get(child)
        if child[0] != "c" or type(value) not in (np.ndarray, np.float64) or np.ndim(value) \
                or value.dtype != np.float64:
            return None
        return self._bind("f", float(value))

    def _check(self, child: str, scalars: bool) -> str | None:
        """The test that ``child`` is a numpy array (``scalars``: or float): "" when known true, None when known
        false (a constant of another type), else the code of the test."""
        kind = self.kinds.get(child)
        if kind == ARRAY or (scalars and kind == FLOAT):
            return ""
        if kind == FLOAT or child in self.namespace:  # a 0-d value, or a constant of another type
            return None
        if scalars:
            return f"(type({child}) is np.ndarray or type({child}) is np.float64)"
        return f"(type({child}) is np.ndarray and {child}.ndim > 0)"


def _no_value(parameter: cp.Parameter, agent: str | None) -> None:
    raise DeclarationError(f"the parameter {parameter.name()!r} has no value", agent=agent, argument="objective")


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
        self.slow: list[str] = []
        bounds = [bound for bound in (_bound(constraint, offsets) for constraint in constraints) if bound is not None]
        self.residuals: list[Callable[[np.ndarray], float]] = batched_bounds(bounds)
        for constraint in constraints:
            if _bound(constraint, offsets) is None:
                self.residuals.append(self._compile(constraint, offsets, agent))

    def _compile(self, constraint: cp.Constraint, offsets: dict[int, int],
                 agent: str | None) -> Callable[[np.ndarray], float]:
        def form(expr: cp.Expression) -> CompiledExpression:
            compiled = CompiledExpression(expr, offsets, agent)
            self.slow.extend(compiled.slow)
            return compiled

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
            if not largest <= worst and worst == worst:  # larger, or NaN (kept, for the history's check to report)
                worst = largest
        return worst


class Bound(NamedTuple):
    """A constant bound on a whole variable of z_p (`_bound`): its residual is ``sign (z[start:stop] - limit)``
    (an equality's is both signs)."""

    start: int
    stop: int
    signs: tuple[float, ...]
    limit: np.ndarray


def _bound(constraint: cp.Constraint, offsets: dict[int, int]) -> Bound | None:
    """The bound if the constraint is ``x <= c``, ``c <= x`` or ``x == c`` for a whole variable x of z_p and a constant
    c without parameters: its residual is then ``z[start:stop] - limit`` (sign 1), ``limit - z[start:stop]``
    (sign -1) or their largest, |z[start:stop] - limit| (an equality), the entries of CVXPY's ``lhs - rhs`` in
    column-major order."""
    if not isinstance(constraint, (Inequality, Equality)):
        return None
    lhs, rhs = constraint.args
    for var, const, sign in ((lhs, rhs, 1.0), (rhs, lhs, -1.0)):
        if isinstance(var, cp.Variable) and var.id in offsets and not const.variables() and not const.parameters():
            start = offsets[var.id]
            limit = np.broadcast_to(np.asarray(const.value, dtype=float), var.shape).reshape(-1, order="F")
            return Bound(start, start + var.size, (1.0, -1.0) if isinstance(constraint, Equality) else (sign,),
                         limit.copy())
    return None


def batched_bounds(bounds: Sequence[Bound]) -> list[Callable[[np.ndarray], float]]:
    """An agent's constant bounds on whole variables (`Bound`), batched per variable, each variable's bounds in at most
    three numpy calls however many there are:

    * limits that are one number each (a box, ``-u <= W <= u``): the largest of ``z_i - c`` is ``max(z) - c``, and of
      ``c - z_i`` is ``c - min(z)``, exactly (rounding is monotone): two reductions of z's slice;
    * otherwise the rows of one array ``sign z[start:stop] - sign limit`` (z's slice broadcast over the rows):
      ``sign z_i - sign c_i`` is ``z_i - c_i`` or ``c_i - z_i`` exactly.

    The largest of both signs is ``|z_i - c_i|`` (an equality). A NaN entry gives NaN."""
    rows: dict[tuple[int, int], list[tuple[float, np.ndarray]]] = {}
    for bound in bounds:
        rows.setdefault((bound.start, bound.stop), []).extend((sign, bound.limit) for sign in bound.signs)

    def extremes(start: int, stop: int, upper: float | None, lower: float | None) -> Callable[[np.ndarray], float]:
        def largest(z: np.ndarray) -> float:
            entries, worst = z[start:stop], 0.0
            for gap in ((float(np.maximum.reduce(entries)) - upper) if upper is not None else 0.0,
                        (lower - float(np.minimum.reduce(entries))) if lower is not None else 0.0):
                if not gap <= worst and worst == worst:  # larger, or NaN (kept)
                    worst = gap
            return worst
        return largest

    def broadcast(start: int, stop: int, signs: np.ndarray, limits: np.ndarray) -> Callable[[np.ndarray], float]:
        return lambda z: float(np.maximum.reduce(z[start:stop] * signs - limits, axis=None, initial=0.0))

    residuals = []
    for (start, stop), signed in rows.items():
        if all(limit.size and (limit == limit[0]).all() for _, limit in signed):
            uppers = [float(limit[0]) for sign, limit in signed if sign > 0]
            lowers = [float(limit[0]) for sign, limit in signed if sign < 0]
            residuals.append(extremes(start, stop, min(uppers) if uppers else None, max(lowers) if lowers else None))
        else:
            residuals.append(broadcast(start, stop, np.array([[sign] for sign, _ in signed]),
                                       np.stack([sign * limit for sign, limit in signed])))
    return residuals


def _largest(residual: Any) -> float:
    """max(0, the largest entry), NaN if an entry is NaN (as ``np.max(np.maximum(residual, 0))``)."""
    if type(residual) is np.ndarray:
        return float(np.maximum.reduce(residual, axis=None, initial=0.0))
    return float(np.max(residual, initial=0.0))
