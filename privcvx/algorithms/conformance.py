"""``check_algorithm``: the checks every algorithm must pass, as scikit-learn's ``check_estimator``.

1. Settings: the algorithm pickles, and ``clone()`` gives an equal one.
2. Defaults: constructed with no arguments it runs without privacy and reaches the centralized
   optimum of small well-conditioned, strongly convex problems it supports, on its default topology
   and (for decentralized methods) on a ring; problems it does not support are refused with an
   [`UnsupportedError`][privcvx.errors.UnsupportedError] naming it.
3. Determinism: the algorithm as given, with the same seed, gives the same transcript (bitwise)
   and history on every backend, and after a checkpoint and a resume.
4. Messages: every message in the transcript goes between neighbours of its round's graph; under
   privacy every agent's ledger holds at least one release per round, and (in every run, by the hosts) each
   release tagged with a payload key is what the step's message carries
   ([`check_releases`][privcvx.algorithms.base.check_releases]).
5. State: every agent program's ``state_dict`` round-trips through ``load_state_dict``, beside the runtime's part
   (the agent's noise stream and ledger, `AgentContext.state_dict`), and the restored program's next round
   sends the same messages and releases, bit for bit.

It runs real solves (and spawns worker processes for the process backend), so it takes seconds.
"""

from __future__ import annotations

import math
import pickle
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cvxpy as cp
import numpy as np

from privcvx.algorithms.base import AgentContext, AgentProgram, Algorithm
from privcvx.errors import UnsupportedError
from privcvx.messages import Message, Router, same_bits
from privcvx.privacy.mechanisms import Budget, Sensitivity
from privcvx.problem import Agent, DistributedProblem
from privcvx.topology import SERVER, Topology


def consensus_problem(agents: int = 4, n: int = 3, seed: int = 0, bound: float | None = 0.4) -> DistributedProblem:
    """Full consensus, well conditioned and strongly convex: f_i = ||A_i x - b_i||^2 / 10 over a box (none if
    ``bound`` is None).

    Each agent declares its smoothness 2 lambda_max(A_i^T A_i) / 10 and a gradient sensitivity
    (for private runs; the values are nominal, for the checks only).
    """
    rng = np.random.default_rng(seed)
    declared = []
    for _ in range(agents):
        a = np.eye(n) + 0.3 * rng.normal(size=(n, n))
        b = rng.normal(size=n)
        x = cp.Variable(n)
        box = [] if bound is None else [x >= -bound, x <= bound]
        declared.append(Agent(cp.sum_squares(a @ x - b) / 10, box, shared=x,
                              smoothness=2 * float(np.linalg.eigvalsh(a.T @ a).max()) / 10,
                              sensitivity=Sensitivity(l1=0.1, l2=0.1)))
    return DistributedProblem(declared)


def general_form_problem(seed: int = 1) -> DistributedProblem:
    """General form: three agents share overlapping keys "a", "b", "c" and hold a private variable each."""
    rng = np.random.default_rng(seed)
    declared = []
    for keys in (("a", "b"), ("b", "c"), ("a", "c")):
        v, y = cp.Variable(4), cp.Variable(1)
        a = np.eye(5) + 0.3 * rng.normal(size=(5, 5))
        b = rng.normal(size=5)
        declared.append(Agent(cp.sum_squares(a @ cp.hstack([v, y]) - b) / 10, [v >= -0.5, v <= 0.5, y >= -1, y <= 1],
                              shared={keys[0]: v[:2], keys[1]: v[2:]},
                              smoothness=2 * float(np.linalg.eigvalsh(a.T @ a).max()) / 10,
                              sensitivity=Sensitivity(l1=0.1, l2=0.1)))
    return DistributedProblem(declared)


def _fail(check: str, message: str) -> AssertionError:
    return AssertionError(f"check_algorithm [{check}]: {message}")


def _relative_gap(value: float, optimum: float) -> float:
    return abs(value - optimum) / max(1.0, abs(optimum))


def _same_history(a: Any, b: Any) -> bool:
    columns = [c for c in a.history.columns if c != "time_s"]
    return list(a.history.columns) == list(b.history.columns) and a.history[columns].equals(b.history[columns])


def check_settings(algorithm: Algorithm) -> None:
    """The settings survive pickling and ``clone()`` unchanged (they travel to worker processes)."""
    restored = pickle.loads(pickle.dumps(algorithm))
    if restored != algorithm or algorithm.clone() != algorithm:
        raise _fail("settings", f"{algorithm!r} does not survive pickling or clone()")


