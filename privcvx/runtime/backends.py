"""Backends: where the agents' programs run, behind one protocol.

An :class:`AgentHost` holds some agents' programs (built where it lives, from the algorithm
and each agent's context) and answers the generic calls of the run loop: ``start``, ``step``,
``diagnostics``, ``outputs``, ``reports``, ``states``, ``load_states``, each with one answer per
agent. Nothing in it is specific to an algorithm. A backend offers ``call(method, *args)`` and
``call_split(method, per_agent, *args)`` (the per-agent list is cut along the hosts) and merges
the hosts' answers into agent order.

* ``"serial"`` (:class:`SerialBackend`): one host in this process.
* ``"process"`` (:class:`ProcessBackend`): one host per worker process (one group of agents
  per core), driven through pipes. Workers are spawned, not forked, so a script must start the
  run under ``if __name__ == "__main__":``; each worker builds its agents' programs itself.

Every backend is a context manager and closes its workers on every way out. Results are
identical on every backend for a given seed: each agent draws from its own noise stream.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from privcvx.algorithms.base import AgentContext, Algorithm
from privcvx.errors import AgentError, ParameterError, PrivcvxError
from privcvx.messages import Message
from privcvx.problem import Agent, DistributedProblem

#: A host's answer to ``start`` and ``step``, per agent: the messages it sent and the ledger entries it recorded.
StepReply = list[tuple[list[Message], list[tuple[Any, int]]]]


class AgentHost:
    """Some agents' programs, run one after the other in the current process."""

    def __init__(self, algorithm: Algorithm, agents: Sequence[Agent], contexts: Sequence[AgentContext]) -> None:
        self.contexts = list(contexts)
        self.phases = algorithm.phases
        self.programs = self._each(lambda agent, context: algorithm.agent_program(agent, context), self.contexts,
                                   where="while building the agent's program", targets=agents)

    def _checked(self, context: AgentContext, messages: list[Message]) -> list[Message]:
        for message in messages:
            if not isinstance(message, Message) or message.sender != context.name:
                raise PrivcvxError(f"a program may only send Messages from its own agent, got {message!r}",
                                   agent=context.name, argument="messages")
        return messages

    def _each(self, call: Callable[[Any, Any], Any], items: Sequence[Any] | None = None, where: str = "",
              targets: Sequence[Any] | None = None) -> list[Any]:
        """``call(target, item)`` for every agent's program (or ``targets``), in agent order; an exception that is
        not a privcvx error (a user oracle, numpy, CVXPY, a solver) becomes an AgentError naming the agent, with it
        as ``__cause__``."""
        targets = self.programs if targets is None else targets
        answers = []
        for context, program, item in zip(self.contexts, targets, items or [None] * len(self.contexts), strict=True):
            try:
                answers.append(call(program, item))
            except PrivcvxError as exc:
                if exc.agent is None:
                    exc.agent = context.name
                raise
            except Exception as exc:
                raise AgentError(f"{type(exc).__name__} {where}: {exc}", agent=context.name) from exc
        return answers

    def _replies(self, sent: list[list[Message]]) -> StepReply:
        return [(self._checked(c, messages), c.ledger.take_new()) for c, messages in zip(self.contexts, sent,
                                                                                          strict=True)]

    def start(self) -> StepReply:
        """Every program's start messages, with the ledger entries they recorded."""
        return self._replies(self._each(lambda program, _: program.start(), where="at the start"))

    def step(self, inboxes: Sequence[list[Message]], t: int, phase: int) -> StepReply:
        """One phase of round ``t`` for every program, each with its inbox."""
        extra = {"phase": phase} if self.phases > 1 else {}
        return self._replies(self._each(lambda program, inbox: program.step(t, inbox, **extra), inboxes,
                                        where=f"in round {t}"))

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
        """Every program's state (checkpoints)."""
        return self._each(lambda program, _: program.state_dict(), where="in state_dict()")

    def load_states(self, states: Sequence[dict[str, Any]]) -> list[None]:
        """Restore every program's state from a checkpoint."""
        return self._each(lambda program, state: program.load_state_dict(state), states, where="in load_state_dict()")


