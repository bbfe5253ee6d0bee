"""What the gradient-only decentralized methods (DPP^2, DiaDSP, PPDC) share: an agent that releases
decaying Laplace noise on a static graph, collects its neighbours' releases, and keeps an optional trace.

These methods need no CVXPY solve in the loop: one gradient per node and iteration, from the agent's
oracle (or the compiled expression), so they accept nonconvex agents (``needs_convexity = False``).
"""

from __future__ import annotations

import functools
import math
from typing import Any, ClassVar

import numpy as np

from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm, LatestReleases
from privcvx.errors import ParameterError, PrivacyError, PrivcvxError, check_scalar, require_positive
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import LocalProblem
from privcvx.messages import Message
from privcvx.privacy.accounting import DEFAULT_LAPLACE_DELTA
from privcvx.privacy.mechanisms import Laplace, LaplaceBeyondFloat, Mechanism, Sensitivity, check_delta, check_epsilon
from privcvx.privacy.sensitivity import declared_constant, holds_no_private_data
from privcvx.privacy.total_budget import laplace_multiplier
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import WEIGHT_RULES, Topology

#: The largest epsilon of one release the gradient methods record (1/epsilon^2 must stay a normal double).
MAX_RELEASE_EPSILON = 1e100


def check_decay(r: float | None, argument: str = "r") -> float | None:
    """A noise decay rate in (0, 1), or None."""
    if r is None:
        return None
    r = require_positive(r, argument=argument)
    if r >= 1.0:
        raise ParameterError(f"must lie in (0, 1), got {r!r}", argument=argument)
    return r


def geometric_sum(iterations: int, r: float) -> float:
    """sum_{k=1}^{K} r^{-k} = (r^{-K} - 1) / (1 - r) (inf when it overflows)."""
    growth = -iterations * math.log(r)
    return math.inf if growth > 700.0 else math.expm1(growth) / (1.0 - r)


def check_rule(rule: str) -> str:
    """``rule`` if it names a weight rule of [`Topology`][privcvx.topology.Topology], else a ParameterError."""
    return check_scalar(rule, argument="weights", choices=sorted(WEIGHT_RULES))


def laplacian(topology: Topology, rule: str) -> tuple[list[str], np.ndarray]:
    """P = I - W with W the doubly stochastic weights of ``rule``: symmetric, PSD, Null(P) = span(1) when connected."""
    order, weights = topology.weights(1, rule)
    return order, np.eye(len(order)) - weights


def laplacian_row(context: AgentContext, rule: str) -> dict[str, float]:
    """This node's nonzero entries p_ij of P = I - W (itself included)."""
    order, p = laplacian(context.topology, rule)
    row = p[order.index(context.name)]
    return {order[j]: float(row[j]) for j in np.flatnonzero(row)}


def largest_eigenvalue(p: np.ndarray) -> float:
    """lambda_max(P)."""
    return float(np.linalg.eigvalsh(p)[-1])


