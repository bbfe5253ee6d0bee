"""The one release path (issue 26): every algorithm adds noise and charges privacy only through
``AgentContext.release``, and what its messages carry is what its ledger charged."""

from __future__ import annotations

import ast
import contextlib
import inspect
from pathlib import Path

import numpy as np
import pytest

import privcvx as pc
from privcvx import algorithms
from privcvx.algorithms import base
from privcvx.algorithms.base import AgentContext, Release, check_releases
from privcvx.algorithms.conformance import supported_problem
from privcvx.errors import PrivacyError
from privcvx.messages import Message
from privcvx.privacy.noise import SecureNoise, SeededNoise
from privcvx.schedules import Geometric
from problems.binary_logistic import binary_logistic

ALGORITHMS = Path(algorithms.__file__).parent

#: Calls that draw noise or charge privacy; outside ``AgentContext.release`` (base.py) an algorithm may make none.
DRAWS = {"perturb", "standard_laplace", "standard_normal", "discrete_gaussian", "integer_noise"}


def _calls(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
            if name in DRAWS or (name == "record" and "ledger" in owner):
                names.append(f"{path.name}:{node.lineno} {ast.unparse(func)}")
    return names


def test_no_algorithm_module_draws_noise_or_charges_privacy_outside_the_release_path():
    offenders = [call for path in sorted(ALGORITHMS.glob("*.py")) if path.name != "base.py" for call in _calls(path)]
    assert offenders == []
    # and the release path itself does both
    assert any("perturb" in call for call in _calls(ALGORITHMS / "base.py"))
    assert sum("record" in call for call in _calls(ALGORITHMS / "base.py")) == 2  # release() and charge()


def _logistic() -> pc.DistributedProblem:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X @ np.array([1.0, -1.0, 0.5]) + 0.3 * rng.normal(size=60) > 0).astype(int)
    return binary_logistic(X, y, agents=3, lam=0.1)


#: Per algorithm class in ``pc.algorithms.__all__``: its private configurations (each privacy mode) and the
#: problem builder, or None for a method without privacy. A new algorithm without an entry fails the walk below.
PRIVATE = {
    algorithms.LinearizedADMM: ([algorithms.LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Gaussian(0.5, 1e-5))),
                                 algorithms.LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Laplace(1.0))),
                                 algorithms.LinearizedADMM(privacy=pc.OutputPerturbation(pc.Gaussian(0.5, 1e-5))),
                                 algorithms.LinearizedADMM(privacy=pc.OutputPerturbation(
                                     pc.Budget(1.0, 1e-5, mechanism="laplace")))], None),
    algorithms.ExactADMM: None,
    algorithms.DPDistributedGradient: ([algorithms.DPDistributedGradient(epsilon=1.0)], None),
    algorithms.RandomizedADMM: ([algorithms.RandomizedADMM(noise_rate=Geometric(1.02, 1.02))], None),
    algorithms.RandomizedDGD: ([algorithms.RandomizedDGD(noise_rate=2.0),
                                algorithms.RandomizedDGD(variant="2", noise_rate=2.0)], None),
    algorithms.PRADMM: ([algorithms.PRADMM(epsilon=1.0)], None),
    algorithms.PPADMM: ([algorithms.PPADMM(epsilon=2.0, hessian_change=1e-4)], None),
    algorithms.IPPADMM: ([algorithms.IPPADMM(epsilon=2.0, hessian_change=1e-4)], None),
    algorithms.QDPSGD: ([algorithms.QDPSGD(variant=1, epsilon=1.0, delta=1e-5, clip=1.0, sampling_rate=0.5, bits=8,
                                           resolution=2.0 ** -4),
                         algorithms.QDPSGD(variant=2, noise_multiplier=5.0, clip=1.0, sampling_rate=0.5, bits=12,
                                           resolution=2.0 ** -6)], _logistic),
    algorithms.DPP2: ([algorithms.DPP2(mixing_seed=7, u_w=0.5, u_e=0.5, r=0.9)], None),
    algorithms.DiaDSP: ([algorithms.DiaDSP(alpha=0.1, u_x=0.5, u_y=0.5, r=0.9)], None),
    algorithms.PPDC: ([algorithms.PPDC(u_x=0.5, u_v=0.5, r=0.9)], None),
}


def test_every_algorithm_has_its_privacy_modes_listed():
    classes = {getattr(algorithms, name) for name in algorithms.__all__}
    classes = {cls for cls in classes if inspect.isclass(cls) and issubclass(cls, algorithms.Algorithm)
               and cls is not algorithms.Algorithm}
    assert classes == set(PRIVATE)


