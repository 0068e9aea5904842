"""Shortest paths and connected parts of a topology's graphs, in plain Python (heapq).

Searches stop as soon as every vertex they were asked for is settled, and may skip
vertices, which is what routing on machines of tens of thousands of GPUs needs (see
Topology.routes). Ties are broken the same way every time: vertices leave the heap in
(distance, vertex) order (or highest vertex first), neighbours are relaxed in ascending
order, and a vertex keeps the first predecessor that reached it at its final distance."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from functools import cached_property
from typing import Iterable, overload

import numpy as np

from gansim.core.arrays import ragged


def whole_weights(weights: np.ndarray) -> bool:
    """Whether every weight is a whole number of at least 1 (routing weights are:
    Topology._weights): every sum of them below 2**53 is then exact, in whatever order it is
    added."""
    return bool(weights.size == 0 or (weights.min() >= 1.0 and (np.floor(weights) == weights).all()))


class Digraph:
    """A weighted directed graph on vertices 0..n-1, as adjacency lists."""

    def __init__(self, n: int, rows: np.ndarray, cols: np.ndarray, weights: np.ndarray):
        order = np.lexsort((cols, rows))
        rows, cols, weights = rows[order], cols[order], weights[order]
        self.n = n
        self._starts = np.searchsorted(rows, np.arange(n + 1))
        self.out = _Adjacency(self._starts, cols, weights)
        self._arrays = (rows, cols, weights)

    @property
    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every edge's (from, to, weight), sorted by from, then to."""
        return self._arrays

    @cached_property
    def whole_weights(self) -> bool:
        """Whether every weight is a whole number of at least 1 (whole_weights)."""
        return whole_weights(self._arrays[2])

    def degree(self) -> np.ndarray:
        return np.diff(self._starts)

    def reversed(self) -> "Digraph":
        rows, cols, weights = self._arrays
        return Digraph(self.n, cols, rows, weights)


class _Adjacency(Sequence[list[tuple[int, float]]]):
    """Per vertex, its (neighbour, weight) edges in ascending order of neighbour, made when a
    search first asks for them: a graph of tens of thousands of GPUs has a million edges,
    of which a search looks at a few."""

    def __init__(self, starts: np.ndarray, cols: np.ndarray, weights: np.ndarray):
        self._starts, self._cols, self._weights = starts, cols, weights
        self._made: dict[int, list[tuple[int, float]]] = {}
        self._split: dict[int, tuple[list[tuple[int, float]], list[tuple[int, float]]]] = {}
        self._sink = np.diff(starts) == 0  # per vertex: no edges out (a rank device's sink)

    def __len__(self) -> int:
        return self._starts.size - 1

    @overload
    def __getitem__(self, v: int) -> list[tuple[int, float]]: ...

    @overload
    def __getitem__(self, v: slice) -> list[list[tuple[int, float]]]: ...

    def __getitem__(self, v: int | slice) -> list[tuple[int, float]] | list[list[tuple[int, float]]]:
        if isinstance(v, slice):
            return [self[i] for i in range(*v.indices(len(self)))]
        found = self._made.get(v)
        if found is None:
            if not 0 <= v < len(self):
                raise IndexError(v)
            lo, hi = int(self._starts[v]), int(self._starts[v + 1])
            found = self._made[v] = list(zip(self._cols[lo:hi].tolist(), self._weights[lo:hi].tolist()))
        return found

    def split(self, v: int) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        """v's edges into vertices with edges out, then those into sinks (none out), which a
        search reaches but never goes on from."""
        found = self._split.get(v)
        if found is None:
            lo, hi = int(self._starts[v]), int(self._starts[v + 1])
            edges = list(zip(self._cols[lo:hi].tolist(), self._weights[lo:hi].tolist()))
            into_sink = self._sink[self._cols[lo:hi]].tolist()
            found = self._split[v] = ([e for e, dead in zip(edges, into_sink) if not dead],
                                      [e for e, dead in zip(edges, into_sink) if dead])
        return found