def check_reaches_optimum(algorithm: Algorithm, *, rounds: int, gap: float) -> list[str]:
    """The default-constructed algorithm reaches the centralized optimum on the problems it supports."""
    default = type(algorithm)()
    if default.private:
        raise _fail("defaults", f"{type(algorithm).__name__}() adds noise; constructed with no arguments it must not")
    checked = []
    problems = (("unconstrained consensus", consensus_problem(bound=None)), ("consensus", consensus_problem()),
                ("general form", general_form_problem()))
    for label, problem in problems:
        topologies = [None] if default.default_topology().is_star else [None, Topology.ring()]
        reference = None
        for topology in topologies:
            try:
                # seed=0: a method that randomizes even without privacy (random aggregators) is checked reproducibly
                result = problem.solve(default, topology, rounds=rounds, seed=0)
            except UnsupportedError as error:
                if type(algorithm).__name__ not in str(error):
                    raise _fail("support", f"the refusal does not name the algorithm: {error}") from error
                checked.append(f"{label}: refused ({error.feature})")
                break
            reference = reference or problem.solve_centralized()
            column = default.objective_columns[0]
            reached = _relative_gap(float(result.history[column].iloc[-1]), reference.value)
            if not reached <= gap:
                raise _fail("defaults", f"{label} on {result.info['topology']}: relative gap {reached:.3g} > {gap} "
                                        f"after {rounds} rounds")
            checked.append(f"{label} on {result.info['topology']}: gap {reached:.2e}")
    return checked


def supported_problem(algorithm: Algorithm) -> DistributedProblem:
    """A 3-agent consensus problem the algorithm accepts on its default topology: with a box if it can."""
    for bound in (0.4, None):
        problem = consensus_problem(agents=3, bound=bound)
        try:
            algorithm.check(problem, algorithm.default_topology().bind(problem.names))
        except UnsupportedError:
            continue
        return problem
    raise _fail("support", f"{type(algorithm).__name__} accepts no full-consensus problem on its default topology")


