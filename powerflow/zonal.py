"""The zonal decomposition (72) of the SOC relaxation as a ``pc.DistributedProblem``."""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

import cvxpy as cp
import numpy as np
import pandapower as pp

import privcvx as pc
from privcvx.algorithms.privacy_audit import NeighbouringPair
from privcvx.errors import DeclarationError, PrivacyError, check_scalar, require_positive
from privcvx.schedules import PerKeyBalancing

from .data import NetworkData, network_data
from .model import SocModel, as_net
from .release_bounds import zone_release_bound
from .zones import zone_mapping

#: The gradient sensitivities of `zonal_problem`: ``"exact"`` (valid, the default) and ``"paper"`` (nominal).
SENSITIVITIES = ("exact", "paper")
#: The forms of `zonal_problem`: ``"general"`` (72), the zones share their tie variables; ``"full"``, every zone holds
#: the whole network's vector and all agents share it (full consensus, for methods that need it, e.g. DPDG).
CONSENSUS = ("general", "full")
#: The zones' objectives: Eq. (28) (the paper's experiments), generation cost with exact balance (non-private: the
#: loads sit in the constraints), and generation cost plus ``penalty`` times Eq. (28) (loads private in f_p).
OBJECTIVES = ("load_shedding", "cost", "cost+shedding")
#: The start of the defaults' penalty for ``objective="cost"``, times the largest zone's L_p (`cost_penalty_rule`).
COST_RHO_FACTOR = 4.0
#: The default penalty gamma of ``objective="cost+shedding"`` ($/h per p.u.^2 of squared mismatch). A mismatch settles
#: near lambda_i / (2 gamma) for a marginal price lambda_i (2000-4000 $/h per p.u. in MATPOWER's cases): at 1e6 the
#: centralized optimum of case14 sheds 2.8 MW of 259 (1e5: 27.5 MW); the gradient sensitivity, hence ObjPert's
#: noise, grows as gamma (docs/powerflow.md, "Cost OPF").
DEFAULT_PENALTY = 1e6

#: Why Sec. 6.1.1's gradient sensitivity is nominal (``pc.Sensitivity.nominal``).
NOMINAL_GRADIENT = ("Delta = 2 beta of Sec. 6.1.1: one load moved by beta changes a zone's Eq. (28) gradient by "
                    "2 beta ||a_i||, up to 3.6x more (docs/powerflow.md)")
#: Why Sec. 6.1.1's OutPert sensitivity beta is nominal (every zone's ``declared.output_sensitivity``).
NOMINAL_OUTPUT = ("Delta_out = beta of Sec. 6.1.1: OutPert's projected step moves by up to 3.1 beta at t = 1 "
                  "(docs/powerflow.md); the valid one is OutputPerturbation(sensitivity='derived')")


def gradient_oracle(model: SocModel, penalty: float = 1.0,
                    cost: bool = False) -> Callable[[np.ndarray], np.ndarray]:
    """Numpy gradient of ``penalty`` times Eq. (28), ``2 penalty A^T (A x + d)``, reading the current load
    Parameters; with ``cost``, plus the gradient ``2 c2 pg + c1`` of the polynomial generation cost.

    A ``functools.partial`` of a module-level function, so that it pickles to worker processes.
    """
    linear = np.zeros(model.x.size)
    curvature = np.zeros(model.x.size)
    if cost:
        c2, c1, _ = model.data.cost[model.balance_gens].T
        columns = model.index("pg", model.balance_gen_positions)
        linear[columns], curvature[columns] = c1, 2 * c2
    return functools.partial(_mismatch_gradient, model.mismatch_matrix, model.mismatch_matrix.T.tocsr(), model,
                             penalty, linear, curvature)


def _mismatch_gradient(a: Any, at: Any, model: SocModel, penalty: float, linear: np.ndarray, curvature: np.ndarray,
                       x: np.ndarray) -> np.ndarray:
    return 2.0 * penalty * (at @ (a @ x + np.concatenate([model.pd.value, model.qd.value]))) + linear + curvature * x


#: The neighbouring relation of the zonal problem (Sec. 6.1.1): two load vectors are neighbours when they
#: differ in one entry (an active or a reactive load of one bus) by at most beta. Every sensitivity below is
#: for it (only "exact" is a valid bound; "paper" is nominal, docs/powerflow.md).
RELATION = "one load entry changed by at most beta"


