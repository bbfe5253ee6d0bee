"""The certified distance of every released local step of a study, per method (docs/privacy.md, "The solver's error").

Runs a TOML study (`privcvx compare`'s format) method by method and records, for every step whose certificate is
enforced, the certified l2 distance to the exact step; prints its 50/90/99/99.9/100% quantiles against the
problem's declared e, and the runs that failed.

    PYTHONPATH=. python bench/certified_study.py examples/compare_case14.toml [--rounds 200] [--out out/certified]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

import privcvx as pc
from privcvx.localsolve import strategies
from privcvx.study_file import load

RECORDS: dict[str, list[tuple[float, float]]] = {}
CURRENT = ["?"]


def record(solve):
    def recorded(self, *args, **kwargs):
        answer = solve(self, *args, **kwargs)
        if self.local.enforcing:
            RECORDS.setdefault(CURRENT[0], []).append((self.distance, self.local.certified_error))
        return answer
    return recorded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("study", type=Path)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("out/certified_study"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    for kind in (strategies.ClarabelStep, strategies.OSQPStep, strategies.Factorization):
        kind.solve = record(kind.solve)
    study = load(args.study, {} if args.rounds is None else {"rounds": args.rounds}).study
    methods = list(study.methods)
    for method in methods:
        CURRENT[0] = method.label
        study.methods[:] = [method]
        start = time.perf_counter()
        result = pc.compare(study, args.out / method.label, keep_going=True, progress=False)
        steps = np.array(RECORDS.get(method.label, []))
        line = f"{method.label}: {len(result.failed)} runs failed, {time.perf_counter() - start:.0f} s"
        if steps.size:
            quantiles = np.quantile(steps[:, 0], [0.5, 0.9, 0.99, 0.999, 1.0])
            line += (f", {len(steps)} certified steps, e = {steps[0, 1]:g}, 50/90/99/99.9/100%: "
                     + " / ".join(f"{v:.1e}" for v in quantiles))
        print(line, flush=True)


if __name__ == "__main__":
    main()