class GradientMethod(Algorithm):
    """A decentralized, unconstrained, full-consensus method on a static graph that only needs gradients.

    Subclasses name their two Laplace scales in `noise_settings` (both given: private) and their decay ``r``, and
    have ``epsilon`` (a total per agent over the run; the scales are then a template) and ``delta`` settings.
    """

    needs_convexity = False
    columns = ("round", "objective", "average_objective", "gradient_sq", "disagreement", "average_change",
               "epsilon", "time_s")
    diagnostic_columns = {"objective": sum, "average_objective": sum, "gradient_sq": sum}
    objective_columns = ("objective", "average_objective")
    _delta = DEFAULT_LAPLACE_DELTA  # the Laplace ledger reports its epsilon at this delta
    #: The constructor arguments of the two initial Laplace scales.
    noise_settings: tuple[str, str]
    #: The graph weight rule and whether the agents keep their trace (every method's constructor arguments).
    weights: str
    trace: bool
    #: Whether releases beyond a float ledger are allowed. By default a release whose epsilon would exceed
    #: `MAX_RELEASE_EPSILON` is refused; a research subclass that reproduces such a regime (the DPP^2 paper's
    #: own) sets True: each such release is then charged as no privacy (``LaplaceBeyondFloat``, epsilon = inf).
    beyond_float: ClassVar[bool] = False

    def check_noise(self, epsilon: float | None, delta: float) -> None:
        """Both scales or neither; positive; a decay rate r in (0, 1) with them; a total ``epsilon`` only with
        them (its template) and the accounting ``delta``."""
        self._delta = check_delta(delta)
        first, second = (getattr(self, name) for name in self.noise_settings)
        if epsilon is not None:
            check_epsilon(epsilon)
            if first is None:
                raise PrivacyError(f"a total epsilon scales the noise: give {' and '.join(self.noise_settings)} "
                                   "and r as its template", argument="epsilon")
        if (first is None) != (second is None):
            raise PrivacyError(f"give both {' and '.join(self.noise_settings)} (or neither, for a run without noise)",
                               argument=self.noise_settings[0])
        if first is not None:
            for name in self.noise_settings:
                require_positive(getattr(self, name), argument=name, error=PrivacyError)
            if self.r is None:
                raise PrivacyError("the noise needs its decay rate r in (0, 1)", argument="r")
        check_decay(self.r)

    def check_common(self, weights: str, trace: bool, epsilon: float | None, delta: float) -> None:
        """The settings every gradient method has: the noise and its total (`check_noise`), the weight rule and
        ``trace``."""
        self.check_noise(epsilon, delta)
        check_rule(weights)
        check_scalar(trace, argument="trace", kind=bool)

    def noise_scale(self, name: str) -> float:
        """The initial Laplace scale ``name`` of a run with noise; a PrivacyError naming it in a run without."""
        if not self.private:
            raise PrivacyError("the algorithm adds no noise", argument=name)
        return getattr(self, name)

    @property
    def noisy(self) -> bool:
        """Whether the method adds noise."""
        return getattr(self, self.noise_settings[0]) is not None

    @property
    def private(self) -> bool:
        return self.noisy

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        self.require_gradient_setting(problem, topology)
        if self.private:
            for agent in problem.agents:
                self.adjacency_radius(agent)

    def require_gradient_setting(self, problem: DistributedProblem, topology: Topology) -> None:
        """Refuse the star, time-varying graphs, general-form keys, private variables and constraints."""
        self.require_decentralized(topology)
        if topology.time_varying:
            raise self.unsupported("time-varying topologies", "it runs on one static graph", argument="topology")
        self.require_consensus(problem)
        for agent in problem.agents:
            if agent.constraints:
                raise self.unsupported("constraints", "it is an unconstrained method (no projection)",
                                       agent=agent.name, argument="constraints")

    def prepare(self, problem: DistributedProblem, topology: Topology, rounds: int) -> GradientMethod:
        """Check the problem and fix the settings a run derives from it (`resolve`), then a total ``epsilon``'s
        noise (`calibrated`)."""
        return self.resolve(problem, topology).calibrated(problem, rounds)

    def resolve(self, problem: DistributedProblem, topology: Topology) -> GradientMethod:
        """Check the problem; a subclass fixes its defaults here."""
        self.check(problem, topology)
        return self

    def release_epsilons(self, agent: Agent, dim: int, rounds: int) -> list[float]:
        """The epsilons of the charged releases of ``agent`` in a run of ``rounds`` rounds (its accountant)."""
        raise NotImplementedError

    def calibrated(self, problem: DistributedProblem, rounds: int) -> GradientMethod:
        """With a total ``epsilon``: both template scales divided by the one factor c at which the worst-off
        agent's ledger (`release_epsilons`, all proportional to 1/scale) reports at most ``epsilon`` at ``delta``."""
        if self.epsilon is None:
            return self
        per_agent = [self.release_epsilons(agent, layout.dim, rounds)
                     for agent, layout in zip(problem.agents, problem.layouts, strict=True)
                     if not holds_no_private_data(agent)]
        factor = laplace_multiplier(np.max(per_agent, axis=0) if per_agent else [0.0], self.epsilon, self._delta)
        return self.clone(epsilon=None, **{name: getattr(self, name) / factor for name in self.noise_settings})
    def monitor(self, problem: DistributedProblem, topology: Topology) -> LatestReleases:
        """The public metrics of the released states, `GradientMonitor`."""
        return GradientMonitor(problem)

    @staticmethod
    def adjacency_radius(agent: Agent) -> float:
        """delta_i of Definition 1: the agent's declared l2 gradient sensitivity (a constant pc.Sensitivity)."""
        return declared_constant(agent, "a constant pc.Sensitivity(l2=delta) bounding sup_x ||grad f(x; D) - "
                                        "grad f(x; D')|| (delta-adjacency)").get("l2")

    @staticmethod
    def declared_smoothness(problem: DistributedProblem) -> float:
        """Mbar = max_i M_i from the agents' declared smoothness (public)."""
        missing = [agent.name for agent in problem.agents if agent.smoothness is None]
        if missing:
            raise PrivacyError("the privacy bound needs a public Mbar: declare pc.Agent(smoothness=M_i) for every "
                               "agent or give smoothness=", agent=missing[0], argument="smoothness")
        return float(max(agent.smoothness for agent in problem.agents))


