"""Power-flow answers in pandapower's terms (issue 20): result tables, the AC check, zonal answers, errors."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import powerflow
from privcvx.errors import DeclarationError, SolverError
from privcvx.reference import CentralizedSolution


def _eta(problem) -> float:
    """1.8 / max L_p over the zones' declared smoothness."""
    return 1.8 / max(agent.smoothness for agent in problem.agents)


@pytest.fixture(scope="module")
def nets():
    return {case: powerflow.load_case(case) for case in ("case14", "case118")}


@pytest.fixture(scope="module")
def case14_problem(nets):
    return powerflow.zonal_problem(nets["case14"], 3)


def _converged(target: float | None = None):
    """Stop rule: objective <= 1e-4 (or within 1e-4 relative of ``target``) and consensus residual small."""
    def keep_going(row: dict) -> bool:
        if target is None:
            return not (row["objective"] <= 1e-4 and row["consensus_residual"] <= 1e-3)
        return not (abs(row["objective"] - target) <= 1e-4 * target and row["consensus_residual"] <= 1e-4)
    return keep_going


@pytest.mark.parametrize("case", ["case14", "case118"])
def test_to_net_tables_match_the_model_variables(case: str, nets) -> None:
    net = nets[case]
    result = powerflow.socopf(net)
    data = result.model.data
    out = powerflow.to_net(net, result)
    assert out is not net and net.res_bus.empty  # a copy; the input is untouched
    position = {int(b): k for k, b in enumerate(data.bus_labels)}
    rows = [position[int(b)] for b in out.res_bus.index]
    assert np.max(np.abs(out.res_bus.vm_pu.to_numpy() - np.sqrt(result.solution["w"][rows]))) <= 1e-6
    # the slack is the angle reference; every bus gets an angle
    slack = net.ext_grid.bus.iloc[0]
    assert out.res_bus.va_degree[slack] == pytest.approx(net.ext_grid.va_degree.iloc[0])
    assert out.res_bus.va_degree.notna().all()
    # shed = mismatch of the model, per bus, in MW / MVAr
    shed = np.concatenate([out.res_bus.p_shed_mw.to_numpy(), out.res_bus.q_shed_mvar.to_numpy()])
    mismatch = np.concatenate([result.mismatch[:data.nb][rows], result.mismatch[data.nb:][rows]]) * data.base_mva
    assert np.allclose(shed, mismatch, atol=1e-9)
    # generator and branch tables, in pandapower's element indices and sign convention
    total_gen = out.res_gen.p_mw.sum() + out.res_ext_grid.p_mw.sum()
    assert total_gen == pytest.approx(result.solution["pg"].sum() * data.base_mva)
    line0 = data.branch_labels.index(f"line{net.line.index[0]}")
    assert out.res_line.p_from_mw.iloc[0] == pytest.approx(result.solution["pf"][line0] * data.base_mva)
    trafo0 = data.branch_labels.index(f"trafo{net.trafo.index[0]}")
    assert out.res_trafo.q_lv_mvar.iloc[0] == pytest.approx(result.solution["qt"][trafo0] * data.base_mva)
    assert out.res_line.loading_percent.isna().all()  # every branch of case14 / case118 is unrated
    # bus balance: sum of the bus injections equals the losses (pandapower's sign: load positive)
    losses = out.res_line.pl_mw.sum() + out.res_trafo.pl_mw.sum()
    assert -out.res_bus.p_mw.sum() == pytest.approx(losses, abs=1e-6)
    assert (out.res_bus.tie_disagreement == 0).all()


@pytest.mark.parametrize("case", ["case14", "case118"])
@pytest.mark.parametrize(("objective", "vm_tolerance"), [("cost", 1.5e-2), ("load_shedding", 5e-2)])
def test_ac_check_from_the_relaxed_point(case: str, objective: str, vm_tolerance: float, nets) -> None:
    net = nets[case]
    check = powerflow.ac_check(powerflow.to_net(net, powerflow.socopf(net, objective=objective)))
    print(case, objective, check)
    assert check.converged
    assert check.max_vm_diff_pu < vm_tolerance
    assert np.isfinite([check.max_va_diff_degree, check.max_flow_diff_mva, check.max_injection_diff_mva]).all()
    if case == "case14" and objective == "cost":  # the relaxation is exact here: runpp barely moves
        assert check.max_vm_diff_pu < 1e-3 and check.max_injection_diff_mva < 2.0
        assert check.max_va_diff_degree < 3.0 and check.max_flow_diff_mva < 15.0  # angles: sign and tree
        assert check.voltage_limits_hold and check.line_limits_hold