def gradient_sensitivity(model: SocModel, beta: float, kind: str, penalty: float = 1.0) -> pc.Sensitivity:
    """Gradient sensitivity of ``penalty`` times Eq. (28) for loads that differ by at most ``beta`` in one entry.

    The gradient is ``2 sum_i s_i a_i``; changing one load d_i by beta changes it by
    ``2 beta a_i``. ``"exact"`` bounds its l1 / l2 norm by the largest l1 / l2 norm of a
    mismatch row a_i of the zone, Eqs. (18) and (21). The bound is attained, so it is the exact sensitivity
    of the gradient, which ObjPert releases (the projection onto W_p that follows is post-processing).
    ``"paper"`` is Sec. 6.1.1's ``Delta_1 = Delta_2 = 2 beta``, which equals ``2 beta ||a_i||`` only for a row
    with a single unit entry: it is *nominal* (``Sensitivity.nominal`` is `NOMINAL_GRADIENT`).

    ``objective="cost+shedding"``: f_p(x) = C_p(pg) + gamma ||A x + d||^2. The cost C_p does not depend on the loads,
    so moving d_i by beta moves the gradient by ``2 gamma beta a_i`` at every point: the bound times
    ``penalty`` = gamma, and again attained.
    """
    if kind == "paper":
        return pc.Sensitivity(l1=2 * beta, l2=2 * beta, nominal=NOMINAL_GRADIENT)
    l1, l2 = model.row_norms()
    return pc.Sensitivity(l1=2 * penalty * beta * l1, l2=2 * penalty * beta * l2)


def _shared_keys(data: NetworkData, model: SocModel, zone_of_bus: np.ndarray,
                 bus_zone_count: np.ndarray) -> dict[Hashable, cp.Expression]:
    """Consensus keys of a zone (the y_z of (72)): boundary-bus and cut-line variables."""
    label = data.bus_labels
    shared: dict[Hashable, cp.Expression] = {}
    for k in np.flatnonzero(bus_zone_count[model.buses] > 1):
        shared[f"w:{label[model.buses[k]]}"] = model.x[int(model.index("w", k))]
    for k, pair in enumerate(model.pairs):
        a, b = data.pair_from[pair], data.pair_to[pair]
        if zone_of_bus[a] != zone_of_bus[b]:
            for block in ("wr", "wi"):
                shared[f"{block}:{label[a]}-{label[b]}"] = model.x[int(model.index(block, k))]
    for k, branch in enumerate(model.branches):
        if zone_of_bus[data.f[branch]] != zone_of_bus[data.t[branch]]:
            for block in ("pf", "qf", "pt", "qt"):
                shared[f"{block}:{data.branch_labels[branch]}"] = model.x[int(model.index(block, k))]
    return shared