CASES = [pytest.param(algorithm, build, id=f"{cls.__name__}-{i}") for cls, entry in PRIVATE.items()
         if entry is not None for i, (algorithm, build) in enumerate((a, entry[1]) for a in entry[0])]


@contextlib.contextmanager
def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the noise sources' draws made outside ``AgentContext.release`` and the releases with a charge."""
    counts = {"outside": 0, "releases": 0, "charged": 0}
    depth = [0]
    release = AgentContext.release

    def counted_release(self, *args, **kwargs):
        depth[0] += 1
        try:
            value = release(self, *args, **kwargs)
        finally:
            depth[0] -= 1
        counts["releases"] += 1
        counts["charged"] += self.releases[-1].event is not None
        return value

    def drawing(original):
        def draw(*args, **kwargs):
            counts["outside"] += depth[0] == 0
            return original(*args, **kwargs)
        return draw

    charge = AgentContext.charge

    def counted_charge(self, *args, **kwargs):
        charge(self, *args, **kwargs)
        counts["charged"] += 1

    monkeypatch.setattr(AgentContext, "release", counted_release)
    monkeypatch.setattr(AgentContext, "charge", counted_charge)
    for source in (SeededNoise, SecureNoise):
        monkeypatch.setattr(source, "perturb", drawing(source.perturb))
    monkeypatch.setattr(SeededNoise, "standard_laplace", drawing(SeededNoise.standard_laplace))
    monkeypatch.setattr(SeededNoise, "standard_normal", drawing(SeededNoise.standard_normal))
    monkeypatch.setattr(base, "discrete_gaussian", drawing(base.discrete_gaussian))
    yield counts


@pytest.mark.filterwarnings("ignore::privcvx.errors.ReproducibleNoiseWarning")
@pytest.mark.parametrize(("algorithm", "build"), CASES)
def test_every_private_method_releases_only_through_the_path_and_the_ledger_holds_exactly_its_releases(
        algorithm, build, monkeypatch):
    problem = build() if build is not None else supported_problem(algorithm)
    assert algorithm.private
    with _counting(monkeypatch) as counts:
        result = problem.solve(algorithm, rounds=3, seed=1, diagnostics=False)
    assert counts["outside"] == 0, "noise drawn outside AgentContext.release"
    assert counts["charged"] > 0
    # the driver's ledgers (composed into result.privacy) hold exactly the charged releases, no more, no fewer
    assert int(result.privacy["steps"].sum()) == counts["charged"]
    assert set(result.privacy["calibration"]) == {"valid"}
    return counts


#: The methods whose releases are sent verbatim (payload-tagged, checked by every host after every step).
VERBATIM = {algorithms.DPDistributedGradient: "y", algorithms.PRADMM: "x", algorithms.PPADMM: "x",
            algorithms.DPP2: "y", algorithms.DiaDSP: "x", algorithms.PPDC: "x"}


@pytest.mark.filterwarnings("ignore::privcvx.errors.ReproducibleNoiseWarning")
@pytest.mark.parametrize("cls", list(VERBATIM), ids=lambda cls: cls.__name__)
def test_a_tampered_verbatim_release_fails_the_run(cls, monkeypatch):
    """Every host checks a payload-tagged release against the step's messages: a program that sends something
    other than what it released (here: the release plus 1e-9) makes the run fail with a PrivacyError."""
    algorithm, build = next(case.values for case in CASES if isinstance(case.values[0], cls))
    problem = build() if build is not None else supported_problem(algorithm)
    message = Message.__init__
    key = VERBATIM[cls]

    def tampered(self, round, sender, receiver, payload, phase=0):
        if key in payload and isinstance(payload[key], np.ndarray) and payload[key].dtype == float:
            payload = {**payload, key: payload[key] + 1e-9}
        message(self, round, sender, receiver, payload, phase)

    monkeypatch.setattr(Message, "__init__", tampered)
    with pytest.raises((PrivacyError, pc.errors.RunFailed)) as failure:  # RunFailed with the history after round 0
        problem.solve(algorithm, rounds=2, seed=1, diagnostics=False)
    assert "not what its ledger charged" in str(failure.value)


