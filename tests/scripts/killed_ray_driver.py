"""A Ray run whose driver is killed with SIGKILL, for tests/test_ray_cleanup.py.

    python killed_ray_driver.py MARKER

Starts a local Ray instance through ``solve(backend="ray")`` and, after round 1, writes its pid to MARKER and sleeps
(the test then kills it with SIGKILL and checks that none of the Ray processes it started survives).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import privcvx as pc


def main() -> None:
    from problems.rendezvous import rendezvous

    marker = Path(sys.argv[1])
    warnings.simplefilter("ignore")
    problem = rendezvous(np.random.default_rng(0).uniform(-1, 1, (4, 2)))

    def wait_to_be_killed(row: dict) -> None:
        if row["round"] == 1:
            marker.write_text(str(os.getpid()))
            time.sleep(600)

    problem.solve(pc.algorithms.DPDistributedGradient(epsilon=1.0), pc.Topology.ring(), rounds=10, seed=1,
                  backend="ray", callback=wait_to_be_killed)


if __name__ == "__main__":
    main()
