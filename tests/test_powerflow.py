"""The SOC model of Appendix D against pandapower: physics (runpp), lower bound (runopp), load shedding."""

from __future__ import annotations

import numpy as np
import pandapower as pp
import pytest

import powerflow
from powerflow.data import network_data
from powerflow.model import SocModel
from privcvx.errors import DeclarationError

CASES = ["case14", "case118"]


def _pandapower_point(net: pp.pandapowerNet, model: SocModel) -> tuple[np.ndarray, np.ndarray]:
    """Model vector with pandapower's W = V V^H (flows zero) and pandapower's flows stacked [pf; qf; pt; qt]."""
    data = model.data
    res = net.res_bus.loc[data.bus_labels]
    v = res.vm_pu.to_numpy() * np.exp(1j * np.deg2rad(res.va_degree.to_numpy()))
    x = np.zeros(model.x.size)
    x[model.block("w")] = np.abs(v[model.buses]) ** 2
    cross = v[data.pair_from[model.pairs]] * np.conj(v[data.pair_to[model.pairs]])
    x[model.block("wr")], x[model.block("wi")] = cross.real, cross.imag
    columns = {"line": ("p_from_mw", "q_from_mvar", "p_to_mw", "q_to_mvar"),
               "trafo": ("p_hv_mw", "q_hv_mvar", "p_lv_mw", "q_lv_mvar")}
    flows = np.zeros((4, len(model.branches)))
    for k, label in enumerate(np.asarray(data.branch_labels)[model.branches]):
        element = label.rstrip("0123456789")
        row = net[f"res_{element}"].loc[int(label[len(element):])]
        flows[:, k] = [row[c] for c in columns[element]]
    pg = np.zeros(len(model.gens))
    qg = np.zeros(len(model.gens))
    for element in ("ext_grid", "gen"):
        rows = net._pd2ppc_lookups[element]
        res_gen = net[f"res_{element}"]
        position = np.searchsorted(data.gen_rows, rows[res_gen.index.to_numpy()])
        pg[position], qg[position] = res_gen.p_mw.to_numpy(), res_gen.q_mvar.to_numpy()
    x[model.block("pg")], x[model.block("qg")] = pg / data.base_mva, qg / data.base_mva
    return x, flows.ravel() / data.base_mva


@pytest.mark.parametrize("case", CASES)
def test_physics_agrees_with_runpp(case: str) -> None:
    net = powerflow.load_case(case)
    pp.runpp(net)
    data = network_data(net)
    model = SocModel(data, np.arange(data.nb))
    x, pandapower_flows = _pandapower_point(net, model)
    model_flows = model.flow_matrix() @ x  # (71f)-(71i) evaluated at pandapower's voltages
    assert np.max(np.abs(model_flows - pandapower_flows)) <= 1e-4
    n = len(model.branches)
    for k, block in enumerate(("pf", "qf", "pt", "qt")):
        x[model.block(block)] = model_flows[k * n:(k + 1) * n]
    model.x.value = x
    assert np.max(np.abs(model.mismatch.value)) <= 1e-4  # (71b)-(71c) with pandapower's generation
    assert model.constraints["flows"][0].violation().max() <= 1e-12
    (soc,) = model.constraints["soc"]
    gap = soc.args[0].value - np.linalg.norm(soc.args[1].value, axis=0)  # (71l) holds with equality
    assert np.max(np.abs(gap)) <= 1e-6


@pytest.mark.parametrize("case", CASES)
def test_cost_relaxation_is_a_lower_bound_of_runopp(case: str) -> None:
    net = powerflow.load_case(case)
    pp.runopp(net)
    assert net.OPF_converged
    ac_cost = float(net.res_cost)
    soc = powerflow.socopf(net, objective="cost")
    assert soc.value <= ac_cost * (1 + 1e-7)
    assert (ac_cost - soc.value) / ac_cost <= 0.01
    assert np.max(np.abs(soc.mismatch)) <= 1e-6


@pytest.mark.parametrize("case", CASES)
def test_load_shedding_optimum_is_near_zero(case: str) -> None:
    result = powerflow.socopf(case)
    assert result.status == "optimal"
    assert 0 <= result.value <= 1e-6
    model = result.model
    model.x.value = np.concatenate([result.solution[b] for b in ("w", "wr", "wi", "pf", "qf", "pt", "qt",
                                                                  "pg", "qg")])
    assert max(c.violation().max() for c in model.constraint_list) <= 1e-6


def test_load_shedding_is_positive_when_loads_exceed_generation() -> None:
    net = powerflow.load_case("case14")
    net.load[["p_mw", "q_mvar"]] *= 4.0
    data = network_data(net)
    result = powerflow.socopf(net)
    shortfall = data.pd.sum() - data.pmax.sum()
    assert shortfall > 0
    # By Cauchy-Schwarz, the active mismatches alone cost at least shortfall^2 / nb.
    assert result.value >= shortfall**2 / data.nb


def test_unrated_policy_and_case_errors() -> None:
    data14 = network_data(powerflow.load_case("case14"))
    assert not data14.rated.any()  # MATPOWER RATE_A = 0 -> pandapower 9900 MVA -> unrated
    with pytest.raises(DeclarationError, match="case_unknown"):
        powerflow.load_case("case_unknown")
    with pytest.raises(DeclarationError, match="objective"):
        powerflow.socopf("case14", objective="voltage")
