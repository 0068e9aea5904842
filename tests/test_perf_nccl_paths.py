"""The fast paths of the `nccl` algorithm's large runs against the slow ones they replace, at
small sizes: the same figures, not only close ones (gansim issue 23)."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import numpy as np
import pytest
import simpy

from gansim.collectives.nccl import (
    WIRE_BYTES_PER_DATA_BYTE,
    _copied_hop_loads,
    _each_hop_loads,
    _tree_edge_array,
    dtree_parent,
    nccl_state,
    plan,
    ring_order_hops,
    tree_edges,
)
from gansim.core.config import Scenario, TrainingOptions
from gansim.core.errors import UserInputError
from gansim.network.cluster import Cluster
from gansim.network.flows import FlowNetwork
from gansim.outputs import trace
from gansim.outputs.report import link_tiers
from gansim.outputs.results import to_json
from gansim.runner.point import simulate_point
from gansim.runner.record import utilisation
from gansim.topology.graph import Topology, load_topology, topology_from_dict

MACHINES = [
    {"nodes": 4},
    {"nodes": 3, "intra": "dgx1"},
    {"nodes": 3, "intra": "pcie_tree", "gpus_per_node": 4, "intra_params": {"gpus_per_switch": 2}},
    {"nodes": 3, "intra": "pcie_tree", "gpus_per_node": 4, "intra_params": {"p2p": False}},
    {"nodes": 3, "gpus_per_node": 4, "nics_per_node": 2},
    # NICs as near as the GPUs' own links: routes leaving the machine are as short, so
    # nothing may be copied from the first machine
    {"nodes": 3, "intra": "pcie_tree", "gpus_per_node": 4, "nic_latency_us": 0.01, "nic_pcie_latency_us": 0.01},
]


def multi_node(**params) -> Topology:
    return topology_from_dict({"name": "t", "generator": "multi_node", "params": params}, "test")


def searched(params: dict) -> Topology:
    """The same machine, every route searched (no MachineCopies)."""
    topo = multi_node(**params)
    topo.__dict__["machine_copies"] = None
    return topo


@pytest.mark.parametrize("params", MACHINES)
def test_routes_copied_from_the_first_machine_are_the_searched_ones(params):
    fast, slow = multi_node(**params), searched(params)
    ids = list(fast.nodes)
    pairs = [(a, b) for a in ids for b in ids if a != b and fast.machine_of[a] == fast.machine_of[b]]
    pairs += [(a, b) for a in fast.ranks for b in fast.ranks if a != b]
    found = []
    for pair in pairs:
        try:
            found.append((pair, slow.route(*pair)))
        except UserInputError:  # no route that does not cross another GPU: none either way
            with pytest.raises(UserInputError):
                multi_node(**params).route(*pair)
    routes = fast.routes([pair for pair, _ in found])
    for (pair, want), got in zip(found, routes):
        assert got.links.tolist() == want.links.tolist(), pair
        assert (got.latency_s, got.bottleneck_Bps) == (want.latency_s, want.bottleneck_Bps), pair


def test_machines_that_differ_are_not_copies():
    topo = multi_node(nodes=3)
    copies = topo.machine_copies
    assert copies is not None and int(copies.is_copy.sum()) == 3
    data = {"name": "t", "generator": "multi_node", "params": {"nodes": 3}}
    # a hand-written file whose second machine has a slower NVLink: not a copy
    from gansim.topology.generators import generate
    built = generate("multi_node", data["params"])
    for link in built["links"]:
        if link["a"] == "n1.gpu0" and link["b"] == "n1.nvswitch":
            link["bandwidth_GBps"] /= 2
    odd = topology_from_dict({"name": "odd", **built}, "test")
    assert not odd.machine_copies.is_copy[odd.machine_of["n1.gpu0"]]
    assert odd.machine_copies.is_copy[odd.machine_of["n2.gpu0"]]
    slow = topology_from_dict({"name": "odd", **built}, "test")
    slow.__dict__["machine_copies"] = None
    for a in ("n1.gpu0", "n2.gpu3"):
        for b in ("n1.gpu5", "n2.gpu1", "n1.nic0", "n2.nic2"):
            assert odd.route(a, b).links.tolist() == slow.route(a, b).links.tolist()


def channels_of(machine, algo: str, count: int) -> list:
    ring = machine.ring
    out = []
    for c in range(count):
        if algo == "tree":
            nics = (ring.nics[c % len(ring.nics)][0],) * 2 if ring.nics else None
            edges = np.array(tree_edges(machine, c), dtype=np.int64).reshape(-1, 2)
            out.append((edges.ravel(), edges[:, ::-1].ravel(), nics))
        else:
            nic_in, nic_out = ring.nics[c % len(ring.nics)] if ring.nics else (0, 0)
            pairs = np.array(ring_order_hops(ring.orders[c % len(ring.orders)], "all_reduce")).reshape(-1, 2)
            out.append((pairs[:, 0], pairs[:, 1], (nic_out, nic_in)))
    return out


@pytest.mark.parametrize("params", MACHINES)
@pytest.mark.parametrize("algo", ["ring", "tree"])
@pytest.mark.parametrize("less", [0, 3])
def test_hop_loads_moved_from_the_first_machine_are_each_hops_own(params, algo, less):
    topo = multi_node(**params)
    cluster = Cluster(topo, len(topo.ranks) - less, simpy.Environment())
    machine = nccl_state(cluster).machine
    hops = []
    for senders, receivers, nics in channels_of(machine, algo, 4):
        inside = machine.rank_machine[senders] == machine.rank_machine[receivers]
        hops += [(a, b, None if same else nics) for a, b, same in zip(senders.tolist(), receivers.tolist(),
                                                                     inside.tolist())]
    hops = list(dict.fromkeys(hops))
    choices = [None] + list(dict.fromkeys(n for _, _, n in hops if n is not None))
    src = np.array([a for a, _, _ in hops], dtype=np.int64)
    dst = np.array([b for _, b, _ in hops], dtype=np.int64)
    which = np.array([choices.index(n) for _, _, n in hops], dtype=np.int64)
    for wire in WIRE_BYTES_PER_DATA_BYTE.values():
        fast = _copied_hop_loads(cluster, machine, wire, src, dst, which, choices)
        slow = _each_hop_loads(cluster, machine, wire, hops)
        assert fast[0].tolist() == slow[0].tolist()
        assert fast[1].tolist() == slow[1].tolist()
        assert fast[2].tolist() == slow[2].tolist()  # the same floats, not close ones


@pytest.mark.parametrize("channel", range(6))
def test_tree_edges_in_arrays_are_the_chains_and_the_double_tree(channel):
    machine = nccl_state(Cluster(multi_node(nodes=5, intra="dgx1"), 37, simpy.Environment())).machine
    ring = machine.ring
    order = ring.orders[channel % len(ring.orders)]
    bounds = np.cumsum([0] + [len(m) for m in machine.nodes]).tolist()
    per = [list(order[bounds[k]:bounds[k + 1]]) for k in range(machine.node_count)]
    want = [(chain[i + 1], chain[i]) for chain in per for i in range(len(chain) - 1)]
    which = 0 if channel < ring.channels else 1
    for node in range(machine.node_count):
        parent = dtree_parent(machine.node_count, node, which)
        if parent >= 0:
            want.append((per[node][0], per[parent][0]))
    assert tree_edges(machine, channel) == want
    assert _tree_edge_array(machine, channel).tolist() == [list(e) for e in want]


GAN = {"name": "small-gan", "bytes_per_param": 4, "networks": {
    "discriminator": {"params": 233985, "forward_s": 0.0004, "backward_s": 0.0008, "optimizer_s": 0.0001},
    "generator": {"params": 2051384, "forward_s": 0.0010, "backward_s": 0.0020, "optimizer_s": 0.0004}},
    "data": {"host_prep_s": 0.0002, "bytes_per_sample": 3136}}


@pytest.mark.parametrize("params, gpus", [({"nodes": 4}, 32), ({"nodes": 3, "intra": "dgx1"}, 20),
                                          ({"nodes": 3, "gpus_per_node": 4, "nics_per_node": 2}, 12)])
@pytest.mark.parametrize("workload", ["gan", "allreduce"])
def test_nccl_runs_on_copied_machines_are_the_runs_on_searched_ones(params, gpus, workload):
    body = GAN if workload == "gan" else {"allreduce_bytes": 64 << 20}
    scenario = Scenario(name="t", topology="t", workload=body, gpus=[gpus], algorithms=["nccl"], steps=3,
                        options=TrainingOptions(overlap=True))
    fast = simulate_point(scenario, multi_node(**params), gpus, "nccl").to_dict()
    slow = simulate_point(scenario, searched(params), gpus, "nccl").to_dict()
    assert json.dumps(fast) == json.dumps(slow)


@pytest.mark.parametrize("doc", [
    {}, [], {"a": []}, {"a": {}}, [[]], {"x": [1.5, None, True, "é\n", 2 ** 70, -0.0, 1e300]},
    {"a": [1, [2, {"b": "\u2603"}], (3, 4)], "c": {"z": 1, "a": [0.1, 0.2]}}, {1: 2, "k": [1]}, {True: [1]},
    {1.5: {"a": 1}}, 1.0, "s", None, [{"links": list(range(50)), "kinds": ["pcie"] * 5}],
])
def test_to_json_writes_what_json_dumps_writes(doc):
    assert to_json(doc) == json.dumps(doc, indent=2, allow_nan=False) + "\n"


@pytest.mark.parametrize("bad", [float("nan"), [float("inf")], {"a": [1, float("nan")]}])
def test_to_json_refuses_what_json_dumps_refuses(bad):
    with pytest.raises(ValueError):
        to_json(bad)


def unions(routes: list[list[int]], transfers: list[tuple[int, float, float, float]], links: int, batch: int):
    """_link_unions and merge_intervals over every (link, transfer) pair, for transfers
    (route, start, end, bytes) on routes over `links` links (and one resource past them)."""
    network = FlowNetwork(simpy.Environment(), np.ones(links + 1), [str(i) for i in range(links + 1)])
    for r in routes:
        network.add_route(np.array(r), 0.0)
    timeline = SimpleNamespace(cluster=SimpleNamespace(network=network))
    route, start, end, amount = (np.array(x) for x in zip(*transfers))
    flow, res = network.route_pairs(route)
    on = res < links
    want = trace.merge_intervals(res[on], start[flow[on]], end[flow[on]], amount[flow[on]])
    got = trace._link_unions(timeline, links, route, start, end, amount, batch)
    return want, got


@pytest.mark.parametrize("batch", [1, 3, 1 << 20])
@pytest.mark.parametrize("shared", [True, False])
def test_link_unions_are_every_pair_merged(monkeypatch, batch, shared):
    if not shared:
        monkeypatch.setattr(trace, "SHARED_MAX_GROUPS", 0)
    rng = np.random.default_rng(7)
    routes = [[0, 1, 2, 9], [2, 3, 4], [5, 1, 2], [6], [7, 8, 0], [9]]
    transfers = []
    for _ in range(60):
        s = float(rng.uniform(0, 1e-3))
        transfers.append((int(rng.integers(len(routes))), s, s + float(rng.uniform(0, 2e-4)), float(rng.uniform(1, 9))))
    # intervals that touch, and one that starts a hair after another ends: a gap the shift
    # of a link's window rounds away, merged link by link
    transfers += [(0, 2e-3, 3e-3, 1.0), (0, 3e-3, 4e-3, 2.0), (1, 2e-3, 3e-3, 1.0),
                  (1, float(np.nextafter(3e-3, 1.0)), 4e-3, 5.0)]
    want, got = unions(routes, transfers, 9, batch)
    for a, b in zip(want, got):
        assert a.tolist() == b.tolist()


def test_link_tiers_name_the_ends_kinds_in_order_of_use():
    for topo in (load_topology("multi-node"), load_topology("dgx1-v100"), multi_node(nodes=2, intra="dgx1")):
        kinds = {node: spec.kind for node, spec in topo.nodes.items()}
        names: dict[str, int] = {}
        tier = []
        for link, kind in zip(topo.link_names, topo.link_kinds):
            u, v = link.split("->", 1)
            tier.append(names.setdefault(f"{kinds[u]}->{kinds[v]} ({kind})", len(names)))
        got = link_tiers(topo)
        assert got[0] == list(names) and got[1].tolist() == tier


def test_a_records_top_resources_are_the_head_of_every_resource_by_use():
    scenario = Scenario(name="t", topology="t", workload=GAN, gpus=[16], algorithms=["nccl"], steps=2,
                        options=TrainingOptions(overlap=True))
    seen = []
    simulate_point(scenario, multi_node(nodes=2), 16, "nccl", on_timeline=seen.append)
    every, bottleneck = utilisation(seen[0])
    top, same = utilisation(seen[0], top=8)
    assert top[:8] == every[:8] and same == bottleneck
    # past the busiest 8, only the busiest link, where none of them is one
    link = next(row for row in every if row.kind not in ("compute", "cores"))
    assert top == every[:8] + ([] if link in every[:8] else [link])
    assert link not in every[:8]  # (this run's 16 GPUs' compute come first: the case is tried)


def test_nic_bandwidths_at_once_are_each_nics_own():
    for topo in (multi_node(nodes=3), multi_node(nodes=3, gpus_per_node=4, nics_per_node=2),
                 multi_node(nodes=2, intra="pcie_tree", gpus_per_node=4), load_topology("multi-node")):
        for ranks in (len(topo.ranks), len(topo.ranks) - 3):
            machine = nccl_state(Cluster(topo, ranks, simpy.Environment())).machine
            fast = machine._all_nic_bws()
            slow = {}
            for m in range(machine.node_count):
                for nic in machine.nics[m]:
                    machine._nic_bws.clear()
                    machine._nic_bws[("keep", "the cache from filling")] = 0.0
                    slow[(m, nic)] = machine._nic_bw(m, nic)
            assert fast == slow


def test_plans_on_copied_machines_are_the_plans_on_searched_ones():
    for params in MACHINES[:5]:
        gpus = len(multi_node(**params).ranks)
        for algo in ("ring", "tree"):
            got = []
            for topo in (multi_node(**params), searched(params)):
                cluster = Cluster(topo, gpus, simpy.Environment())
                chosen = plan(cluster, nccl_state(cluster), "all_reduce", 64 << 20, algo, "Simple")
                got.append([(f.amount, f.resources.tolist(), f.weights.tolist(), f.channels) for f in chosen.flows])
            assert got[0] == got[1]


@pytest.mark.parametrize("params", MACHINES)
def test_hosts_copied_from_the_first_machine_are_the_searched_ones(params):
    assert list(multi_node(**params).host_of.items()) == list(searched(params).host_of.items())


def test_topology_digest_follows_every_node_link_and_figure():
    """The resumable state's key for a machine: the same for the same machine built twice,
    another for any change to a node's field, a link, a capacity, a latency, the name or the
    NCCL_P2P_LEVEL of its runs."""
    from gansim.runner.partial import topology_digest

    data = {"name": "box",
            "nodes": [{"id": "cpu0", "kind": "host", "cores": 16}, {"id": "sw", "kind": "switch"}]
            + [{"id": f"g{i}", "kind": "gpu", "tflops": 10.0} for i in range(4)],
            "links": [{"a": f"g{i}", "b": "sw", "kind": "pcie", "bandwidth_GBps": 15.75, "latency_us": 1.0}
                      for i in range(4)] + [{"a": "sw", "b": "cpu0", "kind": "pcie", "bandwidth_GBps": 15.75, "latency_us": 1.0}]}
    edits = [
        lambda d: d["nodes"][2].update(tflops=20.0),
        lambda d: d["nodes"][0].update(cores=8),
        lambda d: d["links"][0].update(bandwidth_GBps=31.5),
        lambda d: d["links"][1].update(latency_us=2.0),
        lambda d: d["links"][2].update(kind="nvlink"),
        lambda d: d["links"].append({"a": "g0", "b": "g1", "kind": "nvlink", "bandwidth_GBps": 25.0, "latency_us": 1.0}),
        lambda d: d.update(name="box2"),
        lambda d: d.update(nccl_p2p_level="SYS"),
        lambda d: d["links"][0].update(a="sw", b="g0"),  # the same link the other way round
    ]
    seen = {topology_digest(topology_from_dict(copy.deepcopy(data), "test"))}
    assert topology_digest(topology_from_dict(copy.deepcopy(data), "test")) in seen
    for edit in edits:
        edited = copy.deepcopy(data)
        edit(edited)
        seen.add(topology_digest(topology_from_dict(edited, "test")))
    assert len(seen) == 1 + len(edits)
    assert topology_digest(multi_node(nodes=2, intra="dgx1")) == topology_digest(multi_node(nodes=2, intra="dgx1"))
    assert topology_digest(multi_node(nodes=2, intra="dgx1")) != topology_digest(multi_node(nodes=3, intra="dgx1"))


def test_flows_on_the_same_routes_share_their_pairs_and_alone_rates():
    network = FlowNetwork(simpy.Environment(), np.array([1.0, 2.0, 4.0, 8.0, 3.0, 5.0, 7.0]), list("abcdefg"))
    made = [network.add_route(np.array(r), 0.0, np.array(w)) for r, w in (
        ([0, 1, 2], [1.0, 2.0, 0.5]), ([3], [1.0]), ([2, 4, 5, 6], [1.0, 1.0, 3.0, 0.25]), ([1, 6], [2.0, 2.0]))]
    routes = np.array([made[i] for i in (2, 0, 2, 3, 1, 0, 2, 3, 3)])
    wanted = np.zeros(7, dtype=bool)
    wanted[[1, 2, 6]] = True
    flow, res = network.route_pairs(routes)
    keep = wanted[res]
    for batch in (1, 2, 3, 1 << 20):
        got_flow, got_res = network.route_pairs_on(routes, wanted, rows_per_batch=batch)
        assert got_flow.tolist() == flow[keep].tolist() and got_res.tolist() == res[keep].tolist()
    one_by_one = [network.alone_rate(np.array([r]))[0] for r in routes.tolist()]
    assert network.alone_rate(routes).tolist() == one_by_one


def old_global_order(machine, local, channel):
    """NcclMachine._global_order as it was, machine by machine in lists."""
    base = machine.nodes[0]
    position = [base.index(r) for r in local]
    orders = [[members[q] for q in position] if len(members) == len(base) else list(members)
              for members in machine.nodes]
    nics = (0, 0)
    if machine.node_count > 1 and machine.nics[0]:
        k = channel % len(machine.nics[0])
        first = machine.nic_gpu(0, k)
        if first is not None and first in orders[0]:
            start = orders[0].index(first)
            orders = [o[start:] + o[:start] for o in orders]
            slot = machine.nics_of(0, first).index(k)
            exits = machine.nics_of(0, orders[0][-1]) or [k]
            nics = (k, exits[slot % len(exits)])
        else:
            nics = (k, k)
    return tuple(r for o in orders for r in o), nics


@pytest.mark.parametrize("params", MACHINES[:5])
@pytest.mark.parametrize("less", [0, 3])
def test_ring_orders_of_machines_alike_are_each_machines_own(params, less):
    topo = multi_node(**params)
    machine = nccl_state(Cluster(topo, len(topo.ranks) - less, simpy.Environment())).machine
    local = list(reversed(machine.nodes[0]))
    for channel in range(2 * len(machine.nics[0]) + 1):
        assert machine._global_order(local, channel) == old_global_order(machine, local, channel)


@pytest.mark.parametrize("params", MACHINES + [{"nodes": 5, "gpus_per_node": 4, "nics_per_node": 2,
                                                "nic_model": "AWS EFA (p5)"}, {"nodes": 1}])
def test_machines_copied_by_the_generator_are_the_machines_it_builds(monkeypatch, params):
    from gansim.topology import generators

    fast = generators.generate("multi_node", params)
    monkeypatch.setattr(generators, "_copy_machines", lambda *args: False)
    assert fast == generators.generate("multi_node", params)


def test_a_dgx1_copys_hosts_and_host_to_gpu_routes_are_the_first_machines_moved(monkeypatch):
    """On DGX-1 machines a GPU's host is two PCIe links away, as far as two `net` links: only
    a route that leaves the machine through a link out of the host as well, and into the
    GPU, could be as short, which none is. Each copy's hosts and host-to-GPU routes are then
    the first machine's, moved, and those are searched inside it: no search of the whole
    network, nor the searches from and to its switch that routes across machines need (the
    same routes as searched everywhere: the tests above)."""
    topo = multi_node(nodes=4, intra="dgx1")
    is_rank = np.array([spec.kind == "gpu" for spec in topo.nodes.values()])
    assert sorted(topo._copied_hosts(is_rank)) == sorted(topo.ranks)
    searched_pairs = []
    search = Topology._search_routes

    def counted(self, missing):
        searched_pairs.extend(missing)
        return search(self, missing)

    monkeypatch.setattr(Topology, "_search_routes", counted)
    topo.routes([(topo.host_of[r], r) for r in topo.ranks])
    assert searched_pairs == [] and "_hub_routing" not in topo.__dict__
    assert all(topo.route(topo.host_of[r], r).links.size == 2 for r in topo.ranks)
