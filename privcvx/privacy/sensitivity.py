"""The sensitivity of a release, from the sensitivity of the vector before the step between the data and it.

Several privcvx methods release (with noise) a point computed by one step from a data-dependent vector d:

    z = Proj^M_X[ c - s M^{-1} d ],        M = diag(m),

where c is public (the same for neighbouring datasets), s > 0 a public scale (a step size), m > 0 a public
metric and Proj^M_X the projection onto the agent's public set X in the M-norm ||v||_M = sqrt(sum m_i v_i^2)
(the Euclidean projection when m = 1). Given bounds on ||d(D) - d(D')|| in l1 and/or l2 (the *pre-image*
sensitivity, e.g. a declared gradient sensitivity), `projected_sensitivity` bounds ||z(D) - z(D')||:

* **l2 survives every convex set.** Proj^M_X is non-expansive in the M-norm, so
  ||z - z'||_2 <= ||z - z'||_M / sqrt(min m) <= ||s M^{-1} (d - d')||_M / sqrt(min m) <= s Delta_2 / min(m).
* **l1 survives only a coordinate-separable projection**: X = R^n ("free") or a box ("box"), where the
  projection is a clip per coordinate and |z_k - z'_k| <= s |d_k - d'_k| / m_k, so Delta_1^z = s Delta_1 / min(m).
* **Any other convex set ("conic")**: a Euclidean projection is not non-expansive in l1 (a hyperplane stretches
  an l1 step by up to 2(n-1)/n, a line by up to (1 + sqrt n)/2), so Delta_1^z = sqrt(n) Delta_2^z, from
  ||v||_1 <= sqrt(n) ||v||_2. It needs the pre-image's l2 **declared**: the l1 of the pre-image does bound its l2
  (||v||_2 <= ||v||_1), but sqrt(n) Delta_1 is a sqrt(n)-fold weaker guarantee that privcvx does not substitute
  silently; an l1 release without a declared l2 is refused ([`PrivacyError`][privcvx.errors.PrivacyError] naming the
  agent, the set's kind and what to declare). Declaring ``l2`` equal to the l1 bound accepts that cost.
* **A projection computed by a solver** (a "conic" set) is within ``solver_error`` e of the exact one in l2 (a
  certified bound the local-solve layer enforces on every answer, `privcvx.localsolve.certificate`), so two
  neighbouring releases may differ by 2 e more in l2, and by 2 sqrt(n) e more in l1 (||v||_1 <= sqrt(n) ||v||_2);
  closed-form projections, free and box, pass 0. An infinite e (a step the layer cannot certify) is refused.

``docs/privacy.md`` ("Which rule applies, per method") lists, per method, what it releases, the step and the rule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcvx.errors import PrivacyError, check_scalar
from privcvx.privacy.mechanisms import Sensitivity

#: The kinds of an agent's public set W_p, as `privcvx.localsolve.set_kind` detects them: R^n, constant
#: bounds on whole variables (projected by np.clip), any other convex set (projected by a solver).
SET_KINDS = {"free": "R^n", "box": "a box (constant bounds on whole variables)",
             "conic": "a convex set that is not a box"}
#: The kinds whose projection is coordinate-separable: an l1 sensitivity survives it.
SEPARABLE_KINDS = ("free", "box")


def declared_constant(agent: Any, requirement: str) -> Sensitivity:
    """The agent's declared constant ``pc.Sensitivity``; else a `PrivacyError` that names the agent and asks for
    ``requirement`` (what the method's calibration needs declared)."""
    declared = agent.sensitivity
    if not isinstance(declared, Sensitivity):
        raise PrivacyError(f"privacy is on: declare {requirement}", agent=agent.name, argument="sensitivity")
    return declared


def holds_no_private_data(agent: object) -> bool:
    """Whether an agent declared a zero sensitivity in every norm it gave (``pc.Sensitivity(l1=0, l2=0)``): it
    holds no private data, so every method releases its values without noise and charges it nothing."""
    declared = getattr(agent, "sensitivity", None)
    return isinstance(declared, Sensitivity) and all(value in (None, 0.0) for value in (declared.l1, declared.l2))


def certified_solver_error(error: float, agent: str | None) -> float:
    """A local step's l2 error bound (`LocalProblem.error_bound`), refused when infinite (uncertifiable answers)."""
    if not math.isfinite(error):
        raise PrivacyError("its local step is computed by a solver whose answers cannot be certified (no conic data, "
                           "a cone other than zero/nonneg/SOC, an auxiliary variable on which the set is unbounded, "
                           "or a quadratic term in the objective not proven PSD as built: indefinite, or singular "
                           "on a private variable; docs/privacy.md, 'Solver error'): no sensitivity bound survives it",
                           agent=agent, argument="constraints")
    return error


def projected_sensitivity(pre_image: Sensitivity, kind: str, dim: int, *, scale: float = 1.0,
                          metric: np.ndarray | None = None, solver_error: float = 0.0, norm: str | None = None,
                          agent: str | None = None) -> Sensitivity:
    """The sensitivity of z = Proj^M_X[c - scale M^{-1} d] given the sensitivity ``pre_image`` of d (module doc).

    ``kind``: the set's kind (`SET_KINDS`); ``dim``: n; ``metric``: m (``None``: the Euclidean projection,
    m = 1); ``solver_error``: the l2 error bound of a computed projection (0 for a closed form); ``norm``:
    the norm the release's mechanism is calibrated to ("l1" for Laplace, "l2" for Gaussian, ``None`` for both
    where they can be bounded). Returns the bounds that survive (``l1`` is ``None`` when only l2 does and
    ``norm`` is not "l1"), with the pre-image's ``nominal`` label. Raises `PrivacyError` when ``norm``
    cannot be bounded. A zero pre-image (an agent without private data) stays zero: the solver then solves the
    same problem on neighbouring datasets, so its error adds nothing.
    """
    check_scalar(kind, argument="kind", choices=sorted(SET_KINDS), agent=agent, error=PrivacyError)
    check_scalar(norm, argument="norm", choices=(None, "l1", "l2"), agent=agent, error=PrivacyError)
    smallest = 1.0 if metric is None else float(np.min(metric))
    l2 = pre_image.get("l2") * scale / smallest
    if kind in SEPARABLE_KINDS and pre_image.l1 is not None:
        l1 = pre_image.l1 * scale / smallest
    elif kind in SEPARABLE_KINDS or pre_image.l2 is not None:
        l1 = math.sqrt(dim) * l2
    elif norm == "l1":
        raise PrivacyError(f"its set W_p is {SET_KINDS[kind]} ({kind!r}): an l1 sensitivity does not survive a "
                           f"Euclidean projection onto it, only l2 does, and the release's l1 bound is then "
                           f"sqrt(n) * l2 (n = {dim}); declare pc.Sensitivity(l1=..., l2=...) with the l2 bound of "
                           f"the gradient's change (l2 = l1 is always valid, at sqrt(n) times the noise), or "
                           f"declare the set as bounds on whole variables (a box)", agent=agent,
                           argument="sensitivity")
    else:
        l1 = None
    if solver_error and l2 > 0.0:  # a zero pre-image: no private data, the solver sees the same input on D and D'
        allowance = solver_allowance(dim, solver_error, agent)
        l2 += allowance.l2
        l1 = None if l1 is None else l1 + allowance.l1
    return Sensitivity(l1=l1, l2=l2, nominal=pre_image.nominal)


def solver_allowance(dim: int, error: float, agent: str | None = None) -> Sensitivity:
    """What two computed projections, each within ``error`` e of the exact one in l2, add to the distance of two
    neighbouring releases in R^dim: 2e in l2 and 2 sqrt(dim) e in l1 (||v||_1 <= sqrt(n) ||v||_2)."""
    error = certified_solver_error(error, agent)
    return Sensitivity(l1=2.0 * math.sqrt(dim) * error, l2=2.0 * error)
