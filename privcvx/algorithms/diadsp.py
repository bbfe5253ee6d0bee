"""DiaDSP, the baseline of the DPP^2 paper: gradient tracking with state and direction perturbation
(Ding, Zhu, He, Chen & Guan, "Differentially private distributed optimization via state and direction
perturbation in multiagent systems", IEEE TAC 67(2), 2022), uncompressed.

The DPP^2 paper gives no update rule for its baselines, and the original could not be consulted for this
implementation; this module implements the perturbed gradient-tracking form the name describes. Node i
keeps its state x_i and tracking direction y_i (x_i^0 = 0, y_i^0 = grad f_i(x_i^0)) and in iteration k:

    SEND  xt_i^k = x_i^k + xi_i^k,   yt_i^k = y_i^k + zeta_i^k,   xi ~ Lap(r^k u_x), zeta ~ Lap(r^k u_y)
    x_i^{k+1} = sum_j w_ij xt_j^k - alpha yt_i^k
    y_i^{k+1} = sum_j w_ij yt_j^k + grad f_i(x_i^{k+1}) - grad f_i(x_i^k)

with W the doubly stochastic weights of ``weights``.

**Its epsilon, derived here for this form** under the delta-adjacency of DPP^2's Definition 1 (so that the
comparison uses one notion): with the observations fixed, x_i^{k+1} is a function of released values only, so
Delta x = 0 and xi needs no change; Delta y^0 = Delta grad f(x^0) (<= delta) and Delta y^{k} = Delta grad f(x^k)
- Delta grad f(x^{k-1}) (<= 2 delta). Hence

    eps_i(K) = sqrt(d) delta / u_y * (1 + 2 sum_{k=1}^{K} r^{-k}),

and u_x does not enter it. (Ding et al. assume in addition equal gradient differences, under which only the
k = 0 term remains.) Every yt_i^k is recorded in the ledger with these sensitivities.

**The default step** (``alpha=None``). The DPP^2 paper's DiaDSP setting (alpha = 0.01) is tuned to its own
experiment and the original's conditions could not be consulted, so the step is derived here from the standard
linear-system argument for gradient tracking (Qu & Li, "Harnessing smoothness to accelerate distributed
optimization", IEEE TCNS 2018, Sec. III). With a = ||x - 1 xbar||, b = sqrt(n) ||xbar - x*||,
c = ||y - 1 ybar|| (noise-free), L = max_i L_i, mu a lower bound on the strong convexity of (1/n) sum_i f_i,
sigma = ||W - 11^T/n|| and tau = ||I - W||, every alpha <= 1/L gives [a, b, c]^{k+1} <= M(alpha) [a, b, c]^k with

    M(alpha) = [[sigma,            0,              alpha        ],
                [alpha L,          1 - alpha mu,   0            ],
                [L (tau + alpha L), alpha L^2,     sigma + alpha L]]

(consensus: W - 11^T/n contracts by sigma; optimality: a gradient step on the mu-strongly convex, L-smooth
average, off by at most L a / sqrt(n); tracking: ||x^{k+1} - x^k|| <= tau a + alpha (c + L a + L b)).
The iterates converge linearly when rho(M(alpha)) < 1; `default_step` takes the alpha in (0, 1/L] with the
smallest rho(M(alpha)), from public numbers only: the declared smoothness, ``strong_convexity`` and the
spectrum of W. A run without noise estimates what is not declared (`DiaDSP.prepare`); a private run without
them refuses and says what to set (the step would otherwise depend on the private data).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.gradient_agents import GradientAgent, GradientMethod, geometric_sum
from privcvx.errors import ParameterError, require_positive
from privcvx.gradients import GradientEvaluator
from privcvx.messages import Message
from privcvx.privacy.accounting import DEFAULT_LAPLACE_DELTA
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import Topology
from privcvx.tuning import hessian_lambda_max, smoothness_of

#: The candidate steps `default_step` compares, as fractions of 1/L (log-spaced).
_STEP_FRACTIONS = np.geomspace(1e-8, 1.0, 801)


def tracking_matrix(alpha: float, smoothness: float, strong_convexity: float, sigma: float,
                    tau: float) -> np.ndarray:
    """M(alpha) of the module docstring: one iteration's bound on (consensus, optimality, tracking) errors."""
    lip, mu = smoothness, strong_convexity
    return np.array([[sigma, 0.0, alpha],
                     [alpha * lip, 1.0 - alpha * mu, 0.0],
                     [lip * (tau + alpha * lip), alpha * lip ** 2, sigma + alpha * lip]])