def check_determinism(algorithm: Algorithm, *, rounds: int, backends: Sequence[str]) -> None:
    """Same seed, same transcript and history: on every backend, and after a checkpoint and resume."""
    problem = supported_problem(algorithm)
    base = problem.solve(algorithm, rounds=rounds, seed=5)
    for backend in backends[1:]:
        other = problem.solve(algorithm, rounds=rounds, seed=5, backend=backend)
        if not (base.transcript.same_as(other.transcript) and _same_history(base, other)):
            raise _fail("determinism", f"backend {backend!r} differs from {backends[0]!r}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.ckpt"
        stop_after = max(1, rounds // 2)
        problem.solve(algorithm, rounds=rounds, seed=5, checkpoint=path, callback=lambda row: row["round"] < stop_after)
        resumed = problem.solve(algorithm, rounds=rounds, seed=5, resume=path)
    if not (base.transcript.same_as(resumed.transcript) and _same_history(base, resumed)
            and np.array_equal(base.w, resumed.w)):
        raise _fail("determinism", "a run resumed from a checkpoint differs from the uninterrupted one")
    check_messages(algorithm, base, problem, rounds)


def check_messages(algorithm: Algorithm, result: Any, problem: DistributedProblem, rounds: int) -> None:
    """Every message goes between neighbours of its round's graph; under privacy, ledgers grow every round."""
    topology = (algorithm.default_topology()).bind(problem.names)
    if len(result.transcript) == 0:
        raise _fail("messages", "the transcript is empty")
    for message in result.transcript:
        neighbours = topology.neighbours(message.sender, message.round)
        if message.receiver is not None and message.receiver not in neighbours:
            raise _fail("messages", f"{message.sender} -> {message.receiver} in round {message.round} is not an edge")
        if topology.is_star and SERVER not in (message.sender, message.receiver):
            raise _fail("messages", f"under the star every message goes to or from the server: {message.sender}")
    if algorithm.private:
        steps = result.privacy["steps"].to_numpy()
        basic = result.privacy["epsilon_basic"].to_numpy()
        if np.any(steps < rounds) or np.any(np.isinf(basic)):
            raise _fail("privacy", f"ledgers record {steps.tolist()} releases over {rounds} rounds")
        if np.any(np.isnan(basic)) and not (_budget_calibrated(algorithm)
                                            and np.all(np.isfinite(result.privacy["epsilon_pld"]))):
            raise _fail("privacy", "a ledger has no basic composition (NaN), which only a pc.Budget's Gaussian "
                                   "releases may lack (no per-update (epsilon, delta); their PLD is finite)")
        if not 0 < result.history["epsilon"].iloc[-1] < np.inf:
            raise _fail("privacy", "a private run reports epsilon 0 or infinity")


def _budget_calibrated(algorithm: Algorithm) -> bool:
    """Whether ``algorithm`` holds a ``pc.Budget`` among its settings (its noise calibrated to a total)."""
    return any(isinstance(value, Budget) for value in vars(algorithm).values())


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) \
            and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


class _Exchange:
    """The runtime's exchange in miniature, in one process: for driving agent programs outside a run."""

    def __init__(self, algorithm: Algorithm, problem: DistributedProblem, topology: Topology,
                 programs: list[AgentProgram], contexts: list[AgentContext]) -> None:
        self.algorithm, self.names, self.programs, self.contexts = algorithm, problem.names, programs, contexts
        self.router = Router(topology, problem.names)
        self.coordinator = algorithm.coordinator(problem, topology)
        if self.coordinator is not None:
            self.router.post(self.coordinator.start(), 0)
        self._post([program.start() for program in programs], 0)

    def _post(self, sent: list[list[Message]], t: int) -> None:
        for messages, context in zip(sent, self.contexts, strict=True):
            self.router.post(messages, t)
            context.take_releases()

    def inbox(self, t: int, phase: int) -> list[Message]:
        """Step the coordinator (if any) in round t's phase; return agent 0's inbox, leaving the other agents'."""
        if self.coordinator is not None:
            self.router.post(self.coordinator.step(t, self.router.take(SERVER), **_phase(self.algorithm, phase)), t)
        return self.router.take(self.names[0])

    def round(self, t: int) -> None:
        for phase in range(self.algorithm.phases):
            first = self.inbox(t, phase)
            inboxes = [first, *(self.router.take(name) for name in self.names[1:])]
            self._post([program.step(t, inbox, **_phase(self.algorithm, phase))
                        for program, inbox in zip(self.programs, inboxes, strict=True)], t)


def _phase(algorithm: Algorithm, phase: int) -> dict[str, int]:
    return {"phase": phase} if algorithm.phases > 1 else {}


def _same_messages(a: list[Message], b: list[Message]) -> bool:
    return len(a) == len(b) and all(x.same_as(y) for x, y in zip(a, b, strict=True))


def check_state_round_trip(algorithm: Algorithm, *, rounds: int = 2) -> None:
    """An agent program restored from its ``state_dict`` continues bitwise like the original.

    Every agent runs ``rounds`` rounds in a miniature exchange; agent 0's state (with its noise stream and ledger,
    through pickle) is then loaded into a fresh program built with another seed, and both take the next round with
    the same inbox: their messages and releases must be equal bit for bit, and the state must round-trip."""
    problem = supported_problem(algorithm)
    topology = algorithm.default_topology().bind(problem.names)
    ready = algorithm.prepare(problem, topology, rounds=rounds + 2)

    def programs(seed: int) -> tuple[list[AgentProgram], list[AgentContext]]:
        contexts = [AgentContext.for_agent(problem, i, seed=seed, topology=topology, rounds=rounds + 2)
                    for i in range(len(problem.agents))]
        return [ready.agent_program(agent, c) for agent, c in zip(problem.agents, contexts, strict=True)], contexts

    (first, first_contexts), (fresh, fresh_contexts) = programs(1), programs(2)
    exchange = _Exchange(ready, problem, topology, first, first_contexts)
    for t in range(1, rounds + 1):
        exchange.round(t)
    state = pickle.loads(pickle.dumps({"program": first[0].state_dict(), "context": first_contexts[0].state_dict()}))
    fresh_contexts[0].load_state_dict(state["context"])
    fresh[0].load_state_dict(state["program"])
    if not _equal({"program": fresh[0].state_dict(), "context": fresh_contexts[0].state_dict()}, state):
        raise _fail("state", "state_dict -> load_state_dict -> state_dict changed the state")
    inbox = exchange.inbox(rounds + 1, 0)
    sent = [program.step(rounds + 1, list(inbox), **_phase(ready, 0)) for program in (first[0], fresh[0])]
    released = [context.take_releases() for context in (first_contexts[0], fresh_contexts[0])]
    if not _same_messages(*sent):
        raise _fail("state", f"restored after round {rounds}, the program's next messages differ from the original's")
    if not (len(released[0]) == len(released[1])
            and all(same_bits(np.asarray(x.value), np.asarray(y.value)) for x, y in zip(*released, strict=True))):
        raise _fail("state", f"restored after round {rounds}, the program's next releases differ from the original's")


def check_algorithm(algorithm: Algorithm, *, rounds: int = 300, gap: float = 1e-3, short_rounds: int = 6,
                    backends: Sequence[str] = ("serial", "process")) -> dict[str, Any]:
    """Run the conformance checks on ``algorithm``; raise AssertionError naming the first that fails.

    ``rounds`` and ``gap`` set the optimum check of the default-constructed algorithm (relative gap of
    its first objective column after ``rounds`` rounds); ``short_rounds`` the runs of the determinism,
    message and privacy checks, which use ``algorithm`` as given. Returns what was checked.
    """
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"check_algorithm takes a privcvx Algorithm, got {algorithm!r}")
    check_settings(algorithm)
    optimum = check_reaches_optimum(algorithm, rounds=rounds, gap=gap)
    check_determinism(algorithm, rounds=short_rounds, backends=backends)
    check_state_round_trip(algorithm)
    return {"algorithm": repr(algorithm), "optimum": optimum, "backends": list(backends),
            "rounds": short_rounds}
