"""Networks with outages, islands, the grid's own areas and N-1 studies (issue 30), against pandapower."""

from __future__ import annotations

import copy

import networkx as nx
import numpy as np
import pandapower as pp
import pandapower.topology as top
import pytest
from test_powerflow import _pandapower_point

import powerflow
from powerflow.data import network_data
from powerflow.model import SocModel
from privcvx.errors import DeclarationError


def _outage(case: str, element: str, index: int) -> pp.pandapowerNet:
    net = powerflow.load_case(case)
    if element == "switch":  # an open line switch at the to end of line `index`
        pp.create_switch(net, bus=int(net.line.to_bus[index]), element=index, et="l", closed=False)
    else:
        net[element].loc[index, "in_service"] = False
    return net


def _kept_branches(net: pp.pandapowerNet) -> list[str]:
    """pandapower's own view: the lines and transformers in service (runpp gives each a result, also one whose
    other bus is out of service)."""
    return [f"{element}{i}" for element in ("line", "trafo") for i in net[element].index[net[element].in_service]]


@pytest.mark.parametrize(("case", "element", "index"), [("case33bw", None, None), ("case14", "line", 0),
                                                        ("case14", "trafo", 0), ("case14", "bus", 13),
                                                        ("case118", "bus", 10), ("case118", "switch", 3)])
def test_out_of_service_branches_and_buses_agree_with_runpp(case: str, element: str | None, index: int) -> None:
    """At pandapower's own operating point the model's flows equal runpp's branch by branch, and every bus
    balances: with a bus out (case118's bus 10 has 4 charged lines left open) the folded charging is runpp's."""
    net = powerflow.load_case(case) if element is None else _outage(case, element, index)
    pp.runpp(net)
    data = network_data(net)
    kept = _kept_branches(net)
    assert sorted(data.branch_labels + tuple(end.label for end in data.open_ends)) == sorted(kept)
    assert sorted(data.bus_labels.tolist()) == net.bus.index[net.bus.in_service].tolist()
    model = SocModel(data, np.arange(data.nb))
    x, pandapower_flows = _pandapower_point(net, model)
    model_flows = model.flow_matrix() @ x
    assert np.max(np.abs(model_flows - pandapower_flows)) <= 1e-6
    n = len(model.branches)
    for k, block in enumerate(("pf", "qf", "pt", "qt")):
        x[model.block(block)] = model_flows[k * n:(k + 1) * n]
    model.x.value = x
    assert np.max(np.abs(model.mismatch.value)) <= 1e-4  # (71b)-(71c), the open ends' charging as shunts
    for end in data.open_ends:
        table, row = end.label.rstrip("0123456789"), int(end.label.lstrip("linetrafo"))
        side = ("from" if end.at_from else "to") if table == "line" else ("hv" if end.at_from else "lv")
        w = x[model.block("w")][end.bus]
        charging = w * np.conj(end.admittance) * data.base_mva
        result = net[f"res_{table}"].loc[row]
        assert abs(charging - complex(result[f"p_{side}_mw"], result[f"q_{side}_mvar"])) <= 1e-6
    if case == "case118":
        opened = {"bus": 4, "switch": 1}[element]
        assert len(data.open_ends) == opened and max(abs(end.admittance) for end in data.open_ends) > 1e-2


def test_case33bw_as_shipped_loads_and_solves() -> None:
    """5 open tie lines: the load-shedding optimum is 0, and to_net's rows of the open lines are pandapower's."""
    net = powerflow.load_case("case33bw")
    assert (~net.line.in_service).sum() == 5
    result = powerflow.socopf(net)
    assert 0 <= result.value <= 1e-8
    answer = powerflow.to_net(net, result)
    reference = copy.deepcopy(net)
    pp.runpp(reference)
    open_lines = net.line.index[~net.line.in_service]
    flows = ["p_from_mw", "q_from_mvar", "p_to_mw", "q_to_mvar", "pl_mw", "ql_mvar", "loading_percent"]
    assert answer.res_line.loc[open_lines, flows].equals(reference.res_line.loc[open_lines, flows])
    ends = net.line.loc[open_lines, "to_bus"]
    assert np.array_equal(answer.res_line.loc[open_lines, "vm_to_pu"], answer.res_bus.vm_pu.loc[ends])
    assert answer.res_line.drop(open_lines)[["p_from_mw", "p_to_mw"]].notna().all().all()
    assert powerflow.ac_check(answer).converged
    problem = powerflow.zonal_problem(net, 3)
    assert problem.solve_centralized().value <= 1e-8


@pytest.mark.parametrize(("element", "index"), [("line", 0), ("trafo", 0), ("gen", 1), ("bus", 13)])
def test_outage_cost_is_a_lower_bound_of_runopp(element: str, index: int) -> None:
    """case14 with one element out: the SOC cost is below pandapower's AC OPF on the same net and within 1%; the
    answer's tables are NaN exactly where pandapower's are, and runpp accepts it."""
    net = _outage("case14", element, index)
    reference = copy.deepcopy(net)
    pp.runopp(reference)
    assert reference.OPF_converged
    soc = powerflow.socopf(net, objective="cost")
    assert soc.value <= reference.res_cost * (1 + 1e-7)
    assert (reference.res_cost - soc.value) / reference.res_cost <= 0.01
    answer = powerflow.to_net(net, soc)
    assert powerflow.generation_cost(answer) == pytest.approx(soc.value, rel=1e-7)
    for table in ("res_bus", "res_line", "res_trafo", "res_gen", "res_ext_grid"):
        columns = ["p_mw"] if table in ("res_bus", "res_gen", "res_ext_grid") else ["p_from_mw" if "line" in table
                                                                                      else "p_hv_mw"]
        ours, theirs = answer[table][columns].isna(), reference[table][columns].isna()
        assert ours.equals(theirs.reindex(ours.index)), table
    check = powerflow.ac_check(answer)
    assert check.converged and check.voltage_limits_hold and check.line_limits_hold
    assert check.max_vm_diff_pu <= 1e-2


