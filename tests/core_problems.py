"""Small test problems for the core, shared by tests/ and bench/.

Each builder returns (problem, eta, rho): step parameters chosen from the local
smoothness constants L_p (eta = 1/max L_p), which linearized ADMM needs.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np

import privcvx as pc


def _least_squares(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, float]:
    """A random least-squares block (A, b) and the smoothness 2 lambda_max(A^T A)/rows of ||Ax-b||^2/rows."""
    a = rng.normal(size=(rows, cols))
    b = 3.0 * rng.normal(size=rows)
    return a, b, 2.0 * float(np.linalg.eigvalsh(a.T @ a).max()) / rows


def box_l1_least_squares(agents: int = 4, n: int = 8, seed: int = 0,
                         sensitivity: pc.Sensitivity | None = None) -> tuple[pc.DistributedProblem, float, float]:
    """Full consensus: constrained least squares over a box and an l1-ball (both active at the optimum)."""
    rng = np.random.default_rng(seed)
    declared, smooth = [], []
    for _ in range(agents):
        a, b, lipschitz = _least_squares(rng, 15, n)
        x = cp.Variable(n)
        declared.append(pc.Agent(cp.sum_squares(a @ x - b) / 15, [x <= 0.5, x >= -0.5, cp.norm1(x) <= 2.0],
                                 shared=x, sensitivity=sensitivity))
        smooth.append(lipschitz)
    return pc.DistributedProblem(declared), 1.0 / max(smooth), 1.0


def soc_linear(agents: int = 3, n: int = 6, seed: int = 1) -> tuple[pc.DistributedProblem, float, float]:
    """Full consensus over local sets with a second-order cone and linear constraints."""
    rng = np.random.default_rng(seed)
    declared, smooth = [], []
    for p in range(agents):
        a, b, lipschitz = _least_squares(rng, 12, n)
        x = cp.Variable(n)
        constraints = [cp.norm(x[: n // 2]) <= 1.0, cp.sum(x) == 1.0, x >= -1.0 - 0.1 * p]
        declared.append(pc.Agent(cp.sum_squares(a @ x - b) / 12, constraints, shared=x))
        smooth.append(lipschitz)
    return pc.DistributedProblem(declared), 1.0 / max(smooth), 1.0


def general_form(seed: int = 2) -> tuple[pc.DistributedProblem, float, float]:
    """General-form consensus: agents share different, overlapping key subsets and hold private variables.

    Keys: "a" (3 entries), "b" (2), "c" (2). Agent 0 shares a and b, agent 1 shares b and c,
    agent 2 shares a and c (through indexed variables); each also has a private variable y.
    """
    rng = np.random.default_rng(seed)
    layout = [("a", "b"), ("b", "c"), ("a", "c")]
    sizes = {"a": 3, "b": 2, "c": 2}
    declared, smooth = [], []
    for keys in layout:
        width = sum(sizes[k] for k in keys)
        v = cp.Variable(width)
        y = cp.Variable(2)
        a, b, lipschitz = _least_squares(rng, 14, width + 2)
        shared, start = {}, 0
        for key in keys:
            shared[key] = v[start:start + sizes[key]]
            start += sizes[key]
        objective = cp.sum_squares(a @ cp.hstack([v, y]) - b) / 14
        constraints = [v <= 0.8, v >= -0.8, cp.sum(y) >= 0.5, cp.abs(y) <= 1.0]
        declared.append(pc.Agent(objective, constraints, shared=shared))
        smooth.append(lipschitz)
    return pc.DistributedProblem(declared), 1.0 / max(smooth), 1.0


def box_least_squares(agents: int = 6, n: int = 4, seed: int = 3, bound: float = 0.5) -> pc.DistributedProblem:
    """Full consensus, heterogeneous least squares over the box [-bound, bound]^n (a closed-form projection).

    Each agent declares its smoothness 2 lambda_max(A^T A)/15; ``problem.info`` holds the data ("blocks":
    the (A, b) pairs) for the constants of paper 001 (C1, C2, C3).
    """
    rng = np.random.default_rng(seed)
    declared, blocks = [], []
    for _ in range(agents):
        a, b, lipschitz = _least_squares(rng, 15, n)
        x = cp.Variable(n)
        declared.append(pc.Agent(cp.sum_squares(a @ x - b) / 15, [x <= bound, x >= -bound], shared=x,
                                 smoothness=lipschitz, sensitivity=pc.Sensitivity(l1=1.0, l2=1.0)))
        blocks.append((a, b))
    return pc.DistributedProblem(declared, info={"blocks": blocks, "bound": bound})


def ill_conditioned(agents: int = 5, n: int = 6, seed: int = 0) -> pc.DistributedProblem:
    """Full consensus, f_i = ||A_i x - b_i||^2 with condition number 1e4 per agent, over |x_j| <= 3 (rarely active)."""
    rng = np.random.default_rng(seed)
    declared = []
    for _ in range(agents):
        a = np.diag(np.logspace(0, -2, n)) @ np.linalg.qr(rng.normal(size=(n, n)))[0]
        x = cp.Variable(n)
        declared.append(pc.Agent(cp.sum_squares(a @ x - rng.normal(size=n)), [cp.abs(x) <= 3], shared=x,
                                 smoothness=2.0))
    return pc.DistributedProblem(declared)


def rendezvous_site(index: int, path: str) -> pc.Agent:
    """An agent factory (`pc.AgentSpec`): agent ``index`` of the rendezvous problem whose addresses are
    in the ``.npy`` file at ``path``, read where the factory is called (picklable: a module-level function)."""
    from problems.rendezvous import rendezvous

    return rendezvous(np.load(path)).agents[index]


def rendezvous_sites(path: str, agents: int, shards: str) -> pc.DistributedProblem:
    """A factory-built rendezvous problem: every agent's address read by its host from ``path``, each agent's
    checkpoint shard at ``<shards>/agent-<i>.shard``."""
    import functools

    from problems.rendezvous import RELATION

    declared = pc.Declared(sensitivity=pc.Sensitivity(l1=8.0, l2=float(np.sqrt(32.0))), smoothness=2.0,
                           relation=RELATION)  # the record every built agent declares
    return pc.DistributedProblem.from_factories([
        pc.AgentSpec(f"agent-{i}", functools.partial(rendezvous_site, i, path), {"w": (2,)}, declared=declared,
                     shard=f"{shards}/agent-{i}.shard") for i in range(agents)])
