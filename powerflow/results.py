"""Power-flow answers in pandapower's own terms: result tables, an AC check, and figures.

* `to_net` - a copy of the pandapower net whose ``res_*`` tables hold an SOC solution
  (centralized `powerflow.socopf`, or a zonal problem's ``solve_centralized()`` / ``pc.Result``);
* `ac_check` - pandapower's ``runpp`` started from that operating point, and how far it moved;
* `plot_zones`, `plot_comparison` - a zone map and a voltage / load-shed comparison.

Sign conventions are pandapower's: bus ``p_mw``/``q_mvar`` are consumption minus generation
(load positive), generator powers are positive when injected, branch flows are positive into
the branch at that end. Load shed is the mismatch ``s = A x + d`` of (71b)-(71c) in MW/MVAr:
positive means load not served, negative means an unabsorbed surplus at the bus.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandapower as pp
import pandas as pd

import privcvx as pc
from privcvx.errors import DeclarationError, SolverError
from privcvx.reference import CentralizedSolution

from .data import NetworkData, branch_ends, load_case, network_data, quiet_pandapower
from .model import BLOCKS, SocModel, SocopfResult

_TOLERANCE = 1e-6


# ----------------------------------------------------------------------------------------- to_net
def _empty_solution(data: NetworkData) -> dict[str, np.ndarray]:
    nb, npair, nbr, ng = data.nb, len(data.pair_from), len(data.f), len(data.gen_bus)
    sizes = {"w": nb, "wr": npair, "wi": npair, "pf": nbr, "qf": nbr, "pt": nbr, "qt": nbr, "pg": ng, "qg": ng,
             "sp": nb, "sq": nb}
    return {name: np.full(size, np.nan) for name, size in sizes.items()}


def _fill(out: dict[str, np.ndarray], model: SocModel, x: np.ndarray) -> None:
    """Copy the values of ``model`` that belong to its own buses into the network-wide arrays ``out``.

    A bus's ``w`` and mismatch, a bus pair's ``wr``/``wi`` (by its first bus), a branch's flows
    (by its from bus) and a generator come from the model that owns that bus.
    """
    d, blocks = model.data, model.split(np.asarray(x, dtype=float))
    out["w"][model.own] = blocks["w"][model.local_bus(model.own)]
    pairs = np.isin(d.pair_from[model.pairs], model.own)
    for name in ("wr", "wi"):
        out[name][model.pairs[pairs]] = blocks[name][pairs]
    branches = np.isin(d.f[model.branches], model.own)
    for name in ("pf", "qf", "pt", "qt"):
        out[name][model.branches[branches]] = blocks[name][branches]
    for name in ("pg", "qg"):
        out[name][model.gens] = blocks[name]
    mismatch = model.mismatch_matrix @ np.asarray(x, dtype=float) + np.concatenate([model.pd.value, model.qd.value])
    n = len(model.balance)
    out["sp"][model.balance], out["sq"][model.balance] = mismatch[:n], mismatch[n:]


def _zone_values(problem: pc.DistributedProblem, solution: Any) -> tuple[list[SocModel], list[np.ndarray]]:
    """Each zone's model and its ``x`` value, from a ``solve_centralized()`` or ``pc.Result``."""
    models = problem.info.get("models") if isinstance(problem.info, Mapping) else None
    z = getattr(solution, "z", None)
    if not models or z is None or len(z) != len(problem.agents):
        raise DeclarationError("expected a zonal problem (powerflow.zonal_problem) and one of its solutions, "
                               f"got {len(z) if z is not None else 'no'} local vectors for "
                               f"{len(problem.agents)} agents", argument="problem")
    xs = []
    for agent, layout, model, zp in zip(problem.agents, problem.layouts, models, z, strict=True):
        zp = np.asarray(zp, dtype=float).ravel()
        if zp.size == len(layout.shared_local) != layout.dim:  # diagnostics=False: only what the zone sent
            full = np.full(layout.dim, np.nan)
            full[layout.shared_local] = zp
            zp = full
        if zp.size != layout.dim:
            raise DeclarationError(f"local vector of size {zp.size}, expected {layout.dim} (or "
                                   f"{len(layout.shared_local)} shared entries)", agent=agent.name,
                                   argument="solution")
        position = [v.id for v in agent.variables].index(model.x.id)
        xs.append(layout.split(zp)[position])
    return models, xs


