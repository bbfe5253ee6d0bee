"""How far `LocalProblem.project` answers are from exact projections (tests/reference_projections.py).

For every reference set: the fixture's point and ``--points`` random points about it (point + 2 N(0, I)), each
projected by privcvx's local-solve layer (the strategy it picks: Clarabel for cones and inequalities, a
factorization for equalities only) and exactly; reported per set: the strategy, the largest per-coordinate error,
the median and largest l2 error, and how many answers exceed the layer's stated allowance (`error_bound` per
coordinate, 1e-8) per coordinate and sqrt(n) error_bound in l2.

    cd /work/wt/ref && PYTHONPATH=. /work/main/.venv/bin/python bench/reference_distance.py [--points 100] [--gaps]

``--gaps``: for each fixture point, Clarabel re-solved on the layer's data at the layer's settings and at a 1e-14
target: status, duality gap (primal minus dual objective), sqrt(2 gap / min w) and the distance to the exact answer.
``--prototype FILE``: session 35's certificate (branch s35-conic, not merged) against the exact distances, on the
fixture point and 19 random points per set, after
``git show s35-conic:bench/certified_projection.py > /tmp/certproto.py``; ``--prototype /tmp/certproto.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from pathlib import Path

import clarabel
import cvxpy as cp
import numpy as np
import scipy.sparse as sp

import privcvx as pc
from privcvx.localsolve import LocalProblem
from privcvx.localsolve.strategies import SOLVER_SETTINGS, clarabel_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import reference_projections as ref  # noqa: E402


def local_problem(reference: ref.Reference) -> LocalProblem:
    """The reference's set as one agent's projection (f_p plays no part in `project`)."""
    x = cp.Variable(reference.dim)
    agent = pc.Agent(cp.sum_squares(x), reference.constraints(x), shared=x, name=reference.name)
    return LocalProblem(agent, pc.DistributedProblem([agent]).layouts[0])


def measure(reference: ref.Reference, points: int, rng: np.random.Generator) -> dict:
    local = local_problem(reference)
    coordinate, l2 = [], []
    for k in range(points + 1):
        point = reference.point if k == 0 else reference.point + 2.0 * rng.normal(size=reference.dim)
        answer = local.project(point, reference.weights)
        exact = reference.projection if k == 0 else reference.exact(point)
        coordinate.append(float(np.max(np.abs(answer - exact))))
        l2.append(ref.l2_distance(answer, exact))
    coordinate, l2 = np.array(coordinate), np.array(l2)
    allowance = local.error_bound
    return {"set": reference.name, "n": reference.dim, "strategy": local.strategy, "fixture_coord": coordinate[0],
            "fixture_l2": l2[0], "max_coord": coordinate.max(), "median_l2": float(np.median(l2)), "max_l2": l2.max(),
            "over_coord": int(np.sum(coordinate > allowance)),
            "over_l2": int(np.sum(l2 > np.sqrt(reference.dim) * allowance)), "solves": len(l2),
            "inaccurate": local.stats.inaccurate, "retries": local.stats.retries}


def gaps(reference: ref.Reference) -> None:
    """The fixture point's solve by Clarabel on the layer's data (`ClarabelStep`), at two targets."""
    local = local_problem(reference)
    if local.strategy != "clarabel":
        return
    local.project(reference.point, reference.weights)  # builds the step's data for these weights
    step = local.chain[0]
    q = step.linear_term(2.0 * reference.weights / reference.weights.max() * reference.point)
    tight = {"tol_gap_abs": 1e-14, "tol_gap_rel": 1e-14, "tol_feas": 1e-14, "tol_ktratio": 1e-12}
    layer = SOLVER_SETTINGS[cp.CLARABEL]
    for label, settings in (("layer", layer), ("1e-14", {**layer, **tight})):
        solution = clarabel.DefaultSolver(sp.triu(step.full_p, format="csc"), q, local.data.A, local.data.b,
                                          local.data.cones, clarabel_settings(settings)).solve()
        gap = solution.obj_val - solution.obj_val_dual
        wmin = 2.0 * reference.weights.min() / reference.weights.max()
        error = ref.l2_distance(np.asarray(solution.x)[local.data.columns], reference.projection)
        print(f"{reference.name:24s} {label:6s} {str(solution.status):13s} gap {gap:9.2e} "
              f"sqrt(2 gap/min w) {np.sqrt(2 * max(gap, 0.0) / wmin):8.1e} l2 error {error:8.1e}")


def prototype(path: str, rng: np.random.Generator) -> None:
    """The prototype's bound ||z - z_f|| + sqrt(2 gap / min w) (its `Certifier`) against the exact l2 error."""
    spec = importlib.util.spec_from_file_location("certproto", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for reference in ref.references():
        local = local_problem(reference)
        if local.strategy != "clarabel":
            continue
        local.project(reference.point, reference.weights)
        step, data, certifier = local.chain[0], local.data, module.Certifier(local.data)
        weights = 2.0 * reference.weights / reference.weights.max()
        rows = []
        for k in range(20):
            point = reference.point if k == 0 else reference.point + 2.0 * rng.normal(size=reference.dim)
            certifier.P, certifier.q = step.full_p, step.linear_term(weights * point)
            x, y, _, _ = module.solve(step.full_p, certifier.q, data, SOLVER_SETTINGS[cp.CLARABEL])
            feasibility, optimality, _, box = certifier.bound(x, y, weights)
            rows.append((feasibility + optimality, ref.l2_distance(x[data.columns], reference.exact(point)),
                         certifier.parts[2], box))
        bound, error, c_n, box = np.array(rows).T
        print(f"{reference.name:24s} columns {data.A.shape[1]}/{reference.dim} bound median {np.median(bound):.1e} "
              f"max {bound.max():.1e}; error max {error.max():.1e}; min(bound - error) {np.min(bound - error):.1e}; "
              f"|c_N|_1 max {c_n.max():.1e}, R |c_N|_1 max {box.max():.1e}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--gaps", action="store_true")
    parser.add_argument("--prototype", metavar="FILE")
    args = parser.parse_args()
    if args.prototype:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prototype(args.prototype, np.random.default_rng(1))
        return
    if args.gaps:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for reference in ref.references():
                gaps(reference)
        return
    rng = np.random.default_rng(36)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = [measure(reference, args.points, rng) for reference in ref.references()]
    print(f"{'set':24s} {'n':>2s} {'strategy':13s} {'fixture c/l2':>17s} {'max coord':>9s} {'med l2':>8s} "
          f"{'max l2':>8s} {'over 1e-8 c/l2':>14s} {'solves':>6s} {'inacc':>5s} {'retry':>5s}")
    for r in rows:
        print(f"{r['set']:24s} {r['n']:2d} {r['strategy']:13s} {r['fixture_coord']:8.1e} {r['fixture_l2']:8.1e} "
              f"{r['max_coord']:9.1e} {r['median_l2']:8.1e} {r['max_l2']:8.1e} "
              f"{r['over_coord']:6d}/{r['over_l2']:<7d} {r['solves']:6d} {r['inaccurate']:5d} {r['retries']:5d}")


if __name__ == "__main__":
    main()
