"""The decentralized consensus ADMM shared by PR-ADMM, PP-ADMM and IPP-ADMM (Ch. 3 of Ding's thesis).

J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness", PhD
dissertation, University of Houston, 2022, Sec. 3.2, after Shi et al. (IEEE TSP 2014) and Zhang et al.
(ICML 2018). Agent i, with neighbours V_i on a static undirected graph, keeps alpha_i (= 2 lambda_i)
and, in the alpha form (12)-(13),

    x_i^{t+1} = argmin_{x in W_i} f_i(x) + <alpha_i^t, x> + eta sum_{j in V_i} || x - (x_i^t + x_j^t)/2 ||^2
              = argmin_{x in W_i} f_i(x) + eta |V_i| ||x||^2 + <alpha_i^t - eta (|V_i| x_i^t + sum_j x_j^t), x>
    alpha_i^{t+1} = alpha_i^t + eta (|V_i| x_i^{t+1} - sum_{j in V_i} x_j^{t+1})

where the x_j are the *released* (broadcast) iterates. Every W_i must contain the others' optimum
for the consensus to be the centralized problem's (full consensus; the constraint sets are the
agents' own, as in ``pc.Agent``). The local step is one compiled, DPP-compliant CVXPY problem per
agent whose only changing datum is the linear term, solved by the local-solve layer
([`LocalProblem.step`][privcvx.localsolve.LocalProblem.step]: f_i + q ||x||^2 + <c, x> is its step with weight 2 q).

General form (PR-ADMM only, ``ConsensusADMM.general_form``): agents hold some of the shared keys and may
have private variables. The penalty and the dual are then per shared entry k, over the neighbours V_i(k) that
hold k, with weight eta |V_i(k)|; private variables are free in the local step and never sent, and a message
carries only the agent's shared entries. By default the graph is the one of agents sharing a key
(`sharing_graph`); any topology must connect each key's holders (`check_key_connectivity`).

Over-relaxation (all three methods' ``relaxation`` option): with gamma != 1 the edge variables and duals are
over-relaxed (`ConsensusADMMAgent.relaxed`), from the releases alone.

In privcvx's protocol the message of round t carries the iterate x^{t-1}: ``start`` broadcasts the
public x^0 = 0, and step t first applies the dual update (13) to the round-t broadcasts (x^{t-1}),
then solves for x^t and broadcasts it (the round-(t+1) message). The methods differ only in what they
add to the linear term and in what they release (`ConsensusADMMAgent`'s hooks).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm
from privcvx.algorithms.consensus import (
    ConsensusADMMMonitor,
    GeneralFormMonitor,
    check_key_connectivity,
    full_consensus,
    sharing_graph,
)
from privcvx.errors import ParameterError, PrivcvxError, SolverError, require_positive
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import LocalProblem
from privcvx.messages import Message
from privcvx.privacy.mechanisms import Mechanism, Sensitivity, check_delta, check_epsilon
from privcvx.privacy.sensitivity import declared_constant
from privcvx.privacy.zcdp import ZCDPAccountant, ZCDPLedger, mechanism_rho, mechanism_xi
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import Topology

#: The thesis's penalty (Secs. 3.3.2 and 3.5.2).
DEFAULT_ETA = 0.5


def check_eta(eta: Any) -> float:
    """The penalty eta of the consensus step, a finite positive number (else a ParameterError)."""
    return require_positive(eta, argument="eta")


def check_relaxation(relaxation: Any) -> float:
    """gamma, the over-relaxation of the edge variables and duals: a number in (0, 2) (else a ParameterError).

    Relaxed ADMM converges for gamma in (0, 2) (Eckstein & Bertsekas; Boyd et al., Sec. 3.4.3); 1 is the thesis's step.
    """
    gamma = require_positive(relaxation, argument="relaxation")
    if not gamma < 2.0:
        raise ParameterError(f"must lie in (0, 2), got {relaxation!r}", argument="relaxation")
    return gamma


def gradient_sensitivity(agent: Agent) -> float:
    """The agent's declared L2 gradient sensitivity S_i: max over x of ||grad f_i(x; D) - grad f_i(x; D')||_2."""
    return declared_constant(agent, "a constant pc.Sensitivity bounding the change of grad f_i over neighbouring "
                                    "datasets at every point (its l2, or l1 >= l2)").get("l2")


class ConsensusADMM(Algorithm):
    """What PR-ADMM, PP-ADMM and IPP-ADMM share: the penalty, the delta, the checks, the monitor, the summary.

    ``strong_convexity`` is a public lower bound mu_f on the strong-convexity modulus of every f_i,
    valid for every dataset (lam_hat / N for the thesis's logistic loss with R = ||x||^2 / 2; 0 is
    always valid). The local step is then mu_i = mu_f + 2 eta |V_i| strongly convex: every
    sensitivity of Ch. 3 rests on this modulus.
    """

    columns = ("round", "average_objective", "objective", "disagreement", "average_change", "broadcasts", "epsilon",
               "time_s")
    diagnostic_columns = {"average_objective": sum, "objective": sum}
    objective_columns = ("average_objective", "objective")
    #: Whether a neighbour may stay silent in a round (IPP-ADMM): its last release is reused.
    silent_neighbours: ClassVar[bool] = False
    #: Whether the method runs general-form problems (keys held by some agents, private variables).
    general_form: ClassVar[bool] = False
    #: Each agent's shared entries in w (public), set by `prepare` for a general-form problem.
    _entries: dict[str, np.ndarray] | None = None
    #: gamma, the over-relaxation of the edge variables and duals (1: the thesis's ADMM; the ``relaxation`` option).
    _relaxation: float = 1.0

    def _common(self, eta: float, epsilon: float | None, delta: float, strong_convexity: float,
                relaxation: float = 1.0) -> None:
        self._eta = check_eta(eta)
        self._relaxation = check_relaxation(relaxation)
        self._epsilon = None if epsilon is None else check_epsilon(epsilon)
        self._delta = check_delta(delta)
        self._mu = require_positive(strong_convexity, argument="strong_convexity", allow_zero=True)

    @property
    def private(self) -> bool:
        return self._epsilon is not None

    def default_topology(self) -> Topology:
        return Topology.random(seed=0)

    def topology_for(self, problem: DistributedProblem) -> Topology:
        """A random graph (full consensus), or the graph of the agents sharing a key (general form)."""
        if self.general_form and not full_consensus(problem):
            return Topology(sharing_graph(problem))
        return self.default_topology()

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        self.require_decentralized(topology)
        if not self.general_form:
            self.require_consensus(problem)
        if topology.time_varying:
            raise self.unsupported("time-varying topologies", "the ADMM of Ch. 3 runs on one static graph",
                                   argument="topology")
        check_key_connectivity(problem, topology)
        if self.private:
            for agent in problem.agents:
                gradient_sensitivity(agent)

    def prepare(self, problem: DistributedProblem, topology: Topology, rounds: int) -> ConsensusADMM:
        """Check; for a general-form problem, hand the agents the public map of every agent's shared entries."""
        self.check(problem, topology)
        if full_consensus(problem):
            return self
        ready = copy.copy(self)
        ready._entries = {layout.name: layout.shared_global for layout in problem.layouts}
        return ready

    def modulus(self, degree: int) -> float:
        """mu_i = mu_f + 2 eta |V_i|: the strong convexity of agent i's local step."""
        return self._mu + 2.0 * self._eta * degree

    def monitor(self, problem: DistributedProblem, topology: Topology) -> ConsensusADMMMonitor | GeneralFormMonitor:
        return ConsensusADMMMonitor(problem) if full_consensus(problem) else GeneralFormMonitor(problem)

    def summarize(self, reports: list[dict[str, Any]]) -> dict[str, Any]:
        """The zCDP of every agent (exact sums of its releases' rho, and xi), the network's epsilon, broadcasts."""
        ledgers = [ZCDPLedger.from_dict(report["zcdp"]) for report in reports]
        accountant = ZCDPAccountant(ledgers)
        info: dict[str, Any] = {"zcdp_rho": accountant.table(), "broadcasts": {r["agent"]: r["broadcasts"]
                                                                              for r in reports}}
        if any(ledger.total_xi for ledger in ledgers):  # PP-/IPP-ADMM's Jacobian terms
            info["zcdp_xi"] = {ledger.agent: ledger.total_xi for ledger in ledgers}
        if self.private:
            info["zcdp_epsilon"] = accountant.epsilon(self._delta)
        info["agents"] = reports
        return info

    @abstractmethod
    def agent_program(self, agent: Agent, context: AgentContext) -> ConsensusADMMAgent:
        """Agent i's program."""


