"""The examples run: the worked example of docs/algorithms.md is a conforming algorithm."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import privcvx as pc
from privcvx.algorithms import check_algorithm
from privcvx.algorithms.conformance import consensus_problem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from gradient_tracking import GradientTracking  # noqa: E402


def test_the_one_file_example_algorithm_conforms_and_is_exact():
    report = check_algorithm(GradientTracking(), rounds=300)
    assert "consensus: refused (constraints)" in report["optimum"]
    problem = consensus_problem(agents=6, bound=None)
    result = problem.solve(GradientTracking(), pc.Topology.random_sequence(edges=7, seed=0), rounds=300)
    assert np.linalg.norm(result.w - problem.solve_centralized().w) <= 1e-6  # exact with a constant step
