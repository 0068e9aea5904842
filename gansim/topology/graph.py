"""Topology: a networkx graph of full-duplex links, flattened into directed-link arrays
that the flow network indexes, with cached shortest routes (latency, then hops)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components, dijkstra

from gansim.core.config import LinkSpec, NodeSpec, TopologyFile, parse
from gansim.core.errors import UserInputError
from gansim.core.files import read_yaml, resolve_file
from gansim.core.units import GB
from gansim.topology.generators import generate

US = 1e-6
RANK_KINDS = ("gpu", "cpu")
# routing treats a node linked to more nodes than this as a hub (see Topology.routes)
HUB_DEGREE = 64


@dataclass(frozen=True)
class Route:
    links: np.ndarray  # directed link indices, in path order
    latency_s: float
    bottleneck_Bps: float


@dataclass
class Topology:
    name: str
    description: str
    source: str
    nodes: dict[str, NodeSpec]
    graph: nx.Graph
    link_names: list[str]  # "a->b" per directed link
    link_kinds: list[str]
    capacity_Bps: np.ndarray
    latency_s: np.ndarray
    ranks: list[str]  # rank devices (gpu/cpu) in file order
    _link_index: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    _routes: dict[tuple[str, str], Route] = field(default_factory=dict, repr=False)

    # -- building
    @classmethod
    def from_specs(cls, spec: TopologyFile, nodes: list[NodeSpec], links: list[LinkSpec], source: str) -> "Topology":
        by_id: dict[str, NodeSpec] = {}
        for i, node in enumerate(nodes):
            if node.id in by_id:
                raise UserInputError(f"duplicate node id {node.id!r}", source=source, field=f"nodes[{i}].id")
            by_id[node.id] = node
        for i, node in enumerate(nodes):
            if node.kind == "cpu" and node.host is not None and by_id.get(node.host, None) is None:
                raise UserInputError(f"unknown host {node.host!r}", source=source, field=f"nodes[{i}].host")
        graph = nx.Graph()
        for node in nodes:
            graph.add_node(node.id, kind=node.kind)
        names: list[str] = []
        kinds: list[str] = []
        caps: list[float] = []
        lats: list[float] = []
        index: dict[tuple[str, str], int] = {}
        for i, link in enumerate(links):
            for end in ("a", "b"):
                if getattr(link, end) not in by_id:
                    raise UserInputError(
                        f"link end {getattr(link, end)!r} is not a node", source=source, field=f"links[{i}].{end}"
                    )
            if link.a == link.b:
                raise UserInputError("a link must join two different nodes", source=source, field=f"links[{i}]")
            if graph.has_edge(link.a, link.b):
                raise UserInputError(
                    f"a second link between {link.a} and {link.b}; give one link with the summed bandwidth",
                    source=source,
                    field=f"links[{i}]",
                )
            graph.add_edge(link.a, link.b, kind=link.kind, bandwidth_GBps=link.bandwidth_GBps,
                           latency_us=link.latency_us)
            for u, v in ((link.a, link.b), (link.b, link.a)):
                index[(u, v)] = len(names)
                names.append(f"{u}->{v}")
                kinds.append(link.kind)
                caps.append(link.bandwidth_GBps * GB)
                lats.append(link.latency_us * US)
        ranks = [n.id for n in nodes if n.kind in RANK_KINDS]
        if not ranks:
            raise UserInputError("the topology has no gpu (or cpu rank) nodes", source=source, field="nodes")
        if not nx.is_connected(graph):
            parts = sorted((sorted(c) for c in nx.connected_components(graph)), key=len)
            raise UserInputError(
                f"the graph is disconnected: {parts[0][0]!r} cannot reach {parts[-1][0]!r}",
                source=source,
                field="links",
            )
        return cls(
            name=spec.name,
            description=spec.description,
            source=source,
            nodes=by_id,
            graph=graph,
            link_names=names,
            link_kinds=kinds,
            capacity_Bps=np.array(caps, dtype=float),
            latency_s=np.array(lats, dtype=float),
            ranks=ranks,
            _link_index=index,
        )

    def scaled(self, bandwidth_scale: float) -> "Topology":
        """The same machine with every link's bandwidth multiplied (a what-if axis)."""
        if bandwidth_scale == 1.0:
            return self
        return self.replace(capacity_Bps=self.capacity_Bps * bandwidth_scale)

    def replace(self, **changes: Any) -> "Topology":
        """A copy with some fields changed; routes are recomputed lazily (figures may differ)."""
        fields = dict(name=self.name, description=self.description, source=self.source, nodes=self.nodes,
                      graph=self.graph, link_names=self.link_names, link_kinds=self.link_kinds,
                      capacity_Bps=self.capacity_Bps, latency_s=self.latency_s, ranks=self.ranks,
                      _link_index=self._link_index)
        fields.update(changes)
        return Topology(**fields)

    # -- queries
    @property
    def num_links(self) -> int:
        return len(self.link_names)

    def link_index(self, u: str, v: str) -> int:
        return self._link_index[(u, v)]

    def kind(self, node: str) -> str:
        return self.nodes[node].kind

    def hosts(self) -> list[str]:
        return [n for n, spec in self.nodes.items() if spec.kind == "host"]

    @cached_property
    def host_of(self) -> dict[str, str]:
        """The host (CPU root complex) nearest to each rank: where its input batches come from."""
        result = {rank: self.nodes[rank].host for rank in self.ranks if self.nodes[rank].host is not None}
        hosts = self.hosts()
        if hosts:
            nodes = self.nodes

            def weight(u: str, v: str, attrs: dict[str, Any]) -> float | None:
                return None if nodes[u].kind in RANK_KINDS else _route_weight(attrs)

            _, paths = nx.multi_source_dijkstra(self.graph, hosts, weight=weight)
            for rank in self.ranks:
                if rank not in result and rank in paths:
                    result[rank] = paths[rank][0]
        return result

    @cached_property
    def machine_of(self) -> dict[str, int]:
        """Ranks that reach each other without a `net` link share a machine (for hierarchical
        algorithms: a node's GPUs)."""
        local = nx.subgraph_view(self.graph, filter_edge=lambda u, v: self.graph.edges[u, v]["kind"] != "net")
        result: dict[str, int] = {}
        for index, component in enumerate(sorted(nx.connected_components(local), key=min)):
            for node in component:
                result[node] = index
        return result

    def route(self, src: str, dst: str) -> Route:
        key = (src, dst)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        if src == dst:
            self._routes[key] = Route(np.zeros(0, dtype=np.int64), 0.0, float("inf"))
        else:
            self.routes([key])
        return self._routes[key]

    @cached_property
    def _routing(self) -> tuple[dict[tuple[str, str], int], list[str], Any]:
        """A directed routing graph as a sparse matrix, in which each rank device is split
        into a source (its edges out) and a sink (its edges in): no GPU relays a peer's
        copy, so no route passes through one."""

        index: dict[tuple[str, str], int] = {}
        names: list[str] = []

        def vertex(node: str, role: str) -> int:
            key = (node, role if self.nodes[node].kind in RANK_KINDS else "")
            if key not in index:
                index[key] = len(names)
                names.append(node)
            return index[key]

        rows, cols, weights = [], [], []
        for u, v, attrs in self.graph.edges(data=True):
            w = _route_weight(attrs)
            for a, b in ((u, v), (v, u)):
                rows.append(vertex(a, "out"))
                cols.append(vertex(b, "in"))
                weights.append(w)
        matrix = csr_matrix((weights, (rows, cols)), shape=(len(names), len(names)))
        return index, names, matrix

    def routes(self, pairs: list[tuple[str, str]]) -> list[Route]:
        """Routes for many (src, dst) pairs at once, computed in C (scipy's Dijkstra): one
        search per distinct source, or, on a graph with hubs (network switches linked to
        more than HUB_DEGREE nodes, whose every search would cross all of their links),
        one search from and one to each hub plus one inside each hub-free part."""
        missing = sorted({p for p in pairs if p not in self._routes and p[0] != p[1]})
        if missing:
            if self._hub_routing is not None:
                self._routes_via_hubs(missing)
            else:
                self._routes_by_source(missing)
        return [self.route(src, dst) for src, dst in pairs]

    def _vertex(self, node: str, role: str) -> int:
        index = self._routing[0]
        return index[(node, role) if self.nodes[node].kind in RANK_KINDS else (node, "")]

    def _store(self, src: str, dst: str, vertices: list[int]) -> None:
        names = self._routing[1]
        nodes = [names[v] for v in vertices]
        links = np.array([self._link_index[(u, v)] for u, v in zip(nodes, nodes[1:])], dtype=np.int64)
        self._routes[(src, dst)] = Route(links, float(self.latency_s[links].sum()), float(self.capacity_Bps[links].min()))

    def _no_route(self, src: str, dst: str) -> UserInputError:
        return UserInputError(f"no route from {src} to {dst} that does not pass through another GPU",
                              source=self.source, field="links")

    def _routes_by_source(self, missing: list[tuple[str, str]]) -> None:
        _, _, matrix = self._routing
        sources = sorted({src for src, _ in missing})
        for first in range(0, len(sources), 256):
            batch = sources[first:first + 256]
            dist, pred = dijkstra(matrix, directed=True, indices=[self._vertex(s, "out") for s in batch],
                                  return_predecessors=True)
            row_of = {s: i for i, s in enumerate(batch)}
            for src, dst in missing:
                if src not in row_of:
                    continue
                row = row_of[src]
                target = self._vertex(dst, "in")
                if not np.isfinite(dist[row, target]):
                    raise self._no_route(src, dst)
                path = [target]
                while pred[row, path[-1]] >= 0:
                    path.append(int(pred[row, path[-1]]))
                self._store(src, dst, path[::-1])

    @cached_property
    def _hub_routing(self) -> "_HubRouting | None":
        _, names, matrix = self._routing
        degree = np.diff(matrix.indptr)
        hubs = np.flatnonzero(degree > HUB_DEGREE)
        if hubs.size == 0:
            return None
        from_hub, from_pred = dijkstra(matrix, directed=True, indices=hubs, return_predecessors=True)
        to_hub, to_pred = dijkstra(matrix.T.tocsr(), directed=True, indices=hubs, return_predecessors=True)
        coo = matrix.tocoo()
        is_hub = np.zeros(len(names), dtype=bool)
        is_hub[hubs] = True
        keep = ~(is_hub[coo.row] | is_hub[coo.col])
        local = csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=matrix.shape)
        _, part = connected_components(local, directed=True, connection="weak")
        return _HubRouting(hubs, from_hub, from_pred, to_hub, to_pred, local, part, np.bincount(part))

    def _routes_via_hubs(self, missing: list[tuple[str, str]]) -> None:
        """A shortest route either crosses some hub h (then it is a shortest route to h
        followed by one from h) or stays inside one hub-free part of the graph."""
        hub = self._hub_routing
        assert hub is not None
        src = np.array([self._vertex(s, "out") for s, _ in missing], dtype=np.int64)
        dst = np.array([self._vertex(d, "in") for _, d in missing], dtype=np.int64)
        via = hub.to_hub[:, src] + hub.from_hub[:, dst]
        best = via.argmin(axis=0)
        best_via = via[best, np.arange(src.size)]
        local_dist = np.full(src.size, np.inf)
        local_path: dict[int, list[int]] = {}
        same = np.flatnonzero(hub.part[src] == hub.part[dst])
        # one search per distinct source inside the hub-free parts, a few parts at a time
        parts = np.unique(hub.part[src[same]])
        part_sizes = hub.part_sizes[parts]
        groups = np.cumsum(part_sizes) // 4096
        for g in np.unique(groups):
            members = np.flatnonzero(np.isin(hub.part, parts[groups == g]))
            block = hub.local[members][:, members]
            position = np.full(hub.part.size, -1, dtype=np.int64)
            position[members] = np.arange(members.size)
            mine = same[position[src[same]] >= 0]
            sources = np.unique(src[mine])
            dist, pred = dijkstra(block, directed=True, indices=position[sources], return_predecessors=True)
            rows = np.searchsorted(sources, src[mine])
            for i, row in zip(mine.tolist(), rows.tolist()):
                target = int(position[dst[i]])
                local_dist[i] = dist[row, target]
                if np.isfinite(local_dist[i]) and local_dist[i] <= best_via[i]:
                    path = [target]
                    while pred[row, path[-1]] >= 0:
                        path.append(int(pred[row, path[-1]]))
                    local_path[i] = [int(members[v]) for v in reversed(path)]
        for i, (s, d) in enumerate(missing):
            if i in local_path:
                self._store(s, d, local_path[i])
                continue
            if not np.isfinite(best_via[i]):
                raise self._no_route(s, d)
            h = int(best[i])
            centre = int(hub.hubs[h])
            path = [int(src[i])]
            while path[-1] != centre:
                path.append(int(hub.to_pred[h, path[-1]]))
            back = [int(dst[i])]
            while back[-1] != centre:
                back.append(int(hub.from_pred[h, back[-1]]))
            self._store(s, d, path + back[-2::-1])