def test_distributed_nominal_case14_agrees_on_the_shed(nets, case14_problem) -> None:
    """Nominal loads: every zero-mismatch point is optimal, so only the shed (0) is determined, not the voltages."""
    net, problem = nets["case14"], case14_problem
    central = powerflow.to_net(net, powerflow.socopf(net))
    run = problem.solve(rounds=300, local_updates=1, rho=10.0, eta=_eta(problem),
                        callback=_converged())
    assert len(run.history) < 300
    distributed = powerflow.to_net(net, run, problem=problem)
    shed = (distributed.res_bus[["p_shed_mw", "q_shed_mvar"]] - central.res_bus[["p_shed_mw", "q_shed_mvar"]]).abs()
    vm = (distributed.res_bus.vm_pu - central.res_bus.vm_pu).abs().max()
    print(f"rounds {len(run.history)}, max shed difference {shed.to_numpy().max():.3g} MW/MVAr, "
          f"max vm difference {vm:.3g} p.u. (not determined by the objective)")
    assert shed.to_numpy().max() <= 1.0  # objective <= 1e-4 p.u.^2 bounds every mismatch by 1 MW / MVAr
    interior = [b for b in net.bus.index if not any(f"w:{b}" in a.shared for a in problem.agents)]
    assert (distributed.res_bus.tie_disagreement[interior] == 0).all()
    assert 0 < distributed.res_bus.tie_disagreement.max() <= 1e-3


def test_distributed_matches_centralized_when_the_answer_is_unique(nets) -> None:
    """Loads x4: the optimum sheds load and pins the operating point; ADMM agrees with socopf to 1e-3 p.u."""
    net = copy.deepcopy(nets["case14"])
    net.load[["p_mw", "q_mvar"]] *= 4.0
    problem = powerflow.zonal_problem(net, 3)
    reference = powerflow.socopf(net)
    central = powerflow.to_net(net, reference)
    zonal = powerflow.to_net(net, problem.solve_centralized(), problem=problem)
    assert (zonal.res_bus.vm_pu - central.res_bus.vm_pu).abs().max() <= 1e-4
    run = problem.solve(rounds=800, local_updates=1, rho=10.0, eta=_eta(problem),
                        callback=_converged(reference.value))
    assert len(run.history) < 800
    distributed = powerflow.to_net(net, run, problem=problem)
    vm = (distributed.res_bus.vm_pu - central.res_bus.vm_pu).abs().max()
    shed = (distributed.res_bus.p_shed_mw - central.res_bus.p_shed_mw).abs().max()
    print(f"rounds {len(run.history)}, max vm difference {vm:.3g} p.u., max p shed difference {shed:.3g} MW, "
          f"total shed {central.res_bus.p_shed_mw.sum():.1f} MW")
    assert vm <= 1e-3
    assert shed <= 0.5
    assert central.res_bus.p_shed_mw.sum() > 50.0
    check = powerflow.ac_check(distributed)  # the shed load is taken off before runpp
    assert check.converged and check.max_vm_diff_pu < 5e-2


def _stressed_case14(nets):
    net = copy.deepcopy(nets["case14"])
    net.load[["p_mw", "q_mvar"]] *= 4.0  # the optimum sheds load and pins the operating point
    return net


def test_full_consensus_answer_is_the_average_of_the_zones_copies(nets) -> None:
    """consensus="full": copies x* + delta_k of socopf's optimum x*, with sum_k delta_k = 0, give socopf's own tables
    (each value is the average of the copies), and tie_disagreement is each bus's largest spread among the copies
    of the variables touching it, recomputed here bus by bus (the code before this test raised ValueError)."""
    net = _stressed_case14(nets)
    problem = powerflow.zonal_problem(net, 3, consensus="full")
    reference = powerflow.socopf(net)
    x = np.concatenate([reference.solution[name] for name in powerflow.model.BLOCKS])
    model = problem.info["models"][0]
    assert x.size == model.x.size and np.array_equal(model.buses, reference.model.buses)
    deltas = np.random.default_rng(1).normal(scale=1e-2, size=(len(problem.agents), x.size))
    deltas -= deltas.mean(axis=0)
    copies = [x + delta for delta in deltas]
    solution = CentralizedSolution(value=reference.value, w=x, z=copies, status="optimal")
    answer, central = powerflow.to_net(net, solution, problem=problem), powerflow.to_net(net, reference)
    for table in ("res_bus", "res_line", "res_trafo", "res_gen", "res_ext_grid"):
        columns = [c for c in central[table].columns if c != "tie_disagreement"]
        assert np.allclose(answer[table][columns], central[table][columns], rtol=0, atol=1e-9, equal_nan=True), table
    data, spread = model.data, np.ptp(deltas, axis=0)
    for bus in range(data.nb):
        touching = [model.index("w", np.flatnonzero(model.buses == bus))]
        pairs = np.flatnonzero((data.pair_from[model.pairs] == bus) | (data.pair_to[model.pairs] == bus))
        branches = np.flatnonzero((data.f[model.branches] == bus) | (data.t[model.branches] == bus))
        gens = np.flatnonzero(data.gen_bus[model.gens] == bus)
        touching += [model.index(name, pairs) for name in ("wr", "wi")]
        touching += [model.index(name, branches) for name in ("pf", "qf", "pt", "qt")]
        touching += [model.index(name, gens) for name in ("pg", "qg")]
        expected = spread[np.concatenate(touching)].max()
        assert answer.res_bus.tie_disagreement[data.bus_labels[bus]] == pytest.approx(expected, rel=1e-12)


