"""The builders' declared sensitivities replayed on worst-case neighbours (issue 27, item 5).

A problem builder declares, for its neighbouring relation, a bound on how much what an agent releases can change:
a gradient sensitivity (Eqs. (18), (21) of Ryu & Kim; a callable is evaluated at the point), a coordinate bound
(B_inf of Xiao, Ye & Devadas, Theorem 2.2), or the sensitivity of released coefficients (the functional
mechanism). Each builder module provides ``worst_case_pairs(...)``: neighbouring datasets, built with the builder
itself, chosen so that the change comes as close to the declared bound as the builder's derivation allows.

`check_builder` replays an agent's gradient on both datasets of each pair (its numpy oracle, or the compiled
expression tree of `privcvx.gradients.GradientEvaluator`) at a set of points: the origin, random points and
corners of the agent's public box (a free or conic set: random points at two scales). `check_release` does
the same for any released vector given on both datasets. Both compare the change in each declared norm with the
bound at the same point:

* a change above the bound (beyond `TOLERANCE`) raises `SensitivityExceeded` naming the builder, the
  agent and the norm: the declared bound is not valid;
* the looseness ratio bound / change at the point where the change comes closest to its bound is reported per
  norm (`NormAudit`); a ratio above `LOOSE_RATIO` marks the bound as loose
  (`BuilderAudit.loose`), which is reported, not an error: the bound is valid, but costs that much noise.

privcvx imports no builder: the builders call it (tests/test_builder_audit.py walks them all).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from privcvx.algorithms.privacy_audit import NeighbouringPair
from privcvx.gradients import GradientEvaluator
from privcvx.localsolve import box_bounds
from privcvx.privacy.mechanisms import Sensitivity
from privcvx.problem import Agent, AgentLayout

#: A replayed change may exceed its bound by this relative amount (floating-point rounding) and no more.
TOLERANCE = 1e-9
#: A declared bound more than this many times the largest replayed change is reported as loose.
LOOSE_RATIO = 10.0
#: The norms an audit compares: l1 and l2 (a ``Sensitivity``), linf (a declared coordinate bound).
NORMS = {"l1": 1, "l2": 2, "linf": np.inf}

Declared = Sensitivity | Callable[..., Sensitivity]


class SensitivityExceeded(AssertionError):
    """A replayed change exceeded the declared bound: the builder's sensitivity is not valid."""


@dataclass(frozen=True)
class NormAudit:
    """One norm of one builder: the replayed change closest to its bound, and that bound."""

    builder: str
    relation: str
    agent: str
    norm: str
    declared: float
    replayed: float

    @property
    def ratio(self) -> float:
        """Looseness bound / change (inf when nothing changed)."""
        return self.declared / self.replayed if self.replayed > 0 else math.inf

    @property
    def loose(self) -> bool:
        return self.ratio > LOOSE_RATIO


@dataclass(frozen=True)
class BuilderAudit:
    """The audit of one builder: one `NormAudit` per declared norm."""

    builder: str
    relation: str
    norms: tuple[NormAudit, ...]

    @property
    def loose(self) -> list[NormAudit]:
        """The norms whose bound is loose by more than `LOOSE_RATIO` (reported, not an error)."""
        return [row for row in self.norms if row.loose]

    def rows(self) -> list[str]:
        """One line per norm: builder, relation, norm, declared bound, largest replayed change, ratio."""
        return [f"{r.builder} | {r.relation} | {r.agent} | {r.norm} | {r.declared:.4g} | {r.replayed:.4g} | "
                f"{r.ratio:.3g}{' (loose)' if r.loose else ''}" for r in self.norms]


class _Tightest:
    """Per norm, the (change, bound) pair with the largest change / bound seen so far."""

    def __init__(self, builder: str, relation: str) -> None:
        self.builder, self.relation = builder, relation
        self.best: dict[str, tuple[str, float, float]] = {}

    def add(self, agent: str, change: np.ndarray, bounds: dict[str, float | None]) -> None:
        for norm, bound in bounds.items():
            if bound is None:
                continue
            size = float(np.linalg.norm(change, NORMS[norm]))
            if size > bound * (1 + TOLERANCE):
                raise SensitivityExceeded(f"builder {self.builder} ({self.relation}), agent {agent}: the {norm} "
                                          f"change {size:.6g} exceeds the declared {norm} bound {bound:.6g}")
            previous = self.best.get(norm)
            if previous is None or size * previous[2] > previous[1] * bound:
                self.best[norm] = (agent, size, bound)

    def audit(self) -> BuilderAudit:
        if not self.best:
            raise SensitivityExceeded(f"builder {self.builder}: no change was replayed against a declared bound")
        return BuilderAudit(self.builder, self.relation, tuple(
            NormAudit(self.builder, self.relation, agent, norm, bound, size)
            for norm, (agent, size, bound) in sorted(self.best.items())))