def _tie_disagreement(problem: pc.DistributedProblem, solution: Any, data: NetworkData) -> np.ndarray:
    """Per ppc bus: the largest spread among the zones' copies of the shared variables touching it."""
    copies: dict[Hashable, list[float]] = {}
    for agent, layout, zp in zip(problem.agents, problem.layouts, solution.z, strict=True):
        zp = np.asarray(zp, dtype=float).ravel()
        values = zp if zp.size == len(layout.shared_local) != layout.dim else zp[layout.shared_local]
        for key, value in zip(agent.shared, values, strict=True):
            copies.setdefault(key, []).append(float(value))
    ppc_of_bus = {int(label): k for k, label in enumerate(data.bus_labels)}
    branch_index = {label: k for k, label in enumerate(data.branch_labels)}
    spread = np.zeros(data.nb)
    for key, values in copies.items():
        kind, _, rest = str(key).partition(":")
        if kind == "w":
            buses = [ppc_of_bus[int(rest)]]
        elif kind in ("wr", "wi"):
            buses = [ppc_of_bus[int(b)] for b in rest.split("-")]
        else:
            branch = branch_index[rest]
            buses = [int(data.f[branch]), int(data.t[branch])]
        for bus in buses:
            spread[bus] = max(spread[bus], max(values) - min(values))
    return spread


def _copy_spread(model: SocModel, xs: list[np.ndarray]) -> np.ndarray:
    """Per ppc bus, under full consensus (every zone's ``model`` is the network's): the largest spread among the
    zones' copies ``xs`` of the variables touching the bus (its ``w``, its pairs' ``wr``/``wi``, its branches' flows
    and its generators' ``pg``/``qg``)."""
    d, blocks = model.data, model.split(np.ptp(np.stack(xs), axis=0))
    touching = [(model.buses, ("w",)), (d.pair_from[model.pairs], ("wr", "wi")), (d.pair_to[model.pairs], ("wr", "wi")),
                (d.f[model.branches], ("pf", "qf", "pt", "qt")), (d.t[model.branches], ("pf", "qf", "pt", "qt")),
                (d.gen_bus[model.gens], ("pg", "qg"))]
    spread = np.zeros(d.nb)
    for buses, names in touching:
        for name in names:
            np.maximum.at(spread, buses, blocks[name])
    return spread


def _angles(data: NetworkData, w: np.ndarray, wr: np.ndarray, wi: np.ndarray, slack: np.ndarray,
            slack_angle: np.ndarray) -> np.ndarray:
    """Bus angles (rad) along a breadth-first spanning tree from the slack buses.

    For a pair a < b, ``wr + j wi = V_a conj(V_b)``, so ``theta_b = theta_a - atan2(wi, wr)``. The
    relaxation fixes only the angle differences along the tree; on the other branches the angles
    need not match ``atan2(wi, wr)`` when the relaxation is not exact. Buses not reached stay NaN.
    """
    theta = np.full(data.nb, np.nan)
    neighbours: dict[int, list[tuple[int, float]]] = {}
    for pair, (a, b) in enumerate(zip(data.pair_from, data.pair_to, strict=True)):
        delta = float(np.arctan2(wi[pair], wr[pair]))  # theta_a - theta_b
        neighbours.setdefault(int(a), []).append((int(b), -delta))
        neighbours.setdefault(int(b), []).append((int(a), delta))
    queue = []
    for bus, angle in zip(slack, slack_angle, strict=True):
        theta[bus] = angle
        queue.append(int(bus))
    while queue:
        bus = queue.pop(0)
        for other, step in neighbours.get(bus, []):
            if np.isnan(theta[other]) and np.isfinite(step):
                theta[other] = theta[bus] + step
                queue.append(other)
    return theta


def _check_same_network(net_data: NetworkData, data: NetworkData) -> None:
    same = (net_data.nb == data.nb and np.array_equal(net_data.bus_labels, data.bus_labels)
            and net_data.branch_labels == data.branch_labels and np.array_equal(net_data.f, data.f)
            and np.array_equal(net_data.t, data.t) and np.array_equal(net_data.gen_bus, data.gen_bus))
    if not same:
        raise DeclarationError(f"the solution is of {data.name!r} ({data.nb} buses, {len(data.f)} branches) but "
                               f"the net is {net_data.name!r} ({net_data.nb} buses, {len(net_data.f)} branches)",
                               argument="net")
    if not (np.allclose(net_data.pd, data.pd, atol=1e-9) and np.allclose(net_data.qd, data.qd, atol=1e-9)):
        raise DeclarationError("the net's loads differ from those the solution was computed with", argument="net")


