"""The privacy accounting of long private runs: its cost per round (issue 29, point 3) and its range (issue 26, 8).

    PYTHONPATH=. .venv/bin/python bench/bench_accounting_cost.py [--old /work/main] [--rounds 3000] [--agents 50]
    PYTHONPATH=. .venv/bin/python bench/bench_accounting_cost.py --long [--rounds 20000] [--q 0.9]

Cost: ``DPDistributedGradient(epsilon=1, q=0.9)`` (a new Laplace mechanism in every agent's ledger each round) on
``problems.rendezvous`` with ``--agents`` agents in R^2 on a ring, seed 1, ``diagnostics=False``, serial backend.
One child process per tree (PYTHONPATH), the old one first; each reports the mean ms per round over the first and
the last 100 rounds (from a callback's time stamps: the round, its accounting and its history row) and the time
of the final privacy table.

Long (this tree only): the same method on 3 agents for ``--rounds`` rounds, whose noise multipliers 1/epsilon_t pass
1e154 (their squares overflowed the accountant) and then the float range; it checks the run's epsilons against an
independent computation: Theorem 5's closed form epsilon (1 - (q/p)^K) for basic composition, and dp-accounting's
RDP and PLD accountants on the releases that matter (epsilon_t >= 1e-150; the rest add less than 1e-149).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _problem(agents: int):  # noqa: ANN202 - the child imports privcvx from its tree
    from problems.rendezvous import rendezvous

    return rendezvous(np.random.default_rng(3).uniform(-1, 1, (agents, 2)), meeting=(-1.0, 0.2))


def child(rounds: int, agents: int) -> None:
    """Time one run with the privcvx on PYTHONPATH; print a JSON report on the last line of stdout."""
    import privcvx as pc
    from privcvx.algorithms import DPDistributedGradient

    warnings.simplefilter("ignore")
    stamps: list[float] = []
    start = time.perf_counter()
    result = _problem(agents).solve(DPDistributedGradient(epsilon=1.0, q=0.9), pc.Topology.ring(), rounds=rounds,
                                    seed=1, diagnostics=False, callback=lambda row: stamps.append(time.perf_counter()))
    end = time.perf_counter()
    per_round = np.diff(stamps) * 1e3
    print(json.dumps({"privcvx": pc.__file__, "first": float(per_round[:100].mean()),
                      "last": float(per_round[-100:].mean()), "table_s": end - stamps[-1], "total_s": end - start,
                      "epsilon": float(result.history["epsilon"].iloc[-1])}))


def cost(old: Path, rounds: int, agents: int) -> None:
    rows = []
    for label, tree in (("before", old), ("after", REPO)):
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(rounds), "--agents", str(agents)],
                             env=env, cwd=tree, capture_output=True, text=True, check=True)
        report = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append((label, report))
    print(f"DPDG, {agents} agents, {rounds} rounds (ms per round; load average {os.getloadavg()[0]:.1f})\n")
    print("| tree | first 100 rounds | last 100 rounds | last / first | final privacy table | epsilon |")
    print("|---|---|---|---|---|---|")
    for label, r in rows:
        print(f"| {label} ({Path(r['privcvx']).parents[1]}) | {r['first']:.2f} ms | {r['last']:.2f} ms | "
              f"{r['last'] / r['first']:.2f} | {r['table_s']:.1f} s | {r['epsilon']:.6f} |")


def long_run(rounds: int, q: float) -> None:
    import dp_accounting
    from dp_accounting import pld, rdp

    import privcvx as pc
    from privcvx.algorithms import DPDistributedGradient
    from privcvx.algorithms.dp_gradient_accuracy import optimal_noise_decay

    warnings.simplefilter("ignore")
    problem, epsilon = _problem(3), 1.0
    algorithm = DPDistributedGradient(epsilon=epsilon, q=q)
    start = time.perf_counter()
    result = problem.solve(algorithm, pc.Topology.ring(), rounds=rounds, seed=1, diagnostics=False)
    elapsed = time.perf_counter() - start
    step = algorithm.prepare(problem, pc.Topology.ring().bind(problem.names), rounds).schedule()
    p = optimal_noise_decay(q)
    charged = [t for t in range(2, rounds + 2) if step(t - 1) > 0]
    per_release = [epsilon * (p - q) / p * (q / p) ** (t - 2) for t in charged]  # Theorem 5's epsilon_t
    matter = [e for e in per_release if e >= 1e-150]
    references = {}
    accountants = (("rdp", rdp.RdpAccountant()), ("pld", pld.PLDAccountant(value_discretization_interval=1e-3)))
    for name, accountant in accountants:
        for value in matter:
            accountant.compose(dp_accounting.LaplaceDpEvent(1.0 / value))
        references[name] = float(accountant.get_epsilon(1e-6))
    row = {key: float(value) for key, value in result.privacy.iloc[0].items() if key != "agent"}
    print(f"DPDG q = {q}, p = {p:.6f}, 3 agents, {rounds} rounds: finished in {elapsed:.1f} s; "
          f"{int(row['steps'])} charged releases ({len(charged)} expected: gamma_t underflows to 0 after them), "
          f"{sum(1 / e > 1.34e154 for e in per_release)} with a multiplier past 1.34e154, "
          f"the largest 1 / epsilon_t {1.0 / min(per_release):.3g}\n")
    print("| column | the run | independent | how |")
    print("|---|---|---|---|")
    print(f"| epsilon_basic | {row['epsilon_basic']!r} | {math.fsum(per_release)!r} | closed form sum of epsilon_t |")
    print(f"| epsilon_rdp | {row['epsilon_rdp']!r} | {references['rdp']!r} | dp-accounting RDP, epsilon_t >= 1e-150 |")
    print(f"| epsilon_pld | {row['epsilon_pld']!r} | {references['pld']!r} | dp-accounting PLD, epsilon_t >= 1e-150 |")
    print(f"| epsilon_advanced | {row['epsilon_advanced']!r} | - | finite |")
    print(f"| history epsilon (last round) | {float(result.history['epsilon'].iloc[-1])!r} | "
          f"{min(references['rdp'], math.fsum(per_release))!r} | min(RDP, basic) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, default=Path("/work/main"))
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--q", type=float, default=0.9)
    parser.add_argument("--long", action="store_true")
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.rounds, args.agents)
    elif args.long:
        long_run(args.rounds or 20_000, args.q)
    else:
        cost(args.old, args.rounds or 3000, args.agents)


if __name__ == "__main__":
    main()
