"""The backends' groups of agents: balanced by the agents' public sizes, against a brute-force optimum."""

from __future__ import annotations

import itertools
import os

import cvxpy as cp
import numpy as np
import pytest

import privcvx as pc
from privcvx.runtime.backends import _groups, agent_sizes


def optimum(sizes: list[float], count: int) -> float:
    """The smallest possible largest load of ``count`` groups, by trying every assignment."""
    return min(max(sum(s for s, g in zip(sizes, assignment, strict=True) if g == k) for k in range(count))
               for assignment in itertools.product(range(count), repeat=len(sizes)))


@pytest.mark.parametrize("count", [2, 3])
def test_groups_are_balanced(count):
    rng = np.random.default_rng(5)
    for _ in range(40):  # few agents: the optimum, found independently here by trying every assignment
        sizes = [float(s) for s in rng.integers(1, 60, size=int(rng.integers(count, 9)))]
        groups = _groups(sizes, count)
        assert sorted(i for members in groups for i in members) == list(range(len(sizes)))
        assert all(members == sorted(members) and members for members in groups)
        assert max(sum(sizes[i] for i in members) for members in groups) == optimum(sizes, count)
    sizes = [float(s) for s in rng.integers(1, 60, size=40)]  # many: the greedy path, near the lower bound
    groups = _groups(sizes, count)
    assert sorted(i for members in groups for i in members) == list(range(40))
    assert max(sum(sizes[i] for i in members) for members in groups) <= 1.02 * sum(sizes) / count
    assert _groups([3, 3, 2, 2, 2], 2) == [[0, 1], [2, 3, 4]]  # 6 and 6; dealt round-robin: 7 and 5
    assert _groups([5.0], 4) == [[0]]


def test_agent_sizes_count_variables_and_constraint_rows():
    x, u = cp.Variable(4), cp.Variable((2, 3))
    agent = pc.Agent(cp.sum_squares(x) + cp.sum(u), [x <= 1, u >= 0, cp.norm(x) <= 2], shared={"w": x}, name="a")
    y = cp.Variable(4)
    other = pc.Agent(cp.sum_squares(y - 1), [y <= 3], shared={"w": y}, name="b")
    problem = pc.DistributedProblem([agent, other])
    assert agent_sizes(problem) == [4 + 6 + 4 + 6 + 1, 4 + 4]  # entries of x and u; of the constraints: 4, 6, 1
    result = problem.solve(rounds=2, rho=1.0, eta=0.1)
    hosts = result.info["hosts"]
    assert [host["pid"] for host in hosts] == [os.getpid()] * 2
    assert all(host["busy_s"] > 0 and host["cpu_s"] > 0 for host in hosts)
    assert hosts[0]["peak_memory_mib"] > 10


def test_release_only_runs_report_no_step_times_or_solver_counters():
    """Step times and solver counters depend on the private data: a release-only run leaves them out of
    ``result.info`` (node, pid and peak memory stay), a research run keeps them."""
    x = cp.Variable(3)
    agent = pc.Agent(cp.sum_squares(x - 1), [cp.norm(x) <= 2], shared={"w": x}, name="a")
    y = cp.Variable(3)
    other = pc.Agent(cp.sum_squares(y + 1), [cp.norm(y) <= 3], shared={"w": y}, name="b")
    problem = pc.DistributedProblem([agent, other])
    research = problem.solve(rounds=2, rho=1.0, eta=0.1)
    release_only = problem.solve(rounds=2, rho=1.0, eta=0.1, diagnostics=False)
    assert all({"busy_s", "cpu_s"} <= set(host) for host in research.info["hosts"])
    assert all(set(host) == {"node", "pid", "peak_memory_mib"} for host in release_only.info["hosts"])
    research_reports, release_reports = research.info["local_solve"], release_only.info["local_solve"]
    assert all({"inaccurate", "fallbacks", "seconds"} <= set(report) for report in research_reports.values())
    assert [set(report) for report in release_reports.values()] == [{"kind", "strategy", "solves"}] * 2
