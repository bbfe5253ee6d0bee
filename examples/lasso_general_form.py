"""General-form lasso: agents fit overlapping slices of one coefficient vector.

A sparse signal x in R^n is observed by P agents; agent p sees only the coordinates of its slice S_p (the
slices overlap, so neighbouring agents share coordinates) and privately holds its measurements
y_p = A_p x[S_p] + noise. Each agent declares

* f_p(u) = ||A_p u - y_p||^2 / m_p, its private least-squares fit of the slice u = x[S_p];
* W_p = {u : ||u||_1 <= tau_p}, a public l1 ball: the constrained (Tibshirani's original) form of the lasso;
* one shared key ``("x", j)`` per coordinate j that its slice has in common with a neighbour's: general-form
  consensus; the other coordinates of the slice are the agent's alone (private variables, no key; a key that
  one agent holds would couple nothing, and privcvx warns about it).

privcvx runs Algorithm 1 with its defaults and the result is compared with the same lasso solved by plain
CVXPY; after ``solve()`` each agent's variable holds its slice, and ``result.w_of(("x", j))`` is the agreed value
of a shared coordinate j.

    .venv/bin/python examples/lasso_general_form.py           # n = 60, 6 agents
    .venv/bin/python examples/lasso_general_form.py --quick   # n = 20, 3 agents (the test suite)
"""

from __future__ import annotations

import argparse

import cvxpy as cp
import numpy as np

import privcvx as pc


def slices(n: int, agents: int, overlap: int) -> list[np.ndarray]:
    """``agents`` contiguous slices covering 0..n-1, each extended by ``overlap`` coordinates into the next."""
    edges = np.linspace(0, n, agents + 1).astype(int)
    return [np.arange(edges[p], min(edges[p + 1] + overlap, n)) for p in range(agents)]


def data(n: int, agents: int, overlap: int, seed: int = 0) -> tuple[np.ndarray, list[dict]]:
    """A sparse signal and each agent's private measurements of its slice."""
    rng = np.random.default_rng(seed)
    signal = np.where(rng.uniform(size=n) < 0.2, rng.normal(size=n), 0.0)
    parts = []
    for index in slices(n, agents, overlap):
        m = 3 * len(index)
        A = rng.normal(size=(m, len(index))) / np.sqrt(len(index))
        parts.append({"index": index, "A": A, "y": A @ signal[index] + 0.05 * rng.normal(size=m),
                      "tau": 0.8 * np.abs(signal[index]).sum()})
    return signal, parts


def lasso_problem(parts: list[dict]) -> pc.DistributedProblem:
    """The agents of the general-form lasso."""
    cover = np.bincount(np.concatenate([part["index"] for part in parts]))
    agents = []
    for p, part in enumerate(parts):
        u = cp.Variable(len(part["index"]), name=f"slice_{p}")
        fit = cp.sum_squares(part["A"] @ u - part["y"]) / len(part["y"])
        agents.append(pc.Agent(fit, [cp.norm1(u) <= part["tau"]], name=f"agent-{p}",
                               shared={("x", int(j)): u[k] for k, j in enumerate(part["index"]) if cover[j] > 1}))
    return pc.DistributedProblem(agents)


def assemble(problem: pc.DistributedProblem, result: pc.Result, parts: list[dict], n: int) -> np.ndarray:
    """x from the run: the agreed w on shared coordinates, each agent's own value on the others."""
    x = np.zeros(n)
    for p, part in enumerate(parts):
        x[part["index"]] = result.value_of(f"agent-{p}", f"slice_{p}")
    for key in problem.keys:
        x[key[1]] = result.w_of(key)
    return x


def plain_cvxpy(parts: list[dict], n: int) -> np.ndarray:
    """The same lasso as one CVXPY problem over x (the yardstick)."""
    x = cp.Variable(n)
    fit = sum(cp.sum_squares(part["A"] @ x[part["index"]] - part["y"]) / len(part["y"]) for part in parts)
    cp.Problem(cp.Minimize(fit), [cp.norm1(x[part["index"]]) <= part["tau"] for part in parts]).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    return np.asarray(x.value)


def main(argv: list[str] | None = None) -> float:
    """Run the example; print and return the largest coordinate difference from plain CVXPY."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 20 and 3 agents")
    parser.add_argument("--rounds", type=int, default=300, help="rounds of Algorithm 1")
    args = parser.parse_args(argv)
    n, agents = (20, 3) if args.quick else (60, 6)
    signal, parts = data(n, agents, overlap=3)
    problem = lasso_problem(parts)
    result = problem.solve(rounds=args.rounds)
    distributed = assemble(problem, result, parts, n)
    reference = plain_cvxpy(parts, n)
    gap = float(np.max(np.abs(distributed - reference)))
    print(f"n = {n}, {agents} agents, {len(problem.keys)} shared keys, {len(result.history)} rounds (defaults)")
    print(f"largest difference from plain CVXPY: {gap:.2e}")
    print(f"nonzeros: lasso {int(np.sum(np.abs(reference) > 1e-6))}, true signal {int(np.sum(signal != 0))}")
    print(f"agent-0's variable now holds its slice: {np.round(problem.agents[0].variables[0].value[:4], 4)} ...")
    return gap


if __name__ == "__main__":
    main()
