"""The `nccl` algorithm: NCCL's choice as its tuning model makes it, channels and NIC rails as
flows, SHM for GPUs without peer-to-peer, and agreement with NCCL's own estimate where
nothing contends."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from gansim.collectives.closed_forms import bus_factor
from gansim.collectives.nccl import (
    WIRE_BYTES_PER_DATA_BYTE,
    _hop_loads,
    _kernel_weight,
    btree_parent,
    dtree_parent,
    model_seconds,
    nccl_state,
    plan,
    ring_order_hops,
    tree_edges,
)
from gansim.collectives.nccl_topology import NcclMachine
from gansim.collectives.nccl_tuning import choose, proxy_serial_us, tune
from gansim.collectives.schedules import build_schedule
from gansim.core.config import TrainingOptions
from gansim.network.cluster import Cluster
from gansim.runner.collective import collective_times
from gansim.topology.graph import load_topology, topology_from_dict

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
H100 = {"gpu_model": "H100-SXM5-80GB", "gpu_tflops": 67.0, "gpu_memory_GB": 80, "nvlink_bandwidth_GBps": 450.0,
        "pcie_bandwidth_GBps": 63.0}


def topo(generator: str, **params):
    return topology_from_dict({"name": generator, "generator": generator, "params": params}, "test")


def choices(topology, gpus: int, sizes, op: str = "all_reduce"):
    tuning = tune(NcclMachine.build(topology, gpus))
    return [(c.algorithm, c.protocol) for c in (choose(tuning, op, n) for n in sizes)]


def busbw(topology, gpus: int, nbytes: int, op: str = "all_reduce", **options) -> float:
    (t,) = collective_times(topology, gpus, op, [nbytes], options=TrainingOptions(**options))
    return nbytes / t.seconds * bus_factor(op, gpus) / 1e9


def test_ll_for_small_messages_simple_for_large():
    got = choices(load_topology("dgx-a100"), 8, [1 * KiB, 64 * KiB, 4 * MiB, 1 * GiB])
    assert got[0] == ("ring", "LL") and got[1] == ("ring", "LL")
    assert got[2][1] == "LL128"  # NVLink: LL128 in between (enabled by default up to NVB paths)
    assert got[3] == ("ring", "Simple")
    # over PCIe NCCL does not enable LL128 (tuning.cc: typeIntra <= PATH_NVB)
    pcie = choices(load_topology("paper-gtx1080ti-pcie"), 4, [1 * KiB, 16 * MiB, 1 * GiB])
    assert pcie == [("ring", "LL"), ("ring", "Simple"), ("ring", "Simple")]


def test_nvls_only_where_the_nvswitch_reduces():
    sizes = [1 * KiB, 64 * MiB, 1 * GiB]
    hopper = choices(topo("nvswitch", gpus=8, **H100), 8, sizes)
    assert hopper[0][0] == "ring" and hopper[1] == ("nvls", "Simple") and hopper[2] == ("nvls", "Simple")
    no_sharp = choices(topo("nvswitch", gpus=8, nvlink_sharp=False, **H100), 8, sizes)
    assert all(a != "nvls" for a, _ in no_sharp)
    assert all(a != "nvls" for a, _ in choices(load_topology("dgx-a100"), 8, sizes))  # A100: no NVLS
    # H100s on NVLink but no NVSwitch (bridged pairs): no NVLS either
    pair = topo("fully_connected", gpus=2, gpu_model="H100 PCIe", bandwidth_GBps=300.0)
    assert NcclMachine.build(pair, 2).nvls is None
    # NVLS ~ NCCL's 480 GB/s busbw on 8 H100 (S. Jeaugey, NVIDIA/nccl-tests#212), ring ~ 370
    h100 = topo("nvswitch", gpus=8, **H100)
    assert busbw(h100, 8, 4 * GiB) == pytest.approx(476, rel=0.02)
    assert busbw(h100, 8, 4 * GiB, nccl_algo="ring") == pytest.approx(370.8, rel=0.01)


def test_tree_across_nodes_at_medium_sizes_never_inside_one():
    sizes = [KiB << k for k in range(0, 23, 2)]
    assert all(a == "ring" for a, _ in choices(load_topology("dgx-a100"), 8, sizes))
    multi = dict(zip(sizes, choices(load_topology("multi-node"), 32, sizes)))
    assert multi[64 * KiB][0] == "tree" and multi[1 * MiB][0] == "tree" and multi[16 * MiB][0] == "tree"
    assert multi[4 * GiB] == ("ring", "Simple")


@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_flow_equals_nccls_estimate_where_nothing_contends(algo):
    topology = load_topology("multi-node") if algo == "tree" else load_topology("dgx-a100")
    gpus, nbytes = (32, 4 * MiB) if algo == "tree" else (8, 1 * GiB)
    cluster = Cluster(topology, gpus, simpy.Environment())
    state = nccl_state(cluster)
    (t,) = collective_times(topology, gpus, "all_reduce", [nbytes], options=TrainingOptions(nccl_algo=algo))
    assert t.algorithm == algo
    # NCCL's estimate, plus the proxy's posts channel after channel at each network crossing
    # (none inside one machine)
    proxy_s = proxy_serial_us(state.tuning, "all_reduce", algo, t.channels, dtree_parent) * 1e-6
    assert (proxy_s > 0) == (algo == "tree")
    assert t.seconds == pytest.approx(model_seconds(state, "all_reduce", nbytes, algo) + proxy_s, rel=1e-6)


def test_gpus_on_a_network_switch_are_their_own_nics():
    """The switch generator links every GPU to one network switch: each GPU is a machine of
    its own whose network port is its NIC, and NCCL's tree across those machines times as
    NCCL's own model says where nothing contends (plus its proxy's posts, channel after
    channel, at each network crossing)."""
    topology = topo("switch", gpus=16)
    cluster = Cluster(topology, 16, simpy.Environment())
    state = nccl_state(cluster)
    assert state.machine.node_count == 16 and state.machine.nics[3] == ["gpu3"]
    (t,) = collective_times(topology, 16, "all_reduce", [4 * MiB], options=TrainingOptions(nccl_algo="tree"))
    assert t.algorithm == "tree"
    proxy_s = proxy_serial_us(state.tuning, "all_reduce", "tree", t.channels, dtree_parent) * 1e-6
    assert t.seconds == pytest.approx(model_seconds(state, "all_reduce", 4 * MiB, "tree") + proxy_s, rel=1e-6)


def test_large_message_busbw_grows_with_nic_rails():
    got = []
    for rails in (1, 2, 4, 8):
        t = topo("multi_node", nodes=2, gpus_per_node=8, nics_per_node=rails,
                 intra_params={"host_model": "AMD EPYC 7742", "nvlink_sharp": False})
        got.append(busbw(t, 16, 4 * GiB))
    assert got[0] < got[1] < got[2] < got[3]
    # each rail carries as much as the first: NCCL spreads its channels over all of them
    assert got[3] / got[0] == pytest.approx(8, rel=0.1)


def test_no_peer_to_peer_stages_in_host_memory_so_all_reduce_and_broadcast_differ():
    # two GPUs under one PCIe switch: with P2P their bytes stay below the switch; without,
    # both directions of an all-reduce cross the switch's one uplink to host memory, while a
    # broadcast uses each direction once (the measured AutoDL box: 4.0 vs 11.1 GB/s busbw)
    box = dict(gpus=2, gpus_per_switch=2, gpu_model="GeForce RTX 2080 Ti", pcie_bandwidth_GBps=15.75)
    p2p, shm = topo("pcie_tree", **box), topo("pcie_tree", p2p=False, **box)
    assert NcclMachine.build(p2p, 2).hop(0, 1).transport == "p2p"
    assert NcclMachine.build(shm, 2).hop(0, 1).transport == "shm"
    assert busbw(p2p, 2, GiB) == pytest.approx(busbw(p2p, 2, GiB, op="broadcast"), rel=0.02)
    assert busbw(shm, 2, GiB) == pytest.approx(busbw(shm, 2, GiB, op="broadcast") / 2, rel=0.02)
    assert busbw(shm, 2, GiB) < busbw(p2p, 2, GiB) / 2
    # the paper's box (through the root complex): NCCL uses SHM even for P2P-capable GPUs there
    root = topo("pcie_tree", gpus=2, pcie_bandwidth_GBps=15.75)
    assert NcclMachine.build(root, 2).hop(0, 1).transport == "shm"


def test_host_memory_bandwidth_is_shared_by_staged_copies():
    slow = dict(gpus=4, gpus_per_switch=0, pcie_bandwidth_GBps=15.75, p2p=False)
    free = busbw(topo("pcie_tree", **slow), 4, GiB)
    # 4 ring hops, each written to and read from DRAM: 8 x the hop rate
    capped = busbw(topo("pcie_tree", host_dram_bandwidth_GBps=20.0, **slow), 4, GiB)
    assert capped == pytest.approx(20.0 / 8, rel=0.02) and capped < free


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_ring_hops_carry_what_the_ring_schedule_moves(p):
    # the flow model's per-hop bytes (bus_factor x n) are the ring schedule's transfers summed
    count = 840
    schedule = build_schedule("nccl", p, count)
    moved = {}
    for step in schedule.steps:
        for s, d, lo, hi in zip(step.src, step.dst, step.lo, step.hi):
            moved[(int(s), int(d))] = moved.get((int(s), int(d)), 0) + int(hi - lo)
    assert sorted(moved) == sorted(ring_order_hops(tuple(range(p)), "all_reduce"))
    assert set(moved.values()) == {round(count * bus_factor("all_reduce", p))}


def test_nccl_binary_trees_match_trees_cc():
    # the illustration in NVIDIA/nccl src/graph/trees.cc for 14 ranks
    assert [btree_parent(14, r) for r in (0, 8, 4, 12, 2, 6, 10, 13, 1, 3, 9, 11)] == \
        [-1, 0, 8, 8, 4, 4, 12, 12, 2, 2, 10, 10]
    # the second tree is the mirror (even counts) or the shift (odd counts)
    assert dtree_parent(14, 13 - 8, 1) == 13 - 0 and dtree_parent(13, 1, 1) == -1


@pytest.mark.parametrize("nodes,gpus", [(1, 4), (2, 8), (3, 8), (5, 2), (8, 1)])
def test_tree_channels_span_every_rank(nodes, gpus):
    t = topo("multi_node", nodes=nodes, gpus_per_node=gpus)
    machine = NcclMachine.build(t, nodes * gpus)
    for channel in (0, machine.ring.channels):  # one channel of each of the two trees
        edges = tree_edges(machine, channel)
        assert len(edges) == nodes * gpus - 1
        parent = dict(edges)
        for r in range(nodes * gpus):  # every rank reaches the root
            seen = set()
            while r in parent:
                assert r not in seen
                seen.add(r)
                r = parent[r]


def test_lock_step_channels_are_few_flows_even_on_1024_gpus():
    t = topo("multi_node", nodes=128, gpus_per_node=8)
    cluster = Cluster(t, 1024, simpy.Environment())
    chosen = plan(cluster, nccl_state(cluster), "all_reduce", 256 * MiB)
    assert chosen.choice.algorithm in ("ring", "tree")
    assert len(chosen.flows) <= chosen.choice.channels <= 64
    assert np.isfinite(chosen.latency_s) and chosen.latency_s > 0


@pytest.mark.parametrize("generator,params,gpus,algo,proto", [
    ("multi_node", {"nodes": 3, "gpus_per_node": 4}, 12, "tree", None),
    ("multi_node", {"nodes": 3, "gpus_per_node": 4}, 12, "ring", "LL"),
    ("multi_node", {"nodes": 2, "intra": "dgx1"}, 16, "ring", None),
    ("pcie_tree", {"gpus": 4, "gpus_per_switch": 2, "p2p": False}, 4, "ring", None),  # SHM through DRAM
])
def test_channel_flows_are_every_hop_of_every_channel_summed(generator, params, gpus, algo, proto):
    """The plan's flows against the channels summed one hop at a time: each hop's links and
    staging memory, and its sender's kernels; channels over the same loads are one flow."""
    cluster = Cluster(topo(generator, **params), gpus, simpy.Environment())
    state = nccl_state(cluster)
    chosen = plan(cluster, state, "all_reduce", 64 * MiB, algo, proto)
    machine, c = state.machine, chosen.choice
    assert c.algorithm == algo
    ring = machine.ring
    expected: dict[tuple, int] = {}
    for channel in range(c.channels):
        if algo == "tree":
            nics = (ring.nics[channel % len(ring.nics)][0],) * 2 if ring.nics else None
            hops = [h for child, parent in tree_edges(machine, channel) for h in ((child, parent), (parent, child))]
        else:
            nic_in, nic_out = ring.nics[channel % len(ring.nics)] if ring.nics else (0, 0)
            nics = (nic_out, nic_in)
            hops = ring_order_hops(ring.orders[channel % len(ring.orders)], "all_reduce")
        loads: dict[int, float] = {}
        for a, b in hops:
            resources, weights = _hop_loads(cluster, machine, WIRE_BYTES_PER_DATA_BYTE[c.protocol],
                                            machine.cross_hop(a, b, nics), 1.0)
            kernel = int(cluster.kernel_resource[a])
            if kernel >= 0 and _kernel_weight(chosen.kernel_GBps) > 0:
                resources, weights = resources + [kernel], weights + [_kernel_weight(chosen.kernel_GBps)]
            for r, w in zip(resources, weights):
                loads[r] = loads.get(r, 0.0) + w
        key = tuple(sorted((r, round(w * 1e18)) for r, w in loads.items()))
        expected[key] = expected.get(key, 0) + 1
    got = {tuple(zip(f.resources.tolist(), np.round(f.weights * 1e18).astype(np.int64).tolist())): f.channels
           for f in chosen.flows}
    assert got == expected
    assert sum(f.amount for f in chosen.flows) == pytest.approx(
        64 * MiB * (bus_factor("all_reduce", gpus) if algo == "ring" else 1.0))


