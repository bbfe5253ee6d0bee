"""The reference solution of a problem with a nonconvex agent: a multi-start local solve, labelled as such.

CVXPY cannot solve a nonconvex problem, and no solver certifies a global optimum of a general
smooth nonconvex one. The yardstick of a run on such a problem is therefore the best of several
local solves of min_w sum_p f_p(w) (full consensus, unconstrained) with scipy's L-BFGS-B from
seeded starting points, using each agent's value and gradient oracle. Its status is
``"local_optimum"``: gaps measured against it are gaps to a stationary point, not to the optimum.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np
from scipy.optimize import minimize

from privcvx.errors import CentralizedSolveError, UnsupportedError, check_int, require_positive
from privcvx.gradients import GradientEvaluator
from privcvx.reference import CentralizedSolution

if TYPE_CHECKING:
    from privcvx.problem import DistributedProblem

#: The status of a multi-start local solve.
LOCAL_OPTIMUM = "local_optimum"


def local_reference(problem: DistributedProblem, *, starts: int = 8, scale: float = 1.0, seed: int = 0,
                    tol: float = 1e-12) -> CentralizedSolution:
    """The best of ``starts`` L-BFGS-B solves of min_w sum_p f_p(w) (a local optimum, not a certified global one).

    The first start is w = 0, the others are drawn N(0, scale^2 I) from ``seed`` (public starting points,
    not noise). Needs full consensus and no constraints: every agent shares its whole vector.
    """
    starts = check_int(starts, argument="starts")
    scale = require_positive(scale, argument="scale")
    for agent, layout in zip(problem.agents, problem.layouts, strict=True):
        if agent.constraints or layout.shared_local.size != layout.dim or len(problem.keys) != 1:
            raise UnsupportedError("the nonconvex reference is an unconstrained full-consensus solve",
                                   algorithm="local_reference", feature="constraints or general-form keys",
                                   agent=agent.name, argument="agents")
    evaluators = [GradientEvaluator(agent, layout) for agent, layout in zip(problem.agents, problem.layouts,
                                                                             strict=True)]

    def value_and_gradient(w: np.ndarray) -> tuple[float, np.ndarray]:
        return (sum(e.value(w) for e in evaluators),
                np.sum([e.gradient(w) for e in evaluators], axis=0))

    rng = np.random.default_rng(seed)
    points = [np.zeros(problem.dim), *(scale * rng.standard_normal((starts - 1, problem.dim)))]
    began = time.perf_counter()
    best = None
    for point in points:
        solution = minimize(value_and_gradient, point, jac=True, method="L-BFGS-B",
                            options={"ftol": tol, "gtol": tol, "maxiter": 10_000})
        if np.isfinite(solution.fun) and (best is None or solution.fun < best.fun):
            best = solution
    if best is None:
        raise CentralizedSolveError("every local solve of the nonconvex reference diverged", argument="agents")
    w = np.asarray(best.x, dtype=float)
    z = [w[layout.shared_global].copy() for layout in problem.layouts]
    problem.write_back(z)
    return CentralizedSolution(value=float(best.fun), w=w, z=z, status=LOCAL_OPTIMUM,
                               solve_time=time.perf_counter() - began)
