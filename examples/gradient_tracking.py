"""A new method in one file: decentralized gradient tracking (DIGing), on privcvx's algorithm protocol.

    .venv/bin/python examples/gradient_tracking.py

DIGing (Nedic, Olshevsky & Shi, "Achieving geometric convergence for distributed optimization over
time-varying graphs", SIAM J. Optim. 2017) keeps, at agent i, an estimate x_i and a tracker y_i of the
average gradient:

    x_i(t+1) = sum_j a_ij x_j(t) - alpha y_i(t)
    y_i(t+1) = sum_j a_ij y_j(t) + grad f_i(x_i(t+1)) - grad f_i(x_i(t))

with y_i(0) = grad f_i(x_i(0)). Unlike the DP distributed gradient of paper 001 it reaches the exact
optimum with a constant step, but only without constraints, so it refuses agents that have any. It adds
no noise: it is the worked example of docs/algorithms.md, not a private method. Running this file
solves a small problem, compares it with the centralized optimum and runs the conformance checks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import privcvx as pc
from privcvx.algorithms import (
    AgentContext,
    AgentProgram,
    Algorithm,
    GradientEvaluator,
    LatestReleases,
    Message,
    check_algorithm,
    consensus_problem,
)


class GradientTracking(Algorithm):
    """DIGing with a constant step ``alpha`` (default 1 / (4 max_i L_i), from the declared smoothness)."""

    name = "gradient_tracking"
    columns = ("round", "objective", "disagreement", "epsilon", "time_s")
    diagnostic_columns = {"objective": sum}
    objective_columns = ("objective",)

    def __init__(self, alpha: float | None = None, weights: str = "metropolis") -> None:
        self.alpha = alpha
        self.weights = weights

    def default_topology(self) -> pc.Topology:
        return pc.Topology.complete()

    def check(self, problem: pc.DistributedProblem, topology: pc.Topology) -> None:
        self.require_decentralized(topology)
        self.require_consensus(problem)
        for agent in problem.agents:
            if agent.constraints:
                raise self.unsupported("constraints", "gradient tracking is unconstrained", agent=agent.name,
                                       argument="constraints")
            if agent.smoothness is None and self.alpha is None:
                raise self.unsupported("undeclared smoothness", "declare pc.Agent(smoothness=...) or give alpha",
                                       agent=agent.name, argument="smoothness")

    def prepare(self, problem: pc.DistributedProblem, topology: pc.Topology, rounds: int) -> GradientTracking:
        self.check(problem, topology)
        if self.alpha is not None:
            return self
        return self.clone(alpha=1.0 / (4.0 * max(agent.smoothness for agent in problem.agents)))

    def agent_program(self, agent: pc.Agent, context: AgentContext) -> TrackingAgent:
        return TrackingAgent(agent, context, self)

    def monitor(self, problem: pc.DistributedProblem, topology: pc.Topology) -> TrackingMonitor:
        return TrackingMonitor(problem)


class TrackingAgent(AgentProgram):
    """Agent i: its estimate x_i, its gradient tracker y_i, and the gradient at x_i."""

    def __init__(self, agent: pc.Agent, context: AgentContext, settings: GradientTracking) -> None:
        self.context, self.settings = context, settings
        self.evaluator = GradientEvaluator(agent, context.layout)
        self.x = np.zeros(context.layout.dim)
        self.gradient = self.evaluator.gradient(self.x)
        self.y = self.gradient.copy()

    def start(self) -> list[Message]:
        return [self.context.message(1, {"x": self.x, "y": self.y})]

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        received = {m.sender: m for m in inbox} | {self.context.name: None}
        row = self.context.topology.weight_row(self.context.name, t, self.settings.weights)
        mixed_x = sum(a * (self.x if received[j] is None else received[j]["x"]) for j, a in sorted(row.items()))
        mixed_y = sum(a * (self.y if received[j] is None else received[j]["y"]) for j, a in sorted(row.items()))
        self.x = mixed_x - self.settings.alpha * self.y
        gradient = self.evaluator.gradient(self.x)
        self.y, self.gradient = mixed_y + gradient - self.gradient, gradient
        return [self.context.message(t + 1, {"x": self.x, "y": self.y})]

    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        return {"objective": self.evaluator.value(w_p)}

    def output(self, released_only: bool = False) -> np.ndarray:
        return self.x.copy()  # the last message's x: sent either way

    def report(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y, "gradient": self.gradient}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x, self.y, self.gradient = state["x"], state["y"], state["gradient"]


class TrackingMonitor(LatestReleases):
    """Public metrics from the messages: the largest distance of an estimate from the average."""

    def __init__(self, problem: pc.DistributedProblem) -> None:
        super().__init__(problem, "x")

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        stacked = self.update(messages)
        return {"disagreement": float(np.max(np.linalg.norm(stacked - self.w, axis=1)))}


def main() -> None:
    problem = consensus_problem(agents=6, bound=None)
    reference = problem.solve_centralized()
    result = problem.solve(GradientTracking(), pc.Topology.ring(), rounds=200)
    print(result.history[["round", "objective", "disagreement"]].iloc[[0, 49, 99, 199]].to_string(index=False))
    print(f"centralized optimum {reference.value:.10f}; |w - w*| = {np.linalg.norm(result.w - reference.w):.2e}")
    print(check_algorithm(GradientTracking(), rounds=300))


if __name__ == "__main__":
    main()