def _programs(seed: int = 1):
    """DPDG's programs and contexts for every agent of a small problem on a ring, outside a run."""
    problem = supported_problem(algorithms.DPDistributedGradient(epsilon=1.0))
    algorithm = algorithms.DPDistributedGradient(epsilon=1.0).prepare(
        problem, pc.Topology.ring().bind(problem.names), 4)
    contexts = [AgentContext.for_agent(problem, i, seed=seed, topology=pc.Topology.ring(), rounds=4)
                for i in range(len(problem.agents))]
    return [algorithm.agent_program(agent, c) for agent, c in zip(problem.agents, contexts, strict=True)], contexts


def _exchange(programs, t: int, sent: list[list[Message]]) -> list[list[Message]]:
    """Round t: every program takes everything the others sent (a ring of three is complete)."""
    return [program.step(t, [m for j, out in enumerate(sent) if j != i for m in out])
            for i, program in enumerate(programs)]


def test_a_message_that_differs_from_its_recorded_release_is_refused():
    programs, contexts = _programs()
    started = [program.start() for program in programs]
    sent = _exchange(programs, 1, started)
    context = contexts[0]
    releases = context.take_releases()
    assert [r.tags.get("payload") for r in releases] == ["y", "y"]
    messages = started[0] + sent[0]
    check_releases(context.name, messages, releases)  # as sent: accepted
    tampered = [Message(m.round, m.sender, m.receiver, {"y": m["y"] + 1e-12}, m.phase) for m in messages]
    with pytest.raises(PrivacyError, match="not what its ledger charged") as error:
        check_releases(context.name, tampered, releases)
    assert error.value.agent == context.name


def test_noise_drawn_one_way_and_charged_another_is_refused():
    context = _programs()[1][0]
    with pytest.raises(PrivacyError, match="not the noise charged") as error:
        context.release(np.zeros(2), pc.Laplace(1.0), pc.Sensitivity(l1=1.0), scale=0.75)
    assert error.value.argument == "scale" and error.value.agent == context.name
    assert context.ledger.steps == 0


def test_the_runtime_restores_the_noise_stream_and_ledger_not_the_program():
    programs, contexts = _programs(seed=3)
    sent = _exchange(programs, 1, [program.start() for program in programs])
    states = [{"program": p.state_dict(), "context": c.state_dict()} for p, c in zip(programs, contexts, strict=True)]
    assert set(states[0]["program"]) == {"x", "y"}  # nothing of the runtime's in the program's state
    after = _exchange(programs, 2, sent)
    others, other_contexts = _programs(seed=4)
    for program, context, state in zip(others, other_contexts, states, strict=True):
        context.load_state_dict(state["context"])
        program.load_state_dict(state["program"])
    again = _exchange(others, 2, sent)
    assert all(np.array_equal(a[0]["y"], b[0]["y"]) for a, b in zip(after, again, strict=True))
    assert other_contexts[0].ledger.signature() == contexts[0].ledger.signature()
    with pytest.raises(PrivacyError, match="not an agent context's state"):
        other_contexts[0].load_state_dict(states[0]["program"])


@pytest.mark.filterwarnings("ignore::privcvx.errors.ReproducibleNoiseWarning")
def test_a_nominal_sensitivity_labels_the_privacy_table():
    problem = supported_problem(algorithms.LinearizedADMM())
    nominal = pc.DistributedProblem([
        pc.Agent(agent.objective, agent.constraints, shared=agent.shared, name=agent.name, smoothness=agent.smoothness,
                 sensitivity=pc.Sensitivity(l1=0.1, l2=0.1, nominal="a printed constant") if i == 0 else
                 agent.sensitivity) for i, agent in enumerate(problem.agents)])
    private = algorithms.LinearizedADMM(privacy=pc.ObjectivePerturbation(pc.Gaussian(0.5, 1e-5)))
    table = nominal.solve(private, rounds=2, seed=1).privacy
    assert list(table["calibration"]) == ["nominal: a printed constant", "valid", "valid"]
    assert list(problem.solve(private, rounds=2, seed=1).privacy["calibration"]) == ["valid"] * 3


def test_release_rejects_what_is_not_a_mechanism_or_sensitivity():
    context = _programs()[1][0]
    with pytest.raises(PrivacyError, match="mechanism"):
        context.release(np.zeros(2), "laplace", pc.Sensitivity(l1=1.0))
    with pytest.raises(PrivacyError, match="Sensitivity"):
        context.release(np.zeros(2), pc.Laplace(1.0), 1.0)
    assert isinstance(Release(np.zeros(1), None, 0.0, {}), Release)
