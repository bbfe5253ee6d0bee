"""DPDistributedGradient with ``delta``: its noise calibrated to a total (epsilon, delta) through its ledger's
accountant, checked against dp-accounting on the noise scales actually drawn."""

from __future__ import annotations

import math

import cvxpy as cp
import dp_accounting
import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import AgentContext, DPDistributedGradient
from privcvx.algorithms.dp_gradient_accuracy import optimal_noise_decay
from privcvx.errors import ParameterError, PrivacyError

EPSILON, DELTA, Q, ROUNDS, L1, L2, N = 1.0, 1e-6, 0.9, 40, 0.6, 0.3, 3


def _least_squares(conic: bool | list[bool], agents: int = 3) -> pc.DistributedProblem:
    """Least squares over the box [-1, 1]^3 (np.clip: S = l1) or the unit ball (a solver: S = sqrt(n) l2, plus the
    solver's E = 2 sqrt(n) e); ``conic`` for every agent, or per agent."""
    rng = np.random.default_rng(5)
    kinds = conic if isinstance(conic, list) else [conic] * agents
    declared = []
    for p, conic in enumerate(kinds):
        a, b = rng.normal(size=(6, N)), rng.normal(size=6)
        x = cp.Variable(N)
        region = [cp.norm(x) <= 1.0] if conic else [x >= -1.0, x <= 1.0]
        smoothness = float(np.linalg.eigvalsh(a.T @ a).max()) / 3  # of ||a x - b||^2 / 6
        declared.append(pc.Agent(cp.sum_squares(a @ x - b) / 6, region, shared=x, name=f"agent-{p}",
                                 declared=pc.Declared(sensitivity=pc.Sensitivity(l1=L1, l2=L2),
                                                      smoothness=smoothness)))
    return pc.DistributedProblem(declared)


def _drawn(problem: pc.DistributedProblem, delta: float | None, monkeypatch) -> tuple[dict, object]:
    """A run's releases as drawn: per agent, the (L1 sensitivity, Laplace scale) of each release, in order."""
    drawn: dict[str, list[tuple[float, float]]] = {}
    release = AgentContext.release

    def recording(self, value, mechanism, sensitivity, **options):
        drawn.setdefault(self.name, []).append((sensitivity.l1, options["scale"]))
        return release(self, value, mechanism, sensitivity, **options)

    monkeypatch.setattr(AgentContext, "release", recording)
    result = problem.solve(DPDistributedGradient(epsilon=EPSILON, q=Q, delta=delta), pc.Topology.ring(),
                           rounds=ROUNDS, seed=7, diagnostics=False)
    monkeypatch.setattr(AgentContext, "release", release)
    return drawn, result


def _independent_epsilons(problem: pc.DistributedProblem, drawn: dict, conic: bool | list[bool]) -> list[list[float]]:
    """Each agent's release epsilons Delta(t) / M_{t+1}: Delta(t) recomputed from the declarations (Lemma 4 and
    the projection's rule), M_{t+1} the scale drawn; ``conic`` for every agent, or per agent."""
    c = 1.0 / max(agent.smoothness for agent in problem.agents)
    e = DPDistributedGradient().solver_error
    kinds = conic if isinstance(conic, list) else [conic] * len(problem.agents)
    per_agent = []
    for conic, agent in zip(kinds, problem.agents, strict=True):
        releases = drawn[agent.name]
        assert len(releases) == ROUNDS + 1 and releases[0][0] == 0.0  # y(1) perturbs the public x(0)
        epsilons = []
        for t, (charged, scale) in enumerate(releases[1:], start=1):
            gamma = c * Q ** (t - 1)
            sensitivity = math.sqrt(N) * (L2 * gamma + 2 * e) if conic else L1 * gamma
            assert charged == pytest.approx(sensitivity, rel=1e-12)
            epsilons.append(sensitivity / scale)
        per_agent.append(epsilons)
    return per_agent


def _composed(epsilons: list[float], delta: float = DELTA) -> float:
    """dp-accounting's RDP composition of Laplace releases of these epsilons, or their sum (basic) if smaller."""
    accountant = dp_accounting.rdp.RdpAccountant()
    for epsilon in epsilons:
        accountant.compose(dp_accounting.LaplaceDpEvent(1.0 / epsilon))
    return min(accountant.get_epsilon(delta), math.fsum(epsilons))


