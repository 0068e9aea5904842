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

Without contention the time is NCCL's own estimate, plus what its additive model leaves out
(the drain of NVLS's chunk pipeline inside a machine and NVLS-Tree's across machines,
nccl_tuning.pipeline_fill_us; the
proxy threads' network sends, posted channel after channel at every network crossing,
nccl_tuning.proxy_serial_us); with
contention, slower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from gansim.collectives.closed_forms import bus_factor
from gansim.collectives.nccl_topology import Graph, Hop, NcclMachine, link_efficiency, shm_fraction
from gansim.collectives.nccl_versions import arch_row, era_for
from gansim.collectives.nccl_tuning import (
    LL,
    LL128,
    SIMPLE,
    Choice,
    Tuning,
    algo_latency_us,
    choose,
    ll128_cap,
    pipeline_fill_us,
    proxy_serial_us,
    rated_bw,
    ring_ll_bus,
    tree_correction,
    tune,
)
from gansim.core.arrays import content_key, ragged, unique_inverse, unique_pairs
from gansim.network.cluster import Cluster
from gansim.network.engine import COMMUNICATION, DELAY, FLOW, SYNC, TaskGraph
from gansim.topology.graph import Topology

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
    # per plan (its id): the cluster its flows' routes were added to, and their ids
    routes: dict[int, tuple[Cluster, np.ndarray]] = field(default_factory=dict)


def check_settings(topology: Topology, ranks: int, collectives: tuple[str, ...], algo: str | None, proto: str | None,
                   nccl_version: str | None = None, single_process: bool = False) -> None:
    """NcclSettingError where NCCL_ALGO `algo` / NCCL_PROTO `proto` leave one of `collectives`
    on the first `ranks` ranks nothing NCCL runs (what is available does not depend on the
    size): found before a run, as it would be at its first such collective."""
    if algo is None and proto is None:
        return
    tuning = machine_tuning(topology, ranks, nccl_version, single_process)
    for coll in collectives:
        choose(tuning, coll, 1 << 20, algo, proto)


def nccl_state(cluster: Cluster, nccl_version: str | None = None, single_process: bool = False,
               channel_limits: tuple[int | None, int | None] = (None, None)) -> NcclState:
    """NCCL's view of the run's machine, tuned as release `nccl_version` tunes it (None: the
    topology's own `nccl_version`, else the newest release the model follows), its
    communicators made by one process for all the GPUs with `single_process`, their channels
    within (NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS) `channel_limits`."""
    tuning = machine_tuning(cluster.topology, cluster.ranks, nccl_version, single_process, channel_limits)
    return NcclState(tuning.machine, tuning)


def machine_tuning(topology: Topology, ranks: int, nccl_version: str | None = None,
                   single_process: bool = False,
                   channel_limits: tuple[int | None, int | None] = (None, None)) -> Tuning:
    """NCCL's view of the first `ranks` ranks of `topology` and its tuning table, as release
    `nccl_version` (None: the topology's, else the newest followed) makes them."""
    era = era_for(nccl_version or topology.nccl_version)
    machine = NcclMachine.build(topology, ranks, channel_limits=channel_limits, **era.search_rules())
    return tune(machine, era, single_process)


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
    entry = tuning.entry(coll, a, p, choice.listed)
    # NCCL's latency, and the drain of the chunk pipeline its additive model leaves out
    latency_us = algo_latency_us(tuning, coll, a, p, nbytes, played=True, listed=choice.listed) + pipeline_fill_us(
        tuning, coll, a, nbytes, entry.bandwidth_GBps)
    # and the proxy threads' sends, posted one channel after another at every network crossing
    latency_us += proxy_serial_us(tuning, coll, a, choice.channels, dtree_parent)
    # the graph's bandwidth is what NCCL's own channel count carries (NCCL_MIN_NCHANNELS and
    # NCCL_MAX_NCHANNELS change the channels, not what one carries)
    fraction = choice.channels / machine.searched_comm_channels if a in ("ring", "tree", "pat") else 1.0
    if a == "ring":
        kernels = _ring_kernels(state, coll, p, fraction)
        flows = _ring_flows(cluster, machine, coll, nbytes, choice, kernels)
    elif a == "pat":
        # Simple on the tree graph: like a ring's Simple
        kernels = _simple_kernels(machine, machine.tree, fraction)
        flows = _pat_flows(cluster, machine, nbytes, choice, kernels)
    elif a == "tree":
        # NCCL's bus bandwidth for a tree, with its correction at medium sizes (tuning.cc)
        kernels = entry.bandwidth_GBps / 0.5 * fraction * tree_correction(tuning.era, coll, a, p, nbytes)
        flows = _tree_flows(cluster, machine, nbytes, choice, kernels)
    else:
        kernels = entry.bandwidth_GBps  # algorithm bandwidth: NVLS flows carry the buffer once
        flows = _nvls_flows(cluster, machine, coll, nbytes, a, kernels, nvls_efficiency(state))
    return Plan(coll, nbytes, choice, latency_us * 1e-6, flows, kernels)


