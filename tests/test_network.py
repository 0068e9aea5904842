"""The flow network: max-min sharing, full duplex links, latency, batching."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import simpy

from gansim.core.arrays import ragged, rounded, unique_inverse, unique_pairs
from gansim.network.flows import FlowNetwork, max_min_rates

GB = 1e9


def run_flows(capacity, routes, starts):
    """routes: list of (resource list, latency[, weights]); starts: list of (route index, bytes,
    start time). Returns each flow's end time."""
    env = simpy.Environment()
    net = FlowNetwork(env, np.array(capacity, dtype=float), [f"r{i}" for i in range(len(capacity))])
    ids = [net.add_route(np.array(r[0], dtype=np.int64), r[1], None if len(r) < 3 else np.array(r[2]))
           for r in routes]
    ends = {}
    net.on_complete = lambda tags, now: ends.update({int(t): now for t in tags})
    for tag, (route, nbytes, at) in enumerate(starts):
        def go(_e, tag=tag, route=route, nbytes=nbytes):
            net.start(np.array([tag]), np.array([ids[route]]), np.array([float(nbytes)]))
            net.flush()
        env.timeout(at).callbacks.append(go)
    env.run()
    return [ends[i] for i in range(len(starts))]


def test_one_transfer_pays_latency_then_bytes_over_bandwidth():
    (end,) = run_flows([10 * GB], [([0], 2e-6)], [(0, 1e9, 0.0)])
    assert end == pytest.approx(2e-6 + 0.1, rel=1e-12)


def test_two_transfers_sharing_a_directed_link_take_twice_as_long():
    alone = run_flows([10 * GB], [([0], 0.0)], [(0, 1e9, 0.0)])
    shared = run_flows([10 * GB], [([0], 0.0)], [(0, 1e9, 0.0), (0, 1e9, 0.0)])
    assert shared[0] == pytest.approx(2 * alone[0], rel=1e-12)
    assert shared[1] == pytest.approx(2 * alone[0], rel=1e-12)


def test_a_flow_weighing_two_on_a_link_moves_at_half_its_capacity():
    # an LL-protocol transfer sends two bytes on the wire per byte of data
    (alone,) = run_flows([10 * GB], [([0], 0.0)], [(0, 1e9, 0.0)])
    (weighted,) = run_flows([10 * GB], [([0], 0.0, [2.0])], [(0, 1e9, 0.0)])
    assert weighted == pytest.approx(2 * alone, rel=1e-12)
    # beside a plain flow on the same link, max-min fairness gives both the same data rate x:
    # 2x + x = capacity, so each moves its 1 GB at 10/3 GB/s
    both = run_flows([10 * GB], [([0], 0.0, [2.0]), ([0], 0.0)], [(0, 1e9, 0.0), (1, 1e9, 0.0)])
    assert both == pytest.approx([0.3, 0.3], rel=1e-12)
    # a weight below 1 (a resource measured in other units) lets the flow go faster than its capacity
    (light,) = run_flows([1.0], [([0], 0.0, [1 / (10 * GB)])], [(0, 1e9, 0.0)])
    assert light == pytest.approx(0.1, rel=1e-12)


def test_opposite_directions_of_a_full_duplex_link_do_not_interfere():
    # resources 0 and 1 are the two directions of one link
    alone = run_flows([10 * GB, 10 * GB], [([0], 0.0)], [(0, 1e9, 0.0)])
    both = run_flows([10 * GB, 10 * GB], [([0], 0.0), ([1], 0.0)], [(0, 1e9, 0.0), (1, 1e9, 0.0)])
    assert both == pytest.approx([alone[0], alone[0]], rel=1e-12)


