"""The private rendezvous problem of Huang, Mitra and Vaidya (paper 001, Example 1).

N agents live at private addresses a_i in a box X in the plane (or in R^d) and agree on a meeting
point x, each paying the squared distance f_i(x) = ||x - a_i||^2. In the form (2) of the paper
(004), every agent keeps a local copy x_i in the public box W_i and all copies reach consensus.
"""

from __future__ import annotations

import functools
from typing import Any

import cvxpy as cp
import numpy as np

import privcvx as pc
from privcvx.algorithms.privacy_audit import NeighbouringPair
from privcvx.errors import DeclarationError


def _box(box: Any, d: int, argument: str) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` as two length-``d`` arrays with lo < hi, from scalars or arrays."""
    try:
        lo, hi = (np.broadcast_to(np.asarray(v, dtype=float), (d,)).copy() for v in box)
    except (TypeError, ValueError) as exc:
        raise DeclarationError(f"must be a pair (lo, hi) of numbers or length-{d} arrays: {exc}",
                               argument=argument) from None
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise DeclarationError(f"needs finite lo < hi, got lo={lo}, hi={hi}", argument=argument)
    return lo, hi


#: The neighbouring relation (Definition 3 of paper 001): one agent's address replaced by any point of the box.
RELATION = "replace_one: one agent's address moved anywhere in the box"


def rendezvous(points: Any, box: Any = (-1.0, 1.0), meeting: Any = None) -> pc.DistributedProblem:
    """Build the rendezvous problem: minimize sum_i ||x - a_i||^2 over the meeting box.

    Each agent ``"agent-<i>"`` gets the gradient oracle 2 (x - a_i) and the constant gradient
    sensitivity (Eqs. (18), (21) of Ryu & Kim) 2 ||hi - lo||_1 (L1) and 2 ||hi - lo||_2 (L2), since
    moving a_i within X changes the gradient by 2 (a_i - a_i'), and its smoothness 2, both in its
    ``agent.declared`` (`pc.Declared`, for `RELATION`).

    Parameters
    ----------
    points:
        The private addresses a_i, an N x d array; each row must lie in ``box``.
    box:
        ``(lo, hi)``: the region X where addresses may lie. It defines the neighbouring relation
        (one agent moves anywhere in X, Definition 3 of paper 001) and hence the sensitivity.
    meeting:
        ``(lo, hi)``: the public local set W_i of the meeting point; ``box`` by default.
    """
    try:
        points = np.asarray(points, dtype=float)
    except (TypeError, ValueError) as exc:
        raise DeclarationError(f"must be numeric: {exc}", argument="points") from None
    if points.ndim != 2 or points.shape[0] < 1 or points.shape[1] < 1:
        raise DeclarationError(f"must be an N x d array of addresses, got shape {points.shape}",
                               argument="points")
    d = points.shape[1]
    lo, hi = _box(box, d, "box")
    m_lo, m_hi = (lo, hi) if meeting is None else _box(meeting, d, "meeting")
    outside = np.flatnonzero(np.any((points < lo) | (points > hi) | ~np.isfinite(points), axis=1))
    if outside.size:
        raise DeclarationError(f"address of agent {int(outside[0])} {points[outside[0]]} is not in the box "
                               f"[{lo}, {hi}]", agent=f"agent-{int(outside[0])}", argument="points")
    sensitivity = pc.Sensitivity(l1=2 * float(np.sum(hi - lo)), l2=2 * float(np.linalg.norm(hi - lo)))

    agents = []
    for i, address in enumerate(points):
        x = cp.Variable(d, name=f"x_{i}")
        agents.append(pc.Agent(cp.sum_squares(x - address), [x <= m_hi, x >= m_lo], shared=x,
                               name=f"agent-{i}", gradient=_gradient(address),
                               declared=pc.Declared(sensitivity=sensitivity, smoothness=2.0, relation=RELATION)))
    return pc.DistributedProblem(agents)


def _gradient(address: np.ndarray) -> Any:
    """The oracle x -> 2 (x - a) of one agent's squared distance (picklable, for worker processes)."""
    return functools.partial(_squared_distance_gradient, address)


def _squared_distance_gradient(address: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 2.0 * (x - address)


def worst_case_pairs(points: Any, box: Any = (-1.0, 1.0), meeting: Any = None, *,
                     agent: int = 0) -> list[NeighbouringPair]:
    """The neighbours of `RELATION` that attain the declared sensitivity (for ``privcvx.sensitivity_audit``).

    Agent ``agent``'s address at the box's corner lo in D and at hi in D': its gradient 2 (x - a) changes by
    2 (hi - lo) at every x, exactly the declared l1 and l2 bounds.
    """
    points = np.array(points, dtype=float)
    lo, hi = _box(box, points.shape[1], "box")
    original, neighbour = points.copy(), points.copy()
    original[agent], neighbour[agent] = lo, hi
    return [NeighbouringPair(rendezvous(original, box, meeting), rendezvous(neighbour, box, meeting), agent)]
