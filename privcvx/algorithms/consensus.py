"""Consensus bookkeeping the ADMM methods share: who holds which shared key, the duals and public metrics.

`ConsensusDuals` keeps the duals lambda_p of line 8 of Algorithm 1 (paper 004), computes the residuals and the
average of line 5 (Boyd et al. Secs. 3.3, 7.1), for its server and its public monitor; `key_groups` and `rho_of` map a
penalty over the entries of w to shared keys and to agents. `key_holders`, `sharing_graph` and
`check_key_connectivity` say which agents must agree on each key, and `ConsensusADMMMonitor` and `GeneralFormMonitor`
are the public metrics of the decentralized ADMMs (`privcvx.algorithms.decentralized_admm`).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import networkx as nx
import numpy as np

from privcvx.algorithms.base import LatestReleases
from privcvx.errors import ParameterError
from privcvx.messages import Message, same_bits
from privcvx.problem import AgentLayout, DistributedProblem
from privcvx.topology import Topology


def rho_of(rho: float | np.ndarray, layout: AgentLayout) -> float | np.ndarray:
    """rho on an agent's shared entries: the number itself, or the agent's slice of a per-key vector over w."""
    return rho[layout.shared_global] if np.ndim(rho) else rho


def key_groups(problem: DistributedProblem) -> np.ndarray:
    """The index of its shared key for every entry of w."""
    index = np.zeros(problem.dim, dtype=int)
    for number, key in enumerate(problem.keys):
        offset = problem.key_offsets[key]
        index[offset:offset + int(np.prod(problem.key_shapes[key], dtype=int))] = number
    return index


def full_consensus(problem: DistributedProblem) -> bool:
    """Whether every agent shares one whole vector (the thesis's setting): one key and no private variables."""
    return len(problem.keys) == 1 and all(layout.shared_local.size == layout.dim for layout in problem.layouts)


def key_holders(problem: DistributedProblem) -> dict[Any, list[str]]:
    """The agents holding each shared key, by key (public: the layout of w)."""
    return {key: [layout.name for layout in problem.layouts if problem.key_offsets[key] in layout.shared_global]
            for key in problem.keys}


def sharing_graph(problem: DistributedProblem) -> nx.Graph:
    """The graph of the agents with an edge between every two that share a key (for power-flow zones: adjacent
    zones); the default communication graph of the general-form decentralized ADMM."""
    graph = nx.Graph()
    graph.add_nodes_from(problem.names)
    for holders in key_holders(problem).values():
        graph.add_edges_from(itertools.combinations(holders, 2))
    return graph


def check_key_connectivity(problem: DistributedProblem, topology: Topology) -> None:
    """Every key's holders must be connected by edges between holders, or consensus on it cannot be reached."""
    graph = topology.graph(1)
    for key, holders in key_holders(problem).items():
        if len(holders) > 1 and not nx.is_connected(graph.subgraph(holders)):
            raise ParameterError(f"the agents holding the shared key {key!r} ({holders}) are not connected by edges "
                                 "between them in the topology, so they cannot agree on it; use the default topology "
                                 "(agents that share a key are neighbours) or add edges", argument="topology")


class ConsensusDuals:
    """The duals lambda_p of line 8, the consensus-ADMM residuals and the average of line 5.

    The copies A_p w of all agents stand one after the other in one vector (``index``: the entry of w of each copy),
    and the duals are the agents' slices of one such vector (``lam``), so each operation runs once over all agents.
    A sum over an agent's entries is numpy's pairwise sum of that agent's slice; sums over agents add them in agent
    order from 0, as a loop over the agents would, bitwise.
    """

    def __init__(self, layouts: list[AgentLayout], dim: int) -> None:
        self.dim = dim
        self.sizes = [layout.shared_local.size for layout in layouts]
        self.index = np.concatenate([layout.shared_global for layout in layouts]).astype(int)
        ends = np.cumsum(self.sizes).tolist()
        self._slices = [slice(end - size, end) for size, end in zip(self.sizes, ends, strict=True)]
        #: Equal slices are the rows of one array: an agent's sum is then its row's (the same pairwise sum).
        self._rows = len(self.sizes) if len(set(self.sizes)) == 1 else None
        #: Every agent holds every entry of w, in w's order (A_p = I): the server's messages may share one w.
        self.full = all(np.array_equal(layout.shared_global, np.arange(dim)) for layout in layouts)
        self._set(np.zeros(self.index.size))
        self._released: tuple[list[np.ndarray], np.ndarray] | None = None
        # Work arrays of the copies' size, kept from round to round: the gap of line 8 and the squares of the
        # residuals (a new array of 51 kB per operation on digits, its memory cold in every round, made line 8 and
        # the residuals take several times what they take warm; the same operations, into them)
        self._gap, self._work = np.empty(self.index.size), np.empty(self.index.size)
        self.last: LineEight | None = None  # the last `update`: its inputs and what it computed
        self.leader: ConsensusDuals | None = None  # whose line 8 this one may take (`follow`)

    def follow(self, leader: ConsensusDuals) -> None:
        """Take ``leader``'s line 8 in place of computing it whenever ``leader`` last ran it on the same inputs,
        bitwise (`LineEight.ran_on`): the server of Algorithm 1 runs line 8 on the releases of round t at round
        t + 1, on the inputs its public monitor replayed it on in round t's history row (the same numbers,
        computed once)."""
        self.leader = leader

    def _split(self, flat: np.ndarray) -> list[np.ndarray]:
        return [flat[part] for part in self._slices]

    def _set(self, flat: np.ndarray) -> None:
        """Make ``flat`` the duals, read-only (`read_only`): a record of line 8 keeps it by identity, and messages may
        hold its slices. Their split by agent (`lam`) is made when first read."""
        self.flat = read_only(flat)
        self._lam: list[np.ndarray] | None = None

    @property
    def lam(self) -> list[np.ndarray]:
        """The duals lambda_p, each agent's slice of ``flat`` (split when first read: a monitor reads them only for a
        checkpoint, and a server only to send them)."""
        if self._lam is None:
            self._lam = self._split(self.flat)
        return self._lam

    def assign(self, lam: list[np.ndarray]) -> None:
        """Replace the duals (a checkpoint's, or those the server sent)."""
        self._set(np.concatenate(lam) if lam else np.zeros(0))

    def assign_scaled(self, scaled: np.ndarray, rho: float | np.ndarray) -> None:
        """Replace the duals by ``scaled`` (all of them, stacked, divided by rho) times rho."""
        self.assign(self._split(scaled * self.copies(rho)))

    def copies(self, rho: float | np.ndarray) -> float | np.ndarray:
        """rho on every copy: the number itself, or the vector over w at ``index``."""
        return rho[self.index] if np.ndim(rho) else rho

    def stacked(self, released: list[np.ndarray]) -> np.ndarray:
        """The agents' releases in one vector (those of the last line 8, if it saw this list)."""
        if self._released is not None and self._released[0] is released:
            return self._released[1]
        return np.concatenate(released)

    def average(self, released: list[np.ndarray], rho: float | np.ndarray, multiplicity: np.ndarray) -> np.ndarray:
        """Line 5: each entry of w averages (z_p - lambda_p / rho) over its holders (added in agent order from 0; the
        terms formed in the work array, `__init__`); a new read-only array (`read_only`)."""
        if self.full:  # every copy is all of w: the rows added in agent order from 0, as bincount adds them (a
            # reduce over the rows from initial 0.0: one row after the other into the sums, 0.0 + first row first)
            rows = np.divide(self._by_agent(self.flat), rho, out=self._by_agent(self._work))
            np.subtract(self._by_agent(self.stacked(released)), rows, out=rows)
            return read_only(np.add.reduce(rows, axis=0, initial=0.0) / multiplicity)
        terms = np.divide(self.flat, self.copies(rho), out=self._work)
        np.subtract(self.stacked(released), terms, out=terms)
        return read_only(np.bincount(self.index, weights=terms, minlength=self.dim) / multiplicity)

    def _by_agent(self, stacked: np.ndarray) -> np.ndarray:
        """A stacked vector as one row per agent (a view; every agent holds all of w)."""
        return stacked.reshape(len(self.sizes), self.dim)

    def _repeated(self, term: float) -> float:
        """sum_p term over the agents, added in agent order from 0 (the sum `_totals` forms when the terms are
        alike)."""
        total = 0.0
        for _ in self.sizes:
            total += term
        return total

    def _totals(self, *values: np.ndarray) -> list[float]:
        """sum_p ||values_p||^2 over the agents' slices, for each of ``values``: each agent's term a pairwise sum,
        added in agent order from 0. Equal slices: one reduce over the rows of each value's squares (a row's reduce
        is the 1-d pairwise sum of that row, bitwise; the values are not stacked first: a copy of them all, 150 kB
        on digits, cost more in a round than the reduces)."""
        square = self._work  # each value's squares, in turn (`__init__`)
        if self._rows is not None:
            rows = [np.add.reduce(np.multiply(value, value, out=square).reshape(self._rows, -1), axis=1).tolist()
                    for value in values]
        else:
            rows = [[float(part.sum()) for part in self._split(np.multiply(value, value, out=square))]
                    for value in values]
        totals = []
        for sums in rows:
            total = 0.0
            for term in sums:
                total += term
            totals.append(total)
        return totals

    def update(self, w: np.ndarray, w_previous: np.ndarray, released: list[np.ndarray], rho: float | np.ndarray,
               used: list[np.ndarray] | None = None, residuals: bool = True) -> dict[str, float]:
        """Line 8 for every agent; returns the residuals of the round (``residuals=False``: line 8 alone, and {}).

        ``rho`` is a number or a vector over the entries of w (``rho="adaptive-per-key"``). ``used``: the
        vector each agent was sent in place of A_p w, if it differs (over-relaxation, Boyd et al.
        Sec. 3.4.3); line 8 uses it. Primal: r = ||A w - z|| over every agent's shared entries. Dual:
        s = ||rho A (w^{t+1} - w^t)||, the change of the global vector seen by every copy. Their relative
        scales are max(||A w||, ||z||) and ||lambda|| (all duals stacked).
        """
        record = self.leader.last if self.leader is not None else None
        if record is not None and (record.residuals is not None or not residuals) \
                and record.ran_on(self.flat, w, w_previous, released, rho, used):
            self._set(record.flat)
            self._released = (released, record.stacked)
            self.last = record
            return record.residuals.copy() if residuals else {}
        before = self.flat
        stacked = self.stacked(released)
        gap = self._gap  # (`__init__`); the new duals are a new array: messages and the record keep the old ones
        if self.full:  # every copy is all of w: w and rho broadcast over the agents' rows (the gathers' numbers)
            np.subtract(w, self._by_agent(stacked), out=self._by_agent(gap))
            step = gap if used is None else np.concatenate(used) - stacked
            flat = np.multiply(rho, self._by_agent(step)).reshape(-1)
        else:
            copies = w[self.index]
            np.subtract(copies, stacked, out=gap)
            flat = self.copies(rho) * (gap if used is None else np.concatenate(used) - stacked)
        flat += self.flat  # lambda + rho step, as rho step + lambda: the same sum
        self._set(flat)
        self._released = (released, read_only(stacked))
        if not residuals:
            self.last = LineEight.of(before, w, w_previous, released, rho, used, self.flat, stacked, None)
            return {}
        change = w - w_previous
        if np.ndim(rho):
            change = rho * change
        if self.full:  # the copies of w and of its change are alike: each agent's sum once, added once per agent
            (gap_sq,) = self._totals(gap)
            change_sq = self._repeated(float(np.add.reduce(change * change)))
            copies = w = _kept(w)  # the scales read it later: as the record keeps it (`LineEight.of`)
        else:
            change_sq, gap_sq = self._totals(change[self.index], gap)
        dual = math.sqrt(change_sq)
        out = RoundResiduals({"primal_residual": math.sqrt(gap_sq),
                              "dual_residual": dual if np.ndim(rho) else rho * dual,
                              "entries": float(self.index.size)}, (self, stacked, copies, self.flat))
        self.last = LineEight.of(before, w, w_previous, released, rho, used, self.flat, stacked, out)
        return out.copy()

    def scales(self, stacked: np.ndarray, copies: np.ndarray, flat: np.ndarray) -> dict[str, float]:
        """The residuals' relative scales (Boyd et al. Eq. (3.12)): max(||A w||, ||z||) and ||lambda|| (all duals
        stacked), the same sums as `_totals` (``copies``: w itself when every agent holds all of it)."""
        if self.full:
            stacked_sq, flat_sq = self._totals(stacked, flat)
            copies_sq = self._repeated(float(np.add.reduce(copies * copies)))
        else:
            stacked_sq, copies_sq, flat_sq = self._totals(stacked, copies, flat)
        return {"scale_primal": math.sqrt(max(stacked_sq, copies_sq)), "scale_dual": math.sqrt(flat_sq)}

    def entry_residuals(self, w: np.ndarray, w_previous: np.ndarray,
                        released: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Per entry k of w: the squared primal residual sum_p (w_k - z_pk)^2 over its copies, and the squared
        change of its copies, multiplicity_k (w_k^{t+1} - w_k^t)^2 (residual balancing per key)."""
        primal_sq = np.bincount(self.index, weights=(w[self.index] - self.stacked(released)) ** 2, minlength=self.dim)
        change_sq = np.bincount(self.index, weights=(w - w_previous)[self.index] ** 2, minlength=self.dim)
        return primal_sq, change_sq


#: The entries of `RoundResiduals` computed when first read.
SCALES = ("scale_primal", "scale_dual")


class RoundResiduals(dict):
    """A round's residuals (`ConsensusDuals.update`) whose relative scales (`SCALES`) are computed when first read:
    only a given ``tol``, ``result.status``, the divergence test's check of the tolerance and a penalty rule that
    reads them need them (two passes over all copies a round saved otherwise). The arrays they are computed from
    are the round's own (the releases stacked, w, the new duals: never written in place afterwards)."""

    def __init__(self, values: dict[str, float], inputs: tuple[ConsensusDuals, np.ndarray, np.ndarray, np.ndarray]
                 | None) -> None:
        super().__init__(values)
        self.inputs = inputs

    def __missing__(self, key: str) -> float:
        if key not in SCALES or self.inputs is None:
            raise KeyError(key)
        duals, *arrays = self.inputs
        self.update(duals.scales(*arrays))
        self.inputs = None
        return self[key]

    def copy(self) -> RoundResiduals:
        """A copy that still computes the scales when read (from the same arrays)."""
        return RoundResiduals(self, self.inputs)


class LineEight(NamedTuple):
    """One `ConsensusDuals.update`: its inputs (the duals before, w^{t+1}, w^t, the releases, rho and the relaxed
    vectors) and what it computed (the duals after, the releases stacked, the residuals or None)."""

    before: np.ndarray
    w: np.ndarray
    w_previous: np.ndarray
    released: list[np.ndarray]
    rho: float | np.ndarray
    used: list[np.ndarray] | None
    flat: np.ndarray
    stacked: np.ndarray
    residuals: dict[str, float] | None

    def ran_on(self, before: np.ndarray, w: np.ndarray, w_previous: np.ndarray, released: list[np.ndarray],
               rho: float | np.ndarray, used: list[np.ndarray] | None) -> bool:
        """Whether these inputs are the record's, bitwise (each the record's own array, or one with the same bytes):
        line 8 on them computes the record's numbers."""
        return (_same(before, self.before) and _same(w, self.w) and _same(w_previous, self.w_previous)
                and _same(rho, self.rho) and len(released) == len(self.released)
                and all(map(_same, released, self.released)) and (used is None) == (self.used is None)
                and (used is None or (len(used) == len(self.used) and all(map(_same, used, self.used)))))

    @classmethod
    def of(cls, before: np.ndarray, w: np.ndarray, w_previous: np.ndarray, released: list[np.ndarray],
           rho: float | np.ndarray, used: list[np.ndarray] | None, flat: np.ndarray, stacked: np.ndarray,
           residuals: dict[str, float] | None) -> LineEight:
        """The record of one line 8, whose inputs never change once it is made: each kept as it is when nothing can
        write into it (`is_read_only`: the server's w, the agents' releases as sent, the duals), else as a read-only
        copy. So an input that is the record's own array has the record's values (`ran_on`), even if the caller
        later writes into the array it passed."""
        return cls(_kept(before), _kept(w), _kept(w_previous), [_kept(z_p) for z_p in released], _kept(rho),
                   None if used is None else [_kept(u_p) for u_p in used], flat, stacked, residuals)


def read_only(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only with the array that owns its memory (a new array, or a view of one, that nothing else
    refers to yet: then nothing can write into it; `is_read_only`)."""
    array.flags.writeable = False
    if isinstance(array.base, np.ndarray):
        array.base.flags.writeable = False
    return array


def is_read_only(array: np.ndarray) -> bool:
    """Whether ``array`` and the array that owns its memory are read-only (a writeable owner could still be written
    through another view; a buffer that is not an array counts as writeable)."""
    base = array.base
    return not array.flags.writeable and (base is None or (isinstance(base, np.ndarray) and not base.flags.writeable))


def _kept(value: float | np.ndarray) -> float | np.ndarray:
    """An input as a record of line 8 keeps it (`LineEight.of`): a number or a read-only array as it is, else a
    read-only copy."""
    if type(value) is float or (type(value) is np.ndarray and is_read_only(value)):
        return value
    return read_only(np.array(value, dtype=float))


def _same(a: float | np.ndarray, b: float | np.ndarray) -> bool:
    """Whether two numbers or float arrays are bitwise the same (the same shape and bytes). ``b`` is a record's input
    (`LineEight.of`), which nothing writes into: ``a`` being the same object is enough."""
    if a is b:
        return True
    if type(a) is float and type(b) is float:  # rho: no arrays made (a NaN is never the same: line 8 runs again)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return same_bits(np.asarray(a, dtype=float), np.asarray(b, dtype=float))


class ConsensusADMMMonitor(LatestReleases):
    """Public metrics from the broadcasts: disagreement, the change of the average release, broadcasts per round."""

    def __init__(self, problem: DistributedProblem) -> None:
        super().__init__(problem, "x")

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        agreement = self.agreement(messages)
        return {} if t == 0 else {**agreement, "broadcasts": float(len(messages))}



class GeneralFormMonitor(LatestReleases):
    """`ConsensusADMMMonitor` for general form: w is each entry's average over the agents holding it, and the
    disagreement the largest distance of two agents' latest releases on the entries they both hold."""

    def __init__(self, problem: DistributedProblem) -> None:
        super().__init__(problem, "x")
        self.entries = {layout.name: layout.shared_global for layout in problem.layouts}
        self.holders = np.zeros(problem.dim)
        for entries in self.entries.values():
            self.holders[entries] += 1.0
        self.pairs = []
        for (a, ea), (b, eb) in itertools.combinations(self.entries.items(), 2):
            _, at_a, at_b = np.intersect1d(ea, eb, return_indices=True)
            if at_a.size:
                self.pairs.append((a, b, at_a, at_b))

    def observe(self, t: int, messages: list[Message]) -> dict[str, float]:
        previous = self.w
        self.latest.update({m.sender: m["x"] for m in messages if "x" in m.payload})
        total = np.zeros(self.w.size)
        for name, x in self.latest.items():
            total[self.entries[name]] += x
        self.w = total / np.maximum(self.holders, 1.0)
        if t == 0:
            return {}
        spread = [float(np.linalg.norm(self.latest[a][at_a] - self.latest[b][at_b]))
                  for a, b, at_a, at_b in self.pairs if a in self.latest and b in self.latest]
        return {"disagreement": max(spread, default=0.0), "average_change": float(np.linalg.norm(self.w - previous)),
                "broadcasts": float(len(messages))}
