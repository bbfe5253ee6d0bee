"""Who talks to whom in round t, and with which weights.

A `Topology` is a graph over the agents' names, fixed or changing with the round:

* ``Topology(graph)`` wraps a ``networkx.Graph`` whose nodes are the agent names;
* ``Topology(fn)`` is time-varying: ``fn(t)`` returns round t's graph (t = 1, 2, ...);
* ``Topology.star()`` is the server-based pattern of Algorithm 1 of Ryu & Kim: every agent
  talks to the server (`SERVER`) only.

The builders `Topology.complete`, `Topology.ring`, `Topology.random` and
`Topology.random_sequence` take either the agent names or a count ``n`` (names
``"agent-0"`` ... ``"agent-<n-1>"``, the default names of `privcvx.Agent`), or nothing, in which case the
graph is built over the problem's agents when the run starts (`Topology.bind`).

`Topology.weights` returns round t's mixing matrix under one of the rules of
`WEIGHT_RULES`. Each is symmetric and doubly stochastic with positive diagonal, as
papers 001 (Assumption 2), 002 and 003 assume, and is checked: row and column sums are 1 to
1e-12 and the support lies on the graph's edges plus self-loops.

A time-varying topology is sent to worker processes with the agents, so for
``backend="process"`` its function must be picklable (a module-level function, a
``functools.partial`` or a class instance; the builders here are).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import networkx as nx
import numpy as np

from privcvx.errors import ConvergenceWarning, ParameterError, PrivcvxError, check_int, check_scalar

#: The name of the server node under `Topology.star`; no agent may use it.
SERVER = "server"

#: Tolerance of the doubly-stochastic check of `Topology.weights`.
STOCHASTIC_TOLERANCE = 1e-12

Nodes = int | Sequence[str] | None
#: Builds a topology over the agents' names: a graph, or a function t -> graph.
GraphFactory = Callable[[Sequence[str]], Any]


def _names(nodes: Nodes) -> list[str] | None:
    if nodes is None:
        return None
    if isinstance(nodes, (int, np.integer)) and not isinstance(nodes, bool):
        return [f"agent-{i}" for i in range(check_int(nodes, argument="nodes", minimum=1))]
    if not isinstance(nodes, Sequence) or isinstance(nodes, str):
        raise ParameterError(f"must be a number of agents or a list of their names, got {nodes!r}", argument="nodes")
    names = [str(name) for name in nodes]
    if not names or len(set(names)) != len(names):
        raise ParameterError(f"must be distinct agent names, got {nodes!r}", argument="nodes")
    return names


def _metropolis(graph: nx.Graph, order: list[str]) -> np.ndarray:
    """a_ij = 1 / (1 + max(d_i, d_j)) on edges, a_ii = 1 - sum_j a_ij (Xiao, Boyd & Lall 2005)."""
    index = {name: i for i, name in enumerate(order)}
    degree = dict(graph.degree())
    matrix = np.zeros((len(order), len(order)))
    for u, v in graph.edges():
        if u != v:
            matrix[index[u], index[v]] = matrix[index[v], index[u]] = 1.0 / (1.0 + max(degree[u], degree[v]))
    matrix[np.diag_indices_from(matrix)] = 1.0 - matrix.sum(axis=1)
    return matrix


def _lazy_metropolis(graph: nx.Graph, order: list[str]) -> np.ndarray:
    """(I + W_metropolis) / 2: every a_ii >= 1/2, the lazy chain of papers 001 and 002."""
    return 0.5 * (np.eye(len(order)) + _metropolis(graph, order))


def _max_degree(graph: nx.Graph, order: list[str]) -> np.ndarray:
    """a_ij = 1 / (1 + d_max) on edges, a_ii = 1 - d_i / (1 + d_max)."""
    index = {name: i for i, name in enumerate(order)}
    d_max = max((d for _, d in graph.degree()), default=0)
    matrix = np.zeros((len(order), len(order)))
    for u, v in graph.edges():
        if u != v:
            matrix[index[u], index[v]] = matrix[index[v], index[u]] = 1.0 / (1.0 + d_max)
    matrix[np.diag_indices_from(matrix)] = 1.0 - matrix.sum(axis=1)
    return matrix


#: Mixing rules by name: each maps (graph, node order) to a symmetric doubly stochastic matrix.
WEIGHT_RULES: dict[str, Callable[[nx.Graph, list[str]], np.ndarray]] = {
    "metropolis": _metropolis,
    "lazy_metropolis": _lazy_metropolis,
    "max_degree": _max_degree,
}


def check_doubly_stochastic(matrix: np.ndarray, graph: nx.Graph, order: list[str]) -> None:
    """Raise ParameterError unless ``matrix`` is doubly stochastic, nonnegative and supported on the graph."""
    n = len(order)
    if matrix.shape != (n, n) or not np.all(np.isfinite(matrix)) or np.any(matrix < 0):
        raise ParameterError("the mixing matrix must be a finite nonnegative n x n matrix", argument="weights")
    for axis, what in ((1, "row"), (0, "column")):
        worst = float(np.max(np.abs(matrix.sum(axis=axis) - 1.0)))
        if worst > STOCHASTIC_TOLERANCE:
            raise ParameterError(f"{what} sums differ from 1 by {worst:.3g}", argument="weights")
    allowed = nx.to_numpy_array(graph, nodelist=order, weight=None) + np.eye(n)
    if np.any((matrix > 0) & (allowed == 0)):
        raise ParameterError("the mixing matrix has weight outside the graph's edges", argument="weights")


def check_gossip(matrix: np.ndarray) -> None:
    """Raise ParameterError unless W is symmetric, W 1 = 1 and every other eigenvalue lies in (-1, 1)
    (Assumption 1 of Ding's thesis, Ch. 4: then null(I - W) = span(1))."""
    n = matrix.shape[0]
    if not np.allclose(matrix, matrix.T, atol=STOCHASTIC_TOLERANCE):
        raise ParameterError("the gossip matrix is not symmetric", argument="weights")
    if float(np.max(np.abs(matrix.sum(axis=1) - 1.0))) > 1e-10:
        raise ParameterError("the gossip matrix does not keep the average (W 1 != 1)", argument="weights")
    eigs = np.sort(np.linalg.eigvalsh(matrix))
    if n > 1 and (eigs[-2] >= 1.0 - 1e-10 or eigs[0] <= -1.0 + 1e-10):
        raise ParameterError(f"the gossip matrix's other eigenvalues must lie in (-1, 1), got [{eigs[0]:.6g}, "
                             f"{eigs[-2]:.6g}] (a disconnected graph, or kappa <= lambda_max(L)/2)", argument="weights")


#: The default ``window`` of a time-varying topology: the union of the graphs of rounds kB + 1, ..., (k + 1) B must
#: be connected for every k (B-connectivity, the assumption of the time-varying analyses, e.g. Nedic & Ozdaglar
#: 2009), or the run warns.
CONNECTIVITY_WINDOW = 10


class Topology:
    """The communication graph of a run: fixed, time-varying, or the server star.

    Parameters
    ----------
    graph:
        A ``networkx.Graph`` over the agent names, or a callable ``t -> networkx.Graph``
        for a time-varying graph (rounds t = 1, 2, ...).
    window:
        Time-varying graphs only: B, the length of the windows of rounds (1..B, B+1..2B, ...) over each of which the
        union of the graphs must be connected; a run whose window is not warns with `ConvergenceWarning`
        (`WindowConnectivity`). Default `CONNECTIVITY_WINDOW`; `Topology.switching` uses the number of graphs.
    """

    def __init__(self, graph: nx.Graph | Callable[[int], nx.Graph], *, window: int | None = None) -> None:
        if isinstance(graph, nx.Graph):
            if graph.is_directed():
                raise ParameterError("must be an undirected networkx.Graph", argument="graph")
            self._static: nx.Graph | None = graph
            self._function: Callable[[int], nx.Graph] | None = None
        elif callable(graph):
            self._static, self._function = None, graph
        else:
            raise ParameterError(f"must be a networkx.Graph or a callable t -> graph, got {graph!r}",
                                 argument="graph")
        self._factory: GraphFactory | None = None
        self.is_star = False
        self.nodes: list[str] | None = sorted(map(str, graph.nodes)) if self._static is not None else None
        self._cache: dict[tuple, Any] = {}
        self.window = CONNECTIVITY_WINDOW if window is None else check_int(window, argument="window")
        self._count: int | None = None  # a builder given a number of agents: built at `bind`

    # ---- builders -------------------------------------------------------------------------------------
    @classmethod
    def _deferred(cls, factory: GraphFactory, nodes: Nodes) -> Topology:
        """A topology built by ``factory(names)``: now if the names are given, else at `bind` (a number of agents is
        checked against the problem's before its graph is built, so a hostile count costs nothing)."""
        count = None
        if isinstance(nodes, int | np.integer) and not isinstance(nodes, bool):
            count, nodes = check_int(nodes, argument="nodes", minimum=1), None
        names = _names(nodes)
        if names is not None:
            return cls(factory(names))
        topology = cls.__new__(cls)
        topology._static, topology._function, topology._factory = None, None, factory
        topology.is_star, topology.nodes, topology._cache = False, None, {}
        topology.window, topology._count = CONNECTIVITY_WINDOW, count
        return topology

    @classmethod
    def star(cls) -> Topology:
        """Every agent talks to the server only: the pattern of Algorithm 1 (paper 004)."""
        topology = cls._deferred(_star_graph, None)
        topology.is_star = True
        return topology

    @classmethod
    def complete(cls, nodes: Nodes = None) -> Topology:
        """Every agent is every other agent's neighbour."""
        return cls._deferred(_complete_graph, nodes)

    @classmethod
    def ring(cls, nodes: Nodes = None) -> Topology:
        """Agent i talks to agents i - 1 and i + 1 (mod n), in the order of the names."""
        return cls._deferred(_ring_graph, nodes)

    @classmethod
    def random(cls, nodes: Nodes = None, *, edges: int | None = None, seed: int = 0) -> Topology:
        """A random connected graph with ``edges`` edges (default 2 n), reproducible from ``seed``."""
        return cls._deferred(functools.partial(_random_connected, edges=edges, seed=seed), nodes)

    @classmethod
    def random_sequence(cls, nodes: Nodes = None, *, edges: int | None = None, seed: int = 0) -> Topology:
        """Time-varying: round t's graph is a fresh random connected graph (seeded by ``seed`` and t)."""
        return cls._deferred(functools.partial(_Sequence, edges=edges, seed=seed), nodes)

    @classmethod
    def switching(cls, graphs: Sequence[nx.Graph], *, window: int | None = None) -> Topology:
        """Time-varying: round t uses ``graphs[(t - 1) % len(graphs)]``; ``window`` defaults to ``len(graphs)``
        (their union must be connected)."""
        graphs = list(graphs) if isinstance(graphs, Sequence) and not isinstance(graphs, str) else []
        if not graphs or not all(isinstance(g, nx.Graph) for g in graphs):
            raise ParameterError("must be a non-empty list of networkx graphs", argument="graphs")
        return cls(_Cycle(tuple(graphs)), window=len(graphs) if window is None else window)

    # ---- binding to a problem's agents ----------------------------------------------------------------
    def bind(self, names: Sequence[str]) -> Topology:
        """This topology over the agents ``names``, checked: the nodes must be exactly the agents.

        A builder called without nodes is built here. Static graphs must be connected.
        """
        names = [str(n) for n in names]
        if self.is_star and SERVER in names:
            raise ParameterError(f"an agent is named {SERVER!r}, the server's name under Topology.star()",
                                 agent=SERVER, argument="name")
        if self._count is not None and self._count != len(names):
            raise ParameterError(f"the topology was built for {self._count} agents, the problem has {len(names)}",
                                 argument="nodes")
        built_over = names if self._count is None else _names(self._count)
        bound = Topology(self._factory(built_over)) if self._factory is not None else self
        bound.is_star, bound.window = self.is_star, self.window
        bound.nodes = sorted([*names, SERVER] if self.is_star else names)
        bound._check_nodes(bound.graph(1), names, 1)
        if bound._static is not None and not nx.is_connected(bound._static):
            raise ParameterError("the communication graph is not connected", argument="topology")
        return bound

    def _check_nodes(self, graph: nx.Graph, names: Sequence[str], t: int) -> None:
        expected = set(names) | ({SERVER} if self.is_star else set())
        found = set(map(str, graph.nodes))
        if found != expected:
            missing, extra = sorted(expected - found), sorted(found - expected)
            raise ParameterError(f"round {t}'s graph does not match the agents: missing {missing}, unknown {extra}",
                                 argument="topology")

    # ---- queries --------------------------------------------------------------------------------------
    @property
    def time_varying(self) -> bool:
        return self._function is not None

    def graph(self, t: int) -> nx.Graph:
        """Round t's graph."""
        if self._static is not None:
            return self._static
        if self._function is None:
            raise ParameterError("this topology is not bound to agents yet (Topology.bind)", argument="topology")
        if ("graph", t) in self._cache:
            return self._cache["graph", t]
        try:
            graph = self._function(t)
        except PrivcvxError:
            raise
        except Exception as exc:  # the user's t -> graph function
            raise ParameterError(f"round {t}: the topology function raised {type(exc).__name__}: {exc}",
                                 argument="topology") from exc
        if not isinstance(graph, nx.Graph) or graph.is_directed():
            raise ParameterError(f"round {t}: the topology function must return an undirected networkx.Graph, "
                                 f"got {graph!r}", argument="topology")
        if self.nodes is not None:
            self._check_nodes(graph, [n for n in self.nodes if not (self.is_star and n == SERVER)], t)
        self._remember(("graph", t), graph)
        return graph

    def _remember(self, key: tuple, value: Any) -> None:
        """Keep the last few rounds' graphs and weights (a run asks for each several times per round)."""
        if len(self._cache) >= 16:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = value

    def neighbours(self, name: str, t: int) -> list[str]:
        """The names ``name`` exchanges messages with in round t (the server alone under the star)."""
        graph = self.graph(t)
        if name not in graph:
            raise ParameterError(f"{name!r} is not a node of round {t}'s graph", argument="topology")
        return sorted(str(v) for v in graph.neighbors(name) if v != name)

    def weights(self, t: int, rule: str = "metropolis") -> tuple[list[str], np.ndarray]:
        """Round t's mixing matrix under ``rule``, with its row and column order (sorted names); checked."""
        if self.is_star:
            raise ParameterError("the server star has no mixing weights (it is for server-based methods)",
                                 argument="topology")
        rule = check_scalar(rule, argument="weights", choices=sorted(WEIGHT_RULES))
        key = ("weights", rule, t if self.time_varying else 0)
        if key not in self._cache:
            graph = self.graph(t)
            order = sorted(str(v) for v in graph.nodes)
            matrix = WEIGHT_RULES[rule](graph, order)
            check_doubly_stochastic(matrix, graph, order)
            self._remember(key, (order, matrix))
        return self._cache[key]

    def weight_row(self, name: str, t: int, rule: str = "metropolis") -> dict[str, float]:
        """Agent ``name``'s nonzero weights a_ij(t), itself included: ``{j: a_ij(t)}``."""
        order, matrix = self.weights(t, rule)
        row = matrix[order.index(name)]
        return {order[j]: float(row[j]) for j in np.flatnonzero(row)}

    # ---- spectral quantities of a static graph (Ding's thesis, Ch. 3 and 4) ----------------------------
    def degrees(self, t: int = 1) -> dict[str, int]:
        """|V_i|: every agent's number of neighbours in round t's graph."""
        graph = self.graph(t)
        return {str(v): sum(1 for u in graph.neighbors(v) if u != v) for v in graph.nodes}

    def laplacians(self, t: int = 1) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(order, L-, L+): the signed and signless Laplacians of round t's graph (Eqs. (8)-(9) of Ding's thesis).

        With the arcs (i, j) and (j, i) of every edge stacked in A1 (rows e_i) and A2 (rows e_j),
        H+- = A1^T +- A2^T and L+- = (1/2) H+- H+-^T: L- = D - Adj (the graph Laplacian) and L+ = D + Adj,
        with D the degrees.
        """
        if self.is_star:
            raise ParameterError("the server star has no agent graph", argument="topology")
        graph = self.graph(t)
        order = sorted(str(v) for v in graph.nodes)
        adjacency = nx.to_numpy_array(graph, nodelist=order, weight=None)
        np.fill_diagonal(adjacency, 0.0)
        degree = np.diag(adjacency.sum(axis=1))
        return order, degree - adjacency, degree + adjacency

    def admm_constants(self, t: int = 1) -> dict[str, float]:
        """The graph constants of Lemma 9 and Thms. 4-5 of Ding's thesis (Ch. 3).

        ``phi_max_signless`` = phi_max(L+), ``phi_min_signed`` = phi_min(L-) (the smallest *nonzero*
        eigenvalue: L- is singular, so the thesis's phi_min can only mean that one; it is the algebraic
        connectivity) and ``phi_max_q`` = phi_max(Q) with Q = sqrt(L-/2).
        """
        _, signed, signless = self.laplacians(t)
        signed_eigs = np.linalg.eigvalsh(signed)
        nonzero = signed_eigs[signed_eigs > 1e-9 * max(1.0, float(signed_eigs[-1]))]
        if nonzero.size < len(signed_eigs) - 1:
            raise ParameterError("round t's graph is not connected", argument="topology")
        return {"phi_max_signless": float(np.linalg.eigvalsh(signless)[-1]),
                "phi_min_signed": float(nonzero[0]) if nonzero.size else 0.0,
                "phi_max_q": float(np.sqrt(max(float(signed_eigs[-1]), 0.0) / 2.0))}

    def gossip_weights(self, t: int = 1, kappa: float | None = None) -> tuple[list[str], np.ndarray]:
        """W = I - L/kappa (Sec. 4.5 of Ding's thesis), checked against Assumption 1.

        ``kappa`` must exceed lambda_max(L)/2, so that every eigenvalue of W other than the 1 of the
        consensus direction lies in (-1, 1); the default is lambda_max(L). Raises ParameterError when W is
        not symmetric, does not keep the average (W 1 = 1), or null(I - W) is not span(1) (a disconnected graph).
        """
        order, signed, _ = self.laplacians(t)
        largest = float(np.linalg.eigvalsh(signed)[-1])
        if kappa is None:
            kappa = largest if largest > 0 else 1.0
        kappa = check_scalar(kappa, argument="kappa", kind=float)  # finite; a bool or a string is refused
        if kappa <= largest / 2.0:
            raise ParameterError(f"must exceed lambda_max(L)/2 = {largest / 2.0:.6g}, got {kappa!r}", argument="kappa")
        matrix = np.eye(len(order)) - signed / kappa
        check_gossip(matrix)
        return order, matrix

    def spectral_gap(self, t: int = 1, kappa: float | None = None) -> float:
        """1 - beta, with beta = max(|lambda_2(W)|, |lambda_n(W)|) for the gossip weights W = I - L/kappa."""
        _, matrix = self.gossip_weights(t, kappa)
        eigs = np.sort(np.linalg.eigvalsh(matrix))[::-1]
        return 1.0 - float(np.max(np.abs(eigs[1:]))) if len(eigs) > 1 else 1.0

    def __repr__(self) -> str:
        if self.is_star:
            return "Topology.star()"
        if self._factory is not None:
            return f"Topology({_describe(self._factory)}, unbound)"
        if self._static is not None:
            return f"Topology(nodes={self._static.number_of_nodes()}, edges={self._static.number_of_edges()})"
        return f"Topology(time-varying: {self._function!r})"


# ---- graph factories (module level, so that topologies pickle) ------------------------------------------

class WindowConnectivity:
    """The run's check that a time-varying topology is connected over every window of ``topology.window`` rounds:
    the union of the graphs of rounds kB + 1, ..., (k + 1) B is kept as the rounds go (O(edges) per round) and
    checked at each window's end; the first window that is not connected warns (`ConvergenceWarning`), once."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.union = nx.Graph()
        self.warned = not topology.time_varying

    def add(self, t: int) -> None:
        """Add round ``t``'s graph (rounds come in order); check the window that ends at ``t``."""
        if self.warned:
            return
        graph = self.topology.graph(t)
        self.union.add_nodes_from(graph.nodes)
        self.union.add_edges_from(graph.edges)
        if t % self.topology.window == 0:
            if not nx.is_connected(self.union):
                parts = [sorted(map(str, part)) for part in nx.connected_components(self.union)]
                warnings.warn(f"the time-varying topology is not connected over rounds {t - self.topology.window + 1}"
                              f"..{t} (window={self.topology.window}): its union has {len(parts)} components, "
                              f"e.g. {parts[0][:5]}; the agents cannot reach consensus (set a longer window= if "
                              "the graphs connect more slowly)", ConvergenceWarning, stacklevel=2)
                self.warned = True
            self.union = nx.Graph()


def _describe(factory: Any) -> str:
    func = factory.func if isinstance(factory, functools.partial) else factory
    return getattr(func, "__name__", repr(func)).strip("_")


def _star_graph(names: Sequence[str]) -> nx.Graph:
    graph = nx.Graph()
    graph.add_node(SERVER)
    graph.add_edges_from((SERVER, name) for name in names)
    return graph


def _complete_graph(names: Sequence[str]) -> nx.Graph:
    return nx.relabel_nodes(nx.complete_graph(len(names)), dict(enumerate(names)))


def _ring_graph(names: Sequence[str]) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(names)
    if len(names) > 1:
        graph.add_edges_from((names[i], names[(i + 1) % len(names)]) for i in range(len(names)))
    return graph


def _random_connected(names: Sequence[str], *, edges: int | None, seed: int) -> nx.Graph:
    """A uniformly random spanning tree (random attachment order) plus random extra edges, seeded."""
    n = len(names)
    if edges is not None and check_int(edges, argument="edges", minimum=0) < n - 1:
        raise ParameterError(f"{n} agents need at least {n - 1} edges to be connected (edges counts every edge, "
                             f"the spanning tree's {n - 1} included), got {edges!r}", argument="edges")
    target = 2 * n if edges is None else int(edges)
    target = min(target, n * (n - 1) // 2)
    rng = np.random.default_rng(check_int(seed, argument="seed", minimum=0))
    order = list(rng.permutation(n))
    graph = nx.Graph()
    graph.add_nodes_from(names)
    for k in range(1, n):
        graph.add_edge(names[order[k]], names[order[int(rng.integers(k))]])
    missing = [(names[i], names[j]) for i in range(n) for j in range(i + 1, n)
               if not graph.has_edge(names[i], names[j])]
    extra = target - graph.number_of_edges()
    if extra > 0:
        for k in rng.choice(len(missing), size=extra, replace=False):
            graph.add_edge(*missing[k])
    return graph


class _Sequence:
    """Round t's graph: a random connected graph seeded by (seed, t)."""

    def __init__(self, names: Sequence[str], edges: int | None, seed: int) -> None:
        self.names, self.edges, self.seed = list(names), edges, check_int(seed, argument="seed", minimum=0)

    def __call__(self, t: int) -> nx.Graph:
        rng_seed = int(np.random.SeedSequence([self.seed, int(t)]).generate_state(1)[0])
        return _random_connected(self.names, edges=self.edges, seed=rng_seed)

    def __repr__(self) -> str:
        return f"random_sequence(edges={self.edges}, seed={self.seed})"


class _Cycle:
    """Round t's graph: ``graphs[(t - 1) % len(graphs)]``."""

    def __init__(self, graphs: tuple[nx.Graph, ...]) -> None:
        self.graphs = graphs

    def __call__(self, t: int) -> nx.Graph:
        return self.graphs[(int(t) - 1) % len(self.graphs)]

    def __repr__(self) -> str:
        return f"switching({len(self.graphs)} graphs)"


