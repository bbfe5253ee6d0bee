"""result.status from public metrics, the divergence stop, pc.ConvergenceWarning, and result.average()."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import cvxpy as cp
import numpy as np
import pytest
from core_problems import box_least_squares

import privcvx as pc
from privcvx.algorithms.diadsp import default_step
from privcvx.errors import ConvergenceWarning, RunFailed

ROOT = Path(__file__).resolve().parents[1]
A = pc.algorithms


def _unbounded() -> pc.DistributedProblem:
    """A linear objective with no constraints: sum_p c_p^T x has no minimum (CVXPY: "unbounded")."""
    agents = []
    for p, c in enumerate([np.array([1.0, 0.5]), np.array([0.5, -0.2]), np.array([0.3, 0.1])]):
        x = cp.Variable(2, name=f"x{p}")
        agents.append(pc.Agent(c @ x, shared=x, name=f"agent-{p}", smoothness=0.0))
    return pc.DistributedProblem(agents)


def test_the_unbounded_problem_is_unbounded_for_cvxpy():
    x = cp.Variable(2)
    problem = cp.Problem(cp.Minimize(np.array([1.8, 0.4]) @ x))
    problem.solve()
    assert problem.status == cp.UNBOUNDED


@pytest.mark.parametrize("algorithm", [None, A.DPDistributedGradient(), A.PRADMM(), A.RandomizedADMM(),
                                       A.ExactADMM()],
                         ids=["Algorithm1", "DPDG", "PRADMM", "RandomizedADMM", "ExactADMM"])
def test_an_unbounded_problem_stops_diverging_within_a_few_rounds(algorithm):
    with pytest.warns(ConvergenceWarning, match="diverging"):
        result = _unbounded().solve(algorithm, rounds=200)
    assert result.status == "diverging" and result.info["stop"] == "diverging"
    assert len(result.history) <= 40  # measured: 25 (RandomizedADMM: 25 to 30, its aggregators are random)


@pytest.mark.parametrize("algorithm", [None, A.PRADMM(), A.RandomizedADMM(), A.ExactADMM()],
                         ids=["Algorithm1", "PRADMM", "RandomizedADMM", "ExactADMM"])
def test_a_converging_default_run_reports_converged_and_does_not_warn(algorithm):
    problem = box_least_squares()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        result = problem.solve(algorithm, rounds=300, reference=True)
    assert result.status == "converged" and len(result.history) == 300  # the default tol judges, does not stop
    gap = abs(result.history["objective"].iloc[-1] - result.reference.value)
    assert gap <= 1e-6 * max(1.0, abs(result.reference.value))  # the centralized optimum agrees


def test_a_short_run_is_max_rounds_and_warns():
    with pytest.warns(ConvergenceWarning, match="'max_rounds' at round 3 of 3"):
        result = box_least_squares().solve(rounds=3)
    assert result.status == "max_rounds"


def test_a_given_tol_stops_the_run_converged():
    result = box_least_squares().solve(rounds=300, tol=(1e-6, 1e-5))
    assert result.status == "converged" and result.info["stop"] == "tolerance" and len(result.history) < 300


def test_status_is_computed_under_privacy_from_releases_and_survives_save(tmp_path):
    problem = box_least_squares()
    privacy = pc.ObjectivePerturbation(pc.Gaussian(epsilon=0.5, delta=1e-5))
    with pytest.warns(ConvergenceWarning):
        result = problem.solve(rounds=20, privacy=privacy, diagnostics=False)
    assert result.status == "max_rounds"
    result.save(tmp_path / "run.npz")
    loaded = pc.load_result(tmp_path / "run.npz")
    assert loaded.status == "max_rounds"
    np.testing.assert_array_equal(loaded.average().w, result.average().w)


def test_a_failed_run_and_an_interrupted_run():
    problem = box_least_squares()

    def fail(row):
        if row["round"] == 3:
            raise RuntimeError("injected")

    with pytest.raises(RunFailed, match="injected") as info:
        problem.solve(rounds=10, callback=fail)
    assert info.value.result.status == "failed"

    def interrupt(row):
        if row["round"] == 3:
            raise KeyboardInterrupt

    stopped = problem.solve(rounds=10, callback=interrupt)
    assert stopped.status == "interrupted" and len(stopped.history) == 3


# ---- the ergodic average ---------------------------------------------------------------------------------------
def test_average_is_the_mean_of_the_released_iterates_in_the_transcript():
    """Algorithm 1 under ObjPert: the average recomputed from the transcript (the server's w, each agent's z)."""
    problem = box_least_squares()
    privacy = pc.ObjectivePerturbation(pc.Gaussian(epsilon=0.5, delta=1e-5))
    with pytest.warns(ConvergenceWarning):
        result = problem.solve(rounds=40, privacy=privacy)
    rounds = range(1, 41)
    first = problem.names[0]
    w = np.mean([next(m["w"] for m in result.transcript.round(t) if m.receiver == first) for t in rounds], axis=0)
    z = [np.mean([next(m["z"] for m in result.transcript.round(t) if m.sender == name) for t in rounds], axis=0)
         for name in problem.names]
    average = result.average()
    np.testing.assert_allclose(average.w, w, rtol=1e-12, atol=1e-14)
    for mine, theirs in zip(average.z, z, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-14)
    residual = np.sqrt(sum(np.sum((w - z_p) ** 2) for z_p in z))
    assert average.history["consensus_residual"].iloc[0] == pytest.approx(residual, rel=1e-12)
    assert residual < result.history["consensus_residual"].iloc[-1]  # the noise averages out
    assert average.privacy.equals(result.privacy)  # post-processing: the same spend


def test_average_of_a_decentralized_method():
    """DPDG: the average over rounds of the agents' latest broadcasts y_i, and of their mean (w). Round t's step
    sends y_i(t + 1), stamped t + 1 (the start sends y_i(1))."""
    problem = box_least_squares()
    with pytest.warns(ConvergenceWarning):
        result = problem.solve(A.DPDistributedGradient(), rounds=30)
    latest = {m.sender: m["y"] for m in result.transcript.round(1)}
    totals, w_total = dict.fromkeys(problem.names, 0.0), 0.0
    for t in range(1, 31):
        latest.update({m.sender: m["y"] for m in result.transcript.round(t + 1)})
        for name in problem.names:
            totals[name] = totals[name] + latest[name]
        w_total = w_total + np.mean([latest[name] for name in problem.names], axis=0)
    average = result.average()
    np.testing.assert_allclose(average.w, w_total / 30, rtol=1e-12)
    for mine, name in zip(average.z, problem.names, strict=True):
        np.testing.assert_allclose(mine, totals[name] / 30, rtol=1e-12)


def test_readme_example_reports_its_status_honestly():
    """The README's example ends unconverged: the README says so, and prints the status and the average."""
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## Example\n\n```python\n(.*?)```", text, re.S).group(1)
    assert "print(result.status)" in code and "result.average()" in code
    namespace: dict = {}
    with pytest.warns(ConvergenceWarning, match="max_rounds"):
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    result = namespace["result"]
    assert result.status == "max_rounds"
    assert re.search(r'print\(result\.status\)\s+# "max_rounds"', code)
    last = result.history["consensus_residual"].iloc[-1]
    assert result.average().history["consensus_residual"].iloc[0] < last


