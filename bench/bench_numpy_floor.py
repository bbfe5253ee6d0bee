"""The numpy floor: a round of Algorithm 1 in privcvx against the same round in plain numpy, measured in one run.

    PYTHONPATH=. .venv/bin/python bench/bench_numpy_floor.py [--rounds 100] [--repeats 7] [--rho 0.01]
        [--breakdown | --interleaved]

The set-up (issue 14, item 6): scikit-learn's digits, ``problems.federated_logistic`` with 10 IID agents and
the box of Sec. 6.2.1 of Ryu & Kim ("Differentially private distributed optimization with linearized ADMM and
multiple local updates" style: W_p = [-u, u], u = 0.1 as for MNIST; Eq. (30) with n_p = I), Algorithm 1 with
E = 5 local updates, rho fixed, eta = "auto" (1/L_p, or Eq. (25a) under privacy), non-private and under
ObjPert Eq. (10) with the Gaussian mechanism (epsilon = 1, delta = 1e-5 per update), serial backend.

The floor (:class:`NumpyAlgorithm1`) is written here, independently of privcvx, in the style of the paper
authors' own code: a loop over the agents, the analytic softmax-logistic gradient, the box projection as
``np.clip``, noise from one numpy generator, no diagnostics, no messages, no ledger. It reads only the raw
data, the split (the row indices of each agent) and the settings. Non-private, both must compute the same
iterates: the bench checks the final w and every agent's release against privcvx's to 1e-10.

Private runs start with privcvx's epsilon caches emptied (each pays its per-round epsilon, as a new process
would). ``--breakdown`` times the parts of a privcvx round instead (timers around its methods).
``--interleaved`` alternates the two methods round by round instead of run by run (on a loaded machine the load
then changes less between the two sides of a ratio).

Each repetition runs every configuration once, one after the other in the same process (so machine drift
hits all of them alike), after a warm-up of each. Per round is the median over the rounds of a run (privcvx:
the differences between the ends of successive rounds, taken by a callback), then the median over the
repetitions; ratios are to the floor.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import privcvx as pc
from privcvx import gradients
from privcvx.privacy import accounting
from privcvx.runtime import backends, loop
from problems import datasets, federated_logistic
from problems.logistic import LogisticLoss

AGENTS = 10
LOCAL_UPDATES = 5
BOUND = 0.1
EPSILON, DELTA = 1.0, 1e-5


class NumpyAlgorithm1:
    """Algorithm 1 of Ryu & Kim in plain numpy on the federated logistic regression of Eq. (30).

    Agent p holds X_p (rows scaled to norm <= 1) and one-hot Y_p; f_p(W) = (1/I) sum_i [logsumexp(x_i^T W) -
    y_i^T W^T x_i], L_p = I_p / (2I). A round: the server forms w = mean_p (z_p - lambda_p / rho) (line 5);
    each agent takes E steps z <- clip((z / eta - g + rho w + lambda_p) / (1/eta + rho), -u, u) (Eq. (9), g
    the gradient, minus Gaussian noise under ObjPert Eq. (10)), releases the average of its E iterates and
    updates lambda_p += rho (w - release) (lines 20-22); the server's duals are the same numbers.
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, shares: list[np.ndarray], *, rho: float, private: bool,
                 seed: int = 0, transposed: bool = False) -> None:
        X = X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        Y = (y[:, None] == np.unique(y)[None, :]).astype(float)
        self.total = X.shape[0]
        self.data = [(X[rows], Y[rows]) for rows in shares]
        # ``transposed``: the gradient in the layout K x I_p (`transposed_gradient`), with each agent's X_p^T and
        # Y_p^T kept in C order beside X_p
        self.transposed = [(np.ascontiguousarray(X.T), np.ascontiguousarray(Y.T)) for X, Y in self.data] \
            if transposed else None
        self.smoothness = [rows.size / (2.0 * self.total) for rows in shares]
        self.rho = rho
        self.private = private
        # Thm. 4.8(ii): sigma = sqrt(2 ln(1.25/delta)) Delta_2 / epsilon, Delta_2 = 2 sqrt(2) / I (worst case).
        self.sigma = math.sqrt(2.0 * math.log(1.25 / DELTA)) * 2.0 * math.sqrt(2.0) / self.total / EPSILON
        self.rng = np.random.default_rng(seed)
        shape = (X.shape[1], Y.shape[1])
        self.z = [np.zeros(shape) for _ in shares]  # clip(0) = 0: the point of W_p closest to the origin
        self.released = [np.zeros(shape) for _ in shares]
        self.lam = [np.zeros(shape) for _ in shares]
        self.w = np.zeros(shape)

    def gradient(self, p: int, W: np.ndarray) -> np.ndarray:
        if self.transposed is not None:
            return self.transposed_gradient(p, W)
        X, Y = self.data[p]
        scores = X @ W
        scores -= scores.max(axis=1, keepdims=True)
        soft = np.exp(scores)
        soft /= soft.sum(axis=1, keepdims=True)
        return X.T @ (soft - Y) / self.total

    def transposed_gradient(self, p: int, W: np.ndarray) -> np.ndarray:
        """The same gradient with the scores S = W^T X_p^T (K x I_p): softmax down the columns,
        G^T = (S - Y_p^T) X_p."""
        (X, _), (XT, YT) = self.data[p], self.transposed[p]
        scores = W.T @ XT
        scores -= scores.max(axis=0)
        soft = np.exp(scores)
        soft /= soft.sum(axis=0)
        return ((soft - YT) @ X / self.total).T

    def objective(self) -> float:
        """sum_p f_p at the releases (what privcvx's diagnostics compute each round)."""
        total = 0.0
        for (X, Y), W in zip(self.data, self.released, strict=True):
            scores = X @ W
            top = scores.max(axis=1)
            total += float(np.sum(top + np.log(np.exp(scores - top[:, None]).sum(axis=1))) - np.sum(Y * scores))
        return total / self.total

    def round(self, t: int) -> None:
        rho = self.rho
        self.w = sum(z - lam / rho for z, lam in zip(self.released, self.lam, strict=True)) / len(self.data)
        for p in range(len(self.data)):
            eta = 1.0 / (self.smoothness[p] + (math.sqrt(t) / EPSILON if self.private else 0.0))
            z, total = self.z[p], np.zeros_like(self.w)
            for _ in range(LOCAL_UPDATES):
                g = self.gradient(p, z)
                if self.private:
                    g = g - self.sigma * self.rng.standard_normal(g.shape)
                z = np.clip((z / eta - g + rho * self.w + self.lam[p]) / (1.0 / eta + rho), -BOUND, BOUND)
                total += z
            self.z[p] = z
            self.released[p] = total / LOCAL_UPDATES
            self.lam[p] = self.lam[p] + rho * (self.w - self.released[p])


