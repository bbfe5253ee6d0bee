"""The local step's Clarabel solve: a fresh solver per solve (privcvx) against reusing one with update(q).

    .venv/bin/python bench/bench_fresh_solver.py [--repeats 200]

privcvx sets up a new Clarabel solver for every projection on the cached P, A, b, so that a run resumed in a
new process repeats every solve bitwise (update(q) keeps the cost scaling of an earlier q). This measures
what that costs, per solve, on three local sets: the general-form test problem (7 variables, a private
variable, QP), a set with a second-order cone (6 variables) and a case118 zone (388 variables, cones). It also
reports the largest difference between the two answers on the agent's variables.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import clarabel
import numpy as np
from cvxpy.cvxcore.python import canonInterface

from privcvx.localstep import Projection

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from core_problems import general_form, soc_linear  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    repeats = parser.parse_args().repeats
    import powerflow

    warnings.simplefilter("ignore")
    cases = {"general form (n = 7)": general_form()[0], "SOC + linear (n = 6)": soc_linear()[0],
             "case118 zone (n = 388)": powerflow.zonal_problem("case118", zones=3)}
    print("| local set | update(q) (ms) | fresh solver (ms) | fresh / update | max abs difference |")
    print("|---|---|---|---|---|")
    for name, problem in cases.items():
        agent, layout = problem.agents[0], problem.layouts[0]
        projection = Projection(agent, layout)
        direct = projection.direct
        weights = 2.0 + layout.shared_mask
        rng = np.random.default_rng(0)
        projection(rng.normal(size=layout.dim), weights)  # compiles and caches P, A, b
        matrix_p, matrix_a, b = direct.data
        reused = clarabel.DefaultSolver(matrix_p, np.zeros(matrix_p.shape[0]), matrix_a, b, direct.cones,
                                        direct.settings)
        timings = {"update": 0.0, "fresh": 0.0}
        worst = 0.0
        for _ in range(repeats):
            projection.c.value = (weights / weights.max()) * rng.normal(size=layout.dim)
            q, _ = canonInterface.get_matrix_from_tensor(direct.program.q, direct._parameter_vector(),
                                                         direct.program.x.size, with_offset=True)
            q = np.asarray(q.toarray()).reshape(-1)
            start = time.perf_counter()
            reused.update(q=q)
            first = np.asarray(reused.solve().x)[direct.index]  # the agent's variables (auxiliaries are not unique)
            timings["update"] += time.perf_counter() - start
            start = time.perf_counter()
            second = np.asarray(clarabel.DefaultSolver(matrix_p, q, matrix_a, b, direct.cones, direct.settings)
                                .solve().x)[direct.index]
            timings["fresh"] += time.perf_counter() - start
            worst = max(worst, float(np.max(np.abs(first - second))))
        update, fresh = (1e3 * timings[k] / repeats for k in ("update", "fresh"))
        print(f"| {name} | {update:.2f} | {fresh:.2f} | {fresh / update:.2f} | {worst:.1e} |")


if __name__ == "__main__":
    main()
