"""Cost of sealing the secret shares of RandomizedADMM (Algorithm 3 of Xiao, Ye & Devadas over X25519 +
ChaCha20-Poly1305 channels): the table of docs/ldp.md ("Threat model of the secret-shared exchange").

    nice -n 15 .venv/bin/python bench/bench_sealed_shares.py [--agents 10] [--dim 10] [--rounds 100] [--repeats 3]

Non-private, on a consensus problem (privcvx.algorithms.conformance.consensus_problem, no box) with ``--agents``
agents of dimension ``--dim`` on the complete graph (Algorithm 3 sends a share to every other agent, so it refuses
a ring), serial backend, ``diagnostics=False``. Prints the median over ``--repeats`` of the wall time per round of

* the plain exchange (x_i broadcast in the clear),
* the secret-shared exchange (on this code base: sealed shares; run the same command with PYTHONPATH on a
  checkout from before the channels to time the shares sent in the clear),
* and, where ``privcvx.privacy.secure_channel`` exists, the sealing alone: one round's N (N - 1) seals and opens of
  shares of the same size, without the rest of the run.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np

import privcvx as pc
from privcvx.algorithms import RandomizedADMM
from privcvx.algorithms.conformance import consensus_problem


def per_round(problem: pc.DistributedProblem, algorithm: RandomizedADMM, rounds: int, repeats: int) -> float:
    """The median over ``repeats`` runs of the wall time of a run divided by its rounds, in ms."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        problem.solve(algorithm, pc.Topology.complete(), rounds=rounds, seed=1, diagnostics=False)
        times.append((time.perf_counter() - start) / rounds * 1e3)
    return statistics.median(times)


def sealing_alone(agents: int, dim: int, repeats: int) -> float | None:
    """The median time of one round's seals and opens (every agent to every other), in ms; None before the channels."""
    try:
        from privcvx.privacy.noise import SecureNoise
        from privcvx.privacy.secure_channel import KEY_BYTES, PairwiseChannels
    except ImportError:
        return None
    names = [f"agent-{i}" for i in range(agents)]
    channels = {name: PairwiseChannels(name, SecureNoise().key_material(KEY_BYTES)) for name in names}
    for name, channel in channels.items():
        channel.connect({peer: other.public_key for peer, other in channels.items() if peer != name})
    limbs = RandomizedADMM().sharing(agents).limbs
    share = np.arange(dim * limbs, dtype="<u8").reshape(dim, limbs)
    times = []
    for t in range(1, 1 + max(repeats, 20)):
        start = time.perf_counter()
        for sender in names:
            for receiver in names:
                if receiver != sender:
                    channels[receiver].open(sender, t, 1, channels[sender].seal(receiver, t, 1, share))
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--dim", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    problem = consensus_problem(agents=args.agents, n=args.dim, bound=None)
    plain = per_round(problem, RandomizedADMM(), args.rounds, args.repeats)
    shared = per_round(problem, RandomizedADMM(exchange="secret_sharing"), args.rounds, args.repeats)
    sealing = sealing_alone(args.agents, args.dim, args.repeats)
    print(f"N = {args.agents}, d = {args.dim}, {args.rounds} rounds, median of {args.repeats}")
    print(f"plain exchange           {plain:8.2f} ms/round")
    print(f"secret-shared exchange   {shared:8.2f} ms/round")
    if sealing is not None:
        print(f"sealing alone            {sealing:8.2f} ms/round ({args.agents * (args.agents - 1)} seals + opens)")


if __name__ == "__main__":
    main()
