"""What the per-round diagnostics cost (issue 28, point 2): privcvx rounds with and without diagnostics against a
plain numpy floor, round by round in one process.

    PYTHONPATH=. .venv/bin/python bench/bench_diagnostics.py [--rounds 100] [--repeats 5] [--problem digits|ridge|both]
    PYTHONPATH=. .venv/bin/python bench/bench_diagnostics.py --calls [--repeats 30]

- **digits**: the set-up of ``bench_numpy_floor.py`` (scikit-learn's digits, ``federated_logistic`` with 10 IID
  agents, the box [-0.1, 0.1], Algorithm 1 = ``LinearizedADMM`` with E = 5, rho = 0.01, eta = "auto",
  non-private, serial backend). The floor is that bench's ``NumpyAlgorithm1`` (no diagnostics), the floor
  plus its numpy objective sum_p f_p at the releases, and the floor with its gradient computed in the layout of
  ``problems.LogisticLoss`` (scores K x I_p, ``transposed=True``): against it, what privcvx adds beyond the
  agents' arithmetic (the driver, messages, line 8 and the public metrics).
- **ridge**: 6 agents, f_p(x) = ||A_p x - b_p||^2 + 0.1 ||x||^2 in R^4 (A_p 30 x 4, no constraints), full
  consensus. The floor is consensus ADMM in numpy with each agent's Cholesky factor of 2 A_p^T A_p + (0.2 + rho) I
  cached, and sum_p f_p in numpy at each round (Boyd et al. 2011, Sec. 7.1). privcvx runs the defaults
  (``local_updates="auto"``, the exact step) and ``LinearizedADMM(local_updates=1)``.

Round t of every side runs before round t + 1 of any (each privcvx side a ``runtime.loop.Run`` driven as
``pc.runtime.loop.run`` drives it: its round and its history row), so all sides see the same load within
milliseconds. Each side's round is timed by the wall clock and by its thread's CPU clock (which leaves out the
time the process waits for a core: on a shared machine the steadier of the two). Per round is the median over
the rounds of all repetitions (after one warm-up repetition); a ratio is the median of the per-round ratios to
the floor. "diagnostics" is the wall time spent in the agents' ``diagnostics`` calls alone (a wrapper's
``perf_counter``), median per round.

``--calls`` times the diagnostics alone, outside a run: every agent's compiled f_p and violation
(``GradientEvaluator.value`` and ``.violation``, what ``ADMMAgent.diagnostics`` calls) at fixed points in W_p,
against the floor's numpy objective at the same points, and on digits every agent's gradient against the floor's
two (`gradients`), by the thread's CPU clock; each figure is the least of
``--repeats`` timings of 200 calls, the sides alternating (the least is the one least disturbed by other jobs).

Runs that keep diagnostics also time every agent's step for ``result.info["hosts"]``: its wall time and the CPU
time of its thread (``time.thread_time``, a system call, where ``perf_counter`` is not). The side "on, no CPU
clock" is the same run with ``thread_time`` replaced by ``perf_counter`` in ``privcvx.runtime.backends`` during
its rounds (its ``cpu_s`` are then wrong): the difference is what the CPU clock costs on this machine.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import cvxpy as cp
import numpy as np
import scipy.linalg

import privcvx as pc
from privcvx.algorithms import admm_agent
from privcvx.gradients import GradientEvaluator
from privcvx.messages import make_transcript
from privcvx.runtime import backends, loop
from problems import datasets, federated_logistic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_numpy_floor import AGENTS, BOUND, LOCAL_UPDATES, NumpyAlgorithm1  # noqa: E402

#: Seconds spent in the agents' diagnostics calls since the last reset (the wrapper of `time_diagnostics`).
SPENT = {"diagnostics": 0.0}


def time_diagnostics() -> None:
    """Wrap ``ADMMAgent.diagnostics`` (the agents of LinearizedADMM and ExactADMM) in a timer."""
    inner = admm_agent.ADMMAgent.diagnostics

    def timed(self: admm_agent.ADMMAgent, w_p: np.ndarray) -> dict[str, float]:
        start = time.perf_counter()
        try:
            return inner(self, w_p)
        finally:
            SPENT["diagnostics"] += time.perf_counter() - start
    admm_agent.ADMMAgent.diagnostics = timed


class WallClockOnly:
    """Stands for the ``time`` module in ``privcvx.runtime.backends``: ``thread_time`` is ``perf_counter``."""

    perf_counter = staticmethod(time.perf_counter)
    thread_time = staticmethod(time.perf_counter)


@contextmanager
def stepped(problem: pc.DistributedProblem, algorithm: pc.algorithms.LinearizedADMM, rounds: int,
            diagnostics: bool, cpu_clock: bool = True, transcript: str = "memory") -> Iterator[Callable[[int], float]]:
    """A run driven round by round: yields ``step(t)``, which runs round t and its history row and returns the
    seconds they took (``cpu_clock=False``: with the hosts' ``thread_time`` replaced by the wall clock;
    ``transcript``: as ``solve(transcript=...)``, "memory" or "none")."""
    topology = algorithm.topology_for(problem).bind(problem.names)
    algorithm = algorithm.prepare(problem, topology, rounds)
    run = loop.Run(problem, algorithm, topology, rounds=rounds, seed=0, diagnostics=diagnostics,
                   transcript=make_transcript(transcript, None))
    with backends.make_backend("serial", algorithm, problem, run.contexts) as hosts:
        run.start(hosts)

        def step(t: int) -> float:
            backends.time = time if cpu_clock else WallClockOnly
            start = time.perf_counter()
            sent = run.round(hosts, t)
            run.rows.append(run.row(hosts, t, sent, 0.0)[0])
            elapsed = time.perf_counter() - start
            backends.time = time
            return elapsed
        yield step


class NumpyRidgeADMM:
    """Consensus ADMM on the ridge problem in numpy, the agents' Cholesky factors cached (Boyd et al. 2011,
    Eq. (7.6)): x_p = (2 A_p^T A_p + (2 mu + rho) I)^{-1} (2 A_p^T b_p + rho w - lambda_p), w = mean_p (x_p +
    lambda_p / rho), lambda_p += rho (x_p - w); then sum_p f_p(x_p)."""

    def __init__(self, data: list[tuple[np.ndarray, np.ndarray]], mu: float, rho: float) -> None:
        self.data, self.mu, self.rho = data, mu, rho
        dim = data[0][0].shape[1]
        self.factors = [scipy.linalg.cho_factor(2 * A.T @ A + (2 * mu + rho) * np.eye(dim)) for A, _ in data]
        self.linear = [2 * A.T @ b for A, b in data]
        self.x = [np.zeros(dim) for _ in data]
        self.lam = [np.zeros(dim) for _ in data]
        self.w = np.zeros(dim)

    def round(self, t: int) -> float:
        rho = self.rho
        for p, factor in enumerate(self.factors):
            self.x[p] = scipy.linalg.cho_solve(factor, self.linear[p] + rho * self.w - self.lam[p])
        self.w = sum(x + lam / rho for x, lam in zip(self.x, self.lam, strict=True)) / len(self.x)
        for p in range(len(self.x)):
            self.lam[p] = self.lam[p] + rho * (self.x[p] - self.w)
        return sum(float(np.sum((A @ x - b) ** 2) + self.mu * x @ x) for (A, b), x in zip(self.data, self.x,
                                                                                            strict=True))


def ridge_problem(agents: int = 6, rows: int = 30, dim: int = 4, mu: float = 0.1,
                  seed: int = 0) -> tuple[pc.DistributedProblem, list[tuple[np.ndarray, np.ndarray]]]:
    """The ridge problem and each agent's (A_p, b_p): b_p = A_p x* + 0.1 noise, one x* for all."""
    rng = np.random.default_rng(seed)
    truth = rng.standard_normal(dim)
    data, agent_list = [], []
    for p in range(agents):
        A = rng.standard_normal((rows, dim))
        b = A @ truth + 0.1 * rng.standard_normal(rows)
        x = cp.Variable(dim, name=f"x_{p}")
        agent_list.append(pc.Agent(cp.sum_squares(A @ x - b) + mu * cp.sum_squares(x), shared=x, name=f"agent-{p}"))
        data.append((A, b))
    return pc.DistributedProblem(agent_list), data