def test_average_survives_a_checkpoint_and_resume(tmp_path):
    problem = box_least_squares()
    path = tmp_path / "run.ckpt"
    full = problem.solve(rounds=8)

    def interrupt(row):
        if row["round"] == 4:
            raise KeyboardInterrupt

    problem.solve(rounds=8, checkpoint=path, callback=interrupt)
    resumed = problem.solve(rounds=8, resume=path)
    np.testing.assert_array_equal(resumed.average().w, full.average().w)
    for mine, theirs in zip(resumed.average().z, full.average().z, strict=True):
        np.testing.assert_array_equal(mine, theirs)


def _least_squares_6(seed: int = 0) -> tuple[pc.DistributedProblem, float]:
    """Six agents, strongly convex least squares sum_p ||A_p x - b_p||^2 (A_p 20 x 4 Gaussian), no constraints,
    and the strong convexity of their average (1/6) sum_p 2 A_p^T A_p (the public mu DiaDSP's default needs)."""
    rng = np.random.default_rng(seed)
    agents, hessian = [], np.zeros((4, 4))
    for _ in range(6):
        a, b = rng.normal(size=(20, 4)), rng.normal(size=20)
        x = cp.Variable(4)
        hessian += 2 * a.T @ a / 6
        agents.append(pc.Agent(cp.sum_squares(a @ x - b), shared=x,
                               smoothness=2 * float(np.linalg.eigvalsh(a.T @ a).max())))
    return pc.DistributedProblem(agents), float(np.linalg.eigvalsh(hessian)[0])


