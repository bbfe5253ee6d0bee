"""PPDC, the other baseline of the DPP^2 paper: a differentially private primal-dual method for nonconvex
problems (Xie, Yi, Wang, Cao & Ren, "Differentially private and communication-efficient distributed nonconvex
optimization algorithms", Automatica 177, 2025), run without compression as in the DPP^2 paper.

The DPP^2 paper gives no update rule, and the original could not be consulted for this implementation; this
module implements the perturbed form of the distributed primal-dual method PPDC builds on (gamma: consensus
gain, omega: dual gain, eta: step), with P = I - W as the Laplacian. Node i keeps x_i and its dual v_i
(x_i^0 = v_i^0 = 0) and in iteration k:

    SEND  xt_i^k = x_i^k + xi_i^k,    xi_i^k ~ Lap(r^k u_x)                   (state perturbation)
    x_i^{k+1} = xt_i^k - eta (gamma sum_j p_ij xt_j^k + omega v_i^k + grad f_i(xt_i^k))
    v_i^{k+1} = v_i^k + eta omega sum_j p_ij xt_j^k + zeta_i^k,   zeta_i^k ~ Lap(r^k u_v)   (dual perturbation)

**Its epsilon, derived here for this form** under DPP^2's delta-adjacency: with the observations fixed, v_i
is a function of released values and the node's own noise, so Delta x_i^{k+1} = -eta Delta grad f_i(xt_i^k)
(<= eta delta) and Delta x^0 = 0; xi absorbs it:

    eps_i(K) = sqrt(d) eta delta / u_x * sum_{k=1}^{K} r^{-k}.

The dual noise stays inside the node and does not enter this bound. Every xt_i^k (k >= 1) is recorded in the
ledger with this sensitivity; a run of T rounds releases xt^0..xt^T, so its ledger holds eps_i(T).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.gradient_agents import (
    GradientAgent,
    GradientMethod,
    geometric_sum,
    laplacian_row,
)
from privcvx.errors import require_positive
from privcvx.messages import Message
from privcvx.privacy.accounting import DEFAULT_LAPLACE_DELTA
from privcvx.problem import Agent


class PPDC(GradientMethod):
    """The perturbed distributed primal-dual method (the PPDC baseline of the DPP^2 paper, uncompressed).

    ``gamma``, ``omega``, ``eta``: consensus gain, dual gain and step (the paper's experiment: 65, 5, 0.01);
    ``u_x``, ``u_v``, ``r``: the Laplace scales r^k u_x (released state) and r^k u_v (dual), private when both
    are given; ``weights``: the rule of W in P = I - W; ``trace``, ``epsilon`` (a total: u_x and u_v scaled by one
    factor) and ``delta``: as [`DPP2`][privcvx.algorithms.dpp2.DPP2].
    """

    name = "ppdc"
    noise_settings = ("u_x", "u_v")

    def __init__(self, gamma: float = 10.0, omega: float = 5.0, eta: float = 0.05, u_x: float | None = None,
                 u_v: float | None = None, r: float | None = None, weights: str = "metropolis",
                 trace: bool = False, epsilon: float | None = None, delta: float = DEFAULT_LAPLACE_DELTA) -> None:
        self.gamma, self.omega, self.eta, self.u_x, self.u_v, self.r = gamma, omega, eta, u_x, u_v, r
        self.weights, self.trace, self.epsilon, self.delta = weights, trace, epsilon, delta
        for argument in ("gamma", "omega", "eta"):
            require_positive(getattr(self, argument), argument=argument)
        self.check_common(weights, trace, epsilon, delta)

    def epsilon_bound(self, delta: float, dim: int, iterations: int) -> float:
        """eps_i(K) of this form (module docstring) for adjacency radius ``delta``, dimension d and K iterations."""
        return math.sqrt(dim) * self.eta * delta / self.noise_scale("u_x") * geometric_sum(iterations, self.r)

    def release_epsilons(self, agent: Agent, dim: int, rounds: int) -> list[float]:
        """xt^1 .. xt^T, sqrt(d) eta delta / (u_x r^k) (xt^0 perturbs the public x^0): the terms of `epsilon_bound`."""
        unit = math.sqrt(dim) * self.eta * self.adjacency_radius(agent) / self.u_x
        return [unit * self.r ** -k for k in range(1, rounds + 1)]

    def agent_program(self, agent: Agent, context: AgentContext) -> PPDCAgent:
        return PPDCAgent(agent, context, self)


class PPDCAgent(GradientAgent):
    """Node i of PPDC: x_i, v_i and its last release."""

    def __init__(self, agent: Agent, context: AgentContext, settings: PPDC) -> None:
        super().__init__(agent, context, settings, weights=laplacian_row(context, settings.weights))
        self.v = np.zeros(self.dim)
        self.xt = self.x.copy()

    def _decay(self) -> float:
        return 0.0 if self.settings.r is None else self.settings.r ** self.k

    def _send(self) -> list[Message]:
        s = self.settings
        sensitivity = 0.0 if self.k == 0 else math.sqrt(self.dim) * s.eta * self.delta
        self.xt = self.release(self.x, 0.0 if s.u_x is None else s.u_x * self._decay(), sensitivity, "x")
        return [self.context.message(self.k + 1, {"x": self.xt})]

    def start(self) -> list[Message]:
        return self._send()

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        s = self.settings
        mixed = self.mix(inbox, "x", self.xt, t, 0)
        self.record(self.x)
        gradient = self.gradient(self.xt)
        dual_noise = self.release(np.zeros(self.dim), 0.0 if s.u_v is None else s.u_v * self._decay(), 0.0)
        self.x = self.xt - s.eta * (s.gamma * mixed + s.omega * self.v + gradient)
        self.v = self.v + s.eta * s.omega * mixed + dual_noise
        self.k = t
        return self._send()  # xt^t: after T rounds the releases k = 1..T are accounted

    def output(self, released_only: bool = False) -> np.ndarray:
        return self.xt.copy() if released_only else self.x.copy()

    def state_dict(self) -> dict[str, Any]:
        return {**self.base_state(), "x": self.x, "v": self.v, "xt": self.xt}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_base_state(state)
        self.x, self.v, self.xt = state["x"], state["v"], state["xt"]
