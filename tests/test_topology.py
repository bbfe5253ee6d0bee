"""Topologies (graphs, builders, mixing weights) and messages."""

from __future__ import annotations

import pickle

import networkx as nx
import numpy as np
import pytest

import privcvx as pc
from privcvx.errors import ParameterError
from privcvx.topology import SERVER, WEIGHT_RULES, check_doubly_stochastic

NAMES = [f"agent-{i}" for i in range(7)]


@pytest.mark.parametrize("rule", sorted(WEIGHT_RULES))
@pytest.mark.parametrize("builder", [pc.Topology.ring, pc.Topology.complete,
                                     lambda nodes: pc.Topology.random(nodes, edges=10, seed=4)])
def test_weights_are_doubly_stochastic_on_the_graph(builder, rule):
    topology = builder(NAMES)
    order, matrix = topology.weights(1, rule)
    assert order == sorted(NAMES)
    assert np.allclose(matrix.sum(axis=0), 1, atol=1e-12) and np.allclose(matrix.sum(axis=1), 1, atol=1e-12)
    assert np.array_equal(matrix, matrix.T) and np.all(np.diag(matrix) > 0)
    adjacency = nx.to_numpy_array(topology.graph(1), nodelist=order, weight=None)
    assert np.all((matrix > 0) <= (adjacency + np.eye(len(order)) > 0))  # support on edges plus self-loops
    assert np.all(matrix[adjacency > 0] > 0)  # every edge carries weight
    if rule == "lazy_metropolis":
        assert np.all(np.diag(matrix) >= 0.5)
    row = topology.weight_row(NAMES[2], 1, rule)
    assert set(row) == {NAMES[2], *topology.neighbours(NAMES[2], 1)}
    assert sum(row.values()) == pytest.approx(1.0, abs=1e-12)


def test_metropolis_weights_match_the_closed_form():
    graph = nx.path_graph(3)  # degrees 1, 2, 1
    topology = pc.Topology(nx.relabel_nodes(graph, {0: "a", 1: "b", 2: "c"}))
    _, matrix = topology.weights(1, "metropolis")
    expected = np.array([[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]])
    assert np.allclose(matrix, expected, atol=1e-15)
    _, maximum = topology.weights(1, "max_degree")
    assert np.allclose(maximum, expected, atol=1e-15)  # d_max = 2 gives the same matrix here


def test_the_stochastic_check_rejects_bad_matrices():
    graph = nx.relabel_nodes(nx.path_graph(3), {0: "a", 1: "b", 2: "c"})
    good = np.array([[0.5, 0.5, 0], [0.5, 0.0, 0.5], [0, 0.5, 0.5]])
    check_doubly_stochastic(good, graph, ["a", "b", "c"])
    with pytest.raises(ParameterError, match="row sums"):
        check_doubly_stochastic(good * 1.01, graph, ["a", "b", "c"])
    off_edge = np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]])
    with pytest.raises(ParameterError, match="outside the graph"):
        check_doubly_stochastic(off_edge, graph, ["a", "b", "c"])
    with pytest.raises(ParameterError, match="column sums"):
        check_doubly_stochastic(np.array([[1.0, 0, 0], [0.5, 0.5, 0], [0, 0.5, 0.5]]), graph, ["a", "b", "c"])


def test_random_graphs_are_connected_seeded_and_sized():
    first = pc.Topology.random(NAMES, edges=9, seed=3).graph(1)
    again = pc.Topology.random(NAMES, edges=9, seed=3).graph(1)
    other = pc.Topology.random(NAMES, edges=9, seed=4).graph(1)
    assert nx.is_connected(first) and first.number_of_edges() == 9
    assert set(first.edges) == set(again.edges) and set(first.edges) != set(other.edges)
    sequence = pc.Topology.random_sequence(NAMES, edges=7, seed=1)
    graphs = [sequence.graph(t) for t in range(1, 6)]
    assert all(nx.is_connected(g) and g.number_of_edges() == 7 for g in graphs)
    assert len({frozenset(map(frozenset, g.edges)) for g in graphs}) > 1  # it does change over time
    restored = pickle.loads(pickle.dumps(sequence))  # time-varying topologies go to worker processes
    assert set(restored.graph(4).edges) == set(sequence.graph(4).edges)


