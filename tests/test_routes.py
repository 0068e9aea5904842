"""Routes: shortest paths (latency, then hops) that never pass through a rank device,
the same whether found one source at a time or through the hubs of a large network."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gansim.topology import graph as graph_module
from gansim.topology.graph import topology_from_dict
from gansim.topology import paths
from gansim.topology.paths import Digraph, Search, components, dijkstra, path_to


def test_dijkstra_finds_every_shortest_distance_of_a_random_graph():
    rng = np.random.default_rng(3)
    n = 30
    rows, cols = rng.integers(0, n, 120), rng.integers(0, n, 120)
    keep = rows != cols
    rows, cols = rows[keep], cols[keep]
    pair, first = np.unique(rows * n + cols, return_index=True)
    rows, cols = rows[first], cols[first]
    weights = rng.integers(1, 9, rows.size).astype(float)
    # Floyd-Warshall as the reference
    d = np.full((n, n), np.inf)
    np.fill_diagonal(d, 0.0)
    d[rows, cols] = weights
    for k in range(n):
        d = np.minimum(d, d[:, k:k + 1] + d[k:k + 1, :])
    g = Digraph(n, rows, cols, weights)
    for s in range(n):
        dist, pred, _ = dijkstra(g, [s])
        assert {v: dist.get(v, np.inf) for v in range(n)} == {v: d[s, v] for v in range(n)}
        for v in dist:  # the predecessors make a path of that length
            path = path_to(pred, s, v)
            length = sum(weights[(rows == a) & (cols == b)][0] for a, b in zip(path, path[1:]))
            assert length == dist[v]


def test_a_search_settled_bit_by_bit_ends_as_the_whole_search():
    rng = np.random.default_rng(5)
    n = 40
    rows, cols = rng.integers(0, n, 200), rng.integers(0, n, 200)
    key = np.unique(rows[rows != cols] * n + cols[rows != cols])
    rows, cols = key // n, key % n
    g = Digraph(n, rows, cols, rng.integers(1, 4, rows.size).astype(float))
    whole_dist, whole_pred, _ = dijkstra(g, [0], high_first=True)
    search = Search(g, [0], high_first=True)
    for within in (0.0, 1.0, 2.5, 4.0):
        search.settle(within=within)
        assert search.settled == {v for v, d in whole_dist.items() if d <= within}
        assert search.distance(n - 1, within) == (whole_dist.get(n - 1, np.inf) if whole_dist.get(n - 1, np.inf) <= within
                                                  else np.inf)
    search.settle()
    dist, pred, _ = search.found()
    assert (dist, pred) == (whole_dist, whole_pred)


@pytest.mark.parametrize("seed", range(6))
def test_a_whole_search_on_arrays_is_the_heaps_to_every_tie(seed):
    """dijkstra() without targets on a graph of whole weights works on arrays: every distance,
    every predecessor (of equally short ones, the one the heap's search takes, lowest or
    highest first) and every source as the heap's search gives them, skipped vertices and
    several sources included; weights of 10**6 and more, as routes weigh, too."""
    rng = np.random.default_rng(seed)
    n = 300
    rows, cols = rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n)
    keep = rows != cols
    weights = rng.integers(1, 4, keep.sum()).astype(float) * (10.0**6 if seed % 2 else 1.0)
    g = Digraph(n, rows[keep], cols[keep], weights)
    assert g.whole_weights and n >= paths._WHOLE_SEARCH_MIN_VERTICES
    for graph in (g, g.reversed()):
        for high_first in (False, True):
            sources = rng.choice(n, size=3, replace=False).tolist()
            skip = frozenset(rng.choice(n, size=15, replace=False).tolist()) - {sources[0]}
            heap = Search(graph, sources, skip=skip, high_first=high_first)
            heap.settle()
            assert dijkstra(graph, sources, skip=skip, high_first=high_first) == heap.found()
    halves = Digraph(n, rows[keep], cols[keep], weights + 0.5)  # not whole: searched on the heap
    assert not halves.whole_weights


def _heap_search(graph: Digraph, source: int, high_first: bool) -> tuple[dict[int, float], dict[int, int], list[int]]:
    """Dijkstra's search with every vertex on the heap, sinks too: distances, predecessors
    and the order vertices leave the heap (the rule Search keeps)."""
    import heapq

    sign = -1 if high_first else 1
    dist, pred, order, done = {source: 0.0}, {}, [], set()
    heap = [(0.0, sign * source)]
    rows, cols, weights = graph.edges
    while heap:
        d, key = heapq.heappop(heap)
        v = sign * key
        if v in done:
            continue
        done.add(v)
        order.append(v)
        for w, weight in zip(cols[rows == v].tolist(), weights[rows == v].tolist()):
            if w not in done and (w not in dist or d + weight < dist[w]):
                dist[w], pred[w] = d + weight, v
                heapq.heappush(heap, (d + weight, sign * w))
    return dist, pred, order


@pytest.mark.parametrize("seed", range(8))
def test_a_search_reaches_sinks_without_its_heap_and_settles_them_in_the_heaps_order(seed):
    """Search keeps sinks (vertices with no edges out, a third here) off its heap: every
    vertex it settles, asked for one target at a time, some within a distance, has the
    distance and predecessor of the search with every vertex on the heap, to every tie, and
    every vertex that search takes before a target is settled with it, but for sinks not
    asked for (they lead nowhere)."""
    rng = np.random.default_rng(seed)
    n = 60
    rows, cols = rng.integers(0, n, 5 * n), rng.integers(0, n, 5 * n)
    sink = rng.random(n) < 0.35
    sink[0] = False
    keep = (rows != cols) & ~sink[rows]
    key = np.unique(rows[keep] * n + cols[keep])
    rows, cols = key // n, key % n
    g = Digraph(n, rows, cols, rng.integers(1, 4, rows.size).astype(float))
    sink = g.degree() == 0  # (those drawn, and any other left without edges out)
    for high_first in (False, True):
        dist, pred, order = _heap_search(g, 0, high_first)
        search = Search(g, [0], high_first=high_first)
        asked: set[int] = set()
        for target in rng.choice(n, size=12, replace=False).tolist():
            within = float(rng.choice([np.inf, 3.0, 6.0]))
            before_asked = target in search.settled  # (its distance, whatever `within`)
            got = search.distance(target, within)
            want = dist.get(target, np.inf)
            assert got == (want if want <= within or before_asked else np.inf)
            if np.isfinite(want) and want <= within:
                asked.add(target)
                # everything the heap takes before the target, but sinks not asked for
                before = order[:order.index(target) + 1]
                assert {v for v in before if not sink[v] or v in asked} <= search.settled
            for v in search.settled:
                assert search.dist[v] == dist[v] and search.pred.get(v) == pred.get(v)
        search.settle()
        assert search.settled == set(order)
        assert search.found()[:2] == (dist, pred)


def test_components_numbers_parts_by_their_smallest_vertex():
    label = components(7, np.array([5, 1, 3]), np.array([6, 4, 1]))
    assert label.tolist() == [0, 1, 2, 1, 1, 3, 3]


@pytest.mark.parametrize("spec", [
    {"generator": "multi_node", "params": {"nodes": 5, "gpus_per_node": 4}},
    {"generator": "switch", "params": {"gpus": 24}},
    {"generator": "multi_node", "params": {"nodes": 3, "intra": "dgx1"}},
    # GPUs of one machine on two PCIe switches reach each other as soon through the host as
    # through their NICs and the network switch: routes of equal length on and off a hub
    {"generator": "multi_node", "params": {"nodes": 3, "gpus_per_node": 8, "intra": "pcie_tree",
                                           "intra_params": {"gpus_per_switch": 4}}},
    # leaves, spines and a core: routes that cross several hubs, one after the other
    {"generator": "multi_node", "params": {"nodes": 12, "gpus_per_node": 4, "fabric": "rail",
                                           "machines_per_leaf": 2, "machines_per_pod": 4}},
])
def test_routes_through_hubs_are_the_routes_found_one_source_at_a_time(monkeypatch, spec):
    def routes(hub_degree: int) -> list[tuple[list[int], float]]:
        monkeypatch.setattr(graph_module, "HUB_DEGREE", hub_degree)
        topo = topology_from_dict({"name": "t", **spec}, "test")
        assert bool(topo._hub_routing.hubs) == (hub_degree < 10)
        ranks = topo.ranks
        ends = ranks + [n for n, spec in topo.nodes.items() if spec.kind in ("nic", "host")]
        pairs = [(a, b) for a, b in itertools.product(ends, ends) if a != b]
        return [(r.links.tolist(), r.latency_s) for r in topo.routes(pairs)]

    def one_search_per_source() -> list[tuple[list[int], float]]:
        """The reference: each source's search over the whole graph, highest first among
        equals (scipy's order), no hubs and no short cuts."""
        topo = topology_from_dict({"name": "t", **spec}, "test")
        index, names, routing = topo._routing
        ends = topo.ranks + [n for n, spec in topo.nodes.items() if spec.kind in ("nic", "host")]
        found = []
        for a in ends:
            start = index[(a, "out" if a in topo.ranks else "")]
            _, pred, _ = dijkstra(routing, [start], high_first=True)
            for b in ends:
                if a != b:
                    nodes = [names[v] for v in path_to(pred, start, index[(b, "in" if b in topo.ranks else "")])]
                    links = [topo.link_index(u, v) for u, v in zip(nodes, nodes[1:])]
                    found.append((links, float(topo.latency_s[links].sum())))
        return found

    assert routes(3) == routes(5) == routes(10**6) == one_search_per_source()


def test_of_equally_short_routes_the_one_scipys_search_took_is_taken():
    """Routes were found by scipy's Dijkstra before gansim searched around hubs; where several
    are equally short (a GPU on the other PCIe switch of its machine: through the host, or
    out through its NIC and back in through the peer's; a GPU's host: directly or through its
    NIC), the same one is taken, so that simulated results stay the same."""
    spec = {"generator": "multi_node", "params": {"nodes": 2, "gpus_per_node": 8, "intra": "pcie_tree",
                                                  "intra_params": {"gpus_per_switch": 4}}}
    topo = topology_from_dict({"name": "t", **spec}, "test")

    def hops(src: str, dst: str) -> list[str]:
        return [topo.link_names[i] for i in topo.route(src, dst).links]

    assert hops("n0.gpu0", "n0.gpu4") == ["n0.gpu0->n0.nic0", "n0.nic0->switch", "switch->n0.nic4", "n0.nic4->n0.gpu4"]
    assert hops("n0.gpu0", "n0.host") == ["n0.gpu0->n0.nic0", "n0.nic0->n0.host"]


def random_edges(rng: np.random.Generator, n: int, tries: int, heaviest: int) -> tuple[np.ndarray, ...]:
    """Directed edges among n vertices (each drawn pair once, no loops), sorted, with integer
    weights from 1 to heaviest - 1: small, so that many routes are equally short."""
    rows, cols = rng.integers(0, n, tries), rng.integers(0, n, tries)
    keep = rows != cols
    key = np.unique(rows[keep] * n + cols[keep])
    rows, cols = key // n, key % n
    return rows, cols, rng.integers(1, heaviest, rows.size).astype(float)


@pytest.mark.parametrize("seed", range(40))
def test_routes_around_any_hubs_of_a_random_graph_are_the_whole_search_s(seed):
    """Small integer weights make many routes equally short: of each, the walk around the
    hubs takes the one the whole search's rule takes, whichever vertices are hubs."""
    rng = np.random.default_rng(seed)
    n = 24
    rows, cols, weights = random_edges(rng, n, 90, 4)
    g = Digraph(n, rows, cols, weights)
    hubs = sorted(rng.choice(n, size=int(rng.integers(0, 7)), replace=False).tolist())
    hub = graph_module._HubRouting.build(g, hubs)
    for s in range(n):
        dist, pred, _ = dijkstra(g, [s], high_first=True)
        walk = graph_module._Walk(s, hub, g)
        for t in range(n):
            if t == s:
                continue
            found = walk.route(t)
            assert found == (path_to(pred, s, t) if t in dist else None), (s, t, hubs)


@pytest.mark.parametrize("intra", ["nvswitch", "dgx1"])
def test_routes_from_copies_of_a_machine_through_the_one_switch_are_each_sources_own(monkeypatch, intra):
    """On 10 machines whose 80 NICs share one network switch (a hub), a route from a copy
    of the first machine to another machine is the first machine's route to the switch,
    moved onto the copy, then the switch's: the same routes as each source's own search,
    found with one search per place in the machine."""
    spec = {"generator": "multi_node", "params": {"nodes": 10, "intra": intra}}
    moved = []
    copied = graph_module.Topology._copied_through_the_hub

    def counted(topo, by_source):
        left = copied(topo, by_source)
        moved.append(sum(len(d) for d in by_source.values()) - sum(len(d) for d in left.values()))
        return left

    monkeypatch.setattr(graph_module.Topology, "_copied_through_the_hub", counted)
    # (routes of four links, out through a NIC and in through another, are found before a
    # search without this: test_a_route_of_up_to_six_links_found_without_a_search_is_the_whole_searchs)
    monkeypatch.setattr(graph_module._Edges, "unique_shortest",
                        lambda edges, s, t: (np.zeros(s.size, dtype=np.int64),
                                             np.full((s.size, graph_module._SHORT_ROUTE_LINKS), -1, dtype=np.int64)))
    topo = topology_from_dict({"name": "t", **spec}, "test")
    assert len(topo._hub_routing.hubs) == 1
    ranks = topo.ranks
    pairs = [(a, b) for a, b in itertools.product(ranks, ranks) if topo.machine_of[a] != topo.machine_of[b]]
    found = [(r.links.tolist(), r.latency_s) for r in topo.routes(pairs)]
    assert sum(moved) > len(pairs) // 2
    reference = topology_from_dict({"name": "t", **spec}, "test")
    index, names, routing = reference._routing
    expected = []
    for a, b in pairs:
        start = index[(a, "out")]
        _, pred, _ = dijkstra(routing, [start], targets=[index[(b, "in")]], high_first=True)
        nodes = [names[v] for v in path_to(pred, start, index[(b, "in")])]
        links = [reference.link_index(u, v) for u, v in zip(nodes, nodes[1:])]
        expected.append((links, float(reference.latency_s[links].sum())))
    assert found == expected


def test_a_route_of_up_to_six_links_found_without_a_search_is_the_whole_searchs(monkeypatch):
    """_Edges.unique_shortest answers a pair only where its route of at most six links is
    the only shortest one; small integer weights on random graphs make many routes equally
    short, and some vertices hubs. Every route it gives is the one the whole search takes,
    routes of five and six links among them."""
    answered = 0
    lengths: set[int] = set()
    for seed in range(30):
        rng = np.random.default_rng(seed)
        n = 30
        rows, cols, weights = random_edges(rng, n, 80, 5)
        edges = graph_module._Edges.build(n, rows, cols, weights, np.arange(rows.size))
        monkeypatch.setattr(graph_module, "HUB_DEGREE", int(rng.integers(3, 8)))
        s, t = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
        s, t = s[s != t], t[s != t]
        count, links = edges.unique_shortest(s, t)
        g = Digraph(n, rows, cols, weights)
        for k in np.flatnonzero(count > 0).tolist():
            _, pred, _ = dijkstra(g, [int(s[k])], high_first=True)
            path = path_to(pred, int(s[k]), int(t[k]))
            expected = [int(np.flatnonzero((rows == u) & (cols == v))[0]) for u, v in zip(path, path[1:])]
            assert links[k, :count[k]].tolist() == expected and (links[k, count[k]:] == -1).all(), (seed, k)
            answered += 1
            lengths.add(int(count[k]))
    assert answered > 100 and {5, 6} <= lengths


def test_routes_between_machines_of_a_rail_leaf_are_found_without_a_search():
    """GPU j of a machine to GPU j of another on the same leaf: out through NIC j, the leaf of
    rail j, in through the other's NIC j, the only shortest route of four links."""
    spec = {"generator": "multi_node", "params": {"nodes": 8, "gpus_per_node": 4, "fabric": "rail",
                                                  "machines_per_leaf": 4, "machines_per_pod": 8}}
    topo = topology_from_dict({"name": "t", **spec}, "test")
    position = topo.node_index
    src = np.array([position[f"n{m}.gpu{j}"] for m in range(3) for j in range(4)])
    dst = np.array([position[f"n{m + 1}.gpu{j}"] for m in range(3) for j in range(4)])
    count, links = topo.short_route_links(src, dst)
    assert (count == 4).all()
    assert [topo.link_names[i] for i in links[0, :4]] == ["n0.gpu0->n0.nic0", "n0.nic0->leaf0.rail0",
                                                          "leaf0.rail0->n1.nic0", "n1.nic0->n1.gpu0"]
    assert (links[:, 4:] == -1).all()  # (-1 past each route's links)


def searched_routes(monkeypatch, spec: dict, pairs: list[tuple[str, str]]) -> list:
    """The routes of `pairs` on a fresh topology of `spec`, every one of them searched (no
    route is found as walks)."""
    monkeypatch.setattr(graph_module._Edges, "unique_shortest",
                        lambda edges, s, t: (np.zeros(s.size, dtype=np.int64),
                                             np.full((s.size, graph_module._SHORT_ROUTE_LINKS), -1, dtype=np.int64)))
    return topology_from_dict({"name": "t", **spec}, "test").routes(pairs)


def short_links(topo, pairs: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """topo.short_route_links of the named pairs."""
    position = topo.node_index
    return topo.short_route_links(np.array([position[a] for a, _ in pairs]), np.array([position[b] for _, b in pairs]))


def test_routes_between_leaf_groups_through_one_spine_are_found_without_a_search(monkeypatch):
    """GPU j of a machine to GPU j of a machine in another leaf group, where one spine joins
    the two leaves of rail j: out through NIC j, up to the spine and down, in through NIC j,
    the only shortest route of six links, found without a search and the search's own."""
    spec = {"generator": "multi_node", "params": {"nodes": 8, "gpus_per_node": 4, "fabric": "rail",
                                                  "machines_per_leaf": 4, "machines_per_pod": 8}}
    topo = topology_from_dict({"name": "t", **spec}, "test")
    pairs = [(f"n{m}.gpu{j}", f"n{m + 4}.gpu{j}") for m in range(4) for j in range(4)]
    count, links = short_links(topo, pairs)
    assert (count == 6).all()
    assert [topo.link_names[i] for i in links[0]] == [
        "n0.gpu0->n0.nic0", "n0.nic0->leaf0.rail0", "leaf0.rail0->spine0", "spine0->leaf1.rail0",
        "leaf1.rail0->n4.nic0", "n4.nic0->n4.gpu0"]
    # past the bound on walks of three links, they are left to the search
    monkeypatch.setattr(graph_module, "_THREE_LINK_WALKS_MAX_ROWS", 0)
    assert (short_links(topo, pairs)[0] == 0).all()
    searched = searched_routes(monkeypatch, spec, pairs)
    assert [links[k].tolist() for k in range(len(pairs))] == [r.links.tolist() for r in searched]


def test_of_routes_equally_short_found_without_a_search_the_searchs_own_is_taken(monkeypatch):
    """GPU 3 of a machine to GPU 0 of the next on a rail leaf: through its host to its NIC 0
    and the leaf of rail 0, or out through NIC 3 and the leaf of rail 3 and in through the
    other's host, two routes of five links equally short. Both are met as walks, and of them
    the one the search's order of ties takes is found without a search."""
    spec = {"generator": "multi_node", "params": {"nodes": 8, "gpus_per_node": 4, "fabric": "rail",
                                                  "machines_per_leaf": 4, "machines_per_pod": 8}}
    topo = topology_from_dict({"name": "t", **spec}, "test")
    pairs = [(f"n{m}.gpu3", f"n{m + 1}.gpu0") for m in range(3)] + [(f"n{m + 1}.gpu0", f"n{m}.gpu3") for m in range(3)]
    count, links = short_links(topo, pairs)
    assert (count == 5).all()
    searched = searched_routes(monkeypatch, spec, pairs)
    assert [links[k, :5].tolist() for k in range(len(pairs))] == [r.links.tolist() for r in searched]
    # the search's: through the sender's host to the NIC of the receiver's rail
    assert [topo.link_names[i] for i in links[0, :5]] == [
        "n0.gpu3->n0.host", "n0.host->n0.nic0", "n0.nic0->leaf0.rail0", "leaf0.rail0->n1.nic0", "n1.nic0->n1.gpu0"]
    assert [topo.link_names[i] for i in links[3, :5]] == [
        "n1.gpu0->n1.host", "n1.host->n1.nic3", "n1.nic3->leaf0.rail3", "leaf0.rail3->n0.nic3", "n0.nic3->n0.gpu3"]