def _gen_elements(net: pp.pandapowerNet) -> dict[int, tuple[str, int]]:
    """ppc generator row -> (pandapower element table, element index) for the in-service ext_grids and gens.

    pandapower's lookup is indexed by the element index and holds -1 for an element out of service.
    """
    rows: dict[int, tuple[str, int]] = {}
    for element in ("ext_grid", "gen"):
        lookup = net._pd2ppc_lookups.get(element)
        if lookup is None or not len(net[element]):
            continue
        lookup = np.asarray(lookup, dtype=int)
        for index in net[element].index[net[element].in_service.to_numpy(bool)]:
            if 0 <= index < len(lookup) and lookup[index] >= 0:
                rows[int(lookup[index])] = (element, int(index))
    return rows


def to_net(net: pp.pandapowerNet, solution: Any, problem: pc.DistributedProblem | None = None) -> pp.pandapowerNet:
    """A deep copy of ``net`` with ``res_bus``, ``res_gen``, ``res_ext_grid``, ``res_line`` and ``res_trafo``
    filled from an SOC solution.

    ``solution`` is a [`SocopfResult`][powerflow.model.SocopfResult], or (with ``problem=`` the zonal problem) its
    ``solve_centralized()`` or a distributed ``pc.Result``; then each bus's values come from the zone
    that owns it, and ``res_bus["tie_disagreement"]`` is the largest spread among the zones' copies of
    the shared variables at the bus (0 at interior buses). A ``pc.Result`` of ``solve(diagnostics=False)``
    holds only the entries each zone sent, so only boundary voltages and tie flows are filled (the rest
    is NaN). A full-consensus problem (``consensus="full"``: every zone holds the whole network's vector) has no
    owner per variable: every value is the average of the zones' copies (the consensus value, line 5 of Algorithm 1),
    each zone's buses' mismatch is taken at that average with its loads, and ``tie_disagreement`` is the largest
    spread among the copies of the variables touching the bus (its ``w``, its pairs, its branches, its generators).

    ``res_bus``: ``vm_pu = sqrt(w)``; ``va_degree`` along a spanning tree from the slack; ``p_mw``,
    ``q_mvar`` = served load plus shunt consumption minus generation (pandapower's sign and scope); ``p_shed_mw``,
    ``q_shed_mvar`` = the mismatch of (71b)-(71c) (load not served; the ``ppc`` load of a bus is its
    loads net of static generators). ``res_line`` / ``res_trafo``: flows at both ends, ``pl_mw``,
    ``ql_mvar``, and ``loading_percent = 100 max(|S_from|, |S_to|) / rating`` for rated branches, NaN
    for unrated ones (the thermal policy of [`powerflow.data`][powerflow.data]: every branch of case14 and case118).
    Only ``ext_grid`` and ``gen`` generators are mapped (controllable sgens/storage are not).
    """
    if not isinstance(net, pp.pandapowerNet):
        raise DeclarationError(f"expected a pandapower net, got {type(net).__name__}", argument="net")
    out_net = copy.deepcopy(net)
    net_data = network_data(out_net)  # also sets out_net._pd2ppc_lookups
    values: dict[str, np.ndarray]
    if isinstance(solution, SocopfResult):
        if problem is not None:
            raise DeclarationError("a socopf result needs no problem=", argument="problem")
        data = solution.model.data
        values = _empty_solution(data)
        _fill(values, solution.model, np.concatenate([solution.solution[name] for name in BLOCKS]))
        spread = np.zeros(data.nb)
    elif isinstance(solution, (CentralizedSolution, pc.Result)):
        if not isinstance(problem, pc.DistributedProblem):
            raise DeclarationError("a zonal solution needs problem=, the zonal problem it solves",
                                   argument="problem")
        models, xs = _zone_values(problem, solution)
        data = models[0].data
        if problem.info.get("consensus") == "full":
            spread = _copy_spread(models[0], xs)
            xs = [np.mean(xs, axis=0)] * len(xs)  # the consensus value: line 5's average of the zones' copies
        else:
            spread = _tie_disagreement(problem, solution, data)
        values = _empty_solution(data)
        for model, x in zip(models, xs, strict=True):
            _fill(values, model, x)
    else:
        raise DeclarationError(f"expected a SocopfResult, a CentralizedSolution or a pc.Result, got "
                               f"{type(solution).__name__}", argument="solution")
    _check_same_network(net_data, data)
    _write_tables(out_net, data, values, spread)
    return out_net


