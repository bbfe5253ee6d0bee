"""Strict types through the one validation helper, `privcvx.errors.check_scalar` (issue 29, point 8), and the
declaration checks that used to escape or take quadratic time."""

from __future__ import annotations

import time
import warnings

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import privcvx as pc
import privcvx.problem as problem_module
from powerflow.experiment import build as zonal_study_problem
from privcvx.errors import ParameterError, PrivacyError, check_scalar
from privcvx.nonconvex import local_reference
from privcvx.privacy.dpp2_accountant import DPP2Privacy
from problems.datasets import load_mnist
from problems.experiment import build
from problems.functional_mechanism_audit import check_functional_mechanism
from problems.logistic import federated_logistic


def _problem(agents: int = 3) -> pc.DistributedProblem:
    from problems.rendezvous import rendezvous

    return rendezvous(np.random.default_rng(0).uniform(-1, 1, (agents, 2)))


@pytest.mark.parametrize("value, options", [
    ("false", {"kind": bool}), (0, {"kind": bool}), (None, {"kind": bool}),
    ("1", {"kind": float}), (True, {"kind": float}), (np.bool_(True), {"kind": float}), (float("nan"), {"kind": float}),
    (10**400, {"kind": float}), ([1.0], {"kind": float}), (1.5, {"kind": int}), ("3", {"kind": int}),
    (False, {"kind": int}), (3, {"kind": str}), (0, {"kind": float, "low": 0, "closed": "neither"}),
    (2, {"kind": int, "high": 1}), (["a"], {"choices": ("a", "b")}), ({"a": 1}, {"choices": ("a",)}),
    ("c", {"choices": ("a", "b")}), (True, {"choices": (1, 2)}),
])
def test_check_scalar_refuses_lenient_coercions(value, options):
    with pytest.raises(ParameterError) as info:
        check_scalar(value, argument="x", **options)
    assert info.value.argument == "x"


def test_check_scalar_accepts_values_and_compares_choices_by_value():
    assert check_scalar(np.bool_(False), argument="x", kind=bool) is False
    assert check_scalar(np.int64(3), argument="x", kind=int, low=1) == 3
    assert type(check_scalar(np.float32(0.5), argument="x", kind=float, low=0, high=1)) is float
    assert type(check_scalar(np.str_("b"), argument="x", choices=("a", "b"))) is str
    assert check_scalar(0, argument="x", kind=float, low=0) == 0.0


@pytest.mark.parametrize("build, argument", [
    (lambda: _problem().solve(rounds=2, diagnostics="false"), "diagnostics"),
    (lambda: _problem().solve(rounds=2, reference="yes"), "reference"),
    (lambda: _problem().solve(rounds=2, timeout="60"), "timeout"),
    (lambda: _problem().solve(rounds=2, rho=True), "rho"),
    (lambda: _problem().solve(rounds=2, rho="1"), "rho"),
    (lambda: pc.algorithms.DPDistributedGradient(epsilon="1"), "epsilon"),
    (lambda: pc.Laplace("1"), "epsilon"),
    (lambda: pc.algorithms.IPPADMM(threshold="abc"), "threshold"),
    (lambda: pc.algorithms.IPPADMM(query=["change"]), "query"),
    (lambda: pc.algorithms.DPP2(trace="abc"), "trace"),
    (lambda: pc.algorithms.PPDC(trace="abc"), "trace"),
    (lambda: pc.algorithms.DPDistributedGradient(epsilon=1.0, weights={"metropolis"}), "weights"),
    (lambda: pc.algorithms.pr_admm.PeriodicDecay(period=2.0), "period"),
    (lambda: pc.algorithms.pr_admm.PeriodicDecay(rate="0.5"), "rate"),
    (lambda: pc.algorithms.QDPSGD(bits=8.0), "bits"),
    (lambda: pc.AgentSpec("a", lambda: None, shapes={"x": True}), "shapes['x']"),  # a bool is no dimension
    (lambda: pc.AgentSpec("a", lambda: None, shapes={"x": (2, True)}), "shapes['x']"),
    (lambda: pc.AgentSpec("a", lambda: None, shapes={"x": (2, 1.0)}), "shapes['x']"),
    (lambda: DPP2Privacy(delta=0.1, dim=10, alpha=0.1, smoothness=True, u_e=1.0, u_w=1.0), "smoothness"),
    (lambda: DPP2Privacy(delta=0.1, dim=10, alpha=0.1, smoothness="5", u_e=1.0, u_w=1.0), "smoothness"),
    (lambda: local_reference(_problem(), scale="1"), "scale"),  # a raw TypeError before check_scalar
    (lambda: build(test_fraction="0.25"), "test_fraction"),
    (lambda: check_functional_mechanism(under_noising="0.75"), "under_noising"),
    (lambda: pc.algorithms.QDPSGD(variant=True), "variant"),  # True == 1: taken as Q-DPSGD-1 before check_scalar
    (lambda: load_mnist(".", split=["train"]), "split"),  # unhashable: raw TypeErrors before check_scalar
    (lambda: federated_logistic(np.eye(4), np.arange(4) % 2, agents=2, relation=["replace_one"]), "relation"),
    (lambda: federated_logistic(np.eye(4), np.arange(4) % 2, agents=2, sensitivity={"paper"}), "sensitivity"),
    (lambda: pc.schedules.ResidualBalancing(relative=1), "relative"),  # 1 == True: taken as relative before
    (lambda: pc.schedules.ResidualBalancing(relative=0), "relative"),
    (lambda: pc.algorithms.check_privacy(pc.algorithms.PRADMM(epsilon=1.0), confidence="0.95"), "confidence"),
    (lambda: pc.algorithms.check_privacy(pc.algorithms.PRADMM(epsilon=1.0), under_noising=True), "under_noising"),
    (lambda: pc.Budget(1.0, 1e-5, mechanism=["gaussian"]), "mechanism"),
    (lambda: zonal_study_problem(zones=2.7), "zones"),  # int() made 2.7 two zones and True one
    (lambda: zonal_study_problem(zones=True), "zones"),
    (lambda: zonal_study_problem(zones="three"), "zones"),
    (lambda: pc.Topology.ring(["a", "b", "c"]).gossip_weights(kappa="4"), "kappa"),  # float() took it
    (lambda: pc.Topology.ring(["a", "b", "c"]).gossip_weights(kappa=[4.0]), "kappa"),  # a raw TypeError
])
def test_lenient_settings_are_refused_naming_the_argument(build, argument):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(pc.errors.PrivcvxError) as info:
            build()
    assert info.value.argument == argument and not isinstance(info.value, pc.errors.RunFailed)


