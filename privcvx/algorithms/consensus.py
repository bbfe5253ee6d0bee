"""Consensus bookkeeping the ADMM methods share: who holds which shared key, the duals and public metrics.

`ConsensusDuals` keeps the duals lambda_p of line 8 of Algorithm 1 (paper 004), computes the residuals and the
average of line 5 (Boyd et al. Secs. 3.3, 7.1), for its server and its public monitor, and every agent's slice of a
vector over w (`ConsensusDuals.per_agent`); `key_groups` maps a penalty over the entries of w to shared keys.
`key_holders`, `sharing_graph` and `check_key_connectivity` say which agents must agree on each key, and
`ConsensusADMMMonitor` and `GeneralFormMonitor` are the public metrics of the decentralized ADMMs
(`privcvx.algorithms.decentralized_admm`).
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


def is_vector(rho: float | np.ndarray) -> bool:
    """Whether a penalty rho is a vector over the entries of w (an array of one or more dimensions), not a number:
    ``np.ndim(rho) > 0`` without its wrapper (which takes about 1 us for a float, several times a round)."""
    return isinstance(rho, np.ndarray) and rho.ndim > 0


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

    The copies A_p w of all agents stand one after the other in one vector, and the duals are the agents' slices of
    one such vector (``flat``), so each operation runs once over all agents. The copies are ``rows`` equal rows of
    the entries ``held`` of w: when every agent holds the same entries of w in the same order (full consensus: all of
    w), one row per agent, its entries broadcast over the rows, else one row of every agent's entries one after the
    other (``held`` a slice when they are a range of w: a view, no gather; w itself when a row is all of w in order,
    `_on_row`). Every operation is the same for both; a sum over an agent's entries is numpy's pairwise sum of that
    agent's slice; sums over agents add them in agent order from 0, as a loop over the agents would, bitwise.
    """

    def __init__(self, layouts: list[AgentLayout], dim: int) -> None:
        self.dim = dim
        self.sizes = [layout.shared_local.size for layout in layouts]
        self.patterns = [layout.shared_global.astype(int) for layout in layouts]
        alike = all(np.array_equal(pattern, self.patterns[0]) for pattern in self.patterns)
        #: The copies as rows of equal entries: one row per agent if every agent holds the same entries, else one.
        self.rows = len(layouts) if alike else 1
        self.held_index = self.patterns[0] if alike else np.concatenate(self.patterns)
        self.held = _as_slice(self.held_index)  # indexes w: a view when the entries are a range
        self.index = np.tile(self.held_index, self.rows)  # the entry of w of every copy
        self.whole_row = isinstance(self.held, slice) and self.held == slice(0, dim)  # a row is all of w, in order
        #: The agents' slices of one row (all of it when every agent holds the same entries) and of all copies.
        self.row_parts = Parts(self.sizes[-1:] if alike else self.sizes)
        self.parts = Parts(self.sizes)
        #: The agents of the last row: each entry's last holder is one of them (the others' rows hold the same).
        self.last_row = range(len(layouts) - len(self.row_parts.sizes), len(layouts))
        self._set(np.zeros(self.parts.total))
        self._released: tuple[list[np.ndarray], np.ndarray] | None = None
        # Work arrays of the copies' size, kept from round to round: the gap of line 8 and the squares of the
        # residuals (a new array of 51 kB per operation on digits, its memory cold in every round, made line 8 and
        # the residuals take several times what they take warm; the same operations, into them)
        self._gap, self._work = np.empty(self.parts.total), np.empty(self.parts.total)
        self.last: LineEight | None = None  # the last `update`: its inputs and what it computed
        self.leader: ConsensusDuals | None = None  # whose line 8 this one may take (`follow`)

    def follow(self, leader: ConsensusDuals) -> None:
        """Take ``leader``'s line 8 in place of computing it whenever ``leader`` last ran it on the same inputs,
        bitwise (`LineEight.ran_on`): the server of Algorithm 1 runs line 8 on the releases of round t at round
        t + 1, on the inputs its public monitor replayed it on in round t's history row (the same numbers,
        computed once)."""
        self.leader = leader

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
            self._lam = self.parts.split(self.flat)
        return self._lam

    def assign(self, lam: list[np.ndarray]) -> None:
        """Replace the duals (a checkpoint's, or those the server sent)."""
        self._set(np.concatenate(lam) if lam else np.zeros(0))

    def assign_scaled(self, scaled: np.ndarray, rho: float | np.ndarray) -> None:
        """Replace the duals by ``scaled`` (all of them, stacked, divided by rho) times rho."""
        self.assign(self.parts.split(scaled * self.copies(rho)))

    def _on_rows(self, stacked: np.ndarray) -> np.ndarray:
        """A vector over the copies as its rows (a view)."""
        return stacked.reshape(self.rows, -1)

    def _on_row(self, vector: np.ndarray) -> np.ndarray:
        """A vector over w on one row of the copies: its entries ``held`` (the vector itself when a row is all of w in
        order: no view or gather, and line 8's record recognizes it by identity)."""
        return vector if self.whole_row else vector[self.held]

    def _scatter(self, rows: np.ndarray) -> np.ndarray:
        """A vector over w from values on the copies, given as their rows: each entry's copies added in agent order
        from 0. When a row is all of w in order, the rows added one after the other from 0 (a reduce over them);
        else each copy added to its entry in order (bincount over `index`; a reduce over the one row first would
        cost a pass more over the copies)."""
        if self.whole_row:
            return np.add.reduce(rows, axis=0, initial=0.0)
        return np.bincount(self.index, weights=rows.reshape(-1), minlength=self.dim)

    def _row(self, rho: float | np.ndarray) -> float | np.ndarray:
        """rho on one row of the copies (broadcast over the rows): the number itself, or the vector at ``held``."""
        return self._on_row(rho) if is_vector(rho) else rho

    def copies(self, rho: float | np.ndarray) -> float | np.ndarray:
        """rho on every copy: the number itself, or the vector over w on every copy."""
        return np.tile(self._on_row(rho), self.rows) if is_vector(rho) else rho

    def per_agent(self, vector: np.ndarray) -> list[np.ndarray]:
        """Every agent's copy A_p v of a vector over w, read-only (`read_only`: ``vector`` too, when the copies are
        views of it or it); agents holding the same entries share one array (under full consensus, ``vector``)."""
        return self.row_parts.split(read_only(self._on_row(vector))) * self.rows

    def assemble(self, parts: list[np.ndarray], previous: np.ndarray) -> np.ndarray:
        """The inverse of `per_agent`: a vector over w from every agent's slice of it, each entry from its last
        holder, the others from ``previous`` (as a loop writing the slices in agent order leaves it). The agents of
        the last row (`last_row`) hold every entry the others hold; when their row is all of w in order, it is the
        vector (their one array itself, no copy)."""
        row = [np.asarray(parts[p], dtype=float) for p in self.last_row]
        if self.whole_row:
            return row[0] if len(row) == 1 else np.concatenate(row)
        vector = previous.copy()
        for p, part in zip(self.last_row, row, strict=True):
            vector[self.patterns[p]] = part
        return vector

    def stacked(self, released: list[np.ndarray]) -> np.ndarray:
        """The agents' releases in one vector (those of the last line 8, if it saw this list)."""
        if self._released is not None and self._released[0] is released:
            return self._released[1]
        return np.concatenate(released)

    def average(self, released: list[np.ndarray], rho: float | np.ndarray, multiplicity: np.ndarray) -> np.ndarray:
        """Line 5: each entry of w averages (z_p - lambda_p / rho) over its holders, added in agent order from 0; a
        new read-only array (`read_only`). The terms are formed in the work array (`__init__`), the rows added one
        after the other from 0, then the row's entries (`_scatter`)."""
        rows = np.divide(self._on_rows(self.flat), self._row(rho), out=self._on_rows(self._work))
        np.subtract(self._on_rows(self.stacked(released)), rows, out=rows)
        return read_only(self._scatter(rows) / multiplicity)

    def _squares(self, value: np.ndarray, parts: Parts) -> list[float]:
        """Each part's sum of the squares of ``value`` (its pairwise sum), formed in the work array (`__init__`)."""
        return parts.sums(np.multiply(value, value, out=self._work[:value.size]))

    def _totals(self, *values: np.ndarray) -> list[float]:
        """sum_p ||values_p||^2 over the agents' slices of vectors over the copies, for each of ``values``: each
        agent's term a pairwise sum, added in agent order from 0."""
        return [_in_order(self._squares(value, self.parts)) for value in values]

    def _row_total(self, row: np.ndarray) -> float:
        """sum_p ||A_p v||^2 for a vector v over w given on one row (`_on_row`), as `_totals` of its copies forms
        it: each agent's term a pairwise sum (each row's terms once, the same for every row), added in agent order
        from 0."""
        return _in_order(self._squares(row, self.row_parts) * self.rows)

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
        np.subtract(self._on_row(w), self._on_rows(stacked), out=self._on_rows(gap))  # w broadcast over the rows
        step = gap if used is None else np.concatenate(used) - stacked
        flat = np.multiply(self._row(rho), self._on_rows(step)).reshape(-1)
        flat += self.flat  # lambda + rho step, as rho step + lambda: the same sum
        self._set(flat)
        self._released = (released, read_only(stacked))
        if not residuals:
            self.last = LineEight.of(before, w, w_previous, released, rho, used, self.flat, stacked, None)
            return {}
        change = w - w_previous
        if is_vector(rho):
            change = rho * change
        gap_sq = _in_order(self.parts.sums(np.multiply(gap, gap, out=gap)))  # its squares in place: read no more
        dual = math.sqrt(self._row_total(self._on_row(change)))
        w = _kept(w)  # the scales read it later: as the record keeps it (`LineEight.of`)
        out = RoundResiduals({"primal_residual": math.sqrt(gap_sq),
                              "dual_residual": dual if is_vector(rho) else rho * dual,
                              "entries": float(self.parts.total)}, (self, stacked, w, self.flat))
        self.last = LineEight.of(before, w, w_previous, released, rho, used, self.flat, stacked, out)
        return out.copy()

    def scales(self, stacked: np.ndarray, w: np.ndarray, flat: np.ndarray) -> dict[str, float]:
        """The residuals' relative scales (Boyd et al. Eq. (3.12)): max(||A w||, ||z||) and ||lambda|| (all duals
        stacked), the same sums as `_totals`."""
        stacked_sq, flat_sq = self._totals(stacked, flat)
        return {"scale_primal": math.sqrt(max(stacked_sq, self._row_total(self._on_row(w)))),
                "scale_dual": math.sqrt(flat_sq)}

    def entry_residuals(self, w: np.ndarray, w_previous: np.ndarray,
                        released: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Per entry k of w: the squared primal residual sum_p (w_k - z_pk)^2 over its copies, and the squared
        change of its copies, multiplicity_k (w_k^{t+1} - w_k^t)^2 (residual balancing per key); each entry's sum
        formed as line 5's (`_scatter`)."""
        primal = (self._on_row(w) - self._on_rows(self.stacked(released))) ** 2
        change = self._on_rows((w - w_previous)[self.index] ** 2)
        return tuple(self._scatter(squares) for squares in (primal, change))


class Parts:
    """Consecutive slices of a vector, of the given sizes (the agents' parts of the copies, `ConsensusDuals`)."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.total = sum(sizes)
        ends = np.cumsum(sizes).tolist()
        self.slices = [slice(end - size, end) for size, end in zip(sizes, ends, strict=True)]
        #: Equal parts are the rows of one array: a part's sum is then its row's (the same pairwise sum).
        self.equal = len(set(sizes)) == 1

    def split(self, vector: np.ndarray) -> list[np.ndarray]:
        """The parts of ``vector`` (views; one part that is all of it: the vector itself)."""
        if len(self.sizes) == 1 and vector.size == self.total:
            return [vector]
        return [vector[part] for part in self.slices]

    def sums(self, vector: np.ndarray) -> list[float]:
        """Each part's pairwise sum (equal parts: one reduce over the rows, a row's reduce being the 1-d pairwise sum
        of that row, bitwise)."""
        if self.equal:
            return np.add.reduce(vector.reshape(len(self.sizes), -1), axis=1).tolist()
        return [float(part.sum()) for part in self.split(vector)]


def _in_order(terms: list[float]) -> float:
    """The terms added in order from 0 (as a loop over the agents adds them)."""
    total = 0.0
    for term in terms:
        total += term
    return total


def _as_slice(index: np.ndarray) -> slice | np.ndarray:
    """``index`` as a slice if it is a range of consecutive entries (indexing with it is then a view), else itself."""
    if index.size and np.array_equal(index, np.arange(index[0], index[0] + index.size)):
        return slice(int(index[0]), int(index[0]) + index.size)
    return index


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
