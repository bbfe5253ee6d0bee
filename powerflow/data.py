"""Per-unit network data for the SOC model of Appendix D, extracted through pandapower.

The data goes through pandapower's own conversion to its internal MATPOWER-like
case (``to_ppc``), so lines and transformers (tap ratio, phase shift, charging,
shunt conductance ``branch_g``), bus shunts and generator limits are exactly those
pandapower itself uses in ``runpp`` and ``runopp``.

Thermal-rating policy (constraint (71j))
----------------------------------------
A branch is *unrated*, and gets no (71j) constraint, when its rating in the ppc is
zero, not finite, or at least `UNRATED_MVA`. pandapower's MATPOWER importer
turns MATPOWER's ``RATE_A = 0`` ("unlimited", e.g. every branch of case14 and
case118) into 9900 MVA, and the PEGASE lines with the placeholder
``max_i_ka = 99999`` give ratings of about 4e7 MVA; both are unlimited by intent.
Transformers whose ``sn_mva`` is the placeholder 99.999 (PEGASE cases and case145)
are made unrated by `load_case`.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandapower as pp
import pandapower.networks as pn
import scipy.sparse as sp
from pandapower.converter.pypower.to_ppc import to_ppc
from pandapower.pypower import idx_brch as B
from pandapower.pypower import idx_bus as N
from pandapower.pypower import idx_gen as G
from scipy.sparse.csgraph import connected_components

from privcvx.errors import DeclarationError

#: Ratings at or above this value (MVA) mean "unrated"; see the module docstring.
UNRATED_MVA = 9900.0
#: Angle-difference limits at or beyond this value (degrees) mean "unlimited" (constraint (71k)).
UNLIMITED_ANGLE_DEG = 90.0
#: Transformers whose ``sn_mva`` is this placeholder (PEGASE cases, case145) have no real rating.
PEGASE_PLACEHOLDER_SN_MVA = 99.999


#: Transmission networks of ``pandapower.networks`` whose names do not start with "case" (they work here too).
OTHER_TRANSMISSION_CASES = ("GBnetwork", "GBreducednetwork", "iceland")


def _case_names() -> list[str]:
    cases = [name for name in dir(pn) if name.startswith("case") and callable(getattr(pn, name))]
    return sorted(cases) + [name for name in OTHER_TRANSMISSION_CASES if callable(getattr(pn, name, None))]


def load_case(name: str, *, argument: str = "name") -> pp.pandapowerNet:
    """Return the pandapower network ``pandapower.networks.<name>()``.

    Any ``pandapower.networks`` function that builds a network without arguments is
    accepted (``"case14"``, ``"case118"``, ``"case1354pegase"``, ...). One data fix is
    applied and recorded in ``net["privcvx_fixes"]``: transformers whose ``sn_mva`` is
    the placeholder 99.999 (the PEGASE cases, and 51 of case145's 75) get
    ``max_loading_percent = 1e6``, which makes them unrated under the policy of this
    module; as shipped their 99.999 MVA ratings make the SOC relaxation of Appendix D
    infeasible (case145: a zone's local set is empty).

    ``argument``: the name of the caller's argument that an error names (``zonal_problem``'s ``net_or_name``, the
    command line's ``case``).

    Raises
    ------
    DeclarationError
        If ``name`` is not a network of ``pandapower.networks``.
    """
    builder = getattr(pn, name, None) if isinstance(name, str) and not name.startswith("_") else None
    if builder is None or not callable(builder):
        raise DeclarationError(f"unknown pandapower.networks case {name!r}; the transmission cases: "
                               f"{', '.join(_case_names())} (any other pandapower.networks function without "
                               "required arguments is accepted too)", argument=argument)
    try:
        net = builder()
    except TypeError as exc:
        raise DeclarationError(f"pandapower.networks.{name} needs arguments ({exc})", argument=argument) from exc
    if not isinstance(net, pp.pandapowerNet):
        raise DeclarationError(f"pandapower.networks.{name}() is not a network", argument=argument)
    fixes = []
    if len(net.trafo):
        placeholder = np.isclose(net.trafo.sn_mva.to_numpy(float), PEGASE_PLACEHOLDER_SN_MVA)
        if placeholder.any():
            net.trafo.loc[placeholder, "max_loading_percent"] = 1e6
            fixes.append(f"{int(placeholder.sum())} placeholder transformers (sn_mva=99.999) made unrated")
    net["privcvx_fixes"] = fixes
    net["privcvx_case"] = name
    return net


class OpenEnd(NamedTuple):
    """A branch in service whose other end pandapower leaves open (an auxiliary bus: the other bus is out of
    service, or an open line switch). It is no branch of the model: ``admittance`` (p.u.) is its Kron-reduced
    shunt at model bus ``bus``; ``at_from`` says whether that is its from (hv) end; ``ratio`` is V_open / V_bus."""

    label: str
    bus: int
    admittance: complex
    ratio: complex
    at_from: bool


@dataclass(frozen=True)
class PwlCost:
    """A convex piecewise-linear generation cost (pandapower's ``pwl_cost``): ``max_k slope[k] pg + offset[k]``
    (network units, e.g. $/h, for ``pg`` in p.u.) of generator ``gen`` (its position in `NetworkData`)."""

    gen: int
    slope: np.ndarray
    offset: np.ndarray


@dataclass(frozen=True)
class NetworkData:
    """Per-unit data of Appendix D, indexed like pandapower's internal ppc.

    Buses are numbered ``0..nb-1`` in ppc order; ``bus_labels`` gives the pandapower
    bus index of each. Only in-service buses, branches and generators are kept; a branch with an open end
    (pandapower's auxiliary bus) is folded into a shunt of its connected bus (``open_ends``). Branch
    admittances follow MATPOWER with ``tau = TAP * exp(j SHIFT)``:
    ``Yff = (y + (g_sh + j b_sh)/2)/|tau|^2``, ``Yft = -y/conj(tau)``,
    ``Ytf = -y/tau``, ``Ytt = y + (g_sh + j b_sh)/2``.

    Parallel branches share one bus pair: ``pair_of_branch[l]`` is the pair of branch
    ``l`` and ``pair_sign[l]`` is +1 when the branch runs from ``pair_from`` to
    ``pair_to`` and -1 otherwise (then ``V_f conj(V_t) = wr - j wi``).
    """

    name: str
    base_mva: float
    bus_labels: np.ndarray
    pd: np.ndarray
    qd: np.ndarray
    gs: np.ndarray
    bs: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    branch_labels: tuple[str, ...]
    f: np.ndarray
    t: np.ndarray
    yff: np.ndarray
    yft: np.ndarray
    ytf: np.ndarray
    ytt: np.ndarray
    rate: np.ndarray
    angmin: np.ndarray
    angmax: np.ndarray
    pair_from: np.ndarray
    pair_to: np.ndarray
    pair_of_branch: np.ndarray
    pair_sign: np.ndarray
    gen_bus: np.ndarray
    gen_rows: np.ndarray
    pmin: np.ndarray
    pmax: np.ndarray
    qmin: np.ndarray
    qmax: np.ndarray
    cost: np.ndarray | None
    open_ends: tuple[OpenEnd, ...] = ()
    pwl_cost: tuple[PwlCost, ...] = ()

    @property
    def nb(self) -> int:
        return len(self.bus_labels)

    @property
    def rated(self) -> np.ndarray:
        """Mask of the branches that get the thermal limit (71j)."""
        return np.isfinite(self.rate)


def _branch_labels(net: pp.pandapowerNet, in_service: np.ndarray) -> list[str]:
    """Labels ``<element><index>`` of the branches ``to_ppc`` kept.

    ``net._pd2ppc_lookups["branch"]`` spans every line and transformer, in service or not, while ``to_ppc``
    returns only the rows of ``in_service`` (pandapower's ``ppci["internal"]["branch_is"]``): out-of-service
    branches and branches at out-of-service buses are dropped.
    """
    labels = [""] * len(in_service)
    for element, (start, stop) in net._pd2ppc_lookups["branch"].items():
        for offset, index in enumerate(net[element].index[: stop - start]):
            labels[start + offset] = f"{element}{index}"
    return [label for label, kept in zip(labels, in_service, strict=True) if kept]


def branch_ends(net: pp.pandapowerNet) -> list[tuple[int, int]]:
    """``(from bus, to bus)`` of every line and ``(hv bus, lv bus)`` of every transformer of ``net``, in service or
    not (pandapower bus indices)."""
    edges = [(int(a), int(b)) for a, b in zip(net.line.from_bus, net.line.to_bus, strict=True)]
    return edges + [(int(a), int(b)) for a, b in zip(net.trafo.hv_bus, net.trafo.lv_bus, strict=True)]


def _pairs(f: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    lo, hi = np.minimum(f, t), np.maximum(f, t)
    pairs, pair_of_branch = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
    sign = np.where(f < t, 1.0, -1.0)
    return pairs[:, 0], pairs[:, 1], pair_of_branch.ravel(), sign


def _gencost(ppc: dict, rows: np.ndarray, base: float) -> tuple[np.ndarray | None, tuple[PwlCost, ...]]:
    """Generation costs per generator, with power in p.u.: the polynomial coefficients ``(c2, c1, c0)`` (MATPOWER
    model 2, zero for a piecewise-linear generator) and the piecewise-linear costs (model 1) as `PwlCost` pieces."""
    gencost = ppc.get("gencost")
    if gencost is None or len(gencost) == 0:
        return None, ()
    gencost = np.asarray(gencost, float)[rows]
    coef, pwl = np.zeros((len(rows), 3)), []
    for k, row in enumerate(gencost):
        ncost = int(row[3])
        if row[0] == 1:
            mw, cost = row[4:4 + 2 * ncost:2], row[5:5 + 2 * ncost:2]
            slope = np.diff(cost) / np.diff(mw)
            if np.any(np.diff(slope) < -1e-9):
                raise DeclarationError(f"the piecewise-linear cost of generator {k} (ppc order) is not convex: its "
                                       f"slopes {slope.tolist()} decrease", argument="net.pwl_cost")
            pwl.append(PwlCost(k, slope * base, cost[:-1] - slope * mw[:-1]))
        elif ncost > 3:
            raise DeclarationError("only polynomial generation costs of degree <= 2 are supported",
                                   argument="net.poly_cost")
        else:
            coef[k, 3 - ncost:] = row[4:4 + ncost]
    return coef * np.array([base**2, base, 1.0]), tuple(pwl)


@contextmanager
def quiet_pandapower() -> Iterator[None]:
    """Within the block, pandapower's console noise is not shown: its log records below ERROR (e.g. "numba cannot
    be imported", "gen vm_pu > bus max_vm_pu ... Setting bus limit", which ``to_ppc`` applies to its copy only)
    and its Python warnings. Errors still raise; privcvx reports what matters itself (e.g. ``ac_check``)."""
    logger = logging.getLogger("pandapower")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"pandapower(\.|$)")
            yield
    finally:
        logger.setLevel(level)


def _refuse_islands(bus_labels: np.ndarray, f: np.ndarray, t: np.ndarray, bus_type: np.ndarray,
                    unsupplied: np.ndarray) -> None:
    """Raise `DeclarationError` naming the in-service buses cut off from the first slack bus.

    ``unsupplied`` are the buses pandapower's connectivity check dropped (no path to any slack); the rest of the
    in-service network must be one connected piece with the slack, or its other islands are named too.
    """
    graph = sp.coo_matrix((np.ones(len(f)), (f, t)), shape=(len(bus_labels),) * 2)
    _, piece = connected_components(graph, directed=False)
    slack = np.flatnonzero(bus_type == N.REF)
    main = piece[slack[0]] if slack.size else 0
    cut_off = sorted(int(b) for b in [*unsupplied, *bus_labels[piece != main]])
    if cut_off:
        raise DeclarationError(f"the in-service network is not connected: {len(cut_off)} buses (pandapower indices) "
                               f"are cut off from the slack bus {int(bus_labels[slack[0]]) if slack.size else '?'}"
                               f": {cut_off[:20]}{' ...' if len(cut_off) > 20 else ''}; islands are not supported "
                               "(put the island's buses out of service, or keep a branch that joins it)",
                               argument="net")


def _fold_open_ends(labels: np.ndarray, real: np.ndarray, f: np.ndarray, t: np.ndarray,
                    admittances: tuple[np.ndarray, ...], shunt: np.ndarray) -> list[OpenEnd]:
    """Fold each branch with one open end into a shunt at its other end (in place); return them (ppc buses).

    pandapower keeps a line or transformer whose other bus is out of service (or behind an open line switch) as
    a branch to an auxiliary bus of the ppc, with no load and nothing else attached. With no current at that end,
    Kron reduction of the branch's 2x2 admittance leaves ``Yff - Yft Ytf / Ytt`` (to end open) or
    ``Ytt - Ytf Yft / Yff`` (from end open) at the connected bus: its charging, exactly as ``runpp`` sees it.
    Other auxiliary buses (the star point of a three-winding transformer) raise `DeclarationError`.
    """
    yff, yft, ytf, ytt = admittances
    auxiliary = np.flatnonzero(~real)
    ends = np.bincount(np.concatenate([f, t]), minlength=len(real))
    joined = [k for k in auxiliary if ends[k] > 1]
    if joined:
        touching = sorted({str(labels[b]) for b in range(len(f)) if f[b] in joined or t[b] in joined})
        raise DeclarationError(f"pandapower's auxiliary buses joining several branches (e.g. the star point of a "
                               f"three-winding transformer) are not supported; branches {touching[:6]}",
                               argument="net")
    open_ends = []
    for b in np.flatnonzero(real[f] != real[t]):
        at_from = bool(real[f[b]])
        y, ratio = ((yff[b] - yft[b] * ytf[b] / ytt[b], -ytf[b] / ytt[b]) if at_from
                    else (ytt[b] - ytf[b] * yft[b] / yff[b], -yft[b] / yff[b]))
        bus = int(f[b] if at_from else t[b])
        shunt[bus] += y
        open_ends.append(OpenEnd(str(labels[b]), bus, complex(y), complex(ratio), at_from))
    return open_ends


def network_data(net: pp.pandapowerNet) -> NetworkData:
    """Extract `NetworkData` from ``net`` with pandapower's ``to_ppc``."""
    if len(net.get("poly_cost", ())) and len(net.get("pwl_cost", ())):
        raise DeclarationError("the network has both polynomial and piecewise-linear costs, which pandapower cannot "
                               "mix: give each generator's cost in one of them", argument="net.pwl_cost")
    with quiet_pandapower():
        ppc = to_ppc(net, init="flat")
    base = float(ppc["baseMVA"])
    bus = np.asarray(ppc["bus"], float)
    nb = len(bus)
    in_service = net.bus.index[net.bus.in_service.to_numpy(bool)].to_numpy()
    ppc_index = net._pd2ppc_lookups["bus"][in_service]
    if len(np.unique(ppc_index)) != len(in_service):
        raise DeclarationError("buses merged by pandapower (e.g. bus-bus switches) are not supported",
                               argument="net")
    # pandapower's connectivity check puts buses without a path to a slack after the nb kept ones.
    supplied = ppc_index < nb
    real = np.zeros(nb, dtype=bool)
    real[ppc_index[supplied]] = True

    branch = np.asarray(ppc["branch"])
    labels = np.array(_branch_labels(net, np.asarray(ppc["internal"]["branch_is"], dtype=bool)), dtype=object)
    branch_g = np.asarray(ppc.get("branch_g", np.zeros(len(branch))), float).ravel()  # rows of the kept branches
    branch = np.real(branch).astype(float)
    f = branch[:, B.F_BUS].astype(np.int64)
    t = branch[:, B.T_BUS].astype(np.int64)
    y = 1.0 / (branch[:, B.BR_R] + 1j * branch[:, B.BR_X])
    tap = np.where(branch[:, B.TAP] == 0, 1.0, branch[:, B.TAP])
    tau = tap * np.exp(1j * np.deg2rad(branch[:, B.SHIFT]))
    ysh = (branch_g + 1j * branch[:, B.BR_B]) / 2
    yff, yft, ytf, ytt = (y + ysh) / np.abs(tau) ** 2, -y / np.conj(tau), -y / tau, y + ysh
    shunt = (bus[:, N.GS] + 1j * bus[:, N.BS]) / base
    open_ends = _fold_open_ends(labels, real, f, t, (yff, yft, ytf, ytt), shunt)
    keep = real[f] & real[t]
    number = np.cumsum(real) - 1  # ppc bus -> model bus
    open_ends = [end._replace(bus=int(number[end.bus])) for end in open_ends]
    bus, shunt, f, t = bus[real], shunt[real], number[f[keep]], number[t[keep]]
    branch, labels, yff, yft, ytf, ytt = branch[keep], labels[keep], yff[keep], yft[keep], ytf[keep], ytt[keep]
    bus_labels = np.empty(len(bus), dtype=np.int64)
    bus_labels[number[ppc_index[supplied]]] = in_service[supplied]
    _refuse_islands(bus_labels, f, t, bus[:, N.BUS_TYPE], in_service[~supplied])
    rate = branch[:, B.RATE_A] / base
    unrated = ~np.isfinite(rate) | (rate <= 0) | (branch[:, B.RATE_A] >= UNRATED_MVA - 1e-6)
    angmin = np.where(branch[:, B.ANGMIN] <= -UNLIMITED_ANGLE_DEG, np.nan, np.deg2rad(branch[:, B.ANGMIN]))
    angmax = np.where(branch[:, B.ANGMAX] >= UNLIMITED_ANGLE_DEG, np.nan, np.deg2rad(branch[:, B.ANGMAX]))
    pair_from, pair_to, pair_of_branch, pair_sign = _pairs(f, t)

    gen = np.asarray(ppc["gen"], float)
    rows = np.flatnonzero(gen[:, G.GEN_STATUS] > 0)
    gen = gen[rows]
    cost, pwl_cost = _gencost(ppc, rows, base)
    return NetworkData(
        name=str(net.get("privcvx_case", net.name or "net")),
        base_mva=base,
        bus_labels=bus_labels,
        pd=bus[:, N.PD] / base, qd=bus[:, N.QD] / base,
        gs=shunt.real, bs=shunt.imag,
        vmin=bus[:, N.VMIN], vmax=bus[:, N.VMAX],
        branch_labels=tuple(labels), f=f, t=t, yff=yff, yft=yft, ytf=ytf, ytt=ytt,
        rate=np.where(unrated, np.inf, rate), angmin=angmin, angmax=angmax,
        pair_from=pair_from, pair_to=pair_to, pair_of_branch=pair_of_branch, pair_sign=pair_sign,
        gen_bus=number[gen[:, G.GEN_BUS].astype(np.int64)], gen_rows=rows,
        pmin=gen[:, G.PMIN] / base, pmax=gen[:, G.PMAX] / base,
        qmin=gen[:, G.QMIN] / base, qmax=gen[:, G.QMAX] / base,
        cost=cost, pwl_cost=pwl_cost, open_ends=tuple(open_ends),
    )