def _ring_kernels(state: NcclState, coll: str, proto: str, fraction: float) -> float:
    """What a GPU's ring kernels move, GB/s of its outgoing data (NCCL's bus bandwidth),
    when that limits: LL at NCCL's per-GPU llMaxBw and LL128 at its per-channel
    perChMaxRingLL128Bw (tuning.cc; their wire overhead is on the links), both on the
    channels in use; Simple has no such cap in NCCL's model, so only a message on fewer
    channels than the communicator's is held to their share of NCCL's graph bandwidth
    (NCCL 2.18's ncclTopoGetAlgoTime scaled bw by nChannels / comm->nChannels)."""
    machine, tuning = state.machine, state.tuning
    graph_bus = machine.ring.channels * rated_bw(machine.ring, machine.node_count)
    if proto == LL:
        return ring_ll_bus(tuning.era, coll, machine.node_count, tuning.ll_max_bw, fraction * graph_bus)
    if proto == LL128:
        return fraction * ll128_cap(tuning.era, coll, machine.ring.channels, tuning.per_channel_max_ring_ll128_bw)
    return _simple_kernels(machine, machine.ring, fraction)


def _simple_kernels(machine: NcclMachine, graph: Graph, fraction: float) -> float:
    """Simple has no cap in NCCL's model: only a message on fewer channels than the
    communicator's is held to their share of the graph's bandwidth."""
    return fraction * graph.channels * rated_bw(graph, machine.node_count) if fraction < 1 else float("inf")


def _kernel_weight(kernels_GBps: float) -> float:
    """What a byte of the flow weighs on a GPU's kernels (none when they do not limit)."""
    return 0.0 if kernels_GBps == float("inf") else 1.0 / (kernels_GBps * 1e9)


def _hop_loads(cluster: Cluster, machine: NcclMachine, wire: float, hop: Hop,
               share: float) -> tuple[list[int], list[float]]:
    """A hop's links, and the host memory SHM stages in, at `share` of its flow's rate."""
    resources: list[int] = []
    weights: list[float] = []
    # staged through host memory, NCCL's SHM gets only part of the PCI path (nccl#406)
    slower = 1.0 / shm_fraction(hop.path_type) if hop.transport == "shm" else 1.0
    kinds = cluster.topology.link_kinds
    for link in hop.links:
        resources.append(link)
        weights.append(share * wire * slower / link_efficiency(kinds[link], machine.capability))
    if hop.memory is not None:
        resources.append(cluster.memory_resource[hop.memory])
        weights.append(share * 2.0 * wire)  # written, then read back
    return resources, weights


class _Loads:
    """Resources and weights of one flow, accumulated hop by hop (NVLS; channels of rings
    and trees are summed by _channel_loads)."""

    def __init__(self, cluster: Cluster, machine: NcclMachine, proto: str, kernels_GBps: float):
        self.cluster, self.machine = cluster, machine
        self.wire = WIRE_BYTES_PER_DATA_BYTE[proto]
        self.kernel_weight = _kernel_weight(kernels_GBps)
        self.resources: list[int] = []
        self.weights: list[float] = []

    def add_hop(self, sender: int, hop: Hop, share: float = 1.0, kernels: bool = True) -> None:
        """A hop's links (and staging memory) at `share` of the flow's rate, and (`kernels`)
        the sender's kernels moving it."""
        resources, weights = _hop_loads(self.cluster, self.machine, self.wire, hop, share)
        self.resources.extend(resources)
        self.weights.extend(weights)
        if kernels:
            self.add_kernels(sender, share)

    def add_kernels(self, rank: int, share: float = 1.0) -> None:
        kernel = int(self.cluster.kernel_resource[rank])
        if kernel >= 0 and self.kernel_weight > 0:
            self.resources.append(kernel)
            self.weights.append(share * self.kernel_weight)

    def merged(self) -> tuple[np.ndarray, np.ndarray]:
        return _merged(np.asarray(self.resources, dtype=np.int64), np.asarray(self.weights, dtype=float))