class SerialBackend:
    """Every agent in this process, one after the other."""

    def __init__(self, algorithm: Algorithm, problem: DistributedProblem, contexts: Sequence[AgentContext]) -> None:
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
    """A worker process: build the host here, then serve the driver's calls."""
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
    """Agents split into groups, one spawned worker process (holding an :class:`AgentHost`) per group."""

    def __init__(self, algorithm: Algorithm, problem: DistributedProblem, contexts: Sequence[AgentContext],
                 workers: int | None = None) -> None:
        count = min(len(problem.agents), workers or os.cpu_count() or 1)
        self.groups = [list(range(i, len(problem.agents), count)) for i in range(count)]
        self.size = len(problem.agents)
        context = mp.get_context("spawn")
        self.connections: list[Any] = []
        self.processes: list[Any] = []
        try:
            for members in self.groups:
                parent, child = context.Pipe()
                args = (algorithm, [problem.agents[i] for i in members], [contexts[i] for i in members])
                process = context.Process(target=_worker, args=(child, args), daemon=True)
                try:
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
            self._receive_all()
        except BaseException:
            self.close()
            raise

    def _receive(self, connection: Any) -> Any:
        try:
            status, payload = connection.recv()
        except EOFError:
            codes = [process.exitcode for process in self.processes]
            raise PrivcvxError(
                f"a worker process ended unexpectedly (exit codes {codes}). Workers are spawned, so a script "
                "that runs privcvx with backend='process' must start it under `if __name__ == \"__main__\":`",
                argument="backend") from None
        if status == "error":
            raise payload
        return payload

    def _gather(self, replies: list[list[Any]]) -> list[Any]:
        """Merge the groups' per-agent answers into agent order."""
        merged: list[Any] = [None] * self.size
        for members, reply in zip(self.groups, replies, strict=True):
            for i, value in zip(members, reply, strict=True):
                merged[i] = value
        return merged

    def _receive_all(self) -> list[Any]:
        """Every worker's reply; a worker's error is raised only after all replies are read, so that no stale
        reply stays in a pipe (the partial result of a failed run is read right after)."""
        replies, error = [], None
        for connection in self.connections:
            try:
                replies.append(self._receive(connection))
            except Exception as exc:  # noqa: BLE001 - re-raised below, after draining the other pipes
                error = error or exc
        if error is not None:
            raise error
        return replies

    def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` on every worker and gather the replies in agent order."""
        for connection in self.connections:
            connection.send((method, args))
        return self._gather(self._receive_all())

    def call_split(self, method: str, per_agent: Sequence[Any], *args: Any) -> Any:
        """Call ``method`` on every worker with its own agents' items of ``per_agent``."""
        for members, connection in zip(self.groups, self.connections, strict=True):
            connection.send((method, ([per_agent[i] for i in members], *args)))
        return self._gather(self._receive_all())

    def close(self) -> None:
        """Stop the workers (each answers before it exits)."""
        for connection in self.connections:
            try:
                connection.send(("close", ()))
                connection.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():  # a worker that did not exit in time (a loaded machine): kill it and reap it
                process.kill()
                process.join()
        self.connections, self.processes = [], []

    def __enter__(self) -> ProcessBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


#: Backends by name (``solve(backend=...)``).
BACKENDS: dict[str, type] = {"serial": SerialBackend, "process": ProcessBackend}


def make_backend(name: str, algorithm: Algorithm, problem: DistributedProblem,
                 contexts: Sequence[AgentContext]) -> SerialBackend | ProcessBackend:
    """The backend registered under ``name`` in :data:`BACKENDS`, hosting every agent's program."""
    if name not in BACKENDS:
        raise ParameterError(f'must be one of {sorted(BACKENDS)} (Ray actors are planned), got {name!r}',
                             argument="backend")
    return BACKENDS[name](algorithm, problem, contexts)