@pytest.mark.parametrize("topology", [pc.Topology.random(), pc.Topology.ring()], ids=["random", "ring"])
def test_diadsp_long_step_blows_up_and_stops_diverging(topology):
    """DiaDSP's old default alpha = 0.1 is too long here (alpha L_max = 7.8): the agents' disagreement grows
    geometrically while their average oscillates; the run stops "diverging" (measured: round 25) instead of
    overflowing at round 166."""
    problem, _ = _least_squares_6()
    with pytest.warns(ConvergenceWarning, match="diverging"):
        result = problem.solve(A.DiaDSP(alpha=0.1), topology, rounds=300)
    assert result.status == "diverging" and len(result.history) <= 30
    assert result.history["disagreement"].iloc[-1] > 100 * result.history["disagreement"].iloc[0]


@pytest.mark.parametrize(("topology", "rounds"), [(pc.Topology.random(), 500), (pc.Topology.ring(), 900)],
                         ids=["random", "ring"])
def test_diadsp_default_step_converges_to_the_centralized_optimum(topology, rounds):
    """The default step (Qu & Li's bound, diadsp.default_step) from the declared L_i, the public mu and W's
    spectrum: the noise-free run reaches the CVXPY optimum on a random graph and on a ring."""
    problem, mu = _least_squares_6()
    result = problem.solve(A.DiaDSP(strong_convexity=mu), topology, rounds=rounds, reference=True)
    assert result.status == "converged"
    np.testing.assert_allclose(result.w, result.reference.w, atol=1e-6)


def test_diadsp_default_step_contracts_and_refuses_without_public_constants():
    """rho(M(alpha)) < 1 on a ring of 40 agents (sigma = 0.992) with L / mu = 100; without mu or the agents'
    smoothness DiaDSP says what to set."""
    ring = pc.Topology.ring([f"a{i}" for i in range(40)])
    alpha, radius = default_step(100.0, 1.0, ring.weights(1)[1])
    assert 0 < alpha <= 1 / 100 and radius < 1
    problem, _ = _least_squares_6()
    private = {"u_x": 1.0, "u_y": 1.0, "r": 0.9}
    public = [pc.Agent(agent.objective, shared=agent.shared, smoothness=agent.smoothness,
                       sensitivity=pc.Sensitivity(l2=1.0)) for agent in problem.agents]
    with pytest.raises(pc.errors.ParameterError, match="strong_convexity=mu"):
        pc.DistributedProblem(public).solve(A.DiaDSP(**private), pc.Topology.ring(), rounds=2)
    bare = [pc.Agent(agent.objective, shared=agent.shared, sensitivity=pc.Sensitivity(l2=1.0))
            for agent in problem.agents]
    with pytest.raises(pc.errors.ParameterError, match=r"pc.Agent\(smoothness=L_i\)"):
        pc.DistributedProblem(bare).solve(A.DiaDSP(strong_convexity=1.0, **private), pc.Topology.ring(), rounds=2)