def zonal_problem(net_or_name: pp.pandapowerNet | str, zones: int | str | Mapping[int, Hashable] = 3, *,
                  objective: str = "load_shedding", penalty: float = DEFAULT_PENALTY, beta: float = 0.01,
                  sensitivity: str = "exact", seed: int = 0, consensus: str = "general") -> pc.DistributedProblem:
    """Build the zonal problem (72) with one agent ``"zone-<k>"`` per zone.

    Zone k's constraints are F_z of (72): (71f)-(71l) over its lines L_z, (71d) over its extended node set
    V_z and (71e) over its generators. Its objective (``objective``, one of `OBJECTIVES`):

    * ``"load_shedding"`` (the default, the paper's experiments): Eq. (28), the squared active and reactive
      mismatches of its own buses, with the loads as ``cp.Parameter``s (the private data);
    * ``"cost"``: the generation cost of its own generators (pandapower's ``poly_cost``, or ``pwl_cost`` as an
      epigraph; `SocModel.generation_cost`) with exact balance of its own buses (mismatches = 0). Its centralized
      optimum is ``powerflow.socopf(net, objective="cost")``. Non-private: the loads are in the constraints, and
      the zones declare no sensitivity;
    * ``"cost+shedding"``: the generation cost plus ``penalty`` (gamma, $/h per p.u.^2) times Eq. (28), the loads
      private in f_p: the DP-ready cost OPF. Its gradient sensitivity is gamma times that of Eq. (28)
      (`gradient_sensitivity`), so the noise ObjPert needs grows as gamma, while the shed load falls as 1/gamma
      (docs/powerflow.md, "Cost OPF").

    Variables of cut lines (``"wr:<a>-<b>"``, ``"wi:<a>-<b>"``, ``"pf:<branch>"``, ``"qf:..."``, ``"pt:..."``,
    ``"qt:..."``) and of buses in more than one V_z (``"w:<bus>"``) are shared; bus labels are pandapower bus
    indices and branch labels ``line<i>`` / ``trafo<i>``.

    ``zones`` is a number (see [`powerflow.partition`][powerflow.zones.partition], with ``seed``), ``"area"``
    (the network's own areas, [`area_zones`][powerflow.zones.area_zones]) or a mapping
    ``{pandapower bus index: zone}`` ([`zone_mapping`][powerflow.zones.zone_mapping]). ``beta`` (p.u.) is the
    adjacency of Sec. 6.1.1 and
    ``sensitivity`` is ``"exact"`` (the default, a valid bound) or ``"paper"`` (Sec. 6.1.1's
    2 beta, nominal: only on request, with a ``pc.NominalPrivacyWarning``, and only for Eq. (28); see
    `gradient_sensitivity`).

    Every zone's public declarations are its ``agent.declared`` (`pc.Declared`), for `RELATION`: its gradient
    ``sensitivity`` (none for "cost") and, with "exact", its ``coordinate_sensitivity`` B_inf = 2 gamma beta max_ik
    |a_ik| (the largest entry of a mismatch row, attained), ``smoothness`` (L_p, see `SocModel.smoothness`),
    ``release_bound`` (PR-ADMM's `zone_release_bound`; none for "cost"), ``output_sensitivity`` (the paper's OutPert
    sensitivity beta, nominal: `NOMINAL_OUTPUT`; the valid OutPert calibration is
    ``pc.OutputPerturbation(mechanism, sensitivity="derived")``) and ``relation``. ``problem.info`` holds the
    decomposition, which is not about the loads: ``"zones"`` (the bus-to-zone mapping), ``"models"`` (the `SocModel`
    of each zone), ``"cut_branches"``, ``"case"``, and the builder's settings ``"beta"``, ``"sensitivity"``,
    ``"objective"``, ``"penalty"`` (gamma; 1 for Eq. (28), none for "cost") and ``"consensus"``.

    ``consensus="full"`` (`CONSENSUS`) is the full-consensus form of the same problem: zone k's agent holds the whole
    network's vector x (its model is the network's `SocModel` with ``balance`` = the zone's buses), shared whole
    (``shared=x``). Its objective is the zone's, as above: Eq. (28) over its own buses' mismatches with its private
    loads (its generation cost over its own generators); its set is the whole network's (71d)-(71l), which holds no
    load and is public network data (lines, generators, voltage limits), plus, for "cost", the exact balance of its
    own buses. The sum of the objectives is the centralized objective and the intersection of the sets the
    centralized set, so the optimum is `socopf`'s. Its declarations are the zone's (the same mismatch rows, over more
    columns).

    Raises `DeclarationError` for a network without cost data under a cost objective (naming ``net.poly_cost``)
    and for a zone with neither a generator nor a tie line (naming the zone): it could only shed its loads.
    """
    beta = require_positive(beta, argument="beta", error=PrivacyError)
    objective = check_scalar(objective, argument="objective", choices=OBJECTIVES, error=DeclarationError)
    weight = {"load_shedding": 1.0, "cost": None,
              "cost+shedding": require_positive(penalty, argument="penalty", error=PrivacyError)}[objective]
    sensitivity = check_scalar(sensitivity, argument="sensitivity", choices=SENSITIVITIES, error=PrivacyError)
    full = check_scalar(consensus, argument="consensus", choices=CONSENSUS, error=DeclarationError) == "full"
    if sensitivity == "paper":
        if objective != "load_shedding":
            raise PrivacyError('Sec. 6.1.1\'s nominal 2 beta is for Eq. (28) only; use sensitivity="exact"',
                               argument="sensitivity")
        warnings.warn(f'sensitivity="paper" is nominal, not a valid bound: {NOMINAL_GRADIENT}; '
                      'its epsilons must not be published as guarantees (use "exact")',
                      pc.NominalPrivacyWarning, stacklevel=2)
    net = as_net(net_or_name, argument="net_or_name")
    data = network_data(net)
    mapping = zone_mapping(net, data, zones, seed)
    names = sorted(set(mapping.values()), key=lambda z: (str(type(z)), z))
    zone_of_bus = np.array([names.index(mapping[int(b)]) for b in data.bus_labels])
    models = [SocModel(data, np.arange(data.nb) if full else np.flatnonzero(zone_of_bus == k), name=f"zone_{zone}",
                       balance=np.flatnonzero(zone_of_bus == k)) for k, zone in enumerate(names)]
    _check_supplied(data, models, names, zone_of_bus)
    bus_zone_count = np.zeros(data.nb, dtype=int)
    for model in models:
        bus_zone_count[model.buses] += 1
    agents = [pc.Agent(*_zone_objective(model, objective, weight),
                       shared=model.x if full else _shared_keys(data, model, zone_of_bus, bus_zone_count),
                       name=f"zone-{zone}", **_zone_declarations(model, objective, weight, beta, sensitivity))
              for zone, model in zip(names, models, strict=True)]
    cut = [data.branch_labels[b] for b in range(len(data.f)) if zone_of_bus[data.f[b]] != zone_of_bus[data.t[b]]]
    info = {"zones": mapping, "models": models, "cut_branches": cut, "beta": beta, "sensitivity": sensitivity,
            "case": data.name, "objective": objective, "penalty": weight, "consensus": consensus}
    return pc.DistributedProblem(agents, info=info,
                                 penalty_rule=None if objective == "load_shedding" else cost_penalty_rule(models))