def _write_tables(net: pp.pandapowerNet, data: NetworkData, v: dict[str, np.ndarray], spread: np.ndarray) -> None:
    base = data.base_mva
    labels = data.bus_labels
    vm = np.sqrt(np.maximum(v["w"], 0.0))
    model_bus = {int(label): k for k, label in enumerate(labels)}
    slack_rows = [model_bus[int(b)] for b in net.ext_grid.bus[net.ext_grid.in_service]]
    slack_angle = np.deg2rad(net.ext_grid.va_degree[net.ext_grid.in_service].to_numpy(float))
    theta = _angles(data, v["w"], v["wr"], v["wi"], np.asarray(slack_rows, dtype=int), slack_angle)
    pg_bus, qg_bus = np.zeros(data.nb), np.zeros(data.nb)
    np.add.at(pg_bus, data.gen_bus, v["pg"])
    np.add.at(qg_bus, data.gen_bus, v["qg"])
    res_bus = pd.DataFrame({
        "vm_pu": vm, "va_degree": np.rad2deg(theta),
        "p_mw": (data.pd - v["sp"] - pg_bus + data.gs * v["w"]) * base,
        "q_mvar": (data.qd - v["sq"] - qg_bus - data.bs * v["w"]) * base,
        "p_shed_mw": v["sp"] * base, "q_shed_mvar": v["sq"] * base, "tie_disagreement": spread,
    }, index=pd.Index(labels, name=None))
    net["res_bus"] = res_bus.reindex(net.bus.index)

    elements = _gen_elements(net)
    tables: dict[str, dict[int, tuple[float, float, int]]] = {"ext_grid": {}, "gen": {}}
    for k, row in enumerate(data.gen_rows):
        if int(row) in elements:
            element, index = elements[int(row)]
            if model_bus.get(int(net[element].bus[index])) != data.gen_bus[k]:
                raise DeclarationError(f"{element} {index} does not sit at the bus of ppc generator {row}",
                                       argument="net")
            tables[element][index] = (v["pg"][k] * base, v["qg"][k] * base, int(data.gen_bus[k]))
    for element, rows in tables.items():
        frame = pd.DataFrame({"p_mw": [r[0] for r in rows.values()], "q_mvar": [r[1] for r in rows.values()]},
                             index=pd.Index(list(rows), dtype=np.int64))
        if element == "gen":
            frame["va_degree"] = [np.rad2deg(theta[r[2]]) for r in rows.values()]
            frame["vm_pu"] = [vm[r[2]] for r in rows.values()]
        frame = frame.reindex(net[element].index)
        frame.loc[~net[element].in_service.to_numpy(bool)] = 0.0  # pandapower's rows of elements out of service
        net[f"res_{element}"] = frame

    smax = np.maximum(np.hypot(v["pf"], v["qf"]), np.hypot(v["pt"], v["qt"]))
    loading = np.where(np.isfinite(data.rate), 100.0 * smax / np.where(np.isfinite(data.rate), data.rate, 1.0),
                       np.nan)
    for element, (f_side, t_side) in (("line", ("from", "to")), ("trafo", ("hv", "lv"))):
        rows = [k for k, label in enumerate(data.branch_labels) if label.startswith(element)
                and label[len(element):].isdigit()]
        index = pd.Index([int(data.branch_labels[k][len(element):]) for k in rows], dtype=np.int64)
        k = np.asarray(rows, dtype=int)
        fb, tb = data.f[k], data.t[k]
        frame = pd.DataFrame({
            f"p_{f_side}_mw": v["pf"][k] * base, f"q_{f_side}_mvar": v["qf"][k] * base,
            f"p_{t_side}_mw": v["pt"][k] * base, f"q_{t_side}_mvar": v["qt"][k] * base,
            "pl_mw": (v["pf"][k] + v["pt"][k]) * base, "ql_mvar": (v["qf"][k] + v["qt"][k]) * base,
            f"vm_{f_side}_pu": vm[fb], f"va_{f_side}_degree": np.rad2deg(theta[fb]),
            f"vm_{t_side}_pu": vm[tb], f"va_{t_side}_degree": np.rad2deg(theta[tb]),
            "loading_percent": loading[k],
        }, index=index)
        open_ends = _open_end_rows(data, element, v["w"], theta, (f_side, t_side))
        if len(open_ends):
            frame = pd.concat([frame, open_ends])
        net[f"res_{element}"] = _out_of_service_branches(net, element, frame.reindex(net[element].index),
                                                         (f_side, t_side))