def test_switching_and_function_topologies_follow_the_round():
    ring, path = nx.cycle_graph(NAMES), nx.path_graph(NAMES)
    switching = pc.Topology.switching([ring, path])
    assert switching.time_varying and switching.graph(1) is ring and switching.graph(2) is path
    assert switching.graph(3) is ring
    function = pc.Topology(lambda t: ring if t % 2 else path).bind(NAMES)
    assert function.neighbours(NAMES[0], 1) == sorted([NAMES[1], NAMES[6]])
    assert function.neighbours(NAMES[0], 2) == [NAMES[1]]


def test_binding_checks_the_agents_and_the_graph():
    assert pc.Topology.ring().bind(NAMES).neighbours("agent-0", 1) == ["agent-1", "agent-6"]
    with pytest.raises(ParameterError, match="missing"):
        pc.Topology.ring(NAMES[:3]).bind(NAMES)
    disconnected = nx.Graph()
    disconnected.add_nodes_from(NAMES)
    with pytest.raises(ParameterError, match="not connected"):
        pc.Topology(disconnected).bind(NAMES)
    star = pc.Topology.star().bind(NAMES)
    assert star.is_star and star.neighbours("agent-3", 1) == [SERVER]
    assert star.neighbours(SERVER, 1) == sorted(NAMES)
    with pytest.raises(ParameterError, match="server"):
        pc.Topology.star().bind(["a", SERVER])
    with pytest.raises(ParameterError, match="mixing"):
        star.weights(1)
    with pytest.raises(ParameterError, match="weights"):
        pc.Topology.ring(NAMES).weights(1, "uniform")
    with pytest.raises(ParameterError, match="graph"):
        pc.Topology("not a graph")


def test_messages_hold_numeric_arrays_and_compare_bitwise():
    message = pc.Message(round=2, sender="a", receiver=None, payload={"y": [1.0, 2.0], "rho": 3.0})
    assert message["y"].dtype == float and message["rho"].shape == ()
    assert message.same_as(pc.Message(2, "a", None, {"y": np.array([1.0, 2.0]), "rho": np.float64(3.0)}))
    assert not message.same_as(pc.Message(2, "a", None, {"y": np.array([1.0, 2.0 + 1e-16 * 4]), "rho": 3.0}))
    assert not message.same_as(pc.Message(2, "a", None, {"y": [1.0, 2.0], "rho": 3}))  # an int, not the float 3.0
    assert not message.same_as(pc.Message(2, "a", None, {"y": [1.0, 2.0], "rho": [3.0]}))  # another shape
    zero, nan = pc.Message(1, "a", None, {"y": [0.0, np.nan]}), pc.Message(1, "a", None, {"y": [-0.0, np.nan]})
    assert zero.same_as(pc.Message(1, "a", None, {"y": [0.0, np.nan]})) and not zero.same_as(nan)  # bits, not values
    with pytest.raises(ParameterError, match="numeric"):
        pc.Message(1, "a", "b", {"bad": {"nested": 1}})
    transcript = pc.Transcript([message, pc.Message(3, "b", "a", {"y": [0.0]})])
    header, arrays = transcript.to_arrays()
    assert pc.Transcript.from_arrays(header, arrays).same_as(transcript)
    assert transcript.round(3)[0].sender == "b" and list(transcript.to_frame()["receiver"]) == ["*", "a"]


def test_random_topology_with_too_few_edges_says_what_edges_counts():
    import cvxpy as cp

    agents = [pc.Agent(cp.sum_squares(x := cp.Variable(2)), shared={"x": x}, name=f"a{i}") for i in range(5)]
    problem = pc.DistributedProblem(agents)
    with pytest.raises(pc.errors.ParameterError, match=r"5 agents need at least 4 edges .*spanning tree"):
        problem.solve(topology=pc.Topology.random(edges=3), rounds=1, progress=False)