def test_an_epsilon_whose_budget_underflows_is_refused_clearly():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(PrivacyError, match="too small to calibrate") as info:
            _problem().solve(pc.algorithms.PRADMM(epsilon=1e-300, delta=1e-300), rounds=2, seed=1)
    assert info.value.argument == "epsilon"


@pytest.mark.parametrize("where", ["objective", "constraints"])
def test_a_parameter_without_a_value_is_refused_at_declaration(where):
    x, p = cp.Variable(2), cp.Parameter(2, name="demand")
    objective, constraints = (cp.sum_squares(x - p), []) if where == "objective" else (cp.sum_squares(x), [x <= p])
    with pytest.raises(pc.errors.DeclarationError, match="parameter demand has no value") as info:
        pc.Agent(objective, constraints, shared=x, name="zone")
    assert (info.value.agent, info.value.argument) == ("zone", where)


def _raises(t: int) -> nx.Graph:
    raise RuntimeError(f"no graph for round {t}")


def test_a_topology_function_that_raises_is_named():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ParameterError, match="topology function raised RuntimeError: no graph for round 1"):
            _problem().solve(pc.algorithms.DPDistributedGradient(epsilon=1.0), pc.Topology(_raises), rounds=3,
                             seed=1)


def test_a_time_varying_topology_must_be_connected_over_each_window():
    problem = _problem(4)
    names = problem.names
    halves = [nx.Graph([(names[0], names[1]), (names[2], names[3])]), nx.Graph([(names[1], names[2])])]
    halves[1].add_nodes_from(names)

    def solve(topology: pc.Topology) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            problem.solve(pc.algorithms.DPDistributedGradient(epsilon=1.0), topology, rounds=12, seed=1)
        return [str(w.message) for w in caught if "not connected over rounds" in str(w.message)]

    assert solve(pc.Topology.switching(halves)) == []  # each window of 2 rounds is connected
    assert solve(pc.Topology.random_sequence()) == []
    assert solve(pc.Topology.switching(halves, window=1)) == [
        solve(pc.Topology.switching(halves, window=1))[0]]  # warned once
    assert "rounds 1..1 (window=1)" in solve(pc.Topology.switching(halves, window=1))[0]
    assert "rounds 1..10 (window=10)" in solve(pc.Topology(lambda t: halves[0]))[0]  # never connected


def test_naming_two_disjoint_agents_takes_a_number_of_solves_near_linear(monkeypatch):
    x = [cp.Variable(2) for _ in range(80)]
    agents = [pc.Agent(cp.sum_squares(v), [v >= 0, v <= 1], shared={"w": v}, name=f"a{i}") for i, v in enumerate(x)]
    agents[-2] = pc.Agent(cp.sum_squares(x[-2]), [x[-2] >= 0.9], shared={"w": x[-2]}, name="high")
    agents[-1] = pc.Agent(cp.sum_squares(x[-1]), [x[-1] <= 0.1], shared={"w": x[-1]}, name="low")
    solves = []
    feasible = problem_module._feasible
    monkeypatch.setattr(problem_module, "_feasible", lambda problem: solves.append(1) or feasible(problem))
    start = time.perf_counter()
    with pytest.raises(pc.errors.InfeasibleLocalSetError, match="agents 'high' and 'low' do not intersect"):
        pc.DistributedProblem(agents)
    # 80 sets checked alone, 1 joint solve, 7 bisection steps, at most 79 pairs (only high and low do not meet): not
    # the 3081 pairs that come before (high, low) among all 3160.
    assert len(solves) <= 80 + 1 + 7 + 79, len(solves)
    assert time.perf_counter() - start < 30
