"""Certified local steps (privcvx/localsolve/certificate.py) on a case's conic zones (case14 by default) under OutG:
certificate quantiles and the time per local step with and without the certificate (docs/performance.md, "Certified
local steps").

For every Clarabel answer of a private OutG run (OutPert, derived sensitivity) it records the certificate of the
solver's own point (no polish: the complementarity gap) and of the polished point the layer releases, and the time
the certificate takes; then it runs the same problem with certificates off (the layer as before: Clarabel's answer
released, error_bound forced to the old 1e-8) and compares the local-solve seconds per step.

    PYTHONPATH=. python bench/certified_projection.py [--rounds 6] [--case case14]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import privcvx as pc
from privcvx.localsolve import certificate
from privcvx.localsolve import problem as local_problem

RECORDS: list[dict] = []
#: The runs' privacy: OutPert (derived), whose projection is certified within its own solver_error e.
PRIVACY = pc.OutputPerturbation(pc.Gaussian(1.0, 0.01), sensitivity="derived")


def recording_certify(original):
    def certify(self, x, y, q, min_weight, target=0.0):
        start, cpu = time.perf_counter(), time.process_time()
        plain = self.bound(x, self.dual_cone_projection(y), q, min_weight)
        answer = original(self, x, y, q, min_weight, target)
        RECORDS.append({"plain": plain.distance, "released": answer.distance, "seconds": time.perf_counter() - start,
                        "cpu": time.process_time() - cpu, "n": x.size})
        return answer
    return certify


def run(rounds: int, case: str) -> tuple[float, int, float]:
    """A private OutG run on the case's 3 zones; the local-solve seconds, steps and largest released certificate of
    the conic zones."""
    import powerflow

    seen: list = []
    original = local_problem.LocalProblem.__init__

    def keep(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(self)

    local_problem.LocalProblem.__init__ = keep
    try:
        problem = powerflow.zonal_problem(case, 3)
        problem.solve(rounds=rounds, local_updates=1, rho=100.0, eta=pc.schedules.inverse_sqrt(),
                      privacy=PRIVACY, seed=0)
    finally:
        local_problem.LocalProblem.__init__ = original
    conic = [local for local in seen if local.kind == "conic"]
    return (sum(local.stats.seconds for local in conic), sum(local.stats.solves for local in conic),
            max(local.largest_certificate for local in conic))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--case", default="case14")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    certify = certificate.Certifier.certify
    certificate.Certifier.certify = recording_certify(certify)
    seconds, steps, largest = run(args.rounds, args.case)
    certificate.Certifier.certify = certify
    plain = np.array([r["plain"] for r in RECORDS])
    released = np.array([r["released"] for r in RECORDS])
    cost = np.array([r["seconds"] for r in RECORDS])
    quantiles = (0, 50, 90, 100)
    print(f"{args.case} OutG, {args.rounds} rounds: {len(RECORDS)} certified Clarabel answers over {steps} conic steps "
          f"(n = {min(r['n'] for r in RECORDS)}-{max(r['n'] for r in RECORDS)}); e = {PRIVACY.solver_error:g}")
    print("certificate of Clarabel's own point (0/50/90/100%): "
          + " / ".join(f"{np.percentile(plain, p):.1e}" for p in quantiles))
    print("certificate of the polished point (every answer):   "
          + " / ".join(f"{np.percentile(released, p):.1e}" for p in quantiles))
    print(f"above e: {np.mean(released > PRIVACY.solver_error):.1%} of answers (re-solved or passed on); largest "
          f"certificate of a released step: {largest:.1e}")
    cpu = np.array([r["cpu"] for r in RECORDS])
    print(f"certificate time per answer: median {1e3 * np.median(cost):.1f} ms, max {1e3 * cost.max():.1f} ms; "
          f"CPU time (less sensitive to the machine's load) median {1e3 * np.median(cpu):.1f} ms, "
          f"total {cpu.sum():.2f} s")
    # before: no certifier (Clarabel's answer released as is), the old allowance in place of error_bound
    certifier_for = local_problem.certifier_for
    error_bound = local_problem.LocalProblem.error_bound
    local_problem.certifier_for = lambda data, penalized: None
    local_problem.LocalProblem.error_bound = property(lambda self: 0.0 if self.kind in ("free", "box") else 1e-8)
    try:
        before, before_steps, _ = run(args.rounds, args.case)
    finally:
        local_problem.certifier_for = certifier_for
        local_problem.LocalProblem.error_bound = error_bound
    print(f"local-solve time per conic step: before {1e3 * before / before_steps:.2f} ms, "
          f"with certificates {1e3 * seconds / steps:.2f} ms ({seconds / before:.1f}x)")


if __name__ == "__main__":
    main()
