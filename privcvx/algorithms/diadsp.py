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
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.gradient_agents import GradientAgent, GradientMethod, GradientMonitor, check_rule, geometric_sum
from privcvx.errors import PrivacyError, check_scalar, require_positive
from privcvx.messages import Message
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import Topology


class DiaDSP(GradientMethod):
    """Gradient tracking with state and direction perturbation (the DiaDSP baseline of the DPP^2 paper).

    ``alpha``: the step; ``u_x``, ``u_y``, ``r``: the Laplace scales r^k u_x (state) and r^k u_y (direction),
    private when both are given; ``weights``: the rule of W; ``trace``: as [`DPP2`][privcvx.algorithms.dpp2.DPP2].
    """

    name = "diadsp"
    noise_settings = ("u_x", "u_y")

    def __init__(self, alpha: float = 0.1, u_x: float | None = None, u_y: float | None = None,
                 r: float | None = None, weights: str = "metropolis", trace: bool = False) -> None:
        self.alpha, self.u_x, self.u_y, self.r, self.weights, self.trace = alpha, u_x, u_y, r, weights, trace
        require_positive(alpha, argument="alpha")
        self.check_noise()
        check_rule(weights)
        check_scalar(trace, argument="trace", kind=bool)

    def epsilon_bound(self, delta: float, dim: int, iterations: int) -> float:
        """eps_i(K) of this form (module docstring) for adjacency radius ``delta``, dimension d and K iterations."""
        if not self.private:
            raise PrivacyError("the algorithm adds no noise", argument="u_y")
        return math.sqrt(dim) * delta / self.u_y * (1.0 + 2.0 * geometric_sum(iterations, self.r))

    def agent_program(self, agent: Agent, context: AgentContext) -> DiaDSPAgent:
        return DiaDSPAgent(agent, context, self)

    def monitor(self, problem: DistributedProblem, topology: Topology) -> GradientMonitor:
        return GradientMonitor(problem)


class DiaDSPAgent(GradientAgent):
    """Node i of DiaDSP: x_i, y_i, the last releases, and the gradient at x_i."""

    def __init__(self, agent: Agent, context: AgentContext, settings: DiaDSP) -> None:
        super().__init__(agent, context, weights=context.topology.weight_row(context.name, 1, settings.weights),
                         trace=settings.trace,
                         beyond_float=settings.beyond_float)
        self.settings = settings
        self.delta = settings.adjacency_radius(agent) if settings.private else 0.0
        self.x = np.zeros(self.dim)
        self.g = self.traced_gradient(self.x)
        self.y = self.g.copy()
        self.k = 0
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

    def state_x(self) -> np.ndarray:
        return self.x

    def output(self, released_only: bool = False) -> np.ndarray:
        return self.xt.copy() if released_only else self.x.copy()

    def state_dict(self) -> dict[str, Any]:
        return {**self.base_state(), "x": self.x, "y": self.y, "g": self.g, "k": self.k, "xt": self.xt,
                "yt": self.yt}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_base_state(state)
        self.x, self.y, self.g, self.k = state["x"], state["y"], state["g"], state["k"]
        self.xt, self.yt = state["xt"], state["yt"]
