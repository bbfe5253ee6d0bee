"""Quickstart: three agents agree on a box-constrained least-squares fit, with and without privacy.

Each agent p privately holds (A_p, b_p) and minimizes ||A_p x - b_p||^2 over the public box
|x| <= 1; together they solve min sum_p f_p(x), the paper's model (2). The run is Algorithm 1
with ObjPert (Eq. (10)) and the Gaussian mechanism (Thm. 4.8(ii)), E = 5 local updates.

    .venv/bin/python examples/quickstart.py
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

import privcvx as pc


def least_squares_agents(seed: int = 0, agents: int = 3, n: int = 4) -> list[pc.Agent]:
    """Agents with private data (A_p, b_p), rows of A_p scaled to norm <= 1 and |b| <= 1."""
    rng = np.random.default_rng(seed)
    result = []
    for p in range(agents):
        A = rng.normal(size=(20, n))
        A /= np.maximum(1.0, np.linalg.norm(A, axis=1))[:, None]
        b = np.clip(A @ rng.uniform(-0.5, 0.5, n) + 0.1 * rng.normal(size=20), -1, 1)
        x = cp.Variable(n, name=f"x_{p}")
        # Changing one b_i by at most 2 changes the gradient 2 A^T (A x - b) by at most 4 ||a_i|| <= 4 (L2),
        # and 4 ||a_i||_1 <= 4 sqrt(n) (L1): Eqs. (18) and (21). The Hessian 2 A^T A has largest eigenvalue
        # at most 2 sum_i ||a_i||^2 <= 2 * 20 for every dataset of 20 rows of norm <= 1: a public L_p.
        result.append(pc.Agent(cp.sum_squares(A @ x - b), [cp.abs(x) <= 1], shared=x, name=f"agent-{p}",
                               sensitivity=pc.Sensitivity(l1=4 * np.sqrt(n), l2=4.0), smoothness=2.0 * 20))
    return result


def main() -> None:
    problem = pc.DistributedProblem(least_squares_agents())
    reference = problem.solve_centralized()
    plain = problem.solve(rounds=50, local_updates=5, rho=5.0)
    private = problem.solve(rounds=50, local_updates=5, rho=5.0,
                            privacy=pc.ObjectivePerturbation(pc.Gaussian(epsilon=1.0, delta=1e-5)), seed=0)
    print(f"centralized optimum        {reference.value:.4f}")
    print(f"Algorithm 1, no privacy    {plain.history['objective'].iloc[-1]:.4f}")
    last = private.history.iloc[-1]
    print(f"Algorithm 1, ObjG eps=1    {last['objective']:.4f}  "
          f"(max W_p violation {last['max_violation']:.1e}, cumulative epsilon {last['epsilon']:.2f})")


if __name__ == "__main__":
    main()
