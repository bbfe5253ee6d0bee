"""Problem declaration: agents, their public local sets W_p, and the consensus layout.

A distributed problem is the paper's model (2) in general form:

    min  sum_p f_p(z_p)   s.t.  z_p in W_p,   (z_p)_k = w_k  for every key k agent p shares.

Each agent declares ``f_p`` (which may hold private data in ``cp.Parameter``s or
constants) and ``W_p`` (public constraints) in CVXPY. Keys that several agents
share are agreed on; the other variables of an agent stay private to it.

The local vector ``z_p`` of an agent stacks all its variables, each vectorized
column-major (``order="F"``, like ``cp.vec``), in the order of
`Agent.variables`. The global vector ``w`` stacks the keys in the order of
`DistributedProblem.keys`, each vectorized column-major.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cvxpy as cp
import numpy as np
import scipy.sparse as sp
from cvxpy.atoms.affine.index import index, special_index

from privcvx.declared import Declared, SampleLoss, declaration
from privcvx.errors import (
    CentralizedSolveError,
    DeclarationError,
    InfeasibleLocalSetError,
    ModelingWarning,
    NotDCPError,
    ParameterError,
    check_scalar,
)
from privcvx.privacy.mechanisms import Sensitivity
from privcvx.reference import CentralizedSolution
from privcvx.schedules import PenaltyRule
from privcvx.solver_warnings import quiet_inaccurate, reference_status_warning

if TYPE_CHECKING:
    from privcvx.algorithms.base import Algorithm
    from privcvx.results import Result
    from privcvx.topology import Topology

#: The key used when an agent passes one variable as ``shared`` (full consensus, model (2)).
CONSENSUS_KEY = "w"

Metric = Callable[[np.ndarray], float]

#: Solver settings of the centralized reference: Clarabel's defaults leave relative errors near 1e-5.
#: tol_feas is 1e-10, not 1e-11: Clarabel's dual residual stalls at 2e-11 to 6e-11 on power-flow models (even
#: case9's, whose data span [1, 17]), so 1e-11 ended every such solve "optimal_inaccurate" (docs/performance.md).
REFERENCE_SOLVER: dict[str, Any] = {"solver": cp.CLARABEL, "tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11,
                                    "tol_feas": 1e-10, "accept_unknown": True}


def _label(name: str | None) -> str:
    return name if name is not None else "<unnamed agent>"



def declared_entry(name: str, doc: str) -> property:
    """A read-only property for entry ``name`` of the object's ``declared`` record (`pc.Declared`)."""
    return property(lambda self: getattr(self.declared, name), doc=f"{doc} (``declared.{name}``)")