class Search:
    """Dijkstra's search from `sources` that settles vertices as they are asked for: each
    vertex it settles gets the distance and predecessor the whole search gives it, whatever
    was asked before (vertices leave the heap in the same order; a vertex's predecessor comes
    from a vertex settled before it). Vertices in `skip` are never entered. Vertices of equal
    distance leave the heap lowest first, or highest first with `high_first` (as scipy's
    Dijkstra, which gansim used before, ordered them: see Topology._search_routes).

    A sink (a vertex with no edges out: a rank device's, as Topology routes it) is reached
    but never put on the heap, since nothing goes on from it: its distance and predecessor
    are those its in-edges give, and it is settled where the heap would have given it, once
    every vertex before it in the heap's order has left (then nothing can reach it shorter).
    On a fabric of many machines a search from one GPU reaches other GPUs' sinks before the
    farther switches it is routed through: on a rail fabric of 1,024 GPUs, a search for a
    route between leaf groups settles 2,211 vertices, 1,024 of them sinks."""

    def __init__(self, graph: Digraph, sources: Iterable[int], *, skip: set[int] | frozenset[int] = frozenset(),
                 high_first: bool = False):
        self.dist: dict[int, float] = {}  # tentative for the vertices not settled yet
        self.pred: dict[int, int] = {}
        self.origin: dict[int, int] = {}
        self.settled: set[int] = set()
        self._sign = -1 if high_first else 1
        self._heap: list[tuple[float, int]] = []
        self._split, self._skip = graph.out.split, skip
        self._reached: set[int] = set()  # sinks with a distance, not settled yet
        for s in sources:
            if s not in self.dist:
                self.dist[s] = 0.0
                self.origin[s] = s
                self._heap.append((0.0, self._sign * s))
        heapq.heapify(self._heap)

    def settle(self, targets: Iterable[int] | None = None, within: float = np.inf) -> None:
        """Settle vertices until every one of `targets` is, or the next is farther than
        `within`, or the search has settled everything it reaches."""
        settled = self.settled
        wanted = set(targets) - settled if targets is not None else None
        dist, pred, origin = self.dist, self.pred, self.origin
        heap, split, skip, sign = self._heap, self._split, self._skip, self._sign
        reached = self._reached
        # the wanted sinks reached, in the heap's order: each settled when it comes first
        due = [(dist[t], sign * t) for t in wanted & reached] if wanted is not None else []
        heapq.heapify(due)
        while heap and (wanted is None or wanted):
            d, key = heap[0]
            v = sign * key
            if v in settled:
                heapq.heappop(heap)
                continue
            while due and due[0] < (d, key):
                t_dist, t_key = heapq.heappop(due)
                t = sign * t_key
                if t in settled or dist[t] != t_dist:
                    continue  # (reached again, shorter: its entry after)
                if t_dist > within:
                    self._settle_reached(within)
                    return
                settled.add(t)
                reached.discard(t)
                wanted.discard(t)
                if not wanted:
                    return
            if d > within:
                self._settle_reached(within)
                return
            heapq.heappop(heap)
            settled.add(v)
            if wanted is not None:
                wanted.discard(v)
            live, into_sinks = split(v)
            for edges, onto_heap in ((live, True), (into_sinks, False)):
                for w, weight in edges:
                    if w in settled or w in skip:
                        continue
                    nd = d + weight
                    old = dist.get(w)
                    if old is None or nd < old:
                        dist[w] = nd
                        pred[w] = v
                        origin[w] = origin[v]
                        if onto_heap:
                            heapq.heappush(heap, (nd, sign * w))
                        else:
                            reached.add(w)
                            if wanted is not None and w in wanted:
                                heapq.heappush(due, (nd, sign * w))
        if not heap:  # every vertex it reaches has left the heap: the sinks' distances are final
            self._settle_reached(within)

    def _settle_reached(self, within: float) -> None:
        """Settle the sinks reached within `within` (every vertex before them has left the heap)."""
        dist, reached = self.dist, self._reached
        if within == np.inf:
            self.settled |= reached
            reached.clear()
            return
        done = {t for t in reached if dist[t] <= within}
        self.settled |= done
        reached -= done

    def distance(self, v: int, within: float) -> float:
        """v's distance where it is at most `within` (or v was settled before), else inf."""
        if v not in self.settled:
            self.settle((v,), within)
        return self.dist[v] if v in self.settled else np.inf

    def found(self) -> tuple[dict[int, float], dict[int, int], dict[int, int]]:
        """(distance, predecessor, source) of every vertex settled."""
        settled = self.settled
        if len(settled) == len(self.dist):
            return self.dist, self.pred, self.origin
        return ({v: d for v, d in self.dist.items() if v in settled}, {v: u for v, u in self.pred.items() if v in settled},
                {v: o for v, o in self.origin.items() if v in settled})


