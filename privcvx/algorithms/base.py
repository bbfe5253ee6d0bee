"""The algorithm protocol: what every distributed method provides to the generic run loop.

An `Algorithm` holds its settings (constructor arguments, like a scikit-learn estimator)
and builds, for one run:

* one `AgentProgram` per agent, which runs where the agent's private data live (the
  driver, a worker process) and talks only through [`Message`][privcvx.messages.Message] s;
* a `Coordinator` where the method has a server (Algorithm 1 of Ryu & Kim), else None;
* a `Monitor`, which computes the run's public metrics from the messages alone (the
  transcript), so they are post-processing of what was released.

The run loop (`privcvx.runtime`) is the same for every algorithm. Per round t and per
phase it steps the coordinator first (with the messages addressed to the server), then every
agent (with the messages addressed to it, broadcasts expanded to the sender's neighbours in the
message's round), records every message, and asks the monitor for the public metrics.
A message is delivered at its receiver's next step.
"""

from __future__ import annotations

import copy
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy.spatial.distance import pdist

from privcvx.errors import PrivacyError, UnsupportedError
from privcvx.messages import Message
from privcvx.privacy.accounting import PrivacyLedger
from privcvx.privacy.discrete_gaussian import discrete_gaussian
from privcvx.privacy.mechanisms import Mechanism, Sensitivity
from privcvx.privacy.noise import NoiseSource, Perturbed, agent_noise_sources
from privcvx.problem import Agent, AgentLayout, DistributedProblem
from privcvx.schedules import Schedule, checked_value
from privcvx.topology import SERVER, Topology

#: A reducer of one diagnostic column over the agents (``sum``, ``max`` or ``min``).
Reducer = Callable[[list[float]], float]


#: The relative difference tolerated between a release's drawn noise scale and the scale its recorded mechanism
#: implies (rounding of scale = multiplier x sensitivity); anything larger is a calibration charged one way and
#: drawn another, which `AgentContext.release` refuses.
SCALE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Release:
    """One noisy release an agent made through `AgentContext.release` (kept for the current step only).

    ``value`` is what was released; ``event`` the ledger entry (None for a data-independent value, which costs
    nothing); ``magnitude`` the sum of |noise| (Eq. (29)); ``tags`` the algorithm's public labels of it. The tag
    ``"payload"`` names the message payload key that carries ``value`` verbatim: the host checks that it does.
    """

    value: np.ndarray
    event: Mechanism | None
    magnitude: float
    tags: Mapping[str, Any]