@dataclass(frozen=True)
class _HubRouting:
    """Shortest routes from and to every hub, and the graph without its hubs."""

    hubs: np.ndarray  # routing vertices
    from_hub: np.ndarray  # (hubs, vertices) distances from each hub
    from_pred: np.ndarray
    to_hub: np.ndarray  # (hubs, vertices) distances to each hub
    to_pred: np.ndarray  # on the reversed graph: the next vertex towards the hub
    local: Any  # the routing matrix without the hubs' edges
    part: np.ndarray  # per vertex, its hub-free part
    part_sizes: np.ndarray  # vertices per part


def _route_weight(attrs: dict[str, Any]) -> float:
    # latency first (whole picoseconds), then the hop count breaks ties
    return round(attrs["latency_us"] * 1e6) * 1e6 + 1.0


def load_topology(name_or_path: str, *, source: str | None = None, field: str | None = None) -> Topology:
    """Load a shipped topology by name or a YAML file; every mistake is a UserInputError."""
    path = resolve_file(name_or_path, "topologies", source=source, field=field)
    return topology_from_dict(read_yaml(path), str(path))


def topology_from_dict(data: dict[str, Any], source: str) -> Topology:
    spec: TopologyFile = parse(TopologyFile, data, source)
    if spec.generator is not None:
        built = generate(spec.generator, spec.params, source=source)
        nodes = [parse(NodeSpec, n, source) for n in built["nodes"]]
        links = [parse(LinkSpec, link, source) for link in built["links"]]
    else:
        assert spec.nodes is not None and spec.links is not None
        nodes, links = spec.nodes, spec.links
    return Topology.from_specs(spec, nodes, links, source)