def _merged(resources: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each resource once, with the sum of its weights (added in the order they come)."""
    used, inverse = unique_inverse(resources)
    return used, np.bincount(inverse, weights=weights, minlength=used.size)


# a channel: its hops' senders and receivers (rank arrays), and the NICs (out of the
# sender's machine, into the receiver's) its hops between machines take, None for each
# rank's first own NIC
Channel = tuple[np.ndarray, np.ndarray, "tuple[int, int] | None"]


def _channel_loads(cluster: Cluster, machine: NcclMachine, proto: str, kernels_GBps: float,
                   channels: list[Channel]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per channel, the resources it crosses and their weights: each hop's links and staging
    memory at the flow's rate, and the sender's kernels moving it. A hop that several
    channels (or one channel twice) take is worked out once; the channels then gather
    their hops' loads in hop order, so every sum adds its terms in the order the hops come."""
    wire = WIRE_BYTES_PER_DATA_BYTE[proto]
    # the hops' loads do not depend on the message size: collectives of several sizes (a
    # GAN's DDP buckets) on the same channels and protocol share them, and their sums
    key = (wire, tuple((content_key(s, r), nics) for s, r, nics in channels))
    kernel_weight = _kernel_weight(kernels_GBps)
    summed = machine.channel_loads.get((key, kernel_weight))
    if summed is not None:
        return summed
    table = machine.channel_hops.get(key)
    if table is None:
        table = machine.channel_hops[key] = _hop_table(cluster, machine, wire, channels)
    senders, inverse, lengths, starts, all_resources, all_weights = table
    kernels = np.asarray(cluster.kernel_resource, dtype=np.int64)[senders]
    out = []
    first = 0
    for s, _, _ in channels:
        ids, sent = inverse[first:first + len(s)], kernels[first:first + len(s)]
        first += len(s)
        count = lengths[ids]
        take = np.repeat(starts[ids] - (np.cumsum(count) - count), count) + np.arange(count.sum())
        res, w = all_resources[take], all_weights[take]
        if kernel_weight > 0:
            sent = sent[sent >= 0]
            res = np.concatenate([res, sent])
            w = np.concatenate([w, np.full(sent.size, kernel_weight)])
        out.append(_merged(res, w))
    machine.channel_loads[(key, kernel_weight)] = out
    return out


def _hop_table(cluster: Cluster, machine: NcclMachine, wire: float, channels: list[Channel]) -> tuple:
    """Every distinct hop of the channels, its resources and weights laid end to end:
    (senders, each channel hop's distinct hop, per distinct hop its count of resources and
    where they start, the resources, the weights)."""
    choices = list(dict.fromkeys(nics for _, _, nics in channels))
    senders = np.concatenate([s for s, _, _ in channels]).astype(np.int64)
    receivers = np.concatenate([r for _, r, _ in channels]).astype(np.int64)
    choice = np.concatenate([np.full(len(s), choices.index(nics) + 1) for s, _, nics in channels])
    inside = machine.rank_machine[senders] == machine.rank_machine[receivers]
    choice[inside] = 0  # a hop inside a machine crosses no NIC
    width = len(choices) + 1
    distinct, inverse = np.unique((senders * machine.ranks + receivers) * width + choice, return_inverse=True)
    pair, which = np.divmod(distinct, width)
    nics_by_choice = [None] + choices
    src, dst = np.divmod(pair, machine.ranks)
    lengths, all_resources, all_weights = _copied_hop_loads(cluster, machine, wire, src, dst, which, nics_by_choice)
    starts = np.cumsum(lengths) - lengths
    return senders, inverse, lengths, starts, all_resources, all_weights


def _each_hop_loads(cluster: Cluster, machine: NcclMachine, wire: float,
                    hops: list[tuple[int, int, tuple[int, int] | None]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every hop's resources and weights (_hop_loads), hop by hop: (per hop its count of
    resources, the resources, the weights) laid end to end."""
    machine.prefetch(hops)
    resources: list[int] = []
    weights: list[float] = []
    lengths = np.empty(len(hops), dtype=np.int64)
    for i, (a, b, nics) in enumerate(hops):
        res, w = _hop_loads(cluster, machine, wire, machine.cross_hop(a, b, nics), 1.0)
        resources += res
        weights += w
        lengths[i] = len(res)
    return lengths, np.asarray(resources, dtype=np.int64), np.asarray(weights, dtype=float)


def _copied_hop_loads(cluster: Cluster, machine: NcclMachine, wire: float, src: np.ndarray, dst: np.ndarray,
                      which: np.ndarray, nics_by_choice: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_each_hop_loads of the hops (src[i], dst[i], nics_by_choice[which[i]]), the same figures
    in the same order, with the hops of machines that copy the first rank's (the topology's
    MachineCopies) taken from that machine's: a hop inside a copy is the first machine's hop
    between the ranks at the same places, its links and host memory moved onto the copy's; a
    hop between machines is the route from its sender to its NIC (the first machine's, moved),
    the route between the NICs, and the route from the NIC to its receiver (moved). Where a
    moved route may differ (MachineCopies.carries) or the machines are not copies, the hop
    is worked out as it is."""
    topo = cluster.topology
    copies = topo.machine_copies
    count = src.size
    slow = np.ones(count, dtype=bool)
    pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (hop, resources, weights), in hop order
    if copies is not None and count:
        position = topo.node_index
        nodes = np.array([position[n] for n in machine.rank_nodes], dtype=np.int64)
        rank_of = np.full(len(position), -1, dtype=np.int64)
        rank_of[nodes] = np.arange(machine.ranks)
        ids = list(topo.nodes)
        links = topo.num_links
        na, nb = nodes[src], nodes[dst]
        ma, mb = copies.node_machine[na], copies.node_machine[nb]
        base = copies.start[copies.template]
        off_a, off_b = copies.start[ma] - base, copies.start[mb] - base
        copied = copies.is_copy[ma] & copies.is_copy[mb]
        memory = np.full(len(position), -1, dtype=np.int64)  # per host node, its memory resource
        for host, res in cluster.memory_resource.items():
            memory[position[host]] = res
        host_of = topo.host_of
        hop_host = np.array([position.get(host_of.get(ids[n], ""), -1) for n in nb.tolist()], dtype=np.int64)
        # ---- hops inside a machine: the first machine's, moved
        one = np.flatnonzero(copied & (ma == mb))
        a0, b0 = rank_of[na[one] - off_a[one]], rank_of[nb[one] - off_b[one]]
        one, a0, b0 = one[(a0 >= 0) & (b0 >= 0)], a0[(a0 >= 0) & (b0 >= 0)], b0[(a0 >= 0) & (b0 >= 0)]
        keys, canon = np.unique(a0 * machine.ranks + b0, return_inverse=True)
        c_res: list[int] = []
        c_w: list[float] = []
        c_len, c_sure, c_host = [], [], []
        for a, b in zip(*(x.tolist() for x in np.divmod(keys, machine.ranks))):
            hop = machine.cross_hop(a, b, None)
            res, w = _hop_loads(cluster, machine, wire, hop, 1.0)
            c_res += res
            c_w += w
            c_len.append(len(res))
            direct = topo.route(machine.rank_nodes[a], machine.rank_nodes[b]).links
            c_sure.append(copies.carries(topo, direct) and copies.carries(topo, np.asarray(hop.links, dtype=np.int64)))
            c_host.append(-1 if hop.memory is None else position[hop.memory] - base)
        if one.size:
            c_len_a, c_sure_a, c_host_a = (np.array(c_len, dtype=np.int64), np.array(c_sure, dtype=bool),
                                           np.array(c_host, dtype=np.int64))
            home = ma[one] == copies.template
            # a staged hop's host: the copy's own, at the same place
            staged = c_host_a[canon] >= 0
            host_moved = np.where(staged, c_host_a[canon] + copies.start[ma[one]], -1)
            ok = home | (c_sure_a[canon] & (~staged | (hop_host[one] == host_moved)))
            one, canon = one[ok], canon[ok]
            slow[one] = False
            c_res_a, c_w_a = np.array(c_res, dtype=np.int64), np.array(c_w, dtype=float)
            c_start = np.cumsum(c_len_a) - c_len_a
            at, owner = ragged(c_start[canon], c_len_a[canon])
            res = c_res_a[at]
            machine_of = ma[one][owner]
            is_link = res < links
            moved_host = memory[np.clip(c_host_a[canon][owner] + copies.start[machine_of], 0, len(position) - 1)]
            pieces.append((one[owner], np.where(is_link, res + copies.link_shift[machine_of], moved_host), c_w_a[at]))
        # ---- hops between machines: out to a NIC, across, in from a NIC
        k_out = np.array([-1 if c is None else c[0] for c in nics_by_choice], dtype=np.int64)[which]
        k_in = np.array([-1 if c is None else c[1] for c in nics_by_choice], dtype=np.int64)[which]
        table = machine.nic_nodes  # per machine of the run, its NICs' node indices (-1 past its last)
        mia, mib = machine.rank_machine[src], machine.rank_machine[dst]
        across = np.flatnonzero(copied & (ma != mb) & (k_out >= 0) & (table[mia, 0] >= 0) & (table[mib, 0] >= 0))
        nic_out = table[mia[across], np.minimum(k_out[across], table.shape[1] - 1)]
        nic_in = table[mib[across], np.minimum(k_in[across], table.shape[1] - 1)]
        good = (k_out[across] < table.shape[1]) & (k_in[across] < table.shape[1]) & (nic_out >= 0) & (nic_in >= 0)
        across, nic_out, nic_in = across[good], nic_out[good], nic_in[good]
        if across.size:
            efficiency = machine.link_efficiencies
            first = _moved_routes(topo, copies, na[across], nic_out, ma[across])
            last = _moved_routes(topo, copies, nic_in, nb[across], mb[across])
            ok = (first[0] >= 0) & (last[0] >= 0)
            across = across[ok]
            slow[across] = False
            m_len, m_links = _routes_between(topo, nic_out[ok], nic_in[ok])
            for (lo, length, flat), hops in (((first[0][ok], first[1][ok], first[2]), across),
                                             ((np.cumsum(m_len) - m_len, m_len, m_links), across),
                                             ((last[0][ok], last[1][ok], last[2]), across)):
                at, owner = ragged(lo, length)
                res = flat[at]
                pieces.append((hops[owner], res, (1.0 * wire * 1.0) / efficiency[res]))
    rest = np.flatnonzero(slow)
    if rest.size:
        hops = [(a, b, nics_by_choice[c]) for a, b, c in zip(src[rest].tolist(), dst[rest].tolist(),
                                                                  which[rest].tolist())]
        lengths, res, w = _each_hop_loads(cluster, machine, wire, hops)
        pieces.append((np.repeat(rest, lengths), res, w))
    owner = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, dtype=np.int64)
    order = np.argsort(owner, kind="stable")  # each hop's pieces in the order they were added
    resources = np.concatenate([p[1] for p in pieces])[order] if pieces else np.zeros(0, dtype=np.int64)
    weights = np.concatenate([p[2] for p in pieces])[order] if pieces else np.zeros(0, dtype=float)
    return np.bincount(owner, minlength=count).astype(np.int64), resources.astype(np.int64), weights


def _routes_between(topo, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The routes from nodes a[i] to b[i] (indices): per pair its count of links, and the
    links end to end; those found without a search all at once (Topology.short_route_links),
    the others one by one."""
    keys, inverse = unique_pairs(a, b)
    count, pair = topo.short_route_links(keys[:, 0], keys[:, 1])
    searched = np.flatnonzero(count == 0)
    if searched.size == 0:
        flat = pair[pair >= 0]  # row by row: each route's links in order
    else:
        links = [pair[k, :c] for k, c in enumerate(count.tolist())]
        ids = list(topo.nodes)
        routes = topo.routes([(ids[u], ids[v]) for u, v in keys[searched].tolist()])
        for k, route in zip(searched.tolist(), routes):
            links[k] = route.links
        count[searched] = [r.links.size for r in routes]
        flat = np.concatenate(links)
    start = np.cumsum(count) - count
    at, owner = ragged(start[inverse], count[inverse])
    return count[inverse], flat[at]


def _moved_routes(topo, copies, a: np.ndarray, b: np.ndarray, machine: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                                                np.ndarray]:
    """Routes between nodes a[i] and b[i] of machine[i] (a copy), each the first machine's
    between the nodes at the same places, moved: (where each starts in the links, its
    count of links; start -1 where the moved route may differ), the links."""
    routes, sure, canon = copies.template_routes(topo, a, b, machine)
    c_len = np.array([r.links.size for r in routes], dtype=np.int64)
    c_links = np.concatenate([r.links for r in routes]) if routes else np.zeros(0, dtype=np.int64)
    c_start = np.cumsum(c_len) - c_len
    home = machine == copies.template
    ok = home | sure[canon]
    length = np.where(ok, c_len[canon], 0)
    at, owner = ragged(c_start[canon], length)
    links = c_links[at] + copies.link_shift[machine[owner]]
    start = np.cumsum(length) - length
    return np.where(ok, start, -1), length, links


def _group(flows: list[tuple[float, np.ndarray, np.ndarray]]) -> tuple[ChannelFlow, ...]:
    """Channels over the same resources with the same weights move in lock-step: one flow."""
    groups: dict[bytes, list] = {}
    for amount, res, w in flows:
        key = content_key(res, np.round(w * 1e18))
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
    channels = []
    for c in map(machine.source_channel, range(choice.channels)):
        nic_in, nic_out = graph.nics[c % len(graph.nics)] if graph.nics else (0, 0)
        pairs = np.array(ring_order_hops(graph.orders[c % len(graph.orders)], coll), dtype=np.int64).reshape(-1, 2)
        channels.append((pairs[:, 0], pairs[:, 1], (nic_out, nic_in)))
    loads = _channel_loads(cluster, machine, choice.protocol, kernels_GBps, channels)
    return _group([(per_hop, res, w) for res, w in loads])


def tree_edges(machine: NcclMachine, channel: int) -> list[tuple[int, int]]:
    """The (child, parent) edges of one tree channel: inside each machine a chain in the
    channel's ring order (its head first), across machines NCCL's double binary tree over the
    heads (trees.cc ncclGetDtree; connect.cc: the first ring.channels channels use the first
    tree, their duplicates the second)."""
    return [tuple(e) for e in _tree_edge_array(machine, channel).tolist()]


def _tree_edge_array(machine: NcclMachine, channel: int) -> np.ndarray:
    """tree_edges as an array of (child, parent) rows."""
    ring = machine.ring
    order = np.asarray(ring.orders[channel % len(ring.orders)], dtype=np.int64)
    sizes = np.array([len(m) for m in machine.nodes], dtype=np.int64)
    heads = np.cumsum(sizes) - sizes  # where each machine's chain starts in the order
    chained = np.ones(order.size, dtype=bool)
    chained[heads] = False  # a chain's head is no one's child inside its machine
    which = 0 if channel < ring.channels else 1
    parents = _dtree_parents(machine.node_count, which)
    up = np.flatnonzero(parents >= 0)
    return np.concatenate([np.stack([order[chained], order[np.flatnonzero(chained) - 1]], axis=1),
                           np.stack([order[heads[up]], order[heads[parents[up]]]], axis=1)]).reshape(-1, 2)


@lru_cache(maxsize=8)
def _dtree_parents(nranks: int, tree: int) -> np.ndarray:
    """dtree_parent of every rank of one of the two trees."""
    return np.array([dtree_parent(nranks, r, tree) for r in range(nranks)], dtype=np.int64)


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


def _head_nic(machine: NcclMachine, channel: int) -> tuple[int, int] | None:
    """The NIC a tree-graph channel's hops between machines take, both ways: the one its ring
    channel enters by (its chain head's); None: each rank's first own NIC."""
    nics = machine.ring.nics
    return (nics[channel % len(nics)][0],) * 2 if nics else None


def _tree_flows(cluster: Cluster, machine: NcclMachine, nbytes: float, choice: Choice,
                kernels_GBps: float) -> tuple[ChannelFlow, ...]:
    per_edge = nbytes / choice.channels  # reduced up, then broadcast down, on every edge
    channels = []
    for c in map(machine.source_channel, range(choice.channels)):
        nic = _head_nic(machine, c)
        edges = _tree_edge_array(machine, c)
        # each edge up (the child sends), then down (the parent sends)
        channels.append((edges.ravel(), edges[:, ::-1].ravel(), nic))
    loads = _channel_loads(cluster, machine, choice.protocol, kernels_GBps, channels)
    return _group([(per_edge, res, w) for res, w in loads])


def pat_exchanges(ranks: int) -> list[tuple[int, int]]:
    """PAT's exchanges (NCCL 2.23 on, one GPU per machine; src/include/collectives.h
    PatAGAlgorithm and PatRSAlgorithm send and receive along dimensions d, to and from the
    peers 2^d ranks away, aggregating what passes through): per dimension, its distance and
    how many of the ranks' blocks cross it, counted as in Bruck's all-gather, which moves
    every block to every rank along the same distances: min(2^d, ranks - 2^d), n - 1 blocks
    in all, as much as a ring moves."""
    out = []
    distance = 1
    while distance < ranks:
        out.append((distance, min(distance, ranks - distance)))
        distance *= 2
    return out


def _pat_flows(cluster: Cluster, machine: NcclMachine, nbytes: float, choice: Choice,
               kernels_GBps: float) -> tuple[ChannelFlow, ...]:
    """PAT's traffic: every rank sends each dimension's blocks to the rank 2^d after it (all
    dimensions at once, as its steps pipeline), on `choice.channels` channels through the
    machine's NICs in turn. `nbytes` is the whole gathered buffer (NCCL's nBytes), a block
    its 1/ranks."""
    ranks = np.arange(machine.ranks, dtype=np.int64)
    block = nbytes / machine.ranks / choice.channels
    channels, amounts = [], []
    for c in map(machine.source_channel, range(choice.channels)):
        nic = _head_nic(machine, c)
        for distance, blocks in pat_exchanges(machine.ranks):
            channels.append((ranks, (ranks + distance) % machine.ranks, nic))
            amounts.append(blocks * block)
    loads = _channel_loads(cluster, machine, SIMPLE, kernels_GBps, channels)
    return _group([(amount, res, w) for amount, (res, w) in zip(amounts, loads)])


def _nvls_flows(cluster: Cluster, machine: NcclMachine, coll: str, nbytes: float, algo: str,
                kernels_GBps: float, efficiency: float) -> tuple[ChannelFlow, ...]:
    """NVLS: each GPU reduces its 1/p of the buffer in the switch (multimem.ld_reduce reads
    every GPU's copy of it) and multicasts the result (multimem.st): per GPU, its link to the
    switch carries n + n/p each way for an all-reduce (n/p + ... for all-gather and
    reduce-scatter: (p-1)/p of n one way, n/p the other). NVLS-Tree adds, per machine, a
    double binary tree over the machines for each GPU's share, through that GPU's NIC."""
    topo = cluster.topology
    loads = _Loads(cluster, machine, SIMPLE, kernels_GBps)
    from_nvls = 1.0 / efficiency
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


def nvls_efficiency(state: NcclState) -> float:
    """tuning.cc nvlsEfficiency for the GPU generation (NVLS exists from Hopper on)."""
    era, machine = state.tuning.era, state.machine
    return era.nvls_efficiency[arch_row(era, machine.capability, machine.max_capability)] or 1.0


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
    known = state.routes.get(id(chosen))
    if known is not None and known[0] is cluster:
        routes = known[1]
    else:  # the plan's flows' routes, once per plan (kept alive in state.plans) and cluster
        routes = np.array([cluster.weighted_route(f.resources, f.weights) for f in chosen.flows], dtype=np.int64)
        state.routes[id(chosen)] = (cluster, routes)
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
