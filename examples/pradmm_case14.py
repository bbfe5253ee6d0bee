"""PR-ADMM (Ding's thesis, Alg. 1) on the case14 zones next to ObjPert and OutPert at the same (epsilon, delta).

The zonal problem (72) of ``powerflow.zonal_problem("case14", 3, sensitivity="exact")``: each zone minimizes the
squared mismatches of its own buses (Eq. (28)) over its SOC set; its loads are its private data, and neighbouring
datasets differ in one load entry by at most beta = 0.01 p.u. (``powerflow.zonal.RELATION``).

* ObjG, OutG (derived): Algorithm 1 of Ryu & Kim (``LinearizedADMM``, server-based) with the Gaussian mechanism
  at ``epsilon_step`` per update, rho = 100, eta^t = 1 / sqrt(t) (Sec. 6.1.1), the exact gradient sensitivity;
  the run's (epsilon, delta) is its ledger's (``result.history["epsilon"]``, the library's tightest accountant).
* PR-ADMM (Per / Iter): the decentralized ADMM of Ch. 3 in general form on the graph of zones sharing a key,
  eta = ``--eta``, periodic decay (R_P = 0.925, T_p = 1) or iteration decay (R_T = 0.015), calibrated by the
  inverse calibration so that its zCDP, converted by Lemma 4, is exactly the ObjG run's (epsilon, delta). The
  release sensitivity is beta / sqrt(2 mu_i), mu_i = 2 eta min_k |V_i(k)| (``powerflow.release_bounds``,
  derived in docs/zcdp_admm.md, "General form").
* The non-private runs of both.

Metrics, at each zone's own last release: ``objective`` = sum of the zones' squared mismatches (for PR-ADMM the
released shared entries with the zone's private local solution; for Algorithm 1 the released local vector), and
``tie_disagreement`` = the largest distance between two zones' values of the entries both hold. Output (``--out``):
``pradmm_case14.csv`` (per method, epsilon and seed: final values and the epsilons), ``pradmm_case14.png``.

    PYTHONPATH=. .venv/bin/python examples/pradmm_case14.py            # 3 epsilons x 3 seeds, T = 100
    PYTHONPATH=. .venv/bin/python examples/pradmm_case14.py --quick    # 1 epsilon x 1 seed, T = 15
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import privcvx as pc
from powerflow import zonal_problem
from privcvx.algorithms import PRADMM
from privcvx.algorithms.pr_admm import IterationDecay, PeriodicDecay
from privcvx.errors import ReproducibleNoiseWarning
from privcvx.privacy.mechanisms import Gaussian
from privcvx.privacy.perturbation import ObjectivePerturbation, OutputPerturbation
from privcvx.schedules import inverse_sqrt

DELTA = 0.01
EPSILON_STEPS = (0.1, 0.5, 1.0)
RHO = 100.0
METHODS = ("ObjG", "OutG (derived)", "PR-ADMM (Per)", "PR-ADMM (Iter)")


def shared_entries(layout: pc.problem.AgentLayout, z: np.ndarray) -> np.ndarray:
    """The shared entries of ``result.z[p]``: all of it in a release-only (private) run, else its shared slice."""
    return z if z.size == len(layout.shared_local) else z[layout.shared_local]


def tie_disagreement(problem: pc.DistributedProblem, result: pc.Result) -> float:
    """The largest distance between two agents' values of the shared entries both hold (from ``result.z``)."""
    largest = 0.0
    for (la, za), (lb, zb) in itertools.combinations(zip(problem.layouts, result.z, strict=True), 2):
        _, at_a, at_b = np.intersect1d(la.shared_global, lb.shared_global, return_indices=True)
        if at_a.size:
            largest = max(largest, float(np.linalg.norm(shared_entries(la, za)[at_a] - shared_entries(lb, zb)[at_b])))
    return largest


def run_algorithm1(problem: pc.DistributedProblem, method: str | None, epsilon_step: float, rounds: int,
                   seed: int) -> pc.Result:
    """Algorithm 1 (Sec. 6.1.1 settings), with ObjG, OutG (derived) or (None) no privacy."""
    noise = Gaussian(epsilon_step, DELTA)
    privacy = {None: None, "ObjG": ObjectivePerturbation(noise),
               "OutG (derived)": OutputPerturbation(noise, sensitivity="derived")}[method]
    return problem.solve(rounds=rounds, local_updates=1, rho=RHO, eta=inverse_sqrt(), privacy=privacy, seed=seed)


