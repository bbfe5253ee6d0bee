"""Fast value and (sub)gradient evaluation of an agent's objective f_p.

The linearized update Eq. (9) needs f'_p(z_p^{t,e}) at every local update. CVXPY's
``expr.grad`` re-canonicalizes the expression on every call (about 180x slower than
numpy), so privcvx compiles the expression tree once:

* every affine sub-expression becomes a constant sparse Jacobian ``J`` and offset ``b``
  (taken once from CVXPY), so it evaluates as ``J @ z + b``;
* the non-affine atoms above them are evaluated in numpy with the chain rule
  (reverse mode: each node passes its upstream gradient to its children).

Parameters (an agent's private data) are read when the evaluator compiles the tree, at
its first gradient; the gradient does not follow a later change of their values. Atoms without a numpy rule
fall back to CVXPY for that sub-expression only, which is correct but slow.

f_p's value (the objective diagnostic, and IPP-ADMM's query) is not taken from this tree but from
`privcvx.diagnostics.CompiledExpression`, compiled at the first value asked for: the numbers of CVXPY's
``.value``, with parameters read at every evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
from cvxpy.atoms.affine.add_expr import AddExpression
from cvxpy.atoms.affine.binary_operators import DivExpression, MulExpression, multiply
from cvxpy.atoms.affine.sum import Sum
from cvxpy.atoms.affine.unary_operators import NegExpression
from scipy.special import expit, logsumexp, softmax

from privcvx.diagnostics import CompiledExpression, ConstraintViolation
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
        grad += self.jt @ np.broadcast_to(upstream, self.shape).reshape(-1, order="F")


class _Constant(_Node):
    def __init__(self, expr: cp.Expression) -> None:
        super().__init__(expr.shape)
        self.value = np.asarray(expr.value, dtype=float)

    def forward(self, z: np.ndarray) -> np.ndarray:
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
            up = self.sign * np.broadcast_to(upstream, self.shape)
            if child.shape != self.shape:  # a scalar broadcast to the sum's shape
                up = np.sum(up).reshape(child.shape)
            child.backward(up, grad)


class _Scaled(_Node):
    """``constant * child`` (elementwise or scalar) or ``child / constant``."""

    def __init__(self, shape: tuple[int, ...], child: _Node, factor: np.ndarray) -> None:
        super().__init__(shape)
        self.child, self.factor = child, factor

    def forward(self, z: np.ndarray) -> np.ndarray:
        self.value = self.factor * self.child.forward(z)
        return self.value

    def backward(self, upstream: np.ndarray, grad: np.ndarray) -> None:
        up = self.factor * upstream
        if self.child.shape != np.shape(up):
            up = np.sum(up).reshape(self.child.shape)
        self.child.backward(up, grad)


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
        up = np.broadcast_to(upstream, self.shape).reshape(-1, order="F")
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


def _compile(expr: cp.Expression, offsets: dict[int, int], dim: int) -> _Node:
    if not expr.variables():
        return _Constant(expr)
    if expr.is_affine():
        return _Affine(expr, offsets, dim)
    name = type(expr).__name__
    kids = expr.args
    shape = expr.shape

    def child(i: int = 0) -> _Node:
        return _compile(kids[i], offsets, dim)

    if isinstance(expr, AddExpression):
        return _Sum(shape, [_compile(a, offsets, dim) for a in kids])
    if isinstance(expr, NegExpression):
        return _Sum(shape, [child()], sign=-1.0)
    if isinstance(expr, DivExpression) and not kids[1].variables():
        return _Scaled(shape, child(0), 1.0 / np.asarray(kids[1].value, dtype=float))
    if isinstance(expr, (multiply, MulExpression)) and len(kids) == 2 and (
            kids[0].is_scalar() or isinstance(expr, multiply)):
        const, var_side = (0, 1) if not kids[0].variables() else (1, 0)
        if not kids[const].variables():
            return _Scaled(shape, child(var_side), np.asarray(kids[const].value, dtype=float))
    if isinstance(expr, Sum):
        axis, keepdims = expr.axis, expr.keepdims
        return _Reduction(shape, child(), _axis_reduce(np.sum, axis, keepdims),
                          lambda x, up: _expand(up, x, axis))
    if name == "quad_over_lin" and not kids[1].variables():
        y = float(kids[1].value)
        return _Reduction(shape, child(), lambda x: np.sum(x ** 2) / y, lambda x, up: 2.0 * x / y * up)
    if name in ("power", "PowerApprox", "Power"):
        p = float(expr.p.value)
        return _Elementwise(shape, child(), lambda x: x ** p, lambda x: p * x ** (p - 1))
    if name == "QuadForm" and not kids[1].variables():
        mat = np.asarray(kids[1].value, dtype=float)
        return _Reduction(shape, child(), lambda x: x @ mat @ x, lambda x, up: (mat + mat.T) @ x * up)
    if name == "log_sum_exp":
        axis, keepdims = expr.axis, expr.keepdims
        return _Reduction(shape, child(), _axis_reduce(logsumexp, axis, keepdims),
                          lambda x, up: softmax(x, axis=axis) * _expand(up, x, axis))
    if name in ("PnormApprox", "Pnorm", "pnorm") and expr.axis is None and float(expr.p) == 2.0:
        return _Reduction(shape, child(), np.linalg.norm,
                          lambda x, up: (x / max(np.linalg.norm(x), 1e-300)) * up)
    if name == "norm1" and expr.axis is None:
        return _Reduction(shape, child(), lambda x: np.abs(x).sum(), lambda x, up: np.sign(x) * up)
    if name == "norm_inf" and expr.axis is None:
        def sub_inf(x: np.ndarray, up: np.ndarray) -> np.ndarray:
            g = np.zeros_like(x)
            i = np.unravel_index(np.argmax(np.abs(x)), x.shape)
            g[i] = np.sign(x[i])
            return g * up
        return _Reduction(shape, child(), lambda x: np.abs(x).max(), sub_inf)
    elementwise: dict[str, tuple[Callable, Callable]] = {
        "abs": (np.abs, np.sign),
        "exp": (np.exp, np.exp),
        "logistic": (lambda x: np.logaddexp(0.0, x), expit),
        "log": (np.log, lambda x: 1.0 / x),
        "inv_pos": (lambda x: 1.0 / x, lambda x: -1.0 / x ** 2),
        "entr": (lambda x: -x * np.log(x), lambda x: -np.log(x) - 1.0),
        "pos": (lambda x: np.maximum(x, 0.0), lambda x: (x > 0).astype(float)),
        "neg": (lambda x: np.maximum(-x, 0.0), lambda x: -(x < 0).astype(float)),
    }
    if name in elementwise:
        f, df = elementwise[name]
        return _Elementwise(shape, child(), f, df)
    if name == "huber":
        m = float(expr.M.value)
        return _Elementwise(shape, child(),
                            lambda x: np.where(np.abs(x) <= m, x ** 2, 2 * m * np.abs(x) - m ** 2),
                            lambda x: np.where(np.abs(x) <= m, 2 * x, 2 * m * np.sign(x)))
    return _CvxpyFallback(expr, offsets, dim)


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
        self._objective: CompiledExpression | None = None
        self._violation: ConstraintViolation | None = None
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
            self._root = _compile(self.objective, self.offsets, self.layout.dim)
        return self._root

    @property
    def compiled_objective(self) -> CompiledExpression:
        """f_p compiled for its value (at the first call)."""
        if self._objective is None:
            self._objective = CompiledExpression(self.objective, self.offsets, self.agent)
        return self._objective

    def value(self, z: np.ndarray) -> float:
        """f_p at ``z``: what ``objective.value`` gives with the variables set from ``z``."""
        value = self.compiled_objective(z)
        if isinstance(value, float):  # a numpy float (a scalar atom's value)
            return float(value)
        return float(np.add.reduce(value, axis=None) if type(value) is np.ndarray else np.sum(value))

    @property
    def compiled_violation(self) -> ConstraintViolation:
        """W_p's constraints compiled for their violation (at the first call)."""
        if self._violation is None:
            self._violation = ConstraintViolation(self.constraints, self.offsets, self.agent)
        return self._violation

    def violation(self, z: np.ndarray) -> float:
        """The largest violation of W_p's constraints at ``z`` (0 when z is in W_p): what CVXPY's
        ``constraint.violation()`` gives, the largest over the constraints and their entries."""
        return self.compiled_violation(z)

    def gradient(self, z: np.ndarray) -> np.ndarray:
        """f'_p(z): the (sub)gradient used in the linearized update Eq. (9)."""
        if self.oracle is not None:
            if self.shape is not None:
                out: Any = self.oracle(z.reshape(self.reversed).T.copy() if self.reversed is not None
                                       else np.ascontiguousarray(z.reshape(self.shape, order="F")))
                if isinstance(out, np.ndarray):  # a new array: callers may update it in place
                    flat = np.asarray(out, dtype=float).T.ravel()  # column-major
                    return flat.copy() if np.may_share_memory(flat, out) else flat
            else:
                out = self.oracle(*self.layout.split(z))
            parts = [out] if isinstance(out, np.ndarray) or np.isscalar(out) else list(out)
            return self.layout.flatten(parts)
        root = self.root
        root.forward(z)
        grad = np.zeros(self.layout.dim)
        root.backward(np.ones(root.shape), grad)
        return grad
