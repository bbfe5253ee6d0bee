"""Outage (N-1) studies: the zonal problem (72) solved once per outage, tabulated in pandapower's terms.

* `secure_line_outages` - the in-service lines whose loss keeps the grid connected (the default study);
* `with_outage` - a copy of a net with one line, transformer, generator or bus out of service;
* `n_minus_1` - one row per outage: status, rounds, objective, shed load, generation cost and pandapower's
  ``runpp`` from the answer (`powerflow.ac_check`).

The zones are those of the intact grid (an outage does not redraw the operators' areas): a zone that an outage
cuts in two stays one agent, its pieces joined through the other zones. An outage that leaves buses cut off
from the slack is an island, which the model refuses (`powerflow.network_data`); the study records it as a row
with status ``"island"`` and the buses in ``note``.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import networkx as nx
import numpy as np
import pandapower as pp
import pandas as pd

from privcvx.errors import DeclarationError

from .data import network_data
from .model import as_net
from .results import ac_check, generation_cost, to_net
from .zonal import zonal_problem
from .zones import bus_graph, zone_mapping

#: The pandapower tables an outage label may name: ``"line<i>"``, ``"trafo<i>"``, ``"gen<i>"``, ``"bus<i>"``.
OUTAGE_ELEMENTS = ("line", "trafo", "gen", "bus")
#: The run options of each outage's solve unless ``solve_options`` says otherwise: Algorithm 1 with its defaults,
#: stopped at Boyd et al.'s default tolerance (docs/algorithms.md, "Status").
DEFAULT_SOLVE = {"rounds": 1000, "tol": (1e-4, 1e-3)}
#: The columns of `n_minus_1`'s table.
COLUMNS = ("outage", "status", "rounds", "objective", "shed_mw", "shed_mvar", "cost", "runpp_converged",
           "max_vm_diff_pu", "seconds", "note")


def secure_line_outages(net_or_name: pp.pandapowerNet | str) -> list[str]:
    """Labels ``"line<i>"`` of the in-service lines whose loss keeps the in-service grid connected.

    A line is left out when it is a bridge of the bus graph (`powerflow.zones.bus_graph`) with no parallel
    branch: losing it would leave an island.
    """
    data = network_data(as_net(net_or_name, argument="net_or_name"))
    graph = bus_graph(data)
    bridges = {frozenset(edge) for edge in nx.bridges(graph) if graph.edges[edge]["weight"] == 1}
    labels = data.bus_labels
    return [label for k, label in enumerate(data.branch_labels) if label.startswith("line")
            and frozenset((int(labels[data.f[k]]), int(labels[data.t[k]]))) not in bridges]


def _parse(net: pp.pandapowerNet, outage: object) -> tuple[str, int]:
    match = re.fullmatch(rf"({'|'.join(OUTAGE_ELEMENTS)})(\d+)", outage) if isinstance(outage, str) else None
    if match is None:
        raise DeclarationError(f"expected an outage label {'/'.join(e + '<i>' for e in OUTAGE_ELEMENTS)} "
                               f"(pandapower element index), got {outage!r}", argument="outages")
    element, index = match.group(1), int(match.group(2))
    if index not in net[element].index:
        raise DeclarationError(f"the net has no {element} {index}", argument="outages")
    if not net[element].in_service.at[index]:
        raise DeclarationError(f"{element} {index} is already out of service", argument="outages")
    return element, index


def with_outage(net: pp.pandapowerNet, outage: str) -> pp.pandapowerNet:
    """A deep copy of ``net`` with the element ``outage`` (``"line3"``, ``"trafo0"``, ``"gen1"``, ``"bus13"``:
    pandapower table and index) out of service."""
    element, index = _parse(net, outage)
    changed = copy.deepcopy(net)
    changed[element].loc[index, "in_service"] = False
    return changed


def n_minus_1(net_or_name: pp.pandapowerNet | str, outages: Iterable[str] | None = None,
              zones: int | str | Mapping[int, Hashable] = 3, *, seed: int = 0, ac: bool = True,
              solve_options: Mapping[str, Any] | None = None, **problem_options: Any) -> pd.DataFrame:
    """Solve the zonal problem once per outage and return one row per outage (columns `COLUMNS`).

    ``outages``: labels for `with_outage`; by default `secure_line_outages`. ``zones`` (a number, ``"area"`` or a
    mapping, as in `powerflow.zonal_problem`, with ``seed``) are fixed on the intact grid. ``problem_options`` go
    to `powerflow.zonal_problem`, ``solve_options`` to ``problem.solve`` (default `DEFAULT_SOLVE`: the untuned
    defaults of Algorithm 1, stopped at its default tolerance). Non-private runs: the table is computed from every
    zone's internal variables (a diagnostic, not a release).

    Columns: ``status`` (the run's ``result.status``, or ``"island"``), ``rounds``, ``objective`` (the last
    round's sum of the zones' objectives), ``shed_mw`` / ``shed_mvar`` (sum over buses of the absolute mismatch of
    (71b)-(71c), from `powerflow.to_net`), ``cost`` (`powerflow.results.generation_cost` of the answer, NaN when
    the net has no ``poly_cost``; piecewise-linear costs are not evaluated), ``runpp_converged`` and
    ``max_vm_diff_pu`` (`powerflow.ac_check`, with ``ac``),
    ``seconds`` (build and solve), ``note`` (why an outage was refused).
    """
    net = as_net(net_or_name, argument="net_or_name")
    mapping = zone_mapping(net, network_data(net), zones, seed)
    labels = secure_line_outages(net) if outages is None else list(outages)
    for label in labels:
        _parse(net, label)
    options = {**DEFAULT_SOLVE, **(solve_options or {})}
    if options.get("privacy") is not None or options.get("diagnostics") is False:
        raise DeclarationError("an N-1 study tabulates every zone's internal variables, so it runs without privacy "
                               "and with diagnostics", argument="solve_options")
    has_cost = len(net.poly_cost) > 0
    rows = []
    for label in labels:
        changed = with_outage(net, label)
        start = time.perf_counter()
        try:
            network_data(changed)
        except DeclarationError as exc:  # an island: the only refusal an outage of a valid net can cause
            rows.append({"outage": label, "status": "island", "note": str(exc)})
            continue
        problem = zonal_problem(changed, "area" if zones == "area" else mapping, **problem_options)
        result = problem.solve(**options)
        seconds = time.perf_counter() - start
        answer = to_net(changed, result, problem=problem)
        check = ac_check(answer) if ac else None
        rows.append({
            "outage": label, "status": result.status, "rounds": len(result.history),
            "objective": float(result.history["objective"].iloc[-1]),
            "shed_mw": float(answer.res_bus.p_shed_mw.abs().sum()),
            "shed_mvar": float(answer.res_bus.q_shed_mvar.abs().sum()),
            "cost": generation_cost(answer) if has_cost else np.nan,
            "runpp_converged": check.converged if check else None,
            "max_vm_diff_pu": check.max_vm_diff_pu if check else np.nan,
            "seconds": seconds, "note": "",
        })
    return pd.DataFrame(rows, columns=list(COLUMNS))