class Agent:
    """One agent p: its local objective f_p, its public local set W_p, and what it shares.

    Parameters
    ----------
    objective:
        Convex scalar CVXPY expression, minimized. It may hold the agent's private data. A smooth
        nonconvex expression is accepted when ``gradient`` is given (``agent.convex`` is then False),
        for the gradient-only algorithms (``Algorithm.needs_convexity = False``, e.g. DPP2).
    constraints:
        CVXPY constraints over the agent's variables: the public local set W_p.
    shared:
        A ``cp.Variable`` (full consensus, model (2)) or a dict ``{key: variable or indexed
        variable}`` (general-form consensus).
    name:
        Label used in messages, errors and results; ``DistributedProblem`` assigns
        ``"agent-<i>"`` when it is ``None``.
    gradient:
        Optional numpy oracle ``gradient(*values)`` returning the (sub)gradient of the
        objective with respect to `variables` (one array, or a tuple of arrays shaped
        like the variables). By default privcvx derives a fast evaluator from the CVXPY
        expression ([`privcvx.gradients`][privcvx.gradients]).
    sensitivity:
        ``pc.Sensitivity`` bounding ``max ||f'_p(z; D) - f'_p(z; D')||`` over neighbouring
        datasets (Eqs. (18), (21)), or a callable ``(*values) -> pc.Sensitivity`` for
        data-dependent bounds such as Eq. (31). Required whenever privacy is on.
    smoothness:
        A declared bound L_p >= 0 on the Lipschitz constant of the gradient of f_p (0 for a linear
        f_p). Algorithms that set steps from L_p (``eta="auto"``, the default step of
        ``DPDistributedGradient``) use it instead of estimating L_p from the data, which a public
        setting must never be. Problem builders declare one valid for every dataset.
    declared:
        A `pc.Declared` record with every public declaration about the agent's data (``sensitivity`` and
        ``smoothness`` are two of its entries, which may be given either way, or both ways if they agree). The
        agent keeps the merged record as ``.declared``; methods read their assumptions there.
    """

    def __init__(self, objective: cp.Expression, constraints: Sequence[cp.Constraint] = (), *,
                 shared: cp.Expression | Mapping[Hashable, cp.Expression],
                 name: str | None = None,
                 gradient: Callable[..., Any] | None = None,
                 sensitivity: Sensitivity | Callable[..., Sensitivity] | None = None,
                 smoothness: float | None = None, declared: Declared | None = None) -> None:
        if name is not None and not isinstance(name, str):
            raise DeclarationError(f"must be a string, got {name!r}", argument="name")
        label = _label(name)
        if not isinstance(objective, cp.Expression):
            raise DeclarationError(f"must be a CVXPY expression, got {type(objective).__name__}",
                                   agent=label, argument="objective")
        if objective.size != 1:
            raise DeclarationError(f"must be scalar, got shape {objective.shape}",
                                   agent=label, argument="objective")
        #: False for a smooth objective that is not convex DCP, accepted with a gradient oracle: only
        #: algorithms that need gradients alone (``Algorithm.needs_convexity = False``) run it.
        self.convex = bool(objective.is_dcp() and objective.is_convex())
        if not self.convex and gradient is None:
            raise NotDCPError("is not a convex DCP expression (privcvx minimizes it); a smooth nonconvex objective "
                              "needs a gradient oracle (gradient=...) and a gradient-only algorithm such as "
                              "pc.algorithms.DPP2", agent=label, argument="objective")
        if isinstance(constraints, cp.Constraint):
            constraints = [constraints]
        if not isinstance(constraints, Sequence | set | tuple) or isinstance(constraints, str):
            raise DeclarationError(f"must be a list of CVXPY constraints, got {constraints!r}", agent=label,
                                   argument="constraints")
        constraints = list(constraints)
        for i, constraint in enumerate(constraints):
            if not isinstance(constraint, cp.Constraint):
                raise DeclarationError(f"item {i} is not a CVXPY constraint: {constraint!r}",
                                       agent=label, argument="constraints")
            if not constraint.is_dcp():
                raise NotDCPError(f"constraint {i} ({constraint}) is not DCP",
                                  agent=label, argument="constraints")
        if shared is None:
            raise DeclarationError("is required: a cp.Variable or a dict {key: variable}",
                                   agent=label, argument="shared")
        shared_map: dict[Hashable, cp.Expression] = (
            dict(shared) if isinstance(shared, Mapping) else {CONSENSUS_KEY: shared})
        if not shared_map:
            raise DeclarationError("shares nothing; an agent must share at least one key",
                                   agent=label, argument="shared")
        for key, expr in shared_map.items():
            _shared_variable(expr, key=key, agent=label)
        if gradient is not None and not callable(gradient):
            raise DeclarationError("must be callable", agent=label, argument="gradient")
        #: The public declarations about the agent's data (`pc.Declared`).
        self.declared = declaration(declared, agent=label, sensitivity=sensitivity, smoothness=smoothness)
        for argument, expressions in (("objective", [objective]), ("constraints", constraints)):
            for leaf, value in data_leaves(expressions):
                if value is None and isinstance(leaf, cp.Parameter):
                    raise DeclarationError(f"parameter {leaf.name()} has no value: set .value before declaring the "
                                           "agent (its data)", agent=label, argument=argument)
                if value is not None and not np.all(np.isfinite(_dense(value))):
                    where = f"parameter {leaf.name()}" if isinstance(leaf, cp.Parameter) else "a constant"
                    raise DeclarationError(f"{where} holds NaN or infinite values", agent=label, argument=argument)
        self.objective = objective
        self.constraints = constraints
        self.shared = shared_map
        self.name = name
        self.gradient = gradient
        self.variables = self._collect_variables()
        if not self.variables:
            raise DeclarationError("the agent has no variables", agent=label, argument="objective")
        for variable in self.variables:
            kind = _unsupported_kind(variable)
            if kind is not None:
                raise DeclarationError(f"variable {variable.name()} is {kind}: privcvx solves convex problems over "
                                       "real variables (drop the attribute, or relax it to bounds)",
                                       agent=label, argument="variables")
        used = {var.id for source in [objective, *constraints] for var in source.variables()}
        for key, expr in shared_map.items():
            variable = _shared_variable(expr, key=key, agent=label)
            if variable.id not in used:
                warnings.warn(f"[agent {label!r}] shared key {key!r}: its variable {variable.name()} appears in "
                              "neither the objective nor the constraints, so only consensus decides it",
                              ModelingWarning, stacklevel=2)

    @property
    def sensitivity(self) -> Sensitivity | Callable[..., Sensitivity] | None:
        """The declared gradient sensitivity (``declared.sensitivity``); setting it replaces that entry of the
        record (checked)."""
        return self.declared.sensitivity

    @sensitivity.setter
    def sensitivity(self, value: Sensitivity | Callable[..., Sensitivity] | None) -> None:
        self.declared = declaration(self.declared.replace(sensitivity=None), agent=_label(self.name),
                                    sensitivity=value)

    @property
    def smoothness(self) -> float | None:
        """The declared L_p (``declared.smoothness``); setting it replaces that entry of the record (checked)."""
        return self.declared.smoothness

    @smoothness.setter
    def smoothness(self, value: float | None) -> None:
        self.declared = declaration(self.declared.replace(smoothness=None), agent=_label(self.name),
                                    smoothness=value)

    def _collect_variables(self) -> list[cp.Variable]:
        ordered: dict[int, cp.Variable] = {}
        sources: list[cp.Expression] = [_shared_variable(e, key=k, agent=_label(self.name))
                                        for k, e in self.shared.items()]
        sources.append(self.objective)
        sources.extend(self.constraints)
        for source in sources:
            for var in source.variables():
                ordered.setdefault(var.id, var)
        return list(ordered.values())

    def __repr__(self) -> str:
        return (f"Agent(name={self.name!r}, variables={len(self.variables)}, "
                f"constraints={len(self.constraints)}, shared={list(self.shared)})")


