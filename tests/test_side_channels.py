"""Values that leave an agent beside its releases (issue 26, point 5): traces, result.z, step times, adjacency
and counts read from the data, and the fair-logistic noise seeds."""

from __future__ import annotations

import inspect
import io
import warnings

import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import (
    DPP2,
    IPPADMM,
    PPADMM,
    PPDC,
    PRADMM,
    QDPSGD,
    Algorithm,
    DiaDSP,
    DPDistributedGradient,
    LinearizedADMM,
    RandomizedADMM,
    RandomizedDGD,
)
from privcvx.algorithms.conformance import consensus_problem
from privcvx.errors import ParameterError, PrivacyError, ReproducibleNoiseWarning
from privcvx.privacy.noise import SecureNoise
from problems.binary_logistic import binary_logistic
from problems.nonconvex_logistic import nonconvex_logistic, paper_data

#: A private setting of every private method of pc.algorithms.__all__ (ExactADMM has no private mode).
PRIVATE = {
    "LinearizedADMM": lambda: LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Gaussian(0.5, 1e-5))),
    "DPDistributedGradient": lambda: DPDistributedGradient(epsilon=1.0),
    "RandomizedADMM": lambda: RandomizedADMM(noise_rate=2.0, b_inf=0.01),
    "RandomizedDGD": lambda: RandomizedDGD(noise_rate=2.0, b_inf=0.01),
    "PRADMM": lambda: PRADMM(epsilon=1.0),
    "PPADMM": lambda: PPADMM(epsilon=2.0, hessian_change=1e-4),
    "IPPADMM": lambda: IPPADMM(epsilon=2.0, hessian_change=1e-4),
    "DPP2": lambda: DPP2(u_w=0.5, u_e=0.5, r=0.9),
    "DiaDSP": lambda: DiaDSP(alpha=0.05, u_x=0.5, u_y=0.5, r=0.9),
    "PPDC": lambda: PPDC(u_x=0.5, u_v=0.5, r=0.9),
    "QDPSGD": lambda: QDPSGD(epsilon=1.0, clip=1.0),
}
GRADIENT_METHODS = ("DPP2", "DiaDSP", "PPDC")


pytestmark = pytest.mark.usefixtures("quiet_seeds")


def _problem(name: str) -> pc.DistributedProblem:
    if name == "QDPSGD":
        rng = np.random.default_rng(0)
        return binary_logistic(rng.normal(size=(40, 3)), rng.integers(0, 2, 40), agents=4)
    return consensus_problem(agents=4, bound=None)


def _topology(name: str) -> pc.Topology:
    return pc.Topology.star() if name == "LinearizedADMM" else pc.Topology.ring()


def test_every_private_method_of_the_library_is_covered():
    methods = {name for name in pc.algorithms.__all__ if inspect.isclass(getattr(pc.algorithms, name))
               and issubclass(getattr(pc.algorithms, name), Algorithm) and name not in ("Algorithm", "ExactADMM")}
    assert methods == set(PRIVATE)
    assert all(PRIVATE[name]().private for name in PRIVATE)


@pytest.mark.parametrize("name", sorted(PRIVATE))
def test_a_private_run_returns_in_z_exactly_each_agents_last_release(name):
    """With the default diagnostics=True, result.z[i] is a value agent i sent in its last round (not its clean
    state), and the CVXPY variables are not given private values."""
    problem = _problem(name)
    result = problem.solve(PRIVATE[name](), _topology(name), rounds=4, seed=1)
    for agent, z in zip(problem.names, result.z, strict=True):
        sent = [m for m in result.transcript if m.sender == agent]
        last = max(m.round for m in sent)
        payloads = [np.asarray(v) for m in sent if m.round == last for v in m.payload.values()]
        assert any(v.shape == z.shape and np.array_equal(v, z) for v in payloads), (agent, z)
    assert result.info["release_only"]
    assert all(variable.value is None for agent in problem.agents for variable in agent.variables)
    with pytest.raises(ParameterError, match="kept only what agents sent"):
        result.value_of(problem.names[0], problem.agents[0].variables[0])


@pytest.mark.parametrize("name", GRADIENT_METHODS)
def test_a_trace_is_refused_in_a_release_only_run(name):
    """trace=True keeps x_i^k and grad f_i(x_i^k): with diagnostics=False the run refuses it (it used to return the
    un-noised iterates in result.info["agents"])."""
    problem = _problem(name)
    algorithm = PRIVATE[name]().clone(trace=True)
    with pytest.raises(PrivacyError, match=r"argument 'trace'.*diagnostics=False"):
        problem.solve(algorithm, _topology(name), rounds=3, seed=1, diagnostics=False)
    traced = problem.solve(algorithm, _topology(name), rounds=3, seed=1)  # a research run keeps it
    assert all(len(report["trace_x"]) >= 3 for report in traced.info["agents"])


