"""The `nccl` algorithm: what NCCL runs for a collective of n bytes on the run's machine,
played on the flow network.

1. NCCL's view of the machine (gansim/collectives/nccl_topology.py): its channels (rings in
   parallel; across machines each leaves and enters through a NIC, the channels spread over
   all NICs), its tree, NVLS where the NVSwitch reduces, P2P or SHM per GPU pair.
2. NCCL's choice (gansim/collectives/nccl_tuning.py): algorithm and protocol by its own
   tuning model, and how many channels this size runs on.
3. The flow model plays it. NCCL pipelines every channel, so in steady state all the links of
   a channel carry its bytes at once, at the rate of the channel's slowest link: a channel is
   ONE flow whose route is every link it crosses, each weighted by how many of its hops cross
   it, the protocol's bytes on the wire per byte of data (device.h: an LL line carries 8 bytes
   of data in 16, an LL128 line 120 in 128) over NCCL's efficiency on that kind of link. The
   flow also crosses each GPU's collective kernels, weighted by 1 / what NCCL's tuning model
   says the kernels move for this algorithm and protocol on the channels in use (its per-GPU
   and per-channel caps: llMaxBw, perChMaxRingLL128Bw, perChMaxTreeBw, the tree factors and
   nvlsEfficiency). Channels with the same links are one flow; all start together after
   NCCL's latency for the algorithm (base + per-hop, tuning.cc), so a collective on 1,024 GPUs
   is a handful of flows and one event, and still shares links max-min fairly with everything
   else on the machine (other channels, other collectives, host-to-device copies).

Without contention the time is NCCL's own estimate; with it, slower.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gansim.collectives.closed_forms import bus_factor
from gansim.collectives.nccl_topology import NcclMachine, link_efficiency, shm_fraction
from gansim.collectives.nccl_tuning import (
    LL,
    LL128,
    LL_RING_FACTOR,
    NVLS_EFFICIENCY,
    SIMPLE,
    Choice,
    Tuning,
    algo_latency_us,
    arch_index,
    choose,
    tree_correction,
    tune,
)
from gansim.network.cluster import Cluster
from gansim.network.engine import COMMUNICATION, DELAY, FLOW, SYNC, TaskGraph

NCCL = "nccl"
# device.h: "union ncclLLFifoLine" holds data1, flag1, data2, flag2 (4 bytes each): 8 of every
# 16 bytes are data; NCCL_LL128_LINEELEMS 16 x 8 bytes with NCCL_LL128_DATAELEMS 15: 120 of 128
WIRE_BYTES_PER_DATA_BYTE = {LL: 2.0, LL128: 128.0 / 120.0, SIMPLE: 1.0}


@dataclass
class NcclState:
    """NCCL's view of one run's machine and its tuning table (computed once per run)."""

    machine: NcclMachine
    tuning: Tuning
    plans: dict[tuple, "Plan"] = field(default_factory=dict)


def nccl_state(cluster: Cluster) -> NcclState:
    machine = NcclMachine.build(cluster.topology, cluster.ranks)
    return NcclState(machine, tune(machine))


@dataclass(frozen=True)
class ChannelFlow:
    """One flow of the plan: channels that cross the same resources with the same weights."""

    amount: float  # bytes of data on each of its hops (the sum over its channels)
    resources: np.ndarray
    weights: np.ndarray
    channels: int


@dataclass(frozen=True)
class Plan:
    coll: str
    nbytes: float
    choice: Choice
    latency_s: float
    flows: tuple[ChannelFlow, ...]
    kernel_GBps: float  # what each GPU's kernels move (NCCL's figure for this choice)


def plan(cluster: Cluster, state: NcclState, coll: str, nbytes: float, algo: str | None = None,
         proto: str | None = None) -> Plan:
    """What NCCL runs for this collective (cached per size)."""
    key = (coll, float(nbytes), algo, proto)
    found = state.plans.get(key)
    if found is None:
        found = state.plans[key] = _plan(cluster, state, coll, nbytes, algo, proto)
    return found


def _plan(cluster: Cluster, state: NcclState, coll: str, nbytes: float, algo: str | None,
          proto: str | None) -> Plan:
    machine, tuning = state.machine, state.tuning
    choice = choose(tuning, coll, nbytes, algo, proto)
    a, p = choice.algorithm, choice.protocol
    entry = tuning.entry(coll, a, p)
    latency_us = algo_latency_us(tuning, coll, a, p, nbytes)
    fraction = choice.channels / machine.comm_channels if a in ("ring", "tree") else 1.0
    if a == "ring":
        kernels = _ring_kernels(state, coll, p, fraction)
        flows = _ring_flows(cluster, machine, coll, nbytes, choice, kernels)
    elif a == "tree":
        # NCCL's bus bandwidth for a tree, with its correction at medium sizes (tuning.cc)
        kernels = entry.bandwidth_GBps / 0.5 * fraction * tree_correction(coll, a, p, nbytes)
        flows = _tree_flows(cluster, machine, nbytes, choice, kernels)
    else:
        kernels = entry.bandwidth_GBps  # algorithm bandwidth: NVLS flows carry the buffer once
        flows = _nvls_flows(cluster, machine, coll, nbytes, a, kernels)
    return Plan(coll, nbytes, choice, latency_us * 1e-6, flows, kernels)


def _ring_kernels(state: NcclState, coll: str, proto: str, fraction: float) -> float:
    """What a GPU's ring kernels move, GB/s of its outgoing data (NCCL's bus bandwidth),
    when that limits: LL at NCCL's per-GPU llMaxBw and LL128 at its per-channel
    perChMaxRingLL128Bw (tuning.cc; their wire overhead is on the links), both on the
    channels in use; Simple has no such cap in NCCL's model, so only a message on fewer
    channels than the communicator's is held to their share of NCCL's graph bandwidth
    (NCCL 2.18's ncclTopoGetAlgoTime scaled bw by nChannels / comm->nChannels)."""
    machine, tuning = state.machine, state.tuning
    graph_bus = machine.ring.channels * (machine.ring.bw_intra if machine.node_count <= 2 else machine.ring.bw_inter)
    if proto == LL:
        return min(tuning.ll_max_bw, fraction * graph_bus * LL_RING_FACTOR)
    if proto == LL128:
        return fraction * machine.ring.channels * tuning.per_channel_max_ring_ll128_bw
    return fraction * graph_bus if fraction < 1 else float("inf")


class _Loads:
    """Resources and weights of one channel flow, accumulated hop by hop. `hops` keeps what a
    hop adds, for the other channels of the same plan that cross it too."""

    def __init__(self, cluster: Cluster, machine: NcclMachine, proto: str, kernels_GBps: float,
                 hops: dict[tuple, tuple[list[int], list[float]]] | None = None):
        self.cluster, self.machine = cluster, machine
        self.wire = WIRE_BYTES_PER_DATA_BYTE[proto]
        self.kernel_weight = 0.0 if kernels_GBps == float("inf") else 1.0 / (kernels_GBps * 1e9)
        self.resources: list[int] = []
        self.weights: list[float] = []
        self.topology = cluster.topology
        self.hops = {} if hops is None else hops

    def add_hop(self, sender: int, hop, share: float = 1.0, kernels: bool = True) -> None:
        """A hop's links (and staging memory) at `share` of the flow's rate, and (`kernels`)
        the sender's kernels moving it."""
        key = (id(hop), sender, share, kernels)
        found = self.hops.get(key)
        if found is None:
            found = self.hops[key] = self._hop_loads(sender, hop, share, kernels)
        self.resources.extend(found[0])
        self.weights.extend(found[1])

    def _hop_loads(self, sender: int, hop, share: float, kernels: bool) -> tuple[list[int], list[float]]:
        resources: list[int] = []
        weights: list[float] = []
        # staged through host memory, NCCL's SHM gets only part of the PCI path (nccl#406)
        slower = 1.0 / shm_fraction(hop.path_type) if hop.transport == "shm" else 1.0
        for link in hop.links:
            resources.append(link)
            weights.append(share * self.wire * slower / link_efficiency(self.topology.link_kinds[link],
                                                                         self.machine.capability))
        if hop.memory is not None:
            resources.append(self.cluster.memory_resource[hop.memory])
            weights.append(share * 2.0 * self.wire)  # written, then read back
        if kernels:
            self._kernels(sender, share, resources, weights)
        return resources, weights

    def add_kernels(self, rank: int, share: float = 1.0) -> None:
        self._kernels(rank, share, self.resources, self.weights)

    def _kernels(self, rank: int, share: float, resources: list[int], weights: list[float]) -> None:
        kernel = int(self.cluster.kernel_resource[rank])
        if kernel >= 0 and self.kernel_weight > 0:
            resources.append(kernel)
            weights.append(share * self.kernel_weight)

    def merged(self) -> tuple[np.ndarray, np.ndarray]:
        res = np.asarray(self.resources, dtype=np.int64)
        w = np.asarray(self.weights, dtype=float)
        used, inverse = np.unique(res, return_inverse=True)
        return used, np.bincount(inverse, weights=w, minlength=used.size)


def _group(flows: list[tuple[float, np.ndarray, np.ndarray]]) -> tuple[ChannelFlow, ...]:
    """Channels over the same resources with the same weights move in lock-step: one flow."""
    groups: dict[bytes, list] = {}
    for amount, res, w in flows:
        key = res.tobytes() + np.round(w * 1e18).tobytes()
        if key in groups:
            groups[key][0] += amount
            groups[key][3] += 1
        else:
            groups[key] = [amount, res, w, 1]
    # a flow of m lock-step channels moves m times the bytes at m times the rate: same weights
    return tuple(ChannelFlow(a, r, w, c) for a, r, w, c in groups.values())


def ring_order_hops(order: tuple[int, ...], coll: str, root: int = 0) -> list[tuple[int, int]]:
    """The (sender, receiver) hops of one ring channel: every hop of the ring, but a
    broadcast's chain ends before it would send back to its root."""
    n = len(order)
    hops = [(order[i], order[(i + 1) % n]) for i in range(n)]
    if coll == "broadcast":
        hops = [h for h in hops if h[1] != root]
    return hops


def _ring_flows(cluster: Cluster, machine: NcclMachine, coll: str, nbytes: float, choice: Choice,
                kernels_GBps: float) -> tuple[ChannelFlow, ...]:
    graph = machine.ring
    per_hop = nbytes * bus_factor(coll, machine.ranks) / choice.channels  # what each ring hop carries
    hops = []
    for c in range(choice.channels):
        nic_in, nic_out = graph.nics[c % len(graph.nics)] if graph.nics else (0, 0)
        hops += [(a, b, (nic_out, nic_in)) for a, b in ring_order_hops(graph.orders[c % len(graph.orders)], coll)]
    machine.prefetch(hops)
    flows = []
    seen: dict[tuple, tuple[list[int], list[float]]] = {}
    for c in range(choice.channels):
        order = graph.orders[c % len(graph.orders)]
        nic_in, nic_out = graph.nics[c % len(graph.nics)] if graph.nics else (0, 0)
        loads = _Loads(cluster, machine, choice.protocol, kernels_GBps, seen)
        for a, b in ring_order_hops(order, coll):
            loads.add_hop(a, machine.cross_hop(a, b, (nic_out, nic_in)))
        res, w = loads.merged()
        flows.append((per_hop, res, w))
    return _group(flows)


def tree_edges(machine: NcclMachine, channel: int) -> list[tuple[int, int]]:
    """The (child, parent) edges of one tree channel: inside each machine a chain in the
    channel's ring order (its head first), across machines NCCL's double binary tree over the
    heads (trees.cc ncclGetDtree; connect.cc: the first ring.channels channels use the first
    tree, their duplicates the second)."""
    ring = machine.ring
    order = ring.orders[channel % len(ring.orders)]
    bounds = np.cumsum([0] + [len(m) for m in machine.nodes]).tolist()
    per = [list(order[bounds[k]:bounds[k + 1]]) for k in range(machine.node_count)]
    edges = [(chain[i + 1], chain[i]) for chain in per for i in range(len(chain) - 1)]
    which = 0 if channel < ring.channels else 1
    for node in range(machine.node_count):
        parent = dtree_parent(machine.node_count, node, which)
        if parent >= 0:
            edges.append((per[node][0], per[parent][0]))
    return edges


def btree_parent(nranks: int, rank: int) -> int:
    """trees.cc ncclGetBtree: the parent of `rank` in NCCL's binary tree (-1 for the root)."""
    if rank == 0:
        return -1
    bit = 1
    while bit < nranks and not (bit & rank):
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return rank ^ bit if up >= nranks else up


def dtree_parent(nranks: int, rank: int, tree: int) -> int:
    """trees.cc ncclGetDtree: the first tree is the binary tree, the second its mirror (even
    counts) or its shift by one (odd counts)."""
    if tree == 0:
        return btree_parent(nranks, rank)
    if nranks % 2 == 1:
        up = btree_parent(nranks, (rank - 1 + nranks) % nranks)
        return -1 if up == -1 else (up + 1) % nranks
    up = btree_parent(nranks, nranks - 1 - rank)
    return -1 if up == -1 else nranks - 1 - up


def _tree_flows(cluster: Cluster, machine: NcclMachine, nbytes: float, choice: Choice,
                kernels_GBps: float) -> tuple[ChannelFlow, ...]:
    per_edge = nbytes / choice.channels  # reduced up, then broadcast down, on every edge
    ring = machine.ring
    edges = [tree_edges(machine, c) for c in range(choice.channels)]
    machine.prefetch([(x, y, (ring.nics[c % len(ring.nics)][0],) * 2 if ring.nics else None)
                      for c in range(choice.channels) for child, parent in edges[c]
                      for x, y in ((child, parent), (parent, child))])
    flows = []
    seen: dict[tuple, tuple[list[int], list[float]]] = {}
    for c in range(choice.channels):
        nic = (ring.nics[c % len(ring.nics)][0],) * 2 if ring.nics else None  # the chain head's NIC
        loads = _Loads(cluster, machine, choice.protocol, kernels_GBps, seen)
        for child, parent in edges[c]:
            loads.add_hop(child, machine.cross_hop(child, parent, nic))
            loads.add_hop(parent, machine.cross_hop(parent, child, nic))
        res, w = loads.merged()
        flows.append((per_edge, res, w))
    return _group(flows)


def _nvls_flows(cluster: Cluster, machine: NcclMachine, coll: str, nbytes: float, algo: str,
                kernels_GBps: float) -> tuple[ChannelFlow, ...]:
    """NVLS: each GPU reduces its 1/p of the buffer in the switch (multimem.ld_reduce reads
    every GPU's copy of it) and multicasts the result (multimem.st): per GPU, its link to the
    switch carries n + n/p each way for an all-reduce (n/p + ... for all-gather and
    reduce-scatter: (p-1)/p of n one way, n/p the other). NVLS-Tree adds, per machine, a
    double binary tree over the machines for each GPU's share, through that GPU's NIC."""
    topo = cluster.topology
    loads = _Loads(cluster, machine, SIMPLE, kernels_GBps)
    from_nvls = 1.0 / _nvls_efficiency(machine)
    for members in machine.nodes:
        p = len(members)
        up, down = (1 + 1 / p, 1 + 1 / p) if coll == "all_reduce" else (1 / p, 1.0)
        if coll == "reduce_scatter":
            up, down = down, up
        for r in members:
            node = machine.rank_nodes[r]
            for peer in topo.neighbors(node):
                if topo.nodes[peer].kind != "nvswitch":
                    continue
                for link, share in ((topo.link_index(node, peer), up), (topo.link_index(peer, node), down)):
                    loads.resources.append(link)
                    loads.weights.append(share * from_nvls / link_efficiency("nvlink", machine.capability))
            loads.add_kernels(r)
    if algo == "nvls_tree":
        for which in (0, 1):
            for node in range(machine.node_count):
                parent = dtree_parent(machine.node_count, node, which)
                if parent < 0:
                    continue
                mine, theirs = machine.nodes[node], machine.nodes[parent]
                for a, b in zip(mine, theirs):  # NCCL's NVLS-Tree figure already covers the kernels
                    own = machine.nics_of(node, a) or [0]
                    share = 0.5 / len(mine) / len(own)  # each tree half; each GPU 1/ppn, over its NICs
                    for k in own:
                        loads.add_hop(a, machine.cross_hop(a, b, (k, k)), share, kernels=False)
                        loads.add_hop(b, machine.cross_hop(b, a, (k, k)), share, kernels=False)
    res, w = loads.merged()
    return (ChannelFlow(nbytes, res, w, machine.nvls.channels if machine.nvls else 1),)


def _nvls_efficiency(machine: NcclMachine) -> float:
    """tuning.cc nvlsEfficiency for the GPU generation (NVLS exists from Hopper on)."""
    return NVLS_EFFICIENCY[arch_index(machine.capability)] or 1.0


def play(cluster: Cluster, graph: TaskGraph, state: NcclState, entry: np.ndarray, coll: str, nbytes: float,
         label: str, algo: str | None = None, proto: str | None = None) -> np.ndarray:
    """Add a collective as NCCL runs it: every rank joins, NCCL's latency passes, then its
    channels move as flows; every rank leaves when the last flow ends (NCCL's channels
    pipeline in lock-step). Returns, per rank, the task at whose end it leaves."""
    p = cluster.ranks
    chosen = plan(cluster, state, coll, nbytes, algo, proto)
    join = graph.add(DELAY, -1, 0.0, -1, SYNC, f"{label}: join", count=1)
    graph.depend(entry, np.repeat(join, entry.size))
    c = chosen.choice
    latency = graph.add(DELAY, -1, chosen.latency_s, -1, COMMUNICATION,
                        f"{label}: NCCL {c.algorithm}/{c.protocol} latency", count=1)
    graph.depend(join, latency)
    routes = np.array([cluster.weighted_route(f.resources, f.weights) for f in chosen.flows], dtype=np.int64)
    amounts = np.array([f.amount for f in chosen.flows])
    flows = graph.add(FLOW, routes, amounts, -1, COMMUNICATION,
                      f"{label}: NCCL {c.algorithm}/{c.protocol} x {c.channels} channels")
    graph.depend(np.repeat(latency, flows.size), flows)
    done = graph.add(DELAY, -1, 0.0, -1, SYNC, f"{label}: done", count=1)
    graph.depend(flows, np.repeat(done, flows.size))
    return np.repeat(done, p)


def model_seconds(state: NcclState, coll: str, nbytes: float, algo: str | None = None,
                  proto: str | None = None) -> float:
    """NCCL's own estimate of the collective (its tuning model: no contention, no flows)."""
    return choose(state.tuning, coll, nbytes, algo, proto).model_time_us * 1e-6