def cost_penalty_rule(models: list[SocModel]) -> PerKeyBalancing:
    """The defaults' penalty for the cost objectives (`privcvx.algorithms.linearized_admm.exact_step_penalty`, the
    non-private exact step): per-key residual balancing that never decreases, from `COST_RHO_FACTOR` times the
    largest zone's cost curvature 2 max c2 (p.u.; public data, `SocModel.cost_smoothness`).

    The library's rule for Eq. (28) (free balancing from max L_p) halves rho in the first rounds, while w still moves
    from its zero start, down to about 30, far below the price scale of a cost OPF (its duals are marginal costs,
    1e2-1e4 $/h per p.u.): case118 and case300 then miss PowerModelsADA's criterion within 300 rounds
    (docs/performance.md, "Cost OPF beside PowerModelsADA"). One factor for every case, no tuning per case."""
    curvature = max(model.cost_smoothness() for model in models)
    return PerKeyBalancing(COST_RHO_FACTOR * curvature if curvature > 0 else None, until=None, mode="nondecreasing")


def _zone_objective(model: SocModel, objective: str,
                    weight: float | None) -> tuple[cp.Expression, list[cp.Constraint]]:
    """A zone's f_p and W_p for ``objective`` (`zonal_problem`)."""
    if objective == "load_shedding":
        return model.load_shedding(), model.constraint_list
    if objective == "cost":
        return model.generation_cost(), [*model.constraint_list, model.mismatch == 0]
    return model.generation_cost() + weight * model.load_shedding(), model.constraint_list


def _zone_declarations(model: SocModel, objective: str, weight: float | None, beta: float,
                       sensitivity: str) -> dict[str, Any]:
    """A zone's gradient oracle and public declarations (``declared``, for `RELATION`) for ``objective``: the nominal
    OutPert sensitivity, and the gradient sensitivity, release bound and L_p (no sensitivity and no release bound for
    "cost", which is non-private; no oracle and no L_p for a piecewise-linear cost, which is not smooth)."""
    declared = pc.Declared(output_sensitivity=pc.Sensitivity(l1=beta, l2=beta, nominal=NOMINAL_OUTPUT),
                           relation=RELATION)
    if objective == "cost":
        return {"declared": declared.replace(smoothness=None if model.data.pwl_cost else model.cost_smoothness())}
    declared = declared.replace(sensitivity=gradient_sensitivity(model, beta, sensitivity, weight),
                                release_bound=zone_release_bound(beta, weight))
    if sensitivity == "exact":  # local-DP B_inf: 2 gamma beta a_i moves coordinate k by 2 gamma beta |a_ik|
        largest = float(abs(model.mismatch_matrix).max())
        declared = declared.replace(coordinate_sensitivity=2.0 * weight * beta * largest)
    if objective == "load_shedding":
        return {"declared": declared.replace(smoothness=model.smoothness()), "gradient": gradient_oracle(model)}
    if model.data.pwl_cost:
        return {"declared": declared}
    return {"declared": declared.replace(smoothness=model.cost_smoothness() + weight * model.smoothness()),
            "gradient": gradient_oracle(model, weight, cost=True)}