def summarize(topo: Topology) -> dict[str, Any]:
    """What `gansim topology show` prints: counts by kind, link figures, bisection bandwidth."""
    nodes_by_kind: dict[str, int] = {}
    for spec in topo.nodes.values():
        nodes_by_kind[spec.kind] = nodes_by_kind.get(spec.kind, 0) + 1
    links_by_kind: dict[str, dict[str, float]] = {}
    for _u, _v, attrs in topo.graph.edges(data=True):
        row = links_by_kind.setdefault(attrs["kind"], {"count": 0, "min_GBps": float("inf"), "max_GBps": 0.0,
                                                        "min_latency_us": float("inf"), "max_latency_us": 0.0})
        row["count"] += 1
        row["min_GBps"] = min(row["min_GBps"], attrs["bandwidth_GBps"])
        row["max_GBps"] = max(row["max_GBps"], attrs["bandwidth_GBps"])
        row["min_latency_us"] = min(row["min_latency_us"], attrs["latency_us"])
        row["max_latency_us"] = max(row["max_latency_us"], attrs["latency_us"])
    return {
        "name": topo.name,
        "description": topo.description,
        "gpus": len(topo.ranks),
        "nodes_by_kind": dict(sorted(nodes_by_kind.items())),
        "links_by_kind": dict(sorted(links_by_kind.items())),
        "bisection": bisection(topo),
    }


def bisection(topo: Topology) -> dict[str, Any]:
    """Bandwidth (per direction) of the minimum cut between the first half of the ranks and
    the second half, in rank order: what an all-to-all across the two halves can use."""
    ranks = topo.ranks
    half = len(ranks) // 2
    if half == 0:
        return {"halves": [ranks[:1], []], "bandwidth_GBps": 0.0}
    flow = nx.DiGraph()
    for u, v, attrs in topo.graph.edges(data=True):
        flow.add_edge(u, v, capacity=attrs["bandwidth_GBps"])
        flow.add_edge(v, u, capacity=attrs["bandwidth_GBps"])
    for r in ranks[:half]:
        flow.add_edge("__left__", r)  # no capacity attribute: unbounded
    for r in ranks[half:]:
        flow.add_edge(r, "__right__")
    value = nx.maximum_flow_value(flow, "__left__", "__right__")
    label = [f"{ranks[0]}..{ranks[half - 1]}", f"{ranks[half]}..{ranks[-1]}"]
    return {"halves": label, "bandwidth_GBps": float(value)}