def _open_end_rows(data: NetworkData, element: str, w: np.ndarray, theta: np.ndarray,
                   sides: tuple[str, str]) -> pd.DataFrame:
    """Rows of the branches with an open end (`powerflow.data.OpenEnd`): the connected end draws its charging
    ``S = w conj(Y)``, the open end nothing, and the open end's voltage is ``ratio`` times the connected one's;
    ``loading_percent`` is NaN (an open branch carries no more than its charging)."""
    rows = {}
    for end in data.open_ends:
        if not (end.label.startswith(element) and end.label[len(element):].isdigit()):
            continue
        voltage = np.sqrt(max(w[end.bus], 0.0)) * np.exp(1j * theta[end.bus])
        s = w[end.bus] * np.conj(end.admittance) * data.base_mva
        near, far = sides if end.at_from else sides[::-1]
        rows[int(end.label[len(element):])] = {
            f"p_{near}_mw": s.real, f"q_{near}_mvar": s.imag, f"p_{far}_mw": 0.0, f"q_{far}_mvar": 0.0,
            "pl_mw": s.real, "ql_mvar": s.imag,
            f"vm_{near}_pu": abs(voltage), f"va_{near}_degree": np.rad2deg(np.angle(voltage)),
            f"vm_{far}_pu": abs(voltage * end.ratio), f"va_{far}_degree": np.rad2deg(np.angle(voltage * end.ratio)),
            "loading_percent": np.nan}
    return pd.DataFrame.from_dict(rows, orient="index")


def _out_of_service_branches(net: pp.pandapowerNet, element: str, frame: pd.DataFrame,
                             sides: tuple[str, str]) -> pd.DataFrame:
    """pandapower's rows for the branches out of service: no flow, no loss, zero loading, and the voltages of
    their end buses (NaN at a bus out of service)."""
    table = net[element]
    off = ~table.in_service.to_numpy(bool)
    flows = [c for c in frame.columns if not c.startswith(("vm_", "va_"))]
    frame.loc[off, flows] = 0.0
    for side, column in zip(sides, ("from_bus", "to_bus") if element == "line" else ("hv_bus", "lv_bus"),
                            strict=True):
        buses = table[column].to_numpy()[off]
        frame.loc[off, f"vm_{side}_pu"] = net.res_bus.vm_pu.reindex(buses).to_numpy()
        frame.loc[off, f"va_{side}_degree"] = net.res_bus.va_degree.reindex(buses).to_numpy()
    return frame


def generation_cost(net_with_results: pp.pandapowerNet) -> float:
    """The polynomial generation cost of ``net.poly_cost`` at the answer's ``res_gen`` / ``res_ext_grid`` /
    ``res_sgen`` powers, as pandapower's ``runopp`` counts it (``res_cost``):
    the sum of ``cp0 + cp1 p + cp2 p^2 + cq0 + cq1 q + cq2 q^2`` (MW, MVAr; the net's currency per hour).

    Elements out of service cost nothing, as in ``runopp``. Raises `DeclarationError` when the net has no
    ``poly_cost`` rows, costs another element type, or lacks the result of an in-service costed element.
    """
    net = net_with_results
    costs = net.poly_cost
    if not len(costs):
        raise DeclarationError("the net has no polynomial generation costs (net.poly_cost is empty)",
                               argument="net_with_results")
    total = 0.0
    for row in costs.itertuples():
        if row.et not in ("gen", "ext_grid", "sgen"):
            raise DeclarationError(f"poly_cost of a {row.et!r} element is not supported (gen, ext_grid, sgen)",
                                   argument="net_with_results")
        if not net[row.et].in_service.at[row.element]:
            continue
        result = net[f"res_{row.et}"].reindex([row.element])
        p, q = float(result.p_mw.iloc[0]), float(result.q_mvar.iloc[0])
        if not (np.isfinite(p) and np.isfinite(q)):
            raise DeclarationError(f"{row.et} {row.element} has no result power", argument="net_with_results")
        total += (row.cp0_eur + row.cp1_eur_per_mw * p + row.cp2_eur_per_mw2 * p * p
                  + row.cq0_eur + row.cq1_eur_per_mvar * q + row.cq2_eur_per_mvar2 * q * q)
    return total