def test_contention_through_the_topology_doubles_a_transfer(write_yaml):
    from gansim.network.cluster import Cluster
    from gansim.topology.graph import load_topology

    path = write_yaml("star.yaml", {
        "name": "star", "nodes": [{"id": "sw", "kind": "pcie_switch"}] + [
            {"id": f"gpu{i}", "kind": "gpu"} for i in range(3)],
        "links": [{"a": "sw", "b": f"gpu{i}", "kind": "pcie", "bandwidth_GBps": 10, "latency_us": 0} for i in range(3)],
    })
    topo = load_topology(str(path))

    def finish(pairs):
        env = simpy.Environment()
        cluster = Cluster(topo, 3, env)
        ends = []
        cluster.network.on_complete = lambda tags, now: ends.extend([now] * tags.size)
        routes = np.array([cluster.node_route(a, b) for a, b in pairs])
        cluster.network.start(np.arange(len(pairs)), routes, np.full(len(pairs), 1e9))
        cluster.network.flush()
        env.run()
        return max(ends)

    one = finish([("gpu0", "gpu2")])
    assert finish([("gpu0", "gpu2"), ("gpu1", "gpu2")]) == pytest.approx(2 * one, rel=1e-12)  # share sw->gpu2
    assert finish([("gpu0", "gpu2"), ("gpu2", "gpu0")]) == pytest.approx(one, rel=1e-12)  # opposite directions


def test_a_flow_speeds_up_when_its_competitor_ends():
    # 1 GB and 3 GB share 10 GB/s: both at 5 GB/s until 0.2 s, then the big one alone at 10 GB/s
    ends = run_flows([10 * GB], [([0], 0.0)], [(0, 1e9, 0.0), (0, 3e9, 0.0)])
    assert ends[0] == pytest.approx(0.2)
    assert ends[1] == pytest.approx(0.2 + 2e9 / 10e9)


def test_max_min_fairness_gives_leftover_capacity_to_unconstrained_flows():
    # flow A crosses links 0 (1 GB/s) and 1 (2 GB/s); B uses link 0, C uses link 1
    rates = max_min_rates(np.array([0, 0, 1, 2]), np.array([0, 1, 0, 1]), 3, np.array([1.0, 2.0]))
    assert rates == pytest.approx([0.5, 0.5, 1.5])


def test_symmetric_flows_end_in_one_event():
    env = simpy.Environment()
    net = FlowNetwork(env, np.full(1000, 1e9), ["r"] * 1000)
    routes = np.array([net.add_route(np.array([i]), 1e-6) for i in range(1000)])
    batches = []
    net.on_complete = lambda tags, now: batches.append(tags.size)
    net.start(np.arange(1000), routes, np.full(1000, 1e6))
    net.flush()
    env.run()
    assert batches == [1000]


