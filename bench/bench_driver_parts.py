"""Where a digits round of privcvx goes beyond the agents' work, against the numpy floor (issue 28, diagnostics off).

    PYTHONPATH=. .venv/bin/python bench/bench_driver_parts.py [--rounds 200] [--repeats 3] [--transcript none]

The set-up of ``bench_numpy_floor.py`` (digits, 10 IID agents, the box [-0.1, 0.1], Algorithm 1 with E = 5,
rho = 0.01, eta = "auto", non-private, serial, diagnostics off). Three measurements, by the thread's CPU clock:

1. **The agents against the floor.** The floor's round t, then privcvx's (its round and history row, driven as
   ``bench_diagnostics.py`` drives them), alternating; ``ADMMAgent.step`` wrapped in a timer. Medians over the
   rounds of ``--repeats`` runs after a warm-up run: the floor's round, privcvx's, the agents' steps, and the rest.
2. **The driver's parts**: its methods wrapped in timers (which add their own cost) in one run of privcvx alone,
   ms per round, each including the parts it calls.
3. **Line 8 and the residuals warm and cold**: ``ConsensusDuals.update`` on digits' shapes (10 x 640 copies), its
   inputs read-only as a run passes them (the server's w, the releases as sent), called in a loop, then with 6 MB of
   other memory written between calls (as the agents' data pass through the caches between two rounds' monitors).
   Medians of 300 calls.
4. **Page faults** (printed first: measured first, in the new process): the thread's minor page faults
   (``ru_minflt``) per round, in the agents' steps and in the rest of the round, with the transcript kept in memory
   (the default) and dropped (``transcript="none"``). A run keeps every message in memory: each round's releases
   (10 x 5 kB) and messages are new memory that the process touches for the first time, which the floor, keeping
   nothing, never does. Then what one such first touch costs: a byte written to each of 1000 pages of new memory,
   less the same writes again.

``--transcript`` (default "memory") is the transcript of measurements 1 and 2.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import privcvx as pc
from privcvx import messages
from privcvx.algorithms import admm_agent, admm_server, consensus
from privcvx.runtime import backends, loop
from problems import datasets, federated_logistic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_diagnostics import stepped  # noqa: E402
from bench_numpy_floor import AGENTS, BOUND, LOCAL_UPDATES, NumpyAlgorithm1  # noqa: E402

RHO = 0.01
#: The driver's parts timed by measurement 2: (class, method).
DRIVER = [(loop.Run, "round"), (loop.Run, "row"), (admm_agent.ADMMAgent, "step"), (admm_server.ADMMServer, "step"),
          (admm_server.ADMMMonitor, "observe"), (consensus.ConsensusDuals, "update"),
          (consensus.ConsensusDuals, "average"), (loop.Divergence, "diverging"), (loop.Ergodic, "add"),
          (loop.Run, "_record"), (backends.AgentHost, "_replies"), (messages.Router, "post")]


def timers(parts: list[tuple[type, str]], spent: dict[str, float]) -> Callable[[], None]:
    """Wrap each method in a CPU-clock timer adding to ``spent``; returns the function that unwraps them."""
    originals = [(cls, name, getattr(cls, name)) for cls, name in parts]
    for cls, name, inner in originals:
        def wrapper(*args: Any, _inner: Callable = inner, _label: str = f"{cls.__name__}.{name}",
                    **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.thread_time() - start
        setattr(cls, name, wrapper)

    def restore() -> None:
        for cls, name, inner in originals:
            setattr(cls, name, inner)
    return restore


def algorithm() -> pc.algorithms.LinearizedADMM:
    return pc.algorithms.LinearizedADMM(local_updates=LOCAL_UPDATES, rho=RHO, eta="auto")


def agents_against_floor(X: np.ndarray, y: np.ndarray, problem: pc.DistributedProblem, rounds: int,
                         repeats: int, transcript: str) -> None:
    spent: dict[str, float] = {}
    restore = timers([(admm_agent.ADMMAgent, "step")], spent)
    samples = []
    for repeat in range(repeats + 1):  # the first is a warm-up
        floor = NumpyAlgorithm1(X, y, problem.info["shares"], rho=RHO, private=False)
        with stepped(problem, algorithm(), rounds, False, transcript=transcript) as step:
            for t in range(1, rounds + 1):
                start = time.thread_time()
                floor.round(t)
                middle = time.thread_time()
                spent.clear()
                step(t)
                if repeat:
                    samples.append((middle - start, time.thread_time() - middle, spent["ADMMAgent.step"]))
    restore()
    floor_s, privcvx_s, agents_s = np.array(samples).T
    print(f"1. per round (CPU ms, medians over {repeats} x {rounds} rounds): floor {np.median(floor_s) * 1e3:.3f}, "
          f"privcvx {np.median(privcvx_s) * 1e3:.3f} ({np.median(privcvx_s / floor_s):.3f}x), agents' steps "
          f"{np.median(agents_s) * 1e3:.3f} ({np.median(agents_s / floor_s):.3f}x the floor's round), the rest "
          f"{np.median(privcvx_s - agents_s) * 1e3:.3f}")


def driver_parts(problem: pc.DistributedProblem, rounds: int, transcript: str) -> None:
    spent: dict[str, float] = {}
    with stepped(problem, algorithm(), rounds, False, transcript=transcript) as step:
        step(1)  # the first round (compilation, caches) is not counted
        restore = timers(DRIVER, spent)
        for t in range(2, rounds + 1):
            step(t)
        restore()
    print(f"2. the driver's parts, CPU ms per round (each with what it calls; rounds 2-{rounds}):")
    for label, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"   {label:28s} {seconds / (rounds - 1) * 1e3:.4f}")


def line_eight_warm_and_cold(problem: pc.DistributedProblem) -> None:
    duals = consensus.ConsensusDuals(problem.layouts, problem.dim)
    rng = np.random.default_rng(0)
    w, w_previous = rng.uniform(-BOUND, BOUND, problem.dim), rng.uniform(-BOUND, BOUND, problem.dim)
    other = np.ones(750_000)  # 6 MB
    medians = []
    w.flags.writeable = w_previous.flags.writeable = False
    for cold in (False, True):
        times = []
        for _ in range(300):
            released = [rng.uniform(-BOUND, BOUND, layout.shared_local.size) for layout in problem.layouts]
            for z_p in released:
                z_p.flags.writeable = False
            if cold:
                other += 1.0
            start = time.thread_time()
            duals.update(w, w_previous, released, RHO)
            times.append(time.thread_time() - start)
        medians.append(np.median(times) * 1e6)
    print(f"3. ConsensusDuals.update (line 8 and the residuals): {medians[0]:.1f} us warm, {medians[1]:.1f} us with "
          "6 MB written between calls")


def faults() -> int:
    """The minor page faults of this thread so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def page_faults(problem: pc.DistributedProblem, rounds: int) -> None:
    counted = {"agents": 0}
    inner = admm_agent.ADMMAgent.step

    def step_counted(self: admm_agent.ADMMAgent, *args: Any, **kwargs: Any) -> Any:
        before = faults()
        try:
            return inner(self, *args, **kwargs)
        finally:
            counted["agents"] += faults() - before
    admm_agent.ADMMAgent.step = step_counted
    try:
        for transcript in ("memory", "none"):
            with stepped(problem, algorithm(), rounds, False, transcript=transcript) as step:
                step(1)
                counted["agents"], before = 0, faults()
                for t in range(2, rounds + 1):
                    step(t)
                whole = faults() - before
            print(f"4. page faults per round, transcript={transcript!r} (rounds 2-{rounds}): agents' steps "
                  f"{counted['agents'] / (rounds - 1):.1f}, the rest {(whole - counted['agents']) / (rounds - 1):.1f}")
    finally:
        admm_agent.ADMMAgent.step = inner
    print(f"   a first touch of a new page costs {first_touch() * 1e6:.2f} us (median of 20 x 1000 pages)")


def first_touch() -> float:
    """Seconds to write one byte to each page of new anonymous memory, less the same writes again: a page fault
    (with the page's zeroing), per page."""
    import mmap

    pages, costs = 1000, []
    for _ in range(20):
        memory = mmap.mmap(-1, mmap.PAGESIZE * pages)
        view = np.frombuffer(memory, dtype=np.uint8)
        start = time.perf_counter()
        view[::mmap.PAGESIZE] = 1
        first = time.perf_counter() - start
        start = time.perf_counter()
        view[::mmap.PAGESIZE] = 2
        costs.append((first - (time.perf_counter() - start)) / pages)
        del view
        memory.close()
    return float(np.median(costs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--transcript", choices=["memory", "none"], default="memory")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the runs end at max_rounds (ConvergenceWarning)
    X, y = datasets.load_digits()
    problem = federated_logistic(X, y, agents=AGENTS, bound=BOUND, seed=0)
    page_faults(problem, args.rounds)  # first: a new process's heap grows with the transcript, as a user's run's does
    agents_against_floor(X, y, problem, args.rounds, args.repeats, args.transcript)
    driver_parts(problem, args.rounds, args.transcript)
    line_eight_warm_and_cold(problem)


if __name__ == "__main__":
    main()