def default_step(smoothness: float, strong_convexity: float, weights: np.ndarray) -> tuple[float, float]:
    """(alpha, rho(M(alpha))): the step in (0, 1/L] with the smallest spectral radius of `tracking_matrix`
    for the doubly stochastic ``weights`` W; rho < 1 (linear convergence) on every connected graph."""
    n = len(weights)
    eigenvalues = np.linalg.eigvalsh(weights - np.full((n, n), 1.0 / n))
    sigma = float(np.max(np.abs(eigenvalues)))
    tau = float(1.0 - np.linalg.eigvalsh(weights)[0])
    radii = [max(abs(np.linalg.eigvals(tracking_matrix(f / smoothness, smoothness, strong_convexity, sigma, tau))))
             for f in _STEP_FRACTIONS]
    best = int(np.argmin(radii))
    if not radii[best] < 1.0:
        raise ParameterError(f"no step in [1e-8, 1] / L contracts this graph's bound (sigma = {sigma:.6g}, "
                             f"L / mu = {smoothness / strong_convexity:.3g}): give DiaDSP a step alpha",
                             argument="alpha")
    return float(_STEP_FRACTIONS[best] / smoothness), float(radii[best])


class _NegatedAverage:
    """-(1/n) sum_i grad f_i: its largest Hessian eigenvalue is -mu, mu the smallest one of the average."""

    def __init__(self, evaluators: list[GradientEvaluator]) -> None:
        self.evaluators = evaluators

    def gradient(self, x: np.ndarray) -> np.ndarray:
        return -sum(evaluator.gradient(x) for evaluator in self.evaluators) / len(self.evaluators)


class DiaDSP(GradientMethod):
    """Gradient tracking with state and direction perturbation (the DiaDSP baseline of the DPP^2 paper).

    ``alpha``: the step; None (default): `default_step` from every agent's smoothness, the strong convexity
    and the spectrum of W (`prepare`); ``strong_convexity``: a public lower bound mu on the strong convexity of
    (1/n) sum_i f_i (a bound for every f_i will do), required by the default step under privacy;
    ``u_x``, ``u_y``, ``r``: the Laplace scales r^k u_x (state) and r^k u_y (direction),
    private when both are given; ``weights``: the rule of W; ``trace``, ``epsilon`` (a total: u_x and u_y scaled by
    one factor) and ``delta``: as [`DPP2`][privcvx.algorithms.dpp2.DPP2].
    """

    name = "diadsp"
    noise_settings = ("u_x", "u_y")

    def __init__(self, alpha: float | None = None, u_x: float | None = None, u_y: float | None = None,
                 r: float | None = None, weights: str = "metropolis", trace: bool = False,
                 strong_convexity: float | None = None, epsilon: float | None = None,
                 delta: float = DEFAULT_LAPLACE_DELTA) -> None:
        self.alpha, self.u_x, self.u_y, self.r, self.weights, self.trace = alpha, u_x, u_y, r, weights, trace
        self.strong_convexity, self.epsilon, self.delta = strong_convexity, epsilon, delta
        if alpha is not None:
            require_positive(alpha, argument="alpha")
        if strong_convexity is not None:
            require_positive(strong_convexity, argument="strong_convexity")
        self.check_common(weights, trace, epsilon, delta)

    def epsilon_bound(self, delta: float, dim: int, iterations: int) -> float:
        """eps_i(K) of this form (module docstring) for adjacency radius ``delta``, dimension d and K iterations."""
        return math.sqrt(dim) * delta / self.noise_scale("u_y") * (1.0 + 2.0 * geometric_sum(iterations, self.r))

    def release_epsilons(self, agent: Agent, dim: int, rounds: int) -> list[float]:
        """yt^0 .. yt^{T-1}, sqrt(d) delta (1 for k = 0, else 2) / (u_y r^k): the terms of `epsilon_bound`."""
        root = math.sqrt(dim) * self.adjacency_radius(agent) / self.u_y
        return [root * (1.0 if k == 0 else 2.0) * self.r ** -k for k in range(rounds)]

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        super().check(problem, topology)
        if self.alpha is not None or not self.private:
            return
        if self.strong_convexity is None:
            raise ParameterError("privacy is on and the default step (Qu & Li's gradient-tracking condition) needs "
                                 "a public lower bound mu on the strong convexity of (1/n) sum_i f_i: give "
                                 "DiaDSP(strong_convexity=mu), or a step alpha", argument="strong_convexity")
        missing = [agent.name for agent in problem.agents if not agent.smoothness]
        if missing:
            raise ParameterError("privacy is on and the default step needs every agent's public smoothness: "
                                 "declare pc.Agent(smoothness=L_i), or give DiaDSP a step alpha", agent=missing[0],
                                 argument="smoothness")

    def resolve(self, problem: DistributedProblem, topology: Topology) -> DiaDSP:
        """Check the problem and fix alpha by `default_step` when it was not given: from the declared L_i and
        ``strong_convexity``; in a run without noise, what is not declared is estimated at x = 0 (exact for
        quadratics): L_i by `smoothness_of`, mu as the smallest Hessian eigenvalue of (1/n) sum_i f_i."""
        self.check(problem, topology)
        if self.alpha is not None:
            return self
        evaluators = [GradientEvaluator(agent, layout) for agent, layout in zip(problem.agents, problem.layouts,
                                                                               strict=True)]
        origin = np.zeros(problem.layouts[0].dim)
        smoothness = max(agent.smoothness if agent.smoothness else smoothness_of(agent, evaluator, origin)
                         for agent, evaluator in zip(problem.agents, evaluators, strict=True))
        mu = self.strong_convexity
        if mu is None:
            mu = -hessian_lambda_max(_NegatedAverage(evaluators), origin)
        if not (math.isfinite(smoothness) and smoothness > 0 and mu > 0):
            raise ParameterError(f"the default step needs L > 0 and mu > 0 (here L = {smoothness:.3g}, "
                                 f"mu = {mu:.3g}: a nonsmooth or not strongly convex objective); give DiaDSP a step "
                                 "alpha", argument="alpha")
        if mu > smoothness:
            raise ParameterError(f"a strong convexity {mu!r} above the largest smoothness {smoothness!r} is "
                                 "impossible", argument="strong_convexity")
        alpha, _ = default_step(smoothness, mu, topology.weights(1, self.weights)[1])
        return self.clone(alpha=alpha)

    def agent_program(self, agent: Agent, context: AgentContext) -> DiaDSPAgent:
        return DiaDSPAgent(agent, context, self)


