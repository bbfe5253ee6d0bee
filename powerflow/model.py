"""The SOC relaxation of Appendix D, Eq. (71), in Jabr's W-variables, and ``socopf``.

One `SocModel` is the model of a set of *own* buses: the whole network for
the centralized problem (71), or one zone's feasible set F_z of Eq. (72) with its
line set L_z (every branch that touches an own bus) and its extended node set V_z
(the own buses and their neighbours). All of a model's variables are stacked in one
``cp.Variable`` ``x`` laid out as ``[w | wr | wi | pf | qf | pt | qt | pg | qg]``:

* ``w`` (one per bus of V_z) is ``|V_i|^2 = w^RR_ii + w^II_ii``;
* ``wr``, ``wi`` (one per bus pair, so parallel branches share them) are the real
  and imaginary parts of ``V_a conj(V_b)`` for the pair ``a < b``, i.e.
  ``w^RR_ab + w^II_ab`` and ``w^RI_ba - w^RI_ab`` of (70);
* ``pf, qf, pt, qt`` are the branch flows at both ends, ``pg, qg`` the generation.

Every constraint is one vectorized CVXPY constraint built from sparse matrices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np
import pandapower as pp
import scipy.sparse as sp

from privcvx.errors import DeclarationError, SolverError, check_scalar

from .data import NetworkData, load_case, network_data

BLOCKS = ("w", "wr", "wi", "pf", "qf", "pt", "qt", "pg", "qg")


def as_net(net_or_name: pp.pandapowerNet | str, *, argument: str = "net") -> pp.pandapowerNet:
    """Return ``net_or_name`` itself, or `load_case` of it when it is a name (errors name ``argument``)."""
    if isinstance(net_or_name, str):
        return load_case(net_or_name, argument=argument)
    if not isinstance(net_or_name, pp.pandapowerNet):
        raise DeclarationError(f"expected a pandapower net or a case name, got {type(net_or_name).__name__}",
                               argument=argument)
    return net_or_name


def _positions(sorted_global: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Local positions of the global indices ``wanted`` in the sorted array ``sorted_global``."""
    return np.searchsorted(sorted_global, wanted)


def _bus_indices(buses: object, data: NetworkData, argument: str, name: str) -> np.ndarray:
    """``buses`` as sorted distinct ppc bus indices, refused (`DeclarationError` naming ``argument`` and the model)
    unless a non-empty 1-d sequence of integers in [0, nb)."""
    array = np.asarray(buses) if isinstance(buses, (list, tuple, np.ndarray, range)) else None
    if array is None or array.ndim != 1 or not array.size or not np.issubdtype(array.dtype, np.integer) \
            or array.min() < 0 or array.max() >= data.nb:
        raise DeclarationError(f"model {name!r}: {argument} must be a non-empty 1-d sequence of integer bus indices "
                               f"in [0, {data.nb}), got {buses!r}", argument=argument)
    return np.unique(array.astype(np.int64))


