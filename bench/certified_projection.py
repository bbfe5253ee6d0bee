"""Prototype: a certified distance bound for a local step computed by Clarabel (notes/certified_projection.md).

Captures the conic local solves of a short OutG run (case14, 3 zones) and of soc_linear, then for each one:
re-solves (w, b) with the layer's settings (the same answer), repairs feasibility (equalities by least squares,
cones by moving toward a public Slater point), bounds the optimal value from below with Clarabel's dual (projected
onto K*), and reports ||z - z*||_2 <= ||z - z_f|| + sqrt(2 (g(x_f) - L) / min w). Then the same with a refined solve.

    PYTHONPATH=. python bench/certified_projection.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import time
import warnings

import clarabel
import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from privcvx.localsolve import problem as lsp
from privcvx.localsolve.strategies import CLARABEL_REFINEMENT, SOLVER_SETTINGS, clarabel_settings

CAPTURED: list[tuple] = []


def capture() -> None:
    original = lsp.LocalProblem._solve

    def wrapped(self, weights, linear, point, warm_start):
        z = original(self, weights, linear, point, warm_start)
        if self.data is not None and not self.data.qp:
            CAPTURED.append((self, np.array(weights, dtype=float, copy=True), np.array(linear, copy=True), z.copy()))
        return z

    lsp.LocalProblem._solve = wrapped


# ---- cones ---------------------------------------------------------------------------------------------------
def blocks(cones):
    """(kind, start, size) per cone block, in the order of A's rows."""
    out, start = [], 0
    for cone in cones:
        name, size = type(cone).__name__, int(cone.dim if hasattr(cone, "dim") else cone.dimension)
        if name == "NonnegativeConeT":
            out += [("nonneg", start + i, 1) for i in range(size)]  # one block per row: its own margin
        else:
            out.append(({"ZeroConeT": "zero", "SecondOrderConeT": "soc"}[name], start, size))
        start += size
    return out


def proj_soc(v):
    t, u = v[0], v[1:]
    nu = np.linalg.norm(u)
    if nu <= t:
        return v.copy()
    if nu <= -t:
        return np.zeros_like(v)
    a = 0.5 * (t + nu)
    return np.concatenate([[a], a * u / nu])


def dist_and_margin(s, blks):
    """Per non-zero block: the distance of s to the cone, and the radius of the largest ball about s inside it."""
    dist, margin = [], []
    for kind, i, n in blks:
        v = s[i:i + n]
        if kind == "zero":
            continue
        if kind == "nonneg":
            dist.append(max(-v[0], 0.0))
            margin.append(max(v[0], 0.0))
        else:
            dist.append(float(np.linalg.norm(proj_soc(v) - v)))
            margin.append(max((v[0] - np.linalg.norm(v[1:])) / np.sqrt(2.0), 0.0))
    return np.array(dist), np.array(margin)


def proj_dual(y, blks):
    """y projected onto K* (zero cone: free; nonneg and SOC: self-dual)."""
    y = y.copy()
    for kind, i, n in blks:
        if kind == "nonneg":
            y[i] = max(y[i], 0.0)
        elif kind == "soc":
            y[i:i + n] = proj_soc(y[i:i + n])
    return y


