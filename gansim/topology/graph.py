"""Topology: nodes and full-duplex links, flattened into directed-link arrays that the flow
network indexes, with cached shortest routes (latency, then hops). A networkx graph of it is
built only when something asks for one (the bisection bandwidth of `gansim topology show`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, NamedTuple, Sequence

import numpy as np

from gansim.core import limits
from gansim.core.arrays import ragged, unique_pairs
from gansim.core.config import LinkSpec, NodeSpec, TopologyFile, parse
from gansim.core.errors import UserInputError
from gansim.core.files import read_yaml, resolve_file
from gansim.core.units import GB
from gansim.topology.generators import generate
from gansim.topology.paths import Digraph, Search, components, dijkstra, path_to, whole_weights

US = 1e-6
RANK_KINDS = ("gpu", "cpu")
# routing treats a node linked to more nodes than this as a hub (see Topology.routes)
HUB_DEGREE = 64
# routes of up to this many links shorter than every longer one are found without a search
# (Topology._short_routes)
_SHORT_ROUTE_LINKS = 6
# the walks of three links out of and into their ends that _Edges.unique_shortest makes at
# most, in all, for routes of five and six links
_THREE_LINK_WALKS_MAX_ROWS = 1 << 23


@dataclass(frozen=True)
class Route:
    links: np.ndarray  # directed link indices, in path order
    latency_s: float
    bottleneck_Bps: float


class Link(NamedTuple):
    """One full-duplex link as a topology file or a generator gives it."""

    a: str
    b: str
    kind: str
    bandwidth_GBps: float
    latency_us: float


@dataclass
class Topology:
    name: str
    description: str
    source: str
    nodes: dict[str, NodeSpec]
    links: list[Link]  # as given; directed link 2i is links[i].a -> .b, 2i + 1 the way back
    link_names: list[str]  # "a->b" per directed link
    link_kinds: list[str]
    capacity_Bps: np.ndarray
    latency_s: np.ndarray
    ranks: list[str]  # rank devices (gpu/cpu) in file order
    ends: np.ndarray  # per directed link: (from, to) as indices into `nodes`
    _link_index: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    nccl_version: str | None = None  # the NCCL release the file names (TopologyFile.nccl_version)
    nccl_p2p_level: str | None = None  # NCCL_P2P_LEVEL of its runs (TopologyFile.nccl_p2p_level)
    _routes: dict[tuple[str, str], Route] = field(default_factory=dict, repr=False)

    # -- building
    @classmethod
    def from_specs(cls, spec: TopologyFile, nodes: Sequence[NodeSpec], links: Sequence[Any],
                   source: str) -> "Topology":
        by_id: dict[str, NodeSpec] = {}
        for i, node in enumerate(nodes):
            if node.id in by_id:
                raise UserInputError(f"duplicate node id {node.id!r}", source=source, field=f"nodes[{i}].id")
            by_id[node.id] = node
        for i, node in enumerate(nodes):
            if node.kind == "cpu" and node.host is not None and by_id.get(node.host, None) is None:
                raise UserInputError(f"unknown host {node.host!r}", source=source, field=f"nodes[{i}].host")
        position = {node_id: i for i, node_id in enumerate(by_id)}
        rows = [link if type(link) is Link else Link(link.a, link.b, link.kind, link.bandwidth_GBps, link.latency_us)
                for link in links]
        ends = np.empty((len(rows), 2), dtype=np.int64)
        ends[:, 0] = [position.get(link.a, -1) for link in rows]
        ends[:, 1] = [position.get(link.b, -1) for link in rows]
        unknown = np.flatnonzero(ends.ravel() < 0)
        if unknown.size:
            i, j = divmod(int(unknown[0]), 2)
            end = (rows[i].a, rows[i].b)[j]
            raise UserInputError(f"link end {end!r} is not a node", source=source, field=f"links[{i}].{'ab'[j]}")
        same = np.flatnonzero(ends[:, 0] == ends[:, 1])
        if same.size:
            raise UserInputError("a link must join two different nodes", source=source, field=f"links[{same[0]}]")
        pair = np.sort(ends, axis=1)
        keys = pair[:, 0] * len(position) + pair[:, 1]
        if np.unique(keys).size != keys.size:
            seen: set[int] = set()
            for i, key in enumerate(keys.tolist()):
                if key in seen:
                    link = rows[i]
                    raise UserInputError(
                        f"a second link between {link.a} and {link.b}; give one link with the summed bandwidth",
                        source=source, field=f"links[{i}]")
                seen.add(key)
        directions = [pair for link in rows for pair in ((link.a, link.b), (link.b, link.a))]
        index = dict(zip(directions, range(len(directions))))
        names = [f"{u}->{v}" for u, v in directions]
        ranks = [n.id for n in nodes if n.kind in RANK_KINDS]
        if not ranks:
            raise UserInputError("the topology has no gpu (or cpu rank) nodes", source=source, field="nodes")
        directed = np.empty((2 * len(rows), 2), dtype=np.int64)
        directed[0::2], directed[1::2] = ends, ends[:, ::-1]
        topo = cls(
            name=spec.name,
            description=spec.description,
            source=source,
            nodes=by_id,
            links=rows,
            link_names=names,
            link_kinds=[link.kind for link in rows for _ in (0, 1)],
            capacity_Bps=np.repeat(np.array([link.bandwidth_GBps for link in rows], dtype=float) * GB, 2),
            latency_s=np.repeat(np.array([link.latency_us for link in rows], dtype=float) * US, 2),
            ranks=ranks,
            ends=directed,
            _link_index=index,
            nccl_version=spec.nccl_version,
            nccl_p2p_level=spec.nccl_p2p_level,
        )
        label = components(len(by_id), ends[:, 0], ends[:, 1])
        parts = int(label.max()) + 1
        if parts > 1:
            ids = list(by_id)
            groups = sorted((sorted(ids[i] for i in np.flatnonzero(label == c)) for c in range(parts)), key=len)
            raise UserInputError(
                f"the graph is disconnected: {groups[0][0]!r} cannot reach {groups[-1][0]!r}",
                source=source,
                field="links",
            )
        return topo

    def scaled(self, bandwidth_scale: float) -> "Topology":
        """The same machine with every link's bandwidth multiplied (a what-if axis)."""
        if bandwidth_scale == 1.0:
            return self
        return self.replace(capacity_Bps=self.capacity_Bps * bandwidth_scale)

    def replace(self, **changes: Any) -> "Topology":
        """A copy with some fields changed; routes are recomputed lazily (figures may differ)."""
        fields = dict(name=self.name, description=self.description, source=self.source, nodes=self.nodes,
                      links=self.links, link_names=self.link_names, link_kinds=self.link_kinds,
                      capacity_Bps=self.capacity_Bps, latency_s=self.latency_s, ranks=self.ranks, ends=self.ends,
                      _link_index=self._link_index, nccl_version=self.nccl_version,
                      nccl_p2p_level=self.nccl_p2p_level)
        fields.update(changes)
        return Topology(**fields)

    def part(self, keep: Sequence[str], name: str) -> "Topology":
        """The topology made of some of its nodes and the links between them."""
        wanted = set(keep)
        nodes = [spec for node, spec in self.nodes.items() if node in wanted]
        links = [link for link in self.links if link.a in wanted and link.b in wanted]
        return Topology.from_specs(TopologyFile.model_construct(name=name, description=self.description), nodes,
                                   links, self.source)

    @cached_property
    def graph(self) -> Any:
        """A networkx graph of the topology: nodes with their kind, links with their kind,
        bandwidth and latency. networkx is imported here, not at the top: only the bisection
        of `gansim topology show` needs it, and its import costs a fifth of a second."""
        import networkx as nx

        graph = nx.Graph()
        for node in self.nodes.values():
            graph.add_node(node.id, kind=node.kind)
        for link in self.links:
            graph.add_edge(link.a, link.b, kind=link.kind, bandwidth_GBps=link.bandwidth_GBps,
                           latency_us=link.latency_us)
        return graph

    # -- queries
    @property
    def num_links(self) -> int:
        return len(self.link_names)

    def link_index(self, u: str, v: str) -> int:
        return self._link_index[(u, v)]

    def has_link(self, u: str, v: str) -> bool:
        return (u, v) in self._link_index

    def link_kind(self, u: str, v: str) -> str:
        """The kind of the link between two nodes (KeyError when none joins them)."""
        return self.link_kinds[self._link_index[(u, v)]]

    def neighbors(self, node: str) -> list[str]:
        """The nodes linked to `node`, in the order of its links in the file (networkx's order)."""
        return self._adjacency.get(node, [])

    @cached_property
    def _adjacency(self) -> dict[str, list[str]]:
        adjacency: dict[str, list[str]] = {}
        for link in self.links:
            adjacency.setdefault(link.a, []).append(link.b)
            adjacency.setdefault(link.b, []).append(link.a)
        return adjacency

    def links_from(self, node: str) -> np.ndarray:
        """The directed links leaving a node."""
        return np.flatnonzero(self.ends[:, 0] == list(self.nodes).index(node))

    def kind(self, node: str) -> str:
        return self.nodes[node].kind

    def hosts(self) -> list[str]:
        return [n for n, spec in self.nodes.items() if spec.kind == "host"]

    @cached_property
    def _weights(self) -> np.ndarray:
        """Every directed link's routing weight (see _route_weight)."""
        return np.repeat(_route_weight(np.array([link.latency_us for link in self.links], dtype=float)), 2)

    @cached_property
    def host_of(self) -> dict[str, str]:
        """The host (CPU root complex) nearest to each rank: where its input batches come from
        (the search never passes through another rank device)."""
        result = {rank: self.nodes[rank].host for rank in self.ranks if self.nodes[rank].host is not None}
        hosts = self.hosts()
        if hosts:
            ids = list(self.nodes)
            position = self.node_index
            is_rank = np.array([spec.kind in RANK_KINDS for spec in self.nodes.values()])
            copied = self._copied_hosts(is_rank)
            source: dict[int, int] = {}
            if any(rank not in result and rank not in copied for rank in self.ranks):
                out = ~is_rank[self.ends[:, 0]]
                graph = Digraph(len(ids), self.ends[out, 0], self.ends[out, 1], self._weights[out])
                _, _, source = dijkstra(graph, [position[h] for h in hosts])
            for rank in self.ranks:
                i = position[rank]
                if rank not in result:
                    if rank in copied:
                        result[rank] = copied[rank]
                    elif i in source:
                        result[rank] = ids[source[i]]
        return result

    def _copied_hosts(self, is_rank: np.ndarray) -> dict[str, str]:
        """host_of for the ranks of the first rank's machine and its copies (MachineCopies):
        the search inside that machine alone, where the nearest host is nearer, at every node
        on the way, than any route from another machine's host (a `net` link at least, and a
        link out of the host and one into the node where they have no `net` link), moved onto
        each copy."""
        copies = self.machine_copies
        if copies is None:
            return {}
        ids = list(self.nodes)
        base, size = int(copies.start[copies.template]), copies.size
        tail, head = self.ends[:, 0] - base, self.ends[:, 1] - base
        inside = (tail >= 0) & (tail < size) & (head >= 0) & (head < size) & ~is_rank[self.ends[:, 0]]
        hosts = [k for k in range(size) if self.nodes[ids[base + k]].kind == "host"]
        if not hosts:
            return {}
        graph = Digraph(size, tail[inside], head[inside], self._weights[inside])
        dist, pred, source = dijkstra(graph, hosts)
        every_host = np.array([spec.kind == "host" for spec in self.nodes.values()], dtype=bool)
        from_a_host = copies.bound / 2 + float(copies.lightest_out[every_host].min())

        def nearer(k: int) -> bool:  # than from any host through the network, at each node on the way
            return all(dist[v] * (1.0 + 1e-12) < from_a_host + copies.lightest_in[base + v]
                       for v in path_to(pred, source[k], k))

        near = {k: source[k] for k in range(size) if is_rank[base + k] and k in source and nearer(k)}
        out: dict[str, str] = {}
        for m in np.flatnonzero(copies.is_copy).tolist():
            start = int(copies.start[m])
            for k, host in near.items():
                out[ids[start + k]] = ids[start + host]
        return out

    @cached_property
    def machine_of(self) -> dict[str, int]:
        """Ranks that reach each other without a `net` link share a machine (for hierarchical
        algorithms: a node's GPUs); machines numbered in the order of their first node name."""
        return dict(zip(self.nodes, self.machine_index.tolist()))

    @cached_property
    def machine_index(self) -> np.ndarray:
        """`machine_of` of every node, in the order of `nodes`."""
        local = ~self.link_kind_codes.mask("net")
        label = components(len(self.nodes), self.ends[local, 0], self.ends[local, 1])
        count = int(label.max()) + 1
        ids = list(self.nodes)
        order = np.argsort(np.array(ids, dtype=object), kind="stable")  # by name
        first = np.full(count, len(ids))
        np.minimum.at(first, label[order], np.arange(len(ids)))
        number = np.empty(count, dtype=np.int64)
        number[np.argsort(first)] = np.arange(count)
        return number[label]

    def machine_ranks(self, ranks: int) -> np.ndarray:
        """Per rank of the first `ranks`, how many of them sit in its machine (machine_of)."""
        machine = self.machine_index[self.rank_index[:ranks]]
        return np.bincount(machine)[machine]

    def rank_groups(self, ranks: int) -> list[list[int]]:
        """The first `ranks` ranks grouped by the machine they sit in (machine_of), each group
        in rank order, groups in the order of their first rank."""
        machine = self.machine_of
        out: dict[int, list[int]] = {}
        for r, node in enumerate(self.ranks[:ranks]):
            out.setdefault(machine[node], []).append(r)
        return list(out.values())

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
    def _routing(self) -> tuple["_VertexIndex", list[str], Digraph]:
        """A directed routing graph as a sparse matrix, in which each rank device is split
        into a source (its edges out) and a sink (its edges in): no GPU relays a peer's
        copy, so no route passes through one. Vertices are numbered as they first appear
        when the links are taken node by node (file order), each node's links in file order."""
        ids = list(self.nodes)
        is_rank = np.array([spec.kind in RANK_KINDS for spec in self.nodes.values()], dtype=np.int64)
        a, b = self.ends[0::2, 0], self.ends[0::2, 1]
        order = np.lexsort((np.arange(a.size), np.minimum(a, b)))
        u, v = np.minimum(a, b)[order], np.maximum(a, b)[order]
        weight = self._weights[0::2][order]
        # a vertex key is node * 2 + 1 for the sink of a rank device, node * 2 otherwise
        u_out, v_in, v_out, u_in = 2 * u, 2 * v + is_rank[v], 2 * v, 2 * u + is_rank[u]
        sequence = np.stack([u_out, v_in, v_out, u_in], axis=1).ravel()
        keys, first = np.unique(sequence, return_index=True)
        keys = keys[np.argsort(first)]  # in order of first appearance
        vertex = np.full(2 * len(ids), -1, dtype=np.int64)
        vertex[keys] = np.arange(keys.size)
        # per node, its vertex as a source and as a target (see _vertex_table)
        self.__dict__["_vertex_table"] = np.stack([vertex[0::2], vertex[2 * np.arange(len(ids)) + is_rank]], axis=1)
        rows = np.stack([vertex[u_out], vertex[v_out]], axis=1).ravel()
        cols = np.stack([vertex[v_in], vertex[u_in]], axis=1).ravel()
        names = [ids[k >> 1] for k in keys.tolist()]
        return (_VertexIndex(self.__dict__["_vertex_table"], self.node_index), names,
                Digraph(len(names), rows, cols, np.repeat(weight, 2)))

    def routes(self, pairs: list[tuple[str, str]]) -> list[Route]:
        """Routes for many (src, dst) pairs at once: the short ones lighter than every longer
        route without a search (_short_routes), then one search per distinct source, each
        stopping at its last destination; or, on a graph with hubs (network switches linked
        to more than HUB_DEGREE nodes, whose every search would cross all of their links),
        one search from and one to each hub plus one per source that stays off the hubs."""
        missing = sorted({p for p in pairs if p not in self._routes and p[0] != p[1]})
        if missing and self.machine_copies is not None:
            # (those of the first machine itself were searched for the copies' sake)
            missing = [p for p in self._copied_routes(missing) if p not in self._routes]
        if missing:
            self._search_routes(missing)
        return [self.route(src, dst) for src, dst in pairs]

    @cached_property
    def node_index(self) -> dict[str, int]:
        """Each node's index in `nodes`."""
        return {node: i for i, node in enumerate(self.nodes)}

    @cached_property
    def rank_index(self) -> np.ndarray:
        """Each rank device's index in `nodes`, in rank order."""
        return np.array([self.node_index[node] for node in self.ranks], dtype=np.int64)

    @cached_property
    def node_kind_codes(self) -> "KindCodes":
        """Each node's kind, in the order of `nodes` (as `ends` numbers them), as a small number."""
        return KindCodes.of([spec.kind for spec in self.nodes.values()])

    @cached_property
    def link_kind_codes(self) -> "KindCodes":
        """Each directed link's kind as a small number."""
        return KindCodes.of(self.link_kinds)

    @cached_property
    def machine_copies(self) -> "MachineCopies | None":
        """The machines holding ranks that are copies of the first rank's (MachineCopies);
        None when there are none."""
        return MachineCopies.find(self)

    def _copied_routes(self, missing: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Routes inside a copy of the first rank's machine, taken from that machine's own
        route between the same nodes with its links moved onto the copy's, where they are
        sure to be the same (MachineCopies.carries). Returns the pairs left to search."""
        copies = self.machine_copies
        assert copies is not None
        position = self.node_index
        src = np.array([position[s] for s, _ in missing], dtype=np.int64)
        dst = np.array([position[d] for _, d in missing], dtype=np.int64)
        machine = copies.node_machine[src]
        copied = (machine == copies.node_machine[dst]) & copies.is_copy[machine] & (machine != copies.template)
        if not copied.any():
            return missing
        chosen = np.flatnonzero(copied)
        try:
            found, sure, which = copies.template_routes(self, src[chosen], dst[chosen], machine[chosen])
        except UserInputError:  # searched as they are, for the error to name them
            return missing
        left = [missing[i] for i in np.flatnonzero(~copied).tolist()]
        shift = copies.link_shift[machine[chosen]].tolist()
        for i, k, moved in zip(chosen.tolist(), which.tolist(), shift):
            if sure[k]:
                route = found[k]
                self._routes[missing[i]] = Route(route.links + moved, route.latency_s, route.bottleneck_Bps)
            else:
                left.append(missing[i])
        return sorted(left)

    def _copied_through_the_hub(self, by_source: dict[str, list[str]]) -> dict[str, list[str]]:
        """On a network of one hub (a machine's NICs on one network switch), the routes from
        a node of a copy of the template machine (MachineCopies) to nodes the machine reaches
        only through the hub: the template's route from the node at the same place to the hub,
        moved onto the copy, then the hub's own route on (_HubRouting.from_hub). Where the
        copy's links out of the machine are the template's at the same places (`_mirrors`), its
        part of the graph off the hub is the template's, numbered in the same order, so the
        search from the copy's node settles the same vertices in the same order and takes the
        same route to the hub (checked as long as the hub's distance from it says). One search
        per place in the machine instead of one per node: 16,384 at 16,384 GPUs for a
        hierarchical ring's rings across machines. Returns the sources and targets left to
        search."""
        copies = self.machine_copies
        hub = self._hub_routing
        assert copies is not None
        h = hub.hubs[0]
        vertex, position = self._vertex_table, self.node_index
        ids = list(self.nodes)
        from_dist, from_pred = hub.from_hub[0]
        template_start = int(copies.start[copies.template])
        left: dict[str, list[str]] = {}
        for src, dsts in by_source.items():
            s = position[src]
            machine = int(copies.node_machine[s])
            if not copies.is_copy[machine] or machine == copies.template or not self._mirrors(machine):
                left[src] = dsts
                continue
            offset = int(copies.start[machine]) - template_start
            start = int(vertex[s, 0])
            to_the_hub = self._moved_path_to_hub(s - offset, offset, start, ids)
            for dst in dsts:
                target = int(vertex[position[dst], 1])
                if (to_the_hub is None or target == h or target not in from_dist
                        or hub.part[target] == hub.part[start]):
                    left.setdefault(src, []).append(dst)
                    continue
                self._store(src, dst, to_the_hub + path_to(from_pred, h, target)[1:])
        return left

    @cached_property
    def _template_hub_paths(self) -> dict[int, list[int]]:
        """_moved_path_to_hub's routes of template nodes to the hub, per node, as found."""
        return {}

    def _moved_path_to_hub(self, template_node: int, offset: int, start: int, ids: list[str]) -> list[int] | None:
        """The template node's route to the one hub, moved `offset` nodes on (start: the moved
        node's vertex); None where it leaves the template machine before the hub or is not as
        short as the moved node's distance to the hub."""
        hub = self._hub_routing
        h = hub.hubs[0]
        cache = self._template_hub_paths
        path = cache.get(template_node)
        if path is None:
            vertex = self._vertex_table
            walk = _Walk(int(vertex[template_node, 0]), hub, self._routing[2])
            path = cache[template_node] = (walk._path(h, walk.at_hub[0])
                                           if np.isfinite(walk.at_hub[0]) else [])
        if not path:
            return None
        index, names, _ = self._routing
        position = self.node_index
        copies = self.machine_copies
        moved = [start]
        for v in path[1:-1]:
            node = position[names[v]]
            if copies.node_machine[node] != copies.template:
                return None
            moved.append(index[(ids[node + offset], "")])
        moved.append(h)
        weight = sum(w for u, v in zip(moved, moved[1:]) for x, w in self._routing[2].out[u] if x == v)
        return moved if weight == hub.to_hub[0].get(start) else None

    @cached_property
    def _outside_template(self) -> frozenset[int]:
        """The routing vertices of every node outside the first rank's machine (the template
        of machine_copies): what a search inside that machine never enters."""
        copies = self.machine_copies
        assert copies is not None
        base = int(copies.start[copies.template])
        return frozenset(range(self._routing[2].n)) - frozenset(
            self._vertex_table[base:base + copies.size].ravel().tolist())

    def _mirrors(self, machine: int) -> bool:
        """Whether a machine's links to nodes outside it are the template's: from and to the
        nodes at the same places, to the same outside nodes, of the same routing weights."""
        return bool(self._mirroring_machines[machine])

    @cached_property
    def _mirroring_machines(self) -> np.ndarray:
        """_mirrors, per machine."""
        copies = self.machine_copies
        assert copies is not None
        a, b = self.ends[:, 0], self.ends[:, 1]
        out = np.flatnonzero(copies.node_machine[a] != copies.node_machine[b])
        records = []
        for inner, outer in ((a[out], b[out]), (b[out], a[out])):
            owner = copies.node_machine[inner]
            records.append(np.stack([owner, inner - copies.start[owner], outer,
                                     self._weights[out].astype(np.int64), (inner == a[out]).astype(np.int64)],
                                    axis=1))
        table = np.concatenate(records)
        table = table[np.lexsort(table[:, ::-1].T)]
        bounds = np.searchsorted(table[:, 0], np.arange(copies.start.size + 1))
        own = table[bounds[copies.template]:bounds[copies.template + 1], 1:]
        mirrored = np.zeros(copies.start.size, dtype=bool)
        for m in np.flatnonzero(copies.is_copy).tolist():
            block = table[bounds[m]:bounds[m + 1], 1:]
            mirrored[m] = block.shape == own.shape and bool((block == own).all())
        return mirrored

    def _vertex(self, node: str, role: str) -> int:
        return self._routing[0][(node, role)]

    def _routes_inside(self, pairs: list[tuple[str, str]], copies: "MachineCopies") -> None:
        """Routes between nodes of the first rank's machine (the template of `copies`) from
        searches that never leave it, kept where no route that leaves the machine can be as
        short (MachineCopies.carries): every vertex on such a route then has its distance, and
        the predecessor of the search's rule (the nearest, then the highest, of those that
        give it that distance), among the machine's vertices alone, as in the whole graph's
        search; without the searches from and to the network's hubs that routes across
        machines need. The others are left to that search."""
        graph = self._routing[2]
        skip = self._outside_template
        by_source: dict[str, list[str]] = {}
        for src, dst in pairs:
            if (src, dst) not in self._routes and src != dst:
                by_source.setdefault(src, []).append(dst)
        for src, dsts in by_source.items():
            start = self._vertex(src, "out")
            search = Search(graph, [start], skip=skip, high_first=True)
            targets = [self._vertex(dst, "in") for dst in dsts]
            search.settle(targets)
            for dst, target in zip(dsts, targets):
                if target in search.settled:
                    self._store(src, dst, path_to(search.pred, start, target))
                    if not copies.carries(self, self._routes[(src, dst)].links):
                        del self._routes[(src, dst)]

    def _store(self, src: str, dst: str, vertices: list[int]) -> None:
        names = self._routing[1]
        nodes = [names[v] for v in vertices]
        links = np.array([self._link_index[(u, v)] for u, v in zip(nodes, nodes[1:])], dtype=np.int64)
        self._routes[(src, dst)] = Route(links, float(self.latency_s[links].sum()), float(self.capacity_Bps[links].min()))

    def _no_route(self, src: str, dst: str) -> UserInputError:
        return UserInputError(f"no route from {src} to {dst} that does not pass through another GPU",
                              source=self.source, field="links")

    @cached_property
    def _hub_routing(self) -> "_HubRouting":
        return _HubRouting.build(self._routing[2], np.flatnonzero(self._routing[2].degree() > HUB_DEGREE).tolist())

    @cached_property
    def _edges(self) -> "_Edges":
        """The routing graph's edges as arrays, out of each vertex and into each (see _Edges)."""
        _, node_of, graph = self._routing
        rows, cols, weights = graph.edges
        position = self.node_index
        ends = np.array([position[node_of[v]] for v in range(graph.n)], dtype=np.int64)
        # the directed link of each edge, from its two nodes
        link_key = self.ends[:, 0] * len(self.nodes) + self.ends[:, 1]
        by_key = np.argsort(link_key)
        links = by_key[np.searchsorted(link_key[by_key], ends[rows] * len(self.nodes) + ends[cols])]
        return _Edges.build(graph.n, rows, cols, weights, links)

    def _short_routes(self, starts: np.ndarray, targets: np.ndarray) -> list["Route | None"]:
        """For each (start, target) vertex pair, its route where it has at most
        _SHORT_ROUTE_LINKS links and every longer route is heavier (_Edges.unique_shortest):
        the only shortest one, or of several equally short the one the search takes. None
        for the others. Most routes inside a machine, from a NIC to another through the
        network switch, and from a GPU to a GPU of another machine on a leaf or through a
        spine, are such; this finds them without a search, all at once."""
        count, links = self._short_route_links(starts, targets)
        found: list[Route | None] = [None] * starts.size
        latency = self.links_latency(count, links)
        for length in range(1, _SHORT_ROUTE_LINKS + 1):
            these = np.flatnonzero(count == length)
            chosen = links[these, :length]
            bottleneck = self.capacity_Bps[chosen].min(axis=1)
            for k, route_links, lat, cap in zip(these.tolist(), chosen, latency[these].tolist(), bottleneck.tolist()):
                found[k] = Route(route_links, lat, cap)
        return found

    def links_latency(self, count: np.ndarray, links: np.ndarray) -> np.ndarray:
        """Per route of count[i] links (links[i], as short_route_links gives them), its
        latency summed link by link, as a route's own sum (Route.latency_s) adds them."""
        latency = np.where(count > 0, self.latency_s[links[:, 0]], 0.0)
        for column in range(1, links.shape[1]):
            more = count > column
            latency = np.where(more, latency + self.latency_s[np.where(more, links[:, column], 0)], latency)
        return latency

    def short_route_links(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The links of route(src[i], dst[i]) (node indices) where it is found without a
        search (_short_routes), all at once: (per pair its count of links, 0 where it must be
        searched; the links, _SHORT_ROUTE_LINKS columns, -1 past the count)."""
        vertex = self._vertex_table
        return self._short_route_links(vertex[np.asarray(src, dtype=np.int64), 0],
                                       vertex[np.asarray(dst, dtype=np.int64), 1])

    @property
    def _vertex_table(self) -> np.ndarray:
        """Per node index, its routing vertex as a source and as a target (made with _routing)."""
        if "_vertex_table" not in self.__dict__:
            self._routing  # noqa: B018 (builds it)
        return self.__dict__["_vertex_table"]

    def _short_route_links(self, starts: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """_short_routes' routes as (count of links, links) arrays (see short_route_links)."""
        return self._edges.unique_shortest(starts, targets)

    def _search_routes(self, missing: list[tuple[str, str]]) -> None:
        """The routes Dijkstra's search from each source finds when it takes vertices of
        equal distance highest first, as scipy's did (gansim's routes before it searched
        around hubs), so where several routes are equally short the same one is taken.
        Found without crossing the hubs (network switches linked to more than HUB_DEGREE
        nodes, whose every search would cross all of their links): one search per source
        that stays off them, and two per hub that stay off the others (_HubRouting). See _Walk."""
        graph = self._routing[2]
        by_source: dict[str, list[str]] = {}
        found = self._short_routes(np.array([self._vertex(src, "out") for src, _ in missing], dtype=np.int64),
                                   np.array([self._vertex(dst, "in") for _, dst in missing], dtype=np.int64))
        for (src, dst), route in zip(missing, found):
            if route is None:
                by_source.setdefault(src, []).append(dst)
            else:
                self._routes[(src, dst)] = route
        if not by_source:
            return
        hub = self._hub_routing  # the searches from and to every hub: only where a search is needed
        if len(hub.hubs) == 1 and self.machine_copies is not None:
            by_source = self._copied_through_the_hub(by_source)
        for src, dsts in by_source.items():
            walk = _Walk(self._vertex(src, "out"), hub, graph)
            for dst in dsts:
                path = walk.route(self._vertex(dst, "in"))
                if path is None:
                    raise self._no_route(src, dst)
                self._store(src, dst, path)


class _VertexIndex:
    """A node's routing vertex by (node id, role): a rank device's source ("out") or sink
    ("in"), any other node's one vertex (whatever the role); looked up in the table of every
    node's two (Topology._vertex_table) rather than a dictionary of 100,000 entries."""

    def __init__(self, table: np.ndarray, position: dict[str, int]):
        self._table, self._position = table, position

    def __getitem__(self, key: tuple[str, str]) -> int:
        node, role = key
        return int(self._table[self._position[node], 1 if role == "in" else 0])


@dataclass(frozen=True)
class MachineCopies:
    """Machines (Topology.machine_of) holding ranks that are copies of the first rank's
    machine, the template: as many nodes, at consecutive positions, each the same as the
    template's node at the same place (its id aside, its host at the same place), the same
    links among them (ends at the same places, kind, bandwidth, latency) in the same order at
    a fixed distance in the link list, and routing vertices in the same order. A route
    between two nodes of a copy is then the template's between the nodes at the same places,
    moved by that distance, wherever no route that leaves the machine can be as short
    (`carries`): one that leaves crosses at least two `net` links (a machine is what its
    other links join), and a link out of its source before them unless the source has a
    `net` link itself, and a link into the node it comes back to unless that node has one;
    the template's route, to every node on it, is shorter than that; so every vertex on a
    shortest route is reached only from inside the machine, in the same order of distances
    and vertices, and the search takes the same route in both."""

    template: int  # the machine_of number of the first rank's machine
    size: int  # nodes in each machine
    node_machine: np.ndarray  # per node index, its machine_of number
    start: np.ndarray  # per machine, the index of its first node
    is_copy: np.ndarray  # per machine: the template or a copy of it
    link_shift: np.ndarray  # per machine, what moves a directed link of the template onto its own
    inside: np.ndarray  # per directed link: whether it joins two nodes of the template
    bound: float  # twice the lightest `net` link's routing weight
    # per node index: the lightest routing weight of a link out of it (into it), 0 for a node
    # with a `net` link: what a route leaving the machine adds from its source (to a node it
    # comes back to) before (after) its two `net` links
    lightest_out: np.ndarray
    lightest_in: np.ndarray

    def carries(self, topo: "Topology", links: np.ndarray) -> bool:
        """Whether a route of the template is the same in every copy (see the class): to each
        node on it, shorter than any route there from its source that leaves the machine."""
        if not bool(self.inside[links].all()):
            return False
        if links.size == 0:
            return True
        to_each = np.cumsum(topo._weights[links]) * (1.0 + 1e-12)
        leaving = self.bound + self.lightest_out[topo.ends[links[0], 0]] + self.lightest_in[topo.ends[links, 1]]
        return bool((to_each < leaving).all())

    def template_routes(self, topo: "Topology", a: np.ndarray, b: np.ndarray,
                        machine: np.ndarray) -> tuple[list[Route], np.ndarray, np.ndarray]:
        """For nodes a[i] and b[i] (indices) of the copy machine[i]: the template's routes
        between the nodes at the same places (each distinct pair once), whether each is sure to
        be every copy's (`carries`), and which of them each pair's is. Its links are moved onto
        copy m's by link_shift[m]."""
        offset = self.start[machine] - self.start[self.template]
        keys, which = unique_pairs(a - offset, b - offset)
        ids = list(topo.nodes)
        pairs = [(ids[u], ids[v]) for u, v in keys.tolist()]
        topo._routes_inside(pairs, self)
        routes = topo.routes(pairs)
        return routes, np.array([self.carries(topo, r.links) for r in routes], dtype=bool), which

    @classmethod
    def find(cls, topo: "Topology") -> "MachineCopies | None":
        ids = list(topo.nodes)
        n = len(ids)
        position = topo.node_index
        machine = topo.machine_index
        count = np.bincount(machine)
        rank_index = topo.rank_index
        template = int(machine[rank_index[0]])
        holders = np.unique(machine[rank_index])
        net = topo.link_kind_codes.mask("net")
        if holders.size < 2 or not net.any():
            return None
        size = int(count[template])
        first = np.full(count.size, n, dtype=np.int64)
        last = np.full(count.size, -1, dtype=np.int64)
        np.minimum.at(first, machine, np.arange(n))
        np.maximum.at(last, machine, np.arange(n))
        good = holders[(count[holders] == size) & (last[holders] - first[holders] + 1 == size)]
        if template not in good.tolist():
            return None
        # nodes: the same specification (id aside; a host named at the same place)
        specs = list(topo.nodes.values())
        names = list(specs[0].__dict__)
        at_id, at_host = names.index("id"), names.index("host")
        # every field but the id, the host as its place in the machine
        values = [list(spec.__dict__.values()) for spec in specs]
        hosted = [i for i, v in enumerate(values) if v[at_host] is not None]
        base = int(first[template])
        for i in hosted:
            values[i][at_host] = position.get(values[i][at_host], -1) - int(first[machine[i]])
        for v in values:
            v[at_id] = None
        pattern = values[base:base + size]
        good = np.array([m for m in good.tolist() if values[int(first[m]):int(first[m]) + size] == pattern],
                        dtype=np.int64)
        # links among a machine's nodes: the same, in the same order, at a fixed distance
        a, b = topo.ends[0::2, 0], topo.ends[0::2, 1]
        rows = np.flatnonzero(machine[a] == machine[b])
        owner = machine[a[rows]]
        order = np.argsort(owner, kind="stable")
        rows, owner = rows[order], owner[order]
        bounds = np.searchsorted(owner, np.arange(count.size + 1))
        length = bounds[1:] - bounds[:-1]
        good = good[length[good] == length[template]]
        own = rows[bounds[template]:bounds[template + 1]]
        if own.size == 0:  # no links inside a machine: no routes to copy
            return None
        table = rows[bounds[good][:, None] + np.arange(own.size)]  # per good machine, its links' rows
        kinds = topo.link_kind_codes.codes[0::2]
        capacity, latency = topo.capacity_Bps[0::2], topo.latency_s[0::2]
        starts = first[good][:, None]
        same = ((table - table[:, :1] == own - own[0]).all(axis=1)
                & (a[table] - starts == a[own] - base).all(axis=1)
                & (b[table] - starts == b[own] - base).all(axis=1)
                & (kinds[table] == kinds[own]).all(axis=1)
                & (capacity[table] == capacity[own]).all(axis=1)
                & (latency[table] == latency[own]).all(axis=1))
        good, table = good[same], table[same]
        # routing vertices in the same order
        vertex = topo._vertex_table
        places = vertex[first[good][:, None] + np.arange(size)].reshape(good.size, 2 * size)
        ranked = np.argsort(places, axis=1, kind="stable")
        in_order = (ranked == np.argsort(vertex[base:base + size].ravel(), kind="stable")).all(axis=1)
        good, table = good[in_order], table[in_order]
        if good.size < 2:
            return None
        is_copy = np.zeros(count.size, dtype=bool)
        is_copy[good] = True
        shift = np.zeros(count.size, dtype=np.int64)
        shift[good] = 2 * (table[:, 0] - own[0])
        inside = np.zeros(len(topo.link_kinds), dtype=bool)
        inside[2 * own], inside[2 * own + 1] = True, True
        weights = topo._weights
        lightest_out, lightest_in = np.full(n, np.inf), np.full(n, np.inf)
        np.minimum.at(lightest_out, topo.ends[:, 0], weights)
        np.minimum.at(lightest_in, topo.ends[:, 1], weights)
        on_net = np.zeros(n, dtype=bool)
        on_net[topo.ends[net].ravel()] = True
        lightest_out[on_net], lightest_in[on_net] = 0.0, 0.0
        return cls(template, size, machine, first, is_copy, shift, inside, 2.0 * float(weights[net].min()),
                   lightest_out, lightest_in)


@dataclass(frozen=True)
class _HubRouting:
    """The hubs of a routing graph (none on a graph without hubs) and the searches from and
    to each that never enter another: the search from a hub reaches the part of the network
    it leads to (a spine's pod, up to the next spines), so the searches of all hubs together
    settle each vertex about once, however many hubs there are. A shortest route that
    crosses hubs is a route off the hubs to its first hub, routes between hubs, and a route
    off the hubs from its last hub (see _Walk)."""

    hubs: list[int]  # routing vertices
    index: dict[int, int]  # per hub vertex, its place in `hubs`
    skip: frozenset[int]
    into: Sequence[list[tuple[int, float]]]  # per vertex: (vertex it comes from, weight)
    part: np.ndarray  # per vertex: its connected part of the graph without the hubs
    from_hub: list[tuple[dict[int, float], dict[int, int]]]  # per hub: distances and predecessors, off the others
    to_hub: list[dict[int, float]]  # per hub: each vertex's distance to it, off the others
    between: np.ndarray  # [i, j]: from hub i to hub j off the others (inf: no such route)
    across: np.ndarray  # [i, j]: from hub i to hub j through any hubs (0 from a hub to itself)
    last_before: list[dict[int, int]]  # [i][j]: the vertex before hub j on that route (the rule's)

    @classmethod
    def build(cls, graph: Digraph, hubs: list[int]) -> "_HubRouting":
        skip = frozenset(hubs)
        backwards = graph.reversed()
        from_hub = [dijkstra(graph, [h], skip=skip - {h}, high_first=True)[:2] for h in hubs]
        to_hub = [dijkstra(backwards, [h], skip=skip - {h})[0] for h in hubs]
        between = np.full((len(hubs), len(hubs)), np.inf)
        last_before: list[dict[int, int]] = [{} for _ in hubs]
        for j, h in enumerate(hubs):
            for i, (dist, _) in enumerate(from_hub):
                if i == j:
                    continue
                best, best_u = _last_before((u, dist[u], weight) for u, weight in backwards.out[h] if u in dist)
                if best_u >= 0:
                    between[i, j] = best
                    last_before[i][j] = best_u
        # Floyd-Warshall over the few hubs: route weights are whole numbers (_route_weight), so
        # sums in any order are exact (below 2**53, some 9 ms of latency on a route), as the
        # searches' own sums are
        across = between.copy()
        np.fill_diagonal(across, 0.0)
        for k in range(len(hubs)):
            np.minimum(across, across[:, k:k + 1] + across[k:k + 1, :], out=across)
        rows, cols, _ = graph.edges
        off = ~(np.isin(rows, hubs) | np.isin(cols, hubs))
        return cls(hubs, {h: i for i, h in enumerate(hubs)}, skip, backwards.out, components(graph.n, rows[off], cols[off]),
                   from_hub, to_hub, between, across, last_before)


@dataclass(frozen=True)
class _Edges:
    """A routing graph's edges as arrays: sorted by (from, to), with their weights and
    directed links; where each vertex's edges out start, and (through `in_order`, the
    edges sorted by (to, from)) its edges in; each vertex's lightest edge out and in."""

    n: int
    rows: np.ndarray
    cols: np.ndarray
    weights: np.ndarray
    links: np.ndarray
    out_start: np.ndarray  # n + 1
    in_order: np.ndarray
    in_start: np.ndarray  # n + 1
    min_out: np.ndarray
    min_in: np.ndarray
    shortest: float

    @classmethod
    def build(cls, n: int, rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, links: np.ndarray) -> "_Edges":
        in_order = np.lexsort((rows, cols))
        min_out, min_in = np.full(n, np.inf), np.full(n, np.inf)
        np.minimum.at(min_out, rows, weights)
        np.minimum.at(min_in, cols, weights)
        return cls(n, rows, cols, weights, links, np.searchsorted(rows, np.arange(n + 1)), in_order,
                   np.searchsorted(cols[in_order], np.arange(n + 1)), min_out, min_in,
                   float(weights.min()) if weights.size else np.inf)

    @property
    def out_degree(self) -> np.ndarray:
        return np.diff(self.out_start)

    @property
    def in_degree(self) -> np.ndarray:
        return np.diff(self.in_start)

    def find(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The edge from each row to each col (-1: none)."""
        keys = self.rows * self.n + self.cols  # sorted, as the edges are
        wanted = rows * self.n + cols
        if keys.size == 0:
            return np.full(wanted.size, -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
        return np.where(keys[at] == wanted, at, -1)

    def unique_shortest(self, s: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each (s, t) vertex pair, the route of at most _SHORT_ROUTE_LINKS links that is
        the only shortest one, so that every search finds it whatever its order of ties, or,
        where several are equally short and every longer route is heavier, the one the
        search's order of ties takes (_search_ties; the weights must be whole numbers): every
        walk of up to four links is a walk of at most two links out of s met by one of at most
        two links into t (each length split one way: 1 = 1 + 0, 2 = 1 + 1, 3 = 2 + 1,
        4 = 2 + 2), and every longer route weighs at least the lightest such walk of two links
        out of s to a vertex with edges out, the lightest edge of all, and the lightest walk of
        two links into t from a vertex with edges in. A route from a GPU to a GPU of another
        machine, out through its NIC and in through the other's (four links), is such, on a
        leaf of a rail fabric or a network switch. Pairs that no route of four links settles
        so are looked at with walks of three links out of s (5 = 3 + 2, 6 = 3 + 3) and the
        same kind of bound (three links out, one, three in): a route up to a spine and down to
        a leaf group of its own (six links). Where a walk would go on from a hub (its edges
        are too many), no longer walks are looked at: from a hub one link on, only routes of
        one or two links, every longer one weighing at least the lightest edge out of s, the
        lightest of all and the lightest into t (a NIC to a NIC through the network switch);
        from one two links on, none of five or six. Pairs whose ends are hubs are left to the
        search. Returns (per pair its count of links, 0: none found; the links, -1 past the
        count)."""
        count_of = np.zeros(s.size, dtype=np.int64)
        links_of = np.full((s.size, _SHORT_ROUTE_LINKS), -1, dtype=np.int64)
        hub = (self.out_degree > HUB_DEGREE) | (self.in_degree > HUB_DEGREE)
        ok = (self.out_degree[s] <= HUB_DEGREE) & (self.in_degree[t] <= HUB_DEGREE) & (s != t)
        pairs = np.flatnonzero(ok)
        s, t = s[pairs], t[pairs]
        n = self.n
        w = self.weights
        # walks of one and two edges out of s, as (pair, end, weight, edges)
        out1, of1 = self.expand(self.out_start, s)
        # walks of one and two edges into t, as (pair, start, weight, edges)
        in1, into1 = self.expand(self.in_start, t)
        in1 = self.in_order[in1]
        beyond = np.zeros(pairs.size, dtype=bool)  # a walk would go on from a hub
        beyond[of1[hub[self.cols[out1]]]] = True
        beyond[into1[hub[self.rows[in1]]]] = True
        best = np.full(pairs.size, np.inf)
        count = np.zeros(pairs.size, dtype=np.int64)
        chosen = np.full((pairs.size, _SHORT_ROUTE_LINKS), -1, dtype=np.int64)
        length_of = np.zeros(pairs.size, dtype=np.int64)

        def meet(length: int, forward: tuple, backward: tuple) -> None:
            """Walks out of s (pair, end, weight, edges) met by walks into t (pair, start,
            weight, edges): routes of `length` links, into the best, their count, and the one
            where there is one."""
            nonlocal best, count
            f_pair, f_end, f_weight, f_edges = forward
            b_pair, b_start, b_weight, b_edges = backward
            f_key, f_best, f_count, f_rep = _best_by_key(f_pair * n + f_end, f_weight)
            b_key, b_best, b_count, b_rep = _best_by_key(b_pair * n + b_start, b_weight)
            _, i, j = np.intersect1d(f_key, b_key, assume_unique=True, return_indices=True)
            pair = f_key[i] // n
            total = f_best[i] + b_best[j]
            ways = f_count[i] * b_count[j]
            shortest = np.full(pairs.size, np.inf)
            np.minimum.at(shortest, pair, total)
            at_best = total == shortest[pair]
            found = np.bincount(pair[at_best], weights=ways[at_best], minlength=pairs.size).astype(np.int64)
            better = shortest < best
            tie = (shortest == best) & np.isfinite(best)
            count = np.where(better, found, np.where(tie, count + found, count))
            best = np.minimum(best, shortest)
            single = at_best & (ways == 1)
            rows = pair[single]
            take = better[rows]
            rows, fi, bj = rows[take], f_rep[i[single][take]], b_rep[j[single][take]]
            chosen[rows] = -1
            for column, edges in enumerate(f_edges):
                chosen[rows, column] = edges[fi]
            for column, edges in enumerate(b_edges):
                chosen[rows, len(f_edges) + column] = edges[bj]
            length_of[rows] = length

        one_out = (of1, self.cols[out1], w[out1], [out1])
        one_in = (into1, self.rows[in1], w[in1], [in1])
        meet(1, one_out, (np.arange(pairs.size), t, np.zeros(pairs.size), []))
        meet(2, one_out, one_in)
        # any route of three links or more weighs at least this: where a route of one or two
        # links is below it (most routes inside a machine, a NIC to a NIC through a switch),
        # or walks would go on from a hub, no longer walks are looked at
        longer = self.min_out[s] + self.shortest + self.min_in[t]
        settled = beyond | ((count == 1) & (best * (1.0 + 1e-12) < longer))
        on = ~settled[of1]
        out2, at = self.expand(self.out_start, self.cols[out1[on]])
        first2, of2 = out1[on][at], of1[on][at]
        on = ~settled[into1]
        in2, at = self.expand(self.in_start, self.rows[in1[on]])
        in2 = self.in_order[in2]
        last2, into2 = in1[on][at], into1[on][at]
        two_out = (of2, self.cols[out2], w[first2] + w[out2], [first2, out2])
        two_in = (into2, self.rows[in2], w[in2] + w[last2], [in2, last2])
        meet(3, two_out, one_in)
        meet(4, two_out, two_in)
        # a longer route still: two edges out of s to a vertex it goes on from, one edge or
        # more, then two edges into t from a vertex it came to
        longer = np.where(settled, longer, self._beyond_walks(two_out, two_in, pairs.size))
        # routes of five and six links (a GPU out through its host to another NIC, and on
        # through a leaf to a GPU of another machine), three edges out of s met by two or
        # three into t, for the pairs no shorter route settled whose walks of two edges end
        # off the hubs; every longer route weighs at least three edges out, one and three in
        deep = ~(settled | ((count == 1) & (best * (1.0 + 1e-12) < longer)))
        deep[of2[hub[two_out[1]]]] = False
        deep[into2[hub[two_in[1]]]] = False
        # (walks of three links a pair are at most its walks of two times 64: many pairs on a
        # graph of busy switches would be too many rows, and are left to the search)
        rows = int(self.out_degree[two_out[1][deep[of2]]].sum() + self.in_degree[two_in[1][deep[into2]]].sum())
        three_out = three_in = None
        if deep.any() and rows <= _THREE_LINK_WALKS_MAX_ROWS:
            three_out = self._walks_on(two_out, deep, self.out_start, self.cols, forward=True)
            three_in = self._walks_on(two_in, deep, self.in_start, self.rows, forward=False)
            meet(5, three_out, two_in)
            meet(6, three_out, three_in)
            longer = np.where(deep, self._beyond_walks(three_out, three_in, pairs.size), longer)
        unique = (count == 1) & (best * (1.0 + 1e-12) < longer) & (length_of > 0)  # (a margin against rounding)
        found_pairs = pairs[unique]
        count_of[found_pairs] = length_of[unique]
        links_of[found_pairs] = np.where(chosen[unique] >= 0, self.links[np.maximum(chosen[unique], 0)], -1)
        # routes equally short: every one of them was met (each lighter than any longer
        # route), and whole weights add up exactly, so the search's order of ties is a rule
        # of the walks met alone (_search_ties)
        tied = np.flatnonzero((count > 1) & (best < longer) & (best < 2.0**53))
        if tied.size and self.whole_weights:
            splits = [(one_out, (np.arange(pairs.size), t, np.zeros(pairs.size), [])), (one_out, one_in),
                      (two_out, one_in), (two_out, two_in)]
            if three_out is not None:
                splits += [(three_out, two_in), (three_out, three_in)]
            tied, length, edges = self._search_ties(tied, s, best, splits)
            count_of[pairs[tied]] = length
            links_of[pairs[tied]] = np.where(edges >= 0, self.links[np.maximum(edges, 0)], -1)
        return count_of, links_of

    @cached_property
    def whole_weights(self) -> bool:
        """Whether every weight is a whole number of at least 1 (paths.whole_weights)."""
        return whole_weights(self.weights)

    def _search_ties(self, tied: np.ndarray, s: np.ndarray, best: np.ndarray,
                     splits: list[tuple[tuple, tuple]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The route the search takes for each of the `tied` pairs (indices into s and best),
        whose every shortest route is among the walks met (`splits`: the walks out of s and
        into t met for each length, as unique_shortest meets them). The search gives each
        vertex the predecessor one edge short of it at its distance that is nearest to the
        source, then the highest numbered (paths._settle_all); on a shortest route a
        vertex's distance is the weight of the route up to it, and every shortest route to
        a vertex of one goes on to t as that one does, so it was met too. Of a pair's
        routes, the search's is thus the least, compared from t back: the distance of the
        vertex before, the highest vertex, and so on. Returns the tied pairs, and for each
        its count of links and their edges (-1 past them)."""
        wanted = np.zeros(best.size, dtype=bool)
        wanted[tied] = True
        n, width = self.n, _SHORT_ROUTE_LINKS
        pair_parts, edge_parts = [], []
        for forward, backward in splits:
            f_pair, f_end, f_weight, f_edges = forward
            b_pair, b_start, b_weight, b_edges = backward
            f = np.flatnonzero(wanted[f_pair] & (f_weight <= best[f_pair]))
            b = np.flatnonzero(wanted[b_pair] & (b_weight <= best[b_pair]))
            if not f.size or not b.size:
                continue
            b_key = b_pair[b] * n + b_start[b]
            order = np.argsort(b_key, kind="stable")
            b, b_key = b[order], b_key[order]
            f_key = f_pair[f] * n + f_end[f]
            lo, hi = np.searchsorted(b_key, f_key, "left"), np.searchsorted(b_key, f_key, "right")
            at, which = ragged(lo, hi - lo)
            fi, bj = f[which], b[at]
            on_best = f_weight[fi] + b_weight[bj] == best[f_pair[fi]]
            fi, bj = fi[on_best], bj[on_best]
            edges = np.full((fi.size, width), -1, dtype=np.int64)
            for column, e in enumerate(f_edges):
                edges[:, column] = e[fi]
            for column, e in enumerate(b_edges):
                edges[:, len(f_edges) + column] = e[bj]
            pair_parts.append(f_pair[fi])
            edge_parts.append(edges)
        if not pair_parts:  # (none met: left to the search)
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, width), np.int64)
        pair = np.concatenate(pair_parts)
        edges = np.concatenate(edge_parts)
        length = (edges >= 0).sum(axis=1)
        # per route, from t back: the vertex before each vertex, and its distance
        used = np.maximum(edges, 0)
        distance = np.where(edges >= 0, self.weights[used], 0.0).cumsum(axis=1)
        vertex = self.cols[used]
        keys = [pair]
        rows = np.arange(pair.size)
        for back in range(1, width + 1):
            column = length - 1 - back  # the edge into that vertex (-1: the vertex is s)
            on = column >= -1
            at = np.maximum(column, 0)
            before = np.where(column >= 0, vertex[rows, at], s[pair])
            dist = np.where(column >= 0, distance[rows, at], 0.0)
            keys += [np.where(on, dist, -1.0), np.where(on, -before, 0)]
        order = np.lexsort(keys[::-1])
        first = order[np.r_[True, pair[order][1:] != pair[order][:-1]]]
        return pair[first], length[first], edges[first]

    def _walks_on(self, walks: tuple, wanted: np.ndarray, start: np.ndarray, ends: np.ndarray,
                  forward: bool) -> tuple:
        """Walks (pair, end, weight, edges) of one edge more, for the pairs `wanted`: out of
        each walk's end (`forward`) or into its start, the new edge last or first."""
        pair, end, weight, edges = walks
        on = wanted[pair]
        more, at = self.expand(start, end[on])
        if not forward:
            more = self.in_order[more]
        kept = [e[on][at] for e in edges]
        return (pair[on][at], ends[more], weight[on][at] + self.weights[more],
                kept + [more] if forward else [more] + kept)

    def _beyond_walks(self, out_walks: tuple, in_walks: tuple, pairs: int) -> np.ndarray:
        """Per pair, what any route longer than the two kinds of walks met weighs at least:
        the lightest walk out of s to a vertex it goes on from, the lightest edge, and the
        lightest walk into t from a vertex it came to."""
        lightest_out, lightest_in = np.full(pairs, np.inf), np.full(pairs, np.inf)
        going = self.out_degree[out_walks[1]] > 0
        np.minimum.at(lightest_out, out_walks[0][going], out_walks[2][going])
        coming = self.in_degree[in_walks[1]] > 0
        np.minimum.at(lightest_in, in_walks[0][coming], in_walks[2][coming])
        return lightest_out + self.shortest + lightest_in

    @staticmethod
    def expand(start: np.ndarray, vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every position from start[v] to start[v + 1] for each of `vertices`, and which of
        them it is for."""
        return ragged(start[vertices], start[vertices + 1] - start[vertices])


class _Walk:
    """Routes from one source, as its search over the whole graph would give them.

    That search gives each vertex v the predecessor that reaches v at v's distance and is
    itself nearest to the source, then the highest: a rule of the distances alone. The
    distance of a vertex is its distance off the hubs, or the source's distance to a hub
    (`at_hub`: to a first hub off the hubs, then from hub to hub) plus the distance from it
    off the others, whichever is shortest. Where one of these alone gives v's distance,
    every shortest route to v ends that way, and the rule's predecessors are those of the
    search that way (the source's off the hubs, or that hub's off the others); otherwise
    (routes of equal length several ways) the rule itself picks v's predecessor. The
    source's search off the hubs settles a vertex only when its distance is asked and may be
    as short as through a hub; a vertex in another part of the graph without its hubs is
    never reached off them."""

    def __init__(self, start: int, hub: _HubRouting, graph: Digraph):
        self.start, self.hub, self.graph = start, hub, graph
        self.local = Search(graph, [start], skip=hub.skip, high_first=True)
        # (a search from a hub leaves its part at once: it is searched as it is)
        self._part = -1 if start in hub.skip else int(hub.part[start])
        # the source's distance to each hub: to a first hub off the hubs, then across hubs
        self._first = np.array([to.get(start, np.inf) for to in hub.to_hub])
        self.at_hub = (self._first[:, None] + hub.across).min(axis=0, initial=np.inf).tolist()
        self._paths: dict[int, list[int]] = {start: [start]}

    def _hub_ways(self, j: int) -> list[int]:
        """The ways that give the source's distance to hub j: -1 off the hubs, i through hub i."""
        dist = self.at_hub[j]
        through = np.flatnonzero(np.asarray(self.at_hub) + self.hub.between[:, j] == dist).tolist()
        return ([-1] if self._first[j] == dist else []) + [i for i in through if i != j]

    def route(self, target: int) -> list[int] | None:
        """The vertices of the route from the source to `target` (None: no route)."""
        d = self.distance(target)
        return self._path(target, d) if np.isfinite(d) else None

    def distance(self, v: int) -> float:
        return min(self._ways(v))

    def _ways(self, v: int) -> list[float]:
        """v's distance each way: off the hubs, then through each hub (or, for a hub, the
        source's distance to it)."""
        hub = self.hub
        if v in hub.index:
            return [self.at_hub[hub.index[v]]]
        through = [at + from_dist.get(v, np.inf) for at, (from_dist, _) in zip(self.at_hub, hub.from_hub)]
        best = min(through, default=np.inf)
        local = np.inf if self._part >= 0 and hub.part[v] != self._part else self.local.distance(v, best)
        return [local, *through]

    def _path(self, v: int, dv: float) -> list[int]:
        """The route to v (at distance dv): walked back by the rule itself while several ways
        give a vertex's distance, then the one way that does."""
        behind: list[int] = []  # the vertices walked back over, last first
        found = self._one_way(v, dv)
        while found is None:
            behind.append(v)
            v = self._pred(v, dv, self.hub.into[v])
            dv = self.distance(v)
            found = self._one_way(v, dv)
        return found + behind[::-1]

    def _one_way(self, v: int, dv: float) -> list[int] | None:
        """The route to v where one way alone gives its distance (None where several do)."""
        found = self._paths.get(v)
        if found is not None:
            return found
        hub = self.hub
        j = hub.index.get(v)
        if j is None:
            winners = [k for k, d in enumerate(self._ways(v)) if d == dv]
            if winners == [0]:
                return path_to(self.local.pred, self.start, v)
            if len(winners) == 1:
                i = winners[0] - 1
                return self._path(hub.hubs[i], self.at_hub[i]) + path_to(hub.from_hub[i][1], hub.hubs[i], v)[1:]
            return None
        ways = self._hub_ways(j)  # a hub: reached off the hubs, or from another
        if len(ways) != 1:
            return None
        if ways[0] < 0:
            # the last vertex before it is reached off the hubs, nearer than it, and so is
            # every vertex of every shortest route to that one
            self.local.settle(within=dv)
            # (out of the few vertices settled, not into the hub: a switch of 100,000 ports)
            edges = [(u, weight) for u in self.local.settled for w, weight in self.graph.out[u] if w == v]
            found = path_to(self.local.pred, self.start, self._pred(v, dv, edges)) + [v]
        else:
            i = ways[0]
            found = (self._path(hub.hubs[i], self.at_hub[i])
                     + path_to(hub.from_hub[i][1], hub.hubs[i], hub.last_before[i][j])[1:] + [v])
        self._paths[v] = found
        return found

    def _pred(self, v: int, dv: float, edges: list[tuple[int, float]]) -> int:
        """Of the vertices with an edge to v that reach v at its distance dv, the rule's."""
        through, before = _last_before((u, self.distance(u), weight) for u, weight in edges)
        return before if through == dv else -1


def _last_before(reaching: Iterable[tuple[int, float, float]]) -> tuple[float, int]:
    """Of the vertices (each with its distance and its edge's weight) with an edge to one
    vertex, the distance through the best and which is best: the shortest way, then the
    nearest vertex, then the highest, as a search that settles vertices of equal distance
    highest first keeps them (-1: none)."""
    best, best_d, best_u = np.inf, np.inf, -1
    for u, du, weight in reaching:
        if du + weight < best or (du + weight == best and (du < best_d or (du == best_d and u > best_u))):
            best, best_d, best_u = du + weight, du, u
    return best, best_u


@dataclass(frozen=True)
class KindCodes:
    """Kinds (of nodes or links) as small numbers: the distinct kinds, sorted, and each
    element's index among them, a byte each where an array of the strings takes 28 to 44
    (500,000 directed links at 100,000 GPUs)."""

    names: list[str]
    codes: np.ndarray

    @classmethod
    def of(cls, kinds: list[str]) -> "KindCodes":
        names, codes = np.unique(np.array(kinds), return_inverse=True)
        return cls(names.tolist(), codes.ravel().astype(np.int8 if names.size <= 127 else np.int64))

    def mask(self, kind: str) -> np.ndarray:
        """Whether each element is of `kind`."""
        return self.codes == self.names.index(kind) if kind in self.names else np.zeros(self.codes.size, dtype=bool)


def _route_weight(latency_us: np.ndarray) -> np.ndarray:
    # latency first (whole picoseconds), then the hop count breaks ties
    return np.round(latency_us * 1e6) * 1e6 + 1.0


def load_topology(name_or_path: str, *, source: str | None = None, field: str | None = None) -> Topology:
    """Load a shipped topology by name or a YAML file; every mistake is a UserInputError."""
    path = resolve_file(name_or_path, "topologies", source=source, field=field)
    return topology_from_dict(read_yaml(path), str(path))


def topology_from_dict(data: dict[str, Any], source: str) -> Topology:
    spec: TopologyFile = parse(TopologyFile, data, source)
    if spec.generator is not None:
        built = generate(spec.generator, spec.params, source=source)
        try:
            nodes = [parse(NodeSpec, n, f"nodes[{i}]") for i, n in enumerate(built["nodes"])]
            links: Sequence[Any] = _generated_links(built["links"])
        except UserInputError as err:  # a figure derived from the parameters (bricks x bandwidth)
            raise UserInputError(f"generator {spec.generator!r} builds {err.source}.{err.field} out of range: "
                                 f"{err.message}", source=source, field="params") from None
    else:
        assert spec.nodes is not None and spec.links is not None
        nodes, links = spec.nodes, spec.links
        limits.RANKS.check(sum(1 for n in nodes if n.kind in RANK_KINDS), source=source, field="nodes")
        limits.TOPOLOGY_NODES.check(len(nodes), source=source, field="nodes")
        limits.TOPOLOGY_LINKS.check(len(links), source=source, field="links")
    return Topology.from_specs(spec, nodes, links, source)


def _generated_links(links: list[dict[str, Any]]) -> list[Link]:
    """A generator's links, checked as a topology file's are (LinkSpec) but each distinct
    (kind, bandwidth, latency) once: a generator of 16,384 GPUs makes 80,000 links of a few
    kinds, and one pydantic model per link took seconds."""
    first: dict[tuple[Any, Any, Any], int] = {}  # distinct figures -> the first link with them, in order
    for i, link in enumerate(links):
        first.setdefault((link["kind"], link["bandwidth_GBps"], link["latency_us"]), i)
    for i in first.values():
        parse(LinkSpec, links[i], f"links[{i}]")
    return [Link(**link) for link in links]


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
    import networkx as nx  # only `gansim topology show` needs it (see Topology.graph)

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
    # Boykov-Kolmogorov: networkx's default (preflow-push) takes its next active node from a
    # set, whose iteration grows with the nodes already taken out of it: three times as long
    # at 100,000 GPUs (50 s against 16 s), the same cut
    value = nx.maximum_flow_value(flow, "__left__", "__right__",
                                  flow_func=nx.algorithms.flow.boykov_kolmogorov)
    label = [f"{ranks[0]}..{ranks[half - 1]}", f"{ranks[half]}..{ranks[-1]}"]
    return {"halves": label, "bandwidth_GBps": float(value)}


def _best_by_key(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct key (sorted): the least weight, how many entries have it, and one of them."""
    order = np.lexsort((weights, keys))
    keys, weights = keys[order], weights[order]
    # sorted already: each key's first entry is where it differs from the one before
    starts = np.ones(keys.size, dtype=bool)
    np.not_equal(keys[1:], keys[:-1], out=starts[1:])
    first = np.flatnonzero(starts)
    group = np.cumsum(starts) - 1
    best = weights[first]
    count = np.bincount(group, weights=weights == best[group], minlength=first.size)
    return keys[first], best, count.astype(np.int64), order[first]