def run_pradmm(problem: pc.DistributedProblem, method: str | None, epsilon: float, rounds: int, seed: int,
               eta: float) -> pc.Result:
    """PR-ADMM at total (epsilon, DELTA) with the given schedule, or (None) without noise."""
    if method is None:
        return problem.solve(PRADMM(eta=eta), rounds=rounds, seed=seed)
    schedule = PeriodicDecay(0.925, 1) if "Per" in method else IterationDecay(0.015)
    algorithm = PRADMM(epsilon=epsilon, delta=DELTA, eta=eta, schedule=schedule)  # the zones declare release bounds
    return problem.solve(algorithm, rounds=rounds, seed=seed)


def run_all(epsilon_steps: tuple[float, ...], seeds: int, rounds: int, eta: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Final values per run (table) and the objective per round (curves)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandapower's limit notice, Clarabel's inaccurate reference
        problem = zonal_problem("case14", 3, sensitivity="exact")
    rows, curves = [], []

    def record(method: str, epsilon_step: float, seed: int, result: pc.Result, target: float) -> None:
        history = result.history
        rows.append({"method": method, "epsilon_step": epsilon_step, "seed": seed, "target_epsilon": target,
                     "ledger_epsilon": float(history["epsilon"].iloc[-1]),
                     "zcdp_epsilon": float(result.info.get("zcdp_epsilon", np.nan)),
                     "objective": float(history["objective"].iloc[-1]),
                     "tie_disagreement": tie_disagreement(problem, result)})
        curves.append(pd.DataFrame({"method": method, "epsilon_step": epsilon_step, "seed": seed,
                                    "round": history["round"], "objective": history["objective"]}))

    record("Alg. 1 non-private", 0.0, 0, run_algorithm1(problem, None, 1.0, rounds, 0), 0.0)
    record("PR-ADMM non-private", 0.0, 0, run_pradmm(problem, None, 0.0, rounds, 0, eta), 0.0)
    for epsilon_step in epsilon_steps:
        for seed in range(seeds):
            target = None
            for method in METHODS[:2]:
                result = run_algorithm1(problem, method, epsilon_step, rounds, seed)
                target = float(result.history["epsilon"].iloc[-1])  # both spend T Gaussian(epsilon_step, delta)
                record(method, epsilon_step, seed, result, target)
            for method in METHODS[2:]:
                record(method, epsilon_step, seed, run_pradmm(problem, method, target, rounds, seed, eta), target)
    return pd.DataFrame(rows), pd.concat(curves, ignore_index=True)


def plot(curves: pd.DataFrame, epsilon_step: float, ax) -> None:
    """The mean objective against rounds for every method at one ``epsilon_step`` (and the non-private runs)."""
    for method in ("Alg. 1 non-private", "PR-ADMM non-private", *METHODS):
        step = 0.0 if "non-private" in method else epsilon_step
        chosen = curves[(curves["method"] == method) & (curves["epsilon_step"] == step)]
        mean = chosen.groupby("round")["objective"].mean()
        ax.plot(mean.index, mean.to_numpy(), label=method, linestyle=":" if "non-private" in method else "-")
    ax.set(yscale="log", xlabel="round t", ylabel="sum of squared mismatches (p.u.^2)",
           title=f"case14, 3 zones: epsilon/update = {epsilon_step:g}")


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 epsilon x 1 seed x 15 rounds")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--eta", type=float, default=3.0, help="PR-ADMM's penalty")
    parser.add_argument("--out", type=Path, default=Path("out/pradmm_case14"))
    args = parser.parse_args(argv)
    epsilon_steps, seeds, rounds = ((1.0,), 1, 15) if args.quick else (EPSILON_STEPS, args.seeds, args.rounds)
    warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # research runs, seeded on purpose
    start = time.perf_counter()
    table, curves = run_all(epsilon_steps, seeds, rounds, args.eta)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "pradmm_case14.csv", index=False)
    summary = table.groupby(["method", "epsilon_step"]).agg(
        target_epsilon=("target_epsilon", "mean"), ledger_epsilon=("ledger_epsilon", "mean"),
        zcdp_epsilon=("zcdp_epsilon", "mean"), objective=("objective", "mean"), objective_std=("objective", "std"),
        tie_disagreement=("tie_disagreement", "mean")).reset_index()
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(epsilon_steps), figsize=(5.5 * len(epsilon_steps), 4.2), squeeze=False)
    for ax, epsilon_step in zip(axes[0], epsilon_steps, strict=True):
        plot(curves, epsilon_step, ax)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out / "pradmm_case14.png", dpi=150)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summary.to_string(index=False))
    print(f"{time.perf_counter() - start:.0f} s")
    return summary


if __name__ == "__main__":
    main()