@pytest.mark.parametrize("name", ["DPP2", "PRADMM", "LinearizedADMM"])
def test_a_release_only_run_has_no_timing_column(name):
    problem = _problem(name)
    rows = []
    released = problem.solve(PRIVATE[name](), _topology(name), rounds=3, seed=1, diagnostics=False,
                             callback=rows.append)
    assert "time_s" not in released.history.columns and all("time_s" not in row for row in rows)
    assert "time_s" not in released.summary(file=io.StringIO())
    research = problem.solve(PRIVATE[name](), _topology(name), rounds=3, seed=1)
    assert "time_s" in research.history.columns


def test_nonconvex_logistic_adjacency_is_a_declared_value_not_read_from_the_data():
    features, labels = paper_data(nodes=3, samples=20, dim=2, seed=0)
    shrunk = [z.copy() for z in features]
    largest = max(range(3), key=lambda i: np.linalg.norm(features[i], axis=1).max())
    row = np.argmax(np.linalg.norm(features[largest], axis=1))
    shrunk[largest][row] *= 0.5  # one record changes the data's largest norm
    assert max(np.linalg.norm(z, axis=1).max() for z in shrunk) < max(np.linalg.norm(z, axis=1).max()
                                                                       for z in features)
    deltas = [[agent.sensitivity.l2 for agent in nonconvex_logistic(f, labels, feature_bound=15.0).agents]
              for f in (features, shrunk)]
    assert deltas[0] == deltas[1] == [2 * 15.0 / 20] * 3
    assert inspect.signature(nonconvex_logistic).parameters["feature_bound"].default is inspect.Parameter.empty
    with pytest.raises(ParameterError, match="node-.*feature_bound"):
        nonconvex_logistic(features, labels, feature_bound=0.1)


def test_qdpsgd_default_normaliser_needs_a_declared_record_count():
    from privcvx import SampledAgent

    problem = _problem("QDPSGD")
    assert all(agent.record_count == agent.samples.count for agent in problem.agents)  # the builder declares it
    undeclared = pc.DistributedProblem([
        SampledAgent(agent.objective, shared=agent.variables[0], samples=agent.samples, smoothness=agent.smoothness,
                     record_smoothness=agent.record_smoothness, name=agent.name) for agent in problem.agents])
    with pytest.raises(PrivacyError, match=r"agent-0.*record_count"):
        undeclared.solve(PRIVATE["QDPSGD"](), pc.Topology.ring(), rounds=2, seed=1)
    undeclared.solve(PRIVATE["QDPSGD"]().clone(batch_size=10.0), pc.Topology.ring(), rounds=2, seed=1)  # B given
    with pytest.raises(pc.errors.DeclarationError, match="record_count"):
        SampledAgent(problem.agents[0].objective, shared=problem.agents[0].variables[0],
                     samples=problem.agents[0].samples, record_count=problem.agents[0].samples.count + 1)


@pytest.mark.parametrize("distributed", [False, True], ids=["fair_logistic", "distributed_fair_logistic"])
def test_fair_logistic_uses_the_seed_rules_of_run(distributed, monkeypatch):
    import problems.distributed_fair_logistic as distributed_module
    import problems.fair_logistic as central_module
    from problems.fair_logistic import breast_cancer_fairness

    module = distributed_module if distributed else central_module
    drawn = []

    def spy(seed, count):
        sources = pc.privacy.noise.agent_noise_sources(seed, count)
        drawn.extend(sources)
        return sources

    monkeypatch.setattr(module, "agent_noise_sources", spy)
    X, y, z = breast_cancer_fairness()

    def release(seed):
        if distributed:
            return distributed_module.distributed_fair_logistic(X, y, z, 0.1, agents=2, method="adfc", epsilon=1.0,
                                                                seed=seed)
        return central_module.fair_logistic(X, y, z, 0.1, "adfc", 1.0, seed=seed)

    with warnings.catch_warnings():
        warnings.simplefilter("error", ReproducibleNoiseWarning)
        release(None)  # the default: secure noise, no warning
    assert drawn and all(isinstance(source, SecureNoise) for source in drawn)
    with pytest.warns(ReproducibleNoiseWarning):
        release(3)