@dataclass
class AgentContext:
    """What the runtime hands an agent's program: who it is, its noise stream and ledger, the graph.

    ``rounds`` is the run's T (public). Every noisy release goes through `release`, the one way a method adds
    noise and charges privacy: it draws the noise on the run's source (secure or seeded) and records the event in
    the agent's one ledger, which the runtime composes. The noise state and the ledger are saved and restored by
    the runtime (`state_dict`), never by a program. ``noise`` also gives an agent its secret random
    parameters (``uniform``, ``below``: secret penalties and shares, which are not releases). ``diagnostics``
    says whether the run keeps values computed from private data (``solve(diagnostics=...)``): without it, a
    program's ``report`` must hold nothing derived from the agent's data.
    """

    name: str
    index: int
    layout: AgentLayout
    noise: NoiseSource
    ledger: PrivacyLedger
    topology: Topology
    rounds: int
    diagnostics: bool = True
    releases: list[Release] = field(default_factory=list)
    #: Multiplies the noise scale drawn by `release`, never the charge: set only by
    #: `check_privacy` (0.75 for its under-noised variant, which a sound audit
    #: must catch). Any other value than 1 makes the ledger false.
    audit_noise_factor: float = 1.0

    @classmethod
    def for_agent(cls, problem: DistributedProblem, index: int = 0, *, seed: int | str | None = 0,
                  topology: Topology | None = None, rounds: int = 1) -> AgentContext:
        """A context for agent ``index`` alone (its noise stream is the one a run with ``seed`` gives it):
        for building one program outside a run, e.g. in tests."""
        topology = (topology or Topology.star()).bind(problem.names)
        layout = problem.layouts[index]
        return cls(name=layout.name, index=index, layout=layout,
                   noise=agent_noise_sources(seed, len(problem.agents))[index], ledger=PrivacyLedger(layout.name),
                   topology=topology, rounds=rounds)

    def neighbours(self, t: int) -> list[str]:
        """This agent's neighbours in round t's graph (the server alone under ``Topology.star()``)."""
        return self.topology.neighbours(self.name, t)

    def message(self, t: int, payload: Mapping[str, Any], receiver: str | None = None, phase: int = 0) -> Message:
        """A message from this agent: to ``receiver``, or a broadcast to its round-t neighbours."""
        return Message(t, self.name, receiver, payload, phase)  # by position: the round's hot path

    def release(self, value: np.ndarray, mechanism: Mechanism, sensitivity: Sensitivity, *,
                tags: Mapping[str, Any] | None = None, scale: float | None = None, subtract: bool = False,
                charge: bool = True) -> np.ndarray:
        """``value`` plus noise, drawn on the run's noise source, with the release recorded in the agent's ledger.

        ``mechanism`` is what the release is charged as, and ``sensitivity`` bounds ``value`` over neighbouring
        datasets, after every step between the data and the release (`privcvx.privacy.sensitivity`). The
        noise's float-path scale is ``mechanism.scale(sensitivity)``; a method that computes its scale itself
        passes ``scale``, which must be the one the mechanism implies (else a ``PrivacyError``: a calibration
        charged one way and drawn another; a mechanism charged as no privacy, ``LaplaceBeyondFloat``, fits any).
        A ``sensitivity`` of 0 in the mechanism's norm marks a data-independent value: the noise is drawn (at
        ``scale``) and nothing is charged. On the secure path the value is released on a grid with OpenDP's
        integer noise and the ledger records the grid's own mechanism
        (`accounted`). A nominal ``sensitivity`` labels the ledger's epsilon
        "nominal". ``subtract`` releases value - noise (ObjPert's g - xi; the same distribution).

        ``charge=False`` draws the noise (checked against ``mechanism`` as above) without charging it here: for noise
        whose privacy is charged by a later `charge` of what it protects (PP-ADMM's objective perturbation
        b_i1, charged when the solution it perturbs is broadcast; the sparse vector test's Laplace noise, charged
        once as one epsilon-DP event).
        """
        if not isinstance(mechanism, Mechanism):
            raise PrivacyError(f"must be a privcvx mechanism, got {mechanism!r}", agent=self.name, argument="mechanism")
        if not isinstance(sensitivity, Sensitivity):
            raise PrivacyError(f"must be a pc.Sensitivity, got {sensitivity!r}", agent=self.name,
                               argument="sensitivity")
        mechanism = self.noise.calibrated(mechanism)
        bound = sensitivity.get(mechanism.norm)
        implied = mechanism.scale(sensitivity)
        if scale is None:
            scale = implied
        elif bound > 0 and mechanism.noise_multiplier > 0 and not abs(scale - implied) <= SCALE_TOLERANCE * implied:
            raise PrivacyError(f"the noise drawn (scale {scale!r}) is not the noise charged ({mechanism!r} at "
                               f"sensitivity {bound!r} implies scale {implied!r})", agent=self.name, argument="scale")
        if mechanism.draws is None:
            raise PrivacyError(f"{mechanism!r} is a ledger entry, not noise to draw", agent=self.name,
                               argument="mechanism")
        drawn = scale * self.audit_noise_factor
        if mechanism.draws == "discrete_gaussian":  # integer noise on integer codes, OpenDP's sampler when secure
            noise = discrete_gaussian(self.noise, drawn, np.size(value))
            perturbed = Perturbed(np.asarray(value, dtype=float) + noise, float(np.abs(noise).sum()), None)
        else:
            perturbed = self.noise.perturb(np.asarray(value, dtype=float), mechanism.draws, drawn, bound,
                                           subtract=subtract)
        if perturbed.grid is not None and self.audit_noise_factor != 1.0:  # charge the grid's noise as if not scaled
            perturbed = replace(perturbed, grid=replace(perturbed.grid, scale=perturbed.grid.scale
                                                        / self.audit_noise_factor))
        event = perturbed.accounted(mechanism) if bound > 0 and charge else None
        if event is not None:
            self.ledger.record(event, nominal=sensitivity.nominal)
        self.releases.append(Release(perturbed.value, event, perturbed.magnitude, dict(tags or {})))
        return perturbed.value

    def charge(self, event: Mechanism, *, tags: Mapping[str, Any] | None = None, nominal: str | None = None) -> None:
        """Charge ``event`` for noise this path drew earlier with ``release(..., charge=False)``: the second half of
        a release whose value leaves the agent after further steps (see `release`)."""
        if not isinstance(event, Mechanism):
            raise PrivacyError(f"must be a privcvx mechanism, got {event!r}", agent=self.name, argument="event")
        self.ledger.record(event, nominal=nominal)
        self.releases.append(Release(np.zeros(0), event, 0.0, dict(tags or {})))

    @property
    def last_release(self) -> Release:
        """The most recent release of the current step."""
        if not self.releases:
            raise PrivacyError("no release in this step", agent=self.name, argument="releases")
        return self.releases[-1]

    def take_releases(self) -> list[Release]:
        """The releases of the step that ended (what the host checks against the step's messages)."""
        releases, self.releases = self.releases, []
        return releases

    def state_dict(self) -> dict[str, Any]:
        """The runtime's part of an agent's state: its noise stream's state and its ledger (checkpoints)."""
        return {"noise": self.noise.get_state(), "ledger": self.ledger.to_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state written by `state_dict` (untrusted: a malformed one raises a PrivacyError)."""
        if not isinstance(state, Mapping) or set(state) != {"noise", "ledger"}:
            raise PrivacyError("not an agent context's state", agent=self.name, argument="state")
        self.noise.set_state(state["noise"])
        self.ledger.load_dict(state["ledger"])


def check_releases(name: str, messages: list[Message], releases: list[Release]) -> None:
    """A step's messages carry its releases as recorded: each release tagged ``payload=key`` is sent verbatim as
    ``payload[key]`` by one of the step's messages; a PrivacyError names the agent and the key otherwise."""
    for release in releases:
        key = release.tags.get("payload")
        if key is not None and not any(key in m.payload and np.array_equal(m.payload[key], release.value)
                                       for m in messages):
            raise PrivacyError(f"no message of the step carries the release recorded for payload {key!r}: what the "
                               "agent sent is not what its ledger charged", agent=name, argument="messages")


class Checkpointed(ABC):
    """What a checkpoint saves and restores: every agent program, the server and the monitor have a state."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bitwise (arrays, numbers, strings; the noise state included)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state written by `state_dict` (read from an untrusted checkpoint: validate it)."""


class Party(Checkpointed):
    """A sender of messages: an agent's program or the server."""

    @abstractmethod
    def start(self) -> list[Message]:
        """The messages sent before round 1 (stamped round 0), e.g. an agent's initial release."""

    @abstractmethod
    def step(self, t: int, inbox: list[Message]) -> list[Message]:
        """Round ``t`` (one phase of it): take the messages addressed to this party, return those it sends."""


class AgentProgram(Party):
    """One agent's side of an algorithm; runs where its private data live.

    ``step(t, inbox)`` is called once per phase of round t (``phase=k`` is passed as a keyword
    when the algorithm has several phases) and returns the messages the agent sends.
    ``diagnostics(w_p)`` returns values computed from private data, for research runs only: it is
    called after each round with the agent's slice of the public global vector, and only when the
    run keeps diagnostics. ``output(released_only)`` is the agent's last release: in its local layout, or
    (``released_only=True``, runs without diagnostics) only the values it actually sent.

    `AgentProgram`, `Coordinator` and `Monitor` are abstract base classes: a subclass that forgets one of their
    abstract methods cannot be instantiated (a typing Protocol would have let the method silently return None).
    """

    @abstractmethod
    def diagnostics(self, w_p: np.ndarray) -> dict[str, float]:
        """Values computed from private data at the agent's slice ``w_p`` of the global vector (research runs)."""

    @abstractmethod
    def output(self, released_only: bool = False) -> np.ndarray:
        """The agent's last release in its local layout (``released_only``: only the entries it sent)."""

    @abstractmethod
    def report(self) -> dict[str, Any]:
        """Public facts about the run of this agent (e.g. solver counters), gathered into ``result.info``."""


class Coordinator(Party):
    """The server, where an algorithm has one (its name in messages is ``"server"``): ``step`` takes the agents'
    messages to the server and returns what it sends."""


class Monitor(Checkpointed):
    """The public metrics of a run, computed from the messages of each round alone (post-processing)."""

    @abstractmethod
    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        """The public metrics of round ``t`` from its messages (``t = 0``: the start messages)."""

    @abstractmethod
    def global_vector(self) -> np.ndarray:
        """The current global vector w (``result.w``), computed from the messages only."""

    def pair(self, coordinator: Coordinator | None) -> None:
        """Meet the run's server (called once, before the first round): a monitor whose replay of the server's
        public bookkeeping is the server's own computation may let the server take its answers (`ADMMMonitor`);
        nothing by default."""

    def releases(self) -> list[np.ndarray] | None:
        """Every agent's latest released shared entries, in agent order (for ``result.average()``), or None when
        the monitor keeps none."""
        return None

    def stacked_releases(self) -> np.ndarray | None:
        """`releases` one after the other in one vector, when the monitor has them so (no copy; read-only), else
        None (the run stacks them)."""
        return None


class LatestReleases(Monitor):
    """A monitor's memory for decentralized methods: each agent's latest broadcast of one payload key,
    and their average (the global vector ``result.w``). Subclasses compute their metrics in ``observe``."""

    def __init__(self, problem: DistributedProblem, key: str) -> None:
        self.names = problem.names
        self.key = key
        self.latest: dict[str, np.ndarray] = {}
        self.w = np.zeros(problem.dim)

    def update(self, messages: list[Message]) -> np.ndarray:
        """Take the round's broadcasts; return every agent's latest one, stacked in agent order."""
        self.latest.update({m.sender: m[self.key] for m in messages if self.key in m.payload})
        stacked = np.stack([self.latest[name] for name in self.names])
        self.w = stacked.mean(axis=0)
        return stacked

    def releases(self) -> list[np.ndarray] | None:
        return [self.latest[name] for name in self.names] if len(self.latest) == len(self.names) else None

    def agreement(self, messages: list[Message]) -> dict[str, float]:
        """Take the round's broadcasts; return ``disagreement``, the largest pairwise distance of the agents'
        latest releases, and ``average_change``, how far their average moved (both public: from messages)."""
        previous = self.w
        stacked = self.update(messages)
        return {"disagreement": float(pdist(stacked).max(initial=0.0)) if len(stacked) > 1 else 0.0,
                "average_change": float(np.linalg.norm(self.w - previous))}

    def global_vector(self) -> np.ndarray:
        return self.w.copy()

    def state_dict(self) -> dict[str, Any]:
        return {"latest": self.latest, "w": self.w}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.latest, self.w = dict(state["latest"]), state["w"]


class StepMonitor(LatestReleases):
    """The gradient methods' public metrics: `LatestReleases.agreement` and the public step of the round (``underflow``:
    a geometric step may reach 0, `privcvx.schedules.checked_value`)."""

    def __init__(self, problem: DistributedProblem, key: str, step: Schedule, underflow: bool = False) -> None:
        super().__init__(problem, key)
        self.step, self.underflow = step, underflow

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        agreement = self.agreement(messages)
        if t == 0:
            return {}
        return {**agreement, "step": checked_value(self.step, t, argument="step", underflow=self.underflow)}


class Algorithm(ABC):
    """A distributed method: settings in ``__init__``, programs built per run; picklable.

    Subclasses set `name`, `columns` (the history columns in order, ``round``,
    ``epsilon`` and ``time_s`` included) and `diagnostic_columns` (the columns computed
    from private data, with how to reduce them over the agents), and implement
    `agent_program` and `monitor`.
    """

    name: ClassVar[str]
    #: Message exchanges per round; the runtime steps every party once per phase.
    phases: ClassVar[int] = 1
    #: The history columns, in order (problem metrics and gap columns follow them).
    columns: ClassVar[tuple[str, ...]]
    #: Columns computed from private data, each with its reducer over the agents.
    diagnostic_columns: ClassVar[Mapping[str, Reducer]] = {}
    #: Diagnostic columns holding sum_p f_p at some point: with a reference, ``<column>_gap`` = value - F*.
    objective_columns: ClassVar[tuple[str, ...]] = ()
    #: Whether the method needs convex objectives (a CVXPY solve or a convexity argument); a method that uses
    #: gradients alone sets False and accepts agents declared with a nonconvex objective and a gradient oracle.
    needs_convexity: ClassVar[bool] = True
    #: Whether a run's settings or programs depend on its number of rounds T (a budget split over T, a schedule
    #: of T steps, the last round's message): a checkpoint then resumes only a run of the same ``rounds``. A
    #: method whose rounds do not look at T (a noise scale per round alone) sets False, and its runs extend.
    calibrated_to_rounds: ClassVar[bool] = True

    # ---- settings (scikit-learn style) ----------------------------------------------------------------
    @classmethod
    def _parameter_names(cls) -> list[str]:
        return [name for name, parameter in inspect.signature(cls.__init__).parameters.items()
                if name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]

    def get_params(self) -> dict[str, Any]:
        """The constructor's arguments, as given."""
        return {name: getattr(self, name) for name in self._parameter_names()}

    def clone(self, **changes: Any) -> Algorithm:
        """A new algorithm with the same settings except ``changes``."""
        return type(self)(**{**copy.deepcopy(self.get_params()), **changes})

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and repr(self.get_params()) == repr(other.get_params())

    __hash__ = None  # settings may be mutable

    def __repr__(self) -> str:
        defaults = {name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()}
        shown = [f"{k}={v!r}" for k, v in self.get_params().items() if not _same(v, defaults.get(k))]
        return f"{type(self).__name__}({', '.join(shown)})"

    # ---- what a run asks of the algorithm -------------------------------------------------------------
    @property
    def private(self) -> bool:
        """Whether the algorithm adds noise (then every agent's ledger records its releases)."""
        return False

    #: The delta of a private run's (epsilon, delta) report: a class default, or a method's ``delta`` setting.
    _delta: float = 0.0

    @property
    def accounting_delta(self) -> float:
        """The delta at which the run's epsilon is reported (0 without privacy)."""
        return self._delta if self.private else 0.0

    def default_topology(self) -> Topology:
        """The topology used when ``solve`` is given none: the complete graph over the agents, unless a method
        needs another (a server's star, say)."""
        return Topology.complete()

    def topology_for(self, problem: DistributedProblem) -> Topology:
        """The topology used when ``solve`` is given none for ``problem``: `default_topology` unless the method
        derives its graph from the problem (the general-form decentralized ADMM: agents that share a key)."""
        return self.default_topology()

    def check(self, problem: DistributedProblem, topology: Topology) -> None:
        """Raise `UnsupportedError` for a problem or topology this method cannot run."""
        return None

    def prepare(self, problem: DistributedProblem, topology: Topology, rounds: int) -> Algorithm:
        """The algorithm ready for a run of ``rounds`` rounds (budgets calibrated, support checked); in the driver."""
        self.check(problem, topology)
        return self

    @abstractmethod
    def agent_program(self, agent: Agent, context: AgentContext) -> AgentProgram:
        """Agent p's program; called where the agent lives."""

    def coordinator(self, problem: DistributedProblem, topology: Topology) -> Coordinator | None:
        """The server, or None for a decentralized method."""
        return None

    @abstractmethod
    def monitor(self, problem: DistributedProblem, topology: Topology) -> Monitor:
        """The public-metric computer of a run."""

    #: The tolerance of `converged` when a method's ``tol`` is not given: the disagreement and the change of
    #: the average release, relative to max(1, ||w||) (measured in docs/algorithms.md, "Status").
    default_tol: ClassVar[float] = 1e-4

    def converged(self, metrics: Mapping[str, float], w: np.ndarray) -> bool | None:
        """Whether a round's public metrics meet the tolerance (``tol`` when given, else `default_tol`), or
        None for a method without a test on its public metrics.

        The test here: the largest disagreement of two agents' releases and the change of the average release
        both <= tol max(1, ||w||) (the change alone for a method that reports no disagreement). It reads the
        releases only (public metrics), so it holds under privacy too, where the noise may keep it from passing.
        """
        if "average_change" not in metrics:
            return None
        tol = getattr(self, "_tol", None) or self.default_tol
        bound = tol * max(1.0, float(np.linalg.norm(w)))
        return metrics["average_change"] <= bound and metrics.get("disagreement", 0.0) <= bound

    def divergence_step(self, metrics: Mapping[str, float]) -> float | None:
        """The public step of the round, by which the divergence test divides w's displacements, for a method whose
        steps are not summable (a decaying step moves w less each round even when f has no minimum); None (the
        default) compares the displacements themselves. Summable steps must return None: their iterates stay
        within sum_t gamma_t G of the start, so a displacement that does not shrink once divided is no sign."""
        return None

    def stop_reason(self, metrics: Mapping[str, float], w: np.ndarray) -> str | None:
        """A reason to stop after a round with these public metrics ("tolerance" once a given ``tol`` is met), or
        None; without a ``tol`` the run goes to its last round (its status still reads `converged`)."""
        if getattr(self, "_tol", None) is not None and self.converged(metrics, w):
            return "tolerance"
        return None

    def summarize(self, reports: list[dict[str, Any]]) -> dict[str, Any]:
        """Entries of ``result.info`` from the agents' `AgentProgram.report` s."""
        return {"agents": reports} if any(reports) else {}

    def privacy_report(self, table: pd.DataFrame, reports: list[dict[str, Any]]) -> pd.DataFrame:
        """The run's privacy table (``result.privacy``), given the ledgers' table of a private run and the agents'
        reports: a method with its own accountant adds its columns here (the table's rows stay one per agent)."""
        return table

    # ---- helpers for subclasses ------------------------------------------------------------------------
    def unsupported(self, feature: str, message: str, *, agent: str | None = None,
                    argument: str | None = None) -> UnsupportedError:
        """An [`UnsupportedError`][privcvx.errors.UnsupportedError] naming this algorithm and ``feature`` (to raise)."""
        return UnsupportedError(message, algorithm=type(self).__name__, feature=feature, agent=agent,
                                argument=argument)

    def require_consensus(self, problem: DistributedProblem) -> None:
        """Refuse general-form keys and private variables: every agent shares one whole vector."""
        if len(problem.keys) != 1:
            raise self.unsupported("general-form keys", f"the problem has {len(problem.keys)} shared keys "
                                   f"{problem.keys[:5]}; this method needs full consensus (each agent's shared=x)",
                                   argument="shared")
        for layout in problem.layouts:
            if layout.shared_local.size != layout.dim:
                raise self.unsupported("private variables", "the agent has variables it does not share",
                                       agent=layout.name, argument="shared")

    def require_convexity(self, problem: DistributedProblem) -> None:
        """Refuse an agent with a nonconvex objective when this method needs convexity (`needs_convexity`)."""
        if not self.needs_convexity:
            return
        for agent in problem.agents:
            if not agent.convex:
                raise self.unsupported("nonconvex objectives", "the objective is not convex DCP; use a gradient-only "
                                       "method such as pc.algorithms.DPP2", agent=agent.name, argument="objective")

    def require_decentralized(self, topology: Topology) -> None:
        """Refuse a star topology (a server): this method runs on a graph of agents."""
        if topology.is_star:
            raise self.unsupported("Topology.star()", "this is a decentralized method: give a graph over the agents",
                                   argument="topology")

    def require_star(self, topology: Topology) -> None:
        """Refuse any topology but the star: this method needs a server."""
        if not topology.is_star:
            raise self.unsupported("peer-to-peer topologies",
                                   f"it is server-based; use Topology.star() (agents talk to {SERVER!r})",
                                   argument="topology")


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and odd objects: treat as different
        return False
