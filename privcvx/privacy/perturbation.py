"""How noise enters a local update: objective perturbation Eq. (10) and output perturbation Eq. (12).

Both perturbations make, per agent and per local update, one noisy release through the agent's
release path (`privcvx.algorithms.base.AgentContext.release`): on the float path (integer seeds) the value plus
``scale * u`` with ``u`` standard Laplace or Gaussian noise; on the secure path the value on a public
grid plus OpenDP's integer noise ([`privcvx.privacy.grid`][privcvx.privacy.grid]). What is released is the gradient
(ObjPert) or the projected point (OutPert).

* ObjPert (Eq. (10)): ``xi = scale_g * u`` with ``scale_g`` calibrated to the agent's
  gradient sensitivity (Eqs. (18), (21)). Eq. (10) adds xi through the dual term, which
  is the same as taking the projected step with the gradient perturbed by xi. privcvx
  uses the gradient ``g - xi``; xi is symmetric, so this is Eq. (10) with the same
  distribution, and it makes Remark 3.1 hold draw by draw. The release is a projection
  onto W_p, so it is always feasible, and it is a post-processing of the noisy gradient
  (on the secure path, of the gradient released on the grid).
* OutPert (Eq. (12)): the noise ``scale_out * u`` is added after the projection. With
  ``sensitivity="derived"`` the output sensitivity follows from the gradient one:
  the projection in the metric M = diag(m) is nonexpansive in the M-norm, so
  ``||z(D) - z(D')||_2 <= ||g(D) - g(D')||_2 / min(m)``, i.e. Delta_2 * eta / (1 + eta rho)
  for a fully shared agent. In L1 the same bound holds for separable sets (R^n, boxes);
  for other sets privcvx uses ``sqrt(n) * Delta_2 / min(m)`` (a declared l2 is needed): the rules of
  [`privcvx.privacy.sensitivity`][privcvx.privacy.sensitivity]. See ``docs/privacy.md``.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcvx.errors import NominalPrivacyWarning, PrivacyError, check_scalar
from privcvx.privacy.mechanisms import Budget, Mechanism, Sensitivity
from privcvx.privacy.sensitivity import projected_sensitivity


def _check_mechanism(mechanism: Any) -> Mechanism | Budget:
    if not isinstance(mechanism, (Mechanism, Budget)):
        raise PrivacyError(f"must be pc.Laplace, pc.Gaussian or pc.Budget, got {mechanism!r}",
                           argument="mechanism")
    return mechanism


def _as_sensitivity(value: Any, *, agent: str | None, argument: str) -> Sensitivity:
    if not isinstance(value, Sensitivity):
        raise PrivacyError(f"must be a pc.Sensitivity, got {value!r}", agent=agent, argument=argument)
    return value


@dataclass(frozen=True)
class Perturbation(ABC):
    """Common part of ObjPert and OutPert: the mechanism, per local update."""

    mechanism: Mechanism | Budget

    kind = "none"

    def __post_init__(self) -> None:
        _check_mechanism(self.mechanism)

    def resolve(self, steps: int) -> Perturbation:
        """Replace a Budget by the per-update mechanism that spends it over ``steps`` updates."""
        if isinstance(self.mechanism, Budget):
            return type(self)(**{**self.__dict__, "mechanism": self.mechanism.per_update(steps)})
        return self

    def needs_gradient_sensitivity(self) -> bool:
        """Whether the calibration reads the agents' gradient sensitivity (ObjPert: always)."""
        return True

    def needs_certified_step(self) -> bool:
        """Whether the sensitivity covers the computed step of Eq. (9) itself, so its solver error must be certified
        (`privcvx.localsolve.certificate`). ObjPert: no, the step is post-processing of the noisy gradient."""
        return False

    @abstractmethod
    def release_sensitivity(self, gradient_sensitivity: Sensitivity | None, weights: np.ndarray,
                            separable: bool, solver_error: float = 0.0, *, agent: str | None = None) -> Sensitivity:
        """The sensitivity of what is perturbed: the gradient (ObjPert) or the projected point (OutPert).

        ``solver_error`` bounds, in l2, how far a computed projection may be from the exact one;
        only OutPert, which perturbs that point, needs it. ``agent`` names the agent in a refusal."""

    def gradient_sensitivity(self, agent: Any, values: list[np.ndarray]) -> Sensitivity:
        """The agent's declared gradient sensitivity (Eqs. (18), (21)), evaluated at z if it is a callable."""
        declared = agent.sensitivity
        if declared is None:
            raise PrivacyError("privacy is on but this agent declares no gradient sensitivity",
                               agent=agent.name, argument="sensitivity")
        if callable(declared) and not isinstance(declared, Sensitivity):
            declared = declared(*values)
        return _as_sensitivity(declared, agent=agent.name, argument="sensitivity")


