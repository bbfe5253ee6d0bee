"""A run as a user's script does it, for the kill-and-resume test: build the problem from scratch, then solve.

    python resumable_run.py CASE BACKEND OUT [--checkpoint PATH] [--resume PATH] [--pause-after K] [--kill-at N]

CASE names a problem and settings (see `build`). The result is saved to OUT (``Result.save``). With
``--pause-after K`` the script writes OUT + ".paused" after round K and sleeps, so that the test can kill it
with SIGKILL in the middle of the run. With ``--kill-at N`` it kills itself with SIGKILL at the N-th file operation
of the checkpoint code in this process (a write, an append, a rename or a deletion: every step of a checkpoint
write), half the time before the operation and half after it (N's parity).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core_problems import box_l1_least_squares, general_form, rendezvous_sites, soc_linear  # noqa: E402

import privcvx as pc  # noqa: E402

SENSITIVITY = pc.Sensitivity(l1=0.3, l2=0.2)


def build(case: str, shards: Path | None = None) -> tuple[pc.DistributedProblem, dict]:
    if case.startswith("dpdg-factory"):  # "dpdg-factory:ADDRESSES.npy": per-host shards beside the checkpoint
        problem = rendezvous_sites(case.split(":", 1)[1], agents=4, shards=str(shards))
        return problem, {"algorithm": pc.algorithms.DPDistributedGradient(epsilon=1.0, q=0.9),
                         "topology": pc.Topology.ring()}
    if case == "objpert-gaussian":  # cones (Clarabel), E = 3, adaptive rho (declared L_p)
        problem, eta, _ = soc_linear(agents=3)
        options = {"local_updates": 3, "eta": eta, "privacy": pc.ObjectivePerturbation(pc.Gaussian(0.5, 1e-5))}
    elif case == "outpert-laplace":  # general form with private variables, E = 2, adaptive rho
        problem, eta, _ = general_form()
        options = {"local_updates": 2, "eta": eta, "privacy": pc.OutputPerturbation(pc.Laplace(1.0))}
    elif case == "objpert-laplace-l1":  # an l1-ball (Clarabel direct), E = 1, fixed rho
        problem, eta, rho = box_l1_least_squares(agents=3)
        options = {"eta": eta, "rho": rho, "privacy": pc.ObjectivePerturbation(pc.Laplace(0.5))}
    elif case == "objpert-accelerated":  # server-side acceleration: over-relaxation, Anderson, per-key rho
        problem, eta, _ = general_form()
        options = {"eta": eta, "relaxation": 1.6, "anderson": 3, "rho": "adaptive-per-key",
                   "privacy": pc.ObjectivePerturbation(pc.Gaussian(0.5, 1e-5))}
    else:
        raise SystemExit(f"unknown case {case}")
    for agent in problem.agents:
        agent.sensitivity = SENSITIVITY
        agent.smoothness = 1.0 / eta  # declared, as privacy requires for rho="adaptive"
    return problem, options


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("backend")
    parser.add_argument("out", type=Path)
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--pause-after", type=int)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--kill-at", type=int)
    args = parser.parse_args()
    checkpoint = args.checkpoint or args.resume
    problem, options = build(args.case, None if checkpoint is None else checkpoint.parent)
    if args.kill_at is not None:
        _kill_at(args.kill_at)

    def pause(row: dict) -> bool:
        if args.pause_after is not None and row["round"] == args.pause_after:
            deadline = time.monotonic() + 60  # a round on disk first: the background commit may lag behind the rounds
            while args.checkpoint is not None and not args.checkpoint.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            Path(str(args.out) + ".paused").write_text("paused")
            time.sleep(600)  # killed here
        return True

    warnings.simplefilter("ignore")  # integer seeds: a reproducibility test
    algorithm = options.pop("algorithm", None)
    result = problem.solve(algorithm, rounds=args.rounds, seed=17, backend=args.backend, checkpoint=args.checkpoint,
                           resume=args.resume, callback=pause, **options)
    result.save(args.out)


def _kill_at(n: int) -> None:
    """SIGKILL this process at the n-th file operation of the checkpoint code (`main`'s ``--kill-at``)."""
    from privcvx.runtime import checkpoint

    calls = {"n": 0}

    def counted(operation):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls["n"] += 1
            if calls["n"] == n and n % 2 == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            out = operation(*args, **kwargs)
            if calls["n"] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        return wrapper

    for name in ("write_temporary", "replace_temporary", "remove_shard", "remove_temporaries"):
        setattr(checkpoint, name, counted(getattr(checkpoint, name)))
    checkpoint.Log.append = counted(checkpoint.Log.append)


if __name__ == "__main__":
    main()
