"""Fast value and (sub)gradient evaluation of an agent's objective f_p.

The linearized update Eq. (9) needs f'_p(z_p^{t,e}) at every local update. CVXPY's
``expr.grad`` re-canonicalizes the expression on every call (about 180x slower than
numpy), so privcvx compiles the expression tree once:

* every affine sub-expression becomes a constant sparse Jacobian ``J`` and offset ``b``
  (taken once from CVXPY), so it evaluates as ``J @ z + b``;
* the non-affine atoms above them are evaluated in numpy with the chain rule
  (reverse mode: each node passes its upstream gradient to its children).

Parameters (an agent's private data) are read at every evaluation, without CVXPY's ``.value``
(`privcvx.diagnostics.CompiledExpression`): a ``cp.Parameter`` changed between evaluations (or between solves) is
honoured. An affine sub-expression with parameters is therefore not folded into ``J z + b`` but evaluated by its
atoms' rules (a matrix product with a parameter as ``A @ x``, its chain rule ``A^T``). Atoms without a numpy rule
fall back to CVXPY for that sub-expression only, which is correct but slow. The rules are a registry keyed by
CVXPY atom class (`ATOM_RULES`), which also says which atoms are nonsmooth (`privcvx.tuning.is_smooth`).

f_p's value (the objective diagnostic, and IPP-ADMM's query) is not taken from this tree but from
`privcvx.diagnostics.CompiledExpression`, compiled at the first value asked for: the numbers of CVXPY's
``.value``, with parameters read at every evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
from cvxpy.atoms.affine.add_expr import AddExpression
from cvxpy.atoms.affine.binary_operators import DivExpression, MulExpression, multiply
from cvxpy.atoms.affine.sum import Sum
from cvxpy.atoms.affine.unary_operators import NegExpression
from cvxpy.atoms.elementwise.power import Power
from cvxpy.atoms.pnorm import Pnorm
from cvxpy.atoms.quad_form import QuadForm
from scipy.special import expit, logsumexp, softmax

from privcvx.diagnostics import CompiledExpression, ConstraintViolation

if TYPE_CHECKING:
    from privcvx.problem import Agent, AgentLayout


class _Node:
    """A compiled sub-expression: ``forward`` caches its value, ``backward`` applies the chain rule."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.value: np.ndarray = np.zeros(shape)

    def forward(self, z: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        """Add d(upstream . value)/dz into ``grad``."""
        raise NotImplementedError


class _Affine(_Node):
    """An affine sub-expression ``J z + b``, with J taken once from CVXPY."""

    def __init__(self, expr: cp.Expression, offsets: dict[int, int], dim: int) -> None:
        super().__init__(expr.shape)
        saved = {v.id: v.value for v in expr.variables()}
        for var in expr.variables():
            var.save_value(np.zeros(var.shape))
        self.b = np.asarray(expr.value, dtype=float).reshape(-1, order="F")
        blocks = []
        for var in expr.variables():
            g = sp.csc_matrix(expr.grad[var]).reshape((var.size, expr.size))
            rows = offsets[var.id] + np.arange(var.size)
            pad = sp.csc_matrix((np.ones(var.size), (rows, np.arange(var.size))), shape=(dim, var.size))
            blocks.append(pad @ g)
        jt = sp.csr_matrix(sum(blocks[1:], blocks[0]))  # (dim x size): J transposed
        # A mostly dense Jacobian (e.g. a data matrix) multiplies faster as a dense array.
        self.jt = jt.toarray() if jt.nnz >= 0.3 * dim * max(expr.size, 1) else jt
        self.j = np.ascontiguousarray(self.jt.T) if isinstance(self.jt, np.ndarray) else jt.T.tocsr()
        for var in expr.variables():
            var.save_value(saved[var.id])

    def forward(self, z: np.ndarray) -> np.ndarray:
        self.value = (self.j @ z + self.b).reshape(self.shape, order="F")
        return self.value

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        grad += self.jt @ _shaped(upstream, self.shape).reshape(-1, order="F")


class _Data:
    """A sub-expression without variables (an agent's data): its value read once when it has no parameters, else at
    every call, from the parameters' values (`CompiledExpression`, no CVXPY ``.value``): a ``cp.Parameter`` changed
    between evaluations is honoured. A scipy sparse constant stays sparse."""

    def __init__(self, expr: cp.Expression, agent: str | None) -> None:
        self.compiled = CompiledExpression(expr, {}, agent) if expr.parameters() else None
        self.fixed = None if self.compiled is not None else _dense_or_sparse(expr.value)

    def __call__(self) -> Any:
        return self.fixed if self.compiled is None else _dense_or_sparse(self.compiled.evaluate(_NO_VARIABLES))


_NO_VARIABLES = np.zeros(0)


def _dense_or_sparse(value: Any) -> Any:
    return value if sp.issparse(value) else np.asarray(value, dtype=float)


def _shaped(upstream: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The upstream gradient broadcast to ``shape``: itself when it has that shape (``np.broadcast_to``, a Python
    function, costs more than the arithmetic of a small node)."""
    return upstream if type(upstream) is np.ndarray and upstream.shape == shape else np.broadcast_to(upstream, shape)


class _Constant(_Node):
    def __init__(self, expr: cp.Expression, agent: str | None) -> None:
        super().__init__(expr.shape)
        self.data = _Data(expr, agent)

    def forward(self, z: np.ndarray) -> np.ndarray:
        self.value = self.data()
        return self.value

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        return None


class _Elementwise(_Node):
    """``f(child)`` applied entry by entry, with derivative ``df``."""

    def __init__(self, shape: tuple[int, ...], child: _Node, f: Callable[[np.ndarray], np.ndarray],
                 df: Callable[[np.ndarray], np.ndarray]) -> None:
        super().__init__(shape)
        self.child, self.f, self.df = child, f, df

    def forward(self, z: np.ndarray) -> np.ndarray:
        self.value = self.f(self.child.forward(z))
        return self.value

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        self.child.backward(upstream * self.df(self.child.value), grad)


class _Reduction(_Node):
    """A scalar (or axis) reduction ``f(child)`` whose gradient is ``df(child) * upstream``."""

    def __init__(self, shape: tuple[int, ...], child: _Node,
                 f: Callable[[np.ndarray], np.ndarray],
                 df: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
        super().__init__(shape)
        self.child, self.f, self.df = child, f, df

    def forward(self, z: np.ndarray) -> np.ndarray:
        self.value = np.asarray(self.f(self.child.forward(z)))
        return self.value

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        self.child.backward(self.df(self.child.value, np.asarray(upstream)), grad)


class _Sum(_Node):
    """Sum of children (with broadcasting of scalars), or a sign-flipped child."""

    def __init__(self, shape: tuple[int, ...], children: Sequence[_Node], sign: float = 1.0) -> None:
        super().__init__(shape)
        self.children, self.sign = list(children), sign

    def forward(self, z: np.ndarray) -> np.ndarray:
        total = np.zeros(self.shape)
        for child in self.children:
            total = total + child.forward(z)
        self.value = self.sign * total
        return self.value

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        for child in self.children:
            up = self.sign * _shaped(upstream, self.shape)
            if child.shape != self.shape:  # a scalar broadcast to the sum's shape
                up = np.add.reduce(up, axis=None).reshape(child.shape)  # np.sum's own call
            child.backward(up, grad)


class _Scaled(_Node):
    """``constant * child`` (elementwise or scalar) or ``child / constant`` (``inverse``: times 1 / constant), the
    constant read at every forward pass."""

    def __init__(self, shape: tuple[int, ...], child: _Node, factor: _Data, inverse: bool = False) -> None:
        super().__init__(shape)
        self.child, self.data, self.inverse = child, factor, inverse
        self.factor: Any = 1.0

    def forward(self, z: np.ndarray) -> np.ndarray:
        self.factor = 1.0 / self.data() if self.inverse else self.data()
        self.value = self.factor * self.child.forward(z)
        return self.value

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        up = self.factor * upstream
        if self.child.shape != np.shape(up):
            up = np.add.reduce(up, axis=None).reshape(self.child.shape)
        self.child.backward(up, grad)


class _Product(_Node):
    """``A @ child`` (``left``) or ``child @ A`` for a matrix or vector A without variables, read at every forward
    pass; the chain rule is A^T (or the outer product, for a vector A) applied to the upstream gradient."""

    def __init__(self, shape: tuple[int, ...], child: _Node, factor: _Data, left: bool) -> None:
        super().__init__(shape)
        self.child, self.data, self.left = child, factor, left
        self.factor: Any = None

    def forward(self, z: np.ndarray) -> np.ndarray:
        self.factor = a = self.data()
        x = self.child.forward(z)
        self.value = np.asarray(a @ x if self.left else x @ a)
        return self.value

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        a, up = self.factor, _shaped(upstream, self.shape)
        if self.left:
            self.child.backward(a.T @ up if a.ndim == 2 else np.multiply.outer(a, up), grad)
        else:
            self.child.backward(up @ a.T if a.ndim == 2 else np.multiply.outer(up, a), grad)


class _CvxpyFallback(_Node):
    """A sub-expression with no numpy rule: value and gradient through CVXPY (slow, but correct)."""

    def __init__(self, expr: cp.Expression, offsets: dict[int, int], dim: int) -> None:
        super().__init__(expr.shape)
        self.expr, self.offsets, self.dim = expr, offsets, dim

    def _load(self, z: np.ndarray) -> None:
        for var in self.expr.variables():
            o = self.offsets[var.id]
            var.save_value(z[o:o + var.size].reshape(var.shape, order="F"))

    def forward(self, z: np.ndarray) -> np.ndarray:
        self._load(z)
        self._z = z
        self.value = np.asarray(self.expr.value, dtype=float)
        return self.value

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        self._load(self._z)
        up = _shaped(upstream, self.shape).reshape(-1, order="F")
        for var, g in self.expr.grad.items():
            o = self.offsets[var.id]
            grad[o:o + var.size] += sp.csc_matrix(g).reshape((var.size, self.expr.size)) @ up


def _axis_reduce(fn: Callable[..., np.ndarray], axis: int | None, keepdims: bool) -> Callable:
    return lambda x: fn(x, axis=axis, keepdims=keepdims)


def _expand(up: np.ndarray, x: np.ndarray, axis: int | None) -> np.ndarray:
    """Broadcast an axis-reduced upstream gradient back to the shape of ``x``."""
    if axis is None:
        return np.broadcast_to(np.asarray(up).reshape(()), x.shape)
    return np.broadcast_to(np.expand_dims(np.asarray(up).reshape(np.delete(x.shape, axis)), axis), x.shape)


Child = Callable[[int], _Node]
#: The data of an atom's argument without variables (``data(i)``): read at every forward pass when it has parameters.
DataOf = Callable[[int], _Data]
#: An atom's compile rule: from the expression, its compiled children (``child(i)``) and data (``data(i)``), the node,
#: or None when this form of the atom has no numpy rule (e.g. a p-norm other than 2: the sub-expression then falls back
#: to CVXPY).
Compile = Callable[[cp.Expression, Child, DataOf], "_Node | None"]


@dataclass(frozen=True)
class AtomRule:
    """What privcvx knows of one CVXPY atom class: how to evaluate it in numpy (``compile``, None: CVXPY evaluates
    it) and whether its (sub)gradient is continuous (``smooth``; used by `privcvx.tuning.is_smooth`)."""

    compile: Compile | None
    smooth: bool


def _scaled_product(expr: cp.Expression, child: Child, data: DataOf) -> _Node | None:
    kids = expr.args
    if len(kids) != 2:
        return None
    const, var_side = (0, 1) if not kids[0].variables() else (1, 0)
    if kids[const].variables():
        return None
    if kids[0].is_scalar() or isinstance(expr, multiply):
        return _Scaled(expr.shape, child(var_side), data(const))
    return _Product(expr.shape, child(var_side), data(const), left=const == 0)


def _quotient(expr: cp.Expression, child: Child, data: DataOf) -> _Node | None:
    if expr.args[1].variables():
        return None
    return _Scaled(expr.shape, child(0), data(1), inverse=True)


def _sum(expr: cp.Expression, child: Child, data: DataOf) -> _Node:
    axis, keepdims = expr.axis, expr.keepdims
    return _Reduction(expr.shape, child(0), _axis_reduce(np.add.reduce, axis, keepdims),  # np.sum's own call
                      lambda x, up: _expand(up, x, axis))


def _quad_over_lin(expr: cp.Expression, child: Child, data: DataOf) -> _Node | None:
    if expr.args[1].variables():
        return None
    y = data(1)
    return _Reduction(expr.shape, child(0), lambda x: np.add.reduce(x ** 2, axis=None) / float(y()),
                      lambda x, up: 2.0 * x / float(y()) * up)


def _power(expr: cp.Expression, child: Child, data: DataOf) -> _Node:
    p = float(expr.p.value)
    return _Elementwise(expr.shape, child(0), lambda x: x ** p, lambda x: p * x ** (p - 1))


def _quad_form(expr: cp.Expression, child: Child, data: DataOf) -> _Node | None:
    if expr.args[1].variables():
        return None
    mat = data(1)
    return _Reduction(expr.shape, child(0), lambda x: x @ mat() @ x, lambda x, up: (mat() + mat().T) @ x * up)


def _log_sum_exp(expr: cp.Expression, child: Child, data: DataOf) -> _Node:
    axis, keepdims = expr.axis, expr.keepdims
    return _Reduction(expr.shape, child(0), _axis_reduce(logsumexp, axis, keepdims),
                      lambda x, up: softmax(x, axis=axis) * _expand(up, x, axis))


def _two_norm(expr: cp.Expression, child: Child, data: DataOf) -> _Node | None:
    if expr.axis is not None or float(expr.p) != 2.0:
        return None
    return _Reduction(expr.shape, child(0), np.linalg.norm, lambda x, up: (x / max(np.linalg.norm(x), 1e-300)) * up)


def _norm1(expr: cp.Expression, child: Child, data: DataOf) -> _Node | None:
    if expr.axis is not None:
        return None
    return _Reduction(expr.shape, child(0), lambda x: np.abs(x).sum(), lambda x, up: np.sign(x) * up)


def _norm_inf(expr: cp.Expression, child: Child, data: DataOf) -> _Node | None:
    if expr.axis is not None:
        return None

    def subgradient(x: np.ndarray, up: np.ndarray) -> np.ndarray:
        g = np.zeros_like(x)
        i = np.unravel_index(np.argmax(np.abs(x)), x.shape)
        g[i] = np.sign(x[i])
        return g * up

    return _Reduction(expr.shape, child(0), lambda x: np.abs(x).max(), subgradient)


def _huber(expr: cp.Expression, child: Child, data: DataOf) -> _Node:
    radius = _Data(expr.M, None)  # M, a constant or a parameter: read at every forward pass

    def value(x: np.ndarray) -> np.ndarray:
        m = float(radius())
        return np.where(np.abs(x) <= m, x ** 2, 2 * m * np.abs(x) - m ** 2)

    def slope(x: np.ndarray) -> np.ndarray:
        m = float(radius())
        return np.where(np.abs(x) <= m, 2 * x, 2 * m * np.sign(x))
    return _Elementwise(expr.shape, child(0), value, slope)


def _elementwise(f: Callable[[np.ndarray], np.ndarray], df: Callable[[np.ndarray], np.ndarray]) -> Compile:
    return lambda expr, child, data: _Elementwise(expr.shape, child(0), f, df)


_SMOOTH, _NONSMOOTH = True, False
#: The rules, keyed by CVXPY atom class (a subclass, e.g. ``PowerApprox`` of ``Power``, finds its base's rule), as
#: cvxpy's canonicalizer maps are. Atoms missing here are evaluated by CVXPY and counted as smooth.
ATOM_RULES: dict[type, AtomRule] = {
    AddExpression: AtomRule(lambda expr, child, data: _Sum(expr.shape, [child(i) for i in range(len(expr.args))]),
                            _SMOOTH),
    NegExpression: AtomRule(lambda expr, child, data: _Sum(expr.shape, [child(0)], sign=-1.0), _SMOOTH),
    DivExpression: AtomRule(_quotient, _SMOOTH),
    multiply: AtomRule(_scaled_product, _SMOOTH),
    MulExpression: AtomRule(_scaled_product, _SMOOTH),
    Sum: AtomRule(_sum, _SMOOTH),
    cp.quad_over_lin: AtomRule(_quad_over_lin, _SMOOTH),
    Power: AtomRule(_power, _SMOOTH),
    QuadForm: AtomRule(_quad_form, _SMOOTH),
    cp.log_sum_exp: AtomRule(_log_sum_exp, _SMOOTH),
    cp.huber: AtomRule(_huber, _SMOOTH),
    cp.exp: AtomRule(_elementwise(np.exp, np.exp), _SMOOTH),
    cp.logistic: AtomRule(_elementwise(lambda x: np.logaddexp(0.0, x), expit), _SMOOTH),
    cp.log: AtomRule(_elementwise(np.log, lambda x: 1.0 / x), _SMOOTH),
    cp.entr: AtomRule(_elementwise(lambda x: -x * np.log(x), lambda x: -np.log(x) - 1.0), _SMOOTH),
    cp.abs: AtomRule(_elementwise(np.abs, np.sign), _NONSMOOTH),
    Pnorm: AtomRule(_two_norm, _NONSMOOTH),
    cp.norm1: AtomRule(_norm1, _NONSMOOTH),
    cp.norm_inf: AtomRule(_norm_inf, _NONSMOOTH),
    **{atom: AtomRule(None, _NONSMOOTH) for atom in (cp.max, cp.min, cp.maximum, cp.minimum, cp.sum_largest,
                                                     cp.lambda_max, cp.sigma_max, cp.normNuc, cp.cummax, cp.dotsort)},
}


def atom_rule(expr: cp.Expression) -> AtomRule | None:
    """The rule of ``expr``'s class, or of its nearest base class that has one; None when no class has one."""
    return next((ATOM_RULES[cls] for cls in type(expr).__mro__ if cls in ATOM_RULES), None)


def _compile(expr: cp.Expression, offsets: dict[int, int], dim: int, agent: str | None = None) -> _Node:
    """The node of ``expr``: a constant (`_Data`), an affine map taken once (no parameters: J and b do not change),
    the atom's rule, or CVXPY (`_CvxpyFallback`)."""
    if not expr.variables():
        return _Constant(expr, agent)
    if expr.is_affine() and not expr.parameters():
        return _Affine(expr, offsets, dim)
    rule = atom_rule(expr)
    node = None if rule is None or rule.compile is None else rule.compile(
        expr, lambda i: _compile(expr.args[i], offsets, dim, agent), lambda i: _Data(expr.args[i], agent))
    return _CvxpyFallback(expr, offsets, dim) if node is None else node


class GradientEvaluator:
    """Value and (sub)gradient of one agent's objective as functions of its flat local vector z_p.

    Uses the agent's numpy oracle for the gradient when it has one, and the compiled
    expression tree otherwise. The value, and the violation of W_p's constraints, come from their forms
    compiled by `privcvx.diagnostics` (at their first use).
    """

    def __init__(self, agent: Agent, layout: AgentLayout) -> None:
        self.offsets = {v.id: o for v, o in zip(agent.variables, layout.offsets, strict=True)}
        self.objective = agent.objective
        self.constraints = agent.constraints
        self.layout = layout
        self.oracle = agent.gradient
        self.agent = layout.name
        self._root: _Node | None = None
        # One variable (the usual case): the oracle takes z reshaped, without split and concatenate per call, as
        # a C-ordered array (numpy's default: a matrix product X @ W with a column-major W takes a slower path
        # and sums in another order, 1e-19 apart on the federated logistic problem).
        self.shape = layout.shapes[0] if len(layout.shapes) == 1 else None
        # For a matrix (or higher) variable z reshaped in column-major order is the transpose of its reversed-shape
        # C-order view: copied in C order, it is the same array, and the same numbers come back in column-major
        # order as the transpose's C-order ravel (both without the order keyword's parsing, at every update).
        self.reversed = self.shape[::-1] if self.shape is not None and len(self.shape) >= 2 else None

    @property
    def root(self) -> _Node:
        """The compiled expression tree of f_p (compiled at the first call)."""
        if self._root is None:
            self._root = _compile(self.objective, self.offsets, self.layout.dim, self.agent)
        return self._root

    @cached_property
    def compiled_objective(self) -> CompiledExpression:
        """f_p compiled for its value (at the first call)."""
        return CompiledExpression(self.objective, self.offsets, self.agent)

    def value(self, z: np.ndarray) -> float:
        """f_p at ``z``: what ``objective.value`` gives with the variables set from ``z``."""
        value = self.compiled_objective.evaluate(z)
        if isinstance(value, float):  # a numpy float (a scalar atom's value)
            return float(value)
        return float(np.add.reduce(value, axis=None) if type(value) is np.ndarray else np.sum(value))

    @cached_property
    def compiled_violation(self) -> ConstraintViolation:
        """W_p's constraints compiled for their violation (at the first call)."""
        return ConstraintViolation(self.constraints, self.offsets, self.agent)

    def violation(self, z: np.ndarray) -> float:
        """The largest violation of W_p's constraints at ``z`` (0 when z is in W_p): what CVXPY's
        ``constraint.violation()`` gives, the largest over the constraints and their entries (0 without any: no
        call)."""
        return self.compiled_violation(z) if self.constraints else 0.0

    def gradient(self, z: np.ndarray) -> np.ndarray:
        """f'_p(z): the (sub)gradient used in the linearized update Eq. (9)."""
        if self.oracle is not None:
            if self.shape is not None:
                out: Any = self.oracle(z.reshape(self.reversed).T.copy() if self.reversed is not None
                                       else np.ascontiguousarray(z.reshape(self.shape, order="F")))
                if isinstance(out, np.ndarray):  # a new array: callers may update it in place
                    flat = np.asarray(out, dtype=float).T.ravel()  # column-major: a new array, or a view of out's
                    return flat if flat.base is None else flat.copy()  # (a vector's, a column-major matrix's): copied
            else:
                out = self.oracle(*self.layout.split(z))
            parts = [out] if isinstance(out, np.ndarray) or np.isscalar(out) else list(out)
            return self.layout.flatten(parts)
        root = self.root
        root.forward(z)
        grad = np.zeros(self.layout.dim)
        root.backward(np.ones(root.shape), grad)
        return grad
