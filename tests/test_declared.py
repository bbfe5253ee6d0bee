"""pc.Declared: one record of an agent's public declarations, which the methods read (no settings keyed by name)."""

from __future__ import annotations

import dataclasses

import cvxpy as cp
import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import PPADMM, RandomizedADMM, RandomizedDGD
from privcvx.algorithms.conformance import consensus_problem
from privcvx.errors import DeclarationError, ParameterError, PrivacyError

pytestmark = pytest.mark.filterwarnings("ignore::privcvx.errors.ReproducibleNoiseWarning")


def redeclared(problem: pc.DistributedProblem, **entries: object) -> pc.DistributedProblem:
    """The same agents, each record with ``entries`` changed."""
    return pc.DistributedProblem([pc.Agent(agent.objective, agent.constraints, shared=agent.shared, name=agent.name,
                                           gradient=agent.gradient, declared=agent.declared.replace(**entries))
                                  for agent in problem.agents])


def same_run(first: pc.Result, second: pc.Result) -> bool:
    columns = [c for c in first.history.columns if c != "time_s"]
    return (first.transcript.same_as(second.transcript) and first.history[columns].equals(second.history[columns])
            and first.privacy.equals(second.privacy))


def test_bad_declarations_name_the_agent_and_the_entry():
    x = cp.Variable(2)
    for entries, entry in (({"smoothness": -1.0}, "smoothness"), ({"smoothness": "2"}, "smoothness"),
                           ({"sensitivity": 0.1}, "sensitivity"), ({"smoothness": float("nan")}, "smoothness")):
        with pytest.raises(DeclarationError, match=entry) as error:
            pc.Agent(cp.sum_squares(x), shared=x, name="a", **entries)
        assert (error.value.agent, error.value.argument) == ("a", entry)
    for entries, entry in (({"record_count": 2.5}, "record_count"), ({"aggregator_bound": 0.0}, "aggregator_bound"),
                           ({"relation": 3}, "relation"), ({"release_bound": 0.1}, "release_bound"),
                           ({"hessian_change": -1e-3}, "hessian_change"), ({"record_count": True}, "record_count")):
        with pytest.raises(DeclarationError, match=entry) as error:
            pc.Declared(**entries)
        assert error.value.argument == entry
    with pytest.raises(DeclarationError, match="declared twice") as error:
        pc.Agent(cp.sum_squares(x), shared=x, name="a", smoothness=2.0, declared=pc.Declared(smoothness=3.0))
    assert (error.value.agent, error.value.argument) == ("a", "smoothness")
    with pytest.raises(DeclarationError, match="pc.Declared") as error:
        pc.Agent(cp.sum_squares(x), shared=x, name="a", declared={"smoothness": 2.0})
    assert error.value.argument == "declared"
    record = pc.Declared(smoothness=2, record_count=np.int64(5))
    assert (record.smoothness, type(record.smoothness), record.record_count, type(record.record_count)) == (
        2.0, float, 5, int)
    assert repr(record) == "Declared(smoothness=2.0, record_count=5)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.smoothness = 1.0


def test_the_keywords_are_entries_of_the_record():
    x = cp.Variable(2)
    agent = pc.Agent(cp.sum_squares(x), shared=x, name="a", sensitivity=pc.Sensitivity(l2=1.0), smoothness=2.0)
    assert agent.declared == pc.Declared(sensitivity=pc.Sensitivity(l2=1.0), smoothness=2.0)
    agent.smoothness = 4.0  # replaces the entry, checked
    assert agent.declared.smoothness == 4.0 and agent.declared.sensitivity == pc.Sensitivity(l2=1.0)
    with pytest.raises(DeclarationError, match="smoothness"):
        agent.smoothness = -1.0
    sampled = pc.SampledAgent(cp.sum_squares(x), shared=x, name="s", samples=_Records(3), record_count=3)
    assert (sampled.record_count, sampled.declared.record_count) == (3, 3)
    with pytest.raises(DeclarationError, match="record_count") as error:
        pc.SampledAgent(cp.sum_squares(x), shared=x, name="s", samples=_Records(3),
                        declared=pc.Declared(record_count=4))
    assert (error.value.agent, error.value.argument) == ("s", "record_count")


class _Records:
    """A SampleLoss of ``count`` records (gradients are not used here)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def gradients(self, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        return np.zeros((len(indices), x.size))


def test_randomized_admm_reads_the_aggregator_bound_and_the_coordinate_sensitivity():
    """A declared D_i and B_inf give bitwise the run of the same numbers given as the settings for every agent."""
    problem, topology = consensus_problem(agents=3, bound=None), pc.Topology.ring()
    declared = redeclared(problem, aggregator_bound=10.0, coordinate_sensitivity=0.01)
    given = problem.solve(RandomizedADMM(D=10.0, b_inf=0.01, noise_rate=2.0), topology, rounds=6, seed=3)
    read = declared.solve(RandomizedADMM(noise_rate=2.0), topology, rounds=6, seed=3)
    assert same_run(given, read)
    assert not same_run(given, problem.solve(RandomizedADMM(noise_rate=2.0), topology, rounds=6, seed=3))
    dgd = [p.solve(RandomizedDGD(noise_rate=2.0, **settings), topology, rounds=6, seed=3)
           for p, settings in ((problem, {"b_inf": 0.01}), (declared, {}))]
    assert same_run(*dgd)


def test_a_method_refuses_an_agent_without_the_declaration_it_needs():
    problem = redeclared(consensus_problem(agents=3, bound=None), sensitivity=None)
    with pytest.raises(PrivacyError, match="coordinate_sensitivity") as error:
        problem.solve(RandomizedADMM(noise_rate=2.0), pc.Topology.ring(), rounds=2, seed=1)
    assert (error.value.agent, error.value.argument) == ("agent-0", "coordinate_sensitivity")
    with pytest.raises(PrivacyError, match="hessian_change") as error:
        consensus_problem(agents=3, bound=None).solve(PPADMM(epsilon=2.0), pc.Topology.ring(), rounds=2, seed=1)
    assert (error.value.agent, error.value.argument) == ("agent-0", "hessian_change")


def test_pp_admm_reads_the_hessian_change_and_one_object_runs_on_two_problems():
    """The declared h_i gives the run of PPADMM(hessian_change=h_i); one algorithm object (its D_i resolved per run)
    runs on problems with other agents and sizes, and repeats a run bitwise after the other."""
    problem, topology = consensus_problem(agents=3, bound=None), pc.Topology.ring()
    given = problem.solve(PPADMM(epsilon=2.0, hessian_change=1e-4), topology, rounds=3, seed=2)
    read = redeclared(problem, hessian_change=1e-4).solve(PPADMM(epsilon=2.0), topology, rounds=3, seed=2)
    assert same_run(given, read)
    algorithm = RandomizedADMM(noise_rate=2.0)
    other = consensus_problem(agents=5, n=2, seed=4, bound=None)
    first = problem.solve(algorithm, topology, rounds=4, seed=1)
    assert list(other.solve(algorithm, topology, rounds=4, seed=1).privacy["agent"]) == other.names
    assert same_run(first, problem.solve(algorithm, topology, rounds=4, seed=1))
    with pytest.raises(ParameterError, match="'D'"):
        RandomizedADMM(D={"agent-0": 10.0})  # no per-agent dict: the record holds D_i
