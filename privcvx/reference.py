"""The record of a centralized reference solve: the yardstick of every run.

`DistributedProblem.solve_centralized` returns it (the CVXPY optimum of the whole problem), and so does
`privcvx.nonconvex.local_reference` (a multi-start local optimum, for problems with a nonconvex agent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class CentralizedSolution:
    """The centralized CVXPY optimum of the whole problem: the yardstick of every run."""

    value: float
    w: np.ndarray
    z: list[np.ndarray]
    status: str
    solve_time: float = field(default=float("nan"))