@pytest.mark.parametrize("p2p", [True, False])
def test_prefetched_hops_leave_nothing_to_search(monkeypatch, p2p):
    """prefetch finds, in one batch, every route the hops then ask for one by one: each hop's
    own, its sender's routes to the ranks of its machine and, for a hop staged in the
    receiver's host memory (no peer-to-peer), the routes through that host. The hops are
    those worked out without it."""
    from gansim.topology.graph import Topology

    def build():
        return NcclMachine.build(topo("multi_node", nodes=3, gpus_per_node=4, intra="pcie_tree",
                                      intra_params={"gpus_per_switch": 2, "p2p": p2p}), 12)

    hops = [(a, b, None) for a in range(12) for b in range(12) if a != b]
    expected = {(a, b): build().cross_hop(a, b) for a, b, _ in hops}
    machine = build()
    machine.prefetch(hops)
    asked: list = []
    routes = Topology.routes

    def searched(self, pairs):
        asked.extend(p for p in pairs if p not in self._routes and p[0] != p[1])
        return routes(self, pairs)

    monkeypatch.setattr(Topology, "routes", searched)
    assert {(a, b): machine.cross_hop(a, b) for a, b, _ in hops} == expected
    assert asked == []
    assert any(hop.transport == "shm" for hop in expected.values())  # (through the host bridge, or no P2P at all)