def floor_run(X: np.ndarray, y: np.ndarray, shares: list[np.ndarray], rounds: int, rho: float, private: bool,
              objective: bool) -> tuple[float, NumpyAlgorithm1]:
    """Median seconds per round of the numpy floor (with the objective each round if ``objective``)."""
    method = NumpyAlgorithm1(X, y, shares, rho=rho, private=private)
    times = []
    for t in range(1, rounds + 1):
        start = time.perf_counter()
        method.round(t)
        if objective:
            method.objective()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), method


def privcvx_run(problem: pc.DistributedProblem, rounds: int, rho: float, private: bool,
                diagnostics: bool) -> tuple[float, float, pc.Result]:
    """(median seconds per round, whole solve / rounds, result) of privcvx's Algorithm 1 on the serial backend."""
    privacy = pc.ObjectivePerturbation(pc.Gaussian(EPSILON, DELTA)) if private else None
    forget_accounting()
    ends: list[float] = []  # each round's end, from the callback (time_s is a diagnostic: absent without them)
    start = time.perf_counter()
    result = problem.solve(rounds=rounds, local_updates=LOCAL_UPDATES, rho=rho, eta="auto", privacy=privacy,
                           seed=0, diagnostics=diagnostics, callback=lambda row: ends.append(time.perf_counter()))
    total = time.perf_counter() - start
    return float(np.median(np.diff(ends))), total / rounds, result


def forget_accounting() -> None:
    """Empty privcvx's caches of epsilon answers, so that every timed private run pays its per-round epsilon, as
    a run in a new process does (repetitions of one run would otherwise find every round's answer cached)."""
    for cached in (accounting._report, accounting._accountant_epsilon, accounting._gdp_epsilon):
        cached.cache_clear()
    accounting.RunningEpsilon._answers.clear()


