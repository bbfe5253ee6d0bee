"""What a method may assume about an agent's data: the one record of public declarations, `Declared`.

Every number a method takes from an agent's data without looking at it is declared here, once, by the agent's
author or problem builder: the gradient sensitivity (Eqs. (18), (21)), the smoothness L_p, the strong convexity
and the change of the Hessian (PP-ADMM), the release bound of a general-form agent (PR-ADMM), the l_inf gradient
sensitivity B_inf and the aggregator bound D_i (Xiao, Ye & Devadas), the sampling frame (Q-DPSGD) and the
nominal OutPert sensitivity of a paper. ``pc.Agent`` and ``pc.AgentSpec`` carry it as ``.declared``; a method
reads it there and is never given per-agent settings keyed by agent name, so one algorithm object runs on any
problem.

The name is ``Declared``, not ``Bounds``: not every entry is a bound (the record count, the relation), and what
the record holds is vouched for by whoever declares it, never computed by privcvx from the data.

The bounds that compare two neighbouring datasets (``sensitivity``, ``release_bound``, ``coordinate_sensitivity``,
``hessian_change``, ``output_sensitivity``) hold for the record's ``relation``. The others (``smoothness``,
``strong_convexity``, ``record_smoothness``, ``aggregator_bound``, ``record_count``) hold for every dataset the
agent could hold, whatever the relation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privcvx.errors import DeclarationError, PrivacyError, check_scalar, require_positive
from privcvx.privacy.mechanisms import Sensitivity


@dataclass(frozen=True)
class ReleaseBound:
    """A public bound on how a neighbouring dataset moves agent i's local objective (general form).

    For neighbouring datasets D, D' and r = f_i(.; D') - f_i(.; D): |r(z) - r(z')| <= shared ||z_S - z'_S|| + private
    for all z, z' in W_i (z_S: the shared entries). Without private variables, shared = S_i (the gradient
    sensitivity) and private = 0. The released shared part of the exact local step then moves by at most
    the root of mu D^2 = shared D + private (docs/zcdp_admm.md, "General form").
    """

    shared: float
    private: float

    def __post_init__(self) -> None:
        require_positive(self.shared, argument="shared", allow_zero=True, error=PrivacyError)
        require_positive(self.private, argument="private", allow_zero=True, error=PrivacyError)

    def sensitivity(self, mu: float) -> float:
        """(b + sqrt(b^2 + 4 mu c)) / (2 mu): the L2 sensitivity of the released shared entries."""
        b, c = self.shared, self.private
        return (b + math.sqrt(b * b + 4.0 * mu * c)) / (2.0 * mu)


@dataclass(frozen=True)
class CurvatureBound:
    """A release bound for data that move f_i only along directions where f_i is curved.

    For a linear map A (public): f_i(y) - f_i(z) - <grad f_i(z), y - z> >= curvature ||A (y - z)||^2 for every
    dataset, and |r(z) - r(z')| <= change ||A (z - z')|| for neighbouring datasets (r as in `ReleaseBound`).
    Then the released shared part moves by at most change / sqrt(8 curvature mu) (docs/zcdp_admm.md, "General
    form"). The zonal power-flow problem, f = ||A z + d||^2 with one load entry changed by beta, has
    change = 2 beta and curvature = 1 (``powerflow.release_bounds``).
    """

    change: float
    curvature: float

    def __post_init__(self) -> None:
        require_positive(self.change, argument="change", allow_zero=True, error=PrivacyError)
        require_positive(self.curvature, argument="curvature", error=PrivacyError)

    def sensitivity(self, mu: float) -> float:
        """change / sqrt(8 curvature mu): the L2 sensitivity of the released shared entries."""
        return self.change / math.sqrt(8.0 * self.curvature * mu)


@runtime_checkable
class SampleLoss(Protocol):
    """An agent's records as the sum of per-record losses: what clipping and subsampling need.

    ``count`` is the number m of records (public, as the batch size of DP-SGD); ``gradients(x, indices)``
    returns the gradients of the losses of the records ``indices`` at the agent's flattened vector ``x``, one
    row each (shape ``(len(indices), x.size)``). The agent's objective must be their mean.
    """

    count: int

    def gradients(self, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """The per-record gradients at ``x``, one row per index."""


#: The scalar entries of `Declared` that are bounds >= 0 (a positive one for those in `_POSITIVE`).
_NONNEGATIVE = ("smoothness", "strong_convexity", "hessian_change", "coordinate_sensitivity", "record_smoothness")
_POSITIVE = ("aggregator_bound",)


@dataclass(frozen=True, repr=False)
class Declared:
    """The public declarations about one agent's data: everything a method may assume without looking at it.

    Every entry is optional (``None``: not declared); a method that needs one refuses an agent without it, naming
    the agent and the entry. Frozen, so a record can be shared by agents and compared (``pc.AgentSpec`` checks the
    built agent's record against its own).

    Attributes
    ----------
    sensitivity:
        ``pc.Sensitivity`` of the gradient over neighbouring datasets (Eqs. (18), (21)), or a callable
        ``(*values) -> pc.Sensitivity`` for a data-dependent bound such as Eq. (31) (nominal).
    smoothness:
        L_p >= 0, a bound on the Lipschitz constant of grad f_p valid for every dataset (0 for a linear f_p).
    strong_convexity:
        mu_f >= 0, a lower bound on f_p's strong-convexity modulus valid for every dataset (PP-ADMM, PR-ADMM).
    hessian_change:
        A bound on the spectral norm of the change of f_p's Hessian over neighbouring datasets (PP-ADMM's
        objective perturbation; c1 / |D_i| for the logistic loss).
    release_bound:
        A `ReleaseBound` or `CurvatureBound`: how the data move f_p, for the released shared part of PR-ADMM's
        exact local step (general-form agents with private variables).
    coordinate_sensitivity:
        B_inf, a bound on the change of one gradient coordinate over neighbouring datasets (the l_inf gradient
        sensitivity of `RandomizedADMM` and `RandomizedDGD`; the digest's erratum 3).
    aggregator_bound:
        D_i > 0, the bound of the agent's secret random penalties Gamma ~ U(0, D_i) (`RandomizedADMM`; its
        default 2 (L_i + zeta |N_i|)).
    record_count, record_smoothness:
        The sampling frame of a `SampledAgent`: the number m_i of records, declared public (Q-DPSGD's default
        normaliser q m_i reveals it), and L_rec, a bound on the Lipschitz constant of every record's gradient.
    output_sensitivity:
        An explicit sensitivity of Algorithm 1's OutPert release, as a paper prints it (e.g. beta of Sec. 6.1.1;
        usually nominal: a study names it explicitly, as ``examples/case14_paper.toml`` does).
    relation:
        The neighbouring relation the data-comparing bounds hold for (``"replace_one: ..."``,
        ``"add_remove: ..."``): see the module docstring for which entries it qualifies.
    """

    sensitivity: Sensitivity | Callable[..., Sensitivity] | None = None
    smoothness: float | None = None
    strong_convexity: float | None = None
    hessian_change: float | None = None
    release_bound: ReleaseBound | CurvatureBound | None = None
    coordinate_sensitivity: float | None = None
    aggregator_bound: float | None = None
    record_count: int | None = None
    record_smoothness: float | None = None
    output_sensitivity: Sensitivity | None = None
    relation: str | None = None

    def __post_init__(self) -> None:
        for name, value in checked_entries(self.entries(), agent=None).items():
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return f"Declared({', '.join(f'{name}={value!r}' for name, value in self.entries().items())})"

    def entries(self) -> dict[str, Any]:
        """The declared entries (those not None), by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def replace(self, **changes: Any) -> Declared:
        """A copy with ``changes``."""
        return Declared(**{**self.entries(), **changes})

    def require(self, entry: str, *, agent: str | None, why: str) -> Any:
        """The declared ``entry``, or a DeclarationError naming the agent and the entry, saying ``why`` it is needed."""
        value = getattr(self, entry)
        if value is None:
            raise DeclarationError(f"is not declared: {why} (pc.Declared({entry}=...) on the agent)", agent=agent,
                                   argument=entry)
        return value