# ---- the certificate -------------------------------------------------------------------------------------------
class Certifier:
    """One local problem's public data: the equality rows' least-squares operator and a Slater point."""

    def __init__(self, data, radius_scale: float = 10.0):
        self.data, self.blks = data, blocks(data.cones)
        A, b = data.A.toarray(), data.b
        self.A, self.b = A, b
        neq = data.zero
        self.Aeq, self.beq = A[:neq], b[:neq]
        self.Aeq_pinv = np.linalg.pinv(self.Aeq) if neq else None
        self.x0 = self.slater()
        s0 = b - A @ self.x0
        _, self.margin = dist_and_margin(s0, self.blks)
        self.radius_scale = radius_scale
        self.dual_polish = False

    def on_equalities(self, x):
        if self.Aeq_pinv is None:
            return x
        for _ in range(2):  # least squares, then once more on the residual (iterative refinement)
            x = x - self.Aeq_pinv @ (self.Aeq @ x - self.beq)
        return x

    def slater(self):
        """max t s.t. A x + s = b, s - t e in K, t <= 1 (e: 1 on nonneg rows, the axis of each SOC)."""
        data, m = self.data, self.A.shape[0]
        e = np.zeros(m)
        for kind, i, n in self.blks:
            if kind in ("nonneg", "soc"):
                e[i] = 1.0
        n = self.A.shape[1]
        A2 = sp.vstack([sp.hstack([data.A, sp.csc_matrix(e[:, None])]),
                        sp.csc_matrix(([1.0], ([0], [n])), shape=(1, n + 1))]).tocsc()
        b2 = np.concatenate([self.b, [1.0]])
        cones = list(data.cones)
        cones.append(clarabel.NonnegativeConeT(1))
        # the appended row must sit with the cones: put it last as its own nonneg cone
        q = np.zeros(n + 1)
        q[n] = -1.0
        sol = clarabel.DefaultSolver(sp.csc_matrix((n + 1, n + 1)), q, A2, b2, cones,
                                     clarabel_settings({"direct_solve_method": "qdldl"})).solve()
        x0 = self.on_equalities(np.asarray(sol.x)[:n])
        return x0

    def bound(self, x, y, weights_full):
        """(||z - z_f||, sqrt(2 gap / min w), gap parts) for a primal x and a dual y (Clarabel's z)."""
        data, P = self.data, self.P
        xe = self.on_equalities(x)
        dist, _ = dist_and_margin(self.b - self.A @ xe, self.blks)
        ratio = dist / np.maximum(dist + self.margin, 1e-300)
        theta = float(ratio.max(initial=0.0))
        if np.any((dist > 0) & (self.margin <= 0)):
            theta = np.nan
        xf = (1 - theta) * xe + theta * self.x0
        yd = proj_dual(y, self.blks)
        if self.dual_polish:  # y := 0 on the blocks where the slack is larger than the multiplier (inactive: its distance to the boundary exceeds 1e3 ||y_block||)
            sf = self.b - self.A @ xf
            for kind, i, n in self.blks:
                v, w = sf[i:i + n], yd[i:i + n]
                interior = v[0] - np.linalg.norm(v[1:]) if kind == "soc" else v[0]
                if kind != "zero" and interior > 1e3 * np.linalg.norm(w):
                    yd[i:i + n] = 0.0
        c = self.q + self.A.T @ yd  # L(x, y) = 1/2 x'Px + c'x - b'y <= g(x) on the feasible set (y in K*)
        S = np.flatnonzero(np.abs(P).sum(axis=1).A.ravel() > 0)
        N = np.setdiff1d(np.arange(P.shape[0]), S)
        PSS = P[S][:, S].toarray()
        radius = self.radius_scale * max(1.0, float(np.max(np.abs(x))))  # NOT certified: a public bound is needed
        # g(x_f) - min_{x_N in box} L(x, y), written as a sum of small terms (no cancellation of large objectives):
        # 1/2 r_S' P_SS^-1 r_S (r = P x_f + c, the dual residual at x_f) + c_N'x_N + R |c_N|_1 + y's_f (s_f in K)
        r = P @ xf + c
        complementarity = float(yd @ (self.b - self.A @ xf))
        gap = (0.5 * r[S] @ np.linalg.solve(PSS, r[S]) + c[N] @ xf[N] + radius * np.abs(c[N]).sum()
               + complementarity)
        gap = max(gap, 0.0)
        self.parts = (0.5 * r[S] @ np.linalg.solve(PSS, r[S]), complementarity, float(np.abs(c[N]).sum()))
        cols = data.columns
        wmin = float(np.min(weights_full))
        return (float(np.linalg.norm(x[cols] - xf[cols])), float(np.sqrt(2 * gap / wmin)), theta,
                float(radius * np.abs(c[N]).sum()))


def solve(P, q, data, settings):
    t = time.perf_counter()
    sol = clarabel.DefaultSolver(sp.triu(P, format="csc"), q, data.A, data.b, data.cones,
                                 clarabel_settings(settings)).solve()
    return np.asarray(sol.x), np.asarray(sol.z), time.perf_counter() - t, str(sol.status)


TIGHT = {**SOLVER_SETTINGS[cp.CLARABEL], "tol_gap_abs": 1e-14, "tol_gap_rel": 1e-14, "tol_feas": 1e-14,
         "tol_ktratio": 1e-12, "max_iter": 400}