def test_rounding_never_leaves_a_flow_with_negative_bytes_stuck():
    # A 64-GPU GAN step on multi_node once left a flow with -2.5e-9 bytes to go, which then
    # looped forever on zero-length timers (the clock's rounding made an interval one ulp
    # longer than planned). Run it in a subprocess so that a regression fails, not hangs.
    import subprocess
    import sys

    code = (
        "from gansim.core.config import Scenario; from gansim.runner.point import simulate_point; "
        "from gansim.topology.graph import topology_from_dict; "
        "t = topology_from_dict({'name': 'b', 'generator': 'multi_node', 'params': {'nodes': 8}}, 'b'); "
        "s = Scenario(name='x', topology='b', workload='paper-mlp-gan', gpus=[64], steps=1); "
        "print(simulate_point(s, t, 64, 'ring').step_time_s)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) > 0


def _progressive_filling(routes, capacity):
    """Max-min fairness as textbook progressive filling: raise every unfrozen flow's rate
    together; freeze the flows of a resource when it fills."""
    rates = [None] * len(routes)
    remaining = list(capacity)
    while any(r is None for r in rates):
        active = [i for i, r in enumerate(rates) if r is None]
        shares = {}
        for res in range(len(capacity)):
            users = [i for i in active if res in routes[i]]
            if users:
                shares[res] = remaining[res] / len(users)
        level = min(shares.values())
        tight = {res for res, share in shares.items() if share <= level * (1 + 1e-12)}
        for i in active:
            if tight & set(routes[i]):
                rates[i] = level
                for res in routes[i]:
                    remaining[res] -= level
    return rates


@pytest.mark.parametrize("network", ["small", "large"])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shared", ["none", "all", "some"])
def test_max_min_rates_match_progressive_filling(shared, seed, network):
    """Flows that share no resource ("none"), that all pick theirs at random ("all"), or a
    mix of both (flows alone on their resources beside flows that share theirs, which the
    filling treats apart), with capacities within the freezing tolerance of each other; in a
    network of 60 resources, and spread over one of 60,000 (max_min_rates then numbers the
    resources it uses rather than working over all of the network's)."""
    rng = np.random.default_rng(7 + 100 * seed + len(shared))
    capacity = rng.choice([10.0, 10.0 * (1 + 3e-13), 4.0, 25.0, 7.5, 2.5 * (1 - 2e-13)], size=60)
    routes = []
    free = list(rng.permutation(40))
    for flow in range(12):
        length = int(rng.integers(1, 4))
        if shared == "all" or (shared == "some" and flow % 2):
            # resources 40..59 are only ever shared, 0..39 handed out once each
            pool = 60 if shared == "all" else np.arange(40, 60)
            routes.append(sorted(set(int(x) for x in rng.choice(pool, size=length, replace=False))))
        else:
            routes.append(sorted(int(free.pop()) for _ in range(length)))
    pair_flow = np.repeat(np.arange(len(routes)), [len(r) for r in routes])
    pair_res = np.concatenate([np.array(r) for r in routes])
    expected = _progressive_filling(routes, capacity)
    if network == "large":
        spread = np.full(60_000, 1.0)
        spread[np.arange(60) * 1000] = capacity
        capacity, pair_res = spread, pair_res * 1000
    assert max_min_rates(pair_flow, pair_res, len(routes), capacity).tolist() == expected


def _flows_run(seed: int, monkeypatch, whole: bool) -> tuple[list[tuple[int, float]], int]:
    """Random flows on 40 resources (capacities equal but for rounding among them, some
    routes weighted), started in batches of 1 to 90 at random times: each flow's end, and how
    many events were solved by groups. `whole`: every event solved over the whole network."""
    from gansim.network import flows

    # (an event that starts or ends more flows than this drops the index: every event then)
    monkeypatch.setattr(flows, "_EVENT_INDEXED_MAX", -1 if whole else 64)
    rng = np.random.default_rng(seed)
    capacity = rng.choice([10.0, 10.0 * (1 + 3e-13), 4.0, 25.0, 7.5, 2.5 * (1 - 2e-13), np.inf], size=40)
    env = simpy.Environment()
    net = FlowNetwork(env, capacity, [f"r{i}" for i in range(40)])
    routes = []
    for k in range(120):
        resources = rng.choice(40, size=int(rng.integers(0, 4)), replace=False)
        weights = rng.choice([0.5, 1.0, 2.0], size=resources.size) if k % 3 == 0 and resources.size else None
        routes.append(net.add_route(resources, float(rng.choice([0.0, 1e-6])), weights))
    ends: list[tuple[int, float]] = []
    net.on_complete = lambda tags, now: ends.extend((int(t), now) for t in tags)
    tag = 0
    for at in np.sort(rng.uniform(0.0, 2.0, size=40)):
        size = int(rng.choice([1, 1, 2, 3, 90]))
        batch = (np.arange(tag, tag + size), rng.choice(routes, size=size), rng.uniform(0.1, 3.0, size=size))
        tag += size

        def go(_e, batch=batch):
            net.start(*batch)
            net.flush()
        env.timeout(float(at)).callbacks.append(go)
    env.run()
    return sorted(ends), net.group_computations


@pytest.mark.parametrize("seed", range(8))
def test_rates_worked_out_for_an_events_group_are_the_whole_networks_to_the_last_bit(monkeypatch, seed):
    """An event's rates are solved for the flows joined to its own (through shared resources)
    alone: every flow ends at the time the whole network's solve at every event gives, bit
    for bit, with capacities equal but for rounding (whose levels the whole solve freezes
    together: then the whole network is solved), weighted routes, and batches large enough
    that the network stops indexing flows one by one and starts again."""
    grouped, groups = _flows_run(seed, monkeypatch, whole=False)
    whole, none = _flows_run(seed, monkeypatch, whole=True)
    assert groups > 0 and none == 0
    assert grouped == whole


@pytest.mark.parametrize("beside", [False, True])
def test_a_flow_over_unlimited_resources_alone_is_never_held_back(beside):
    """A flow whose route crosses only resources of unlimited capacity (a host's cores when
    they are not counted) ends as soon as it starts, alone in the network or beside one
    that is held back."""
    starts = [(0, 1e9, 0.0)] + ([(1, 5.0, 0.0)] if beside else [])
    ends = run_flows([np.inf, 1.0], [([0], 0.0), ([1], 0.0)], starts)
    assert ends[0] == 0.0
    assert ends[1:] == ([5.0] if beside else [])


def test_a_level_within_the_tolerance_of_anothers_is_solved_with_the_whole_network():
    """Two flows alone on resources of 10 and 10 (1 + 3e-13): the whole network freezes them
    at one level; the flow that joins second, alone in its group, is not given its own."""
    ends = run_flows([10.0, 10.0 * (1 + 3e-13)], [([0], 0.0), ([1], 0.0)], [(0, 100.0, 0.0), (1, 1.0, 0.5)])
    assert ends[1] == 0.5 + 1.0 / 10.0


def test_ragged_ranges_are_each_rows_positions_end_to_end():
    at, owner = ragged(np.array([5, 0, 9]), np.array([2, 0, 3]))
    assert at.tolist() == [5, 6, 9, 10, 11] and owner.tolist() == [0, 0, 2, 2, 2]


@pytest.mark.parametrize("high", [5, 1000, 10**9])
def test_distinct_numbers_counted_are_those_np_unique_sorts(high):
    rng = np.random.default_rng(high)
    for size in (0, 1, 7, 5000):
        values = rng.integers(0, high, size=size)
        used, inverse = unique_inverse(values)
        expected_used, expected_inverse = np.unique(values, return_inverse=True)
        assert used.dtype == values.dtype
        assert np.array_equal(used, expected_used)
        assert np.array_equal(inverse, expected_inverse.ravel())


@pytest.mark.parametrize("high", [3, 1000, 10**6])
def test_distinct_pairs_are_the_rows_np_unique_sorts(high):
    rng = np.random.default_rng(high)
    for size in (0, 1, 7, 5000):
        a, b = rng.integers(0, high, size=size), rng.integers(0, 2 * high, size=size)
        pairs, inverse = unique_pairs(a, b)
        expected_pairs, expected_inverse = np.unique(np.stack([a, b], axis=1).reshape(size, 2), axis=0,
                                                     return_inverse=True)
        assert np.array_equal(pairs, expected_pairs) and np.array_equal(inverse, expected_inverse.ravel())
    with pytest.raises(ValueError):
        unique_pairs(np.array([1, -1]), np.array([0, 0]))


@pytest.mark.parametrize("digits", [0, 4, 6])
def test_rounded_values_are_pythons_round_to_the_bit(digits):
    """Halves at `digits` decimals and the doubles either side of them (where one rounding of
    the scaled value can cross the half), random figures, signs, zeros and values that are
    not finite: each is round(float(v), digits), its sign and its last bit."""
    rng = np.random.default_rng(digits)
    halves = (np.arange(-20000, 20000) + 0.5) / 10.0 ** digits
    base = np.concatenate([halves, rng.random(20000), rng.random(2000) * 1e9, -rng.random(2000) * 1e-7,
                           [0.0, -0.0, 1e-320, -1e-320, 2.0 ** 60, np.inf, -np.inf, np.nan]])
    values = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf)])
    expected = [round(float(v), digits) for v in values]
    found = rounded(values, digits)
    assert [struct_bits(x) for x in found] == [struct_bits(x) for x in expected]