def timed(call: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this thread) of ``call()``; the CPU clock is read outside the wall clock's
    interval, so that a wait its system call may cause is not in the wall time."""
    cpu = time.thread_time()
    start = time.perf_counter()
    call()
    wall = time.perf_counter() - start
    return wall, time.thread_time() - cpu


def compare(title: str, floor: Callable[[], Callable[[int], object]],
            sides: dict[str, tuple[Callable[[], pc.algorithms.LinearizedADMM], bool, bool]],
            problem: pc.DistributedProblem, rounds: int, repeats: int, floor_label: str) -> None:
    """Round by round: the floor's round t, then every privcvx side's round t; prints a table."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in [floor_label, *sides]}
    spent: dict[str, list[float]] = {name: [] for name in sides}
    for repeat in range(repeats + 1):  # the first is a warm-up
        numpy_round = floor()
        with ExitStack() as stack:
            steps = {name: stack.enter_context(stepped(problem, make(), rounds, diagnostics, cpu_clock))
                     for name, (make, diagnostics, cpu_clock) in sides.items()}
            for t in range(1, rounds + 1):
                row = {floor_label: timed(lambda t=t, numpy_round=numpy_round: numpy_round(t))}
                for name, step in steps.items():
                    SPENT["diagnostics"] = 0.0
                    row[name] = timed(lambda step=step, t=t: step(t))
                    if repeat:
                        spent[name].append(SPENT["diagnostics"])
                if repeat:
                    for name, seconds in row.items():
                        times[name].append(seconds)
    base = np.array(times[floor_label])
    print(f"{title}; {rounds} rounds x {repeats} repetitions (after one warm-up), serial, round by round")
    print()
    print("| side | wall ms per round | x the floor | CPU ms per round | x the floor (CPU) | diagnostics (wall ms) |")
    print("|---|---|---|---|---|---|")
    for name, values in times.items():
        values = np.array(values)
        diag = f"{np.median(spent[name]) * 1e3:.3f}" if name in spent else ""
        wall, cpu = np.median(values, axis=0) * 1e3
        ratios = np.median(values / base, axis=0)
        print(f"| {name} | {wall:.3f} | {ratios[0]:.2f} | {cpu:.3f} | {ratios[1]:.2f} | {diag} |")
    print()