def breakdown(rounds: int, rho: float) -> None:
    """Where a privcvx round's time goes: every part of ``parts`` wrapped in a timer (which adds its own
    cost), milliseconds per round, each part without the parts timed inside it."""
    # imported here: the other modes import only what older privcvx trees also have (bench_floor_commits.py)
    from privcvx.algorithms import admm_agent, admm_server

    # the parts of a privcvx round, outermost first: (label, class, method)
    parts = [("round", loop.Run, "round"), ("history row", loop.Run, "row"),
             ("agents (host)", backends.AgentHost, "step"), ("agent steps", admm_agent.ADMMAgent, "step"),
             ("local updates", admm_agent.ADMMAgent, "_update"), ("gradient", gradients.GradientEvaluator, "gradient"),
             ("oracle", LogisticLoss, "gradient"), ("server", admm_server.ADMMServer, "step"),
             ("monitor", admm_server.ADMMMonitor, "observe"), ("epsilon", loop.Run, "epsilon")]
    spent: dict[str, float] = {}

    def timed(label: str, function: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - start
        return wrapper

    for label, cls, name in parts:  # before the problem is built: the agents hold the oracle's bound method
        setattr(cls, name, timed(label, getattr(cls, name)))
    X, y = datasets.load_digits()
    problem = federated_logistic(X, y, agents=AGENTS, bound=BOUND, seed=0)
    inner = {"round": ["agents (host)", "server"], "agents (host)": ["agent steps"], "agent steps": ["local updates"],
             "local updates": ["gradient"], "gradient": ["oracle"], "history row": ["monitor", "epsilon"]}
    print("| part | " + " | ".join(f"{label} (ms per round)" for label in ("non-private", "ObjPert Gaussian")) + " |")
    print("|---|---|---|")
    columns = []
    for private in (False, True):
        privcvx_run(problem, 5, rho, private, diagnostics=False)  # warm-up
        spent.clear()
        privcvx_run(problem, rounds, rho, private, diagnostics=False)
        columns.append({label: (spent.get(label, 0.0) - sum(spent.get(i, 0.0) for i in inner.get(label, []))) / rounds
                        for label, _, _ in parts})
    for label, _, _ in parts:
        print(f"| {label} | " + " | ".join(f"{column[label] * 1e3:.3f}" for column in columns) + " |")
    print("| total | " + " | ".join(f"{sum(column.values()) * 1e3:.3f}" for column in columns) + " |")


def equality(problem: pc.DistributedProblem, X: np.ndarray, y: np.ndarray, rounds: int, rho: float) -> str:
    """Max |privcvx - numpy| of the final w and of the releases, non-private, diagnostics on and off."""
    _, floor = floor_run(X, y, problem.info["shares"], rounds, rho, private=False, objective=False)
    w = floor.w.reshape(-1, order="F")
    lines = []
    for diagnostics in (False, True):
        _, _, result = privcvx_run(problem, rounds, rho, private=False, diagnostics=diagnostics)
        dw = float(np.max(np.abs(result.w - w)))
        dz = max(float(np.max(np.abs(z - r.reshape(-1, order="F"))))
                 for z, r in zip(result.z, floor.released, strict=True))
        lines.append(f"diagnostics {'on' if diagnostics else 'off'}: after {rounds} rounds, max |w - w_numpy| = "
                     f"{dw:.1e}, max |z_p - z_p numpy| = {dz:.1e} (|w| up to {np.max(np.abs(w)):.3f})")
        if max(dw, dz) > 1e-10:
            raise SystemExit("privcvx and the numpy floor computed different iterates:\n" + "\n".join(lines))
    return "\n".join(lines)


def interleaved(X: np.ndarray, y: np.ndarray, problem: pc.DistributedProblem, rounds: int, repeats: int,
                rho: float) -> None:
    """Round by round: the floor's round t, then privcvx's round t (its exchange and its history row, as
    ``pc.runtime.loop.run`` does them), each timed, so that both see the same load within milliseconds. Prints the
    medians of the per-round times and of the per-round ratios (diagnostics off)."""
    print("| privacy | numpy per round (ms) | privcvx per round (ms) | ratio of medians | median of per-round ratios |")
    print("|---|---|---|---|---|")
    for private in (False, True):
        privacy = pc.ObjectivePerturbation(pc.Gaussian(EPSILON, DELTA)) if private else None
        samples = []
        for repeat in range(repeats + 1):  # the first is a warm-up
            forget_accounting()
            algorithm = pc.algorithms.LinearizedADMM(local_updates=LOCAL_UPDATES, rho=rho, eta="auto", privacy=privacy)
            topology = algorithm.topology_for(problem).bind(problem.names)
            algorithm = algorithm.prepare(problem, topology, rounds)
            run = loop.Run(problem, algorithm, topology, rounds=rounds, seed=0, diagnostics=False)
            floor = NumpyAlgorithm1(X, y, problem.info["shares"], rho=rho, private=private)
            with backends.make_backend("serial", algorithm, problem, run.contexts) as hosts:
                run.start(hosts)
                for t in range(1, rounds + 1):
                    start = time.perf_counter()
                    floor.round(t)
                    middle = time.perf_counter()
                    sent = run.round(hosts, t)
                    run.rows.append(run.row(hosts, t, sent, 0.0)[0])
                    if repeat:
                        samples.append((middle - start, time.perf_counter() - middle))
        times = np.array(samples)
        numpy_ms, privcvx_ms = np.median(times, axis=0) * 1e3
        print(f"| {'ObjPert Gaussian' if private else 'non-private'} | {numpy_ms:.2f} | {privcvx_ms:.2f} | "
              f"{privcvx_ms / numpy_ms:.2f} | {np.median(times[:, 1] / times[:, 0]):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rho", type=float, default=0.01)
    parser.add_argument("--breakdown", action="store_true", help="time the parts of a privcvx round instead")
    parser.add_argument("--interleaved", action="store_true",
                        help="alternate the two methods round by round (diagnostics off) instead of run by run")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the seeded private runs warn that their noise is reproducible
    if args.breakdown:
        breakdown(args.rounds, args.rho)
        return
    X, y = datasets.load_digits()
    problem = federated_logistic(X, y, agents=AGENTS, bound=BOUND, seed=0)
    if args.interleaved:
        interleaved(X, y, problem, args.rounds, args.repeats, args.rho)
        return
    shares = problem.info["shares"]
    configurations: dict[str, Callable[[], Any]] = {}
    for private in (False, True):
        label = "ObjPert Gaussian" if private else "non-private"
        configurations[f"numpy | {label} | off"] = (
            lambda private=private: floor_run(X, y, shares, args.rounds, args.rho, private, objective=False)[:1])
        configurations[f"numpy | {label} | objective"] = (
            lambda private=private: floor_run(X, y, shares, args.rounds, args.rho, private, objective=True)[:1])
        for diagnostics in (False, True):
            configurations[f"privcvx | {label} | {'on' if diagnostics else 'off'}"] = (
                lambda private=private, diagnostics=diagnostics:
                privcvx_run(problem, args.rounds, args.rho, private, diagnostics)[:2])
    for run in configurations.values():  # warm-up
        run()
    times: dict[str, list[tuple[float, ...]]] = {name: [] for name in configurations}
    for _ in range(args.repeats):
        for name, run in configurations.items():
            times[name].append(run())
    print(f"digits, {AGENTS} IID agents, box [-{BOUND}, {BOUND}], E = {LOCAL_UPDATES}, rho = {args.rho}, "
          f"eta = auto; {args.rounds} rounds, {args.repeats} repetitions (after one warm-up of each), serial")
    print()
    print("| method | privacy | diagnostics | per round (ms) | ratio to numpy | whole solve / rounds (ms) |")
    print("|---|---|---|---|---|---|")
    for name, values in times.items():
        method, label, diagnostics = name.split(" | ")
        median = float(np.median([v[0] for v in values]))
        floor = float(np.median([v[0] for v in times[f"numpy | {label} | off"]]))
        whole = f"{np.median([v[1] for v in values]) * 1e3:.2f}" if method == "privcvx" else ""
        print(f"| {method} | {label} | {diagnostics} | {median * 1e3:.2f} | {median / floor:.2f} | {whole} |")
    print()
    print("numpy 'objective': the floor plus sum_p f_p at the releases each round (privcvx's diagnostics also "
          "compute the box violation).")
    print(equality(problem, X, y, args.rounds, args.rho))


if __name__ == "__main__":
    main()
