"""The experiment of the DPP^2 paper (Ou, Wang, Liu & Lu, arXiv 2511.02283, Sec. VI, Figs. 1-3) on privcvx.

    PYTHONPATH=. .venv/bin/python examples/dpp2_experiment.py [--quick] [--out docs/figures]

Problem: 50 nodes, d = 10, m = 200 random samples per node (Gaussian features, uniform labels: the paper does
not give the distribution), logistic loss plus lambda omega x^2 / (1 + omega x^2) with lambda = 0.001, omega = 1,
features scaled so that Mbar = 5.03; a connected random geometric graph with radius 0.3 (the first connected
networkx seed); P = I - W with Metropolis weights (the paper does not say which P: an unnormalized Laplacian
makes G = 0.1 I - 0.05 L indefinite on this graph).

* Fig. 1: metric (31), ||x - xbar||^2 + (1/N) ||sum_i grad f_i(x_i)||^2, against k, for u = 1 and the decay rates
  r in {0.5, 0.9, 0.95, 0.97, 0.98, 0.99} and without noise (the paper's r = 0 means noise at k = 0 only, which
  has no finite epsilon here and is not run).
* Fig. 2: the same for r = 0.95 and u in {0 (no noise), 0.1, 0.3, 0.6, 1, 3, 5}.
* Fig. 3: ||(1/N) grad ftilde(x^K)||^2 after K = 500 for r in {0.1, ..., 0.9}: DPP^2, DiaDSP and PPDC with the
  paper's parameters, and the baselines again with their noise rescaled to DPP^2's epsilon (same budget by the
  accountants of this library: Theorem 3 for DPP^2, the derivations in privcvx/algorithms/diadsp.py and
  ppdc.py for the baselines). Both readings of the metric are recorded ("average" is plotted).

The paper's regime is far beyond a float ledger (epsilon = 10^500 at r = 0.1, and single releases above 10^100),
so the runs here use subclasses with ``beyond_float = True``: they add the same noise, record nothing and report no
epsilon; the epsilons in the JSON come from the accountants evaluated in log space.

Writes dpp2_fig1.png, dpp2_fig2.png, dpp2_fig3.png (150 dpi) and dpp2_experiment.json to ``--out``.
``--quick`` runs a 12-node, d = 4 version with few iterations and sweep points (for the test suite).
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import networkx as nx
import numpy as np

import privcvx as pc
from privcvx.algorithms import DPP2, PPDC, DiaDSP
from privcvx.algorithms.dpp2 import consensus_gap, stationarity
from privcvx.algorithms.gradient_agents import GradientMethod
from privcvx.privacy.dpp2_accountant import DPP2Privacy
from problems.nonconvex_logistic import PAPER_FEATURE_BOUND, nonconvex_logistic, paper_data

FULL = {"nodes": 50, "samples": 200, "dim": 10, "radius": 0.3, "curve_rounds": 1000, "compare_rounds": 500,
        "fig1_r": [0.5, 0.9, 0.95, 0.97, 0.98, 0.99], "fig2_u": [0.1, 0.3, 0.6, 1.0, 3.0, 5.0],
        "fig3_r": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]}
QUICK = {"nodes": 12, "samples": 40, "dim": 4, "radius": 0.5, "curve_rounds": 60, "compare_rounds": 40,
         "fig1_r": [0.5, 0.95], "fig2_u": [0.3, 3.0], "fig3_r": [0.3, 0.8]}
#: The parameters of Fig. 3.
PAPER_DPP2 = {"rho": 10.0, "alpha": 0.0994, "beta": 0.05, "u_w": 0.994, "u_e": 1.0}
PAPER_DIADSP = {"alpha": 0.01, "u_x": 2.0, "u_y": 5.0}
PAPER_PPDC = {"gamma": 65.0, "omega": 5.0, "eta": 0.01, "u_x": 1.0, "u_v": 1.0}


class PaperDPP2(DPP2):
    """DPP2 in the paper's regime: epsilon up to 10^500 is beyond a float ledger: such releases are charged as inf."""

    beyond_float = True


class PaperDiaDSP(DiaDSP):
    beyond_float = True


class PaperPPDC(PPDC):
    beyond_float = True


