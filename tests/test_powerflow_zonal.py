"""Zones and the zonal problem (72): structure, sensitivities, centralized agreement, ADMM, errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse.linalg as spla

import powerflow
from powerflow.data import network_data
from powerflow.zonal import gradient_oracle
from privcvx.errors import DeclarationError, PrivacyError


@pytest.fixture(scope="module")
def case14_problem():
    return powerflow.zonal_problem("case14", 3)


@pytest.fixture(scope="module")
def case118_problem():
    return powerflow.zonal_problem("case118", 3)


def test_partition_gives_connected_zones_with_few_cut_lines() -> None:
    net = powerflow.load_case("case118")
    zones = powerflow.partition(net, 3, seed=0)
    data = network_data(net)
    assert set(zones) == set(net.bus.index) and set(zones.values()) == {1, 2, 3}
    cut = sum(zones[a] != zones[b] for a, b in zip(data.bus_labels[data.f], data.bus_labels[data.t], strict=True))
    assert cut <= 12
    assert powerflow.partition(net, 3, seed=0) == zones
    # connectivity is checked by zonal_problem's validation, which raises otherwise
    assert powerflow.zonal_problem(net, zones).info["zones"] == zones


def test_case118_standin_zones_use_pandapower_indices() -> None:
    net = powerflow.load_case("case118")
    zones = powerflow.case118_zones(net)
    by_number = {int(net.bus.at[index, "name"]): zone for index, zone in zones.items()}
    assert by_number[24] == 3 and by_number[116] == 2 and by_number[117] == 1 and by_number[33] == 2
    assert zones[23] == 3  # MATPOWER bus 24 is pandapower bus 23
    assert sorted(zones) == list(net.bus.index)


@pytest.mark.parametrize("fixture", ["case14_problem", "case118_problem"])
def test_zonal_structure(fixture: str, request: pytest.FixtureRequest) -> None:
    problem = request.getfixturevalue(fixture)
    owners: dict[str, int] = {}
    for agent in problem.agents:
        assert agent.name.startswith("zone-")
        assert all(not c.parameters() for c in agent.constraints)  # W_p is public
        assert {p.name() for p in agent.objective.parameters()} == {f"zone_{agent.name[5:]}_{d}"
                                                                    for d in ("pd", "qd")}
        for key in agent.shared:
            owners[key] = owners.get(key, 0) + 1
    assert min(owners.values()) >= 2  # every key is really shared
    for declared in problem.declared.values():
        assert declared.output_sensitivity.l1 == problem.info["beta"] == 0.01
        assert declared.output_sensitivity.nominal is not None  # the paper's OutPert beta: nominal (issue 26)
        assert declared.relation == powerflow.zonal.RELATION


@pytest.mark.parametrize("fixture", ["case14_problem", "case118_problem"])
def test_smoothness_and_gradient(fixture: str, request: pytest.FixtureRequest) -> None:
    problem = request.getfixturevalue(fixture)
    rng = np.random.default_rng(0)
    for agent, model in zip(problem.agents, problem.info["models"], strict=True):
        closed_form = agent.declared.smoothness
        a = model.mismatch_matrix
        numeric = 2 * spla.svds(a, k=1, return_singular_vectors=False)[0] ** 2
        assert closed_form == pytest.approx(numeric, rel=1e-9)
        x = rng.normal(size=model.x.size)
        model.x.value = x
        assert np.allclose(gradient_oracle(model)(x), agent.objective.grad[model.x].toarray().ravel())


@pytest.mark.parametrize("fixture", ["case14_problem", "case118_problem"])
def test_zonal_centralized_matches_socopf(fixture: str, request: pytest.FixtureRequest) -> None:
    problem = request.getfixturevalue(fixture)
    reference = powerflow.socopf(problem.info["case"])
    assert abs(problem.solve_centralized().value - reference.value) <= 1e-6


def test_zonal_centralized_matches_socopf_under_stress() -> None:
    net = powerflow.load_case("case14")
    net.load[["p_mw", "q_mvar"]] *= 4.0
    reference = powerflow.socopf(net).value
    zonal = powerflow.zonal_problem(net, 3).solve_centralized().value
    assert reference > 1.0
    assert zonal == pytest.approx(reference, rel=1e-6)


@pytest.mark.parametrize("objective", ["load_shedding", "cost"])
def test_full_consensus_zones_match_socopf(objective: str) -> None:
    """consensus="full": every zone holds the whole vector (one key, no private variable), its own buses' balance and
    loads; the sum of the zones' objectives over the intersection of their sets is socopf's optimum (stressed loads,
    so that Eq. (28)'s optimum is not 0), and each zone's declarations are those of the general form."""
    net = powerflow.load_case("case14")
    net.load[["p_mw", "q_mvar"]] *= 4.0 if objective == "load_shedding" else 1.0
    full = powerflow.zonal_problem(net, 3, objective=objective, consensus="full")
    general = powerflow.zonal_problem(net, 3, objective=objective)
    assert len(full.keys) == 1
    assert all(layout.shared_local.size == layout.dim == full.dim for layout in full.layouts)
    balances = np.sort(np.concatenate([model.balance for model in full.info["models"]]))
    assert np.array_equal(balances, np.arange(len(net.bus)))  # every bus's balance held by exactly one zone
    reference = powerflow.socopf(net, objective=objective).value
    assert reference > 1.0
    assert full.solve_centralized().value == pytest.approx(reference, rel=1e-6)
    for ours, theirs in zip(full.agents, general.agents, strict=True):
        assert ours.declared.sensitivity == theirs.declared.sensitivity
        assert ours.declared.smoothness == theirs.declared.smoothness


def test_coordinate_sensitivity_is_attained(case14_problem) -> None:
    """B_inf = 2 beta max |a_ik| (RandomizedADMM's per-coordinate bound): moving each load entry by beta, the largest
    change of one gradient coordinate, at a random point, equals the declared value."""
    from powerflow.zonal import moved_load

    for agent, model in zip(case14_problem.agents, case14_problem.info["models"], strict=True):
        gradient = gradient_oracle(model)
        x = np.random.default_rng(0).normal(size=model.x.size)
        base = gradient(x)
        worst = 0.0
        for entry in range(2 * len(model.balance)):
            with moved_load(model, entry, 0.01):
                worst = max(worst, float(np.abs(gradient(x) - base).max()))
        assert worst == pytest.approx(agent.declared.coordinate_sensitivity, rel=1e-9)


def _converged(row: dict) -> bool:
    return row["objective"] <= 1e-4 and row["consensus_residual"] <= 1e-3


@pytest.mark.parametrize(("fixture", "rho", "rounds"), [("case14_problem", 10.0, 300),
                                                        ("case118_problem", 30.0, 450)])
def test_distributed_admm_converges(fixture: str, rho: float, rounds: int, request: pytest.FixtureRequest) -> None:
    problem = request.getfixturevalue(fixture)
    eta = 1.8 / max(agent.smoothness for agent in problem.agents)  # eta = c / L_p with the worst zone's L_p
    result = problem.solve(rounds=rounds, local_updates=1, rho=rho, eta=eta,
                           callback=lambda row: not _converged(row))
    last = result.history.iloc[-1]
    assert last["objective"] <= 1e-4 and last["consensus_residual"] <= 1e-3
    assert last["round"] < rounds
    assert last["max_violation"] <= 1e-5


def test_bad_input_raises() -> None:
    net = powerflow.load_case("case14")
    with pytest.raises(DeclarationError, match="unknown pandapower.networks case"):
        powerflow.zonal_problem("case_nope")
    with pytest.raises(DeclarationError, match="zones must be in 1..14"):
        powerflow.zonal_problem(net, 15)
    with pytest.raises(DeclarationError, match="zones must be in 1..14"):
        powerflow.partition(net, 0)
    zones = powerflow.partition(net, 3)
    missing = dict(zones)
    missing.pop(5)
    with pytest.raises(DeclarationError, match=r"1 buses have no zone, e.g. \[5\]"):
        powerflow.zonal_problem(net, missing)
    with pytest.raises(DeclarationError, match="not buses"):
        powerflow.zonal_problem(net, {**zones, 99: 1})
    # buses 0 and 13 (MATPOWER 1 and 14) are not adjacent and their zone has no other bus
    split = {bus: ("a" if bus in (0, 13) else "b") for bus in net.bus.index}
    with pytest.raises(DeclarationError, match="zone 'a' is not connected"):
        powerflow.zonal_problem(net, split)
    for beta in (0.0, -0.01):
        with pytest.raises(PrivacyError, match="beta"):
            powerflow.zonal_problem(net, 3, beta=beta)
    with pytest.raises(PrivacyError, match="sensitivity"):
        powerflow.zonal_problem(net, 3, sensitivity="loose")


def test_iceland_defaults_stay_on_target_once_converged() -> None:
    """Issue 31: on iceland (5 zones) the defaults met f - f* <= 1e-3 and consensus residual <= 1e-3, then left it
    (3.8e-2 at round 104 before the fix): the tight first Clarabel solve of zone-1 stalled (InsufficientProgress)
    with residuals of 1e-10 and a duality gap of up to 4e-3, and that answer was accepted. Now the step is refined
    to the best gap (privcvx.localsolve.strategies), and the per-key penalty settles once the run meets
    EXACT_STEP_SETTLE. "Met" is the run's own convergence test (Boyd et al.'s primal and dual residuals at
    DEFAULT_TOL, the round a run with ``tol`` stops): every round from that one (73) to 120 meets the target. The
    consensus residual alone dips below 1e-3 at round 61 while the dual residual is 1.9e-2 (not converged: rho
    still adapts); 600 rounds: docs/tuning.md, "Iceland"."""
    import warnings

    import privcvx as pc
    from privcvx.algorithms.linearized_admm import DEFAULT_TOL
    from privcvx.errors import SolverAccuracyWarning

    problem = powerflow.zonal_problem("iceland", 5)
    optimum = problem.solve_centralized().value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SolverAccuracyWarning)
        first = problem.solve(pc.algorithms.LinearizedADMM(tol=DEFAULT_TOL), rounds=120, progress=False)
        result = problem.solve(pc.algorithms.LinearizedADMM(), rounds=120, progress=False)
    assert first.info["stop"] == "tolerance" and len(first.history) < 100
    later = result.history.iloc[len(first.history) - 1:]
    assert later["consensus_residual"].max() <= 1e-3
    assert (later["objective"] - optimum).max() <= 1e-3
    assert result.status == "converged"


@pytest.mark.parametrize(("argument", "value"), [("balance", "a"), ("balance", [1.5]), ("balance", [[0, 1]]),
                                                 ("balance", []), ("balance", [-1]), ("balance", [7]), ("own", [99])])
def test_bad_model_buses_raise_a_declaration_error_naming_the_argument(argument: str, value) -> None:
    """SocModel(own=..., balance=...): a string, floats, a 2-d list, an empty list, a bus out of range or a balance
    bus that is not an own bus is refused naming the argument and the model (a string and bus 99 raised ValueError
    and IndexError; floats were truncated and [[0, 1]] flattened in silence)."""
    from powerflow.model import SocModel

    data = powerflow.network_data(powerflow.load_case("case14"))
    kwargs = {"own": np.arange(5), argument: value}
    with pytest.raises(DeclarationError, match=f"model 'zone_a'.*{argument}") as caught:
        SocModel(data, name="zone_a", **kwargs)
    assert caught.value.argument == argument