def checked_entries(entries: dict[str, Any], *, agent: str | None) -> dict[str, Any]:
    """The entries of a `Declared` record, checked (`check_scalar`) and converted; a bad one raises DeclarationError
    naming ``agent`` and the entry."""
    known = {f.name for f in fields(Declared)}
    checked: dict[str, Any] = {}
    for name, value in entries.items():
        if name not in known:
            raise DeclarationError(f"is not a declaration; pc.Declared holds {sorted(known)}", agent=agent,
                                   argument=name)
        if value is None:
            continue
        if name in _NONNEGATIVE or name in _POSITIVE:
            value = check_scalar(value, argument=name, kind=float, low=0.0,
                                 closed="right" if name in _POSITIVE else "both", agent=agent, error=DeclarationError)
        elif name == "record_count":
            value = check_scalar(value, argument=name, kind=int, low=1, agent=agent, error=DeclarationError)
        elif name == "relation":
            value = check_scalar(value, argument=name, kind=str, agent=agent, error=DeclarationError)
        elif name == "sensitivity" and not (isinstance(value, Sensitivity) or callable(value)):
            raise DeclarationError(f"must be a pc.Sensitivity or a callable returning one, got {value!r}", agent=agent,
                                   argument=name)
        elif name == "output_sensitivity" and not isinstance(value, Sensitivity):
            raise DeclarationError(f"must be a pc.Sensitivity, got {value!r}", agent=agent, argument=name)
        elif name == "release_bound" and not isinstance(value, ReleaseBound | CurvatureBound):
            raise DeclarationError(f"must be a pc.ReleaseBound or pc.CurvatureBound, got {value!r}", agent=agent,
                                   argument=name)
        checked[name] = value
    return checked


def declaration(declared: Declared | None, *, agent: str | None, **entries: Any) -> Declared:
    """An agent's record from its ``declared=`` and the entries given as keywords (``sensitivity=``,
    ``smoothness=``, ...): each entry is checked naming the agent, and one declared both ways must agree."""
    if declared is not None and not isinstance(declared, Declared):
        raise DeclarationError(f"must be a pc.Declared, got {declared!r}", agent=agent, argument="declared")
    given = checked_entries(entries, agent=agent)
    base = declared.entries() if declared is not None else {}
    for name, value in given.items():
        if name in base and base[name] != value:
            raise DeclarationError(f"is declared twice, as {value!r} and in declared= as {base[name]!r}", agent=agent,
                                   argument=name)
    return Declared(**{**base, **given})
