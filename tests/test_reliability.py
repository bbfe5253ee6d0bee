"""Reliability: exact resume in a new process after SIGKILL, safe checkpoint files, cleanup of workers."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

import privcvx as pc
from privcvx.errors import CheckpointError

SCRIPT = Path(__file__).resolve().parent / "scripts" / "resumable_run.py"


def _run(*args: str) -> None:
    subprocess.run([sys.executable, str(SCRIPT), *args], check=True, capture_output=True, text=True, timeout=300)


def _killed_at(case: str, backend: str, out: Path, checkpoint: Path, round_: int) -> None:
    """Start the run in a child process, wait until it has finished ``round_``, then SIGKILL it."""
    child = subprocess.Popen([sys.executable, str(SCRIPT), case, backend, str(out), "--checkpoint", str(checkpoint),
                              "--pause-after", str(round_)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marker = Path(str(out) + ".paused")
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert child.poll() is None and time.monotonic() < deadline, "the child ended before pausing"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)


@pytest.mark.parametrize("case, backend", [
    ("objpert-gaussian", "serial"),      # Gaussian ObjPert, cones, E = 3, adaptive rho
    ("outpert-laplace", "serial"),       # Laplace OutPert, general form with private variables, E = 2
    ("objpert-gaussian", "process"),
    ("outpert-laplace", "process"),
])
def test_resume_after_sigkill_in_a_new_process_is_bitwise_exact(tmp_path, case, backend):
    full, killed, resumed, checkpoint = (tmp_path / name for name in ("full.npz", "killed.npz", "resumed.npz",
                                                                      "run.ckpt"))
    _run(case, backend, str(full))
    _killed_at(case, backend, killed, checkpoint, round_=5)
    assert not killed.exists()  # the run died before finishing
    _run(case, backend, str(resumed), "--resume", str(checkpoint), "--checkpoint", str(checkpoint))
    _assert_same(pc.load_result(full), pc.load_result(resumed))


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> tuple[str, pc.Result]:
    """The addresses file of a factory-built private DPDG run (4 agents, each reading its own row where it runs),
    and that run uninterrupted (serial; every backend gives the same run)."""
    folder = tmp_path_factory.mktemp("sites")
    addresses = folder / "addresses.npy"
    np.save(addresses, np.random.default_rng(5).uniform(-1, 1, (4, 2)))
    case = f"dpdg-factory:{addresses}"
    _run(case, "serial", str(folder / "full.npz"))
    return case, pc.load_result(folder / "full.npz")


# Kill points: the N-th file operation of the checkpoint code in the driver (resumable_run.py --kill-at), before
# it (N even) or after it (N odd). Serial, from round 3's commit on (N = 32): 2 log appends, then each agent's shard
# (written to a temporary file, renamed) and the deletion of its shard of two rounds back, then the state file
# (written; flushed and renamed in the background): N = 38 lands in a shard write, 45 after a deletion, 46 after
# all the shards and before the driver's state file (the kill of the issue). Process: the shards are written in
# the workers; N = 10 is after round 2's shards, before the driver's state file. bench/bench_kill_resume.py runs
# 30 random N per backend.
@pytest.mark.parametrize("backend, kill_at", [("serial", 38), ("serial", 45), ("serial", 46), ("process", 10)])
def test_per_host_checkpoints_resume_bitwise_after_a_kill_in_their_writes(tmp_path, sites, backend, kill_at):
    case, full = sites
    killed, resumed, checkpoint = tmp_path / "killed.npz", tmp_path / "resumed.npz", tmp_path / "run.ckpt"
    child = subprocess.run([sys.executable, str(SCRIPT), case, backend, str(killed), "--checkpoint", str(checkpoint),
                            "--kill-at", str(kill_at)], capture_output=True, timeout=300)
    assert child.returncode == -signal.SIGKILL and not killed.exists()
    _run(case, backend, str(resumed), "--resume", str(checkpoint), "--checkpoint", str(checkpoint))
    _assert_same(full, pc.load_result(resumed))
    assert sorted(p.name for p in tmp_path.glob("agent-0.shard*")) == ["agent-0.shard.r12", "agent-0.shard.r13"]


def _assert_same(reference: pc.Result, result: pc.Result) -> None:
    columns = [c for c in reference.history.columns if c != "time_s"]
    assert reference.history[columns].equals(result.history[columns])
    assert np.array_equal(reference.w, result.w)
    assert all(np.array_equal(a, b) for a, b in zip(reference.z, result.z, strict=True))
    assert reference.transcript.same_as(result.transcript)
    assert reference.privacy.equals(result.privacy)


def test_a_factory_whose_data_changed_is_refused_by_its_host(tmp_path):
    from core_problems import rendezvous_sites

    addresses = tmp_path / "addresses.npy"
    points = np.random.default_rng(5).uniform(-1, 1, (4, 2))
    np.save(addresses, points)
    options = {"rounds": 6, "seed": 3, "topology": pc.Topology.ring()}
    algorithm = pc.algorithms.DPDistributedGradient(epsilon=1.0, q=0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rendezvous_sites(str(addresses), 4, str(tmp_path)).solve(algorithm, checkpoint=tmp_path / "run.ckpt",
                                                                 callback=lambda row: row["round"] < 3, **options)
        points[2] = [0.9, -0.9]  # the same factory and arguments, another file behind them
        np.save(addresses, points)
        with pytest.raises(CheckpointError, match="another run; data") as info:
            rendezvous_sites(str(addresses), 4, str(tmp_path)).solve(algorithm, resume=tmp_path / "run.ckpt",
                                                                     **options)
    assert info.value.agent == "agent-2"


# ---- checkpoint files --------------------------------------------------------------------------------------

def _problem(seed: int = 0) -> pc.DistributedProblem:
    from problems.rendezvous import rendezvous

    return rendezvous(np.random.default_rng(seed).uniform(-1, 1, (3, 2)))


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    path = tmp_path / "run.ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _problem().solve(rounds=3, privacy=pc.ObjectivePerturbation(pc.Laplace(1.0)), seed=1, checkpoint=path)
    return path


def _resume(path: Path, **changes) -> pc.Result:
    options = {"rounds": 5, "privacy": pc.ObjectivePerturbation(pc.Laplace(1.0)), "seed": 1, **changes}
    problem = options.pop("problem", _problem())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return problem.solve(resume=path, **options)


def test_a_checkpoint_resumes_only_the_run_that_wrote_it(checkpoint):
    assert len(_resume(checkpoint).history) == 5
    for changes, what in [({"seed": 2}, "seed"), ({"privacy": None}, "algorithm"),
                          ({"privacy": pc.OutputPerturbation(pc.Laplace(1.0))}, "algorithm"),
                          ({"rho": 3.0}, "algorithm"), ({"local_updates": 2}, "algorithm"),
                          ({"problem": _problem(seed=9)}, "data")]:
        with pytest.raises(CheckpointError, match=f"another run.*{what}"):
            _resume(checkpoint, **changes)
    from problems.rendezvous import rendezvous
    with pytest.raises(CheckpointError, match="agents"):
        _resume(checkpoint, problem=rendezvous(np.random.default_rng(0).uniform(-1, 1, (4, 2))))


def test_tampered_foreign_and_pickled_checkpoints_are_refused_and_never_executed(checkpoint, tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    pickled = tmp_path / "evil.ckpt"
    pickled.write_bytes(pickle.dumps({"state": Payload()}))
    with pytest.raises(CheckpointError, match="not a privcvx checkpoint"):
        _resume(pickled)
    assert not marker.exists()
    edited = tmp_path / "edited.ckpt"
    with np.load(tmp_path / "run.ckpt", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    header = json.loads(bytes(arrays["__header__"]))
    np.savez(edited, **{**arrays, "__header__": _utf8(json.dumps({**header, "privcvx": "0.0.1"}))})
    os.replace(str(edited) + ".npz", edited)
    with pytest.raises(CheckpointError, match="digest"):
        _resume(edited)  # the digest covers the header
    content = bytearray(checkpoint.read_bytes())  # members are stored uncompressed, texts as UTF-8
    key = b'"next_round": '
    digit = content.index(key) + len(key)
    content[digit] = ord("2") if content[digit] != ord("2") else ord("3")  # resume from another round
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(bytes(content))
    with pytest.raises(CheckpointError, match="damaged"):  # the zip CRC catches it
        _resume(damaged)
    state = json.loads(bytes(arrays["__state__"]))
    state["next_round"] = 2  # re-saved with valid CRCs: only the digest can tell
    resaved = tmp_path / "resaved.ckpt"
    np.savez(resaved, **{**arrays, "__state__": _utf8(json.dumps(state))})
    os.replace(str(resaved) + ".npz", resaved)
    with pytest.raises(CheckpointError, match="edited or damaged: its content does not match its digest"):
        _resume(resaved)
    # A pickle slipped into a well-formed archive is never unpickled, and the edited file is refused.
    with zipfile.ZipFile(checkpoint, "a") as archive:
        archive.writestr("a999.npy", pickle.dumps(Payload()))
    with pytest.raises(CheckpointError, match="not a privcvx checkpoint.*unexpected member"):
        _resume(checkpoint)
    assert not marker.exists()
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(pickled.read_bytes()[:0] + (tmp_path / "edited.ckpt").read_bytes()[:200])
    with pytest.raises(CheckpointError, match="not a privcvx checkpoint"):
        _resume(truncated)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        _resume(tmp_path / "missing.ckpt")


def _utf8(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), dtype=np.uint8)


# ---- cleanup and solver faults -----------------------------------------------------------------------------

def _flaky_gradient(value: np.ndarray) -> np.ndarray:
    """A gradient oracle that fails for points with a large first coordinate (module level: it pickles)."""
    if value[0] > 0.15:
        raise FloatingPointError("injected failure")
    return 2.0 * (value - 0.3)


def test_no_worker_process_outlives_a_failure(tmp_path):
    import multiprocessing

    import cvxpy as cp

    x = cp.Variable(2)
    failing = pc.DistributedProblem([pc.Agent(cp.sum_squares(x - 0.3), [x >= -1, x <= 1], shared=x,
                                              gradient=_flaky_gradient, name=f"a{i}") for i in range(1)]
                                    + [pc.Agent(cp.sum_squares(y - 0.1), shared=y, name="b")
                                       for y in [cp.Variable(2)]])
    with pytest.raises(pc.errors.RunFailed, match="injected failure") as info:
        failing.solve(rounds=20, rho=1.0, eta=0.3, backend="process")
    assert info.value.agent == "a0" and len(info.value.result.history) >= 1
    assert multiprocessing.active_children() == []

    def interrupt(row: dict) -> bool:
        raise KeyboardInterrupt

    stopped = _problem().solve(rounds=5, rho=1.0, eta=0.3, backend="process", callback=interrupt)
    assert stopped.info["stop"] == "interrupted" and multiprocessing.active_children() == []
    with pytest.raises(CheckpointError):  # a failure before the first round: a foreign checkpoint
        _problem().solve(rounds=5, backend="process", resume=tmp_path / "missing.ckpt")
    assert multiprocessing.active_children() == []
    with pytest.raises(pc.errors.ParameterError, match="checkpoint"):  # refused before any worker starts
        _problem().solve(rounds=5, backend="process", checkpoint=tmp_path / "no-such-folder" / "run.ckpt")
    broken = pc.DistributedProblem([pc.Agent(cp.sum_squares(z), [z >= low, z <= low + 1], shared=z)
                                    for low, z in ((0.0, cp.Variable(1)), (0.5, cp.Variable(1)))],
                                   metrics={"broken": lambda w: float("nan")})
    with pytest.raises(pc.errors.RunFailed, match="the metric returned nan"):  # fails while the workers are up
        broken.solve(rounds=5, rho=1.0, eta=0.3, backend="process")
    assert multiprocessing.active_children() == []


def test_solver_faults_keep_the_run_or_leave_a_resumable_checkpoint(tmp_path, monkeypatch):
    from core_problems import soc_linear

    from privcvx.localsolve import LocalProblem, StrategyFailure, strategies

    problem, eta, rho = soc_linear(agents=2)
    for agent in problem.agents:
        agent.sensitivity = pc.Sensitivity(l1=0.3, l2=0.2)
    options = {"rounds": 8, "rho": rho, "eta": eta, "seed": 3, "privacy": pc.ObjectivePerturbation(pc.Gaussian(0.5,
                                                                                                               1e-5))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clean = problem.solve(**options)
        rng = np.random.default_rng(0)
        original = strategies.ClarabelStep.solve

        def sometimes_failing(self, *args):  # the first strategy of the chain fails at random solves
            if rng.random() < 0.4:
                raise StrategyFailure("injected Clarabel failure")
            return original(self, *args)

        monkeypatch.setattr(strategies.ClarabelStep, "solve", sometimes_failing)
        faulty = problem.solve(**options)
        fallbacks = sum(report["fallbacks"] for report in faulty.info["local_solve"].values())
        assert fallbacks > 0
        assert faulty.history["noise_magnitude"].equals(clean.history["noise_magnitude"])  # the same noise
        np.testing.assert_allclose(faulty.w, clean.w, atol=1e-6)  # the fallback solver answers the same step
        monkeypatch.setattr(strategies.ClarabelStep, "solve", original)

        calls = {"n": 0}
        original_solve = LocalProblem._solve

        def dead_after_a_while(self, *args):
            calls["n"] += 1
            if calls["n"] > 10:  # every solver fails from the 11th local update on
                raise pc.errors.SolverError("every solver failed (injected)", agent=self.agent_name)
            return original_solve(self, *args)

        monkeypatch.setattr(LocalProblem, "_solve", dead_after_a_while)
        path = tmp_path / "run.ckpt"
        with pytest.raises(pc.errors.RunFailed, match="injected") as info:
            problem.solve(checkpoint=path, **options)
        done = info.value.result.history["round"].tolist()
        assert done == list(range(1, len(done) + 1)) and 1 <= len(done) < 8
        monkeypatch.setattr(LocalProblem, "_solve", original_solve)
        resumed = problem.solve(resume=path, checkpoint=path, **options)
    columns = [c for c in clean.history.columns if c != "time_s"]
    assert resumed.history[columns].equals(clean.history[columns])


def test_validation_at_the_door_and_errors_of_public_calls_are_wrapped(tmp_path):
    import cvxpy as cp

    x, y = cp.Variable(2), cp.Variable(2)
    with pytest.raises(pc.errors.DeclarationError, match=r"\[agent 'bad'\] argument 'objective'.*NaN"):
        pc.Agent(cp.sum_squares(x - np.array([1.0, np.nan])), shared=x, name="bad")
    data = cp.Parameter(2, value=np.array([np.inf, 0.0]))
    with pytest.raises(pc.errors.DeclarationError, match=r"argument 'constraints'.*parameter"):
        pc.Agent(cp.sum_squares(x), [x <= data], shared=x, name="bad")
    # A linear f_p (a market operator) and a quadratic one: L_p = 0 for the first, and the defaults run.
    operator = pc.Agent(np.array([1.0, -2.0]) @ x, [cp.abs(x) <= 1], shared=x, name="operator")
    market = pc.Agent(cp.sum_squares(y - 0.5), shared=y, name="market")
    result = pc.DistributedProblem([operator, market]).solve(rounds=60)
    assert np.all(np.isfinite(result.history["objective"]))
    with pytest.raises(pc.errors.ParameterError, match="no result file"):
        pc.load_result(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a result")
    with pytest.raises(pc.errors.ParameterError, match="not a result"):
        pc.load_result(tmp_path / "junk.npz")
    with pytest.raises(pc.errors.ParameterError, match="cannot write"):
        result.save(tmp_path / "no-such-folder" / "result.npz")
    with pytest.raises(pc.errors.CentralizedSolveError, match="centralized solve failed"):
        pc.DistributedProblem([market]).solve_centralized(solver="NO_SUCH_SOLVER")


def test_modelling_mistakes_are_caught_at_declaration():
    import cvxpy as cp

    from privcvx.errors import ModelingWarning, PrivacyError

    x, y, unused = cp.Variable(2), cp.Variable(2), cp.Variable(2)
    first = pc.Agent(cp.sum_squares(x - 1), shared={"power": x}, name="plant")
    typo = pc.Agent(cp.sum_squares(y), shared={"powr": y}, name="grid")
    with pytest.warns(ModelingWarning, match=r"'powr' \(grid\)"):
        pc.DistributedProblem([first, typo])
    with pytest.warns(ModelingWarning, match=r"\[agent 'idle'\] shared key 'power'.*neither"):
        pc.Agent(cp.sum_squares(y), shared={"power": unused}, name="idle")
    z = cp.Variable(2)
    only_l2 = pc.Agent(cp.sum_squares(z - 1), [z >= -1], shared=z, name="l2-only",
                       sensitivity=pc.Sensitivity(l2=0.1), smoothness=2.0)
    problem = pc.DistributedProblem([only_l2])
    with pytest.raises(PrivacyError, match=r"\[agent 'l2-only'\].*L1 sensitivity"):  # at set-up, not in round 1
        problem.solve(rounds=3, privacy=pc.ObjectivePerturbation(pc.Laplace(1.0)))
    with pytest.raises(PrivacyError, match="L1 sensitivity"):
        problem.solve(rounds=3, privacy=pc.ObjectivePerturbation(pc.Budget(1.0, 1e-5, mechanism="laplace")))
    with pytest.raises(pc.errors.ParameterError, match="tol"):
        problem.solve(rounds=3, tol=1e-3)  # a scalar instead of (abs, rel)
    # Local sets that never meet on the shared keys: the residual would be stuck forever.
    a, b, c = cp.Variable(2), cp.Variable(2), cp.Variable(2)
    high = pc.Agent(cp.sum_squares(a), [a >= 2], shared=a, name="high")
    free = pc.Agent(cp.sum_squares(b), shared=b, name="free")
    low = pc.Agent(cp.sum_squares(c), [c <= 0], shared=c, name="low")
    with pytest.raises(pc.errors.InfeasibleLocalSetError, match=r"agents 'high' and 'low' do not intersect"):
        pc.DistributedProblem([high, free, low])
    u, v, s = cp.Variable(2), cp.Variable(), cp.Variable()  # every pair that shares a key meets; all do not
    budget = pc.Agent(cp.sum_squares(u), [cp.sum(u) <= 0], shared={"x": u[0], "y": u[1]}, name="budget")
    with pytest.raises(pc.errors.InfeasibleLocalSetError, match="meets each of the others, but not all"):
        pc.DistributedProblem([budget, pc.Agent(cp.square(v), [v >= 1], shared={"x": v}, name="x-floor"),
                               pc.Agent(cp.square(s), [s >= 1], shared={"y": s}, name="y-floor")])


def test_results_are_written_back_to_the_users_variables():
    from core_problems import general_form

    problem, eta, rho = general_form()
    reference = problem.solve_centralized()
    first = problem.agents[0]
    v, y = first.variables
    assert np.allclose(v.value.reshape(-1, order="F"), reference.z[0][:v.size])  # the centralized solution
    result = problem.solve(rounds=5, local_updates=2, rho=rho, eta=eta)
    for agent, z in zip(problem.agents, result.z, strict=True):  # now the distributed one: each agent's release
        assert np.array_equal(np.concatenate([var.value.reshape(-1, order="F") for var in agent.variables]), z)
    assert np.array_equal(result.value_of("agent-0", y), y.value)
    assert np.array_equal(result.value_of("agent-0", y.name()), y.value)
    assert np.array_equal(result.w_of("b"), result.w[problem.key_offsets["b"]:problem.key_offsets["b"] + 2])
    with pytest.raises(pc.errors.ParameterError, match="no shared key"):
        result.w_of("nope")
    released = problem.solve(rounds=2, rho=rho, eta=eta, diagnostics=False)
    with pytest.raises(pc.errors.ParameterError, match="diagnostics=False"):
        released.value_of("agent-0", y)


@pytest.mark.parametrize("coalesce", [False, True])
def test_the_background_commit_keeps_the_order_and_the_last_round(tmp_path, monkeypatch, coalesce):
    """Rounds faster than the disk flushes (a 20 ms fsync): the state file on disk is always a whole round whose
    log records are flushed; at the end it is the last round, with no temporary file left; with ``coalesce`` the
    rounds the thread is not ready for are skipped (their records go with the next commit's), without, none. A
    failure of the background flush or rename is raised by the next call."""
    from privcvx.runtime import checkpoint as checkpoints

    flushed: list[tuple[int, int]] = []  # (descriptor, size) of every flush
    fsync = os.fsync

    def slow_fsync(descriptor: int) -> None:
        time.sleep(0.02)
        flushed.append((descriptor, os.fstat(descriptor).st_size))
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    path, log = tmp_path / "run.ckpt", checkpoints.Log(tmp_path / "run.ckpt.log")
    committer = checkpoints.Committer(coalesce=coalesce, interval=0.0)
    renamed = []
    replace = checkpoints.replace_temporary

    def recorded(descriptor: int, temporary: str, target: Path) -> None:
        if Path(target).name == "full.ckpt":
            raise OSError(28, "No space left on device")
        replace(descriptor, temporary, target)
        renamed.append(checkpoints.read_state(target, {}))
        assert max(size for d, size in flushed if d == log.descriptor) >= renamed[-1]["logs"][0]  # flushed first

    monkeypatch.setattr(checkpoints, "replace_temporary", recorded)
    for t in range(1, 21):
        log.append([f"round {t}".encode()])
        if committer.ready() or t == 20:  # as `Run.commit` does
            committer.submit([log], path, checkpoints.encode_state({}, {"next_round": t + 1, "logs": log.position}))
    committer.wait()
    assert [state["next_round"] for state in renamed] == sorted({state["next_round"] for state in renamed})
    assert renamed[-1]["next_round"] == 21 and (len(renamed) < 20) == coalesce
    for state in renamed:
        assert len(checkpoints.read_log(tmp_path / "run.ckpt.log", state["logs"])) == state["next_round"] - 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt", "run.ckpt.log"]
    committer.submit([log], tmp_path / "full.ckpt", b"x")  # its flush and rename fail in the background
    with pytest.raises(OSError, match="No space"):
        committer.wait()
    committer.close()
    log.close()


def test_deferred_rounds_only_append_their_records_and_the_last_round_is_committed(tmp_path, monkeypatch):
    """Commits at most every 100 s (`checkpoint.COMMIT_INTERVAL`): a run commits the state files of its first
    round and its last, no other; the files as a kill in round 4 leaves them (round 1's state file, its records)
    resume bitwise equal to the uninterrupted run."""
    from privcvx.runtime import checkpoint as checkpoints
    from problems.rendezvous import rendezvous

    problem = rendezvous(np.random.default_rng(0).uniform(-1, 1, (3, 2)))
    privacy = pc.ObjectivePerturbation(pc.Laplace(1.0))
    monkeypatch.setattr(checkpoints, "COMMIT_INTERVAL", 100.0)
    renamed, replace = [], checkpoints.replace_temporary
    monkeypatch.setattr(checkpoints, "replace_temporary",
                        lambda *args: (replace(*args), renamed.append(checkpoints.read_state(args[2], {}))))
    path, copy = tmp_path / "run.ckpt", tmp_path / "copy"

    def kill_in_round_4(row: dict) -> None:
        if row["round"] == 4:
            deadline = time.monotonic() + 10
            while not renamed and time.monotonic() < deadline:  # round 1's commit, in the background
                time.sleep(0.01)
            copy.mkdir()
            for file in tmp_path.glob("run.ckpt*"):
                (copy / file.name).write_bytes(file.read_bytes())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = problem.solve(privacy=privacy, rounds=6, seed=1, checkpoint=path, callback=kill_in_round_4)
        assert [state["next_round"] for state in renamed] == [2, 7]
        resumed = problem.solve(privacy=privacy, rounds=6, seed=1, resume=copy / "run.ckpt")
    _assert_same(full, resumed)
