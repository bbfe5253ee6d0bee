"""The local-solve layer against its floors (issue 28), every ratio measured side by side in one run.

    PYTHONPATH=. .venv/bin/python bench/bench_localsolve.py [--rounds 200] [--repeats 5] [--long 3000]
        [--scale 10 100 1000] [--scale-rounds 60] [--case case118] [--only a b c d e]

(a) 6 agents, ridge least squares in R^4, no constraints: the default run (``local_updates="auto"``: the exact
    step) with diagnostics on and off, against a numpy consensus ADMM with a cached Cholesky factor and a numpy
    objective (`numpy_admm`);
(b) one box-constrained QP agent (the README's model with the l1 ball replaced by the box [-0.3, 1]): the exact
    step (``LocalProblem.step``, warm-started as ``ExactADMM`` calls it, and from a fresh state) against OSQP set up
    once and warm-started in plain Python;
(c) the zones of a power-flow case (SOC; the exact step, ``ExactADMM``): seconds per round against the sum of the
    zones' Clarabel solve times alone (the same (P, A, b, cones) and the same q of every step, replayed on one
    Clarabel solver per zone: ``update(q) + solve``);
(d) seconds per round of the default run against the number of agents (of the ridge problem of (a)), and the
    least-squares slope;
(e) ``ExactADMM`` for ``--long`` rounds on the problem of (a) against ``LinearizedADMM(local_updates=1)``.

The machine may be shared: each timing is the median over ``--repeats`` repetitions, and the two sides of a ratio
run one after the other inside each repetition.
"""

from __future__ import annotations

import argparse
import gc
import time
import warnings
from collections.abc import Callable

import clarabel
import cvxpy as cp
import numpy as np
import osqp
import scipy.linalg
import scipy.sparse as sp

import privcvx as pc
from privcvx.algorithms import ExactADMM, LinearizedADMM
from privcvx.localsolve import LocalProblem, strategies

DIM = 4


def ridge_data(agents: int, rows: int = 20, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=DIM)
    data = []
    for _ in range(agents):
        features = rng.normal(size=(rows, DIM))
        data.append((features, features @ truth + 0.1 * rng.normal(size=rows)))
    return data


def ridge_problem(data: list[tuple[np.ndarray, np.ndarray]]) -> pc.DistributedProblem:
    agents = []
    for p, (features, labels) in enumerate(data):
        x = cp.Variable(DIM)
        agents.append(pc.Agent(cp.sum_squares(features @ x - labels) + 0.1 * cp.sum_squares(x), shared=x,
                               name=f"agent-{p}"))
    return pc.DistributedProblem(agents)


def numpy_admm(data: list[tuple[np.ndarray, np.ndarray]], rounds: int, rho: float = 1.0) -> list[float]:
    """Consensus ADMM (Boyd et al., Eq. (7.6)) in numpy: each agent's step by a Cholesky factor of
    2 A'A + (0.2 + rho) I computed once, the objective sum_p f_p(w) in numpy every round. Seconds per round."""
    factors = [scipy.linalg.cho_factor(2 * a.T @ a + (0.2 + rho) * np.eye(DIM)) for a, _ in data]
    tilts = [2 * a.T @ b for a, b in data]
    x = np.zeros((len(data), DIM))
    u = np.zeros_like(x)
    w = np.zeros(DIM)
    times, objectives = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for p, (factor, tilt) in enumerate(zip(factors, tilts, strict=True)):
            x[p] = scipy.linalg.cho_solve(factor, tilt + rho * (w - u[p]))
        w = (x + u).mean(axis=0)
        u += x - w
        objectives.append(sum(float(np.sum((a @ w - b) ** 2)) + 0.1 * float(w @ w) for a, b in data))
        times.append(time.perf_counter() - start)
    return times


