"""The trends of Ding's thesis, Chapters 4 and 5: Q-DPSGD (loss against bits and epsilon) and the functional
mechanism for fair logistic regression (accuracy and risk difference against epsilon and tau).

J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness" (PhD dissertation,
University of Houston, 2022). Data: scikit-learn's breast cancer set, an offline STAND-IN for the thesis's MNIST,
CIFAR-10, Adult and US census data (see problems.fair_logistic.breast_cancer_fairness for its synthetic
protected attribute). The thesis reports these trends qualitatively only (figures without numbers):

* Q-DPSGD (Sec. 4.5): the loss rises when epsilon drops; Q-DPSGD-2 converges more slowly than Q-DPSGD-1;
  quantization cuts the bits sent.
* PDFC / ADFC (Sec. 6.3): accuracy rises with epsilon; the fairness constraint cuts the risk difference.

Q-DPSGD: L2-logistic (lam = 0.1) over 10 agents on a random connected graph with 18 edges (the thesis's
Erdos-Renyi p = 0.4 has 18 expected edges), clip K = 1, delta = 1e-5, T rounds, the default step; Q-DPSGD-1 at
8 bits and q = 0.2, Q-DPSGD-2 at 16 bits and q = 1 (VARIANT_SETTINGS); the quantizer covers [-4, 4). The loss is
the relative gap of sum_i f_i at the average release. The functional mechanism: 80/20 train/test
splits, lam = 0.01, x_s = column 0 with ratio 1/2, delta = 1e-5; mean over the runs.

    python examples/ding_qdpsgd_fair.py [--quick] [--figure PATH]
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import privcvx as pc
from privcvx.algorithms import QDPSGD
from privcvx.errors import ReproducibleNoiseWarning
from problems.binary_logistic import binary_logistic
from problems.datasets import load_breast_cancer
from problems.fair_logistic import METHODS, accuracy, breast_cancer_fairness, fair_logistic, risk_difference

AGENTS, EDGES, CLIP, DELTA = 10, 18, 1.0, 1e-5
RANGE = 4.0  # the quantizer covers [-4, 4): eta = 4 / 2^(s-1)


def quantizer(bits: int) -> dict[str, float]:
    """Q's settings for s bits over the range [-RANGE, RANGE)."""
    return {"bits": bits, "resolution": RANGE / 2.0 ** (bits - 1)}


#: Each variant's setting for the epsilon trend: (bits, sampling rate q). Q-DPSGD-2's noise is calibrated to the
#: lattice sensitivity D_t / eta + sqrt(p), so it needs a fine lattice (16 bits, eta = 2^-13) and the full batch
#: (q = 1 keeps D_t bounded: see docs/qdpsgd.md); Q-DPSGD-1 runs at 8 bits with q = 0.2, as the thesis's B / m.
VARIANT_SETTINGS = {1: (8, 0.2), 2: (16, 1.0)}


def qdpsgd_runs(rounds: int, seeds: int, quick: bool) -> pd.DataFrame:
    """Final relative gap and bits for each (variant, bits, epsilon), mean over ``seeds`` runs."""
    X, y = load_breast_cancer()
    problem = binary_logistic((X - X.mean(axis=0)) / X.std(axis=0), y, agents=AGENTS, lam=0.1)
    optimum = problem.solve_centralized().value
    topology = pc.Topology.random(edges=EDGES, seed=0)
    if quick:
        bits_grid, epsilons, fixed = (4, 16), {1: (1.0, 8.0), 2: (8.0, 128.0)}, {1: ((4, 16), 1.0), 2: ((8,), 32.0)}
    else:
        bits_grid = (4, 6, 8, 12, 16)
        epsilons = {variant: (0.5, 1.0, 2.0, 8.0, 32.0, 128.0) for variant in (1, 2)}
        fixed = {1: ((4, 6, 12, 16), 1.0), 2: ((8, 12), 32.0)}
    settings = [(1, bits, 1.0, None) for bits in bits_grid]
    settings += [(variant, VARIANT_SETTINGS[variant][0], VARIANT_SETTINGS[variant][1], epsilon)
                 for variant in (1, 2) for epsilon in epsilons[variant]]
    settings += [(variant, bits, VARIANT_SETTINGS[variant][1], epsilon)
                 for variant, (grid, epsilon) in fixed.items() for bits in grid]
    rows = []
    for variant, bits, rate, epsilon in settings:
        gaps, sent = [], 0.0
        for seed in range(seeds if epsilon is not None else 1):
            private = {} if epsilon is None else {"epsilon": epsilon, "delta": DELTA, "clip": CLIP,
                                                  "sampling_rate": rate}
            algorithm = QDPSGD(variant=variant, **quantizer(bits), **private)
            result = problem.solve(algorithm, topology, rounds=rounds, seed=seed)
            gaps.append((result.history["average_objective"].iloc[-1] - optimum) / abs(optimum))
            sent = float(result.history["total_bits"].iloc[-1])
        rows.append({"variant": variant, "bits": bits, "q": rate, "epsilon": math.inf if epsilon is None else epsilon,
                     "relative_gap": float(np.mean(gaps)), "total_bits": sent})
    return pd.DataFrame(rows)


