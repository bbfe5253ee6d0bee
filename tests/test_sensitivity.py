"""Sensitivities that survive the step between the data and the release (privcvx.privacy.sensitivity).

The bounds are checked against projections computed here in closed form (and one against CVXPY), and DPDG's ledger
against a replay of its releases for a worst-case neighbouring pair.
"""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest

import privcvx as pc
from privcvx.algorithms import AgentContext, DPDistributedGradient
from privcvx.errors import PrivacyError
from privcvx.localsolve import CERTIFIED_ERROR
from privcvx.privacy.noise import agent_noise_sources
from privcvx.privacy.perturbation import derived_output_sensitivity
from privcvx.privacy.sensitivity import projected_sensitivity


def _simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto {x >= 0, sum x = 1} (Held, Wolfe & Crowder's sort-based rule)."""
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - 1.0
    k = np.flatnonzero(u - cumulative / np.arange(1, v.size + 1) > 0)[-1]
    return np.maximum(v - cumulative[k] / (k + 1), 0.0)


def _sets(n: int, rng: np.random.Generator) -> dict[str, tuple[str, object]]:
    """Random convex sets in R^n with their weighted projection (point, metric m) and their kind."""
    lo = rng.uniform(-1.0, 0.0, n)
    hi = lo + rng.uniform(0.1, 1.0, n)
    normal, offset = rng.normal(size=n), rng.normal()
    origin, direction = rng.normal(size=n), rng.normal(size=n)
    centre, radius = rng.normal(size=n), rng.uniform(0.5, 2.0)

    def hyperplane(v: np.ndarray, m: np.ndarray) -> np.ndarray:  # argmin sum m (x - v)^2 s.t. normal.x = offset
        return v - (normal / m) * (normal @ v - offset) / (normal @ (normal / m))

    def line(v: np.ndarray, m: np.ndarray) -> np.ndarray:
        return origin + direction * ((m * direction) @ (v - origin)) / ((m * direction) @ direction)

    def ball(v: np.ndarray, m: np.ndarray) -> np.ndarray:
        gap = v - centre
        return centre + gap * min(1.0, radius / np.linalg.norm(gap))

    return {"free": ("free", lambda v, m: v.copy()), "box": ("box", lambda v, m: np.clip(v, lo, hi)),
            "hyperplane": ("conic", hyperplane), "line": ("conic", line), "ball": ("conic", ball),
            "simplex": ("conic", lambda v, m: _simplex(v))}


def test_simplex_projection_matches_cvxpy():
    rng = np.random.default_rng(0)
    for _ in range(3):
        v = rng.normal(size=5) * 2
        x = cp.Variable(5)
        cp.Problem(cp.Minimize(cp.sum_squares(x - v)), [x >= 0, cp.sum(x) == 1]).solve(solver=cp.CLARABEL)
        np.testing.assert_allclose(_simplex(v), x.value, atol=1e-7)


@pytest.mark.parametrize("n", [2, 3, 7])
def test_projected_bounds_hold_on_random_points_and_sets(n):
    rng = np.random.default_rng(n)
    worst = {"l1": 0.0, "l2": 0.0}
    for _ in range(30):
        for name, (kind, project) in _sets(n, rng).items():
            weighted = name in ("free", "box", "hyperplane", "line")  # the projections above that take a metric
            metric = rng.uniform(0.5, 3.0, n) if weighted else np.ones(n)
            scale = rng.uniform(0.1, 2.0)
            centre = rng.normal(size=n) * 2
            d = rng.normal(size=n)
            # dense, one-coordinate and two-coordinate changes of the data-dependent vector
            for change in (rng.normal(size=n), np.eye(n)[rng.integers(n)] * rng.normal(),
                           rng.normal(size=n) * (rng.random(n) < 0.4)):
                pre = pc.Sensitivity(l1=float(np.abs(change).sum()), l2=float(np.linalg.norm(change)))
                if pre.l2 == 0.0:
                    continue
                z = project(centre - scale * d / metric, metric)
                z_other = project(centre - scale * (d + change) / metric, metric)
                bound = projected_sensitivity(pre, kind, n, scale=scale, metric=metric)
                for norm, order in (("l1", 1), ("l2", 2)):
                    distance = float(np.linalg.norm(z - z_other, ord=order))
                    assert distance <= getattr(bound, norm) * (1 + 1e-9) + 1e-12, (name, norm)
                    worst[norm] = max(worst[norm], distance / getattr(bound, norm))
    assert worst["l2"] > 0.9  # the bounds are not vacuous: the free set and boxes reach them


@pytest.mark.parametrize("n", [3, 4, 9])
def test_l1_grows_through_a_projection_onto_a_hyperplane_or_a_line(n):
    """The rule is needed: a Euclidean projection stretches an l1 step by 2(n-1)/n (hyperplane {sum x = 1})
    and (1 + sqrt n)/2 (the line along (1 + sqrt n, 1, ..., 1)), both above 1 and below sqrt(n)."""
    step = np.eye(n)[0]
    plane = np.eye(n) - np.ones((n, n)) / n
    assert np.abs(plane @ step).sum() == pytest.approx(2 * (n - 1) / n)
    direction = np.ones(n)
    direction[0] = 1 + math.sqrt(n)
    direction /= np.linalg.norm(direction)
    along = direction * (direction @ step)
    assert np.abs(along).sum() == pytest.approx((1 + math.sqrt(n)) / 2)
    bound = projected_sensitivity(pc.Sensitivity(l1=1.0, l2=1.0), "conic", n)
    assert 1.0 < 2 * (n - 1) / n <= bound.l1 and (1 + math.sqrt(n)) / 2 <= bound.l1 == pytest.approx(math.sqrt(n))


def test_solver_error_and_derived_output_sensitivity_use_the_same_rules():
    gradient, weights = pc.Sensitivity(l1=0.4, l2=0.2), np.array([4.0, 5.0, 8.0, 4.0])
    for separable, kind in ((True, "box"), (False, "conic")):
        direct = projected_sensitivity(gradient, kind, 4, metric=weights, solver_error=CERTIFIED_ERROR)
        assert derived_output_sensitivity(gradient, weights, separable, CERTIFIED_ERROR) == direct
    exact = projected_sensitivity(gradient, "conic", 4, metric=weights)
    assert (exact.l1, exact.l2) == (2.0 * 0.2 / 4.0, 0.2 / 4.0)  # sqrt(4) l2 / min m
    solved = projected_sensitivity(gradient, "conic", 4, metric=weights, solver_error=CERTIFIED_ERROR)
    # the error bound is l2: 2 e in l2, 2 sqrt(n) e = 4 e in l1 (n = 4)
    assert solved.l1 == exact.l1 + 4 * CERTIFIED_ERROR and solved.l2 == exact.l2 + 2 * CERTIFIED_ERROR
    assert projected_sensitivity(pc.Sensitivity(l1=1.0, nominal="printed"), "box", 2).nominal == "printed"


def test_an_l1_release_through_a_set_that_is_not_a_box_needs_a_declared_l2():
    only_l1 = pc.Sensitivity(l1=2.0)
    with pytest.raises(PrivacyError, match=r"\[agent 'zone-3'\].*not a box \('conic'\).*declare pc.Sensitivity"
                                           r"\(l1=\.\.\., l2=\.\.\.\)"):
        projected_sensitivity(only_l1, "conic", 3, norm="l1", agent="zone-3")
    assert projected_sensitivity(only_l1, "conic", 3).l1 is None  # l2 (<= l1) still survives, for a Gaussian
    assert projected_sensitivity(only_l1, "conic", 3, norm="l2").l2 == 2.0
    assert projected_sensitivity(only_l1, "box", 3, norm="l1").l1 == 2.0
    with pytest.raises(PrivacyError, match="kind"):
        projected_sensitivity(only_l1, "polytope", 3)


# ---- DPDG on the affine set {sum x = 1}, n = 3 ------------------------------------------------------------------

DATA = (-1.0, 0.4, 0.7)  # b_i: f_i(x) = ||x||^2 / 2 - b_i x_1, b_i in [-1, 1]: the gradient moves by 2 e_1 at most


def _plane_problem(sensitivity: pc.Sensitivity) -> pc.DistributedProblem:
    agents = []
    for i, b in enumerate(DATA):
        x = cp.Variable(3, name=f"x_{i}")
        agents.append(pc.Agent(0.5 * cp.sum_squares(x) - b * x[0], [cp.sum(x) == 1], shared=x, name=f"agent-{i}",
                               sensitivity=sensitivity, smoothness=1.0))
    return pc.DistributedProblem(agents)


def test_dpdg_ledger_covers_the_replayed_change_of_its_releases_on_an_affine_set():
    """Replay x_0(t) = Proj[z - gamma_t grad f_0(z)] for b_0 = -1 and its neighbour b_0' = +1 on the public z_0(t),
    and compare the l1 distance with the sensitivity the ledger's Laplace release was calibrated to (its epsilon
    times the scale of the noise actually drawn, read from the agent's noise stream)."""
    problem = _plane_problem(pc.Sensitivity(l1=2.0, l2=2.0))
    c, q, rounds = 0.5, 0.9, 8
    topology = pc.Topology.ring().bind(problem.names)
    algorithm = DPDistributedGradient(epsilon=2.0, c=c, q=q).prepare(problem, topology, rounds)
    programs = [algorithm.agent_program(agent, AgentContext.for_agent(problem, i, seed=4, topology=topology))
                for i, agent in enumerate(problem.agents)]
    twin = agent_noise_sources(4, 3)[0]  # agent 0's stream again: its unit Laplace draws
    messages = [program.start()[0] for program in programs]
    twin.standard_laplace(3)  # y_0(1) perturbs the public x_0(0)
    assert programs[0].context.ledger.take_new() == []
    plane = lambda v: v - (v.sum() - 1.0) / 3.0  # noqa: E731 - the Euclidean projection onto {sum x = 1}
    ratios = []
    for t in range(1, rounds + 1):
        received = {m.sender: m["y"] for m in messages}
        z = sum(w * received[j] for j, w in topology.weight_row("agent-0", t).items())
        gamma = c * q ** (t - 1)
        x, x_neighbour = (plane(z - gamma * (z - np.array([b, 0.0, 0.0]))) for b in (-1.0, 1.0))
        messages = [program.step(t, [m for m in messages if m.sender != program.context.name])[0]
                    for program in programs]
        np.testing.assert_allclose(programs[0].x, x, atol=1e-7)  # the replay is the agent's own step
        [(mechanism, count, _)] = programs[0].context.ledger.take_new()  # the release of x_0(t) in y_0(t + 1)
        scale = np.median((messages[0]["y"] - programs[0].x) / twin.standard_laplace(3))
        calibrated = mechanism.epsilon * scale
        change = float(np.abs(x - x_neighbour).sum())
        assert change == pytest.approx(gamma * 2.0 * 4.0 / 3.0, rel=1e-9)  # 4/3 times the declared l1 step
        assert change <= calibrated, t
        ratios.append(calibrated / change)
    assert max(ratios) <= math.sqrt(3) * 3.0 / 4.0 * (1 + 1e-2)  # sqrt(n) l2 + the solver term (e = 1e-3): not loose


def test_dpdg_refuses_an_l1_only_declaration_on_an_affine_set_and_keeps_boxes():
    problem = _plane_problem(pc.Sensitivity(l1=2.0))
    with pytest.raises(PrivacyError, match=r"\[agent 'agent-0'\] argument 'sensitivity'.*not a box \('conic'\).*"
                                           r"declare pc.Sensitivity\(l1=\.\.\., l2=\.\.\.\)"):
        problem.solve(DPDistributedGradient(epsilon=1.0, c=0.5), pc.Topology.ring(), rounds=2, seed=0)
    algorithm = DPDistributedGradient(epsilon=1.0, c=0.5)
    agent = problem.agents[0]
    assert algorithm.release_sensitivity(agent, "box", 3) == 2.0  # a box keeps the declared l1
    assert algorithm.release_sensitivity(agent, "free", 3, step=0.25) == 0.5