def _bounds(declared: Sensitivity, coordinate: float | None, factor: float) -> dict[str, float | None]:
    """The bound of each norm, times ``factor``."""
    return {norm: None if bound is None else bound * factor
            for norm, bound in (("l1", declared.l1), ("l2", declared.l2), ("linf", coordinate))}


def check_release(builder: str, relation: str, changes: Iterable[tuple[str, np.ndarray, np.ndarray]],
                  declared: Sensitivity, *, coordinate: float | None = None, factor: float = 1.0) -> BuilderAudit:
    """Replay released vectors ``(agent, on D, on D')`` against the constant ``declared`` bound (and a declared
    linf ``coordinate`` bound), times ``factor`` (below 1: a deliberately wrong bound, which must fail). Raises
    `SensitivityExceeded` on a change above a bound."""
    tightest = _Tightest(builder, relation)
    bounds = _bounds(declared, coordinate, factor)
    for agent, original, neighbour in changes:
        tightest.add(agent, np.asarray(neighbour, float) - np.asarray(original, float), bounds)
    return tightest.audit()


def audit_points(agent: Agent, layout: AgentLayout, *, count: int = 4, seed: int = 0) -> list[np.ndarray]:
    """Where `check_builder` replays: the origin, ``count`` random points and ``count`` corners of the agent's
    public box (clipped to it), or ``count`` random points at scales 1 and 10 on a free or conic set."""
    rng = np.random.default_rng(seed)
    bounds = box_bounds(agent, layout) if agent.constraints else None
    points = [np.zeros(layout.dim)]
    if bounds is not None and np.all(np.isfinite(bounds[0])) and np.all(np.isfinite(bounds[1])):
        low, high = bounds
        points += [rng.uniform(low, high) for _ in range(count)]
        points += [np.where(rng.random(layout.dim) < 0.5, low, high) for _ in range(count)]
        return [np.clip(point, low, high) for point in points]
    return points + [scale * rng.standard_normal(layout.dim) for scale in (1.0, 10.0) for _ in range(count)]


def _declared_at(declared: Declared, layout: AgentLayout, z: np.ndarray) -> Sensitivity:
    return declared if isinstance(declared, Sensitivity) else declared(*layout.split(z))


#: What an audit replays: from an agent and its layout, the released vector as a function of the point z.
Release = Callable[[Agent, AgentLayout], Callable[[np.ndarray], np.ndarray]]


def gradient(agent: Agent, layout: AgentLayout) -> Callable[[np.ndarray], np.ndarray]:
    """The agent's gradient f'_p(z) (ObjPert's pre-image), by its oracle or its compiled expression."""
    return GradientEvaluator(agent, layout).gradient


def clipped_record_sum(clip: float) -> Release:
    """The sum over an agent's records of their gradients clipped to l2 norm ``clip`` (Q-DPSGD's pre-image, computed
    here independently of `privcvx.algorithms.qdpsgd`); the agent must declare ``samples``."""
    def release(agent: Agent, layout: AgentLayout) -> Callable[[np.ndarray], np.ndarray]:
        def clipped(z: np.ndarray) -> np.ndarray:
            rows = agent.samples.gradients(z, np.arange(agent.samples.count))
            return (rows / np.maximum(1.0, np.linalg.norm(rows, axis=1) / clip)[:, None]).sum(axis=0)
        return clipped
    return release


def check_builder(builder: str, pairs: Iterable[NeighbouringPair], *, relation: str,
                  points: Sequence[np.ndarray] | None = None, declared: Declared | None = None,
                  coordinate: float | None = None, release: Release = gradient, factor: float = 1.0) -> BuilderAudit:
    """Replay agent ``pair.index``'s release (default its gradient) on D and D' of every pair at ``points``
    (default `audit_points`).

    The bound is the original agent's declared ``sensitivity`` (a callable evaluated at the point) unless
    ``declared`` overrides it; ``coordinate`` is a declared linf bound; every bound is multiplied by ``factor``
    (below 1: a deliberately wrong bound, to show that the audit fails it). Raises
    `SensitivityExceeded` when a change exceeds a bound, and returns the `BuilderAudit`.
    """
    tightest = _Tightest(builder, relation)
    for pair in pairs:
        agent, moved = pair.original.agents[pair.index], pair.neighbour.agents[pair.index]
        layout = pair.original.layouts[pair.index]
        bound = agent.sensitivity if declared is None else declared
        if bound is None:
            raise SensitivityExceeded(f"builder {builder}, agent {agent.name}: declares no sensitivity to replay")
        before, after = release(agent, layout), release(moved, pair.neighbour.layouts[pair.index])
        for z in audit_points(agent, layout) if points is None else points:
            tightest.add(agent.name, after(z) - before(z), _bounds(_declared_at(bound, layout, z), coordinate, factor))
    return tightest.audit()