def fairness_runs(runs: int, quick: bool) -> pd.DataFrame:
    """Test accuracy and risk difference per (method, epsilon, tau), mean over ``runs`` random splits."""
    X, y, z = breast_cancer_fairness()
    taus, epsilons = ((math.inf, 0.1), (1.0, 1000.0)) if quick else ((math.inf, 10.0, 1.0, 0.1, 0.01),
                                                                     (0.1, 1.0, 10.0, 100.0, 1000.0, math.inf))
    grid = [("exact", None, tau) for tau in taus]
    grid += [(method, epsilon, tau) for method in METHODS for epsilon in epsilons for tau in (math.inf, 0.1)]
    rows = []
    for method, epsilon, tau in grid:
        scores = []
        for run in range(runs):
            order = np.random.default_rng(run).permutation(len(y))  # the data split, not noise
            train, test = order[: int(0.8 * len(y))], order[int(0.8 * len(y)):]
            model = fair_logistic(X[train], y[train], z[train], tau,
                                  "pdfc" if method == "exact" else method, epsilon, delta=DELTA, attribute=0,
                                  lam=0.01, seed=run)
            scores.append((accuracy(model.w, X[test], y[test]), risk_difference(model.w, X[test], z[test])))
        mean = np.mean(scores, axis=0)
        rows.append({"method": method, "epsilon": "none" if epsilon is None else epsilon, "tau": tau,
                     "accuracy": mean[0], "risk_difference": mean[1]})
    return pd.DataFrame(rows)


def plot_qdpsgd(ax: Any, table: pd.DataFrame) -> None:
    """The relative gap against epsilon, one line per variant (at its VARIANT_SETTINGS), log-log."""
    for variant, (bits, rate) in VARIANT_SETTINGS.items():
        rows = table[(table["variant"] == variant) & (table["bits"] == bits) & (table["q"] == rate)
                     & np.isfinite(table["epsilon"])]
        label = f"Q-DPSGD-{variant} ({bits} bits, q = {rate})"
        ax.loglog(rows["epsilon"], rows["relative_gap"], marker="o", label=label)
    ax.set_xlabel("epsilon")
    ax.set_ylabel("relative gap (F(w) - F*) / F*")
    ax.set_title("Q-DPSGD, L2-logistic")
    ax.legend()


def plot_fairness(ax: Any, table: pd.DataFrame) -> None:
    """Test accuracy against epsilon per method, unconstrained (solid) and at tau = 0.1 (dashed)."""
    private = table[table["method"] != "exact"]
    for method, color in zip(METHODS, ("C0", "C1", "C2"), strict=True):
        for tau, style in ((math.inf, "-"), (0.1, "--")):
            rows = private[(private["method"] == method) & (private["tau"] == tau)
                           & np.isfinite(private["epsilon"].astype(float))]
            ax.semilogx(rows["epsilon"].astype(float), rows["accuracy"], style, color=color, marker="o",
                        label=f"{method}, tau = {tau:g}")
    exact = table[table["method"] == "exact"].set_index("tau")["accuracy"]
    for tau, style in ((math.inf, "-"), (0.1, "--")):
        ax.axhline(exact[tau], color="k", linestyle=style, linewidth=0.8, label=f"exact, tau = {tau:g}")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("test accuracy")
    ax.set_title("Functional mechanism (stand-in data)")
    ax.legend(fontsize=7)


def markdown(table: pd.DataFrame) -> str:
    """A markdown table (numbers to 4 significant digits) without the optional tabulate package."""
    cells = [[f"{v:.4g}" if isinstance(v, float) else str(v) for v in row] for row in table.itertuples(index=False)]
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def main(argv: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and runs (the suite's smoke run)")
    parser.add_argument("--figure", type=Path, help="save the two trends as a figure (150 dpi)")
    args = parser.parse_args(argv)
    rounds, seeds, runs = (20, 1, 1) if args.quick else (300, 3, 10)
    logging.getLogger("absl").setLevel(logging.ERROR)  # dp-accounting's notes on skipped fractional RDP orders
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # seeded research runs, on purpose
        quantized = qdpsgd_runs(rounds, seeds, args.quick)
        print(f"Q-DPSGD, {rounds} rounds, mean over {seeds} seeds (epsilon = inf: no noise)")
        print(markdown(quantized), flush=True)
        fair = fairness_runs(runs, args.quick)
    print(f"\nFunctional mechanism, mean over {runs} splits (method exact: epsilon = None, the exact loss; "
          "tau = inf: no constraint)")
    print(markdown(fair))
    if args.figure is not None:
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(1, 2, figsize=(11, 4))
        plot_qdpsgd(axes[0], quantized)
        plot_fairness(axes[1], fair)
        figure.tight_layout()
        figure.savefig(args.figure, dpi=150)
    return quantized, fair


if __name__ == "__main__":
    main(sys.argv[1:])
