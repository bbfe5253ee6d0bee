"""Decentralized gradient descent with random local aggregators: Algorithms 2 and 2* of Xiao, Ye & Devadas,
"Local Differential Privacy in Decentralized Optimization".

In round k + 1 every agent i releases, per coordinate l,

    x_i^{k+1}[l] = Proj_C[ A_i^k[l] - eta_{k+1} grad f_i(.)[l] ] + Delta_i^{k+1}[l],   Delta ~ Lap(0, beta_{k+1})

where the aggregator A (Term A) is drawn from the agent's private stream, never released:

* ``variant="2*"`` (default; Appendix E, Eq. (28)): A[l] uniform on an interval inside
  [min_{j in N~_i} x_j[l], max_{j in N~_i} x_j[l]] (N~_i = N_i and i), gradient at x_i^k. The paper draws
  A = w min + (1 - w) max with w ~ U(0, 1), the whole range (``interval="range"``). Its mean is the
  neighbourhood's mid-range, which is not average preserving: on heterogeneous agents the method then
  settles at a biased point whatever the step (docs/ldp.md measures it). ``interval="centred"`` (default)
  draws A uniform on the largest interval centred at the Metropolis average m_i inside that range,
  [m - h, m + h] with h = min(m - min, max - m): still a random aggregator on an interval within the
  neighbourhood's range, but with mean m_i (doubly stochastic weights), so it reaches the optimum.
* ``variant="2"`` (Eq. (7)): on a complete graph only (it needs the globally most divergent pair
  (i_k, ihat_k) in l1 and the global mean xbar^k): A = (2w/N) x_{i_k} + (2(1-w)/N) x_{ihat_k} +
  (1/N) sum_{j != i_k, ihat_k} x_j, w ~ U(0, 1) per coordinate, gradient at xbar^k.
* ``variant="fixed"``: the baseline DGD (3) with fixed Metropolis weights, A = sum_j w_ij x_j.

The projection onto the agent's declared set C after each update is privcvx's; the paper omits it
(it takes C = R^d). Privacy: A is uniform on an interval and a neighbouring function shifts the mean by at
most alpha_k B_inf with alpha_k = eta_k (Theorem 2.2); the ledger records the worst case and the ex-post
account Eq. (10), as for [`RandomizedADMM`][privcvx.algorithms.randomized_admm.RandomizedADMM].
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.spatial.distance import pdist

from privcvx.algorithms import local_dp
from privcvx.algorithms.base import AgentContext, StepMonitor
from privcvx.algorithms.gradient_agents import ProjectedGradientAgent
from privcvx.errors import PrivcvxError, check_scalar, require_positive
from privcvx.messages import Message
from privcvx.privacy.ex_post import ExPostAccount, laplace_release
from privcvx.privacy.total_budget import laplace_multiplier
from privcvx.problem import Agent, DistributedProblem
from privcvx.schedules import Power, Schedule, as_schedule, checked_value
from privcvx.topology import Topology

VARIANTS = ("2*", "2", "fixed")
INTERVALS = ("centred", "range")
#: The exponent of the default step c / k^a (non-summable, so that the method reaches the optimum).
STEP_POWER = 0.75


class RandomizedDGD(local_dp.ExPostMethod):
    """Decentralized gradient descent with random local aggregators (Algorithms 2 and 2*).

    Parameters
    ----------
    variant:
        ``"2*"`` (default, any graph), ``"2"`` (complete graph only) or ``"fixed"`` (Metropolis DGD baseline).
    interval:
        For 2*: ``"centred"`` (default, mean-preserving) or ``"range"`` (the paper's w min + (1-w) max).
    step:
        eta_k: a float, a schedule k -> eta_k (the paper's 0.93^k is ``Geometric(0.93, 0.93)``) or None for
        c / k^0.75 with c = 1 / max_i L_i (declared smoothness; estimated without privacy).
    noise_rate:
        beta_k, the Laplace rate (float or schedule); ``None`` (default) runs without noise.
    b_inf:
        The l_inf gradient sensitivity B_inf; default from the agent's ``pc.Sensitivity``.
    delta, epsilon:
        As `RandomizedADMM`'s: the accountants' delta, and a total epsilon per agent in place of ``noise_rate``
        (`calibrated` sets the largest constant rate whose ledger reports at most it).
    """

    name = "randomized_dgd"
    columns = ("round", "objective", "disagreement", "average_change", "epsilon", "epsilon_worst_case",
               "epsilon_ex_post", "step", "time_s")
    diagnostic_columns = {"objective": sum, "epsilon_worst_case": max, "epsilon_ex_post": max}
    objective_columns = ("objective",)

    def __init__(self, variant: str = "2*", interval: str = "centred", step: float | Schedule | None = None,
                 noise_rate: float | Schedule | None = None, b_inf: float | None = None, delta: float = 1e-6,
                 epsilon: float | None = None) -> None:
        self.variant, self.interval, self.step, self.noise_rate = variant, interval, step, noise_rate
        self.b_inf, self.delta, self.epsilon = b_inf, delta, epsilon
        for argument, value, allowed in (("variant", variant, VARIANTS), ("interval", interval, INTERVALS)):
            check_scalar(value, argument=argument, choices=allowed)
        self._step = None if step is None else as_schedule(step, argument="step")
        self._rate = None if noise_rate is None else as_schedule(noise_rate, argument="noise_rate")
        self._epsilon = local_dp.total_epsilon(epsilon, noise_rate)
        self._b_inf = None if b_inf is None else require_positive(b_inf, argument="b_inf")
        self._delta = require_positive(delta, argument="delta")

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        self.require_decentralized(topology)
        self.require_consensus(problem)
        n = len(problem.agents)
        if self.variant == "2" and (topology.time_varying or topology.graph(1).number_of_edges() != n * (n - 1) // 2):
            raise self.unsupported("Algorithm 2 on an incomplete graph", "Algorithm 2 needs the globally most "
                                   "divergent pair and the global mean: use Topology.complete(), or variant='2*'",
                                   argument="topology")
        if self.private:
            local_dp.check_private_agents(problem, self._b_inf, self._step is None)

    def prepare(self, problem: DistributedProblem, topology: Topology, rounds: int) -> RandomizedDGD:
        """Check the problem; fix the default step c / k^0.75 with c = 1 / max_i L_i, then a total ``epsilon``'s
        noise rate (`calibrated`)."""
        self.check(problem, topology)
        if self._step is not None:
            return self.calibrated(problem, rounds)
        smoothness = max(local_dp.declared_smoothness(agent, layout, self.private)
                         for agent, layout in zip(problem.agents, problem.layouts, strict=True))
        return self.clone(step=Power(1.0 / smoothness, STEP_POWER)).calibrated(problem, rounds)

    def calibrated(self, problem: DistributedProblem, rounds: int) -> RandomizedDGD:
        """With a total ``epsilon``: the largest constant noise rate beta at which the worst-off agent's ledger spends
        at most it over the run's releases, round k's charged beta times `local_dp.release_units` (d_i eta_k B_inf, plus
        2 sqrt(d_i) e on a set projected by a solver)."""
        if self._epsilon is None:
            return self
        releases = local_dp.release_units(problem, self._b_inf, lambda name: 1.0)
        steps = [checked_value(self._step, t, argument="step") for t in range(1, rounds + 1)]
        # no private agent: units of 0, which laplace_multiplier refuses
        units = [max((release(eta) for release in releases), default=0.0) for eta in steps]
        return self.clone(epsilon=None, noise_rate=laplace_multiplier(units, self._epsilon, self._delta))

    def agent_program(self, agent: Agent, context: AgentContext) -> RandomizedDGDAgent:
        return RandomizedDGDAgent(agent, context, self)

    def monitor(self, problem: DistributedProblem, topology: Topology) -> StepMonitor:
        return StepMonitor(problem, "x", self._step or Power(1.0, STEP_POWER))


class RandomizedDGDAgent(ProjectedGradientAgent):
    """Agent i of Algorithm 2 / 2*: its estimate (from the public x_i^0), its private aggregator draws, noise stream
    and ledger."""

    def __init__(self, agent: Agent, context: AgentContext, settings: RandomizedDGD) -> None:
        super().__init__(agent, context, settings)
        self.name = context.name
        self.b_inf = local_dp.linf_sensitivity(agent, settings._b_inf) if settings.private else 0.0
        self.account = ExPostAccount()

    def start(self) -> list[Message]:
        return [self.context.message(1, {"x": self.x})]

    def _aggregate(self, t: int, received: dict[str, np.ndarray]) -> tuple[np.ndarray, tuple, np.ndarray]:
        """(Term A, the interval of its law (None for the fixed weights), the point of the gradient)."""
        variant = self.settings.variant
        if variant == "fixed":
            row = self.context.topology.weight_row(self.name, t, "metropolis")
            mixed = sum(row[j] * received[j] for j in sorted(row))
            return mixed, (mixed, mixed), self.x
        w = self.context.noise.uniform(self.x.size)
        if variant == "2":
            names = sorted(received)
            stacked = np.stack([received[j] for j in names])
            n = len(names)
            distances = pdist(stacked, "cityblock")
            pair = np.argmax(distances) if distances.size else 0
            first, second = _pair_index(int(pair), n)
            rest = (stacked.sum(axis=0) - stacked[first] - stacked[second]) / n
            ends = (2.0 / n * stacked[first] + rest, 2.0 / n * stacked[second] + rest)
            return w * ends[0] + (1.0 - w) * ends[1], ends, stacked.mean(axis=0)
        stacked = np.stack([received[j] for j in sorted(received)])
        low, high = stacked.min(axis=0), stacked.max(axis=0)
        if self.settings.interval == "centred":
            row = self.context.topology.weight_row(self.name, t, "metropolis")
            centre = sum(row[j] * received[j] for j in sorted(row))
            half = np.maximum(np.minimum(centre - low, high - centre), 0.0)
            low, high = centre - half, centre + half
        return w * low + (1.0 - w) * high, (low, high), self.x

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        received = local_dp.neighbour_broadcasts(self.context, t, inbox)
        received[self.name] = self.x
        term_a, (low, high), point = self._aggregate(t, received)
        gradient = self.evaluator.gradient(point)
        if not np.all(np.isfinite(gradient)):
            raise PrivcvxError(f"round {t}: the gradient is not finite", agent=self.name, argument="gradient")
        eta = checked_value(self.settings._step, t, argument="step")
        mean = self.projection.project(term_a - eta * gradient, np.ones(self.x.size))
        if self.settings.private:
            beta = checked_value(self.settings._rate, t, argument="noise_rate")
            interval = (low - eta * gradient, high - eta * gradient) if self.projection.kind == "free" else None
            mean = laplace_release(self.context, self.account, mean, beta, eta * self.b_inf, interval,
                                   self.projection.error_bound)
        self.x = mean
        return [self.context.message(t + 1, {"x": self.x})]

    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        worst, ex_post = self.account.per_round()
        return {"objective": self.evaluator.value(w_p), "epsilon_worst_case": float(worst.sum()),
                "epsilon_ex_post": float(ex_post.sum())}

    def output(self, released_only: bool = False) -> np.ndarray:
        return self.x.copy()

    def report(self) -> dict[str, Any]:
        """The ex-post account, computed from the agent's private interval: a diagnostic, kept only in runs that
        keep diagnostics; and the projections' report (``result.info["local_solve"]``)."""
        return {"local_solve": self.projection.report(self.context.diagnostics),
                **({"ex_post_account": self.account.per_round()} if self.context.diagnostics else {})}

    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x, "account": self.account.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x = state["x"]
        self.account.load_state_dict(state["account"])


def _pair_index(k: int, n: int) -> tuple[int, int]:
    """The (row, column) of the k-th entry of a condensed distance matrix of n points."""
    rows, columns = np.triu_indices(n, 1)
    return int(rows[k]), int(columns[k])


