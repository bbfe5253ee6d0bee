"""Zones of a network (Appendix D): connected bus sets with few cut lines."""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import numpy as np
import pandapower as pp

from privcvx.errors import DeclarationError

from .data import NetworkData, branch_ends, network_data
from .model import as_net

#: The stand-in 3-zone partition of case118, in MATPOWER bus numbers. It is NOT the
#: paper's partition (the paper's zone lists, taken from its reference [38], are not public).
CASE118_STANDIN_ZONES: dict[int, list[int]] = {
    1: [*range(1, 24), *range(25, 33), 113, 114, 115, 117],
    2: [*range(33, 70), 116],
    3: [24, *range(70, 113), 118],
}


def bus_graph(data: NetworkData) -> nx.Graph:
    """Graph of the in-service branches; nodes are pandapower bus indices, weights count parallel branches."""
    graph = nx.Graph()
    graph.add_nodes_from(int(b) for b in data.bus_labels)
    for a, b in zip(data.bus_labels[data.f], data.bus_labels[data.t], strict=True):
        if graph.has_edge(a, b):
            graph[a][b]["weight"] += 1
        else:
            graph.add_edge(int(a), int(b), weight=1)
    return graph


def _number_of_zones(zones: object, nb: int) -> int:
    if isinstance(zones, bool) or not isinstance(zones, (int, np.integer)):
        raise DeclarationError(f'expected a number of zones, "area" or a bus-to-zone mapping, got {zones!r}',
                               argument="zones")
    if not 1 <= zones <= nb:
        raise DeclarationError(f"the network has {nb} buses, so zones must be in 1..{nb}, got {zones}",
                               argument="zones")
    return int(zones)


def _merge_smallest(graph: nx.Graph, communities: list[set[int]], target: int) -> list[set[int]]:
    """Merge the smallest community into its best-connected neighbour until ``target`` remain."""
    communities = [set(c) for c in communities]
    while len(communities) > target:
        label = {bus: k for k, community in enumerate(communities) for bus in community}
        small = min(range(len(communities)), key=lambda k: (len(communities[k]), min(communities[k])))
        links: dict[int, float] = {}
        for bus in communities[small]:
            for other, attributes in graph[bus].items():
                if label[other] != small:
                    links[label[other]] = links.get(label[other], 0.0) + attributes["weight"]
        if not links:
            raise DeclarationError("the network is not connected, so it cannot be cut into "
                                   f"{target} connected zones", argument="zones")
        best = max(links, key=lambda k: (links[k], -k))
        communities[best].update(communities[small])
        del communities[small]
    return communities


def partition(net: pp.pandapowerNet | str, zones: int, seed: int = 0) -> dict[int, int]:
    """Split the buses of ``net`` into ``zones`` connected zones with few cut lines.

    Louvain communities (networkx) are split into connected components, and then
    the smallest is merged into its best-connected neighbour until ``zones`` remain
    (if Louvain finds too few, its resolution is doubled). Returns
    ``{pandapower bus index: zone}`` with zones numbered 1..zones in order of their
    smallest bus.
    """
    return partition_data(network_data(as_net(net)), zones, seed)


def partition_data(data: NetworkData, zones: int, seed: int = 0) -> dict[int, int]:
    """`partition` of already extracted network data."""
    target = _number_of_zones(zones, data.nb)
    graph = bus_graph(data)
    resolution = 1.0
    while True:
        found = nx.community.louvain_communities(graph, weight="weight", resolution=resolution, seed=seed)
        pieces = [set(c) for community in found for c in nx.connected_components(graph.subgraph(community))]
        if len(pieces) >= target:
            break
        resolution *= 2.0
    merged = sorted(_merge_smallest(graph, pieces, target), key=min)
    return {bus: k + 1 for k, community in enumerate(merged) for bus in sorted(community)}


def case118_zones(net: pp.pandapowerNet | None = None) -> dict[int, int]:
    """The stand-in 3-zone partition of case118 (`CASE118_STANDIN_ZONES`); NOT the paper's.

    The MATPOWER bus numbers are mapped to pandapower bus indices through
    ``net.bus.name``, which pandapower's MATPOWER importer sets to the MATPOWER number
    (in ``pandapower.networks.case118`` the index is the number minus one).
    """
    net = as_net("case118") if net is None else net
    index_of = {int(name): int(index) for index, name in net.bus["name"].items()}
    return {index_of[number]: zone for zone, numbers in CASE118_STANDIN_ZONES.items() for number in numbers}