@dataclass
class SocModel:
    """The relaxation (71) restricted to the own buses ``own`` (ppc indices), as in (72).

    Attributes
    ----------
    x:
        The stacked variable; ``block(name)`` gives its slice for one of `BLOCKS`.
    pd, qd:
        ``cp.Parameter`` loads (p.u.) of the balance buses (the own buses by default): the private data d_i of
        Eq. (28).
    mismatch_matrix:
        Sparse ``A`` with the active rows then the reactive rows of the balance buses, so
        that ``A @ x + [pd; qd]`` are the mismatches s^p, s^q of (71b)-(71c).
    constraints:
        The constraints of F_z by group: ``"flows"`` (71f)-(71i), ``"voltage"`` (71d),
        ``"generation"`` (71e), ``"thermal"`` (71j), ``"angle"`` (71k), ``"soc"`` (71l).
    balance:
        The buses whose balance (71b)-(71c) and loads the model holds, a subset of ``own`` (default: ``own``). The
        mismatches, Eq. (28), the generation cost and their constants are over them and their generators: a
        full-consensus zone (`powerflow.zonal_problem` with ``consensus="full"``) is the whole network's model
        (``own`` = every bus) holding one zone's balance.
    """

    data: NetworkData
    own: np.ndarray
    name: str = "x"
    balance: np.ndarray | None = None
    buses: np.ndarray = field(init=False)
    branches: np.ndarray = field(init=False)
    pairs: np.ndarray = field(init=False)
    gens: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        d = self.data
        self.own = _bus_indices(self.own, d, "own", self.name)
        self.branches = np.flatnonzero(np.isin(d.f, self.own) | np.isin(d.t, self.own))
        self.buses = np.unique(np.concatenate([self.own, d.f[self.branches], d.t[self.branches]]))
        self.pairs = np.unique(d.pair_of_branch[self.branches])
        self.gens = np.flatnonzero(np.isin(d.gen_bus, self.own))
        self.balance = self.own if self.balance is None else _bus_indices(self.balance, d, "balance", self.name)
        if not np.all(np.isin(self.balance, self.own)):
            raise DeclarationError(f"model {self.name!r}: its balance buses must be own buses", argument="balance")
        #: The generators at the balance buses (those of its mismatches and its cost), and their positions in `gens`.
        self.balance_gens = self.gens[np.isin(d.gen_bus[self.gens], self.balance)]
        self.balance_gen_positions = _positions(self.gens, self.balance_gens)
        sizes = dict(zip(BLOCKS, [len(self.buses)] + [len(self.pairs)] * 2 + [len(self.branches)] * 4
                         + [len(self.gens)] * 2, strict=True))
        ends = np.cumsum([0, *sizes.values()])
        self._slices = {name: slice(int(a), int(b)) for name, a, b in zip(BLOCKS, ends[:-1], ends[1:], strict=True)}
        self.x = cp.Variable(int(ends[-1]), name=self.name)
        self.pd = cp.Parameter(len(self.balance), value=d.pd[self.balance], name=f"{self.name}_pd")
        self.qd = cp.Parameter(len(self.balance), value=d.qd[self.balance], name=f"{self.name}_qd")
        self.mismatch_matrix = self._mismatch_matrix()
        self.constraints = self._constraints()

    # ----------------------------------------------------------------- layout
    def block(self, name: str) -> slice:
        """Slice of ``x`` holding the block ``name`` (one of `BLOCKS`)."""
        return self._slices[name]

    def index(self, name: str, local: np.ndarray | int) -> np.ndarray:
        """Positions in ``x`` of the local entries ``local`` of block ``name``."""
        return self._slices[name].start + np.asarray(local)

    def split(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Split a value of ``x`` into its named blocks."""
        return {name: np.asarray(x)[s] for name, s in self._slices.items()}

    def local_bus(self, global_bus: np.ndarray) -> np.ndarray:
        """Positions in this zone's bus order of the global bus indices ``global_bus``."""
        return _positions(self.buses, global_bus)

    def _coo(self, rows: list[np.ndarray], cols: list[np.ndarray], vals: list[np.ndarray],
             nrows: int) -> sp.csr_matrix:
        return sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                             shape=(nrows, self.x.size)).tocsr()

    # ------------------------------------------------------------ (71b)-(71c)
    def _mismatch_matrix(self) -> sp.csr_matrix:
        d, n, balance = self.data, len(self.balance), self.balance
        rows, cols, vals = [], [], []
        for end, (pblock, qblock) in (("f", ("pf", "qf")), ("t", ("pt", "qt"))):
            bus = (d.f if end == "f" else d.t)[self.branches]
            mine = np.flatnonzero(np.isin(bus, balance))
            row = _positions(balance, bus[mine])
            for block, offset in ((pblock, 0), (qblock, n)):
                rows.append(row + offset)
                cols.append(self.index(block, mine))
                vals.append(np.ones(len(mine)))
        grow = _positions(balance, d.gen_bus[self.balance_gens])
        local_gens = self.balance_gen_positions
        own_w = self.index("w", self.local_bus(balance))
        rows += [grow, grow + n, np.arange(n), np.arange(n) + n]
        cols += [self.index("pg", local_gens), self.index("qg", local_gens), own_w, own_w]
        vals += [-np.ones(len(grow)), -np.ones(len(grow)), d.gs[balance], -d.bs[balance]]
        return self._coo(rows, cols, vals, 2 * n)

    @property
    def mismatch(self) -> cp.Expression:
        """The mismatches ``[s^p; s^q]`` of the balance buses (the own buses by default), (71b)-(71c)."""
        return self.mismatch_matrix @ self.x + cp.hstack([self.pd, self.qd])

    def load_shedding(self) -> cp.Expression:
        """Objective (71a) over the balance buses (the own buses by default), i.e. Eq. (28): sum of squared
        mismatches."""
        return cp.sum_squares(self.mismatch)

    def generation_cost(self) -> cp.Expression:
        """The generation cost of the balance buses' generators (the own generators by default; network units,
        e.g. $/h): pandapower's ``poly_cost``
        ``c2 pg^2 + c1 pg + c0`` and its ``pwl_cost`` ``max_k (slope_k pg + offset_k)``, which CVXPY turns into the
        epigraph of MATPOWER's piecewise-linear model; a zone without generators costs 0.

        Raises `DeclarationError` naming ``net.poly_cost`` when the network has no cost data.
        """
        d = self.data
        if d.cost is None:
            raise DeclarationError(f"network {d.name!r} has no generation costs (net.poly_cost and net.pwl_cost are "
                                   "empty), so objective='cost' has nothing to minimize", argument="net.poly_cost")
        pg = self.x[self.index("pg", self.balance_gen_positions)]
        position = {int(g): k for k, g in enumerate(self.balance_gens)}
        pieces = [cp.max(piece.slope * pg[position[piece.gen]] + piece.offset) for piece in d.pwl_cost
                  if piece.gen in position]
        c2, c1, c0 = d.cost[self.balance_gens].T
        polynomial = c2 @ cp.square(pg) + c1 @ pg + float(np.sum(c0)) if len(self.balance_gens) \
            else cp.Constant(0.0)
        return polynomial + cp.sum(cp.hstack(pieces)) if pieces else polynomial

    def cost_smoothness(self) -> float:
        """Smoothness constant of the polynomial cost of the balance buses' generators: ``2 max c2`` (0 without
        generators)."""
        c2 = self.data.cost[self.balance_gens, 0] if self.data.cost is not None else np.zeros(0)
        return float(2 * c2.max()) if c2.size else 0.0

    # ------------------------------------------------------------ (71d)-(71l)
    def flow_matrix(self) -> sp.csr_matrix:
        """Sparse ``F`` with ``F @ x = 0`` the flow definitions (71f)-(71i), rows pf, qf, pt, qt."""
        d, m = self.data, len(self.branches)
        br = self.branches
        k = np.arange(m)
        wf = self.index("w", self.local_bus(d.f[br]))
        wt = self.index("w", self.local_bus(d.t[br]))
        pair = _positions(self.pairs, d.pair_of_branch[br])
        wr, wi, sign = self.index("wr", pair), self.index("wi", pair), d.pair_sign[br]
        gff, bff, gft, bft = d.yff.real[br], d.yff.imag[br], d.yft.real[br], d.yft.imag[br]
        gtt, btt, gtf, btf = d.ytt.real[br], d.ytt.imag[br], d.ytf.real[br], d.ytf.imag[br]
        terms = {  # flow block -> (bus w column, its coefficient, wr coefficient, signed wi coefficient)
            "pf": (wf, gff, gft, bft), "qf": (wf, -bff, -bft, gft),
            "pt": (wt, gtt, gtf, -btf), "qt": (wt, -btt, -btf, -gtf),
        }
        rows, cols, vals = [], [], []
        for r, (block, (wcol, cw, cr, ci)) in enumerate(terms.items()):
            rows += [k + r * m] * 4
            cols += [wcol, wr, wi, self.index(block, k)]
            vals += [cw, cr, ci * sign, -np.ones(m)]
        return self._coo(rows, cols, vals, 4 * m)

    def _angle_matrix(self, bound: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
        """Rows ``sign*wi - tan(bound)*wr`` of the branches with a finite ``bound`` (71k)."""
        d = self.data
        limited = np.flatnonzero(np.isfinite(bound[self.branches]))
        br = self.branches[limited]
        pair = _positions(self.pairs, d.pair_of_branch[br])
        k = np.arange(len(br))
        matrix = self._coo([k, k], [self.index("wi", pair), self.index("wr", pair)],
                           [d.pair_sign[br], -np.tan(bound[br])], len(br))
        return matrix, limited

    def _constraints(self) -> dict[str, list[cp.Constraint]]:
        d, x = self.data, self.x
        w = x[self.block("w")]
        groups: dict[str, list[cp.Constraint]] = {name: [] for name in
                                                  ("flows", "voltage", "generation", "thermal", "angle", "soc")}
        if len(self.branches):
            groups["flows"].append(self.flow_matrix() @ x == 0)
        groups["voltage"] += [w >= d.vmin[self.buses] ** 2, w <= d.vmax[self.buses] ** 2]
        if len(self.gens):
            pg, qg = x[self.block("pg")], x[self.block("qg")]
            groups["generation"] += [pg >= d.pmin[self.gens], pg <= d.pmax[self.gens],
                                     qg >= d.qmin[self.gens], qg <= d.qmax[self.gens]]
        rated = np.flatnonzero(d.rated[self.branches])
        if len(rated):
            rate = d.rate[self.branches[rated]]
            for pblock, qblock in (("pf", "qf"), ("pt", "qt")):
                flows = cp.vstack([x[self.index(pblock, rated)], x[self.index(qblock, rated)]])
                groups["thermal"].append(cp.SOC(rate, flows, axis=0))
        upper, _ = self._angle_matrix(d.angmax)
        lower, _ = self._angle_matrix(d.angmin)
        if upper.shape[0]:
            groups["angle"].append(upper @ x <= 0)
        if lower.shape[0]:
            groups["angle"].append(lower @ x >= 0)
        if len(self.pairs):
            wa = x[self.index("w", self.local_bus(d.pair_from[self.pairs]))]
            wb = x[self.index("w", self.local_bus(d.pair_to[self.pairs]))]
            cone = cp.vstack([2 * x[self.block("wr")], 2 * x[self.block("wi")], wa - wb])
            groups["soc"].append(cp.SOC(wa + wb, cone, axis=0))
        return groups

    @property
    def constraint_list(self) -> list[cp.Constraint]:
        """All constraints of the model: the public local set W_p of the zone."""
        return [c for group in self.constraints.values() for c in group]

    # ------------------------------------------------------- sensitivities
    def smoothness(self) -> float:
        """Closed-form smoothness constant of the load-shedding objective, Eq. (28).

        ``A A^T`` is block diagonal with one 2x2 block per own bus (the w-column is the
        only one its active and reactive rows share), whose largest eigenvalue is
        ``n_i + gs_i^2 + bs_i^2`` with ``n_i`` the branch ends plus generators at bus i.
        Hence ``L = 2 lambda_max(A^T A) = 2 max_i (n_i + gs_i^2 + bs_i^2)``.
        """
        d, n = self.data, len(self.balance)
        count = np.zeros(n)
        for bus in (d.f[self.branches], d.t[self.branches], d.gen_bus[self.balance_gens]):
            mine = bus[np.isin(bus, self.balance)]
            np.add.at(count, _positions(self.balance, mine), 1.0)
        return float(2 * np.max(count + d.gs[self.balance] ** 2 + d.bs[self.balance] ** 2))

    def mismatch_row_norms(self) -> tuple[np.ndarray, np.ndarray]:
        """The l1 and l2 norms of every mismatch row a_i of Eq. (28) (row i multiplies load entry i of (pd, qd))."""
        a = abs(self.mismatch_matrix)
        return np.asarray(a.sum(axis=1)).ravel(), np.sqrt(np.asarray(a.multiply(a).sum(axis=1)).ravel())

    def row_norms(self) -> tuple[float, float]:
        """Largest l1 and l2 norms of a mismatch row a_i of Eq. (28)."""
        l1, l2 = self.mismatch_row_norms()
        return float(l1.max()), float(l2.max())


@dataclass(frozen=True)
class SocopfResult:
    """Result of `socopf`: the optimum, the solution by block, and the model."""

    value: float
    status: str
    solve_time: float
    solution: dict[str, np.ndarray]
    mismatch: np.ndarray
    model: SocModel


def socopf(net: pp.pandapowerNet | str, objective: str = "load_shedding", **solver_options) -> SocopfResult:
    """Solve the centralized SOC relaxation (71) of ``net`` (a pandapower net or a case name).

    ``objective="load_shedding"`` is (71a): minimize the sum of squared active and
    reactive mismatches. ``objective="cost"`` minimizes the network's generation cost
    with exact balance (mismatches = 0, `SocModel.generation_cost`); it is a lower bound on the AC OPF cost
    (``pandapower.runopp``) and the centralized answer of ``zonal_problem(..., objective="cost")``.
    ``solver_options`` go to ``cp.Problem.solve`` (defaults:
    Clarabel, ``ignore_dpp=True``).
    """
    objective = check_scalar(objective, argument="objective", choices=("load_shedding", "cost"), error=DeclarationError)
    data = network_data(as_net(net))
    model = SocModel(data, np.arange(data.nb))
    constraints = model.constraint_list
    if objective == "cost":
        goal = model.generation_cost()
        constraints = [*constraints, model.mismatch == 0]
    else:
        goal = model.load_shedding()
    problem = cp.Problem(cp.Minimize(goal), constraints)
    solver_options.setdefault("solver", cp.CLARABEL)
    # The load Parameters make cvxpy's DPP compile O(size x parameters) (7 s on case1354pegase);
    # one solve needs no re-use, so treat them as constants.
    solver_options.setdefault("ignore_dpp", True)
    start = time.perf_counter()
    problem.solve(**solver_options)
    elapsed = time.perf_counter() - start
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise SolverError(f"SOC relaxation of {data.name} ended with status {problem.status!r}",
                          argument="objective")
    return SocopfResult(value=float(problem.value), status=problem.status, solve_time=elapsed,
                        solution=model.split(model.x.value), mismatch=np.asarray(model.mismatch.value),
                        model=model)
