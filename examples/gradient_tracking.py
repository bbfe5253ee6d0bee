"""A new method in one file: decentralized gradient tracking (DIGing), private, on privcvx's algorithm protocol.

    .venv/bin/python examples/gradient_tracking.py

DIGing (Nedic, Olshevsky & Shi, "Achieving geometric convergence for distributed optimization over
time-varying graphs", SIAM J. Optim. 2017, Eq. (3)) keeps, at agent i, an estimate x_i and a tracker y_i of the
average gradient. Made private here with Gaussian noise on the tracker's messages: agent i releases
yt_i(t) = y_i(t) + e_i(t), e_i(t) ~ N(0, sigma^2 I), sends x_i(t) in the clear, and keeps its own noise out of its
tracker (as DPP^2 cancels its own noise, line 8 of its Algorithm 1), so that sum_i y_i = sum_i g_i stays exact:

    x_i(t+1) = sum_j a_ij x_j(t) - alpha yt_i(t)
    y_i(t+1) = sum_j a_ij yt_j(t) - e_i(t) + g_i(x_i(t+1)) - g_i(x_i(t)),    y_i(0) = g_i(x_i(0)),  x_i(0) = 0,

with g_i = clip_G(grad f_i) = grad f_i min(1, G / ||grad f_i||) (no clip: g_i = grad f_i). Without noise (``epsilon``
None, the default) this is DIGing, exact with a constant step; it refuses constrained agents.

**Sensitivity (l2).** Neighbouring data of agent i: its declared relation, a constant pc.Sensitivity whose l2 bound
B_i >= sup_x ||grad f_i(x; D) - grad f_i(x; D')||_2 (one record, say); without one, any two objectives of agent i
(agent-level privacy), which the clip bounds. Clipping is the Euclidean projection onto the G-ball: 1-Lipschitz, and
both clipped gradients lie in the ball, so s_i = sup_x ||g_i(x; D) - g_i(x; D')||_2 <= min(B_i, 2G). Given the
transcript so far, x_i(t) is public: x_i(0) = 0, and x_i(t+1) mixes the neighbours' public x_j(t) with the released
yt_i(t) (post-processing: x costs nothing). By induction y_i(t) = g_i(x_i(t)) + sum_{k<t} (sum_j a_ij yt_j(k) -
yt_i(k)), a public sum, so y_i(t) differs between D and D' only through one clipped gradient at a public point:
Delta = s_i for every release. Nothing lies between y and its release (no projection, no solver), so this l2 bound
is the released value's.

**Accountant.** Every release is a Gaussian with one noise multiplier m (sigma = m Delta), so the T releases (rounds
0..T-1; the last round sends x alone) compose to mu = sqrt(T) / m GDP (Dong, Roth & Su 2022), which the ledger
converts exactly (Balle & Wang 2018). A total ``epsilon`` per agent at ``delta`` sets m by
``pc.Budget(epsilon, delta).per_update(T)`` (dp-accounting's PLD calibration; on the secure path, the grid's discrete
Gaussian calibrated on RDP), so the run reports at most that epsilon.
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
    check_privacy,
    consensus_problem,
)


class GradientTracking(Algorithm):
    """DIGing with a constant step ``alpha`` (default 1 / (4 max_i L_i), from the declared smoothness); private with a
    total ``epsilon`` per agent at ``delta`` over the run, gradients clipped to l2 norm ``clip`` (module docstring)."""

    name = "gradient_tracking"
    columns = ("round", "objective", "disagreement", "epsilon", "time_s")
    diagnostic_columns = {"objective": sum}
    objective_columns = ("objective",)

    def __init__(self, alpha: float | None = None, weights: str = "metropolis", epsilon: float | None = None,
                 delta: float = 1e-5, clip: float | None = None) -> None:
        self.alpha, self.weights, self.epsilon, self.delta, self.clip = alpha, weights, epsilon, delta, clip
        self._delta = delta
        self.budget = None if epsilon is None else pc.Budget(epsilon, delta)  # validates both
        self._clip = None if clip is None else pc.errors.require_positive(clip, argument="clip")

    @property
    def private(self) -> bool:
        return self.epsilon is not None

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
            if self.private:
                self.sensitivity(agent)

    def sensitivity(self, agent: pc.Agent) -> pc.Sensitivity:
        """s_i <= min(B_i, 2 G): the l2 change of one clipped gradient over neighbouring data (module docstring); a
        declared B_i that binds keeps its ``nominal`` label."""
        declared = agent.sensitivity if isinstance(agent.sensitivity, pc.Sensitivity) else None
        if declared is not None and (self._clip is None or declared.get("l2") <= 2.0 * self._clip):
            return pc.Sensitivity(l2=declared.get("l2"), nominal=declared.nominal)
        if self._clip is None:
            raise pc.errors.PrivacyError("privacy is on: declare a constant pc.Sensitivity(l2=...) or give clip",
                                         agent=agent.name, argument="sensitivity")
        return pc.Sensitivity(l2=2.0 * self._clip)

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
    """Agent i: its public estimate x_i, its tracker y_i and last release yt_i, and the (clipped) gradient at x_i."""

    def __init__(self, agent: pc.Agent, context: AgentContext, settings: GradientTracking) -> None:
        self.context, self.settings = context, settings
        self.evaluator = GradientEvaluator(agent, context.layout)
        self.sensitivity = settings.sensitivity(agent) if settings.private else None
        self.x = np.zeros(context.layout.dim)
        self.gradient = self.clipped(self.x)
        self.y = self.gradient.copy()
        self.yt = self.y

    def clipped(self, x: np.ndarray) -> np.ndarray:
        g = self.evaluator.gradient(x)
        clip, norm = self.settings._clip, float(np.linalg.norm(g))
        return g if clip is None or norm <= clip else g * (clip / norm)

    def send(self, t: int) -> list[Message]:
        """Round t's message: x_i in the clear (public) and y_i released, charged s_i."""
        if self.settings.private:
            mechanism = self.settings.budget.per_update(self.context.rounds)
            self.yt = self.context.release(self.y, mechanism, self.sensitivity, tags={"payload": "y"})
        else:
            self.yt = self.y
        return [self.context.message(t, {"x": self.x, "y": self.yt})]

    def start(self) -> list[Message]:
        return self.send(1)

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        received = {m.sender: m for m in inbox} | {self.context.name: None}
        row = self.context.topology.weight_row(self.context.name, t, self.settings.weights)
        mixed_x = sum(a * (self.x if received[j] is None else received[j]["x"]) for j, a in sorted(row.items()))
        mixed_y = sum(a * (self.yt if received[j] is None else received[j]["y"]) for j, a in sorted(row.items()))
        self.x = mixed_x - self.settings.alpha * self.yt
        gradient = self.clipped(self.x)
        self.y, self.gradient = mixed_y - (self.yt - self.y) + gradient - self.gradient, gradient
        if t == self.context.rounds:  # the last round sends the public x only: T releases in all
            return [self.context.message(t + 1, {"x": self.x})]
        return self.send(t + 1)

    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        return {"objective": self.evaluator.value(w_p)}

    def output(self, released_only: bool = False) -> np.ndarray:
        return self.x.copy()  # public: a function of the releases

    def report(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y, "yt": self.yt, "gradient": self.gradient}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x, self.y, self.yt, self.gradient = state["x"], state["y"], state["yt"], state["gradient"]


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
    private = problem.solve(GradientTracking(epsilon=5.0, clip=1.0), pc.Topology.ring(), rounds=50, seed=0)
    print(f"private, total epsilon 5 over 50 rounds: spent {private.history['epsilon'].iloc[-1]:.4f}, "
          f"|w - w*| = {np.linalg.norm(private.w - reference.w):.2e}")
    print(check_algorithm(GradientTracking(epsilon=5.0, clip=1.0), rounds=300))
    print(check_privacy(GradientTracking(epsilon=2.0, delta=1e-2, clip=10.0), runs=3000))


if __name__ == "__main__":
    main()
