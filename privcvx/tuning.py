"""Sensible defaults: local smoothness L_p, the step rule ``eta="auto"``, and its documentation.

Linearized ADMM converges only when eta^t is about 1/L_p or smaller (Eq. (9) majorizes
f_p by its linearization plus ||z - z^{t,e}||^2 / (2 eta), which needs 1/eta >= L_p).
``eta="auto"`` estimates L_p once per agent at set-up and then uses the paper's rules:

* smooth f_p, no privacy: eta_p = 1/L_p, constant;
* smooth f_p under privacy: Eq. (25a), eta_p^t = 1/(L_p + sqrt(t)/epsilon-bar), epsilon-bar the per-update
  epsilon (`update_epsilon`: for a ``pc.Budget``, derived from its public noise multiplier);
* nonsmooth f_p (abs, norms, max, ...): Eq. (26a), eta^t = 1/sqrt(t).

L_p comes from, in order: the declaration ``pc.Agent(smoothness=...)`` (made by builders,
e.g. the logistic-loss bound of `problems` or the closed form of `powerflow`);
otherwise the largest eigenvalue of the Hessian, by Lanczos (``scipy.sparse.linalg.eigsh``)
on Hessian-vector products taken as central differences of the gradient. For a quadratic
f_p the gradient is affine, so these differences are exact and the estimate is the closed
form ``lambda_max(Hessian)``; for other smooth f_p it is the curvature at z_p^1 and a few
nearby points, the largest one found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cvxpy as cp
import dp_accounting
import numpy as np
from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, LinearOperator, eigsh

from privcvx.errors import ConvergenceWarning, SolverError
from privcvx.gradients import GradientEvaluator, atom_rule
from privcvx.privacy.mechanisms import Mechanism
from privcvx.problem import Agent, DistributedProblem
from privcvx.solver_warnings import warn_at_caller


def is_smooth(expr: cp.Expression) -> bool:
    """Whether no atom of ``expr`` is nonsmooth (its (sub)gradient discontinuous: the ``smooth`` flag of its rule in
    `privcvx.gradients.ATOM_RULES`); only affine atoms are above them."""
    rule = atom_rule(expr)
    if rule is not None and not rule.smooth and expr.variables():
        return False
    return all(is_smooth(arg) for arg in expr.args)


def warn_nonsmooth(method: str, problem_agents: list, consequence: str, remedy: str) -> None:
    """A `ConvergenceWarning` when a method whose defaults need a gradient meets agents whose objective is not smooth
    (`is_smooth`: hinge, abs, norm1, ...): it names the method, the agents, what its default does and what to set."""
    names = [agent.name for agent in problem_agents  # a factory's AgentSpec: its objective lives on its host
             if isinstance(agent, Agent) and not is_smooth(agent.objective)]
    if names:
        warn_at_caller(f"{method}'s defaults need smooth objectives, and the agents {names} are not smooth: "
                       f"{consequence}; the run may stall short of the optimum. {remedy}", ConvergenceWarning)


def hessian_lambda_max(evaluator: GradientEvaluator, z: np.ndarray, step: float = 1e-4) -> float:
    """Largest Hessian eigenvalue of f_p at z, by Lanczos on central-difference Hessian-vector products."""
    n = z.size
    scale = step * max(1.0, float(np.linalg.norm(z)) / math.sqrt(n))

    def hvp(v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=float).reshape(-1)
        return (evaluator.gradient(z + scale * v) - evaluator.gradient(z - scale * v)) / (2 * scale)

    if n == 1:
        return float(hvp(np.ones(1))[0])
    operator = LinearOperator((n, n), matvec=hvp, dtype=float)
    try:
        value = eigsh(operator, k=1, which="LA", tol=1e-6, maxiter=50 * n,
                      v0=np.random.default_rng(0).normal(size=n), return_eigenvectors=False)
    except ArpackNoConvergence as exc:
        value = exc.eigenvalues if len(exc.eigenvalues) else [np.nan]
    return float(np.max(value))


def estimate_smoothness(evaluator: GradientEvaluator, z: np.ndarray, probes: int = 3) -> float:
    """L_p: the largest Hessian eigenvalue over z and ``probes - 1`` nearby points (exact for quadratics)."""
    rng = np.random.default_rng(0)
    points = [z] + [z + 0.1 * rng.normal(size=z.size) for _ in range(probes - 1)]
    return max(hessian_lambda_max(evaluator, point) for point in points)


def inverse_largest_smoothness(problem: DistributedProblem) -> float:
    """1 / max_p L_p over the agents' declared smoothness, estimated where none is declared (`smoothness_of` at z = 0;
    never under privacy, whose methods refuse an undeclared L_p); 1 when no L_p is finite and positive. The default
    initial step c of the gradient methods (paper 001's, Q-DPSGD's)."""
    smoothness = [agent.smoothness if agent.smoothness is not None else
                  smoothness_of(agent, GradientEvaluator(agent, layout), np.zeros(layout.dim))
                  for agent, layout in zip(problem.agents, problem.layouts, strict=True)]
    finite = [v for v in smoothness if math.isfinite(v) and v > 0]
    return 1.0 / max(finite) if finite else 1.0


def smoothness_of(agent: Agent, evaluator: GradientEvaluator, z: np.ndarray) -> float:
    """L_p of an agent without a declared one: nan for a nonsmooth f_p (Eq. (26a) needs none), 0 for an affine
    or constant f_p (no curvature: the step is bounded by the proximal term alone), else the estimate.

    A failing estimate (ARPACK, a gradient that is not finite) raises a ``SolverError`` naming the agent and
    saying to declare ``pc.Agent(smoothness=...)``.
    """
    if not is_smooth(agent.objective):
        return math.nan
    if agent.objective.is_affine():
        return 0.0
    try:
        value = estimate_smoothness(evaluator, z)
    except (ArpackError, ValueError, FloatingPointError) as exc:
        raise SolverError(f"the estimate of L_p failed ({exc}); declare pc.Agent(smoothness=L)", agent=agent.name,
                          argument="smoothness") from exc
    if not math.isfinite(value):
        raise SolverError(f"the estimate of L_p is {value} (is the gradient finite at z_p^1?); declare "
                          "pc.Agent(smoothness=L)", agent=agent.name, argument="smoothness")
    return max(value, 0.0)


def update_epsilon(mechanism: Mechanism | None) -> float:
    """epsilon-bar of Eq. (25a): the per-update epsilon of ``mechanism`` (inf without privacy).

    A Laplace mechanism states it (a ``pc.Budget``'s: 1/noise multiplier). A Gaussian calibrated by a
    ``pc.Budget`` has no per-update epsilon of its own (NaN): epsilon-bar is then the exact per-update epsilon of
    a Gaussian of that noise multiplier at the budget's delta (Balle & Wang 2018's analytic Gaussian,
    ``dp_accounting.get_epsilon_gaussian``), a function of public numbers only.
    """
    if mechanism is None:
        return math.inf
    epsilon = mechanism.epsilon
    if math.isnan(epsilon) and mechanism.draws == "gaussian" and mechanism.noise_multiplier > 0:
        epsilon = dp_accounting.get_epsilon_gaussian(mechanism.noise_multiplier, mechanism.delta)
    return epsilon if math.isfinite(epsilon) else math.inf


@dataclass(frozen=True)
class LipschitzStep:
    """eta^t = 1 / (L + sqrt(t) / epsilon), L the Lipschitz constant of grad f_p (its smoothness): Eq. (25a); with
    ``epsilon=inf`` it is the constant 1/L."""

    smoothness: float
    epsilon: float = math.inf

    def __call__(self, t: int) -> float:
        return 1.0 / (self.smoothness + math.sqrt(t) / self.epsilon)