def digits(rounds: int, repeats: int) -> None:
    X, y = datasets.load_digits()
    problem = federated_logistic(X, y, agents=AGENTS, bound=BOUND, seed=0)
    shares = problem.info["shares"]
    rho = 0.01

    def floor() -> Callable[[int], None]:
        return NumpyAlgorithm1(X, y, shares, rho=rho, private=False).round

    def floor_transposed() -> Callable[[int], None]:
        return NumpyAlgorithm1(X, y, shares, rho=rho, private=False, transposed=True).round

    def floor_with_objective() -> Callable[[int], None]:
        method = NumpyAlgorithm1(X, y, shares, rho=rho, private=False)
        return lambda t: (method.round(t), method.objective())

    def algorithm() -> pc.algorithms.LinearizedADMM:
        return pc.algorithms.LinearizedADMM(local_updates=LOCAL_UPDATES, rho=rho, eta="auto")

    floor_objective: Callable[[], Callable[[int], object]] = floor_with_objective
    sides = {"privcvx, diagnostics off": (algorithm, False, True), "privcvx, diagnostics on": (algorithm, True, True),
             "privcvx, diagnostics on, no CPU clock": (algorithm, True, False)}
    compare(f"digits, {AGENTS} IID agents, box [-{BOUND}, {BOUND}], Algorithm 1, E = {LOCAL_UPDATES}, rho = {rho}",
            floor, sides, problem, rounds, repeats, "numpy Algorithm 1 (the floor)")
    compare("the same, the floor with its numpy objective", floor_objective, sides, problem, rounds, repeats,
            "numpy Algorithm 1 + objective")
    compare("the same, the floor's gradient in the layout of problems.LogisticLoss (scores K x I_p)",
            floor_transposed, sides, problem, rounds, repeats, "numpy Algorithm 1, transposed gradient")


def ridge(rounds: int, repeats: int) -> None:
    problem, data = ridge_problem()
    rho = 1.0
    def defaults() -> pc.algorithms.LinearizedADMM:
        return pc.algorithms.LinearizedADMM(rho=rho)

    def linearized() -> pc.algorithms.LinearizedADMM:
        return pc.algorithms.LinearizedADMM(local_updates=1, rho=rho)

    sides = {"privcvx defaults, diagnostics off": (defaults, False, True),
             "privcvx defaults, diagnostics on": (defaults, True, True),
             "privcvx defaults, on, no CPU clock": (defaults, True, False),
             "LinearizedADMM(local_updates=1), off": (linearized, False, True),
             "LinearizedADMM(local_updates=1), on": (linearized, True, True),
             "LinearizedADMM(local_updates=1), on, no CPU clock": (linearized, True, False)}
    compare(f"ridge, 6 agents in R^4, rho = {rho}", lambda: NumpyRidgeADMM(data, 0.1, rho).round, sides, problem,
            rounds, repeats, "numpy ADMM, cached Cholesky, numpy objective (the floor)")