class CollectorClock:
    """The CPU seconds Python's garbage collector spends between `start` and `stop` (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds, self.begun, self.running = 0.0, 0.0, False

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.begun = time.process_time()
        elif self.running:
            self.seconds += time.process_time() - self.begun


def timed_solve(problem: pc.DistributedProblem, *args: object,
                **options: object) -> tuple[pc.Result, float, float, float]:
    """A run, its median wall seconds per round, its mean CPU seconds (of this process) per round and the garbage
    collector's CPU seconds per round, from the per-round callback (a run without diagnostics has no ``time_s``
    column)."""
    stamps: list[tuple[float, float]] = []
    collector = CollectorClock()

    def stamp(row: dict) -> None:
        stamps.append((time.perf_counter(), time.process_time()))
        collector.running = True

    gc.callbacks.append(collector)
    try:
        result = problem.solve(*args, callback=stamp, **options)
    finally:
        gc.callbacks.remove(collector)
    wall, cpu = np.array(stamps).T
    return (result, float(np.median(np.diff(wall))), float((cpu[-1] - cpu[0]) / (len(cpu) - 1)),
            collector.seconds / (len(cpu) - 1))


def median(measure: Callable[[], float], repeats: int) -> float:
    return float(np.median([measure() for _ in range(repeats)]))


def part_a(rounds: int, repeats: int) -> list[str]:
    data = ridge_data(6)
    problem = ridge_problem(data)
    rows = []
    for label, diagnostics in (("default (exact step), diagnostics on", True),
                               ("default (exact step), diagnostics=False", False)):
        samples = []
        for _ in range(repeats):
            ours = timed_solve(problem, rounds=rounds, diagnostics=diagnostics)[1]
            floor = float(np.median(numpy_admm(data, rounds)))
            samples.append((ours, floor))
        ours, floor = np.median(samples, axis=0)
        rows.append(f"| (a) 6-agent ridge, {label} | {ours * 1e3:.3f} | {floor * 1e3:.3f} | {ours / floor:.2f}x |")
    return rows


def part_b(repeats: int, steps: int = 300) -> list[str]:
    rng = np.random.default_rng(1)
    features, labels = rng.normal(size=(20, 5)), rng.normal(size=20)
    x = cp.Variable(5)
    agent = pc.Agent(cp.sum_squares(features @ x - labels) / 20, [x >= -0.3, x <= 1.0], shared=x, name="readme")
    local = LocalProblem(agent, pc.DistributedProblem([agent]).layouts[0], objective=True)
    rho = 2.0
    hessian = sp.csc_matrix(np.triu(2 * features.T @ features / 20 + rho * np.eye(5)))
    tilt = -2 * features.T @ labels / 20
    solver = osqp.OSQP()
    solver.setup(hessian, tilt, sp.eye(5, format="csc"), np.full(5, -0.3), np.full(5, 1.0), verbose=False,
                 **strategies.SOLVER_SETTINGS[cp.OSQP])
    linears = [rng.normal(size=5) for _ in range(steps)]
    worst = 0.0

    def ours(warm_start: bool) -> float:
        start = time.perf_counter()
        for linear in linears:
            local.step(linear, rho, warm_start=warm_start)
        return (time.perf_counter() - start) / steps

    def plain() -> float:
        start = time.perf_counter()
        for linear in linears:
            solver.update(q=tilt + linear)
            solver.solve()
        return (time.perf_counter() - start) / steps

    samples = [(ours(True), ours(False), plain()) for _ in range(repeats)]
    for linear in linears[:20]:
        solver.update(q=tilt + linear)
        worst = max(worst, float(np.max(np.abs(local.step(linear, rho, warm_start=True) - solver.solve().x))))
    warm, cold, floor = np.median(samples, axis=0)
    return [f"| (b) box QP agent, exact step ({local.strategy}, warm-started from its last answer as the algorithms "
            f"call it; max diff {worst:.1e}) vs warm-started OSQP | {warm * 1e3:.3f} | {floor * 1e3:.3f} | "
            f"{warm / floor:.2f}x |",
            f"| (b) the same from a fresh state (``warm_start=False``) | {cold * 1e3:.3f} | {floor * 1e3:.3f} | "
            f"{cold / floor:.2f}x |"]


def part_c(case: str, rounds: int, repeats: int) -> list[str]:
    import powerflow

    problem = powerflow.zonal_problem(case, zones=3)
    recorded: list[tuple[strategies.ClarabelStep, np.ndarray]] = []
    original = strategies.ClarabelStep.linear_term

    def recording(self: strategies.ClarabelStep, linear: np.ndarray) -> np.ndarray:
        q = original(self, linear)
        recorded.append((self, q))
        return q

    samples = []
    for _ in range(repeats):
        recorded.clear()
        strategies.ClarabelStep.linear_term = recording
        try:
            result, ours, _, _ = timed_solve(problem, ExactADMM(), rounds=rounds)
        finally:
            strategies.ClarabelStep.linear_term = original
        solvers: dict[int, clarabel.DefaultSolver] = {}
        alone = 0.0
        for step, q in recorded:
            if id(step) not in solvers:
                solvers[id(step)] = clarabel.DefaultSolver(
                    step.P, np.zeros_like(q), step.data.A, step.data.b, step.data.cones,
                    strategies.clarabel_settings(strategies.SOLVER_SETTINGS[cp.CLARABEL]))
            start = time.perf_counter()
            solvers[id(step)].update(q=q)
            solvers[id(step)].solve()
            alone += time.perf_counter() - start
        samples.append((ours, alone / len(result.history)))
    ours, floor = np.median(samples, axis=0)
    kinds = {report["strategy"] for report in result.info["local_solve"].values()}
    return [f"| (c) {case}, 3 zones, ExactADMM ({', '.join(sorted(kinds))}), per round vs the zones' Clarabel "
            f"solves alone | {ours * 1e3:.2f} | {floor * 1e3:.2f} | {ours / floor:.2f}x |"]


def part_d(sizes: list[int], rounds: int) -> list[str]:
    """The default run (its rho, per-key residual balancing, refactors whenever it changes) and ExactADMM(rho=1)
    (one factorization per agent), seconds per round against the number of agents: the median wall time of a round
    and the mean CPU time of this process per round (on a shared machine the wall time includes waiting for a
    core, which grows with the length of a round), each with its least-squares line."""
    rows = []
    seconds: dict[tuple[str, str], list[float]] = {}
    for agents in sizes:
        problem = ridge_problem(ridge_data(agents, seed=agents))
        for label, algorithm in (("default run", None), ("ExactADMM(rho=1.0)", ExactADMM(rho=1.0))):
            result, wall, per_round, collector = timed_solve(problem, algorithm, rounds=rounds)
            seconds.setdefault((label, "wall"), []).append(wall)
            seconds.setdefault((label, "cpu"), []).append(per_round)
            refactors = np.mean([report["refactors"] for report in result.info["local_solve"].values()])
            rows.append(f"| (d) {agents} agents, {label}: {refactors:.1f} refactorizations per agent in {rounds} "
                        f"rounds; CPU {per_round * 1e3:.2f} ms a round ({per_round / agents * 1e6:.1f} us an agent, "
                        f"of which the garbage collector {collector * 1e3:.2f} ms) | {wall * 1e3:.2f} | | |")
    for (label, clock), values in seconds.items():
        slope, intercept = np.polyfit(sizes, values, 1)
        rows.append(f"| (d) {label}, least-squares line of the {clock} time: seconds per round = "
                    f"{intercept * 1e3:.2f} ms + {slope * 1e6:.1f} us x agents | | | |")
    return rows


def part_e(rounds: int) -> list[str]:
    problem = ridge_problem(ridge_data(6))
    timings = {}
    for label, algorithm in (("ExactADMM()", ExactADMM()), ("LinearizedADMM(local_updates=1)",
                                                            LinearizedADMM(local_updates=1))):
        start = time.perf_counter()
        problem.solve(algorithm, rounds=rounds)
        timings[label] = time.perf_counter() - start
    exact, linearized = timings.values()
    return [f"| (e) {rounds} rounds, 6-agent ridge: ExactADMM() vs LinearizedADMM(local_updates=1), whole run (s) | "
            f"{exact:.2f} | {linearized:.2f} | {exact / linearized:.2f}x |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--long", type=int, default=3000)
    parser.add_argument("--scale", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--scale-rounds", type=int, default=60)
    parser.add_argument("--case", default="case118")
    parser.add_argument("--only", nargs="+", default=list("abcde"))
    options = parser.parse_args()
    warnings.simplefilter("ignore")
    print("| measure | privcvx (ms) | floor (ms) | ratio |")
    print("|---|---|---|---|")
    parts = {"a": lambda: part_a(options.rounds, options.repeats), "b": lambda: part_b(options.repeats),
             "c": lambda: part_c(options.case, 10, min(options.repeats, 3)),
             "d": lambda: part_d(options.scale, options.scale_rounds), "e": lambda: part_e(options.long)}
    for name in options.only:
        for row in parts[name]():
            print(row, flush=True)


if __name__ == "__main__":
    main()
