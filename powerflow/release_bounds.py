"""The release bounds of the zonal problem for PR-ADMM in general form (`privcvx.algorithms.PRADMM`).

A zone releases only its shared entries z_S (tie-line flows, boundary voltages); its private entries z_P
(interior buses, generators) are minimized out in its local step. Neighbouring datasets differ in one own
load d_k by |delta| <= beta (`powerflow.zonal.RELATION`), and the zone's objective is Eq. (28),
f(z; d) = ||A z + d||^2. So

* f is curved along A: f(y) - f(z) - <grad f(z), y - z> = ||A (y - z)||^2 exactly (curvature 1);
* r(z) = f(z; d + delta e_k) - f(z; d) = 2 delta (a_k^T z + d_k) + delta^2 changes by
  |r(z) - r(z')| = 2 |delta| |a_k^T (z - z')| <= 2 beta ||A (z - z')|| (a_k^T (z - z') is an entry of A (z - z')).

That is the [`pc.CurvatureBound`][privcvx.declared.CurvatureBound] (change 2 beta, curvature 1), from which the
released shared part of the exact local step moves by at most beta / sqrt(2 mu_i), mu_i = 2 eta min_k |V_i(k)|
(docs/zcdp_admm.md, "General form"). It needs no bound on the private variables. For ``objective="cost+shedding"``,
f = C(pg) + gamma ||A z + d||^2 with a convex cost C that does not depend on d: r and the curvature along A both scale
by gamma, so change = 2 gamma beta and curvature = gamma (the released part moves by at most sqrt(gamma) beta /
sqrt(2 mu_i)).
"""

from __future__ import annotations

from privcvx.declared import CurvatureBound


def zone_release_bound(beta: float, penalty: float) -> CurvatureBound:
    """``CurvatureBound(2 gamma beta, gamma)``: the release bound every zone of `powerflow.zonal_problem` declares
    (``agent.declared.release_bound``) for the adjacency ``beta`` and gamma = ``penalty`` (1 for Eq. (28), the penalty
    of ``objective="cost+shedding"``, whose cost term does not depend on the loads and only adds curvature).
    ``objective="cost"`` holds the loads in its constraints, which no release bound covers: its zones declare none."""
    return CurvatureBound(change=2.0 * float(penalty) * float(beta), curvature=float(penalty))