def struct_bits(x: float) -> bytes:
    return struct.pack("<d", x)


def test_routes_added_in_a_block_are_the_routes_added_one_by_one():
    """FlowNetwork.add_routes lays routes end to end; each is the route add_route makes of
    the same resources, weights and latency, with the next ids."""
    one, block = (FlowNetwork(simpy.Environment(), np.array([1.0, 2.0, np.inf, 4.0]), list("abcd")) for _ in range(2))
    routes = [([0, 1], 1e-6, None), ([3], 0.0, None), ([2, 0, 3], 5e-6, [1.0, 2.0, 0.5])]
    ids = [one.add_route(np.array(r), lat, None if w is None else np.array(w)) for r, lat, w in routes]
    assert block.add_route(np.array([0, 1]), 1e-6) == 0
    assert block.add_routes(np.array([1, 3]), np.array([3, 2, 0, 3]), np.array([0.0, 5e-6]),
                            np.array([1.0, 1.0, 2.0, 0.5])).tolist() == [1, 2]
    every = np.array(ids)
    for got, want in zip(block.route_pairs(every), one.route_pairs(every)):
        assert got.tolist() == want.tolist()
    assert block.route_pair_weights(every).tolist() == one.route_pair_weights(every).tolist()
    assert block.route_latency(every).tolist() == one.route_latency(every).tolist()
    assert block.alone_rate(every).tolist() == one.alone_rate(every).tolist() == [1.0, 4.0, 0.5]
    assert block.binding_pairs(every)[1].tolist() == one.binding_pairs(every)[1].tolist() == [0, 1, 3, 0, 3]
    assert block.binding_pairs(every)[2].tolist() == one.binding_pairs(every)[2].tolist() == [1, 1, 1, 2, 0.5]
    with pytest.raises(ValueError, match="weights must be > 0"):
        block.add_routes(np.array([2]), np.array([0, 1]), np.array([0.0]), np.array([1.0, 0.0]))


