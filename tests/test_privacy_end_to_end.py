"""Privacy of a whole run: public settings, release-only results, seeding, checkpoints (issue: end to end)."""

from __future__ import annotations

import os
import stat
import warnings

import cvxpy as cp
import numpy as np
import pytest
from core_problems import general_form

import privcvx as pc
from privcvx.algorithms.consensus import key_groups
from privcvx.errors import PrivacyError, ReproducibleNoiseWarning
from privcvx.schedules import ResidualBalancing, Residuals
from privcvx.topology import SERVER

GAUSSIAN = pc.ObjectivePerturbation(pc.Gaussian(0.5, 1e-5))


def _rendezvous(points: np.ndarray) -> pc.DistributedProblem:
    from problems.rendezvous import rendezvous

    return rendezvous(points)


def _neighbours() -> tuple[np.ndarray, np.ndarray]:
    points = np.random.default_rng(5).uniform(-1, 1, (5, 2))
    other = points.copy()
    other[2] = [0.9, -0.9]  # agent 2 moves its private address
    return points, other


def _replayed_rho(problem: pc.DistributedProblem, result: pc.Result, rule: ResidualBalancing) -> list[float]:
    """rho^t recomputed by a fresh residual-balancing ``rule`` from the transcript alone: the declared L_p of the
    first messages and the residuals (and, for a relative rule, their scales) that the public monitor derives from
    each round's messages (a monitor with ``tol`` computes the scales)."""
    rule.start(max(float(m["smoothness"]) for m in result.transcript.round(0) if "smoothness" in m.payload),
               key_groups(problem))
    monitor = pc.algorithms.LinearizedADMM(tol=(1e-12, 1e-12)).monitor(problem, None)
    rhos = []
    for t in range(1, len(result.history) + 1):
        rhos.append(rule.value(t))
        rule.observe(Residuals(monitor.observe(t, result.transcript.round(t))))
    return rhos


@pytest.mark.parametrize("rho", ["adaptive", "relative"])
def test_defaults_under_privacy_give_identical_steps_and_penalties_on_neighbouring_data(rho):
    """eta and rho^1 come from the declared L_p alone: identical on neighbouring data. Later rho^t adapt to the
    residuals, so they may differ, but only through the releases: a rule replayed on the transcript gives them.
    Under privacy rho="adaptive" is the absolute rule ResidualBalancing(); the relative pc.schedules.adaptive()
    is checked the same way."""
    histories = []
    for points in _neighbours():
        problem = _rendezvous(points)
        setting = "adaptive" if rho == "adaptive" else pc.schedules.adaptive()
        with pytest.warns(ReproducibleNoiseWarning):
            result = problem.solve(rounds=20, local_updates=2, privacy=GAUSSIAN, seed=4, rho=setting)
        replay = ResidualBalancing() if rho == "adaptive" else pc.schedules.adaptive()
        assert result.history["rho"].tolist() == _replayed_rho(problem, result, replay)
        histories.append(result.history)
    assert histories[0]["eta"].equals(histories[1]["eta"])
    assert histories[0]["rho"].iloc[0] == histories[1]["rho"].iloc[0]
    assert not histories[0]["objective"].equals(histories[1]["objective"])  # the data did change the run


def test_settings_estimated_from_private_data_are_refused():
    rng = np.random.default_rng(0)
    agents = []
    for p in range(2):
        x = cp.Variable(3)
        agents.append(pc.Agent(cp.sum_squares(rng.normal(size=(5, 3)) @ x - rng.normal(size=5)), [cp.abs(x) <= 1],
                               shared=x, name=f"site-{p}", sensitivity=pc.Sensitivity(l1=1.0, l2=1.0)))
    problem = pc.DistributedProblem(agents)
    with pytest.raises(PrivacyError, match=r"\[agent 'site-0'\] argument 'smoothness'.*declare pc.Agent\(smoothness"):
        problem.solve(rounds=2, privacy=GAUSSIAN)
    problem.solve(rounds=2, privacy=GAUSSIAN, eta=0.05, rho=1.0)  # public numbers: fine
    problem.solve(rounds=2)  # without privacy L_p may be estimated from the data
    y = cp.Variable(3)
    nonsmooth = pc.Agent(cp.norm1(y - 1), [cp.abs(y) <= 1], shared=y, sensitivity=pc.Sensitivity(l1=1.0, l2=1.0))
    pc.DistributedProblem([nonsmooth]).solve(rounds=2, privacy=GAUSSIAN, rho=1.0)  # Eq. (26a) needs no L_p


