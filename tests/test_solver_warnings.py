"""Solver warnings kept inside a run (issue 31, point 7): CVXPY's "Solution may be inaccurate" and pandapower's
console noise do not reach the user; inaccurate solves are counted per agent and reported once, by name."""

from __future__ import annotations

import warnings

import cvxpy as cp
import pytest
from core_problems import box_l1_least_squares

import privcvx as pc
from privcvx.algorithms import LinearizedADMM
from privcvx.errors import SolverAccuracyWarning


@pytest.fixture
def inaccurate_solver(monkeypatch):
    """Every CVXPY solve that ends optimal reports optimal_inaccurate instead, through CVXPY's own path (its
    ``unpack_results`` then warns "Solution may be inaccurate", as it does for a real inaccurate solve)."""
    original = cp.Problem.unpack_results

    def unpack_results(self, solution, chain, inverse_data):
        class Inaccurate:
            def __getattr__(self, name):
                return getattr(chain, name)

            def invert(self, result, data):
                inverted = chain.invert(result, data)
                if inverted.status == cp.OPTIMAL:
                    inverted.status = cp.OPTIMAL_INACCURATE
                return inverted

        return original(self, solution, Inaccurate(), inverse_data)

    monkeypatch.setattr(cp.Problem, "unpack_results", unpack_results)


@pytest.fixture
def inaccurate_local_steps(monkeypatch):
    """Every answer of the local-solve layer's strategies is flagged inaccurate (as a solver's "optimal_inaccurate"
    or "solved inaccurate" status is); the exact steps no longer go through CVXPY's solve."""
    from privcvx.localsolve import STRATEGIES

    for kind in STRATEGIES:
        def solve(self, *args, original=kind.solve):
            return original(self, *args)[0], True

        monkeypatch.setattr(kind, "solve", solve)


def _caught(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    return value, caught


def test_inaccurate_local_steps_warn_once_by_agent(inaccurate_local_steps):
    problem, _, _ = box_l1_least_squares(agents=3)
    result, caught = _caught(lambda: problem.solve(LinearizedADMM(local_updates="exact"), rounds=3, progress=False))
    assert not [w for w in caught if "may be inaccurate" in str(w.message)]
    ours = [w for w in caught if issubclass(w.category, SolverAccuracyWarning)]
    assert len(ours) == 1 and all(name in str(ours[0].message) for name in result.agents)
    assert result.info["inaccurate_solves"] == {name: 3 for name in result.agents}


def test_inaccurate_reference_warns_once(inaccurate_solver):
    problem, _, _ = box_l1_least_squares(agents=3)
    reference, caught = _caught(problem.solve_centralized)
    assert reference.status == cp.OPTIMAL_INACCURATE
    assert not [w for w in caught if "may be inaccurate" in str(w.message)]
    assert [issubclass(w.category, SolverAccuracyWarning) for w in caught] == [True]


def test_accurate_runs_stay_silent():
    problem, _, _ = box_l1_least_squares(agents=3)
    result, caught = _caught(lambda: problem.solve(LinearizedADMM(local_updates="exact"), rounds=3, progress=False))
    assert "inaccurate_solves" not in result.info
    # the only warning of a 3-round run is that it did not converge; nothing from the solver
    assert [w.category for w in caught] == [pc.ConvergenceWarning] and result.status == "max_rounds"
    assert isinstance(pc.errors.SolverAccuracyWarning(), UserWarning)


@pytest.mark.parametrize("case", ["case14", "case118"])
def test_pandapower_stays_quiet(case, caplog, capfd):
    """zonal_problem and ac_check on the cases of docs/powerflow.md: no pandapower log record at WARNING or above
    ("gen vm_pu > bus max_vm_pu", "numba cannot be imported"), no Python warning, nothing on the console."""
    powerflow = pytest.importorskip("powerflow")
    import logging

    from powerflow.results import ac_check, to_net

    caplog.set_level(logging.WARNING)
    net = powerflow.load_case(case)
    zones = powerflow.case118_zones(net) if case == "case118" else 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problem = powerflow.zonal_problem(net, zones)
        if case == "case14":
            check = ac_check(to_net(net, problem.solve_centralized(), problem))
            assert check.converged
    assert not caught and not caplog.records
    captured = capfd.readouterr()
    assert "pandapower" not in captured.err + captured.out and "vm_pu" not in captured.err + captured.out


def test_the_warning_points_at_the_users_call(inaccurate_local_steps):
    problem, _, _ = box_l1_least_squares(agents=2)
    _, caught = _caught(lambda: problem.solve(LinearizedADMM(local_updates="exact"), rounds=1, progress=False))
    ours = [w for w in caught if issubclass(w.category, SolverAccuracyWarning)]
    assert len(ours) == 1 and ours[0].filename == __file__