@pytest.mark.parametrize("p2p", [True, False])
def test_pair_routes_made_in_a_block_are_the_node_routes(p2p):
    """Cluster.pair_routes makes the routes the topology finds without a search in one block:
    the same links and latency as node_route's, one id per pair of nodes whichever way it
    was made first; pairs staged in host memory (no peer-to-peer) go through node_route."""
    from gansim.network.cluster import Cluster
    from gansim.topology.graph import topology_from_dict

    topo = topology_from_dict({"name": "t", "generator": "multi_node", "params": {
        "nodes": 4, "gpus_per_node": 4, "intra": "pcie_tree", "intra_params": {"p2p": p2p}}}, "test")
    blocked, single = (Cluster(topo, 16, simpy.Environment()) for _ in range(2))
    participants = tuple(blocked.rank_nodes)
    src, dst = np.divmod(np.arange(16 * 16), 16)
    src, dst = src[src != dst], dst[src != dst]
    first = blocked.node_route(participants[1], participants[2])
    ids = blocked.pair_routes(participants, src, dst)
    assert ids[(src == 1) & (dst == 2)][0] == first
    # made one by one: the first, and with p2p: false every pair (each staged in its receiver's host)
    assert len(blocked._node_routes) == (1 if p2p else src.size)
    assert blocked.pair_routes(participants, src, dst).tolist() == ids.tolist()
    for k, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
        made = single.node_route(participants[a], participants[b])
        assert blocked.node_route(participants[a], participants[b]) == ids[k]
        for got, want in zip(blocked.network.route_pairs(ids[k:k + 1]), single.network.route_pairs(np.array([made]))):
            assert got.tolist() == want.tolist()
        assert blocked.network.route_latency(ids[k:k + 1])[0] == single.network.route_latency(np.array([made]))[0]
    assert all((blocked.staging_host(participants[a], participants[b]) is None) == p2p
               for a, b in zip(src.tolist(), dst.tolist()))


def test_content_keys_tell_arrays_apart_by_contents_dtype_and_shape():
    from gansim.core.arrays import content_key

    a = np.arange(100_000, dtype=np.int64)
    assert content_key(a) == content_key(a.copy()) and len(content_key(a)) == 16
    b = a.copy()
    b[-1] += 1
    assert content_key(a) != content_key(b)
    assert content_key(a) != content_key(a.astype(np.int32)) != content_key(a.astype(float))
    assert content_key(a[:10].reshape(2, 5)) != content_key(a[:10])
    # several arrays: where one ends and the next starts counts
    assert content_key(a[:3], a[3:10]) != content_key(a[:4], a[4:10])
    assert content_key(a[::2]) == content_key(np.ascontiguousarray(a[::2]))