def _check_supplied(data: NetworkData, models: list[SocModel], names: list[Hashable],
                    zone_of_bus: np.ndarray) -> None:
    """Refuse a zone with neither a generator nor a tie line: nothing can supply its loads."""
    tied = set(zone_of_bus[data.f][zone_of_bus[data.f] != zone_of_bus[data.t]]) | set(
        zone_of_bus[data.t][zone_of_bus[data.f] != zone_of_bus[data.t]])
    for k, (zone, model) in enumerate(zip(names, models, strict=True)):
        if not len(model.balance_gens) and k not in tied:
            buses = data.bus_labels[model.balance].tolist()
            raise DeclarationError(f"zone {zone!r} (buses {buses[:10]}{' ...' if len(buses) > 10 else ''}) has no "
                                   "in-service generator and no tie line to another zone, so nothing can supply its "
                                   "loads", argument="zones")


@contextlib.contextmanager
def moved_load(model: SocModel, entry: int, beta: float) -> Iterator[None]:
    """Load entry ``entry`` of (pd, qd) moved by +``beta`` (`RELATION`) inside the block, restored after."""
    parameter, index = (model.pd, entry) if entry < model.pd.size else (model.qd, entry - model.pd.size)
    original = parameter.value.copy()
    moved = original.copy()
    moved[index] += beta
    parameter.value = moved
    try:
        yield
    finally:
        parameter.value = original


def worst_case_pairs(net_or_name: pp.pandapowerNet | str, zones: int | Mapping[int, Hashable] = 3, *,
                     objective: str = "load_shedding", penalty: float = DEFAULT_PENALTY, beta: float = 0.01,
                     sensitivity: str = "exact", seed: int = 0) -> Iterator[NeighbouringPair]:
    """The neighbours of `RELATION` that attain `gradient_sensitivity` (``privcvx.sensitivity_audit``).

    For each zone, the load entry whose mismatch row a_i has the largest l1 norm, and the one with the largest l2
    norm, moved by +beta: the zone's Eq. (28) gradient changes by 2 beta a_i at every point (``"cost+shedding"``:
    2 gamma beta a_i, the cost's gradient does not move), the "exact" bound. ``objective="cost"`` has no private
    f_p to audit (its loads are constraints) and is refused. Yields one pair per entry; the neighbour's loads are
    moved only until the next pair is asked for.
    """
    if objective == "cost":
        raise PrivacyError('objective="cost" is non-private (the loads are in the constraints): it declares no '
                           'sensitivity to audit; "cost+shedding" is its DP-ready form', argument="objective")
    settings = {"objective": objective, "penalty": penalty, "beta": beta, "sensitivity": sensitivity}
    original = zonal_problem(net_or_name, zones, seed=seed, **settings)
    neighbour = zonal_problem(net_or_name, original.info["zones"], **settings)
    for k, model in enumerate(neighbour.info["models"]):
        for entry in sorted({int(np.argmax(norms)) for norms in model.mismatch_row_norms()}):
            with moved_load(model, entry, beta):
                yield NeighbouringPair(original, neighbour, k)


def consensus_mismatch(problem: pc.DistributedProblem, result: pc.Result) -> np.ndarray:
    """PowerModelsADA's convergence measure per round (``calc_mismatch!`` with ``mismatch_method="norm"`` and
    ``calc_global_mismatch``): the l2 norm, over every zone, every neighbouring zone and every shared variable, of
    the zone's copy minus the neighbour's copy (p.u. and p.u.^2 here: the SOC relaxation's W-variables and flows).

    Read from the zones' releases in ``result.transcript``: entry t-1 is round t's. A variable held by m zones adds
    every ordered pair of copies, m (m - 1) terms.
    """
    names, layouts = problem.names, problem.layouts
    holders = np.zeros(problem.dim)
    for layout in layouts:
        holders[layout.shared_global] += 1
    released: dict[int, dict[str, np.ndarray]] = {}
    for message in result.transcript:
        if message.round > 0 and message.sender in names and "z" in message.payload:
            released.setdefault(message.round, {})[message.sender] = np.asarray(message["z"], float)
    mismatch = []
    for t in sorted(released):
        total, square = np.zeros(problem.dim), np.zeros(problem.dim)
        for name, layout in zip(names, layouts, strict=True):
            np.add.at(total, layout.shared_global, released[t][name])
            np.add.at(square, layout.shared_global, released[t][name] ** 2)
        # sum over ordered pairs (a - b)^2 = 2 (m sum a^2 - (sum a)^2)
        mismatch.append(math.sqrt(max(0.0, float(np.sum(2 * (holders * square - total ** 2))))))
    return np.array(mismatch)