def test_with_fewer_nics_than_gpus_the_tree_beats_the_ring_bound():
    """Two machines of 8 NVLink A100s with four 100 Gb/s NICs each. search.cc holds a tree's
    paths to a NIC to bwInter and its GPU-to-GPU paths to bwIntra, and pass 2 raises bwIntra
    up to twice bwInter ("increase bwIntra for trees"): on two machines tuning.cc rates the
    tree by bwIntra, so NCCL's model prefers it for large all-reduces. A ring sends all of
    2 (n-1)/n of the buffer through the four NICs, so its busbw cannot pass their 50 GB/s;
    the tree sends each byte across once each way, and does."""
    t = topo("multi_node", nodes=2, gpus_per_node=8, nics_per_node=4, nic_bandwidth_GBps=12.5,
             intra_params={"gpu_model": "A100-SXM4-80GB", "nvlink_bandwidth_GBps": 300.0, "nvlink_sharp": False})
    machine = NcclMachine.build(t, 16)
    assert machine.tree.bw_intra == 2 * machine.tree.bw_inter
    tuning = tune(machine)
    assert choose(tuning, "all_reduce", 1 << 30).algorithm == "tree"
    ring_bound = 4 * 12.5
    assert busbw(t, 16, 1 << 30) > ring_bound
    assert busbw(t, 16, 1 << 30, nccl_algo="ring") <= ring_bound