class SampledAgent(Agent):
    """A ``pc.Agent`` that also declares its per-record gradients (``samples``, a `SampleLoss`).

    ``record_smoothness`` is a public bound L_rec on the Lipschitz constant of every record's gradient (valid for
    every record the data could hold); Q-DPSGD-2 needs it under privacy. ``record_count`` declares the number of
    records m_i public (it must equal ``samples.count``): QDPSGD's default normaliser B = q m_i reveals it, so a
    private run without ``batch_size`` needs it. Both are entries of the agent's `pc.Declared` record (its sampling
    frame) and may be given there instead. Every other argument is ``pc.Agent``'s; ``objective`` must be the mean
    of the records' losses.
    """

    def __init__(self, objective: Any, constraints: Any = (), *, samples: SampleLoss,
                 record_smoothness: float | None = None, record_count: int | None = None,
                 declared: Declared | None = None, **kwargs: Any) -> None:
        label = _label(kwargs.get("name"))
        frame = declaration(declared, agent=label, record_smoothness=record_smoothness, record_count=record_count)
        super().__init__(objective, constraints, declared=frame, **kwargs)
        if not isinstance(samples, SampleLoss):
            raise DeclarationError(f"must provide count and gradients(x, indices), got {samples!r}", agent=label,
                                   argument="samples")
        count = check_scalar(samples.count, argument="samples", kind=int, low=1, agent=label, error=DeclarationError)
        if self.declared.record_count not in (None, count):
            raise DeclarationError(f"must be None or the agent's number of records, {count}, got "
                                   f"{self.declared.record_count!r}", agent=label, argument="record_count")
        self.samples = samples

    record_count = declared_entry("record_count", "The declared public number of records m_i.")
    record_smoothness = declared_entry("record_smoothness", "The declared L_rec.")


def _unsupported_kind(variable: cp.Variable) -> str | None:
    """The kind of a variable privcvx cannot run ("integer", "boolean", "complex"), or None for a real one."""
    for kind in ("boolean", "integer"):
        if variable.attributes.get(kind):
            return kind
    return "complex" if variable.is_complex() else None


def _has_attributes(variable: cp.Variable) -> bool:
    """Whether a variable carries CVXPY attributes (nonneg, bounds, symmetric, ...) that constrain its values."""
    return any(value is not None and value is not False for value in variable.attributes.values())


def data_leaves(expressions: Sequence[cp.Expression | cp.Constraint]) -> Iterator[tuple[Any, Any]]:
    """Every constant and parameter in the expressions, with its value (an agent's data), in tree order."""
    for expression in expressions:
        if isinstance(expression, (cp.Constant, cp.Parameter)):
            yield expression, expression.value
        yield from data_leaves(getattr(expression, "args", ()))


def _dense(value: Any) -> np.ndarray:
    """A value's entries as a float array (the stored entries of a sparse matrix)."""
    if sp.issparse(value):
        return np.asarray(value.data, dtype=float)
    return np.asarray(value, dtype=float)


def _shared_variable(expr: Any, *, key: Hashable, agent: str) -> cp.Variable:
    """Return the variable behind a shared expression, which must be a variable or an indexed variable."""
    if isinstance(expr, cp.Variable):
        return expr
    if isinstance(expr, (index, special_index)) and isinstance(expr.args[0], cp.Variable):
        return expr.args[0]
    raise DeclarationError(
        f"shared key {key!r} must be a cp.Variable or an indexed cp.Variable (like z[3] or z[idx]), "
        f"got {type(expr).__name__}: {expr}", agent=agent, argument="shared")


def _positions(expr: cp.Expression, var: cp.Variable) -> np.ndarray:
    """Column-major positions within ``vec(var)`` that the shared expression selects."""
    if expr is var:
        return np.arange(var.size)
    numbering = cp.Constant(np.arange(var.size, dtype=float).reshape(var.shape, order="F"))
    return np.asarray(expr.copy([numbering]).value, dtype=float).reshape(-1, order="F").astype(int)


@dataclass(frozen=True)
class AgentLayout:
    """Where an agent's variables and shared entries sit in its local vector z_p.

    ``offsets[i]`` is where ``variables[i]`` starts in z_p. ``shared_local`` holds the
    positions in z_p of the agent's shared entries, and ``shared_global`` their positions
    in the global vector w, in the same order (the agent's block of the matrix A in the
    paper's ``A w - z``).
    """

    name: str
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    dim: int
    shared_local: np.ndarray
    shared_global: np.ndarray

    @property
    def shared_mask(self) -> np.ndarray:
        mask = np.zeros(self.dim, dtype=bool)
        mask[self.shared_local] = True
        return mask

    def split(self, z: np.ndarray) -> list[np.ndarray]:
        """The variable values, shaped like the variables, of a flat local vector."""
        return [z[o:o + int(np.prod(s, dtype=int))].reshape(s, order="F")
                for o, s in zip(self.offsets, self.shapes, strict=True)]

    def flatten(self, values: Sequence[Any]) -> np.ndarray:
        """Stack values shaped like the variables into a flat local vector."""
        return np.concatenate([np.asarray(v, dtype=float).reshape(-1, order="F") for v in values])


def agent_vector(agent: Agent) -> cp.Expression:
    """z_p as one CVXPY vector: the agent's variables, each vectorized column-major, in ``agent.variables`` order
    (the layout of `AgentLayout`), for the compiled local steps."""
    parts = [cp.vec(v, order="F") for v in agent.variables]
    return parts[0] if len(parts) == 1 else cp.hstack(parts)