class DiaDSPAgent(GradientAgent):
    """Node i of DiaDSP: x_i, y_i, the last releases, and the gradient at x_i."""

    def __init__(self, agent: Agent, context: AgentContext, settings: DiaDSP) -> None:
        super().__init__(agent, context, settings,
                         weights=context.topology.weight_row(context.name, 1, settings.weights))
        self.g = self.traced_gradient(self.x)
        self.y = self.g.copy()
        self.xt, self.yt = self.x.copy(), self.y.copy()

    def _send(self) -> list[Message]:
        s = self.settings
        decay = 0.0 if s.r is None else s.r ** self.k
        root = math.sqrt(self.dim) * self.delta
        self.xt = self.release(self.x, 0.0 if s.u_x is None else s.u_x * decay, 0.0, "x")
        self.yt = self.release(self.y, 0.0 if s.u_y is None else s.u_y * decay, root if self.k == 0 else 2 * root,
                               "y")
        return [self.context.message(self.k + 1, {"x": self.xt, "y": self.yt})]

    def start(self) -> list[Message]:
        return self._send()

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        mixed_x = self.mix(inbox, "x", self.xt, t, 0)
        mixed_y = self.mix(inbox, "y", self.yt, t, 0)
        self.x = mixed_x - self.settings.alpha * self.yt
        gradient = self.traced_gradient(self.x)
        self.y = mixed_y + gradient - self.g
        self.g = gradient
        self.k = t
        return self._send() if t < self.context.rounds else []

    def output(self, released_only: bool = False) -> np.ndarray:
        return self.xt.copy() if released_only else self.x.copy()

    def state_dict(self) -> dict[str, Any]:
        return {**self.base_state(), "x": self.x, "y": self.y, "g": self.g, "xt": self.xt, "yt": self.yt}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_base_state(state)
        self.x, self.y, self.g = state["x"], state["y"], state["g"]
        self.xt, self.yt = state["xt"], state["yt"]