def dijkstra(graph: Digraph, sources: Iterable[int], *, targets: Iterable[int] | None = None,
             skip: set[int] | frozenset[int] = frozenset(),
             high_first: bool = False) -> tuple[dict[int, float], dict[int, int], dict[int, int]]:
    """Distances from the nearest of `sources`, each vertex's predecessor on its shortest
    path and the source it comes from (see Search). With `targets`, the search stops once
    they are all settled, and only the vertices it settled are in what it returns."""
    if targets is None and graph.n >= _WHOLE_SEARCH_MIN_VERTICES and graph.whole_weights:
        found = _settle_all(graph, sources, skip, high_first)
        if found is not None:
            return found
    search = Search(graph, sources, skip=skip, high_first=high_first)
    search.settle(targets)
    return search.found()


# below this many vertices the heap's search costs less than the arrays' set-up
_WHOLE_SEARCH_MIN_VERTICES = 256


def _settle_all(graph: Digraph, sources: Iterable[int], skip: set[int] | frozenset[int],
                high_first: bool) -> tuple[dict[int, float], dict[int, int], dict[int, int]] | None:
    """dijkstra() of every vertex the sources reach, worked out on arrays: the distances by
    relaxing every edge out of the vertices whose distance fell, until none falls (exact in any
    order where the weights are whole numbers, Digraph.whole_weights, and every sum stays below
    2**53: None where one does not); then each vertex's predecessor as the search would take
    it: of the vertices one edge short of it at its distance, the one the search settles first,
    the nearest, then the lowest (highest with `high_first`) numbered, as vertices leave its
    heap; and the source at the end of that chain. A search from a spine that reaches a pod of
    thousands of machines is a few dozen numpy operations instead of a heap operation per edge."""
    rows, cols, weights = graph.edges
    starts = graph._starts
    blocked = np.zeros(graph.n, dtype=bool)
    blocked[np.array(sorted(skip), dtype=np.int64)] = True
    origins = np.unique(np.fromiter(sources, dtype=np.int64))
    dist = np.full(graph.n, np.inf)
    dist[origins] = 0.0
    fell = origins
    while fell.size:
        edge, owner = ragged(starts[fell], starts[fell + 1] - starts[fell])
        to, through = cols[edge], dist[fell[owner]] + weights[edge]
        shorter = (through < dist[to]) & ~blocked[to]
        to, through = to[shorter], through[shorter]
        if through.size and through.max() >= 2.0**53:
            return None
        np.minimum.at(dist, to, through)
        fell = np.unique(to[through == dist[to]])
    reached = np.flatnonzero(np.isfinite(dist))
    is_origin = np.zeros(graph.n, dtype=bool)
    is_origin[origins] = True
    tight = np.flatnonzero(np.isfinite(dist[rows]) & (dist[rows] + weights == dist[cols]) & ~is_origin[cols]
                           & ~blocked[cols])
    before, after = rows[tight], cols[tight]
    order = np.lexsort(((-1 if high_first else 1) * before, dist[before], after))
    before, after = before[order], after[order]
    chosen = np.ones(after.size, dtype=bool)
    chosen[1:] = after[1:] != after[:-1]
    before, after = before[chosen], after[chosen]
    root = np.arange(graph.n)
    root[after] = before
    while True:  # each vertex's source: along the predecessors, twice as far each round
        further = root[root]
        if np.array_equal(further, root):
            break
        root = further
    keys = reached.tolist()
    return (dict(zip(keys, dist[reached].tolist())), dict(zip(after.tolist(), before.tolist())),
            dict(zip(keys, root[reached].tolist())))


def path_to(pred: dict[int, int], source: int, target: int) -> list[int]:
    """The vertices from `source` to `target` along the predecessors."""
    path = [target]
    while path[-1] != source:
        path.append(pred[path[-1]])
    return path[::-1]


def components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The connected part of each of n vertices joined by the undirected edges (a, b),
    numbered by their smallest vertex."""
    parent = np.arange(n)
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    while True:  # label propagation: every vertex takes its neighbours' smallest label
        low = np.minimum(parent[a], parent[b])
        merged = parent.copy()
        np.minimum.at(merged, a, low)
        np.minimum.at(merged, b, low)
        merged = merged[merged]  # jump along the labels
        if np.array_equal(merged, parent):
            break
        parent = merged
    _, label = np.unique(parent, return_inverse=True)
    return label
