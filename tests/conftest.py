"""Fixtures that several test modules share."""

from __future__ import annotations

import warnings

import pytest

import privcvx as pc
from privcvx.algorithms import consensus_problem
from privcvx.errors import ReproducibleNoiseWarning


@pytest.fixture
def quiet_seeds():
    """Seeded (reproducible) noise on purpose: its warning is silenced for the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        yield


@pytest.fixture(scope="module")
def graph_problem():
    """8 heterogeneous strongly convex agents on a random connected graph with 14 edges, and the centralized
    reference: (problem, topology, reference)."""
    problem = consensus_problem(agents=8, bound=None)
    return problem, pc.Topology.random(edges=14, seed=3), problem.solve_centralized()