class GradientAgent(AgentProgram):
    """An agent of a gradient-only method: its evaluator, noisy releases with ledger entries, and its trace.

    With ``trace`` (research runs only) it keeps x_i^k and grad f_i(x_i^k) of every iteration and returns
    them in its report (``result.info["agents"]``): values computed from private data, not DP. A run with
    ``diagnostics=False`` promises that nothing but releases leaves an agent, so the agent refuses ``trace``
    there (a PrivacyError) rather than drop it silently: the caller asked for values it cannot have.
    """

    def __init__(self, agent: Agent, context: AgentContext, settings: GradientMethod, *,
                 weights: dict[str, float]) -> None:
        trace, beyond_float = settings.trace, settings.beyond_float
        if trace and not context.diagnostics:
            raise PrivacyError("trace=True keeps every x_i^k and grad f_i(x_i^k), computed from private data, and "
                               "a run with diagnostics=False sends nothing but releases: run with diagnostics=True "
                               "(a research run) or trace=False", agent=context.name, argument="trace")
        self.agent, self.context, self.settings, self.beyond_float = agent, context, settings, beyond_float
        #: An agent without private data (pc.Sensitivity(l1=0, l2=0)): its releases carry no noise, charged nothing.
        self.public = holds_no_private_data(agent)
        self.evaluator = GradientEvaluator(agent, context.layout)
        self.dim = context.layout.dim
        self.weights = weights
        self.trace = trace
        self.trace_x: list[np.ndarray] = []
        self.trace_gradient: list[np.ndarray] = []
        #: The agent's primal state x_i (private; diagnostics and the report read it), from the public,
        #: data-independent x_i^0 = 0.
        self.x = np.zeros(self.dim)
        #: The iteration k of the last update (0 before the first); the methods' noise decays as r^k.
        self.k = 0

    @functools.cached_property
    def delta(self) -> float:
        """delta_i of Definition 1 (`GradientMethod.adjacency_radius`) under privacy, else 0."""
        return self.settings.adjacency_radius(self.agent) if self.settings.private else 0.0

    def gradient(self, x: np.ndarray) -> np.ndarray:
        """The agent's gradient oracle at ``x``; a non-finite gradient raises a PrivcvxError naming the agent."""
        g = self.evaluator.gradient(x)
        if not np.all(np.isfinite(g)):
            raise PrivcvxError("the gradient is not finite (did the iterates diverge?)", agent=self.context.name,
                               argument="gradient")
        return g

    def traced_gradient(self, x: np.ndarray) -> np.ndarray:
        """grad f_i(x), recorded with x when tracing."""
        g = self.gradient(x)
        self.record(x, g)
        return g

    def record(self, x: np.ndarray, g: np.ndarray | None = None) -> None:
        """Append x and grad f_i(x) to the trace (when tracing)."""
        if self.trace:
            self.trace_x.append(x.copy())
            self.trace_gradient.append(self.gradient(x) if g is None else g.copy())

    def release(self, value: np.ndarray, scale: float, sensitivity: float, payload: str | None = None) -> np.ndarray:
        """``value`` + Lap(scale) per coordinate, released through the agent's release path as a Laplace release
        of l1 sensitivity ``sensitivity`` (a data-independent value, ``sensitivity = 0``, is charged nothing).

        ``scale = 0`` (no privacy) and an agent without private data return a copy. ``payload``: the message key
        that sends the release verbatim
        (the host checks that it does).
        """
        if scale == 0.0 or self.public:
            return np.array(value, dtype=float)
        if not (math.isfinite(scale) and scale > 0):
            raise PrivacyError(f"the noise scale {scale!r} is not a finite number > 0", agent=self.context.name,
                               argument="scale")
        if sensitivity > 0.0 and not sensitivity / scale <= MAX_RELEASE_EPSILON:
            if not self.beyond_float:
                raise PrivacyError(f"the noise has decayed to scale {scale:.3g}: this release alone would cost "
                                   f"epsilon {sensitivity / scale:.3g} > {MAX_RELEASE_EPSILON:g}, beyond any "
                                   "meaningful privacy and what the ledger composes; run fewer rounds or a decay r "
                                   "closer to 1", agent=self.context.name, argument="r")
            mechanism: Mechanism = LaplaceBeyondFloat()
        else:
            mechanism = Laplace(sensitivity / scale) if sensitivity > 0.0 else Laplace(1.0)
        return self.context.release(value, mechanism, Sensitivity(l1=sensitivity), scale=scale,
                                    tags={} if payload is None else {"payload": payload})

    def mix(self, inbox: list[Message], key: str, own: np.ndarray, round_: int, phase: int) -> np.ndarray:
        """sum_j weights_ij v_j over the node and its neighbours, from the messages of (round_, phase)."""
        received = {m.sender: m[key] for m in inbox if m.round == round_ and m.phase == phase and key in m.payload}
        received[self.context.name] = own
        missing = sorted(set(self.weights) - set(received))
        if missing:
            raise PrivcvxError(f"round {round_}: no {key!r} from the neighbours {missing}", agent=self.context.name,
                               argument="messages")
        return sum(self.weights[j] * received[j] for j in sorted(self.weights))

    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        """f_i at x_i and at the public global vector, and ||grad f_i(x_i)||^2 (private data; research runs)."""
        x = self.x
        g = self.evaluator.gradient(x)
        return {"objective": self.evaluator.value(x), "average_objective": self.evaluator.value(w_p),
                "gradient_sq": float(g @ g)}

    def output(self, released_only: bool = False) -> np.ndarray:
        raise NotImplementedError

    def report(self) -> dict[str, Any]:
        if not self.trace:
            return {}
        x = self.x
        if not self.trace_x or not np.array_equal(self.trace_x[-1], x):  # the last iterate, once
            self.trace_x.append(x.copy())
            self.trace_gradient.append(self.gradient(x))
        return {"trace_x": np.array(self.trace_x), "trace_gradient": np.array(self.trace_gradient)}

    def base_state(self) -> dict[str, Any]:
        """The state every gradient agent has (its traces and its iteration k), for a subclass's ``state_dict``."""
        return {"trace_x": list(self.trace_x), "trace_gradient": list(self.trace_gradient), "k": self.k}

    def load_base_state(self, state: dict[str, Any]) -> None:
        """Restore what `base_state` wrote."""
        self.trace_x, self.trace_gradient = list(state["trace_x"]), list(state["trace_gradient"])
        self.k = state["k"]


class ProjectedGradientAgent(AgentProgram):
    """An agent of a projected gradient method (`DPDistributedGradient`, `RandomizedDGD`): its projection onto W_i,
    its gradient oracle, and its public start x_i(0), the point of W_i closest to 0 (data-independent)."""

    def __init__(self, agent: Agent, context: AgentContext, settings: Algorithm, *,
                 certified: bool | float | None = None) -> None:
        self.agent, self.context, self.settings = agent, context, settings
        self.layout = context.layout
        #: the projection, certified under privacy within ``certified`` (a number: e; default: the layer's e)
        self.projection = LocalProblem(agent, self.layout,
                                       certified=settings.private if certified is None else certified)
        self.evaluator = GradientEvaluator(agent, self.layout)
        self.x = self.projection.project(np.zeros(self.layout.dim), np.ones(self.layout.dim))


class GradientMonitor(LatestReleases):
    """Public metrics from the released states ("x"): their average, largest pairwise distance and its change."""

    def __init__(self, problem: DistributedProblem) -> None:
        super().__init__(problem, "x")

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        agreement = self.agreement(messages)
        return {} if t == 0 else agreement
