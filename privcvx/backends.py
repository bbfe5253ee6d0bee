"""Execution backends: where the agents' rounds run.

* ``"serial"``: every agent in this process, one after the other.
* ``"process"``: agents in worker processes (one group of agents per core), driven
  through pipes. Workers are spawned (not forked), so a script must start the run under
  ``if __name__ == "__main__":``. Each worker builds its agents' compiled local steps itself; only the
  slices of w go in and only the agents' reports come out.

Both run the same :class:`AgentGroup`, so results are identical on every backend for a
given seed: each agent draws its noise from its own stream.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from privcvx.errors import ParameterError, PrivcvxError
from privcvx.orchestration import AgentReport, AgentRole, RunConfig
from privcvx.privacy.accounting import PrivacyLedger
from privcvx.privacy.noise import NoiseSource
from privcvx.problem import Agent, AgentLayout, DistributedProblem


class AgentGroup:
    """Some agents of a run, run one after the other in the current process."""

    def __init__(self, agents: Sequence[Agent], layouts: Sequence[AgentLayout], config: RunConfig,
                 sources: Sequence[NoiseSource], smoothness: Sequence[float | None]) -> None:
        self.local_updates = config.local_updates
        self.roles = [AgentRole(agent, layout, config.privacy, source, config.accounting_delta, lipschitz)
                      for agent, layout, source, lipschitz in zip(agents, layouts, sources, smoothness, strict=True)]

    def initial_shared(self) -> list[np.ndarray]:
        return [role.initial_shared() for role in self.roles]

    def round(self, t: int, w_parts: Sequence[np.ndarray], rho: float, eta: float | None) -> list[AgentReport]:
        return [role.round(t, w_p, rho, eta, self.local_updates) for role, w_p in zip(self.roles, w_parts,
                                                                                       strict=True)]

    def smoothness(self) -> list[float]:
        return [role.smoothness for role in self.roles]

    def states(self) -> list[dict[str, Any]]:
        return [role.state_dict() for role in self.roles]

    def load_states(self, states: Sequence[dict[str, Any]]) -> None:
        for role, state in zip(self.roles, states, strict=True):
            role.load_state_dict(state)

    def ledgers(self) -> list[PrivacyLedger]:
        return [role.ledger for role in self.roles]

    def released(self) -> list[np.ndarray]:
        return [role.released.copy() for role in self.roles]

    def projection_reports(self) -> list[dict[str, Any]]:
        """Per agent: the projection's kind and its solver counters (solves, fallbacks, inaccurate)."""
        return [{"kind": role.projection.kind, **dataclasses.asdict(role.projection.stats)} for role in self.roles]

    def close(self) -> None:
        return None


def _worker(connection: Any, group_args: tuple) -> None:
    """A worker process: build the agent group here, then serve method calls from the driver."""
    try:
        group = AgentGroup(*group_args)
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
            connection.send(("ok", getattr(group, method)(*args)))
        except Exception as exc:  # the driver re-raises it with the agent's name
            connection.send(("error", exc))


class ProcessBackend:
    """Agents split into groups, one worker process per group."""

    def __init__(self, problem: DistributedProblem, config: RunConfig, sources: Sequence[NoiseSource],
                 workers: int | None = None) -> None:
        count = min(len(problem.agents), workers or os.cpu_count() or 1)
        self.groups = [list(range(i, len(problem.agents), count)) for i in range(count)]
        context = mp.get_context("spawn")
        self.connections, self.processes = [], []
        hints = _smoothness_hints(problem)
        for members in self.groups:
            parent, child = context.Pipe()
            args = ([problem.agents[i] for i in members], [problem.layouts[i] for i in members], config,
                    [sources[i] for i in members], [hints[i] for i in members])
            process = context.Process(target=_worker, args=(child, args), daemon=True)
            try:
                process.start()
            except (pickle.PicklingError, AttributeError, TypeError) as exc:
                raise PrivcvxError(f"backend='process' sends each agent to a worker process, which needs "
                                   f"picklable agents: {exc}. Gradient oracles and sensitivity callables must be "
                                   "module-level functions, functools.partial objects or instances of classes",
                                   agent=problem.agents[members[0]].name, argument="backend") from exc
            self.connections.append(parent)
            self.processes.append(process)
        for connection in self.connections:
            self._receive(connection)

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

    def _call(self, method: str, per_group_args: Sequence[tuple] | None = None) -> list[Any]:
        for g, connection in enumerate(self.connections):
            connection.send((method, per_group_args[g] if per_group_args else ()))
        merged: list[Any] = [None] * sum(len(m) for m in self.groups)
        for members, connection in zip(self.groups, self.connections, strict=True):
            for i, value in zip(members, self._receive(connection), strict=True):
                merged[i] = value
        return merged

    def _split(self, values: Sequence[Any]) -> list[list[Any]]:
        return [[values[i] for i in members] for members in self.groups]

    def initial_shared(self) -> list[np.ndarray]:
        return self._call("initial_shared")

    def round(self, t: int, w_parts: Sequence[np.ndarray], rho: float, eta: float | None) -> list[AgentReport]:
        return self._call("round", [(t, part, rho, eta) for part in self._split(w_parts)])

    def smoothness(self) -> list[float]:
        return self._call("smoothness")

    def states(self) -> list[dict[str, Any]]:
        return self._call("states")

    def load_states(self, states: Sequence[dict[str, Any]]) -> None:
        for connection, part in zip(self.connections, self._split(states), strict=True):
            connection.send(("load_states", (part,)))
        for connection in self.connections:
            self._receive(connection)

    def ledgers(self) -> list[PrivacyLedger]:
        return self._call("ledgers")

    def released(self) -> list[np.ndarray]:
        return self._call("released")

    def projection_reports(self) -> list[dict[str, Any]]:
        return self._call("projection_reports")

    def close(self) -> None:
        for connection in self.connections:
            try:
                connection.send(("close", ()))
                connection.recv()
            except (BrokenPipeError, EOFError, OSError):
                pass
        for process in self.processes:
            process.join(timeout=5)


def _smoothness_hints(problem: DistributedProblem) -> list[float | None]:
    """L_p declared by the problem's builder (``problem.info["smoothness"]``), else None: estimate it."""
    declared = problem.info.get("smoothness")
    if declared is None:
        return [None] * len(problem.agents)
    if len(declared) != len(problem.agents):
        raise ParameterError(f"has {len(declared)} entries for {len(problem.agents)} agents",
                             argument="info['smoothness']")
    return [float(value) for value in declared]


def make_backend(name: str, problem: DistributedProblem, config: RunConfig,
                 sources: Sequence[NoiseSource]) -> AgentGroup | ProcessBackend:
    if name == "serial":
        return AgentGroup(problem.agents, problem.layouts, config, sources, _smoothness_hints(problem))
    if name == "process":
        return ProcessBackend(problem, config, sources)
    raise ParameterError(f'must be "serial" or "process" (Ray actors are planned), got {name!r}',
                         argument="backend")
