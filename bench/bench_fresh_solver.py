"""The local step's Clarabel solver: built once per metric from q = 0 and updated (privcvx), against alternatives.

    .venv/bin/python bench/bench_fresh_solver.py [--repeats 200]

A run resumed in a new process must repeat every solve bitwise. privcvx builds the Clarabel solver of a local
set from a canonical q = 0 when the metric changes and passes each solve's q through ``update(q)``. This bench
checks that such a solver's answer depends on (P, A, b, q) alone: a solver that has served earlier solves and a
new one give bitwise-equal answers ("history-free"). It times, per solve, that update path against a fresh
solver per solve, and reports how far an answer is from that of a solver built from the solve's own q (the
cost scaling differs; both answers are within Clarabel's tolerances). Local sets: the general-form test
problem (7 variables, a private variable, QP), a set with a second-order cone (6 variables), a case118 zone
(388 variables, cones).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import clarabel
import numpy as np

from privcvx.localsolve import LocalProblem
from privcvx.localsolve.strategies import SOLVER_SETTINGS, clarabel_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from core_problems import general_form, soc_linear  # noqa: E402


def _solver(direct: Any, q: np.ndarray) -> clarabel.DefaultSolver:
    """A new Clarabel solver on the projection's cached matrices (its ClarabelStep), built from ``q``."""
    return clarabel.DefaultSolver(direct.P, q, direct.data.A, direct.data.b, direct.data.cones,
                                  clarabel_settings(SOLVER_SETTINGS["CLARABEL"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    repeats = parser.parse_args().repeats
    import powerflow

    warnings.simplefilter("ignore")
    cases = {"general form (n = 7)": general_form()[0], "SOC + linear (n = 6)": soc_linear()[0],
             "case118 zone (n = 388)": powerflow.zonal_problem("case118", zones=3)}
    print("| local set | update(q) (ms) | fresh solver (ms) | fresh / update | history-free | "
          "max diff to a solver built from q |")
    print("|---|---|---|---|---|---|")
    for name, problem in cases.items():
        agent, layout = problem.agents[0], problem.layouts[0]
        projection = LocalProblem(agent, layout)
        direct = projection.chain[0]
        weights = 2.0 + layout.shared_mask
        rng = np.random.default_rng(0)
        projection.project(rng.normal(size=layout.dim), weights)  # compiles and caches P, A, b
        matrix_p = direct.P
        served = _solver(direct, np.zeros(matrix_p.shape[0]))
        timings = {"update": 0.0, "fresh": 0.0}
        history_free, worst = True, 0.0
        for _ in range(repeats):
            scaled = weights / weights.max()
            q = direct.linear_term(2.0 * scaled * rng.normal(size=layout.dim))
            start = time.perf_counter()
            served.update(q=q)
            answer = np.asarray(served.solve().x)
            timings["update"] += time.perf_counter() - start
            start = time.perf_counter()
            own = np.asarray(_solver(direct, q).solve().x)
            timings["fresh"] += time.perf_counter() - start
            resumed = _solver(direct, np.zeros(matrix_p.shape[0]))
            resumed.update(q=q)
            history_free &= bool(np.array_equal(np.asarray(resumed.solve().x), answer))
            worst = max(worst, float(np.max(np.abs(answer[direct.data.columns] - own[direct.data.columns]))))
        update, fresh = (1e3 * timings[k] / repeats for k in ("update", "fresh"))
        print(f"| {name} | {update:.2f} | {fresh:.2f} | {fresh / update:.2f} | {history_free} | {worst:.1e} |")


if __name__ == "__main__":
    main()