class ConsensusADMMAgent(AgentProgram, ABC):
    """Agent i of the decentralized consensus ADMM; subclasses set what is added and released.

    Hooks: `perturbation` (a vector added to the linear term, PP-ADMM's b_i1), `local_solve`
    (exact, or certified inexact), `release` (the broadcast value, or None for no broadcast) and
    `primal_neighbours` (PR-ADMM's robustness filter).
    """

    def __init__(self, agent: Agent, context: AgentContext, settings: ConsensusADMM) -> None:
        self.agent, self.context, self.settings = agent, context, settings
        self.layout = context.layout
        self.eta = settings._eta
        entries = settings._entries
        #: General form: per neighbour j sharing an entry with i, (positions in x_i, positions in x_j) of the common
        #: entries; None under full consensus, where every neighbour holds the whole vector.
        self.overlaps: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
        if entries is None:
            self.neighbours = context.neighbours(1)
            self.degree = len(self.neighbours)
            self.count: int | np.ndarray = self.degree
            self.penalty_degree = self.degree
            self.sizes = dict.fromkeys(self.neighbours, self.layout.dim)
            quadratic: float | np.ndarray = self.eta * self.degree
        else:
            mine = entries[context.name]
            self.overlaps = {}
            for j in context.neighbours(1):
                common, at_mine, at_theirs = np.intersect1d(mine, entries[j], return_indices=True)
                if common.size:
                    self.overlaps[j] = (at_mine, at_theirs)
            self.neighbours = sorted(self.overlaps)
            self.degree = len(self.neighbours)
            self.count = np.zeros(mine.size)  # |V_i(k)|: the neighbours holding each shared entry
            for at_mine, _ in self.overlaps.values():
                self.count[at_mine] += 1.0
            self.penalty_degree = int(self.count.min())
            self.sizes = {j: entries[j].size for j in self.neighbours}
            quadratic = self.eta * self.count
        self.mu = settings.modulus(self.penalty_degree)
        #: argmin_{x in W_i} f_i(x) + q ||x||^2 + <c, x> (q = eta |V_i|, or eta |V_i(k)| per shared entry with the
        #: private entries free): the local-solve layer's step with weight 2 q.
        self.solver = LocalProblem(agent, self.layout, objective=True, certified=settings.private,
                                   penalized=None if entries is None else self.layout.shared_local)
        self.penalty_weight = 2.0 * quadratic
        self.evaluator = GradientEvaluator(agent, self.layout)
        width = self.layout.dim if entries is None else self.layout.shared_local.size
        self.alpha = np.zeros(width)
        self.x_hat = np.zeros(self.layout.dim)  # the local solution (private)
        self.x = np.zeros(width)  # the last release x~_i of the shared entries (public x^0 = 0 at the start)
        self.received: dict[str, np.ndarray] = {}
        #: Over-relaxation (gamma != 1): the edge variables rho_ij of (2), on the entries i and j both hold.
        self.gamma = settings._relaxation
        self.edges: dict[str, np.ndarray] | None = None
        self.zcdp = ZCDPLedger(context.name)
        self.broadcasts = 0

    # ---- hooks ----------------------------------------------------------------------------------------
    def perturbation(self, t: int) -> np.ndarray | None:
        """The linear term added to the local objective in round ``t`` (objective perturbation), or None."""
        return None

    def local_solve(self, t: int, linear: np.ndarray) -> np.ndarray:
        """The local step's argmin for the linear term ``linear`` (the compiled CVXPY problem)."""
        return self.solver.step(linear, self.penalty_weight)

    @abstractmethod
    def release(self, t: int, x_hat: np.ndarray) -> np.ndarray | None:
        """The value broadcast after round t's solve (recorded in the ledgers), or None to stay silent."""

    def primal_neighbours(self, t: int) -> dict[str, np.ndarray]:
        """The neighbours' latest released iterates used in round ``t``, by name."""
        return self.received

    # ---- general form ---------------------------------------------------------------------------------
    def gather(self, values: dict[str, np.ndarray]) -> np.ndarray:
        """sum_{j in V_i(k)} x_{j,k} for every shared entry k of agent i, from the neighbours' vectors ``values``."""
        if self.overlaps is None:
            return sum(values.values())
        total = np.zeros(self.x.size)
        for j, value in values.items():
            at_mine, at_theirs = self.overlaps[j]
            total[at_mine] += value[at_theirs]
        return total

    def common(self, j: str, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(x~_i, x~_j) on the entries agents i and j both hold."""
        if self.overlaps is None:
            return self.x, value
        at_mine, at_theirs = self.overlaps[j]
        return self.x[at_mine], value[at_theirs]

    def in_place_of(self, j: str, value: np.ndarray) -> np.ndarray:
        """Neighbour j's vector with x~_i in place of x~_j on their common entries (PR-ADMM's filter)."""
        if self.overlaps is None:
            return self.x
        at_mine, at_theirs = self.overlaps[j]
        replaced = value.copy()
        replaced[at_theirs] = self.x[at_mine]
        return replaced

    def shared_part(self, z: np.ndarray) -> np.ndarray:
        """The shared entries of a local vector (all of it under full consensus): what a release perturbs."""
        return z if self.overlaps is None else z[self.layout.shared_local]

    def local(self, shared: np.ndarray) -> np.ndarray:
        """A local vector: ``shared`` on the shared entries, the private local solution elsewhere."""
        if self.overlaps is None:
            return shared
        z = self.x_hat.copy()
        z[self.layout.shared_local] = shared
        return z

    def relaxed(self, t: int) -> np.ndarray:
        """The over-relaxed ADMM on (2) (Eckstein & Bertsekas; Boyd et al., Sec. 3.4.3), from the releases alone.

        With x^_i = gamma x~_i + (1 - gamma) rho_ij in the edge and dual updates, the edge variable becomes
        rho_ij <- gamma (x~_i + x~_j)/2 + (1 - gamma) rho_ij and the dual alpha_i <- alpha_i + gamma eta (|V_i| x~_i -
        sum_j x~_j); the local step's linear term is alpha_i - 2 eta sum_j rho_ij (gamma = 1: (12)-(13)).
        """
        if t >= 2:
            self.alpha = self.alpha + self.gamma * self.eta * (self.count * self.x - self.gather(self.received))
            for j, value in self.received.items():
                mine, theirs = self.common(j, value)
                self.edges[j] = self.gamma * 0.5 * (mine + theirs) + (1.0 - self.gamma) * self.edges[j]
        total = np.zeros(self.x.size)
        for j, edge in self.edges.items():
            if self.overlaps is None:
                total += edge
            else:
                total[self.overlaps[j][0]] += edge
        return self.alpha - 2.0 * self.eta * total

    # ---- ledgers --------------------------------------------------------------------------------------
    def released(self, t: int, value: np.ndarray, mechanism: Mechanism, sensitivity: float, label: str,
                 scale: float) -> np.ndarray:
        """``value`` released through the agent's release path (l2 ``sensitivity``, noise ``scale``), its event
        also in the agent's zCDP view ((xi, rho) of the event the ledger recorded: the grid's on the secure path)."""
        value = self.context.release(value, mechanism, Sensitivity(l2=sensitivity), scale=scale,
                                     tags={"label": label, "payload": "x"})
        event = self.context.last_release.event
        if event is not None:
            self.zcdp.record(t, mechanism_rho(event), label, mechanism_xi(event))
        return value

    def charge(self, t: int, mechanism: Mechanism, label: str) -> None:
        """Charge, through the release path, an event whose noise was drawn earlier as data-independent draws (the
        objective perturbation b_i1, the SVT's Laplace noise); its (xi, rho) also in the agent's zCDP view."""
        self.context.charge(mechanism, tags={"label": label})
        self.zcdp.record(t, mechanism_rho(mechanism), label, mechanism_xi(mechanism))

    # ---- protocol -------------------------------------------------------------------------------------
    def start(self) -> list[Message]:
        self.received = {j: np.zeros(self.sizes[j]) for j in self.neighbours}
        if self.gamma != 1.0:
            self.edges = {j: np.zeros_like(self.common(j, value)[0]) for j, value in self.received.items()}
        return [self.context.message(1, {"x": self.x.copy()})]

    def _take(self, t: int, inbox: list[Message]) -> None:
        fresh = {m.sender: m["x"] for m in inbox if m.round == t and m.sender in self.received}
        missing = sorted(set(self.neighbours) - set(fresh))
        if missing and not self.settings.silent_neighbours:
            raise PrivcvxError(f"round {t}: no broadcast from the neighbours {missing}", agent=self.context.name,
                               argument="messages")
        self.received.update(fresh)  # a silent neighbour's last release is reused (IPP-ADMM, Alg. 3)

    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        self._take(t, inbox)
        if self.edges is not None:
            linear = self.relaxed(t)
        else:
            if t >= 2:  # Eq. (13)/(15) on the releases x~^{t-1}; alpha^0 = 0 before the first solve
                self.alpha = self.alpha + self.eta * (self.count * self.x - self.gather(self.received))
            neighbours = self.primal_neighbours(t)
            linear = self.alpha - self.eta * (self.count * self.x + self.gather(neighbours))
        noise = self.perturbation(t)
        if noise is not None:
            linear = linear + noise
        self.x_hat = self.local_solve(t, linear)
        if not np.all(np.isfinite(self.x_hat)):
            raise SolverError("the local step returned a non-finite point", agent=self.context.name,
                              argument="objective")
        released = self.release(t, self.shared_part(self.x_hat))
        if released is None:
            return []
        self.x = released
        self.broadcasts += 1
        return [self.context.message(t + 1, {"x": released})]

    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        """f_i at the average release (``average_objective``) and at the agent's own release."""
        return {"average_objective": self.evaluator.value(self.local(w_p)),
                "objective": self.evaluator.value(self.local(self.x))}

    def output(self, released_only: bool = False) -> np.ndarray:
        return self.x.copy() if released_only else self.local(self.x).copy()

    def report(self) -> dict[str, Any]:
        return {"agent": self.context.name, "broadcasts": self.broadcasts, "zcdp": self.zcdp.to_dict(),
                "local_solve": self.solver.report(self.context.diagnostics)}

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "x_hat": self.x_hat, "x": self.x, "received": dict(self.received),
                "edges": None if self.edges is None else dict(self.edges),
                "zcdp": self.zcdp.to_dict(), "broadcasts": self.broadcasts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha, self.x_hat, self.x = state["alpha"], state["x_hat"], state["x"]
        self.received = dict(state["received"])
        self.edges = None if state["edges"] is None else dict(state["edges"])
        self.zcdp = ZCDPLedger.from_dict(state["zcdp"])
        self.broadcasts = int(state["broadcasts"])