def agent_layout(agent: Agent, key_offsets: Mapping[Hashable, int]) -> AgentLayout:
    """Agent's layout: its variables stacked in z_p, its shared entries' positions in z_p and (from the keys'
    offsets in w) in w."""
    shapes = tuple(tuple(v.shape) for v in agent.variables)
    sizes = [int(np.prod(s, dtype=int)) for s in shapes]
    offsets = tuple(np.cumsum([0, *sizes[:-1]]).tolist())
    var_offset = {v.id: o for v, o in zip(agent.variables, offsets, strict=True)}
    local, glob = [], []
    for key, expr in agent.shared.items():
        var = _shared_variable(expr, key=key, agent=agent.name)
        local.append(var_offset[var.id] + _positions(expr, var))
        glob.append(key_offsets[key] + np.arange(expr.size))
    shared_local = np.concatenate(local)
    if len(np.unique(shared_local)) != len(shared_local):
        raise DeclarationError("two shared keys select the same entry of a variable",
                               agent=agent.name, argument="shared")
    return AgentLayout(name=agent.name, shapes=shapes, offsets=offsets, dim=int(sum(sizes)),
                       shared_local=shared_local, shared_global=np.concatenate(glob))


class AgentSpec:
    """An agent built where it runs: the driver holds only its name, public declarations and a factory.

    The driver has no objective, constraints or variables of the agent: an algorithm setting that would need
    them there (an L_p estimated from data, the centralized reference) raises a DeclarationError.

    Parameters
    ----------
    name:
        The agent's name (the built agent must have it, or none).
    factory:
        A picklable zero-argument callable (a module-level function, a ``functools.partial`` of one, an instance
        of a class) that builds the agent's `Agent`, loading its private data where it is called: on the
        host that runs the agent (a worker process or a Ray actor). It should hold where the data is (a path),
        never the data itself, since it is pickled and sent to the host.
    shapes:
        ``{key: shape}``: the public shapes of the agent's shared keys, in the order the built agent's ``shared``
        lists them. The driver lays out the global vector w from these alone.
    sensitivity, smoothness, declared:
        The public declarations that the algorithm checks in the driver: a `pc.Declared` record, whose
        ``sensitivity`` and ``smoothness`` may also be given as keywords (see `Agent`); the built agent must
        declare the same record, entry by entry (its ``relation`` too), since the host calibrates with its own.
    convex:
        Whether the built agent's objective is convex DCP (``Agent.convex``; a nonconvex agent needs a gradient
        oracle and a gradient-only method). The driver checks the algorithm against it; the host checks the
        built agent.
    shard:
        Where the agent's host writes its checkpoint shards (a path on that host): its iterate, dual and noise
        state, after every round of a run with ``checkpoint=``, to ``<shard>.r<next round>`` (the older one is
        deleted after the driver's commit); ``resume=`` reads it back there. The driver's checkpoint then holds
        only public state, the round and each shard's digest (docs/deployment.md).
    """

    def __init__(self, name: str, factory: Callable[[], Agent], shapes: Mapping[Hashable, Sequence[int] | int], *,
                 sensitivity: Sensitivity | None = None, smoothness: float | None = None,
                 declared: Declared | None = None, convex: bool = True,
                 shard: str | os.PathLike | None = None) -> None:
        if not isinstance(name, str):
            raise DeclarationError(f"must be a string, got {name!r}", argument="name")
        if not callable(factory):
            raise DeclarationError(f"must be a zero-argument callable building the pc.Agent, got {factory!r}",
                                   agent=name, argument="factory")
        if not isinstance(shapes, Mapping) or not shapes:
            raise DeclarationError(f"must be a non-empty dict {{key: shape}}, got {shapes!r}", agent=name,
                                   argument="shapes")
        self.shapes: dict[Hashable, tuple[int, ...]] = {}
        for key, shape in shapes.items():  # a number n is the shape (n,); a bool is no dimension (check_scalar)
            dims = shape if isinstance(shape, Sequence) and not isinstance(shape, str) else (shape,)
            self.shapes[key] = tuple(check_scalar(d, argument=f"shapes[{key!r}]", kind=int, low=1, agent=name,
                                                  error=DeclarationError) for d in dims)
        #: The public declarations about the agent's data (`pc.Declared`), checked against the built agent's.
        self.declared = declaration(declared, agent=name, sensitivity=sensitivity, smoothness=smoothness)
        if self.declared.sensitivity is not None and not isinstance(self.declared.sensitivity, Sensitivity):
            raise DeclarationError(f"must be a pc.Sensitivity, got {self.declared.sensitivity!r}", agent=name,
                                   argument="sensitivity")
        if shard is not None and (not isinstance(shard, str | os.PathLike) or not os.fspath(shard)):
            raise DeclarationError(f"must be a file path, got {shard!r}", agent=name, argument="shard")
        self.name = name
        self.factory = factory
        self.shard = None if shard is None else os.fspath(shard)
        check_scalar(convex, argument="convex", kind=bool, agent=name, error=DeclarationError)
        self.convex = convex
        self.key_offsets: dict[Hashable, int] = {}

    def build(self) -> tuple[Agent, AgentLayout]:
        """Call the factory (on the host) and check the agent against the declaration; return it and its layout."""
        agent = self.factory()
        if not isinstance(agent, Agent):
            raise DeclarationError(f"the factory returned {type(agent).__name__}, not a pc.Agent", agent=self.name,
                                   argument="factory")
        if agent.name not in (None, self.name):
            raise DeclarationError(f"the factory built an agent named {agent.name!r}", agent=self.name,
                                   argument="name")
        agent.name = self.name
        built = {key: tuple(expr.shape) for key, expr in agent.shared.items()}
        if list(built.items()) != list(self.shapes.items()):
            raise DeclarationError(f"the built agent shares {built}, but its spec declares {self.shapes}",
                                   agent=self.name, argument="shapes")
        built_entries, spec_entries = {**agent.declared.entries(), "convex": agent.convex}, \
            {**self.declared.entries(), "convex": self.convex}
        for argument in sorted(set(built_entries) | set(spec_entries)):
            if built_entries.get(argument) != spec_entries.get(argument):
                raise DeclarationError(f"the built agent declares {built_entries.get(argument)!r}, its spec "
                                       f"{spec_entries.get(argument)!r}", agent=self.name, argument=argument)
        return agent, agent_layout(agent, self.key_offsets)

    sensitivity = declared_entry("sensitivity", "The declared gradient sensitivity.")
    smoothness = declared_entry("smoothness", "The declared L_p.")

    def _absent(self, what: str) -> DeclarationError:
        return DeclarationError(f"the driver holds no {what} of an agent built by its factory on its host; declare "
                                "the public settings (its pc.Declared record) on its pc.AgentSpec", agent=self.name,
                                argument=what)

    @property
    def objective(self) -> cp.Expression:
        """Not in the driver: raises DeclarationError."""
        raise self._absent("objective")

    @property
    def constraints(self) -> list[cp.Constraint]:
        """Not in the driver: raises DeclarationError."""
        raise self._absent("constraints")

    @property
    def variables(self) -> list[cp.Variable]:
        """Not in the driver: raises DeclarationError."""
        raise self._absent("variables")

    def public_layout(self) -> AgentLayout:
        """The driver's layout of the agent: its shared keys alone, stacked in the declared order."""
        sizes = [int(np.prod(shape, dtype=int)) for shape in self.shapes.values()]
        return AgentLayout(name=self.name, shapes=tuple(self.shapes.values()),
                           offsets=tuple(np.cumsum([0, *sizes[:-1]]).tolist()), dim=int(sum(sizes)),
                           shared_local=np.arange(sum(sizes)),
                           shared_global=np.concatenate([self.key_offsets[key] + np.arange(size)
                                                         for key, size in zip(self.shapes, sizes, strict=True)]))

    def __repr__(self) -> str:
        return f"AgentSpec(name={self.name!r}, factory={self.factory!r}, shapes={self.shapes})"


