"""The penalty-rule protocol (pc.schedules.PenaltyRule): the server of Algorithm 1 asks any rule for rho^t, shows it
the residuals and checkpoints its state, with no switch on the rule's type; a builder names its rule on the problem."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from core_problems import box_least_squares, general_form

import privcvx as pc
from privcvx.algorithms import LinearizedADMM
from privcvx.algorithms.consensus import key_groups
from privcvx.errors import DeclarationError
from privcvx.schedules import PenaltyRule, PerKeyBalancing, Residuals


class HalvingOnRise(PenaltyRule):
    """A rule no library class implements: a vector rho over the keys, halved on a key whose squared primal residual
    rose since the last round; it reads the totals and the per-entry residuals, and starts at the suggestion."""

    reads_totals = True

    def __init__(self) -> None:
        self.groups: np.ndarray | None = None
        self.by_key: np.ndarray | None = None
        self.previous: np.ndarray | None = None
        self.calls: list[tuple[str, Any]] = []

    @property
    def needs_suggestion(self) -> bool:
        return True

    def start(self, suggestion: float, groups: np.ndarray) -> None:
        self.calls.append(("start", suggestion))
        self.groups, self.by_key = groups, np.full(int(groups.max()) + 1, suggestion)

    def observe(self, residuals: Residuals) -> None:
        self.calls.append(("observe", residuals.totals["primal_residual"]))
        primal_sq, _ = residuals.per_entry()
        by_key = np.bincount(self.groups, weights=primal_sq)
        if self.previous is not None:
            self.by_key = np.where(by_key > self.previous, self.by_key / 2.0, self.by_key)
        self.previous = by_key

    def value(self, t: int) -> np.ndarray:
        self.calls.append(("value", t))
        return self.by_key[self.groups]

    def state_dict(self) -> dict[str, Any]:
        return {"groups": self.groups, "by_key": self.by_key, "previous": self.previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.groups, self.by_key, self.previous = state["groups"], state["by_key"], state["previous"]


def test_the_server_runs_any_penalty_rule_through_the_protocol():
    problem, _, _ = general_form()
    rule = HalvingOnRise()
    result = problem.solve(LinearizedADMM(local_updates=1, rho=rule), rounds=6, seed=0)
    assert rule.calls == []  # the run adapted its own copy
    # Replayed from the transcript alone: the declared start (the agents' largest L_p) and the public residuals.
    replay = HalvingOnRise()
    smoothness = [float(m["smoothness"]) for m in result.transcript.round(0) if "smoothness" in m.payload]
    assert len(smoothness) == len(problem.agents)  # the rule asked for a suggestion: every agent sent its L_p
    replay.start(max(smoothness), key_groups(problem))
    monitor = LinearizedADMM().monitor(problem, None)
    sent = []
    for t in range(1, 7):
        sent.append(float(np.mean(replay.value(t))))
        w_before = monitor.w
        metrics = monitor.observe(t, result.transcript.round(t))
        replay.observe(Residuals(metrics, functools.partial(monitor.duals.entry_residuals, monitor.w, w_before,
                                                            monitor.released)))
    assert result.history["rho"].tolist() == sent
    assert len(set(sent)) > 1  # the rule adapted within the run: the check can fail


def test_a_fixed_penalty_asks_the_agents_for_nothing_and_keeps_no_state():
    problem, _, _ = general_form()
    result = problem.solve(LinearizedADMM(local_updates=1, rho=0.7), rounds=2)
    assert not any("smoothness" in m.payload for m in result.transcript.round(0))
    assert result.history["rho"].tolist() == [0.7, 0.7]
    assert pc.schedules.as_penalty(0.7).state_dict() == {}
    with pytest.raises(pc.errors.ParameterError, match="rho"):
        pc.schedules.as_penalty("fast")


def test_a_builder_names_its_penalty_rule_on_the_problem():
    plain = box_least_squares()
    named = pc.DistributedProblem(plain.agents, penalty_rule=PerKeyBalancing(5.0, until=None, mode="nondecreasing"))
    default = plain.solve(rounds=4)
    builders = named.solve(rounds=4)
    assert default.info["local_updates"] == builders.info["local_updates"] == "exact"
    assert builders.history["rho"].iloc[0] == 5.0 != default.history["rho"].iloc[0]
    explicit = plain.solve(LinearizedADMM(rho=PerKeyBalancing(5.0, until=None, mode="nondecreasing")), rounds=4)
    assert builders.history.drop(columns="time_s").equals(explicit.history.drop(columns="time_s"))
    assert named.penalty_rule.current == 5.0 and named.penalty_rule.vector is None  # each run adapts a copy
    given = named.solve(LinearizedADMM(rho=0.3), rounds=2)  # a given rho wins
    assert given.history["rho"].tolist() == [0.3, 0.3]
    with pytest.raises(DeclarationError, match="penalty_rule"):
        pc.DistributedProblem(plain.agents, penalty_rule=lambda t: 1.0)


def test_prepare_resolves_the_defaults_once():
    problem = box_least_squares()
    exact = LinearizedADMM().prepare(problem, pc.Topology.star(), rounds=5)
    assert exact.local_updates == "exact" and isinstance(exact.rho, PerKeyBalancing) and exact.rho.until is None
    private = LinearizedADMM(privacy=pc.OutputPerturbation(pc.Budget(1.0, 1e-5, mechanism="laplace")), eta=0.1)
    prepared = private.prepare(problem, pc.Topology.star(), rounds=5)
    assert prepared.local_updates == 1 and type(prepared.rho) is pc.schedules.ResidualBalancing
    assert prepared.privacy.mechanism.budget_steps == 5  # the per-update mechanism of its T * E = 5 updates