def area_zones(net: pp.pandapowerNet, data: NetworkData) -> dict[int, int]:
    """The network's own areas, ``net.bus.zone`` (the MATPOWER bus column BUS_AREA), as ``{bus: area}``.

    Only the in-service buses of ``data`` are mapped. Raises `DeclarationError` when the column is missing, a bus
    has no area, or every bus sits in one area (then use a number of zones: Louvain, `partition`).
    """
    column = net.bus["zone"] if "zone" in net.bus else None
    if column is None:
        raise DeclarationError('zones="area" needs the areas in net.bus.zone, which this network does not have',
                               argument="zones")
    areas = column.reindex(data.bus_labels)
    missing = [int(b) for b in areas.index[areas.isna()]]
    if missing:
        raise DeclarationError(f'zones="area": {len(missing)} buses have no area in net.bus.zone, e.g. '
                               f"{missing[:5]}", argument="zones")
    mapping = {int(bus): int(area) if float(area).is_integer() else area for bus, area in areas.items()}
    names = sorted(set(mapping.values()))
    if len(names) < 2:
        raise DeclarationError(f'zones="area": net.bus.zone puts every bus in the one area {names[0]!r}, so there '
                               "is nothing to distribute; give a number of zones (Louvain) or a mapping",
                               argument="zones")
    return mapping


def topology_graph(net: pp.pandapowerNet, data: NetworkData) -> nx.Graph:
    """The buses of ``data`` joined by every line and transformer of ``net``, in service or not: the grid's
    topology, which an outage does not redraw."""
    graph = nx.Graph()
    graph.add_nodes_from(int(b) for b in data.bus_labels)
    graph.add_edges_from((a, b) for a, b in branch_ends(net) if a in graph and b in graph)
    return graph


def zone_mapping(net: pp.pandapowerNet, data: NetworkData, zones: object, seed: int = 0) -> dict[int, object]:
    """``{bus: zone}`` from ``zones``: a number (`partition_data`), ``"area"`` (`area_zones`) or a mapping,
    checked by `check_zones`.

    A mapping may name out-of-service buses of ``net`` (e.g. the zones of the intact grid in an outage study):
    they are left out. Its zones must be connected in the grid's topology (`topology_graph`), so that the zones
    of the intact grid stay valid when an outage cuts a zone's internal path (the pieces stay joined through
    other zones, which the zonal model allows). The network's own areas are taken as they are: an area's
    operator may own pieces that only other areas join (case39's area 3 falls into two).
    """
    if isinstance(zones, str):
        if zones != "area":
            raise DeclarationError(f'expected a number of zones, "area" or a bus-to-zone mapping, got {zones!r}',
                                   argument="zones")
        return check_zones(data, area_zones(net, data), graph=None)
    if isinstance(zones, Mapping):
        out_of_service = set(net.bus.index[~net.bus.in_service.to_numpy(bool)])
        zones = {bus: zone for bus, zone in zones.items() if bus not in out_of_service}
        return check_zones(data, zones, graph=topology_graph(net, data))
    return check_zones(data, partition_data(data, zones, seed), graph=bus_graph(data))


def check_zones(data: NetworkData, zones: Mapping[int, object], graph: nx.Graph | None) -> dict[int, object]:
    """Check that ``zones`` maps every bus of ``data`` to a zone and (unless ``graph`` is None) that every zone is
    connected in ``graph``."""
    if not isinstance(zones, Mapping):
        raise DeclarationError(f"expected a bus-to-zone mapping, got {type(zones).__name__}", argument="zones")
    buses = {int(b) for b in data.bus_labels}
    given = {int(b) for b in zones}
    missing, unknown = sorted(buses - given), sorted(given - buses)
    if missing:
        raise DeclarationError(f"{len(missing)} buses have no zone, e.g. {missing[:5]}", argument="zones")
    if unknown:
        raise DeclarationError(f"{len(unknown)} keys are not buses of the network, e.g. {unknown[:5]}",
                               argument="zones")
    mapping = {int(b): z for b, z in zones.items()}
    if graph is None:
        return mapping
    members: dict[object, list[int]] = {}
    for bus, zone in mapping.items():
        members.setdefault(zone, []).append(bus)
    for zone, buses_of_zone in members.items():
        parts = list(nx.connected_components(graph.subgraph(buses_of_zone)))
        if len(parts) > 1:
            sizes = sorted(len(p) for p in parts)
            raise DeclarationError(f"zone {zone!r} is not connected: it falls into {len(parts)} pieces "
                                   f"of sizes {sizes}", argument="zones")
    return mapping
