"""Consensus ADMM with exact local solves: the non-private yardstick of rounds (Boyd et al., Sec. 7.2).

The same server, messages, residual balancing and stopping rule as :class:`LinearizedADMM` (Algorithm 1
of Ryu & Kim), but each agent minimizes its own objective instead of its linearization:

    z_p = argmin_{z in W_p}  f_p(z) - <lambda_p + rho w_p, z_s> + (rho / 2) ||z_s||^2,

with z_s the agent's shared entries (the consensus ADMM step of Boyd et al., Eq. (7.6), in privcvx's sign
convention: the linearized step of Eq. (9) with f_p in place of its linearization and no proximal term).
The dual update and the server's averaging are Algorithm 1's lines 5 and 20. Each step is one CVXPY
problem, compiled once per agent with the linear term and rho as parameters (DPP), and solved by Clarabel.

**Not private.** The exact step has no calibrated noise and no sensitivity analysis here: it exists to
count the rounds a consensus ADMM needs on a model (as PowerModelsADA's ADMM does), against which the
linearized and the private methods are measured.
"""

from __future__ import annotations

from typing import Any

import cvxpy as cp
import numpy as np

from privcvx.acceleration import Anderson, OverRelaxation
from privcvx.algorithms.base import AgentContext
from privcvx.algorithms.linearized_admm import HISTORY_COLUMNS, ADMMAgent, LinearizedADMM
from privcvx.errors import SolverError
from privcvx.problem import Agent, AgentLayout, agent_vector
from privcvx.schedules import Schedule

#: Algorithm 1's columns without those of the linearized, private step (noise, epsilon, eta).
EXACT_COLUMNS = tuple(c for c in HISTORY_COLUMNS if c not in ("noise_magnitude", "epsilon", "eta"))


class ExactADMM(LinearizedADMM):
    """Consensus ADMM with exact local solves over W_p, on :meth:`Topology.star` (non-private).

    Parameters
    ----------
    rho:
        The penalty: a float, a schedule ``t -> rho^t``, or "adaptive" (residual balancing, as in
        :class:`LinearizedADMM`).
    tol:
        ``(abs, rel)``: stop when both ADMM residuals meet Boyd et al.'s thresholds (Sec. 3.3.1).
    relaxation:
        Over-relaxation alpha in [1, 2), as in :class:`LinearizedADMM` (:mod:`privcvx.acceleration`).
    anderson:
        ``None`` or a memory m: Anderson acceleration of the server's map, as in :class:`LinearizedADMM`.
        (``rho="adaptive-per-key"`` gives each shared key its own penalty.)
    """

    name = "exact_admm"
    columns = EXACT_COLUMNS
    diagnostic_columns = {"objective": sum, "max_violation": max}

    def __init__(self, rho: float | Schedule | str = "adaptive", tol: tuple[float, float] | None = None,
                 relaxation: float | OverRelaxation = 1.0, anderson: int | Anderson | None = None) -> None:
        super().__init__(local_updates=1, rho=rho, eta=1.0, privacy=None, tol=tol, relaxation=relaxation,
                         anderson=anderson)

    def agent_program(self, agent: Agent, context: AgentContext) -> ExactADMMAgent:
        return ExactADMMAgent(agent, context, self)


class ExactStep:
    """The compiled exact step of one agent: argmin f_p(z) + <q, z_s> + (rho/2) ||z_s||^2 over W_p.

    ``per_key``: rho is a vector over the shared entries, the penalty sum_i rho_i z_si^2 / 2."""

    def __init__(self, agent: Agent, layout: AgentLayout, per_key: bool = False) -> None:
        self.name = agent.name
        self.z = agent_vector(agent)
        shared = self.z[layout.shared_local]
        self.linear = cp.Parameter(layout.shared_local.size)
        self.rho = cp.Parameter(layout.shared_local.size if per_key else (), nonneg=True)
        penalty = cp.sum(cp.multiply(self.rho, cp.square(shared))) / 2 if per_key \
            else self.rho / 2 * cp.sum_squares(shared)
        objective = agent.objective + self.linear @ shared + penalty
        self.problem = cp.Problem(cp.Minimize(objective), agent.constraints)
        self.solves = 0
        self.inaccurate = 0

    def __call__(self, linear: np.ndarray, rho: float | np.ndarray) -> np.ndarray:
        """The minimizer for the linear term ``linear`` and penalty ``rho``."""
        self.linear.value = linear
        self.rho.value = rho
        try:
            # From scratch: a resumed run repeats it bitwise. accept_unknown: Clarabel's best point when it stalls
            # (InsufficientProgress), counted as inaccurate; without it case89pegase's run failed in round 14.
            self.problem.solve(solver=cp.CLARABEL, warm_start=False, accept_unknown=True)
        except cp.error.SolverError as exc:
            raise SolverError(f"the exact local step failed: {exc}", agent=self.name, argument="objective") from exc
        if self.problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or self.z.value is None:
            raise SolverError(f"the exact local step ended {self.problem.status}", agent=self.name,
                              argument="objective")
        self.solves += 1
        self.inaccurate += self.problem.status == cp.OPTIMAL_INACCURATE
        return np.asarray(self.z.value, dtype=float).reshape(-1)


class ExactADMMAgent(ADMMAgent):
    """Agent p of :class:`ExactADMM`: Algorithm 1's agent with the exact step in place of Eq. (9)."""

    def __init__(self, agent: Agent, context: AgentContext, settings: ExactADMM) -> None:
        super().__init__(agent, context, settings)
        self.exact = ExactStep(agent, self.layout, per_key=settings.per_key)

    def local_update(self, z: np.ndarray, w_p: np.ndarray, rho: float | np.ndarray, eta: float,
                     warm_start: bool = False) -> tuple[np.ndarray, float]:
        """The exact step (no linearization, no proximal term, no noise); ``z`` and ``eta`` are not used."""
        return self.exact(-(self.lam + rho * w_p), rho), 0.0

    def report(self) -> dict[str, Any]:
        """The step's kind, how many exact solves this process ran and how many were inaccurate
        (``result.info["projection"]``)."""
        return {"kind": "exact", "solves": self.exact.solves,
                **({"inaccurate": self.exact.inaccurate} if self.context.diagnostics else {})}