@dataclass(frozen=True)
class ObjectivePerturbation(Perturbation):
    """ObjPert, Eq. (10): noise in the linearized objective; every release lies in W_p."""

    kind = "objective"

    def release_sensitivity(self, gradient_sensitivity: Sensitivity | None, weights: np.ndarray,
                            separable: bool, solver_error: float = 0.0, *, agent: str | None = None) -> Sensitivity:
        return _as_sensitivity(gradient_sensitivity, agent=None, argument="sensitivity")


@dataclass(frozen=True)
class OutputPerturbation(Perturbation):
    """OutPert, Eq. (12): noise added to the solution of Eq. (9).

    ``sensitivity="derived"`` computes the output sensitivity from the gradient
    sensitivity and the step's metric; a ``pc.Sensitivity`` gives it explicitly
    (the paper's power-flow setting uses beta, a nominal value: a ``Sensitivity`` whose
    ``nominal`` is set warns ``pc.NominalPrivacyWarning`` here).
    """

    sensitivity: str | Sensitivity = "derived"
    #: e, the certified l2 error allowed to the computed projection of Eq. (9) when the sensitivity is derived:
    #: every answer is certified within it (`privcvx.localsolve.certificate`), and Delta_2^out carries 2e. A
    #: trade-off (docs/privacy.md, "The solver's error"): Delta_2^out shrinks as rho grows and 2e does not, so a
    #: smaller e is less noise (case14 at total epsilon 0.1: objective 4.61 at 1e-6, 8.04 at 1e-5), but a step whose
    #: certificate exceeds e ends the run (`make demo`'s Laplace runs at epsilon 0.1 certify up to 1.2e-6).
    solver_error: float = 1e-5
    kind = "output"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_scalar(self.solver_error, argument="solver_error", kind=float, low=0.0, closed="right",
                     error=PrivacyError)
        if not (self.sensitivity == "derived" or isinstance(self.sensitivity, Sensitivity)):
            raise PrivacyError(f'must be "derived" or a pc.Sensitivity, got {self.sensitivity!r}',
                               argument="sensitivity")
        if isinstance(self.sensitivity, Sensitivity) and self.sensitivity.nominal is not None:
            warnings.warn(f"the output sensitivity is nominal, not a valid bound: {self.sensitivity.nominal}",
                          NominalPrivacyWarning, stacklevel=3)

    def release_sensitivity(self, gradient_sensitivity: Sensitivity | None, weights: np.ndarray,
                            separable: bool, solver_error: float = 0.0, *, agent: str | None = None) -> Sensitivity:
        if isinstance(self.sensitivity, Sensitivity):
            return self.sensitivity
        norm = self.mechanism.norm if isinstance(self.mechanism, Mechanism) else None
        return derived_output_sensitivity(gradient_sensitivity, weights, separable, solver_error, norm=norm,
                                          agent=agent)

    def needs_gradient_sensitivity(self) -> bool:
        """Whether the calibration reads the agents' gradient sensitivity (OutPert: only when derived from it)."""
        return self.sensitivity == "derived"

    def needs_certified_step(self) -> bool:
        """The derived sensitivity adds 2e for the computed projection (`derived_output_sensitivity`); a declared
        one is taken as given."""
        return self.sensitivity == "derived"


def derived_output_sensitivity(gradient: Sensitivity, weights: np.ndarray, separable: bool,
                               solver_error: float = 0.0, *, norm: str | None = None,
                               agent: str | None = None) -> Sensitivity:
    """Output sensitivity of the projected step Eq. (9) from the gradient sensitivity.

    ``weights`` is the metric m (1/eta on private coordinates, 1/eta + rho on shared ones). The rules are
    `privcvx.privacy.sensitivity.projected_sensitivity`'s with scale 1 (a(g) - a(g') = -(g - g')/m):
    L2: Delta_2 / min(m). L1: Delta_1 / min(m) when W_p is separable (R^n or a box), otherwise
    sqrt(n) * Delta_2 / min(m), which needs a declared l2 (``norm="l1"`` refuses without one). A solver's answer
    is within ``solver_error`` of the exact projection in l2 (certified, `privcvx.localsolve.certificate`):
    2 solver_error in L2 and 2 sqrt(n) solver_error in L1 are added (closed-form projections pass 0). A nominal
    gradient sensitivity gives a nominal output sensitivity (the same ``nominal`` reason).
    """
    return projected_sensitivity(gradient, "box" if separable else "conic", weights.size, metric=weights,
                                 solver_error=solver_error, norm=norm, agent=agent)