def test_private_runs_draw_from_os_entropy_unless_seeded_and_an_integer_seed_warns():
    problem = _rendezvous(_neighbours()[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning without a seed
        warnings.simplefilter("ignore", pc.ConvergenceWarning)  # three rounds do not converge: not this test's point
        first = problem.solve(rounds=3, privacy=GAUSSIAN)
        second = problem.solve(rounds=3, privacy=GAUSSIAN)
        problem.solve(rounds=3, seed=1)  # no privacy: a seed is harmless
    assert first.info["noise"].startswith("opendp-grid") and first.info["seed"] == "'secure'"
    assert not np.array_equal(first.w, second.w)
    with pytest.warns(ReproducibleNoiseWarning, match="reproducible by anyone who knows the seed"):
        seeded = problem.solve(rounds=3, privacy=GAUSSIAN, seed=1)
    assert seeded.info["noise"].startswith("seeded-float")


def test_a_secure_run_refuses_checkpoints_and_files_are_owner_only_without_the_seed(tmp_path):
    problem = _rendezvous(_neighbours()[0])
    path = tmp_path / "run.ckpt"
    with pytest.raises(PrivacyError, match="secure noise cannot be checkpointed"):  # an unresumable file of secrets
        problem.solve(rounds=3, privacy=GAUSSIAN, checkpoint=path)
    assert list(tmp_path.iterdir()) == []
    with pytest.warns(ReproducibleNoiseWarning):
        seeded = problem.solve(rounds=3, privacy=GAUSSIAN, checkpoint=path, seed=5)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["run.ckpt", "run.ckpt.log", "run.ckpt.transcript"]
    assert all(stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600 for name in files)
    with pytest.raises(PrivacyError, match="cannot be resumed"):
        problem.solve(rounds=5, privacy=GAUSSIAN, resume=path)
    # The seed regenerates the noise: a saved private result leaves it out unless asked, and is owner-only.
    seeded.save(tmp_path / "result.npz")
    assert stat.S_IMODE(os.stat(tmp_path / "result.npz").st_mode) == 0o600
    assert pc.load_result(tmp_path / "result.npz").info["seed"] == "withheld"
    seeded.save(tmp_path / "kept.npz", include_seed=True)
    assert pc.load_result(tmp_path / "kept.npz").info["seed"] == "5"
    os.symlink(tmp_path / "kept.npz", tmp_path / "link.npz")
    with pytest.raises(pc.errors.ParameterError, match="cannot write"):  # never through a symlink
        seeded.save(tmp_path / "link.npz")


def test_without_diagnostics_only_releases_leave_the_agents():
    problem, eta, rho = general_form()
    for agent in problem.agents:
        agent.sensitivity = pc.Sensitivity(l1=0.2, l2=0.1)
    options = {"rounds": 4, "local_updates": 2, "rho": rho, "eta": eta, "seed": 2,
               "privacy": pc.OutputPerturbation(pc.Laplace(1.0))}
    with pytest.warns(ReproducibleNoiseWarning):
        private = problem.solve(diagnostics=False, **options)
        research = problem.solve(**options)
    assert private.transcript.same_as(research.transcript)  # the same releases either way
    assert set(private.history.columns) == {"round", "consensus_residual", "primal_residual", "dual_residual",
                                            "epsilon", "rho"}  # no step times: they depend on the data
    assert "time_s" in research.history.columns
    assert private.info["diagnostics"] == [] and private.info["release_only"]
    for message in private.transcript:  # the audit: nothing but releases and public settings
        expected = {"w", "rho"} if message.sender == SERVER else {"z"}
        assert set(message.payload) == expected
    last = {m.sender: m["z"] for m in private.transcript.round(4) if m.receiver == SERVER}
    clean = problem.solve(**{**options, "privacy": None})  # without privacy: the whole local vectors
    for name, layout, z, kept, full in zip(problem.names, problem.layouts, private.z, research.z, clean.z,
                                           strict=True):
        assert np.array_equal(z, last[name])  # result.z holds what the agent sent, and only that
        assert np.array_equal(kept, z)  # under privacy also in a research run (diagnostics=True)
        assert full.size > z.size == layout.shared_local.size  # not its private variables


def test_the_privacy_table_says_where_each_bound_holds():
    from problems.rendezvous import rendezvous

    problem = rendezvous(_neighbours()[0])
    with pytest.warns(ReproducibleNoiseWarning):
        laplace = problem.solve(rounds=4, privacy=pc.ObjectivePerturbation(pc.Laplace(0.5)), seed=1).privacy
        gaussian = problem.solve(rounds=4, privacy=pc.ObjectivePerturbation(pc.Gaussian(0.5, 1e-5)), seed=1).privacy
    assert (laplace["delta_basic"] == 0.0).all() and (laplace["delta_advanced"] == laplace["delta"]).all()
    assert np.allclose(gaussian["delta_basic"], 4 * 1e-5)  # basic composition holds at the summed delta ...
    assert (gaussian["delta_basic"] > gaussian["delta"]).all()  # ... which is not the run's delta


def test_derived_output_sensitivity_allows_for_the_solvers_error():
    from privcvx.localsolve import CERTIFIED_ERROR, LocalProblem
    from privcvx.privacy.perturbation import derived_output_sensitivity

    gradient, weights = pc.Sensitivity(l1=0.4, l2=0.2), np.full(9, 4.0)
    exact = derived_output_sensitivity(gradient, weights, separable=False)
    solved = derived_output_sensitivity(gradient, weights, separable=False, solver_error=CERTIFIED_ERROR)
    assert solved.l2 == pytest.approx(exact.l2 + 2 * CERTIFIED_ERROR)  # an l2 bound: 2 e in l2
    assert solved.l1 == pytest.approx(exact.l1 + 2 * 3 * CERTIFIED_ERROR)  # 2 sqrt(9) e in l1
    problem, _, _ = general_form()
    assert LocalProblem(problem.agents[0], problem.layouts[0], certified=True).error_bound == CERTIFIED_ERROR
    x = cp.Variable(2)
    boxed = pc.Agent(cp.sum_squares(x), [x <= 1, x >= -1], shared=x)
    assert LocalProblem(boxed, pc.DistributedProblem([boxed]).layouts[0], certified=True).error_bound == 0.0