def least_cpu_us(sides: dict[str, Callable[[], object]], repeats: int, number: int = 200) -> dict[str, float]:
    """Per side, the least CPU time of one call (us) over ``repeats`` timings of ``number`` calls, sides alternating."""
    least = dict.fromkeys(sides, np.inf)
    for _ in range(repeats):
        for name, call in sides.items():
            start = time.thread_time()
            for _ in range(number):
                call()
            least[name] = min(least[name], (time.thread_time() - start) / number * 1e6)
    return least


def calls(repeats: int) -> None:
    """The diagnostics of all agents at one point each, against the numpy objective at the same points."""
    rng = np.random.default_rng(0)
    X, y = datasets.load_digits()
    problem = federated_logistic(X, y, agents=AGENTS, bound=BOUND, seed=0)
    floor = NumpyAlgorithm1(X, y, problem.info["shares"], rho=0.01, private=False)
    floor.released = [rng.uniform(-BOUND, BOUND, W.shape) for W in floor.released]
    points = [W.reshape(-1, order="F") for W in floor.released]
    ridge_agents, data = ridge_problem()
    ridge_points = [rng.standard_normal(A.shape[1]) for A, _ in data]
    cases = {"digits, 10 agents": (problem, points, floor.objective),
             "ridge, 6 agents": (ridge_agents, ridge_points,
                                 lambda: sum(float(np.sum((A @ x - b) ** 2) + 0.1 * x @ x)
                                             for (A, b), x in zip(data, ridge_points, strict=True)))}
    print(f"the diagnostics alone, CPU us for all agents, least of {repeats} x 200 calls")
    print()
    print("| problem | numpy objective | privcvx f_p | privcvx violation | f_p + violation | x numpy |")
    print("|---|---|---|---|---|---|")
    for name, (prob, at, numpy_objective) in cases.items():
        evaluators = [GradientEvaluator(agent, layout) for agent, layout in zip(prob.agents, prob.layouts, strict=True)]
        pairs = list(zip(evaluators, at, strict=True))
        least = least_cpu_us({"numpy": numpy_objective,
                              "value": lambda pairs=pairs: [e.value(z) for e, z in pairs],
                              "violation": lambda pairs=pairs: [e.violation(z) for e, z in pairs]}, repeats)
        both = least["value"] + least["violation"]
        print(f"| {name} | {least['numpy']:.1f} | {least['value']:.1f} | {least['violation']:.1f} | {both:.1f} | "
              f"{both / least['numpy']:.2f} |")
    print()
    gradients(problem, points, X, y, repeats)


def gradients(problem: pc.DistributedProblem, points: list[np.ndarray], X: np.ndarray, y: np.ndarray,
              repeats: int) -> None:
    """Every digits agent's gradient at its point: privcvx's (``GradientEvaluator.gradient``, the oracle of
    ``problems.LogisticLoss`` with z_p reshaped in and out) against the floor's, textbook and transposed."""
    evaluators = [GradientEvaluator(agent, layout) for agent, layout in zip(problem.agents, problem.layouts,
                                                                            strict=True)]
    shares = problem.info["shares"]
    floors = {layout: NumpyAlgorithm1(X, y, shares, rho=0.01, private=False, transposed=layout == "transposed")
              for layout in ("textbook", "transposed")}
    matrices = [z.reshape(floors["textbook"].w.shape, order="F") for z in points]
    least = least_cpu_us({"privcvx": lambda: [e.gradient(z) for e, z in zip(evaluators, points, strict=True)],
                          **{f"numpy, {layout}": lambda floor=floor: [floor.gradient(p, W) for p, W in
                                                                      enumerate(matrices)]
                             for layout, floor in floors.items()}}, repeats)
    print(f"the gradients alone, digits, CPU us for all {len(points)} agents, least of {repeats} x 200 calls")
    print()
    print("| " + " | ".join(least) + " |")
    print("|" + "---|" * len(least))
    print("| " + " | ".join(f"{value:.1f}" for value in least.values()) + " |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--problem", choices=["digits", "ridge", "both"], default="both")
    parser.add_argument("--calls", action="store_true", help="time the diagnostics alone, outside a run")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the runs end at max_rounds (ConvergenceWarning)
    if args.calls:
        calls(args.repeats)
        return
    time_diagnostics()
    if args.problem in ("digits", "both"):
        digits(args.rounds, args.repeats)
    if args.problem in ("ridge", "both"):
        ridge(args.rounds, args.repeats)


if __name__ == "__main__":
    main()
