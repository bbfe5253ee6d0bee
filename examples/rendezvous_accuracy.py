"""Figure 1 of Huang, Mitra & Vaidya (paper 001): accuracy against privacy on the private rendezvous problem.

N agents hold private addresses a_i, drawn uniformly in X = [-1, 1]^2 once (``--data-seed``), and minimize
sum_i ||x - a_i||^2 over X with ``pc.algorithms.DPDistributedGradient`` on a fixed connected graph (ring, or
``Topology.random(seed=0)``). For every epsilon the script runs ``--runs`` seeds (the same seeds 0..runs-1 for every
epsilon) of T rounds through the full message protocol and reports d = mean ||w - x*||^2, where w is the average of
the agents' last (noisy) releases and x* the centralized optimum, with a 95% confidence interval
(mean +- 1.96 std / sqrt(runs)). The noise-free run (epsilon=None, same geometric step c q^(t-1)) gives the bias
floor. ``epsilon_spent`` is the worst agent's basic composition of its releases; under the default
calibration="safe" it equals epsilon (1 - (q/p)^T), which is printed next to it. The default c, q and p are the
method's: c = 1 / max_i L_i = 0.5, q = 0.9, p = optimal_noise_decay(q).

    .venv/bin/python examples/rendezvous_accuracy.py            # 7 epsilons x 200 runs, about 4 minutes on 2 cores
    .venv/bin/python examples/rendezvous_accuracy.py --quick    # smoke test: 3 epsilons x 10 runs

Writes ``accuracy.csv`` (one row per epsilon) and ``accuracy.png`` (log-log d against epsilon) to ``--out``.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import privcvx as pc
from privcvx.algorithms.dp_gradient_accuracy import optimal_noise_decay
from problems.rendezvous import rendezvous

matplotlib.use("Agg")

PAPER_EPSILONS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
QUICK_EPSILONS = (0.1, 1.0, 10.0)
QUICK_RUNS = 10
TOPOLOGIES = {"ring": pc.Topology.ring, "random": functools.partial(pc.Topology.random, seed=0)}


@dataclass(frozen=True)
class Experiment:
    """Everything a run needs; picklable, so that worker processes receive it."""

    points: tuple[tuple[float, ...], ...]
    optimum: tuple[float, ...]
    topology: str
    rounds: int
    c: float
    q: float
    p: float

    def run(self, epsilon: float | None, seed: int) -> pc.Result:
        algorithm = pc.algorithms.DPDistributedGradient(epsilon=epsilon, step="geometric", c=self.c, q=self.q,
                                                        p=self.p)
        return _problem(self.points).solve(algorithm, TOPOLOGIES[self.topology](), rounds=self.rounds, seed=seed,
                                           diagnostics=False)

    def error(self, result: pc.Result) -> float:
        """||w - x*||^2."""
        return float(np.sum((result.w - np.asarray(self.optimum)) ** 2))


@functools.lru_cache(maxsize=1)
def _problem(points: tuple[tuple[float, ...], ...]) -> pc.DistributedProblem:
    """The rendezvous problem, built once per process."""
    return rendezvous(np.asarray(points))


def private_run(experiment: Experiment, task: tuple[float, int]) -> tuple[float, float, float]:
    """(epsilon, ||w - x*||^2, the worst agent's basic epsilon) of one private run."""
    epsilon, seed = task
    result = experiment.run(epsilon, seed)
    return epsilon, experiment.error(result), float(result.privacy["epsilon_basic"].max())


def summarize(samples: pd.DataFrame, experiment: Experiment, floor: float) -> pd.DataFrame:
    """One row per epsilon: d with its 95% CI, the epsilon spent (measured and closed form), the bias floor."""
    grouped = samples.groupby("epsilon")
    table = pd.DataFrame({"runs": grouped["d"].count(), "mean_d": grouped["d"].mean(),
                          "epsilon_spent": grouped["spent"].max()}).reset_index()
    half = 1.96 * grouped["d"].std(ddof=1).to_numpy() / np.sqrt(table["runs"].to_numpy())
    table.insert(3, "ci_low", table["mean_d"] - half)
    table.insert(4, "ci_high", table["mean_d"] + half)
    table["epsilon_closed_form"] = table["epsilon"] * (1.0 - (experiment.q / experiment.p) ** experiment.rounds)
    table["bias_floor"] = floor
    return table


def small_epsilon_slope(table: pd.DataFrame) -> float:
    """The least-squares slope of log d against log epsilon over 0.1 <= epsilon <= 1 (NaN with < 2 points)."""
    small = table[(table["epsilon"] >= 0.1) & (table["epsilon"] <= 1.0)]
    if len(small) < 2:
        return float("nan")
    return float(np.polyfit(np.log(small["epsilon"]), np.log(small["mean_d"]), 1)[0])


def plot(table: pd.DataFrame, experiment: Experiment, agents: int, path: Path) -> None:
    """Log-log d against epsilon with CI error bars, a 1/eps^2 guide and the noise-free bias floor."""
    eps, d = table["epsilon"].to_numpy(), table["mean_d"].to_numpy()
    floor = float(table["bias_floor"].iloc[0])
    fig, ax = plt.subplots()
    ax.errorbar(eps, d, yerr=[d - table["ci_low"].to_numpy(), table["ci_high"].to_numpy() - d], fmt="o-",
                capsize=3, label=f"DP, mean of {int(table['runs'].min())} runs, 95% CI")
    ax.plot(eps, d[0] * (eps[0] / eps) ** 2, ":", color="gray", label=r"$\propto 1/\epsilon^2$")
    # A floor orders of magnitude below the data would flatten the plot: with c = 1/L = 0.5 it is 0 up to rounding,
    # since the first step puts every x_i at a_i and the doubly stochastic mixing keeps the mean at x* thereafter.
    visible = floor > 1e-3 * d.min()
    ax.axhline(floor, color="black", linestyle="--",
               label=f"noise-free bias floor {floor:.2g}" + ("" if visible else " (below the axis)"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.3 * (min(d.min(), floor) if visible else d.min()))
    ax.set_xlabel(r"privacy level $\epsilon$")
    ax.set_ylabel(r"$d = E\,\|w - x^*\|^2$")
    ax.set_title(f"Rendezvous, N={agents}, {experiment.topology}, T={experiment.rounds}, c={experiment.c:g}, "
                 f"q={experiment.q:g}, p={experiment.p:.3g}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10, help="N (default 10)")
    parser.add_argument("--topology", choices=sorted(TOPOLOGIES), default="ring", help="fixed graph (default ring)")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the addresses (default 0)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(PAPER_EPSILONS),
                        help="privacy levels (default: the paper's 7)")
    parser.add_argument("--runs", type=int, default=200, help="seeds per epsilon (default 200; the paper used 5000)")
    parser.add_argument("--rounds", type=int, default=100, help="T (default 100)")
    parser.add_argument("--c", type=float, default=None, help="initial step (default 1 / max L_i)")
    parser.add_argument("--q", type=float, default=0.9, help="step decay (default 0.9)")
    parser.add_argument("--p", type=float, default=None, help="noise decay (default optimal_noise_decay(q))")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: epsilons {' '.join(map(str, QUICK_EPSILONS))} and {QUICK_RUNS} runs")
    parser.add_argument("--out", type=Path, default=Path("out/rendezvous"), help="output folder")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    epsilons, runs = (QUICK_EPSILONS, QUICK_RUNS) if args.quick else (tuple(args.epsilons), args.runs)
    start = time.perf_counter()
    points = np.random.default_rng(args.data_seed).uniform(-1.0, 1.0, size=(args.agents, 2))
    problem = _problem(tuple(map(tuple, points)))
    c = args.c if args.c is not None else pc.algorithms.DPDistributedGradient(epsilon=epsilons[0], q=args.q).prepare(
        problem, TOPOLOGIES[args.topology](), args.rounds).c
    experiment = Experiment(points=tuple(map(tuple, points)), optimum=tuple(problem.solve_centralized().w),
                            topology=args.topology, rounds=args.rounds, c=c, q=args.q,
                            p=optimal_noise_decay(args.q) if args.p is None else args.p)
    floor = experiment.error(experiment.run(None, 0))
    print(f"N={args.agents} {args.topology} T={args.rounds} c={c:g} q={args.q:g} p={experiment.p:.4f}  "
          f"x*={np.round(experiment.optimum, 4)}  noise-free bias floor {floor:.3g}")

    tasks = [(eps, seed) for eps in epsilons for seed in range(runs)]
    pool_start = time.perf_counter()
    with multiprocessing.Pool(args.workers) as pool:
        samples = pd.DataFrame(pool.map(functools.partial(private_run, experiment), tasks),
                               columns=["epsilon", "d", "spent"])
    pool_time = time.perf_counter() - pool_start
    print(f"{len(tasks)} private runs in {pool_time:.1f} s on {args.workers} workers "
          f"({pool_time * args.workers / len(tasks):.3f} s per run)")

    table = summarize(samples, experiment, floor)
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        print(table.to_string(index=False))
    print(f"log-log slope of d against epsilon over 0.1 <= epsilon <= 1: {small_epsilon_slope(table):.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    table.drop(columns="epsilon_closed_form").to_csv(args.out / "accuracy.csv", index=False)
    plot(table, experiment, args.agents, args.out / "accuracy.png")
    print(f"wrote {args.out / 'accuracy.csv'} and {args.out / 'accuracy.png'} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