def test_diadsp_default_step_estimates_the_constants_without_noise():
    """Without noise and without declarations, L and mu are estimated at 0 (exact for least squares): the same
    step as from the true constants, and the run converges."""
    problem, mu = _least_squares_6()
    bare = pc.DistributedProblem([pc.Agent(agent.objective, shared=agent.shared) for agent in problem.agents])
    ring = pc.Topology.ring().bind(problem.names)
    declared = default_step(max(agent.smoothness for agent in problem.agents), mu, ring.weights(1)[1])[0]
    assert A.DiaDSP().prepare(bare, ring, 900).alpha == pytest.approx(declared, rel=1e-3)
    result = bare.solve(A.DiaDSP(), ring, rounds=900, reference=True)
    np.testing.assert_allclose(result.w, result.reference.w, atol=1e-6)


def _full_signs(points: list[np.ndarray], steps: list[float]) -> bool:
    """The divergence test's verdict on 2K + 1 points with no residual, every value computed (the formula of
    `Divergence` written out, norms as np.linalg.norm forms them)."""
    div, k = pc.runtime.loop.Divergence, pc.runtime.loop.Divergence.WINDOW
    norm = np.linalg.norm
    norms = [norm(points[0]), norm(points[k]), norm(points[2 * k])]
    if 0.0 < div.GROWTH * norms[0] <= norms[1] and div.GROWTH * norms[1] <= norms[2]:
        return True
    moves = [norm(b - a) for a, b in zip(points, points[1:], strict=False)]
    before, after = points[k] - points[0], points[2 * k] - points[k]
    if norm(before) < div.STRAIGHT * sum(moves[:k]) or norm(after) < div.STRAIGHT * sum(moves[k:]):
        return False
    old = before / max(sum(steps[1:k + 1]), np.finfo(float).tiny)
    new = after / max(sum(steps[k + 1:]), np.finfo(float).tiny)
    if not norm(old) > 0.0 or norm(new) < (1.0 - div.SLACK) * norm(old):
        return False
    return bool(float(old @ new) >= div.ALIGNED * norm(old) * norm(new) and norms[0] < norms[1] < norms[2]
                and norm(after) > div.FLOOR * max(1.0, norms[2]))


def test_the_divergence_tests_shortcut_for_a_shrinking_window_decides_as_the_whole_test():
    """`Divergence._signs` decides "the second window shrinks" from the displacements' norms, with a margin for the
    rounding (`Divergence.rounding`), before forming the scaled displacements: on straight paths whose second window
    is within 1e-4 of the threshold (1 - SLACK) either way, down to a few units of rounding, its verdicts are those
    of the whole test, and both verdicts occur."""
    rng = np.random.default_rng(11)
    div, k = pc.runtime.loop.Divergence, pc.runtime.loop.Divergence.WINDOW
    verdicts = []
    for case in range(600):
        n = int(rng.integers(2, 300))
        start, direction = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4), rng.standard_normal(n)
        direction *= np.sign(start @ direction) or 1.0  # moving away from 0: the norms grow
        steps = [1.0] * (2 * k + 1) if case % 2 else list(1.0 / np.arange(1, 2 * k + 2) ** 0.75)
        ratio = (1.0 - div.SLACK) * (1.0 + rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(-16, -4))
        # the first window's steps s_1..s_K move by steps[i], the second's by ratio x steps[i] (per-step ratio)
        moves = [0.0] + [steps[i] for i in range(1, k + 1)] + [ratio * steps[i] for i in range(k + 1, 2 * k + 1)]
        points = [start + direction * float(np.sum(moves[:i + 1])) for i in range(2 * k + 1)]
        tail = div()
        for point, step in zip(points, steps, strict=True):
            tail.diverging(point, None if case % 2 else step)
        verdicts.append(tail._signs())
        assert verdicts[-1] == _full_signs(points, steps), case
    assert 100 < sum(verdicts) < 500
