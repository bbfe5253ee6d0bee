"""A run that is sent a real SIGINT (Ctrl-C) to its whole process group, for tests/test_faults.py.

    python interrupted_run.py BACKEND AT_ROUND [--twice]

At round AT_ROUND the callback sends SIGINT to the process group (the driver and, unless they ignore it, the
workers), as a terminal's Ctrl-C does. ``--twice``: a second SIGINT arrives while the result is being gathered.
Prints one JSON line: the result's status, rounds and ledger steps, and the pids of the workers that ran.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import warnings

import numpy as np

import privcvx as pc
from privcvx.runtime import loop


def main() -> None:
    from problems.rendezvous import rendezvous

    backend, at_round, twice = sys.argv[1], int(sys.argv[2]), "--twice" in sys.argv
    warnings.simplefilter("ignore")
    problem = rendezvous(np.random.default_rng(0).uniform(-1, 1, (4, 2)))
    if twice:
        gather = loop.Run.result

        def result_after_a_second_ctrl_c(self, hosts, stop):  # noqa: ANN001, ANN202
            os.killpg(os.getpgrp(), signal.SIGINT)
            return gather(self, hosts, stop)

        loop.Run.result = result_after_a_second_ctrl_c

    def ctrl_c(row: dict) -> None:
        if row["round"] == at_round:
            os.killpg(os.getpgrp(), signal.SIGINT)

    result = problem.solve(pc.algorithms.DPDistributedGradient(epsilon=1.0), pc.Topology.ring(), rounds=10_000,
                           seed=1, backend=backend, callback=ctrl_c)
    print(json.dumps({"status": result.status, "rounds": len(result.history),
                      "steps": [int(s) for s in result.privacy["steps"]], "transcript": len(result.transcript),
                      "pids": sorted({host["pid"] for host in result.info["hosts"]})}))


if __name__ == "__main__":
    main()