@pytest.mark.parametrize("generator", ["nvswitch", "fully_connected"])
def test_ring_search_of_a_machine_of_many_gpus_goes_deeper_than_pythons_recursion_limit(generator):
    """search.cc's depth-first ring search is as deep as its steps: a ring through 128 GPUs
    of one machine, then the next channel as deep again, is thousands of calls (a
    RecursionError when each was a Python call). Every channel found is a ring through
    every GPU, each hop a direct link."""
    topology = topo(generator, gpus=128)
    ring = NcclMachine.build(topology, 128).ring
    assert ring.channels >= 2
    for order in ring.orders:
        assert sorted(order) == list(range(128))
        names = [topology.ranks[r] for r in order]
        assert all(topology.has_link(a, b) or generator == "nvswitch" for a, b in zip(names, names[1:] + names[:1]))


def test_nccls_view_of_a_machine_searches_routes_once_per_rank_not_per_pair(monkeypatch):
    """Rings and path types look at every pair of a machine's ranks: the routes out of each
    rank to its machine are found in one search of the topology (Topology.routes), where a
    search per pair made over 4,000 for 64 GPUs; and they are the routes found one at a time."""
    from gansim.topology.graph import Topology
    searches = []
    real = Topology._search_routes

    def counted(self, missing):
        searches.append(len(missing))
        return real(self, missing)

    monkeypatch.setattr(Topology, "_search_routes", counted)
    topology = topo("pcie_tree", gpus=64)
    machine = NcclMachine.build(topology, 64)
    ring = machine.ring
    assert ring.channels >= 1 and len(searches) <= 3 * 64  # and to the host, for paths through it
    alone = topo("pcie_tree", gpus=64)
    names = topology.ranks
    for a, b in [(0, 1), (5, 63), (63, 0), (17, 40)]:
        assert topology.route(names[a], names[b]).links.tolist() == alone.route(names[a], names[b]).links.tolist()
