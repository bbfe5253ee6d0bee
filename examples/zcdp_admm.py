"""The trends of Figs. 4, 11 and 12 of Ding's thesis (Ch. 3) with PR-ADMM, PP-ADMM and IPP-ADMM.

J. Ding, "Towards Plausible Collaborative Machine Learning: Privacy, Efficiency and Fairness", PhD
dissertation, University of Houston, 2022. L2-regularized binary logistic regression (lam_hat / N per
agent, labels +-1, the thesis's preprocessing) on scikit-learn's bundled breast-cancer data (569 samples,
30 features; 80/20 train/test split; no intercept, as in the thesis), lam_hat = 0.01, N = 5 agents on
``Topology.random(edges=7, seed=1)``, eta = 0.02 (the thesis's 0.5 is far from converged in T = 40 rounds
here), every method at the same total (epsilon, delta = 1e-4) in zCDP:

* PR-ADMM (Per): periodic decay R_P = 0.925, T_p = 1; PR-ADMM (Iter): iteration decay R_T = 0.015 (the
  thesis's tuned values);
* PP-ADMM: splits = 0.001, beta = 10^-3.5 (``--beta``); sigma_i1 drawn from the rho_i1 charged and the Jacobian
  term xi_i charged per release (docs/zcdp_admm.md). At |D_i| = 91 the Jacobian terms alone, T xi_i = 1.37-2.73,
  exceed epsilon = 1 and 2: the library refuses those runs (``PrivacyError``), and they are listed in ``refused.csv``;
* IPP-ADMM: as PP-ADMM plus the SVT of Alg. 3 as printed (query "decrease", alpha = 1e-3, C_loss = 2,
  c = T/2, epsilon_1 : epsilon_2 = 1 : (2c)^(2/3)), 10% of the zCDP budget for the SVT; its c xi_i = 0.68-1.36
  exceed epsilon = 1 (refused there);
* Non-private: PRADMM() (the decentralized ADMM of Shi et al.).

Output (``--out``): ``history.csv`` (per round: average training loss L_t of the agents' own releases, test
error of the average release, broadcasts), ``summary.csv`` (per method and epsilon: final loss and test
error, mean and std over runs, broadcasts), ``target.csv`` (the smallest epsilon of the grid at which each
method's mean final test error reaches each target), ``refused.csv`` (the (method, epsilon) pairs the library refuses,
with its message) and ``zcdp_admm.png``.

    PYTHONPATH=. .venv/bin/python examples/zcdp_admm.py            # 4 epsilons x 5 runs, T = 40
    PYTHONPATH=. .venv/bin/python examples/zcdp_admm.py --quick    # smoke test: 2 epsilons x 1 run, T = 10
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

import privcvx as pc
from privcvx.algorithms import IPPADMM, PPADMM, PRADMM
from privcvx.algorithms.pr_admm import IterationDecay, PeriodicDecay
from privcvx.errors import PrivacyError, ReproducibleNoiseWarning
from problems.datasets import load_breast_cancer
from problems.l2_logistic import binary_labels, decentralized_logistic, thesis_preprocess

EPSILONS = (1.0, 2.0, 5.0, 10.0)
QUICK_EPSILONS = (1.0, 10.0)
DELTA = 1e-4
ETA = 0.02
LAM = 0.01
AGENTS = 5
#: Test-error targets, as excess over the non-private method's final test error (Fig. 11).
TARGET_EXCESS = (0.01, 0.03, 0.05)
#: The certified tolerance of PP-ADMM and IPP-ADMM chosen by the thesis (Fig. 8).
THESIS_BETA = 10 ** -3.5
METHODS = ("Non-private", "PR-ADMM (Per)", "PR-ADMM (Iter)", "PP-ADMM", "IPP-ADMM")


def build_problem(seed: int = 0) -> pc.DistributedProblem:
    X, y = load_breast_cancer()
    Z, labels = thesis_preprocess(X), binary_labels(y, 1)
    order = np.random.default_rng(seed).permutation(len(labels))
    cut = int(0.8 * len(labels))
    train, test = order[:cut], order[cut:]
    return decentralized_logistic(Z[train], labels[train], agents=AGENTS, lam=LAM, seed=seed,
                                  test=(Z[test], labels[test]))


def algorithm(method: str, epsilon: float, rounds: int, problem: pc.DistributedProblem,
              beta: float = THESIS_BETA) -> pc.algorithms.Algorithm:
    mu = min(agent.declared.strong_convexity for agent in problem.agents)  # lam_hat / N, the same for every agent
    if method == "Non-private":
        return PRADMM(eta=ETA)
    if method.startswith("PR-ADMM"):
        schedule = PeriodicDecay(0.925, 1) if "Per" in method else IterationDecay(0.015)
        return PRADMM(epsilon=epsilon, delta=DELTA, eta=ETA, schedule=schedule, strong_convexity=mu)
    common = {"epsilon": epsilon, "delta": DELTA, "eta": ETA, "strong_convexity": mu, "beta": beta}  # h_i: declared
    if method == "PP-ADMM":
        return PPADMM(**common)
    return IPPADMM(**common, max_broadcasts=rounds // 2, query="decrease", threshold=1e-3, clip=2.0)


def run_all(epsilons: tuple[float, ...], runs: int, rounds: int,
            beta: float = THESIS_BETA) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-round history of every run, and the (method, epsilon) pairs the library refuses (with its message)."""
    problem = build_problem()
    topology = pc.Topology.random(edges=7, seed=1)
    rows, refused = [], []
    for method in METHODS:
        for epsilon in (epsilons if method != "Non-private" else (np.inf,)):
            for run in range(runs if method != "Non-private" else 1):
                try:
                    result = problem.solve(algorithm(method, epsilon, rounds, problem, beta), topology, rounds=rounds,
                                           seed=1000 + run)
                except PrivacyError as error:  # PP/IPP-ADMM: the Jacobian terms alone exceed epsilon
                    refused.append({"method": method, "epsilon": epsilon, "reason": str(error)})
                    break
                history = result.history
                for t, (objective, error, sent) in enumerate(zip(history["objective"], history["test_error"],
                                                                   history["broadcasts"], strict=True), start=1):
                    rows.append({"method": method, "epsilon": epsilon, "run": run, "round": t,
                                 "loss": objective / AGENTS, "test_error": error, "broadcasts": sent,
                                 "zcdp_epsilon": result.info.get("zcdp_epsilon", 0.0)})
    return pd.DataFrame(rows), pd.DataFrame(refused, columns=["method", "epsilon", "reason"])


