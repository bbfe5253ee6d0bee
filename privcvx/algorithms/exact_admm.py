"""Consensus ADMM with exact local solves: the non-private yardstick of rounds (Boyd et al., Sec. 7.2).

The same server, messages, residual balancing and stopping rule as `LinearizedADMM` (Algorithm 1
of Ryu & Kim), but each agent minimizes its own objective instead of its linearization:

    z_p = argmin_{z in W_p}  f_p(z) - <lambda_p + rho w_p, z_s> + (rho / 2) ||z_s||^2,

with z_s the agent's shared entries (the consensus ADMM step of Boyd et al., Eq. (7.6), in privcvx's sign
convention: the linearized step of Eq. (9) with f_p in place of its linearization and no proximal term).
The dual update and the server's averaging are Algorithm 1's lines 5 and 20. Each step is one local problem
of the local-solve layer, compiled once per agent, the linear term and rho its changing data
([`LocalProblem.step`][privcvx.localsolve.LocalProblem.step]: a cached factorization for a quadratic f_p, OSQP or
Clarabel otherwise); this is ``LinearizedADMM(local_updates="exact")`` with its own name
and history columns.

**Not private.** The exact step has no calibrated noise and no sensitivity analysis here: it exists to
count the rounds a consensus ADMM needs on a model (as PowerModelsADA's ADMM does), against which the
linearized and the private methods are measured.
"""

from __future__ import annotations

from privcvx.acceleration import Anderson, OverRelaxation
from privcvx.algorithms.linearized_admm import LinearizedADMM
from privcvx.schedules import Schedule

#: Algorithm 1's columns without those of the linearized, private step (noise, epsilon, eta).
EXACT_COLUMNS = tuple(c for c in LinearizedADMM.columns if c not in ("noise_magnitude", "epsilon", "eta"))


class ExactADMM(LinearizedADMM):
    """Consensus ADMM with exact local solves over W_p, on `Topology.star` (non-private).

    Parameters
    ----------
    rho:
        The penalty: a float, a schedule ``t -> rho^t``, or "adaptive": Boyd et al.'s absolute residual
        balancing, `ResidualBalancing` (tau = 2, mu = 10, frozen after 100 rounds),
        so that the yardstick stays plain consensus ADMM.
    tol:
        ``(abs, rel)``: stop when both ADMM residuals meet Boyd et al.'s thresholds (Sec. 3.3.1).
    relaxation:
        Over-relaxation alpha in [1, 2), as in `LinearizedADMM` ([`privcvx.acceleration`][privcvx.acceleration]).
    anderson:
        ``None`` or a memory m: Anderson acceleration of the server's map, as in `LinearizedADMM`.
        (``rho="adaptive-per-key"`` gives each shared key its own penalty.)
    """

    name = "exact_admm"
    columns = EXACT_COLUMNS
    diagnostic_columns = {"objective": sum, "max_violation": max}

    def __init__(self, rho: float | Schedule | str = "adaptive", tol: tuple[float, float] | None = None,
                 relaxation: float | OverRelaxation = 1.0, anderson: int | Anderson | None = None) -> None:
        super().__init__(local_updates="exact", rho=rho, eta=1.0, privacy=None, tol=tol, relaxation=relaxation,
                         anderson=anderson)