def build(config: dict[str, Any], seed: int) -> tuple[pc.DistributedProblem, pc.Topology, dict[str, Any]]:
    features, labels = paper_data(config["nodes"], config["samples"], config["dim"], seed=seed)
    problem = nonconvex_logistic(features, labels, feature_bound=PAPER_FEATURE_BOUND)  # declared, public
    graph_seed = 0
    while not nx.is_connected(graph := nx.random_geometric_graph(config["nodes"], config["radius"], seed=graph_seed)):
        graph_seed += 1
    graph = nx.relabel_nodes(graph, dict(enumerate(problem.names)))
    info = {"graph_seed": graph_seed, "edges": graph.number_of_edges(),
            "mbar": max(agent.smoothness for agent in problem.agents), "delta": problem.agents[0].sensitivity.l2}
    return problem, pc.Topology(graph), info


def traced(problem: pc.DistributedProblem, topology: pc.Topology, algorithm: GradientMethod, rounds: int,
           seed: int) -> dict[str, list[float]]:
    """Metric (31) and both readings of Fig. 3's metric at every iteration, from the nodes' traces."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pc.errors.ReproducibleNoiseWarning)
        result = problem.solve(algorithm.clone(trace=True), topology, rounds=rounds, seed=seed)  # trace: a research run
    x = np.stack([report["trace_x"] for report in result.info["agents"]], axis=1)
    g = np.stack([report["trace_gradient"] for report in result.info["agents"]], axis=1)
    return {"gap": [consensus_gap(x[k], g[k]) for k in range(len(x))],
            "average": [stationarity(g[k], "average") for k in range(len(x))],
            "literal": [stationarity(g[k], "literal") for k in range(len(x))]}


def log_geometric_sum(iterations: int, r: float) -> float:
    """ln sum_{k=1}^{K} r^{-k} = -K ln r + ln(1 - r^K) - ln(1 - r), without overflow."""
    return -iterations * math.log(r) + math.log1p(-(r ** iterations)) - math.log1p(-r)


def log_epsilons(info: dict[str, Any], dim: int, rounds: int, r: float, dpp2: dict[str, float],
                 diadsp: dict[str, float], ppdc: dict[str, float]) -> dict[str, float]:
    """ln epsilon of one node for each method after T rounds at decay r (all nodes share delta here).

    T rounds release DPP^2's y, z and DiaDSP's yt for k = 0..T-1 (K = T - 1), and PPDC's xt for k = 1..T (K = T).
    """
    delta, root = info["delta"], math.sqrt(dim)
    node = DPP2Privacy(delta=delta, dim=dim, alpha=dpp2["alpha"], smoothness=info["mbar"], u_e=dpp2["u_e"],
                       u_w=dpp2["u_w"])
    log_sum = log_geometric_sum(rounds - 1, r)
    return {"DPP2": float(np.logaddexp(math.log(node.coefficient) + log_sum, math.log(node.zero_term))),
            "DiaDSP": math.log(root * delta / diadsp["u_y"]) + float(np.logaddexp(0.0, math.log(2.0) + log_sum)),
            "PPDC": math.log(root * ppdc["eta"] * delta / ppdc["u_x"]) + log_geometric_sum(rounds, r)}


def figure_curves(ax: Any, curves: dict[str, list[float]], title: str) -> None:
    for label, values in curves.items():
        ax.semilogy(np.maximum(values, 1e-32), label=label)
    ax.set_xlabel("iteration k")
    ax.set_ylabel("(31): ||x - xbar||² + ||Σ∇f_i||²/N")
    ax.set_title(title)
    ax.legend(fontsize=7)


def figure_comparison(ax: Any, rows: list[dict[str, Any]]) -> None:
    rates = [row["r"] for row in rows]
    for key, style in (("DPP2", "o-"), ("DiaDSP", "s--"), ("PPDC", "^--"), ("DiaDSP same budget", "s-"),
                       ("PPDC same budget", "^-")):
        ax.semilogy(rates, [max(row["final"][key], 1e-32) for row in rows], style, label=key)
    ax.set_xlabel("noise decay rate r")
    ax.set_ylabel("||(1/N) Σ∇f_i(x_i^K)||²")
    ax.set_title("Fig. 3: after K iterations")
    ax.legend(fontsize=7)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast version (for the tests)")
    parser.add_argument("--out", default="docs/figures", help="folder of the figures and the JSON")
    parser.add_argument("--seed", type=int, default=0, help="data seed (the noise uses seed + 1)")
    parser.add_argument("--curve-rounds", type=int, default=None, help="iterations of Figs. 1-2 (default 1000)")
    parser.add_argument("--no-comparison", action="store_true", help="skip Fig. 3")
    args = parser.parse_args(argv)
    config = dict(QUICK if args.quick else FULL)
    if args.curve_rounds is not None:
        config["curve_rounds"] = args.curve_rounds
    if args.no_comparison:
        config["fig3_r"] = []
    began = time.perf_counter()
    problem, topology, info = build(config, args.seed)
    dim, noise_seed = config["dim"], args.seed + 1
    reference = problem.solve_centralized()
    out: dict[str, Any] = {"config": config, "graph": info, "reference": {"status": reference.status,
                                                                          "value": reference.value}}
    base = PaperDPP2(mixing_seed=args.seed + 2)
    fig1 = {"no noise": traced(problem, topology, base, config["curve_rounds"], noise_seed)["gap"]}
    for r in config["fig1_r"]:
        fig1[f"r = {r}"] = traced(problem, topology, base.clone(u_w=1.0, u_e=1.0, r=r), config["curve_rounds"],
                                  noise_seed)["gap"]
    fig2 = {"u = 0": fig1["no noise"]}
    for u in config["fig2_u"]:
        fig2[f"u = {u}"] = traced(problem, topology, base.clone(u_w=u, u_e=u, r=0.95), config["curve_rounds"],
                                  noise_seed)["gap"]
    rows = []
    for r in config["fig3_r"]:
        logs = log_epsilons(info, dim, config["compare_rounds"], r, PAPER_DPP2, PAPER_DIADSP, PAPER_PPDC)
        # Same budget: epsilon is proportional to 1/u, so u scales by exp(ln eps_baseline - ln eps_DPP2).
        same_diadsp = {**PAPER_DIADSP, "u_y": PAPER_DIADSP["u_y"] * math.exp(logs["DiaDSP"] - logs["DPP2"])}
        same_ppdc = {**PAPER_PPDC, "u_x": PAPER_PPDC["u_x"] * math.exp(logs["PPDC"] - logs["DPP2"])}
        methods = {"DPP2": base.clone(**PAPER_DPP2, r=r), "DiaDSP": PaperDiaDSP(**PAPER_DIADSP, r=r),
                   "PPDC": PaperPPDC(**PAPER_PPDC, r=r), "DiaDSP same budget": PaperDiaDSP(**same_diadsp, r=r),
                   "PPDC same budget": PaperPPDC(**same_ppdc, r=r)}
        final, literal = {}, {}
        for label, method in methods.items():
            trace = traced(problem, topology, method, config["compare_rounds"], noise_seed)
            final[label], literal[label] = trace["average"][-1], trace["literal"][-1]
        rows.append({"r": r, "log10_epsilon": {k: v / math.log(10) for k, v in logs.items()},
                     "same_budget_u": {"DiaDSP u_y": same_diadsp["u_y"], "PPDC u_x": same_ppdc["u_x"]},
                     "final": final, "final_literal": literal})
    out.update({"fig1": {k: v[::10] for k, v in fig1.items()}, "fig2": {k: v[::10] for k, v in fig2.items()},
                "fig1_final": {k: v[-1] for k, v in fig1.items()}, "fig2_final": {k: v[-1] for k, v in fig2.items()},
                "fig1_peak": {k: max(v) for k, v in fig1.items()}, "fig2_peak": {k: max(v) for k, v in fig2.items()},
                "fig3": rows, "seconds": time.perf_counter() - began})
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    for name, draw in (("dpp2_fig1", lambda ax: figure_curves(ax, fig1, "Fig. 1: u = 1, decay r")),
                       ("dpp2_fig2", lambda ax: figure_curves(ax, fig2, "Fig. 2: r = 0.95, scale u")),
                       ("dpp2_fig3", lambda ax: figure_comparison(ax, rows))):
        fig, ax = plt.subplots(figsize=(6, 4))
        draw(ax)
        fig.tight_layout()
        fig.savefig(folder / f"{name}.png", dpi=150)
        plt.close(fig)
    (folder / "dpp2_experiment.json").write_text(json.dumps(out, indent=1))
    print(json.dumps({k: out[k] for k in ("graph", "reference", "fig1_final", "fig2_final", "seconds")}, indent=1))
    for row in rows:
        print(row["r"], {k: f"{v:.3g}" for k, v in row["final"].items()},
              {k: round(v, 1) for k, v in row["log10_epsilon"].items()})
    return out


if __name__ == "__main__":
    main()
