"""The zonal decomposition (72) of the SOC relaxation as a ``pc.DistributedProblem``."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

import cvxpy as cp
import numpy as np
import pandapower as pp

import privcvx as pc
from privcvx.algorithms.privacy_audit import NeighbouringPair
from privcvx.errors import PrivacyError, require_positive

from .data import NetworkData, network_data
from .model import SocModel, as_net
from .zones import zone_mapping

#: The gradient sensitivities of `zonal_problem`: ``"exact"`` (valid, the default) and ``"paper"`` (nominal).
SENSITIVITIES = ("exact", "paper")

#: Why Sec. 6.1.1's gradient sensitivity is nominal (``pc.Sensitivity.nominal``).
NOMINAL_GRADIENT = ("Delta = 2 beta of Sec. 6.1.1: one load moved by beta changes a zone's Eq. (28) gradient by "
                    "2 beta ||a_i||, up to 3.6x more (docs/powerflow.md)")
#: Why Sec. 6.1.1's OutPert sensitivity beta is nominal (``problem.info["output_sensitivity"]``).
NOMINAL_OUTPUT = ("Delta_out = beta of Sec. 6.1.1: OutPert's projected step moves by up to 3.1 beta at t = 1 "
                  "(docs/powerflow.md); the valid one is OutputPerturbation(sensitivity='derived')")


def gradient_oracle(model: SocModel) -> Callable[[np.ndarray], np.ndarray]:
    """Numpy gradient of Eq. (28), ``2 A^T (A x + d)``, reading the current load Parameters.

    A ``functools.partial`` of a module-level function, so that it pickles to worker processes.
    """
    return functools.partial(_mismatch_gradient, model.mismatch_matrix, model.mismatch_matrix.T.tocsr(), model)


def _mismatch_gradient(a: Any, at: Any, model: SocModel, x: np.ndarray) -> np.ndarray:
    return 2.0 * (at @ (a @ x + np.concatenate([model.pd.value, model.qd.value])))


#: The neighbouring relation of the zonal problem (Sec. 6.1.1): two load vectors are neighbours when they
#: differ in one entry (an active or a reactive load of one bus) by at most beta. Every sensitivity below is
#: for it (only "exact" is a valid bound; "paper" is nominal, docs/powerflow.md).
RELATION = "one load entry changed by at most beta"


def gradient_sensitivity(model: SocModel, beta: float, kind: str) -> pc.Sensitivity:
    """Gradient sensitivity of Eq. (28) for loads that differ by at most ``beta`` in one entry.

    The gradient is ``2 sum_i s_i a_i``; changing one load d_i by beta changes it by
    ``2 beta a_i``. ``"exact"`` bounds its l1 / l2 norm by the largest l1 / l2 norm of a
    mismatch row a_i of the zone, Eqs. (18) and (21). The bound is attained, so it is the exact sensitivity
    of the gradient, which ObjPert releases (the projection onto W_p that follows is post-processing).
    ``"paper"`` is Sec. 6.1.1's ``Delta_1 = Delta_2 = 2 beta``, which equals ``2 beta ||a_i||`` only for a row
    with a single unit entry: it is *nominal* (``Sensitivity.nominal`` is `NOMINAL_GRADIENT`).
    """
    if kind == "paper":
        return pc.Sensitivity(l1=2 * beta, l2=2 * beta, nominal=NOMINAL_GRADIENT)
    l1, l2 = model.row_norms()
    return pc.Sensitivity(l1=2 * beta * l1, l2=2 * beta * l2)


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
                  beta: float = 0.01, sensitivity: str = "exact", seed: int = 0) -> pc.DistributedProblem:
    """Build the zonal problem (72) with one agent ``"zone-<k>"`` per zone.

    Zone k's objective is Eq. (28), the squared active and reactive mismatches of its
    own buses with the loads as ``cp.Parameter``s (the private data); its constraints
    are F_z of (72): (71f)-(71l) over its lines L_z, (71d) over its extended node set
    V_z and (71e) over its generators. Variables of cut lines (``"wr:<a>-<b>"``,
    ``"wi:<a>-<b>"``, ``"pf:<branch>"``, ``"qf:..."``, ``"pt:..."``, ``"qt:..."``) and of
    buses in more than one V_z (``"w:<bus>"``) are shared; bus labels are pandapower bus
    indices and branch labels ``line<i>`` / ``trafo<i>``.

    ``zones`` is a number (see [`powerflow.partition`][powerflow.zones.partition], with ``seed``), ``"area"``
    (the network's own areas, [`area_zones`][powerflow.zones.area_zones]) or a mapping
    ``{pandapower bus index: zone}`` ([`zone_mapping`][powerflow.zones.zone_mapping]). ``beta`` (p.u.) is the
    adjacency of Sec. 6.1.1 and
    ``sensitivity`` is ``"exact"`` (the default, a valid bound) or ``"paper"`` (Sec. 6.1.1's
    2 beta, nominal: only on request, with a ``pc.NominalPrivacyWarning``; see `gradient_sensitivity`).

    ``problem.info`` holds ``"zones"``, ``"output_sensitivity"`` (the paper's OutPert
    sensitivity beta, nominal: `NOMINAL_OUTPUT`; the valid OutPert calibration is
    ``pc.OutputPerturbation(mechanism, sensitivity="derived")``), ``"smoothness"`` (L_p per agent, see
    `SocModel.smoothness`),
    ``"models"`` (the `SocModel` of each zone), ``"cut_branches"``, ``"beta"``,
    ``"sensitivity"`` and ``"case"``.
    """
    beta = require_positive(beta, argument="beta", error=PrivacyError)
    if sensitivity not in SENSITIVITIES:
        raise PrivacyError(f"expected one of {SENSITIVITIES}, got {sensitivity!r}", argument="sensitivity")
    if sensitivity == "paper":
        warnings.warn(f'sensitivity="paper" is nominal, not a valid bound: {NOMINAL_GRADIENT}; '
                      'its epsilons must not be published as guarantees (use "exact")',
                      pc.NominalPrivacyWarning, stacklevel=2)
    net = as_net(net_or_name, argument="net_or_name")
    data = network_data(net)
    mapping = zone_mapping(net, data, zones, seed)
    names = sorted(set(mapping.values()), key=lambda z: (str(type(z)), z))
    zone_of_bus = np.array([names.index(mapping[int(b)]) for b in data.bus_labels])
    models = [SocModel(data, np.flatnonzero(zone_of_bus == k), name=f"zone_{zone}")
              for k, zone in enumerate(names)]
    bus_zone_count = np.zeros(data.nb, dtype=int)
    for model in models:
        bus_zone_count[model.buses] += 1
    agents = [pc.Agent(model.load_shedding(), model.constraint_list,
                    shared=_shared_keys(data, model, zone_of_bus, bus_zone_count), name=f"zone-{zone}",
                    gradient=gradient_oracle(model), sensitivity=gradient_sensitivity(model, beta, sensitivity),
                    smoothness=model.smoothness())
              for zone, model in zip(names, models, strict=True)]
    cut = [data.branch_labels[b] for b in range(len(data.f)) if zone_of_bus[data.f[b]] != zone_of_bus[data.t[b]]]
    info = {"zones": mapping, "output_sensitivity": pc.Sensitivity(l1=beta, l2=beta, nominal=NOMINAL_OUTPUT),
            "smoothness": [model.smoothness() for model in models], "models": models,
            "cut_branches": cut, "beta": beta, "sensitivity": sensitivity, "case": data.name,
            "relation": RELATION}
    return pc.DistributedProblem(agents, info=info)


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
                     beta: float = 0.01, sensitivity: str = "exact", seed: int = 0) -> Iterator[NeighbouringPair]:
    """The neighbours of `RELATION` that attain `gradient_sensitivity` (``privcvx.sensitivity_audit``).

    For each zone, the load entry whose mismatch row a_i has the largest l1 norm, and the one with the largest l2
    norm, moved by +beta: the zone's Eq. (28) gradient changes by 2 beta a_i at every point, the "exact" bound.
    Yields one pair per entry; the neighbour's loads are moved only until the next pair is asked for.
    """
    original = zonal_problem(net_or_name, zones, beta=beta, sensitivity=sensitivity, seed=seed)
    neighbour = zonal_problem(net_or_name, original.info["zones"], beta=beta, sensitivity=sensitivity)
    for k, model in enumerate(neighbour.info["models"]):
        for entry in sorted({int(np.argmax(norms)) for norms in model.mismatch_row_norms()}):
            with moved_load(model, entry, beta):
                yield NeighbouringPair(original, neighbour, k)