def summarize(history: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    last = history[history["round"] == history["round"].max()]
    sent = history.groupby(["method", "epsilon", "run"])["broadcasts"].sum().groupby(["method", "epsilon"]).mean()
    summary = last.groupby(["method", "epsilon"]).agg(loss=("loss", "mean"), loss_std=("loss", "std"),
                                                      test_error=("test_error", "mean"),
                                                      test_error_std=("test_error", "std"),
                                                      zcdp_epsilon=("zcdp_epsilon", "max"))
    summary["broadcasts"] = sent
    summary = summary.reset_index()
    baseline = float(summary.loc[summary["method"] == "Non-private", "test_error"].iloc[0])
    targets = []
    for excess in TARGET_EXCESS:
        for method in METHODS[1:]:
            rows = summary[(summary["method"] == method) & (summary["test_error"] <= baseline + excess)]
            targets.append({"target_error": baseline + excess, "method": method,
                            "epsilon_needed": float(rows["epsilon"].min()) if len(rows) else np.nan})
    return summary, pd.DataFrame(targets)


def plot(history: pd.DataFrame, targets: pd.DataFrame, epsilons: tuple[float, ...], axes: np.ndarray) -> None:
    """Loss against rounds at the smallest and largest epsilon, and the epsilon needed per target error."""
    mean = history.groupby(["method", "epsilon", "round"])["loss"].mean().reset_index()
    for ax, epsilon in zip(axes[:2], (min(epsilons), max(epsilons)), strict=True):
        for method in METHODS:
            chosen = mean[(mean["method"] == method) & (mean["epsilon"] == (np.inf if method == "Non-private"
                                                                            else epsilon))]
            ax.plot(chosen["round"], chosen["loss"], label=method)
        ax.set(title=f"epsilon = {epsilon:g}, delta = {DELTA:g}", xlabel="iteration t", ylabel="average loss L_t",
               yscale="log")
    axes[0].legend(fontsize=7)
    for method in METHODS[1:]:
        chosen = targets[targets["method"] == method]
        axes[2].plot(chosen["target_error"], chosen["epsilon_needed"], marker="o", label=method)
    axes[2].set(title="privacy cost to reach a test error", xlabel="target test error",
                ylabel="smallest epsilon of the grid", yscale="log")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 epsilons x 1 run x 10 rounds")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--beta", type=float, default=THESIS_BETA, help="PP/IPP-ADMM's certified tolerance")
    parser.add_argument("--out", type=Path, default=Path("out/zcdp_admm"))
    args = parser.parse_args(argv)
    epsilons, runs, rounds = (QUICK_EPSILONS, 1, 10) if args.quick else (EPSILONS, args.runs, args.rounds)
    import warnings

    warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # research runs, seeded on purpose
    start = time.perf_counter()
    history, refused = run_all(epsilons, runs, rounds, args.beta)
    summary, targets = summarize(history)
    args.out.mkdir(parents=True, exist_ok=True)
    history.to_csv(args.out / "history.csv", index=False)
    refused.to_csv(args.out / "refused.csv", index=False)
    summary.to_csv(args.out / "summary.csv", index=False)
    targets.to_csv(args.out / "target.csv", index=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    plot(history, targets, epsilons, axes)
    fig.tight_layout()
    fig.savefig(args.out / "zcdp_admm.png", dpi=150)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summary.to_string(index=False))
        print(targets.to_string(index=False))
        print(refused.to_string(index=False))
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
