"""The five Laplace methods at a total (epsilon, delta) = (2, 1e-5) over 25 rounds (docs/compare.md): the epsilon
each run's ledger reports on the seeded and on the secure path (and its relative shortfall 1 - epsilon / total: never
negative), and the basic composition of the calibrated noise.

    PYTHONPATH=. .venv/bin/python bench/bench_total_budget.py
"""

from __future__ import annotations

import warnings

from privcvx.algorithms import DPP2, PPDC, DiaDSP, RandomizedADMM, RandomizedDGD, consensus_problem

TOTAL, DELTA, ROUNDS = 2.0, 1e-5, 25


def main() -> None:
    warnings.simplefilter("ignore")
    problem = consensus_problem(agents=3, bound=None)
    templates = [RandomizedADMM(), RandomizedDGD(), DPP2(u_w=1.0, u_e=2.0, r=0.97), DiaDSP(alpha=0.1, u_x=1.0, u_y=1.0,
                 r=0.97), PPDC(u_x=1.0, u_v=1.0, r=0.97)]
    print("method          seeded    (shortfall)  secure    (shortfall)  basic/total")
    for template in templates:
        algorithm = template.clone(epsilon=TOTAL, delta=DELTA)
        seeded = problem.solve(algorithm, rounds=ROUNDS, seed=0)
        secure = problem.solve(algorithm, rounds=ROUNDS)
        spent = [run.history["epsilon"].iloc[-1] for run in (seeded, secure)]
        print(f"{type(template).__name__:14s} " + "  ".join(f"{e:.6f}  ({1 - e / TOTAL:.1e})" for e in spent)
              + f"  {seeded.privacy['epsilon_basic'].max() / TOTAL:.3f}")


if __name__ == "__main__":
    main()