def test_generation_cost_is_pandapowers_res_cost() -> None:
    net = powerflow.load_case("case14")
    pp.runopp(net)
    assert powerflow.generation_cost(net) == pytest.approx(float(net.res_cost), rel=1e-12)
    net.poly_cost = net.poly_cost.iloc[0:0]
    with pytest.raises(DeclarationError, match="no polynomial generation costs"):
        powerflow.generation_cost(net)


def test_islands_are_refused_naming_the_buses_cut_off() -> None:
    """Bus 7 of case14 hangs on transformer 3 alone (checked with pandapower's own topology)."""
    net = _outage("case14", "trafo", 3)
    graph = top.create_nxgraph(net)
    assert sorted(min(nx.connected_components(graph), key=len)) == [7]
    for build in (powerflow.network_data, powerflow.socopf, lambda n: powerflow.zonal_problem(n, 3)):
        with pytest.raises(DeclarationError, match=r"1 buses .* cut off from the slack bus 0: \[7\]"):
            build(net)
    two = _outage("case14", "line", 14)  # line 14 (12-13) and line 11 (8-13) cut bus 13 off
    two.line.loc[11, "in_service"] = False
    with pytest.raises(DeclarationError, match=r"cut off .*: \[13\]"):
        powerflow.socopf(two)


@pytest.mark.parametrize(("case", "areas"), [("case24_ieee_rts", 4), ("case30", 3), ("case39", 3)])
def test_zones_area_uses_the_networks_own_areas(case: str, areas: int) -> None:
    net = powerflow.load_case(case)
    problem = powerflow.zonal_problem(net, "area")
    assert problem.info["zones"] == {int(b): int(z) for b, z in net.bus.zone.items()}
    assert len(problem.agents) == areas == net.bus.zone.nunique()
    assert problem.solve_centralized().value == pytest.approx(powerflow.socopf(net).value, abs=1e-7)


def test_zones_area_bad_input() -> None:
    with pytest.raises(DeclarationError, match="one area 1"):
        powerflow.zonal_problem("case14", "area")
    net = powerflow.load_case("case30")
    net.bus.loc[4, "zone"] = np.nan
    with pytest.raises(DeclarationError, match=r"1 buses have no area in net.bus.zone, e.g. \[4\]"):
        powerflow.zonal_problem(net, "area")
    with pytest.raises(DeclarationError, match='"area"'):
        powerflow.zonal_problem("case30", "areas")


def test_secure_line_outages_keep_pandapowers_graph_connected() -> None:
    for case in ("case14", "case33bw"):
        net = powerflow.load_case(case)
        secure = set(powerflow.secure_line_outages(net))
        graph = top.create_nxgraph(net, multi=True)
        for index in net.line.index[net.line.in_service]:
            cut = graph.copy()
            cut.remove_edge(net.line.from_bus[index], net.line.to_bus[index], key=("line", index))
            assert (f"line{index}" in secure) == nx.is_connected(cut), (case, index)
    assert powerflow.secure_line_outages("case33bw") == []  # radial once its tie lines are open
    assert len(powerflow.secure_line_outages("case14")) == 15


def test_n_minus_1_rows_solve_and_runpp_accepts_every_answer() -> None:
    """A few outages of case14 with the intact grid's zones (the full study: bench/bench_n_minus_1.py)."""
    zones = powerflow.partition("case14", 3)
    table = powerflow.n_minus_1("case14", ["line11", "gen1", "trafo3"], zones)
    assert table.outage.tolist() == ["line11", "gen1", "trafo3"]
    solved = table[table.status != "island"]
    assert solved.status.tolist() == ["converged"] * 2
    assert solved.runpp_converged.all()
    for row in solved.itertuples():
        # the centralized optimum of the same outage sheds nothing, so neither may the converged run
        assert powerflow.socopf(powerflow.with_outage(powerflow.load_case("case14"), row.outage)).value <= 1e-8
        assert row.shed_mw <= 2.0 and row.objective <= 1e-4
    assert table.loc[2, "status"] == "island" and "[7]" in table.loc[2, "note"]
    areas = powerflow.n_minus_1("case39", ["line0"], "area", ac=False)  # case39's area 3 is in two pieces
    assert areas.status.tolist() == ["converged"] and areas.runpp_converged.isna().all()
    with pytest.raises(DeclarationError, match="already out of service"):
        powerflow.n_minus_1(_outage("case14", "line", 0), ["line0"], zones)
    with pytest.raises(DeclarationError, match="without privacy"):
        powerflow.n_minus_1("case14", ["line0"], zones, solve_options={"diagnostics": False})
    with pytest.raises(DeclarationError, match="outage label"):
        powerflow.n_minus_1("case14", ["switch1"], zones)