def test_full_consensus_centralized_answer_matches_socopf(nets) -> None:
    """The full-consensus form's centralized optimum, in pandapower's terms, is socopf's (4x loads: a unique point)."""
    net = _stressed_case14(nets)
    problem = powerflow.zonal_problem(net, 3, consensus="full")
    answer = powerflow.to_net(net, problem.solve_centralized(), problem=problem)
    central = powerflow.to_net(net, powerflow.socopf(net))
    vm = (answer.res_bus.vm_pu - central.res_bus.vm_pu).abs().max()
    shed = (answer.res_bus[["p_shed_mw", "q_shed_mvar"]] - central.res_bus[["p_shed_mw", "q_shed_mvar"]]).abs()
    print(f"max vm difference {vm:.2g} p.u., max shed difference {shed.to_numpy().max():.2g} MW/MVAr")
    assert vm <= 1e-5 and shed.to_numpy().max() <= 1e-3
    assert central.res_bus.p_shed_mw.sum() > 50.0


def test_bad_input_raises_privcvx_errors(nets, case14_problem) -> None:
    net14, net118 = nets["case14"], nets["case118"]
    result14 = powerflow.socopf(net14)
    with pytest.raises(DeclarationError, match="the solution is of"):
        powerflow.to_net(net118, result14)
    solution = case14_problem.solve_centralized()
    with pytest.raises(DeclarationError, match="needs problem="):
        powerflow.to_net(net14, solution)
    with pytest.raises(DeclarationError, match="needs no problem="):
        powerflow.to_net(net14, result14, problem=case14_problem)
    with pytest.raises(DeclarationError, match="the solution is of"):
        powerflow.to_net(net118, solution, problem=case14_problem)
    with pytest.raises(DeclarationError, match="expected a SocopfResult"):
        powerflow.to_net(net14, {"w": 1.0})
    with pytest.raises(DeclarationError, match="expected a pandapower net"):
        powerflow.to_net("case14", result14)
    stressed = copy.deepcopy(net14)
    stressed.load["p_mw"] *= 2.0
    with pytest.raises(DeclarationError, match="loads differ"):
        powerflow.to_net(stressed, result14)
    with pytest.raises(DeclarationError, match="no relaxed results"):
        powerflow.ac_check(net14)
    answer = powerflow.to_net(net14, result14)
    with pytest.raises(SolverError, match="runpp failed"):
        powerflow.ac_check(answer, algorithm="no-such-algorithm")
    assert not powerflow.ac_check(answer, max_iteration=1, init="flat").converged


def test_plots_draw_on_given_axes(nets, case14_problem) -> None:
    import matplotlib.pyplot as plt

    net = nets["case14"]
    zones = case14_problem.info["zones"]
    fig, axes = plt.subplots(1, 3)
    try:
        assert powerflow.plot_zones(net, zones, ax=axes[0]) is axes[0]
        ties = [line for line in axes[0].lines if line.get_color() == "red" and len(line.get_xdata()) == 2]
        assert len(ties) == len(case14_problem.info["cut_branches"])
        answer = powerflow.to_net(net, powerflow.socopf(net))
        drawn = powerflow.plot_comparison({"centralized": answer}, zones, ax=axes[1:])
        assert drawn[0] is axes[1] and len(axes[1].lines) == 1 and len(axes[2].patches) == 3
    finally:
        plt.close(fig)


def test_private_result_without_diagnostics_fills_only_what_zones_sent(nets, case14_problem) -> None:
    import privcvx as pc

    net, problem = nets["case14"], case14_problem
    with pytest.warns(pc.errors.ReproducibleNoiseWarning):
        run = problem.solve(rounds=5, local_updates=1, rho=10.0, eta=_eta(problem), seed=0,
                            privacy=pc.ObjectivePerturbation(pc.Gaussian(epsilon=1.0, delta=1e-5)), diagnostics=False)
    answer = powerflow.to_net(net, run, problem=problem)
    boundary = [b for b in net.bus.index if any(f"w:{b}" in a.shared for a in problem.agents)]
    interior = [b for b in net.bus.index if b not in boundary]
    assert answer.res_bus.vm_pu[boundary].notna().all() and answer.res_bus.vm_pu[interior].isna().all()
    assert answer.res_bus.p_shed_mw.isna().all()  # the shed is a function of the private loads
    assert answer.res_bus.tie_disagreement[boundary].max() > 0
    with pytest.raises(DeclarationError, match="diagnostics=False"):
        powerflow.ac_check(answer)


def test_plot_comparison_tells_two_references_apart_and_draws_a_legend():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    net = powerflow.load_case("case14")
    answer = powerflow.to_net(net, powerflow.socopf(net))
    volt, _ = powerflow.plot_comparison({"centralized socopf": answer, "centralized (zonal reference)": answer})
    colours = [line.get_color() for line in volt.get_lines()]
    assert len(set(colours)) == 2 and volt.get_legend() is not None
    plt.close("all")