@pytest.mark.parametrize("conic", [False, True], ids=["box", "conic"])
def test_with_delta_the_ledger_spends_the_total_by_dp_accounting_with_less_noise(conic, monkeypatch):
    problem = _least_squares(conic)
    drawn, result = _drawn(problem, DELTA, monkeypatch)
    pure, _ = _drawn(problem, None, monkeypatch)
    assert result.history["epsilon"].iloc[-1] == pytest.approx(EPSILON, rel=1e-6)
    assert result.history["epsilon"].iloc[-1] <= EPSILON and (result.privacy["delta"] == DELTA).all()
    per_agent = _independent_epsilons(problem, drawn, conic)
    spent = [_composed(epsilons) for epsilons in per_agent]
    assert max(spent) <= EPSILON * (1 + 1e-9) and max(spent) == pytest.approx(EPSILON, rel=1e-6)
    # Every scale is the pure calibration's divided by one factor kappa > 1 (the noise actually smaller) ...
    ratios = np.array([[p[1] / d[1] for p, d in zip(pure[name], drawn[name], strict=True)] for name in drawn])
    factor = ratios[0, 0]
    np.testing.assert_allclose(ratios, factor, rtol=1e-13)
    # ... above what basic composition alone allows, 1 / (sum of the pure epsilon_t): the T releases spend
    # (1 - share) epsilon (1 - (q/p)^T) + share epsilon at pure epsilon (share 1/2 on the ball, 0 on the box),
    # and RDP gains beyond it (kappa = 1.36 against 1.06 on the box, 1.46 against 1.03 on the ball); and kappa is the
    # largest: 1e-6 more noise rate overspends by dp-accounting.
    p, share = optimal_noise_decay(Q), 0.5 if conic else 0.0
    basic = (1 - share) * EPSILON * (1 - (Q / p) ** ROUNDS) + share * EPSILON
    assert factor > 1.2 * EPSILON / basic
    assert max(_composed([(1 + 1e-6) * e for e in epsilons]) for epsilons in per_agent) > EPSILON


def test_with_delta_boxes_and_balls_in_one_run_each_spend_the_total(monkeypatch):
    """Agents on boxes and on balls (a solver's term) in one run: each kind has its own kappa, so every private agent's
    releases compose to the total by dp-accounting (one kappa from the element-wise largest epsilons of both kinds
    left each kind below it: 0.91 on the box and 0.84 on the balls here)."""
    kinds = [False, True, True]
    problem = _least_squares(kinds)
    drawn, result = _drawn(problem, DELTA, monkeypatch)
    spent = [_composed(epsilons) for epsilons in _independent_epsilons(problem, drawn, kinds)]
    assert max(spent) <= EPSILON * (1 + 1e-9)
    np.testing.assert_allclose(spent, EPSILON, rtol=1e-6)
    assert result.history["epsilon"].iloc[-1] == pytest.approx(EPSILON, rel=1e-6)


def test_without_delta_the_run_is_todays_bitwise(monkeypatch):
    """delta=None divides every scale by 1.0: the same run, bitwise, as the schedule's scale undivided (today's
    noise_scale), and a run on boxes still extends (no horizon)."""
    problem = _least_squares(conic=False)
    topology = pc.Topology.ring()
    ran = problem.solve(DPDistributedGradient(epsilon=EPSILON, q=Q), topology, rounds=ROUNDS, seed=3)
    monkeypatch.setattr(DPDistributedGradient, "noise_scale",
                        lambda self, sensitivity, t, solver_term=0.0: self._schedule_scale(sensitivity, t, solver_term))
    today = problem.solve(DPDistributedGradient(epsilon=EPSILON, q=Q), topology, rounds=ROUNDS, seed=3)
    assert ran.history.drop(columns="time_s").equals(today.history.drop(columns="time_s"))
    assert ran.w.tobytes() == today.w.tobytes() and ran.privacy.equals(today.privacy)
    ready = DPDistributedGradient(epsilon=EPSILON).prepare(problem, topology.bind(problem.names), ROUNDS)
    assert ready.horizon is None and not ready.calibrated_to_rounds


def test_with_delta_a_run_is_calibrated_to_its_rounds_on_boxes_too():
    problem = _least_squares(conic=False)
    topology = pc.Topology.ring().bind(problem.names)
    ready = DPDistributedGradient(epsilon=EPSILON, delta=DELTA).prepare(problem, topology, 12)
    assert ready.horizon == 12 and ready.calibrated_to_rounds and ready.accounting_delta == DELTA
    with pytest.raises(ParameterError, match="horizon") as raised:
        DPDistributedGradient(epsilon=EPSILON, delta=DELTA, horizon=10).prepare(problem, topology, 11)
    assert raised.value.argument == "horizon"
    with pytest.raises(ParameterError, match="prepare") as raised:  # kappa is fixed for a run
        DPDistributedGradient(epsilon=EPSILON, c=0.1, delta=DELTA).noise_scale(1.0, 2)
    assert raised.value.argument == "delta"
    with pytest.raises(ParameterError, match="prepare") as raised:  # so are the release epsilons
        DPDistributedGradient(epsilon=EPSILON, c=0.1, delta=DELTA).release_epsilons(False)
    assert raised.value.argument == "horizon"


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-6, float("nan"), "1e-6", True])
def test_bad_deltas_are_refused_naming_the_argument(bad):
    with pytest.raises(PrivacyError) as raised:
        DPDistributedGradient(epsilon=EPSILON, delta=bad)
    assert raised.value.argument == "delta"


def test_the_papers_calibration_takes_no_delta():
    with pytest.raises(PrivacyError, match="calibration='safe'") as raised:
        DPDistributedGradient(epsilon=EPSILON, calibration="paper", delta=DELTA)
    assert raised.value.argument == "calibration"