class DistributedProblem:
    """A set of agents that agree on shared keys: the paper's model (2), in general form.

    Validation happens here, at construction: every agent is DCP (checked by
    `Agent`), no variable belongs to two agents, every key has one shape
    everywhere, every local set W_p is non-empty (a feasibility solve per agent), and the sets meet on the
    shared keys (one feasibility solve of all of them).

    ``penalty_rule``: the builder's penalty rule for this problem (a `privcvx.schedules.PenaltyRule`), which the ADMM
    defaults use in place of the library's (`privcvx.algorithms.linearized_admm.exact_step_penalty`); a ``rho``
    given to the algorithm still wins.
    """

    def __init__(self, agents: Sequence[Agent], metrics: Mapping[str, Metric] | None = None,
                 info: Mapping[str, Any] | None = None, penalty_rule: PenaltyRule | None = None) -> None:
        if not isinstance(agents, Sequence) or isinstance(agents, str):
            raise DeclarationError(f"must be a list of pc.Agent, got {agents!r}", argument="agents")
        agents = list(agents)
        if not agents:
            raise DeclarationError("a distributed problem needs at least one agent", argument="agents")
        owners: dict[int, str] = {}
        names: set[str] = set()
        for i, agent in enumerate(agents):
            if not isinstance(agent, Agent):
                raise DeclarationError(f"item {i} is not a pc.Agent: {agent!r}", argument="agents")
            if agent.name is None:
                agent.name = f"agent-{i}"
            if agent.name in names:
                raise DeclarationError("two agents have this name", agent=agent.name, argument="name")
            names.add(agent.name)
            for var in agent.variables:
                if var.id in owners:
                    raise DeclarationError(
                        f"variable {var.name()} also belongs to agent {owners[var.id]!r}; each agent "
                        "needs its own variables (consensus is declared through `shared`)",
                        agent=agent.name, argument="shared")
                owners[var.id] = agent.name
        self.agents: list[Agent] | list[AgentSpec] = agents
        self._declare(metrics, info, penalty_rule,
                      [(agent.name, {key: tuple(expr.shape) for key, expr in agent.shared.items()})
                       for agent in agents])
        self._lay_out([agent_layout(agent, self.key_offsets) for agent in agents])
        for agent in agents:
            _check_feasible(agent)
        try:
            self._check_intersection()
        except cp.error.SolverError as exc:
            raise InfeasibleLocalSetError(f"the feasibility solve of the agents' common set failed: {exc}",
                                          argument="agents") from exc

    def _declare(self, metrics: Mapping[str, Metric] | None, info: Mapping[str, Any] | None,
                 penalty_rule: PenaltyRule | None, shared: list[tuple[str, dict[Hashable, tuple[int, ...]]]]) -> None:
        """The metrics, the info, the penalty rule and the global layout of w from the agents' shared keys' shapes."""
        if penalty_rule is not None and not isinstance(penalty_rule, PenaltyRule):
            raise DeclarationError(f"must be a pc.schedules.PenaltyRule, got {penalty_rule!r}",
                                   argument="penalty_rule")
        self.penalty_rule = penalty_rule
        if metrics is not None and not isinstance(metrics, Mapping):
            raise DeclarationError(f"must be a dict name -> callable(w), got {metrics!r}", argument="metrics")
        self.metrics: dict[str, Metric] = dict(metrics or {})
        for metric_name, metric in self.metrics.items():
            if not callable(metric):
                raise DeclarationError(f"metric {metric_name!r} is not callable", argument="metrics")
        self.info: dict[str, Any] = dict(info or {})
        self.key_shapes: dict[Hashable, tuple[int, ...]] = {}
        key_owner: dict[Hashable, str] = {}
        for name, shapes in shared:
            for key, shape in shapes.items():
                if key in self.key_shapes and self.key_shapes[key] != shape:
                    raise DeclarationError(
                        f"shared key {key!r} has shape {shape} here but {self.key_shapes[key]} in agent "
                        f"{key_owner[key]!r}", agent=name, argument="shared")
                self.key_shapes.setdefault(key, shape)
                key_owner.setdefault(key, name)
        self.keys: list[Hashable] = list(self.key_shapes)
        holders = Counter(key for _, shapes in shared for key in shapes)
        lonely = [key for key in self.keys if holders[key] == 1]
        if len(shared) > 1 and lonely:
            warnings.warn(f"shared keys held by one agent only, which nothing couples to the others (a typo?): "
                          f"{', '.join(f'{key!r} ({key_owner[key]})' for key in lonely[:5])}"
                          f"{' ...' if len(lonely) > 5 else ''}", ModelingWarning, stacklevel=3)
        sizes = [int(np.prod(s, dtype=int)) for s in self.key_shapes.values()]
        self.key_offsets: dict[Hashable, int] = dict(zip(self.keys, np.cumsum([0, *sizes[:-1]]).tolist(),
                                                         strict=True))
        self.dim = int(sum(sizes))

    def _lay_out(self, layouts: list[AgentLayout]) -> None:
        self.layouts = layouts
        #: How many agents share each global entry: the denominators of the server step (line 5).
        self.multiplicity = np.zeros(self.dim)
        for layout in self.layouts:
            np.add.at(self.multiplicity, layout.shared_global, 1.0)

    @classmethod
    def from_factories(cls, specs: Sequence[AgentSpec], metrics: Mapping[str, Metric] | None = None,
                       info: Mapping[str, Any] | None = None,
                       penalty_rule: PenaltyRule | None = None) -> DistributedProblem:
        """A problem whose agents are built where they run, each by its `AgentSpec`'s factory.

        The driver lays out w from the specs' public shapes alone; every host (the driver itself for
        ``backend="serial"``, a worker process, a Ray actor) calls its agents' factories and checks each built
        agent against its spec. The agents' data, objectives and noise states never exist in the driver, so
        `solve_centralized` raises (build an ordinary problem from the same data for a reference), the
        local sets are not checked for feasibility at declaration, and ``checkpoint=`` needs every spec's
        ``shard`` path (each host writes its agents' state there). See docs/deployment.md.
        """
        if not isinstance(specs, Sequence) or isinstance(specs, str) or not specs:
            raise DeclarationError(f"must be a non-empty list of pc.AgentSpec, got {specs!r}", argument="specs")
        specs = list(specs)
        names: set[str] = set()
        for i, spec in enumerate(specs):
            if not isinstance(spec, AgentSpec):
                raise DeclarationError(f"item {i} is not a pc.AgentSpec: {spec!r}", argument="specs")
            if spec.name in names:
                raise DeclarationError("two agents have this name", agent=spec.name, argument="name")
            names.add(spec.name)
        problem = cls.__new__(cls)
        problem.agents = specs
        problem._declare(metrics, info, penalty_rule, [(spec.name, spec.shapes) for spec in specs])
        for spec in specs:
            spec.key_offsets = {key: problem.key_offsets[key] for key in spec.shapes}
        problem._lay_out([spec.public_layout() for spec in specs])
        return problem

    @property
    def data_local(self) -> bool:
        """Whether the agents are built on their hosts by factories (`from_factories`)."""
        return any(isinstance(agent, AgentSpec) for agent in self.agents)

    @property
    def names(self) -> list[str]:
        return [agent.name for agent in self.agents]

    @property
    def declared(self) -> dict[str, Declared]:
        """Every agent's public declarations (`pc.Declared`), by agent name."""
        return {agent.name: agent.declared for agent in self.agents}

    def unflatten(self, w: np.ndarray) -> dict[Hashable, np.ndarray]:
        """The global vector as ``{key: array shaped like the key}``."""
        w = np.asarray(w, dtype=float)
        out = {}
        for key, shape in self.key_shapes.items():
            start = self.key_offsets[key]
            out[key] = w[start:start + int(np.prod(shape, dtype=int))].reshape(shape, order="F")
        return out

    def layout_description(self) -> dict[str, Any]:
        """The public layout as JSON-able data (``result.info["layout"]``): keys, and each agent's variables.

        ``keys``: ``[str(key), shape, offset in w]``; ``agents``: ``{name: [[variable name, shape, offset in z_p]]}``.
        """
        def variables(agent: Agent | AgentSpec, layout: AgentLayout) -> list[list[Any]]:
            names = [str(key) for key in agent.shapes] if isinstance(agent, AgentSpec) else \
                [var.name() for var in agent.variables]  # a factory-built agent: its shared keys only
            return [[name, list(shape), offset] for name, shape, offset in
                    zip(names, layout.shapes, layout.offsets, strict=True)]

        return {"keys": [[str(key), list(shape), self.key_offsets[key]] for key, shape in self.key_shapes.items()],
                "agents": {agent.name: variables(agent, layout)
                           for agent, layout in zip(self.agents, self.layouts, strict=True)}}

    def write_back(self, z: Sequence[np.ndarray]) -> None:
        """Give every agent's CVXPY variables the values of its local vector z_p (as ``cp.Problem.solve`` does)."""
        if self.data_local:  # the variables live on the hosts
            return
        for agent, layout, z_p in zip(self.agents, self.layouts, z, strict=True):
            for variable, value in zip(agent.variables, layout.split(np.asarray(z_p, dtype=float)), strict=True):
                variable.save_value(value)

    def _consensus_model(self, agents: Sequence[Agent], objective: bool) -> tuple[cp.Problem, dict, dict]:
        """The agents' model with the consensus equalities: their objectives (or 0) and constraints.

        A whole shared variable without CVXPY attributes is replaced by its key's global variable (fewer
        variables and no equality rows); an indexed one, or one with attributes (``nonneg=True``, ``bounds=``,
        ...), is kept, so its attributes stay in the model, and tied to the global variable by an equality.
        """
        keys = {key for agent in agents for key in agent.shared}
        globals_ = {key: cp.Variable(shape if shape else ()) for key, shape in self.key_shapes.items() if key in keys}
        substitute = {expr.id: globals_[key] for agent in agents for key, expr in agent.shared.items()
                      if isinstance(expr, cp.Variable) and not _has_attributes(expr)}
        constraints: list[cp.Constraint] = []
        for agent in agents:
            constraints.extend(c.copy([_substituted(a, substitute) for a in c.args]) for c in agent.constraints)
            constraints.extend(_substituted(expr, substitute) == globals_[key] for key, expr in agent.shared.items()
                               if expr.id not in substitute)
        goal = cp.sum([_substituted(agent.objective, substitute) for agent in agents]) if objective else 0
        return cp.Problem(cp.Minimize(goal), constraints), globals_, substitute

    def _check_intersection(self) -> None:
        """Raise InfeasibleLocalSetError when the local sets W_p admit no common w (no consensus is possible).

        One feasibility solve of all the public sets at set-up. On failure, the shortest infeasible prefix of the
        agents is found by bisection (about log2 n solves; each agent's own set is non-empty), and its last agent
        is paired with each earlier one that shares a key with it (at most n - 1 small solves) to name two whose
        sets do not meet; O(n log n) solves in all, not one per pair of agents.
        """
        if len(self.agents) < 2 or not any(agent.constraints for agent in self.agents):
            return
        if _feasible(self._consensus_model(self.agents, objective=False)[0]):
            return
        feasible, infeasible = 1, len(self.agents)  # the prefixes of these lengths are, and are not, feasible
        while infeasible - feasible > 1:
            middle = (feasible + infeasible) // 2
            if _feasible(self._consensus_model(self.agents[:middle], objective=False)[0]):
                feasible = middle
            else:
                infeasible = middle
        last = self.agents[infeasible - 1]
        for first in self.agents[:infeasible - 1]:
            if set(first.shared) & set(last.shared) and not _feasible(
                    self._consensus_model([first, last], objective=False)[0]):
                raise InfeasibleLocalSetError(
                    f"the local sets of agents {first.name!r} and {last.name!r} do not intersect on their "
                    "shared keys, so the agents can never agree (check the constraints' bounds)",
                    agent=first.name, argument="constraints")
        together = [agent.name for agent in self.agents[:infeasible]]
        raise InfeasibleLocalSetError(f"the local sets of agents {together[:6]}{' ...' if len(together) > 6 else ''} "
                                      f"have no common point on the shared keys, so the agents can never agree "
                                      f"({last.name!r} meets each of the others, but not all of them together)",
                                      agent=last.name, argument="agents")

    def solve_centralized(self, **solver_options: Any) -> CentralizedSolution:
        """Solve the whole problem as one CVXPY model with the consensus equalities.

        Returns the optimal value sum_p f_p(z_p*), the global vector w* and every agent's z_p*.
        Keyword arguments go to ``cp.Problem.solve``; by default Clarabel runs with tight
        tolerances (`REFERENCE_SOLVER`), since this is the yardstick of every run.
        A problem with a nonconvex agent gets a multi-start local solve instead
        ([`privcvx.nonconvex.local_reference`][privcvx.nonconvex.local_reference], status ``"local_optimum"``).
        """
        if self.data_local:
            raise CentralizedSolveError("the agents of this problem are built by factories on their hosts, so the "
                                        "driver holds none of their data; for a reference, build an ordinary "
                                        "pc.DistributedProblem from the same data", argument="agents")
        if not all(agent.convex for agent in self.agents):
            from privcvx.nonconvex import local_reference

            return local_reference(self, **solver_options)
        solver_options = solver_options or dict(REFERENCE_SOLVER)
        problem, globals_, substitute = self._consensus_model(self.agents, objective=True)
        try:
            with quiet_inaccurate():  # one privcvx warning below instead
                problem.solve(**solver_options)
        except (cp.error.SolverError, cp.error.DCPError, TypeError, ValueError) as exc:
            raise CentralizedSolveError(f"the centralized solve failed: {exc}", argument="solver_options") from exc
        reference_status_warning(problem.status)
        if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
            raise DeclarationError(f"the centralized problem is {problem.status}", argument="agents")
        w = np.concatenate([np.asarray(globals_[k].value, dtype=float).reshape(-1, order="F")
                            for k in self.keys])
        z = [layout.flatten([substitute.get(v.id, v).value for v in agent.variables])
             for agent, layout in zip(self.agents, self.layouts, strict=True)]
        self.write_back(z)  # substituted variables get their key's value too
        return CentralizedSolution(value=float(problem.value), w=w, z=z, status=problem.status,
                                   solve_time=float(problem.solver_stats.solve_time or float("nan")))

    def solve(self, algorithm: Algorithm | None = None, topology: Topology | None = None, *, rounds: int = 100,
              seed: int | str | None = None, backend: Any = "serial", progress: bool = False,
              callback: Callable[[dict[str, Any]], Any] | None = None, checkpoint: Any = None, resume: Any = None,
              reference: bool = False, diagnostics: bool = True, timeout: float | None = None,
              transcript: str = "memory", transcript_path: Any = None, **settings: Any) -> Result:
        """Run a distributed algorithm on this problem and return a [`Result`][privcvx.results.Result].

        With no ``algorithm`` it runs Algorithm 1 of Ryu & Kim, ``pc.algorithms.LinearizedADMM(**settings)``
        (``local_updates``, ``rho``, ``eta``, ``privacy``, ``tol``); otherwise the settings belong to the
        algorithm's constructor. ``topology`` defaults to the algorithm's (``Topology.star()`` for
        Algorithm 1). Run options:

        * ``rounds``: T; ``seed``: None (the default: OS entropy under privacy, ``"secure"``), or an int, which
          makes the noise reproducible by anyone who knows it (research runs; it warns under privacy);
        * ``backend``: "serial", "process", "ray" (a local Ray instance), or ``pc.runtime.Ray(address=...)``
          (a Ray cluster; see docs/deployment.md); ``progress``: a progress bar;
        * ``callback(row)``: called after every round with the history row; returning ``False`` stops;
        * ``checkpoint``: a path, written atomically after every round; ``resume``: continue from one, with
          bitwise-identical results;
        * ``reference``: also solve the centralized problem (``result.reference``, and gap columns);
        * ``diagnostics``: keep the columns computed from private data (``result.info["diagnostics"]``); with
          ``False`` the history holds only values computed from the messages, and ``result.z`` only what each
          agent sent (a bool: the string "false" is refused);
        * ``timeout``: the longest wait, in seconds, for one answer of a worker process or a Ray actor (``None``:
          600 s, `privcvx.runtime.backends.DEFAULT_TIMEOUT`); a host that does not answer in time fails the run with
          ``RunFailed`` naming it;
        * ``transcript``: where ``result.transcript`` keeps the messages: ``"memory"`` (the default), ``"disk"``
          (appended to ``transcript_path``, a new file created owner-only without following links: memory stays
          flat in the rounds) or ``"none"`` (kept nowhere; the history and ``result.average()`` are unchanged).

        Ctrl-C ends the run with ``result.status == "interrupted"`` and the rounds so far, on every backend.

        A run that fails part-way raises [`RunFailed`][privcvx.errors.RunFailed], whose ``.result`` keeps the
        history up to the failure.
        """
        from privcvx.algorithms import LinearizedADMM
        from privcvx.runtime import run

        if algorithm is None:
            known = LinearizedADMM._parameter_names()
            unknown = sorted(set(settings) - set(known))
            if unknown:
                raise ParameterError(f"unknown option; solve() takes the run options and {known}",
                                     argument=unknown[0])
            algorithm = LinearizedADMM(**settings)
        elif settings:
            name = next(iter(settings))
            raise ParameterError(f"give the algorithm's settings to its constructor, e.g. "
                                 f"{type(algorithm).__name__}({name}=...)", argument=name)
        return run(self, algorithm, topology, rounds=rounds, seed=seed, backend=backend, progress=progress,
                   callback=callback, checkpoint=checkpoint, resume=resume, reference=reference,
                   diagnostics=diagnostics, timeout=timeout, transcript=transcript, transcript_path=transcript_path)

    def __repr__(self) -> str:
        return f"DistributedProblem(agents={self.names}, keys={len(self.keys)}, dim={self.dim})"


def _substituted(expr: Any, substitute: dict[int, cp.Variable]) -> Any:
    """A copy of ``expr`` with the variables in ``substitute`` (by id) replaced."""
    if isinstance(expr, cp.Variable):
        return substitute.get(expr.id, expr)
    if not expr.args:
        return expr
    return expr.copy([_substituted(arg, substitute) for arg in expr.args])


def _feasible(problem: cp.Problem) -> bool:
    """Whether a feasibility problem has a point; a solver failure raises SolverError."""
    with quiet_inaccurate():  # an inaccurate feasible point is still a point
        problem.solve()
    return problem.status not in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE)


def _check_feasible(agent: Agent) -> None:
    """Raise InfeasibleLocalSetError when W_p is empty (a feasibility solve at set-up)."""
    if not agent.constraints:
        return
    try:
        feasible = _feasible(cp.Problem(cp.Minimize(0), agent.constraints))
    except cp.error.SolverError as exc:
        raise InfeasibleLocalSetError(f"the feasibility solve of W_p failed: {exc}",
                                      agent=agent.name, argument="constraints") from exc
    if not feasible:
        raise InfeasibleLocalSetError("the local set W_p is empty (the constraints are infeasible)",
                                      agent=agent.name, argument="constraints")