def certify_all(label: str, limit: int) -> list[dict]:
    rows, certs = [], {}
    picks = CAPTURED if len(CAPTURED) <= limit else [CAPTURED[i] for i in
                                                     np.linspace(0, len(CAPTURED) - 1, limit).astype(int)]
    for local, weights, linear, z in picks:
        data = local.data
        if id(local) not in certs:
            certs[id(local)] = Certifier(data)
        cert = certs[id(local)]
        diag = np.zeros(data.P.shape[0])
        np.add.at(diag, data.columns[local.penalized], weights)
        P = (data.P + sp.diags(diag)).tocsc()
        q = data.q.copy()
        np.subtract.at(q, data.columns[local.penalized], linear)
        cert.P, cert.q = P, q
        wpen = np.broadcast_to(weights, local.penalized.shape)
        row = {"set": label, "agent": local.agent_name, "n": local.dim, "objective": local.has_objective}
        row["wmin"] = float(np.min(wpen))
        for tag, settings in (("std", SOLVER_SETTINGS[cp.CLARABEL]), ("tight", TIGHT), ("refined", None), ("dualpolish", "dp")):
            cert.dual_polish = settings == "dp"
            if settings == "dp":
                x, y, sec, status = row_x, row_y, 0.0, row["std_status"]
            elif settings is None:  # the layer's refinement, twice: y = x - x^ about the std answer, defaults
                x, sec = row_x, 0.0
                for _ in range(2):
                    t = time.perf_counter()
                    sol = clarabel.DefaultSolver(sp.triu(P, format="csc"), P @ x + q, data.A, data.b - data.A @ x,
                                                 data.cones, clarabel_settings(CLARABEL_REFINEMENT)).solve()
                    sec += time.perf_counter() - t
                    x, y, status = x + np.asarray(sol.x), np.asarray(sol.z), str(sol.status)
            else:
                x, y, sec, status = solve(P, q, data, settings)
            if tag == "std":
                row_x, row_y = x, y
            if tag == "std":
                row["same_as_layer"] = float(np.max(np.abs(x[data.columns] - z)))
            feas, opt, theta, box = cert.bound(x, y, wpen)
            row.update({f"{tag}_resid": cert.parts[0], f"{tag}_compl": cert.parts[1], f"{tag}_cN": cert.parts[2]})
            row.update({f"{tag}_feas": feas, f"{tag}_opt": opt, f"{tag}_bound": feas + opt, f"{tag}_theta": theta,
                        f"{tag}_boxterm": box, f"{tag}_sec": sec, f"{tag}_status": status})
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--limit", type=int, default=24)
    args = parser.parse_args()
    import pandas as pd

    import privcvx as pc
    from privcvx.privacy.mechanisms import Gaussian
    from privcvx.privacy.perturbation import OutputPerturbation
    from privcvx.schedules import inverse_sqrt
    capture()
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import powerflow
        problem = powerflow.zonal_problem("case14", 3)
        problem.solve(rounds=args.rounds, local_updates=1, rho=100.0, eta=inverse_sqrt(),
                      privacy=OutputPerturbation(Gaussian(1.0, 0.01), sensitivity="derived"), seed=0)
        rows += certify_all("case14", args.limit)
        CAPTURED.clear()
        import sys
        sys.path.insert(0, "tests")
        from core_problems import soc_linear
        soc, _, _ = soc_linear()
        soc.solve(rounds=args.rounds, local_updates=1, rho=1.0, eta=inverse_sqrt(), seed=0)
        if not CAPTURED:  # no conic solve in the run: projections of random points onto each agent's set
            rng = np.random.default_rng(0)
            for agent, layout in zip(soc.agents, soc.layouts, strict=True):
                local = lsp.LocalProblem(agent, layout)
                for _ in range(max(1, args.limit // 3)):
                    local.project(rng.normal(size=local.dim), rng.uniform(0.5, 2.0, size=local.dim))
        rows += certify_all("soc_linear", args.limit)
    frame = pd.DataFrame(rows)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    frame.to_csv("bench/certified_projection.csv", index=False)
    print(frame[["set", "agent", "n", "wmin", "same_as_layer"] + [f"{t}_{k}" for t in ("std", "tight", "refined", "dualpolish")
                for k in ("bound", "feas", "status")]].to_string(float_format=lambda v: f"{v:.1e}"))
    for label, group in frame.groupby("set"):
        for tag in ("std", "tight", "refined", "dualpolish"):
            b = group[f"{tag}_bound"]
            print(f"{label} {tag}: bound median {b.median():.1e} max {b.max():.1e}; feas part max "
                  f"{group[f'{tag}_feas'].max():.1e}, opt part max {group[f'{tag}_opt'].max():.1e}, box term max "
                  f"{group[f'{tag}_boxterm'].max():.1e}; gap parts median: residual {group[f'{tag}_resid'].median():.0e} "
                  f"complementarity {group[f'{tag}_compl'].median():.0e}; <1e-6: {(b < 1e-6).mean():.0%}, <1e-7: {(b < 1e-7).mean():.0%}; ms median {1e3 * group[f'{tag}_sec'].median():.1f}")
    _ = pc


if __name__ == "__main__":
    main()