# --------------------------------------------------------------------------------------- ac_check
@dataclass(frozen=True)
class AcCheck:
    """How far pandapower's AC power flow moves from the relaxed operating point.

    Differences are runpp minus relaxed, maximum absolute values over buses / generators / branch ends;
    powers in MW and MVAr. ``max_injection_diff_mva`` is the largest change of a bus's active or
    reactive injection: what the AC flow's slack and PV buses had to absorb.
    """

    converged: bool
    max_vm_diff_pu: float
    max_va_diff_degree: float
    max_flow_diff_mva: float
    max_injection_diff_mva: float
    voltage_limits_hold: bool
    line_limits_hold: bool
    iterations: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The check as a plain dict (JSON-able)."""
        return asdict(self)


def _max_abs(a: Any, b: Any) -> float:
    diff = np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    diff = diff[np.isfinite(diff)]
    return float(diff.max()) if diff.size else 0.0


def ac_check(net_with_results: pp.pandapowerNet, **runpp_options: Any) -> AcCheck:
    """Run ``pandapower.runpp`` from the operating point in ``net_with_results`` (from `to_net`).

    Generators get ``p_mw`` and ``vm_pu`` from the relaxed solution (``ext_grid`` its ``vm_pu``), the
    shed load (``res_bus.p_shed_mw``, ``q_shed_mvar``) is taken off the bus's demand, and the Newton
    iteration starts from the relaxed voltages (``init="results"``). A power flow that does not
    converge gives ``converged=False`` and NaN differences; any other pandapower failure raises
    [`SolverError`][privcvx.errors.SolverError]. ``runpp_options`` go to ``runpp``.
    """
    net = net_with_results
    if not isinstance(net, pp.pandapowerNet):
        raise DeclarationError(f"expected a pandapower net, got {type(net).__name__}", argument="net_with_results")
    relaxed = net.res_bus
    if len(relaxed) != len(net.bus) or "vm_pu" not in relaxed or relaxed.vm_pu.isna().all():
        raise DeclarationError("the net has no relaxed results; pass the net returned by powerflow.to_net",
                               argument="net_with_results")
    in_service = net.bus.index[net.bus.in_service.to_numpy(bool)]
    if relaxed[["vm_pu", "va_degree"]].reindex(in_service).isna().any().any():
        raise DeclarationError("the answer does not give every bus's voltage (a private result with "
                               "diagnostics=False holds only what the zones sent)", argument="net_with_results")
    check = copy.deepcopy(net)
    check.gen["p_mw"] = net.res_gen.p_mw.reindex(check.gen.index).fillna(check.gen.p_mw)
    check.gen["vm_pu"] = relaxed.vm_pu.reindex(check.gen.bus).to_numpy()
    check.ext_grid["vm_pu"] = relaxed.vm_pu.reindex(check.ext_grid.bus).to_numpy()
    if "p_shed_mw" in relaxed:
        shed = relaxed[["p_shed_mw", "q_shed_mvar"]].fillna(0.0)
        shed = shed[(shed.abs() > 1e-9).any(axis=1)]
        for bus, row in shed.iterrows():
            pp.create_load(check, bus=int(bus), p_mw=-float(row.p_shed_mw), q_mvar=-float(row.q_shed_mvar),
                           name="privcvx_shed")
    runpp_options.setdefault("init", "results")
    runpp_options.setdefault("calculate_voltage_angles", True)
    try:
        with quiet_pandapower():
            pp.runpp(check, **runpp_options)
    except pp.powerflow.LoadflowNotConverged:
        nan = float("nan")
        return AcCheck(False, nan, nan, nan, nan, False, False)
    except Exception as exc:  # noqa: BLE001 - pandapower raises many types; none may escape raw
        raise SolverError(f"pandapower runpp failed: {type(exc).__name__}: {exc}", argument="net_with_results") \
            from exc
    ac = check.res_bus
    flows = []
    for element, columns in (("line", ("p_from_mw", "q_from_mvar", "p_to_mw", "q_to_mvar")),
                             ("trafo", ("p_hv_mw", "q_hv_mvar", "p_lv_mw", "q_lv_mvar"))):
        if len(net[element]) and len(net[f"res_{element}"]):
            flows.append(_max_abs(check[f"res_{element}"][list(columns)], net[f"res_{element}"][list(columns)]))
    # The relaxed p_mw / q_mvar exclude the shed load; runpp's include the compensating loads, so both are served load.
    injection = _max_abs(ac[["p_mw", "q_mvar"]], relaxed[["p_mw", "q_mvar"]])
    # Out-of-service buses and branches have NaN results in runpp, as in to_net: only in-service rows are checked.
    buses = check.bus.in_service.to_numpy(bool)
    vm = ac.vm_pu.reindex(check.bus.index).to_numpy(float)[buses]
    vmin = check.bus.min_vm_pu.to_numpy(float)[buses] if "min_vm_pu" in check.bus else np.zeros(len(vm))
    vmax = check.bus.max_vm_pu.to_numpy(float)[buses] if "max_vm_pu" in check.bus else np.full(len(vm), np.inf)
    voltage_ok = bool(np.all((vm >= np.nan_to_num(vmin, nan=0.0) - _TOLERANCE)
                             & (vm <= np.nan_to_num(vmax, nan=np.inf) + _TOLERANCE)))
    line_ok = True
    for element in ("line", "trafo"):
        if len(check[element]):
            table = check[element]
            limit = table.get("max_loading_percent", pd.Series(100.0, index=table.index)).fillna(np.inf)
            loading = check[f"res_{element}"].loading_percent.reindex(table.index)
            kept = table.in_service.to_numpy(bool) & loading.notna().to_numpy()
            line_ok &= bool(np.all(loading.to_numpy(float)[kept] <= limit.to_numpy(float)[kept] + _TOLERANCE))
    iterations = check._ppc["iterations"] if getattr(check, "_ppc", None) and "iterations" in check._ppc else None
    return AcCheck(converged=True, max_vm_diff_pu=_max_abs(ac.vm_pu, relaxed.vm_pu),
                   max_va_diff_degree=_max_abs(ac.va_degree, relaxed.va_degree),
                   max_flow_diff_mva=max(flows) if flows else 0.0, max_injection_diff_mva=injection,
                   voltage_limits_hold=voltage_ok, line_limits_hold=line_ok,
                   iterations=None if iterations is None else int(iterations))


# ------------------------------------------------------------------------------------------ plots
def _coordinates(net: pp.pandapowerNet, seed: int = 0) -> dict[int, tuple[float, float]]:
    """Bus coordinates from ``net.bus.geo`` (GeoJSON points) when every bus has one, else a seeded spring layout."""
    if "geo" in net.bus and net.bus.geo.notna().all():
        try:
            return {int(b): tuple(json.loads(g)["coordinates"][:2]) for b, g in net.bus.geo.items()}
        except (TypeError, ValueError, KeyError):
            pass
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(int(b) for b in net.bus.index)
    graph.add_edges_from(branch_ends(net))
    return {int(b): tuple(p) for b, p in nx.spring_layout(graph, seed=seed).items()}


def _axes(ax: Any, count: int = 1) -> Any:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, axes = plt.subplots(1, count, figsize=(6 * count, 4.5))
    return axes


def plot_zones(net: pp.pandapowerNet, zones: Mapping[int, Hashable], ax: Any = None, seed: int = 0) -> Any:
    """Draw the buses coloured by zone, lines and transformers grey, tie branches red and dashed.

    Coordinates come from the case's geodata (``net.bus.geo``) or a networkx spring layout seeded
    with ``seed``. Returns the axes.
    """
    ax = _axes(ax)
    xy = _coordinates(net, seed)
    names = sorted(set(zones.values()), key=lambda z: (str(type(z)), z))
    colours = {zone: f"C{k % 10}" for k, zone in enumerate(names)}
    ties = 0
    for a, b in branch_ends(net):
        tie = zones.get(a) != zones.get(b)
        ties += tie
        ax.plot([xy[a][0], xy[b][0]], [xy[a][1], xy[b][1]], color="red" if tie else "0.6",
                linestyle="--" if tie else "-", linewidth=2.0 if tie else 0.8, zorder=1)
    for zone in names:
        buses = [b for b in net.bus.index if zones.get(int(b)) == zone]
        ax.scatter([xy[int(b)][0] for b in buses], [xy[int(b)][1] for b in buses], s=60 if len(net.bus) < 50 else 18,
                   color=colours[zone], edgecolor="k", linewidth=0.4, zorder=2, label=f"zone {zone} ({len(buses)})")
    if len(net.bus) < 50:
        for b, (x, y) in xy.items():
            ax.annotate(str(b), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.plot([], [], color="red", linestyle="--", label=f"tie branches ({ties})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the map
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def plot_comparison(nets: Mapping[str, pp.pandapowerNet], zones: Mapping[int, Hashable] | None = None,
                    ax: Any = None) -> Any:
    """Voltage profile per bus (left) and load shed per zone (right) of several `to_net` answers.

    ``nets`` maps a label (e.g. "centralized", "non-private ADMM", "ObjG ...") to a net with results; ``ax``
    is a pair of axes. Colours follow `privcvx.plotting` (a label naming a method or a reference gets its
    colour). The shed is the sum over a zone's buses of ``|p_shed_mw|`` on a log axis; a zone that sheds
    nothing has no bar and is marked "0" (without ``zones``, one bar per answer). Two labels that would get the
    same colour (e.g. two references, both black) are told apart: the later one takes matplotlib's ``C<k>``.
    With ``ax`` given the lines carry the labels and no legend is drawn on the data (call
    ``plotting.figure_legend`` or ``ax.legend``); without it the voltage panel gets a legend.
    Returns the axes.
    """
    from privcvx import plotting

    axes = _axes(ax, 2)
    volt, shed = axes[0], axes[1]
    markers = "os^dvx"
    groups = sorted(set(zones.values()), key=lambda z: (str(type(z)), z)) if zones else ["all"]
    width = 0.8 / max(len(nets), 1)
    used: set[str] = set()
    for k, (label, net) in enumerate(nets.items()):
        color = plotting.color_of(label, k)
        color = f"C{k % 10}" if color in used else color
        used.add(color)
        res = net.res_bus
        volt.plot(res.index, res.vm_pu, marker=markers[k % len(markers)], markersize=4, linewidth=0.8,
                  label=label, alpha=0.8, color=color)
        amounts = []
        for group in groups:
            buses = [b for b in res.index if zones is None or zones.get(int(b)) == group]
            amounts.append(float(res.p_shed_mw.reindex(buses).abs().sum(min_count=1)) if "p_shed_mw" in res
                           else np.nan)
        where = np.arange(len(groups)) + k * width
        shed.bar(where, plotting.log_values(amounts), width=width, color=color)
        for x, amount in zip(where, amounts, strict=True):
            if amount == 0:
                shed.text(x, 0.01, "0", transform=shed.get_xaxis_transform(), ha="center", fontsize=7, color=color)
    volt.set_xlabel("bus (pandapower index)")
    volt.set_ylabel("vm_pu")
    shed.set_xticks(np.arange(len(groups)) + width * (len(nets) - 1) / 2)
    shed.set_xticklabels([f"zone {g}" if zones else g for g in groups])
    shed.set_ylabel("sum |p_shed_mw| (MW)")
    shed.set_yscale("log")
    shed.set_title("load shed per zone (colours as left)", fontsize=9)
    if ax is None:
        volt.legend(fontsize=7)
    return axes


def write_figures(net: pp.pandapowerNet, zones: Mapping[int, Hashable], nets: Mapping[str, pp.pandapowerNet],
                  paths: tuple[Path, Path], title: str) -> list[Path]:
    """Save the zone map (``paths[0]``) and `plot_comparison` of ``nets`` (``paths[1]``) at 150 dpi."""
    from privcvx import plotting

    fig, ax = plotting.new_figure(1, 1, panel=(7.5, 5.0))
    plot_zones(net, zones, ax=ax[0][0])
    ax[0][0].set_title(title, fontsize=10)
    plotting.save(fig, paths[0])
    fig, axes = plotting.new_figure(1, 2, panel=(6.5, 4.6), sharex=False)
    plot_comparison(nets, zones, ax=axes[0])
    fig.suptitle(f"{title}: relaxed voltages and load shed", fontsize=10)
    plotting.figure_legend(fig, axes[0][:1])
    plotting.save(fig, paths[1])
    return list(paths)


def _figures(directory: str = "docs/figures") -> None:
    """Write ``case14_zones.png`` and ``case14_powerflow.png`` (``python -m powerflow.results``)."""
    from .model import socopf
    from .zonal import zonal_problem

    net = load_case("case14")
    problem = zonal_problem(net, 3)
    eta = 1.8 / max(declared.smoothness for declared in problem.declared.values())
    run = problem.solve(rounds=300, local_updates=1, rho=10.0, eta=eta,
                        callback=lambda row: not (row["objective"] <= 1e-4 and row["consensus_residual"] <= 1e-3))
    rounds = len(run.history)
    # A research run: seeded noise and diagnostics on, so that every zone's internal variables are shown.
    private = problem.solve(rounds=rounds, local_updates=1, rho=10.0, eta=eta, seed=0,
                            privacy=pc.ObjectivePerturbation(pc.Gaussian(epsilon=1.0, delta=1e-5)))
    epsilon = float(private.privacy.epsilon_pld.max())
    nets = {"centralized socopf": to_net(net, socopf(net)),
            f"non-private ADMM ({rounds} rounds)": to_net(net, run, problem=problem),
            f"ObjG (eps=1 per step; {rounds} steps: PLD eps={epsilon:.1f})": to_net(net, private, problem=problem)}
    write_figures(net, problem.info["zones"], nets, (Path(directory) / "case14_zones.png",
                                                      Path(directory) / "case14_powerflow.png"), "case14, 3 zones")


if __name__ == "__main__":
    _figures()
