"""Backends: where the agents' programs run, behind one protocol.

An `AgentHost` holds some agents' programs (built where it lives, from the algorithm
and each agent's context) and answers the generic calls of the run loop: ``start``, ``step``,
``diagnostics``, ``outputs``, ``reports``, ``states``, ``load_states``, each with one answer per
agent. Nothing in it is specific to an algorithm. A backend offers ``call(method, *args)`` and
``call_split(method, per_agent, *args)`` (the per-agent list is cut along the hosts) and merges
the hosts' answers into agent order.

* ``"serial"`` (`SerialBackend`): one host in this process.
* ``"process"`` (`ProcessBackend`): one host per worker process (one group of agents
  per core, the groups balanced by the agents' public sizes, `agent_sizes`), driven through
  pipes. Workers are spawned, not forked, so a script must start the
  run under ``if __name__ == "__main__":``; each worker builds its agents' programs itself.
* ``"ray"`` (`RayBackend`): one host per Ray actor (one group of agents per CPU of the
  Ray cluster, or one actor per agent), on a local Ray instance started on first use, or on the
  cluster named by ``backend=Ray(address=...)`` (`Ray`; see docs/deployment.md).

Every backend is a context manager and closes its workers on every way out. Results are
identical on every backend for a given seed: each agent draws from its own noise stream.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import itertools
import multiprocessing as mp
import os
import pickle
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext, Algorithm, check_releases
from privcvx.errors import AgentError, CheckpointError, ParameterError, PrivcvxError, WorkerTimeout, check_int
from privcvx.messages import Message
from privcvx.problem import Agent, AgentSpec, DistributedProblem
from privcvx.runtime import checkpoint as checkpoints

#: A host's answer to ``start`` and ``step``, per agent: the messages it sent and the ledger entries it recorded
#: (mechanism, count, nominal reason).
StepReply = list[tuple[list[Message], list[tuple[Any, int, str | None]]]]

#: The default of ``solve(timeout=...)``: the seconds the driver waits for any one answer of a worker process or a
#: Ray actor (a round's step, the set-up, a report) before the run fails with ``RunFailed``.
DEFAULT_TIMEOUT = 600.0

#: The seconds `ProcessBackend.close` gives a worker to answer and exit before it is killed.
CLOSE_TIMEOUT = 5.0


def _largest_id(node: Any) -> int:
    """The largest CVXPY id in an expression or constraint tree."""
    return max([getattr(node, "id", 0), *(_largest_id(arg) for arg in getattr(node, "args", ()))])


def reserve_cvxpy_ids(agents: Sequence[Agent]) -> None:
    """Move this process's CVXPY id counter past every id of the agents' expressions.

    Agents unpickled in a fresh worker keep the ids they had in the driver, while the worker's counter starts
    again at 1: the variables a program then creates (its local step's) would share ids with the agent's.
    """
    from cvxpy.lin_ops.lin_utils import ID_COUNTER

    largest = max((_largest_id(node) for agent in agents for node in [agent.objective, *agent.constraints]),
                  default=0)
    ID_COUNTER.count = max(ID_COUNTER.count, largest + 1)


def write_shard(path: str | os.PathLike, header: dict[str, Any], state: dict[str, Any], next_round: int) -> str:
    """Write an agent's state before ``next_round`` to its round-stamped shard
    ([`shard_file`][privcvx.runtime.checkpoint.shard_file]); return the file's SHA-256 (the driver records it)."""
    return checkpoints.write_state(checkpoints.shard_file(path, next_round), {**header, "round": next_round}, state)


def read_shard(path: str | os.PathLike, header: dict[str, Any], digest: Any, next_round: int) -> dict[str, Any]:
    """An agent's state from its shard of ``next_round``, refused unless it is the one the driver's checkpoint
    recorded and was written for this agent's data and factory (``header``)."""
    file = checkpoints.shard_file(path, next_round)
    try:
        data = checkpoints.read_regular(file, "resume")
    except CheckpointError as exc:
        raise CheckpointError(f"the agent's checkpoint shard {os.fspath(file)!r} is missing or unusable: {exc}",
                              argument="resume") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise CheckpointError(f"the shard {os.fspath(file)!r} is not the one the driver's checkpoint recorded "
                              "(another round or run, or edited)", argument="resume")
    return checkpoints.read_state(file, {**header, "round": next_round}, data=data)


def shard_header(spec: AgentSpec, agent: Agent) -> dict[str, Any]:
    """What an agent's shard must match besides its round: its name, its factory with the factory's arguments, and
    a digest of the data the factory built (a changed data file behind the same factory is refused)."""
    return {"agent": spec.name, "factory": checkpoints.factory_description(spec),
            "data": checkpoints.data_digest([agent.objective, *agent.constraints])}


def _built(agents: Sequence[Agent | AgentSpec], contexts: Sequence[AgentContext]) -> tuple[list[Agent],
                                                                                       list[AgentContext]]:
    """The agents, those given by an [`AgentSpec`][privcvx.problem.AgentSpec] built here by its factory; their contexts
    get the built agent's whole layout (the driver's holds the shared keys only)."""
    built, ready = [], []
    for agent, context in zip(agents, contexts, strict=True):
        if isinstance(agent, AgentSpec):
            try:
                agent, layout = agent.build()
            except PrivcvxError:
                raise
            except Exception as exc:  # the user's factory (a missing file, a bad format)
                raise AgentError(f"{type(exc).__name__} in the agent's factory: {exc}", agent=agent.name,
                                 argument="factory") from exc
            context = replace(context, layout=layout)
        built.append(agent)
        ready.append(context)
    return built, ready


class AgentHost:
    """Some agents' programs, run one after the other in the current process."""

    def __init__(self, algorithm: Algorithm, agents: Sequence[Agent | AgentSpec],
                 contexts: Sequence[AgentContext]) -> None:
        self.shards = [agent.shard if isinstance(agent, AgentSpec) else None for agent in agents]
        specs = agents
        agents, contexts = _built(agents, contexts)
        self.shard_headers = [shard_header(spec, agent) if shard is not None else None
                              for spec, agent, shard in zip(specs, agents, self.shards, strict=True)]
        self.shard_rounds: list[set[int] | None] = [None] * len(agents)  # the stamped shards on disk, once seen
        reserve_cvxpy_ids(agents)
        self.contexts = list(contexts)
        self.phases = algorithm.phases
        self.timed = any(context.diagnostics for context in self.contexts)  # usage() reports busy_s only then
        self.busy = [0.0] * len(self.contexts)  # the seconds each program spent in its rounds' steps
        self.cpu = [0.0] * len(self.contexts)  # and the CPU seconds of this thread in them
        self.programs = self._each(lambda agent, context: algorithm.agent_program(agent, context), self.contexts,
                                   where="while building the agent's program", targets=agents)

    def _checked(self, context: AgentContext, messages: list[Message]) -> list[Message]:
        for message in messages:
            if not isinstance(message, Message) or message.sender != context.name:
                raise PrivcvxError(f"a program may only send Messages from its own agent, got {message!r}",
                                   agent=context.name, argument="messages")
        return messages

    def _each(self, call: Callable[[Any, Any], Any], items: Sequence[Any] | None = None, where: str = "",
              targets: Sequence[Any] | None = None, timed: bool = False) -> list[Any]:
        """``call(target, item)`` for every agent's program (or ``targets``), in agent order; an exception that is
        not a privcvx error (a user oracle, numpy, CVXPY, a solver) becomes an AgentError naming the agent, with it
        as ``__cause__``. ``timed``: add each call's duration to its agent's busy time (in runs that keep
        diagnostics, the only ones whose `usage` reports it)."""
        targets = self.programs if targets is None else targets
        timed = timed and self.timed
        answers = []
        # one reading of the clocks between two calls: the end of one agent's call is the start of the next's
        start, cpu = (time.perf_counter(), time.thread_time()) if timed else (0.0, 0.0)
        for i, (context, program, item) in enumerate(zip(self.contexts, targets, items or [None] * len(self.contexts),
                                                         strict=True)):
            try:
                answers.append(call(program, item))
            except PrivcvxError as exc:
                if exc.agent is None:
                    exc.agent = context.name
                raise
            except Exception as exc:
                raise AgentError(f"{type(exc).__name__} {where}: {exc}", agent=context.name) from exc
            if timed:
                now, now_cpu = time.perf_counter(), time.thread_time()
                self.busy[i] += now - start
                self.cpu[i] += now_cpu - cpu
                start, cpu = now, now_cpu
        return answers

    def _replies(self, sent: list[list[Message]]) -> StepReply:
        replies = []
        for context, messages in zip(self.contexts, sent, strict=True):
            check_releases(context.name, self._checked(context, messages), context.take_releases())
            replies.append((messages, context.ledger.take_new()))
        return replies

    def start(self) -> StepReply:
        """Every program's start messages, with the ledger entries they recorded."""
        return self._replies(self._each(lambda program, _: program.start(), where="at the start"))

    def step(self, inboxes: Sequence[list[Message]], t: int, phase: int) -> StepReply:
        """One phase of round ``t`` for every program, each with its inbox."""
        extra = {"phase": phase} if self.phases > 1 else {}
        return self._replies(self._each(lambda program, inbox: program.step(t, inbox, **extra), inboxes,
                                        where=f"in round {t}", timed=True))

    def usage(self) -> list[dict[str, Any]]:
        """Per agent, where it runs and what its host used: the node's name, the process id and the process's peak
        resident memory in MiB; in runs that keep diagnostics also the wall and CPU seconds the agent's program
        spent in its rounds' steps (``busy_s``, ``cpu_s``; on a loaded machine the wall time includes waiting for a
        core). Step times depend on the private data (solver iterations), so a release-only run leaves them out."""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        return [{"node": socket.gethostname(), "pid": os.getpid(), "peak_memory_mib": peak,
                 **({"busy_s": busy, "cpu_s": cpu} if context.diagnostics else {})}
                for context, busy, cpu in zip(self.contexts, self.busy, self.cpu, strict=True)]

    def diagnostics(self, w_parts: Sequence[np.ndarray]) -> list[dict[str, float]]:
        """Every program's diagnostics at its slice of the global vector (research runs)."""
        return self._each(lambda program, w_p: program.diagnostics(w_p), w_parts, where="in the diagnostics")

    def outputs(self, released_only: bool) -> list[np.ndarray]:
        """Every program's last release (``released_only``: only what it sent)."""
        return self._each(lambda program, _: program.output(released_only), where="in output()")

    def reports(self) -> list[dict[str, Any]]:
        """Every program's public report."""
        return self._each(lambda program, _: program.report(), where="in report()")

    def states(self) -> list[dict[str, Any]]:
        """Every agent's state (checkpoints): its program's and its noise stream's."""
        return self._each(lambda program, context: _agent_state(program, context), self.contexts,
                          where="in state_dict()")

    def load_states(self, items: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> list[None]:
        """Restore every agent's state from a checkpoint: (its `states` entry, the driver's copy of its ledger)."""
        return self._each(lambda program, item: _load_agent_state(program, item[0], *item[1]),
                          list(zip(self.contexts, items, strict=True)), where="in load_state_dict()")

    def write_shards(self, next_round: int, committed: int | None) -> list[str]:
        """Write every agent's state to its shard of ``next_round`` (per-host checkpoints); return the shards'
        digests. Then delete the agent's other shards but that of ``committed``, the round of the driver's state
        file on disk (None: none of this run yet), and temporary files a killed write left."""
        return self._each(lambda program, i: self._write_shard(i, program, next_round, committed),
                          list(range(len(self.contexts))), where="while writing its checkpoint shard")

    def _write_shard(self, i: int, program: Any, next_round: int, committed: int | None) -> str:
        path = self.shards[i]
        if path is None:
            raise ParameterError("a checkpoint of factory-built agents needs a shard path on every AgentSpec",
                                 agent=self.contexts[i].name, argument="shard")
        digest = write_shard(path, self.shard_headers[i], _agent_state(program, self.contexts[i]), next_round)
        known = self.shard_rounds[i]
        if known is None:  # the first write of this host: what earlier runs or kills left
            checkpoints.remove_temporaries(path)
            known = {stamp for stamp, _ in checkpoints.stamped_shards(path)}
        for stamp in known - {next_round, committed}:
            checkpoints.remove_shard(checkpoints.shard_file(path, stamp))
        self.shard_rounds[i] = {next_round} | ({committed} & known if committed is not None else set())
        return digest

    def read_shards(self, items: Sequence[tuple[Any, dict[str, Any]]], next_round: int) -> list[None]:
        """Restore every agent's state from its shard (checked against the driver's digest, the round, the agent's
        data and factory), with the driver's copy of its ledger: ``items`` holds (digest, ledger) per agent."""
        return self._each(lambda program, i: _load_agent_state(
            program, self.contexts[i], read_shard(self.shards[i], self.shard_headers[i], items[i][0], next_round),
            items[i][1]), list(range(len(self.contexts))), where="while reading its checkpoint shard")


def _agent_state(program: Any, context: AgentContext) -> dict[str, Any]:
    """An agent's state after a round: its program's and its noise stream's (its ledger, which grows with the
    rounds, is the driver's copy: the driver's append-only log keeps it)."""
    return {"program": program.state_dict(), "noise": context.noise.get_state()}


def _load_agent_state(program: Any, context: AgentContext, state: Any, ledger: dict[str, Any]) -> None:
    """Restore what `_agent_state` wrote, and the ledger (untrusted: a malformed state raises a CheckpointError)."""
    if not isinstance(state, dict) or set(state) != {"program", "noise"}:
        raise CheckpointError("not an agent's state (a checkpoint of another version?)", agent=context.name,
                              argument="resume")
    try:
        context.load_state_dict({"noise": state["noise"], "ledger": ledger})
        program.load_state_dict(state["program"])
    except PrivcvxError:
        raise
    except Exception as exc:  # noqa: BLE001 - an untrusted file: a state its program cannot take is damaged or foreign
        raise CheckpointError(f"its saved state does not fit its program ({type(exc).__name__}: {exc}): a checkpoint "
                              "of another version of the method, or damaged", agent=context.name,
                              argument="resume") from None


class SerialBackend:
    """Every agent in this process, one after the other (``timeout`` does not apply: nothing is waited for)."""

    interrupted = False

    def __init__(self, algorithm: Algorithm, problem: DistributedProblem, contexts: Sequence[AgentContext], *,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.host = AgentHost(algorithm, problem.agents, contexts)

    def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` of the host in this process."""
        return getattr(self.host, method)(*args)

    def call_split(self, method: str, per_agent: Sequence[Any], *args: Any) -> Any:
        """``method(per_agent, *args)``: ``per_agent`` holds one item per agent, in agent order."""
        return getattr(self.host, method)(per_agent, *args)

    def close(self) -> None:
        """Nothing to release: the agents live in this process."""
        return None

    def __enter__(self) -> SerialBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _worker(connection: Any, host_args: tuple) -> None:
    """A worker process: build the host here, then serve the driver's calls (one core each: its BLAS and OpenMP
    pools get one thread, as Ray gives its one-CPU actors)."""
    from threadpoolctl import threadpool_limits

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle: it collects the history
    threadpool_limits(1)
    try:
        host = AgentHost(*host_args)
        connection.send(("ok", None))
    except Exception as exc:  # report set-up failures to the driver
        connection.send(("error", exc))
        return
    while True:
        method, args = connection.recv()
        if method == "close":
            connection.send(("ok", None))
            return
        try:
            connection.send(("ok", getattr(host, method)(*args)))
        except Exception as exc:  # the driver re-raises it (it names the agent)
            connection.send(("error", exc))


class ProcessBackend:
    """Agents split into groups, one spawned worker process (holding an `AgentHost`) per group.

    Every wait for a worker's answer lasts at most ``timeout`` seconds (its start at most the larger of that and
    `DEFAULT_TIMEOUT`: a spawned interpreter imports CVXPY); a worker that does not answer in time (stuck,
    stopped) raises [`WorkerTimeout`][privcvx.errors.WorkerTimeout] naming its process and agents, and the backend
    is then lost (later calls fail at once; `close` kills the workers). The workers ignore SIGINT (they are spawned
    with it ignored): a Ctrl-C to the process group interrupts the driver alone, which drains the answers of the
    interrupted call before its next one.
    """

    interrupted = False  # set by the run loop on Ctrl-C

    def __init__(self, algorithm: Algorithm, problem: DistributedProblem, contexts: Sequence[AgentContext],
                 workers: int | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.groups = _groups(agent_sizes(problem), workers or os.cpu_count() or 1)
        self.names = [agent.name for agent in problem.agents]
        self.timeout = timeout
        self.lost: PrivcvxError | None = None  # set when a worker timed out or ended: the backend cannot go on
        context = mp.get_context("spawn")
        self.connections: list[Any] = []
        self.processes: list[Any] = []
        self.pending: list[int] = []  # answers sent for but not read, per worker (a call that Ctrl-C interrupted)
        try:
            for members in self.groups:
                parent, child = context.Pipe()
                args = (algorithm, [problem.agents[i] for i in members], [contexts[i] for i in members])
                process = context.Process(target=_worker, args=(child, args), daemon=True)
                try:
                    with sigint_ignored():  # the spawned interpreter inherits SIG_IGN, so Ctrl-C never kills it
                        process.start()
                except (pickle.PicklingError, AttributeError, TypeError) as exc:
                    raise PrivcvxError(
                        f"backend='process' sends each agent, its context (the topology included) and the algorithm "
                        f"to a worker process, which needs them picklable: {exc}. Gradient oracles, sensitivity "
                        "callables and time-varying graph functions must be module-level functions, "
                        "functools.partial objects or instances of classes",
                        agent=problem.agents[members[0]].name, argument="backend") from exc
                self.connections.append(parent)
                self.processes.append(process)
                self.pending.append(1)  # its set-up answer
            self._receive_all(max(timeout, DEFAULT_TIMEOUT))  # a worker's start (imports, building) may be slow
        except BaseException:
            self.close()
            raise

    def _host(self, k: int) -> str:
        members = [self.names[i] for i in self.groups[k]]
        return f"the worker process (pid {self.processes[k].pid}) hosting agents {members[:5]}" + \
            (" ..." if len(members) > 5 else "")

    def _receive(self, k: int, timeout: float | None = None) -> Any:
        """Worker ``k``'s next answer, within the timeout (Ctrl-C is held while a message is read, so that an
        interrupt never leaves half a message in the pipe)."""
        connection = self.connections[k]
        timeout = self.timeout if timeout is None else timeout
        if not connection.poll(timeout):
            self.lost = WorkerTimeout(f"{self._host(k)} did not answer within timeout={timeout:g} s (stuck, "
                                      "stopped or overloaded); it is stopped", agent=self.names[self.groups[k][0]],
                                      argument="timeout")
            raise self.lost
        try:
            with _sigint_held():
                status, payload = connection.recv()
                self.pending[k] -= 1
        except (EOFError, OSError):
            codes = [process.exitcode for process in self.processes]
            self.lost = PrivcvxError(
                f"{self._host(k)} ended unexpectedly (exit codes {codes}). Workers are spawned, so a script "
                "that runs privcvx with backend='process' must start it under `if __name__ == \"__main__\":`",
                agent=self.names[self.groups[k][0]], argument="backend")
            raise self.lost from None
        if status == "error":
            raise payload
        return payload

    def _receive_all(self, timeout: float | None = None) -> list[Any]:
        """Every worker's reply; a worker's error is raised only after all replies are read, so that no stale
        reply stays in a pipe (the partial result of a failed run is read right after). A timeout or a lost
        worker is raised at once."""
        replies, error = [], None
        for k in range(len(self.connections)):
            try:
                replies.append(self._receive(k, timeout))
            except Exception as exc:  # noqa: BLE001 - re-raised below, after draining the other pipes
                if self.lost is not None:
                    raise
                error = error or exc
        if error is not None:
            raise error
        return replies

    def _send(self, k: int, message: tuple) -> None:
        """Send a call to worker ``k``, after reading (and dropping) the answers of a call Ctrl-C interrupted."""
        if self.lost is not None:
            raise PrivcvxError(f"the backend lost a worker earlier in this run: {self.lost}", argument="backend")
        while self.pending[k] > 0:
            try:
                self._receive(k)
            except Exception:  # noqa: BLE001 - the interrupted call's answer (or error) is stale
                if self.lost is not None:
                    raise
        with _sigint_held():
            self.connections[k].send(message)
            self.pending[k] += 1

    def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` on every worker and gather the replies in agent order."""
        for k in range(len(self.connections)):
            self._send(k, (method, args))
        return _merge(self.groups, self._receive_all())

    def call_split(self, method: str, per_agent: Sequence[Any], *args: Any) -> Any:
        """Call ``method`` on every worker with its own agents' items of ``per_agent``."""
        for k, members in enumerate(self.groups):
            self._send(k, (method, ([per_agent[i] for i in members], *args)))
        return _merge(self.groups, self._receive_all())

    def close(self) -> None:
        """Stop the workers: each answers before it exits; one that does not within a few seconds (stuck, stopped,
        or after a timeout) is killed. Every worker is reaped."""
        for k, connection in enumerate(self.connections):
            if self.lost is not None:
                break
            try:
                connection.send(("close", ()))
                deadline = time.monotonic() + CLOSE_TIMEOUT
                for _ in range(self.pending[k] + 1):  # an interrupted call's answers, then close's
                    if not connection.poll(max(0.0, deadline - time.monotonic())):
                        break
                    connection.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
        for process in self.processes:
            process.join(timeout=0 if self.lost is not None else CLOSE_TIMEOUT)
            if process.is_alive():  # a worker that did not exit in time (stopped, stuck, a loaded machine): kill it
                process.kill()
                process.join()
        self.connections, self.processes, self.pending = [], [], []

    def __enter__(self) -> ProcessBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in the block (main thread only: elsewhere signals can be neither set nor delivered)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT blocked in the block and delivered after it (POSIX), so that a Ctrl-C never cuts a pipe message in
    two."""
    held = hasattr(signal, "pthread_sigmask") and _main_thread()
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def agent_sizes(problem: DistributedProblem) -> list[int]:
    """The public size of each agent's local problem, by which the backends balance their hosts: the entries of
    its variables plus those of its constraints (one per scalar constraint, a cone constraint counting its
    shape's entries); the cost of its local solves grows with both. Of an agent
    built by a factory ([`AgentSpec`][privcvx.problem.AgentSpec]) the driver knows only the shared entries."""
    return [layout.dim if isinstance(agent, AgentSpec) else
            layout.dim + sum(constraint.size for constraint in agent.constraints)
            for agent, layout in zip(problem.agents, problem.layouts, strict=True)]


#: Up to this many assignments of agents to groups, `_groups` tries them all (8 agents on 2 hosts: 128).
EXACT_GROUPING_LIMIT = 20_000


def _groups(sizes: Sequence[float], count: int) -> list[list[int]]:
    """Agents dealt into ``count`` groups (one host each) of nearly equal total size, each group in agent order.

    Few agents: the assignment with the smallest largest load, among all (the first agent in the first group).
    Many: longest processing time first (the largest agent joins the group with the least load so far), then
    single moves and swaps from the most loaded group to another while they lower the larger of the two loads.
    """
    count = max(1, min(len(sizes), count))
    if count ** (len(sizes) - 1) <= EXACT_GROUPING_LIMIT:
        best = min(itertools.product(range(count), repeat=len(sizes) - 1),
                   key=lambda rest: _largest_load(sizes, (0, *rest), count))
        groups = [[i for i, g in enumerate((0, *best)) if g == k] for k in range(count)]
        if all(groups):
            return groups
    heap = [(0.0, g) for g in range(count)]
    groups = [[] for _ in range(count)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        load, g = heapq.heappop(heap)
        groups[g].append(i)
        heapq.heappush(heap, (load + sizes[i], g))
    loads = [sum(sizes[i] for i in members) for members in groups]
    for _ in range(len(sizes) ** 2):  # each accepted change lowers the sorted loads; this bounds the search
        top = max(range(count), key=lambda g: (loads[g], -g))
        found = None
        for g in range(count):
            for a in groups[top] if g != top else []:
                for b in [None, *groups[g]]:
                    shift = sizes[a] - (0.0 if b is None else sizes[b])
                    worse = max(loads[top] - shift, loads[g] + shift)
                    if worse < loads[top] and (found is None or worse < found[0]):
                        found = (worse, g, a, b)
        if found is None:
            break
        _, g, a, b = found
        groups[top].remove(a)
        groups[g].append(a)
        if b is not None:
            groups[g].remove(b)
            groups[top].append(b)
        loads[top], loads[g] = (sum(sizes[i] for i in groups[top]), sum(sizes[i] for i in groups[g]))
    return [sorted(members) for members in groups]


def _largest_load(sizes: Sequence[float], assignment: Sequence[int], count: int) -> float:
    loads = [0.0] * count
    for size, g in zip(sizes, assignment, strict=True):
        loads[g] += size
    return max(loads)


def _merge(groups: list[list[int]], replies: list[list[Any]]) -> list[Any]:
    """Merge the groups' per-agent answers into agent order."""
    merged: list[Any] = [None] * sum(len(members) for members in groups)
    for members, reply in zip(groups, replies, strict=True):
        for i, value in zip(members, reply, strict=True):
            merged[i] = value
    return merged


@dataclass(frozen=True)
class Ray:
    """``solve(backend=Ray(...))``: run the agents in Ray actors, with options (``backend="ray"`` is ``Ray()``).

    Parameters
    ----------
    address:
        The Ray cluster to connect to (``ray.init(address=...)``: ``"auto"``, ``"ray://host:10001"``, or
        ``"host:6379"``). ``None``: the instance this process is already connected to, or else a local instance
        started on first use (``ray.init(num_cpus=os.cpu_count(), include_dashboard=False)``), which stays up
        for later runs until ``ray.shutdown()``.
    actors:
        How many actors host the agents (groups balanced by `agent_sizes`); default: one per CPU of
        the cluster, at most one per agent. Each actor reserves one CPU, or an equal share of the cluster's CPUs
        when there are more actors than CPUs.
    agent_options:
        ``{agent name: options for ray.remote}`` (for instance ``{"resources": {"utility-a": 1}}``, a custom
        resource that only the node holding that agent's data declares). When given, every agent gets an actor
        of its own, created with its options (an agent not named gets ``{}``).
    """

    address: str | None = None
    actors: int | None = None
    agent_options: Mapping[str, Mapping[str, Any]] | None = field(default=None)


#: The settings of a local Ray instance that the Ray backend starts: Ray runs its workers at niceness 15 by
#: default, below the driver and the process backend's workers, which on a shared machine slows the actors,
#: where the agents' work is done, by the other jobs' share (``RAY_worker_niceness=0`` sets it for ``ray start``).
LOCAL_RAY_CONFIG: dict[str, Any] = {"worker_niceness": 0}


class _HostActor:
    """The body of a Ray actor: an `AgentHost` built inside the actor, then called by method name."""

    def __init__(self) -> None:
        self.host: AgentHost | None = None

    def build(self, *host_args: Any) -> None:
        """Build the host (the agents' programs) inside this actor."""
        self.host = AgentHost(*host_args)

    def call(self, method: str, args: tuple) -> Any:
        """``host.method(*args)``."""
        return getattr(self.host, method)(*args)


#: The `ray_watchdog` processes this driver started (kept, so that they are reaped, and never collected running).
_WATCHDOGS: list[subprocess.Popen] = []


def start_watchdog(ray: Any) -> None:
    """Start a `privcvx.runtime.ray_watchdog` for the local Ray instance this driver has just started: if the driver
    is killed (SIGKILL, where it cannot shut Ray down), the watchdog kills the instance's processes. Linux only."""
    _WATCHDOGS[:] = [watchdog for watchdog in _WATCHDOGS if watchdog.poll() is None]
    if not sys.platform.startswith("linux"):
        return
    package = os.path.join(os.path.dirname(os.path.abspath(ray.__file__)), "")
    _WATCHDOGS.append(subprocess.Popen([sys.executable, str(Path(__file__).with_name("ray_watchdog.py")),
                                        str(os.getpid()), package], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # the optional extra
        raise ParameterError("backend='ray' needs Ray: pip install 'privcvx[ray]'", argument="backend") from exc
    return ray


class RayBackend:
    """Agents in Ray actors, each holding an `AgentHost` for one group of agents (or one agent).

    Every wait for an actor lasts at most ``timeout`` seconds (then [`WorkerTimeout`][privcvx.errors.WorkerTimeout]
    naming the actor's node and agents; the backend is lost). After a Ctrl-C (``interrupted``), `close` also shuts
    down the local Ray instance this backend started, so that none of Ray's processes outlives the interrupted run;
    and a local instance it starts is watched by a `privcvx.runtime.ray_watchdog`, which kills its processes within
    seconds if the driver is killed.
    """

    interrupted = False  # set by the run loop on Ctrl-C

    def __init__(self, algorithm: Algorithm, problem: DistributedProblem, contexts: Sequence[AgentContext],
                 options: Ray | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        options = options or Ray()
        self.ray = ray = _ray()
        self.timeout = timeout
        self.lost: PrivcvxError | None = None
        self.started = not ray.is_initialized()  # a local instance (or connection) this backend began
        if not ray.is_initialized():
            settings: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                        "configure_logging": False}
            if options.address is None:  # a local instance, whose actors run at the driver's priority
                settings.update(num_cpus=os.cpu_count() or 1, _system_config=LOCAL_RAY_CONFIG)
            ray.init(address=options.address, **settings)
            if options.address is None:
                start_watchdog(ray)
        size = len(problem.agents)
        names = [agent.name for agent in problem.agents]
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        if options.agent_options is not None:
            unknown = sorted(set(options.agent_options) - set(names))
            if unknown:
                raise ParameterError(f"agent_options names agents the problem does not have: {unknown}",
                                     argument="backend")
            self.groups = [[i] for i in range(size)]
            per_actor = [dict(options.agent_options.get(name, {})) for name in names]
        else:
            count = int(cpus) if options.actors is None else options.actors
            self.groups = _groups(agent_sizes(problem), check_int(count, argument="actors"))
            per_actor = [{} for _ in self.groups]
        share = min(1.0, cpus / len(self.groups))  # more actors than CPUs share them
        self.names = names
        remote = ray.remote(_HostActor)
        self.actors: list[Any] = []
        try:
            for actor_options in per_actor:
                self.actors.append(remote.options(**{"num_cpus": share, "max_restarts": 0, **actor_options}).remote())
            self._wait([actor.build.remote(algorithm, [problem.agents[i] for i in members],
                                           [contexts[i] for i in members])
                        for actor, members in zip(self.actors, self.groups, strict=True)])
        except BaseException:
            self.close()
            raise

    def _wait(self, refs: list[Any]) -> list[Any]:
        """Every actor's answer; the first failure is raised after all have answered (an agent's error as
        itself, a lost actor as a PrivcvxError naming its first agent)."""
        if self.lost is not None:
            raise PrivcvxError(f"the backend lost an actor earlier in this run: {self.lost}", argument="backend")
        answers, error = [], None
        for members, ref in zip(self.groups, refs, strict=True):
            try:
                answers.append(self.ray.get(ref, timeout=self.timeout))
            except self.ray.exceptions.GetTimeoutError:
                self.lost = WorkerTimeout(f"the Ray actor hosting agents {[self.names[i] for i in members][:5]} did "
                                          f"not answer within timeout={self.timeout:g} s (stuck, stopped or "
                                          "overloaded); it is stopped", agent=self.names[members[0]],
                                          argument="timeout")
                raise self.lost from None
            except self.ray.exceptions.RayTaskError as exc:
                error = error or (exc.cause if isinstance(exc.cause, Exception) else exc)
            except self.ray.exceptions.RayError as exc:  # the actor died or its node was lost
                error = error or PrivcvxError(
                    f"the Ray actor hosting agents {[self.names[i] for i in members]} was lost: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                    agent=self.names[members[0]], argument="backend")
        if error is not None:
            raise error
        return answers

    def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` on every actor's host and gather the answers in agent order."""
        return _merge(self.groups, self._wait([actor.call.remote(method, args) for actor in self.actors]))

    def call_split(self, method: str, per_agent: Sequence[Any], *args: Any) -> Any:
        """Call ``method`` on every actor's host with its own agents' items of ``per_agent``."""
        return _merge(self.groups, self._wait([actor.call.remote(method, ([per_agent[i] for i in members], *args))
                                        for actor, members in zip(self.actors, self.groups, strict=True)]))

    def close(self) -> None:
        """Stop the actors (the Ray instance stays up for later runs, unless the run was interrupted and this
        backend started it)."""
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - an actor already gone needs no stopping
                pass
        self.actors = []
        if self.interrupted and self.started:
            self.ray.shutdown()

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: Backends by name (``solve(backend=...)``).
BACKENDS: dict[str, type] = {"serial": SerialBackend, "process": ProcessBackend, "ray": RayBackend}

#: Backend option objects by class: ``solve(backend=Ray(address=...))`` runs the backend named here with them.
BACKEND_OPTIONS: dict[type, str] = {Ray: "ray"}

_Backend = SerialBackend | ProcessBackend | RayBackend


def make_backend(backend: str | Ray, algorithm: Algorithm, problem: DistributedProblem,
                 contexts: Sequence[AgentContext], *, timeout: float = DEFAULT_TIMEOUT) -> _Backend:
    """The backend registered under ``backend`` in `BACKENDS` (or an options object of
    `BACKEND_OPTIONS`), hosting every agent's program; ``timeout``: the longest wait for one answer of a host."""
    if type(backend) in BACKEND_OPTIONS:
        return BACKENDS[BACKEND_OPTIONS[type(backend)]](algorithm, problem, contexts, backend, timeout=timeout)
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ParameterError(f"must be one of {sorted(BACKENDS)} or a pc.runtime.Ray(...), got {backend!r}",
                             argument="backend")
    return BACKENDS[backend](algorithm, problem, contexts, timeout=timeout)
