"""NCCL's tuning model: for each collective, algorithm and protocol, a latency (us) and a
bandwidth (GB/s), and the choice among them for a message of n bytes, as NVIDIA/nccl makes it
(src/graph/tuning.cc ncclTopoTuneModel and ncclTopoGetAlgoTime, src/enqueue.cc
topoGetAlgoInfo) in the release a topology or scenario names (`nccl_version`, default the
newest followed, v2.30.7-1): the figures that changed between releases are in
gansim/collectives/nccl_versions.py, one era per change. Every constant is NCCL's, quoted
from those files; none is fitted to measurements.

What NCCL models and gansim keeps: Ring, Tree, NVLS, NVLS-Tree and PAT (all-gather and
reduce-scatter at one GPU per node, from 2.23); the LL, LL128 and Simple protocols. Left
out: CollNet (needs a SHARP network and NCCL_COLLNET_ENABLE, off by default), tuner plugins,
the registered-buffer policy (NCCL_CTA_POLICY_EFFICIENCY), POWER CPUs, and the search's
fallback to a simpler tree on Hopper when no balanced one is found (search.cc "Try a
simpler tree"; a machine of one GPU has that pattern, and its .85 is applied).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache

from gansim.collectives.nccl_topology import PATH_NVB, PATH_NVL, PATH_PIX, PATH_PXB, PATH_PXN, Graph, NcclMachine
from gansim.collectives.nccl_versions import AMPERE, NEWEST, NcclEra, arch_row, table_row
from gansim.core.errors import UserInputError
from gansim.core.nccl_env import ALGORITHM, OPTION, PROTOCOL, VARIABLE, applies, as_environment, enabled, per_collective

ALGORITHMS = ("tree", "ring", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("LL", "LL128", "Simple")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
LL, LL128, SIMPLE = PROTOCOLS

# tuning.cc protocol and algorithm factors on a graph's bandwidth
TREE_LL128_FACTOR_ONE_NODE = 7.0 / 9.0  # "busBw * (nNodes == 1 ? 7.0/9.0 : ...)" in every era
RING_PLATEAU = (1.9, 1.4)  # ncclTopoGetAlgoTime: ring Simple multi-node latency, before / from Ampere
OLD_PLATEAU_BYTES_PER_RANK = 65536 / 16.0  # before 2.18: "nBytes >= nRanks/16.0*65536"
PAT_BASE_US, PAT_PER_RANK_US = 8.0, 2.8  # tuning.cc PAT latency (v2.23.4-1 on)
# getNetOverhead, us: Intel 1.0, AMD 2.0, x3 for Simple
NET_OVERHEAD = {"intel": 1.0, "amd": 2.0}
# comm.h thread thresholds and device.h thread counts (enqueue.cc topoGetAlgoInfo channel tuning)
THREAD_THRESHOLD = {LL: 8, LL128: 8, SIMPLE: 64}
MAX_THREADS = {LL: 512, LL128: 640, SIMPLE: 512}
NCCL_MAX_NTHREADS = 640  # device.h: what NVLS and PAT always run on
WARP_SIZE = 32


def log2i(n: int) -> int:
    """utils.h log2i (log2Down): floor(log2 n), -1 for 0."""
    return int(n).bit_length() - 1


@dataclass(frozen=True)
class Entry:
    latency_us: float  # NCCL's, as its tuning model has it (what it chooses by)
    bandwidth_GBps: float  # NCCL's algorithm bandwidth; 0: not available
    played_latency_us: float = 0.0  # the same with the network hops as played (played_inter_latency)
    played_hop_us: float = 0.0  # one network hop as played
    network_hops: float = 0.0  # how many of them the played latency counts (PAT: a fraction)


@dataclass
class Tuning:
    """comm->latencies and comm->bandwidths for every collective, algorithm and protocol."""

    machine: NcclMachine
    era: NcclEra
    table: dict[tuple[str, str, str], Entry]
    ll_max_bw: float
    per_channel_max_ring_ll128_bw: float
    per_channel_max_tree_bw: float
    per_channel_max_tree_ll128_bw: float
    graphs: dict[str, Graph | None]
    # the communicators were made by one process for all its GPUs (ncclCommInitAll), not one
    # each (ncclCommInitRank): NCCL 2.4's thread threshold follows it (_choose_by_thresholds)
    single_process: bool = False
    # LL128 entries NCCL leaves off by default on this machine (its hardware rule) but runs
    # where NCCL_PROTO names the collective: tuning.cc applies the rule only to protoEnable 2,
    # the value of a row NCCL_PROTO left alone
    ll128_when_listed: dict[tuple[str, str, str], Entry] = field(default_factory=dict)

    def entry(self, coll: str, algo: str, proto: str, listed: bool = False) -> Entry:
        """The table's entry; `listed`: with NCCL_PROTO set for the collective (Choice.listed)."""
        if listed and (coll, algo, proto) in self.ll128_when_listed:
            return self.ll128_when_listed[(coll, algo, proto)]
        return self.table.get((coll, algo, proto), Entry(0.0, 0.0, 0.0))


def _graph_for(machine: NcclMachine, algo: str) -> Graph | None:
    if algo == "ring":
        return machine.ring
    if algo in ("tree", "pat"):  # init.cc: graphs[NCCL_ALGO_PAT] is the tree graph
        return machine.tree
    return machine.nvls


def tune(machine: NcclMachine, era: NcclEra = NEWEST, single_process: bool = False) -> Tuning:
    """tuning.cc ncclTopoTuneModel as the release of `era` has it, with its enable rules
    (LL128 where NCCL enables it by default; NVLS-Tree only across nodes; NVLS alone only
    inside one node without CollNet; PAT for all-gather and reduce-scatter at one GPU per
    node; NVLS, NVLS-Tree and PAT only in the releases that have them)."""
    nodes, ranks = machine.node_count, machine.ranks
    cap = arch_row(era, machine.capability, machine.max_capability)
    index2 = nodes - 1 if nodes <= 2 else 2
    index1 = cap if nodes == 1 else (1 if machine.cpu_vendor == "amd" else 0)
    ll_max = table_row(era.ll_max_bws, index1)[index2]
    tree_max = table_row(era.per_ch_tree, cap)[index2]
    ring_ll128_max = table_row(era.per_ch_ring_ll128, cap)[index2]
    tree_ll128_max = table_row(era.per_ch_tree_ll128, cap)[index2]
    nvls_tree_max = table_row(era.per_ch_nvls_tree, cap)[index2] if era.per_ch_nvls_tree else float("inf")
    ppn = ranks / nodes
    graphs = {a: _graph_for(machine, a) for a in ALGORITHMS}
    table: dict[tuple[str, str, str], Entry] = {}
    listed: dict[tuple[str, str, str], Entry] = {}
    for coll in COLLECTIVES:
        nsteps = 2 * (ranks - 1) if coll == "all_reduce" else ranks - 1 if coll in ("all_gather", "reduce_scatter") \
            else ranks
        for algo in ALGORITHMS:
            if coll == "broadcast" and algo != "ring":
                continue
            if coll in ("all_gather", "reduce_scatter") and algo not in ("ring", "nvls", "pat"):
                continue
            if coll == "all_reduce" and algo == "pat":
                continue
            graph = graphs[algo]
            if graph is None or (algo == "nvls" and era.nvls is None) or (algo == "nvls_tree" and not era.nvls_tree) \
                    or (algo == "pat" and era.pat_factor is None):
                continue
            intra_hw = "nvlink" if graph.type_intra == PATH_NVL else "pci"
            hw = intra_hw if nodes == 1 else "net"
            for p, proto in enumerate(PROTOCOLS):
                if algo in ("nvls", "nvls_tree", "pat") and proto != SIMPLE:
                    continue
                bw = rated_bw(graph, nodes)
                if algo in ("nvls", "nvls_tree"):
                    if graph.channels < 2:
                        continue
                    bw = _nvls_bw(era, machine, graph, coll, algo, cap, ppn, nvls_tree_max)
                bus = graph.channels * bw
                if cap in era.bus_caps and algo in ("ring", "tree"):
                    bus = min(bus, era.bus_caps[cap])
                if algo == "ring" and proto == LL:
                    bus = ring_ll_bus(era, coll, nodes, ll_max, bus)
                if algo == "ring" and proto == LL128:
                    factor = era.ll128_ring_one_gpu_per_node_factor if ppn < 2 else era.ll128_ring_factor
                    bus = min(bus * factor, ll128_cap(era, coll, graph.channels, ring_ll128_max))
                if algo == "tree" and coll == "all_reduce":
                    bus = min(bus * era.tree_factor, _tree_cap(era, proto, cap, nodes, graph.channels * tree_max))
                if algo == "tree" and proto == LL:
                    bus = min(bus / era.tree_ll_divisor, ll_max)
                if algo == "tree" and proto == LL128:
                    factor = TREE_LL128_FACTOR_ONE_NODE if nodes == 1 else era.tree_ll128_multi_node_factor
                    limit = float("inf") if era.tree_ll128_cap_scale is None else \
                        ll128_cap(era, coll, graph.channels, tree_ll128_max) * era.tree_ll128_cap_scale
                    bus = min(bus * factor, limit)
                if algo == "tree" and ppn == 1 and era.tree_pattern_tree_factor is not None:
                    bus *= era.tree_pattern_tree_factor  # search.cc: one GPU a machine, NCCL_TOPO_PATTERN_TREE
                if algo == "pat":
                    bus *= era.pat_factor
                # bus bandwidth to algorithm bandwidth (older eras' NVLS ratios are in _nvls_bw)
                if not (algo != "ring" and coll in ("all_gather", "reduce_scatter")):
                    if algo == "ring" or (algo in ("nvls", "nvls_tree") and era.nvls == "efficiency"):
                        bus *= ranks / nsteps
                    elif algo == "tree":
                        bus *= 0.5
                intra_lat = era.hw_latency[intra_hw]["tree" if algo == "pat" else algo][p]  # (PAT: none inside)
                if nodes > 1 and proto == LL:
                    intra_lat *= era.multi_node_ll_intra_factor
                tree_net = era.one_gpu_per_node_tree_net_latency and ppn == 1
                hw_net = era.hw_latency["net"]["tree" if tree_net or algo == "pat" else algo][p]
                nic = machine.nic
                # The release's view decides; the hop is played as NCCL's model composes it
                # today (played_inter_latency), whatever the release read of the plugin's figure
                reported = nic.reported_latency_us if nic else 0.0
                inter_lat = _inter_latency(era, hw_net, reported, proto)
                played_lat = played_inter_latency(hw_net, reported, proto)
                latency, played, one_more = (_latency(era, machine, coll, algo, proto, nsteps, hw, intra_lat, net)
                                             for net in (inter_lat, played_lat, played_lat + 1.0))
                # the latency is linear in the hop: one more us a hop adds the hops' count
                entry = Entry(latency, bus, played, played_lat, round(one_more - played, 6))
                if not _enabled(era, machine, algo):
                    entry = replace(entry, bandwidth_GBps=0.0)
                elif proto == LL128 and not _ll128_by_default(era, machine, graph):
                    listed[(coll, algo, proto)] = entry
                    entry = replace(entry, bandwidth_GBps=0.0)
                table[(coll, algo, proto)] = entry
    return Tuning(machine, era, table, ll_max, ring_ll128_max, tree_max, tree_ll128_max, graphs, single_process,
                  listed)


def rated_bw(graph: Graph, nodes: int) -> float:
    """tuning.cc: a graph's per-channel bandwidth as NCCL rates it, bwIntra on up to two
    machines ("nNodes <= 2 ? bwIntra : bwInter"), bwInter beyond."""
    return graph.bw_intra if nodes <= 2 else graph.bw_inter


def ring_ll_bus(era: NcclEra, coll: str, nodes: int, ll_max: float, bus: float) -> float:
    """tuning.cc: a ring's LL bus bandwidth, the era's share of the graph's (1/4, .5 from 2.21;
    1/3 for one node's collectives other than all-reduce in 2.7-2.20) under llMaxBw."""
    factor = era.ll_ring_factor
    if era.ll_ring_single_node_other_factor is not None and nodes == 1 and coll != "all_reduce":
        factor = era.ll_ring_single_node_other_factor
    return min(ll_max, bus * factor)


def ll128_cap(era: NcclEra, coll: str, channels: int, per_channel_max: float) -> float:
    """tuning.cc: LL128's bandwidth cap over `channels` channels: the era's per-generation
    figure per channel (perChMaxRingLL128Bws, perChMaxTreeLL128Bws; ll128MaxBwPerCh 20 in
    2.10-2.16), or before 2.10 its figure per collective (ll128MaxBwPerCh[coll] per channel
    from 2.7, ll128MaxBw[coll] for all channels before)."""
    if era.ll128_cap_by_collective is None:
        return channels * per_channel_max
    figure = era.ll128_cap_by_collective[coll]
    return channels * figure if era.ll128_cap_per_channel else figure


def _tree_cap(era: NcclEra, proto: str, cap: int, nodes: int, per_channel_cap: float) -> float:
    """tuning.cc: the tree's bus bandwidth cap, channels x perChMaxTreeBw from 2.8, before it
    one figure for all channels by node count (2.7: higher for LL128 on Ampere)."""
    if era.tree_total_cap is None:
        return per_channel_cap
    table = era.tree_total_cap
    if era.tree_total_cap_ampere_ll128 is not None and proto == LL128 and cap == AMPERE:
        table = era.tree_total_cap_ampere_ll128
    up_to, first, beyond = table
    return first if nodes <= up_to else beyond


def _latency(era: NcclEra, machine: NcclMachine, coll: str, algo: str, proto: str, nsteps: int, hw: str,
             intra_lat: float, inter_lat: float) -> float:
    """tuning.cc comm->latencies: baseLat plus the algorithm's hops inside machines (intraLat)
    and across them (interLat)."""
    nodes, ranks, p = machine.node_count, machine.ranks, PROTOCOLS.index(proto)
    if algo == "pat":
        # "8 // Base time + log2i(nNodes) * (interLat/3.5) // Log latency + nRanks * 2.8 //
        # Still a linear part" (v2.23.4-1; from 2.28 the 8 us is PAT's baseLat)
        return PAT_BASE_US + log2i(nodes) * inter_lat / 3.5 + ranks * PAT_PER_RANK_US
    latency = era.base_latency[algo][p]
    if algo == "ring":
        lat = era.hw_latency[hw][algo][p]
        if coll == "broadcast":
            # rings in gansim are the same shape on every channel (sameChannels)
            return latency + lat
        crossings = 0 if nodes == 1 else (nodes - 1) * (2 if coll == "all_reduce" else 1)
        if nodes > 1 and era.ring_net_every_step:
            # 2.5-2.6 count every step at hwLat[NET]; a played network hop (`inter_lat` when
            # played) stands for it only on the steps that cross machines
            hw_net = era.hw_latency["net"]["ring"][p]
            return latency + (nsteps - crossings) * hw_net + crossings * inter_lat
        overhead = 0.0
        if nodes > 1 and era.net_overhead:
            overhead = NET_OVERHEAD[machine.cpu_vendor] * (3 if proto == SIMPLE else 1)
        intra_lat = max(intra_lat, overhead)
        # 2.12-2.22 counted 2 nNodes network steps for an all-reduce (its other collectives nNodes - 1)
        inter_steps = crossings + (2 if coll == "all_reduce" and nodes > 1 and era.inter_steps_all_nodes else 0)
        return latency + (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
    if algo == "tree":
        if coll == "all_reduce":
            latency += 2 * ((ranks // nodes - 1) * intra_lat + log2i(nodes) * inter_lat)
        return latency
    if algo == "nvls":
        return latency + intra_lat + (inter_lat if nodes > 1 else 0.0)

    return latency + intra_lat + 2 * log2i(nodes) * inter_lat  # nvls_tree


def _inter_latency(era: NcclEra, hw_net_us: float, plugin_us: float, proto: str) -> float:
    """tuning.cc interLat: the network hop's hwLat plus the latency the net plugin reports
    (graph->latencyInter, search.cc: net->net.latency; NCCL's own IB and socket transports
    report 0), once more for Simple ("Also add the flush extra latency"); in 2.12-2.17 the
    plugin's figure replaced hwLat instead ("latencyInter ? latencyInter : hwLat"); before
    2.12 NCCL did not read it."""
    if not era.plugin_latency_read:
        return hw_net_us
    if era.plugin_latency_adds:
        return hw_net_us + plugin_us * plugin_latency_times(proto)
    return plugin_us if plugin_us else hw_net_us


def plugin_latency_times(proto: str) -> int:
    """How many times tuning.cc (2.18 on) adds a net plugin's latency to a network hop: once,
    and once more for Simple ("Also add the flush extra latency")."""
    return 2 if proto == SIMPLE else 1


def played_inter_latency(hw_net_us: float, plugin_us: float, proto: str) -> float:
    """What a network hop is played at: NCCL's own model of it (tuning.cc interLat since 2.18,
    `_inter_latency` of the newest release: hwLat[NET] plus the latency a net plugin reports,
    twice for Simple), also for releases that chose without the plugin's figure (before 2.12)
    or used it instead of hwLat (2.12-2.17): the fabric does not change with the release that
    runs on it. gansim plays NCCL's hwLat and baseLat for every other hop, figures NCCL's
    maintainers call empirical corrections (NVIDIA/nccl#535); a plugin's reported latency is
    the same kind of figure for its fabric, set where NCCL's model chose well with it (aws-ofi-
    nccl d87d61e0: "a value below 75us ... makes NCCL choose the wrong algorithm for the 2 nodes
    case")."""
    return _inter_latency(NEWEST, hw_net_us, plugin_us, proto)


def _nvls_bw(era: NcclEra, machine: NcclMachine, graph: Graph, coll: str, algo: str, cap: int, ppn: float,
             nvls_tree_max: float) -> float:
    """NVLS (NVLS-Tree) algorithm bandwidth per channel, as the era's tuning.cc has it: 2.17
    the ring graph's bandwidth x .75 (under the Hopper cap), 2.18-2.27 the NVLS graph's
    (min of intra and inter) x 5/6 (2.18's NVLS-Tree x .70 nNodes / 2(nNodes - 1)), 2.28 on
    nvlsEfficiency with a (channels - 1) / channels share."""
    nodes = machine.node_count
    if era.nvls == "ring_graph":
        ring = machine.ring
        return min(ring.channels * ring.bw_intra, era.bus_caps.get(cap, float("inf"))) * 0.75 / graph.channels
    if era.nvls == "five_sixths":
        if algo == "nvls":
            bw = min(graph.bw_intra, graph.bw_inter) if nodes > 1 else graph.bw_intra
        else:
            bw = min(graph.bw_intra, graph.bw_inter if nodes <= 2 else graph.bw_inter / 2)
        if coll in ("all_gather", "reduce_scatter"):
            return bw  # no bus-to-algorithm ratio for these
        if algo == "nvls_tree" and era.nvls_tree_ratio_2_18 and nodes > 1:
            return bw * 0.70 * nodes / (2 * (nodes - 1))
        return bw * 5.0 / 6.0
    intra_bw = graph.bw_intra * era.nvls_efficiency[cap] * (graph.channels - 1) / graph.channels
    intra_bw *= 2.0 if coll == "all_reduce" else (ppn - 1) / ppn
    inter_bw = graph.bw_inter * (2 if nodes <= 2 and algo == "nvls_tree" else 1)
    return min(intra_bw, inter_bw, nvls_tree_max if algo == "nvls_tree" else float("inf"))


def _enabled(era: NcclEra, machine: NcclMachine, algo: str) -> bool:
    """tuning.cc: NVLS-Tree only across nodes, NVLS alone only inside one node (CollNet
    disabled), PAT only at one GPU per node (ncclPatEnable: "PAT only supports 1 GPU per node";
    NCCL's own network transports run on the host, as it asks) from the era's compute
    capability, whatever NCCL_ALGO allows."""
    if algo == "nvls_tree" and machine.node_count == 1:
        return False
    if algo == "pat":
        return machine.node_count == machine.ranks > 1 and machine.capability >= era.pat_min_capability
    return not (algo == "nvls" and machine.node_count > 1)


def _ll128_by_default(era: NcclEra, machine: NcclMachine, graph: Graph) -> bool:
    """tuning.cc: whether the era's NCCL enables LL128 on this graph by default (protoEnable 2;
    NCCL_PROTO naming the collective replaces the rule by its list)."""
    if machine.capability >= 90 and era.ll128_pxn_from_hopper:
        ok = graph.type_inter <= PATH_PXN  # NCCL_LL128_C2C default 1
    else:
        ok = graph.type_inter <= (PATH_PXB if era.ll128_inter_path == "pxb" else PATH_PIX)
    ok = ok and graph.type_intra <= (PATH_NVB if era.ll128_intra_path == "nvb" else PATH_NVL)
    if era.ll128_capabilities is not None:
        return ok and machine.capability == machine.max_capability and machine.capability in era.ll128_capabilities
    ok = ok and (machine.capability == machine.max_capability or machine.capability >= 90)
    return ok and machine.capability >= 70


def algo_latency_us(tuning: Tuning, coll: str, algo: str, proto: str, nbytes: float, played: bool = False,
                    listed: bool = False) -> float:
    """ncclTopoGetAlgoTime's latency: the table's, times the ring's "plateau effect" for
    multi-node Simple all-reduces (from 2.18 by generation and bytes per channel and rank;
    2.7-2.17 x1.9 from nRanks/16 x 64 KiB; none before 2.7). `played`: with the network hops as
    they are played (Entry.played_latency_us, played_inter_latency)."""
    machine = tuning.machine
    entry = tuning.entry(coll, algo, proto, listed)
    lat = entry.played_latency_us if played else entry.latency_us
    if algo == "ring" and proto == SIMPLE and machine.node_count > 1 and coll == "all_reduce":
        plateau = tuning.era.plateau
        if plateau == "ranks":
            if nbytes >= machine.ranks * OLD_PLATEAU_BYTES_PER_RANK:
                lat *= RING_PLATEAU[0]
        elif plateau == "by_generation" and nbytes / (machine.comm_channels * machine.ranks) >= 64:
            lat *= RING_PLATEAU[0] if machine.capability < 80 else RING_PLATEAU[1]
    return lat


def tree_correction(era: NcclEra, coll: str, algo: str, proto: str, nbytes: float) -> float:
    """ncclTopoGetAlgoTime's correction of the tree's bandwidth at medium sizes, from the
    era's table (powers of two from 64 B; "logSize < 22" before 2.8, "< 23" from 2.8)."""
    log_size = log2i(int(nbytes) >> 6)
    limit = 22 if len(era.tree_correction[0]) == 22 else 23
    if algo == "tree" and coll == "all_reduce" and 0 <= log_size < limit:
        return era.tree_correction[PROTOCOLS.index(proto)][log_size]
    return 1.0


def algo_time_us(tuning: Tuning, coll: str, algo: str, proto: str, nbytes: float,
                 listed: bool = False) -> float | None:
    """tuning.cc ncclTopoGetAlgoTime: latency + bytes / bandwidth, with the tree correction
    and the ring plateau; None where the algorithm is not available (`listed`: with
    NCCL_PROTO set for the collective, Tuning.entry)."""
    bw = tuning.entry(coll, algo, proto, listed).bandwidth_GBps * tree_correction(tuning.era, coll, algo, proto,
                                                                                  nbytes)
    if bw == 0:
        return None
    return algo_latency_us(tuning, coll, algo, proto, nbytes, listed=listed) + nbytes / (1000.0 * bw)


def plugin_protocol(tuning: Tuning) -> str | None:
    """The protocol the NICs' net plugin leaves NCCL (NicModel.forced_protocol: it sets
    NCCL_PROTO, which NCCL reads from 2.5 on), None where it leaves all of them."""
    nic = tuning.machine.nic
    if nic is None or tuning.era.choice == "thresholds":
        return None
    return nic.forced_protocol


def nccl_proto(tuning: Tuning, proto: str | None) -> str | None:
    """The protocol NCCL_PROTO allows: the user's (`proto`), which the plugin does not
    overwrite, else the plugin's; None: any."""
    return proto if proto is not None else plugin_protocol(tuning)


@dataclass(frozen=True)
class Choice:
    algorithm: str
    protocol: str
    model_time_us: float  # NCCL's own estimate
    channels: int  # channels this message runs on (of comm->nChannels)
    threads: int
    # NCCL_PROTO (the user's or a net plugin's) was set for this collective, so LL128 follows
    # its list, not NCCL's hardware rule (Tuning.entry)
    listed: bool = False


def choose(tuning: Tuning, coll: str, nbytes: float, algo: str | None = None, proto: str | None = None) -> Choice:
    """enqueue.cc topoGetAlgoInfo: the fastest (algorithm, protocol) by NCCL's model, among
    those allowed (NCCL_ALGO / NCCL_PROTO settings as gansim/core/nccl_env.py reads them:
    tuning.cc zeroes the bandwidth of the others), then how many channels and threads it uses;
    in 2.4, which had no model, by its two thresholds (_choose_by_thresholds). An NCCL_PROTO
    that covers the collective decides LL128 by its list alone: listed (or not excluded), it
    runs where NCCL's hardware rule would leave it off, as in tuning.cc."""
    if tuning.era.choice == "thresholds":
        return _choose_by_thresholds(tuning, coll, nbytes, algo, proto)
    proto = nccl_proto(tuning, proto)
    allowed = candidates(tuning, coll, algo, proto)
    best: tuple[float, str, str] | None = None
    for a in ALGORITHMS:
        for p in PROTOCOLS:
            if a in allowed.algorithms and p in allowed.protocols:
                t = algo_time_us(tuning, coll, a, p, nbytes, allowed.listed)
                if t is not None and t >= 0 and (best is None or t < best[0]):
                    best = (t, a, p)
    if best is None:
        raise NoNcclChoice(tuning, coll, algo, proto)
    time, a, p = best
    nc, nt = channels_for(tuning, a, p, nbytes)
    return Choice(a, p, time, nc, nt, allowed.listed)


@dataclass(frozen=True)
class Candidates:
    """What NCCL chooses among for one collective under NCCL_ALGO / NCCL_PROTO."""

    algorithms: frozenset[str]
    protocols: frozenset[str]
    listed: bool  # LL128 follows NCCL_PROTO's list, not NCCL's hardware rule (Tuning.entry)
    fell_back: bool  # the settings left nothing, and NCCL runs the ring (NcclEra.ring_backup)
    # where the release does not apply NCCL_ALGO as written here, how (for --explain)
    overruled: str | None = None


def candidates(tuning: Tuning, coll: str, algo: str | None, proto: str | None) -> Candidates:
    """The algorithms and protocols NCCL_ALGO `algo` and NCCL_PROTO `proto` (the net plugin's
    included) leave `coll` in the tuning's release (tuning.cc ncclTopoTuneModel; NcclEra's
    algo_list_reach, ring_tree_again_when_none_of and ring_backup): where none of them is
    available and the release falls back to the ring (2.19-2.23), the ring with the protocols
    tuning.cc kept for it in comm->ringbdw: every one, LL128 as if listed (2.19-2.21), or the
    allowed ones (2.22-2.23)."""
    era = tuning.era
    if era.first < (2, 24):
        for kind, text in ((ALGORITHM, algo), (PROTOCOL, proto)):
            if per_collective(kind, text):
                raise NcclSettingError(
                    f"{VARIABLE[kind]}={text} names a collective, which NCCL {era.name} does not read (entries "
                    f"per collective came in 2.24; before, NCCL skips what it does not know); allowed: one list "
                    f"for every collective, or NCCL 2.24 or later", kind)
    protos, listed = enabled(PROTOCOL, proto, coll), applies(PROTOCOL, proto, coll)
    algos, overruled = frozenset(ALGORITHMS), None
    if algo is not None:
        algos = enabled(ALGORITHM, algo, coll)
        if era.ring_tree_again_when_none_of:
            # NVLS is off across machines and NVLS-Tree on one before the check (2.18 on)
            off = "nvls" if tuning.machine.node_count > 1 else "nvls_tree"
            if not (algos - {off}) & set(era.ring_tree_again_when_none_of):
                algos = algos | {"ring", "tree"}
                overruled = (f"NCCL {era.name} turns the ring and the tree on again when NCCL_ALGO leaves none "
                             f"of {', '.join(era.ring_tree_again_when_none_of)}")
        if coll != "all_reduce" and era.algo_list_reach == "all_reduce":
            algos, overruled = frozenset(ALGORITHMS), f"NCCL {era.name} applies NCCL_ALGO to all-reduce only"
        elif coll != "all_reduce" and era.algo_list_reach == "all_but_ring" and "ring" not in algos:
            algos, overruled = algos | {"ring"}, f"NCCL {era.name} never takes the ring from {coll}"
    regular = Candidates(algos, protos, listed, False, overruled)
    backup = era.ring_backup
    if backup is None or any(tuning.entry(coll, a, p, listed).bandwidth_GBps > 0 for a in algos for p in protos):
        return regular
    if backup == "any_protocol":
        return Candidates(frozenset({"ring"}), frozenset(PROTOCOLS), True, True)
    return Candidates(frozenset({"ring"}), protos, listed, True)


class NcclSettingError(UserInputError):
    """NCCL_ALGO / NCCL_PROTO that the run's NCCL release cannot run as given. `kind`: which
    of the two to change; its `variable` (NCCL_ALGO) and training `option` (nccl_algo) are
    for the caller to name it as its user gave it."""

    def __init__(self, message: str, kind: str):
        self.variable, self.option = VARIABLE[kind], OPTION[kind]
        super().__init__(message)


class NoNcclChoice(NcclSettingError):
    """NCCL_ALGO / NCCL_PROTO leave a collective no algorithm and protocol NCCL can run: NCCL
    stops ("Error : no algorithm/protocol available", enqueue.cc topoGetAlgoInfo)."""

    def __init__(self, tuning: Tuning, coll: str, algo: str | None, proto: str | None):
        settings = as_environment(algo, proto)
        available = [f"{a}/{p}" for a in ALGORITHMS for p in PROTOCOLS
                     if algo_time_us(tuning, coll, a, p, 1 << 20) is not None]
        super().__init__(f"{' and '.join(settings)} leave{'s' if len(settings) == 1 else ''} {coll} no algorithm and "
                         f"protocol NCCL {tuning.era.name} can run here, and NCCL stops (\"no algorithm/protocol "
                         f"available\"); allowed: settings that keep one of {', '.join(available) or 'none'}"
                         + (" (from 2.24 an entry may name its collective: ^nvls;allreduce:tree)"
                            if tuning.era.first >= (2, 24) else ""), ALGORITHM if algo is not None else PROTOCOL)


# NCCL 2.4 (v2.4.8-1): src/include/enqueue.h, devcomm.h and rings.h
THREAD_THRESHOLD_2_4 = 64  # NCCL_THREAD_THRESHOLD, per thread before leaving LL (32 before Volta)
LL_CHANNEL_THRESHOLD_2_4 = 8  # NCCL_LL_CHANNEL_THRESHOLD, per thread before adding rings
LL_MIN_THREADS_2_4, MAX_THREADS_2_4 = 64, 256  # NCCL_LL_MIN_NTHREADS; getDefaultThreads (Volta)


def tree_threshold_2_4(machine: NcclMachine) -> float:
    """init.cc ncclTreeThreshold (v2.4.8-1): the largest all-reduce 2.4 runs on its tree, from
    its own rough figures (a ring of 5 GB/s per NVLink channel, 6 us a step; a tree at 2/3 of
    it on PCIe, 3/4 over NVLink and twice that on two nodes, 15 us a network hop, 4 us an
    intra one): none on one node or where the ring's latency is no worse, every size where
    the tree is faster, else where the latencies' difference equals the bandwidths'."""
    nodes, ranks = machine.node_count, machine.ranks
    nvlink = machine.ring.type_intra == PATH_NVL  # ncclNvlinkGpu: the GPU has NVLink
    ring_bw = 5000.0 * machine.comm_channels if nvlink else 5000.0  # B/us
    tree_bw = ring_bw * 3 / 4 * (2 if nodes == 2 else 1) if nvlink else ring_bw * 2 / 3
    ring_lat = 6.0 * (ranks - 1)
    tree_lat = 15.0 * math.log2(nodes) + 4.0 * (ranks // nodes - 1)
    if nodes < 2 or ring_lat <= tree_lat:
        return 0.0
    if tree_bw > ring_bw:
        return float("inf")
    return ring_bw * tree_bw / (ring_bw - tree_bw) * (ring_lat - tree_lat)


def _choose_by_thresholds(tuning: Tuning, coll: str, nbytes: float, algo: str | None,
                          proto: str | None) -> Choice:
    """NCCL 2.4, before tuning.cc: enqueue.cc getPatternInfo runs an all-reduce on the tree up
    to tree_threshold_2_4 (NCCL_TREE_THRESHOLD=0: never; here `algo`), on the ring above;
    getKernelInfo picks LL up to a threshold of nChannels x nThreads x chunks per loop x
    threadThreshold bytes (x4 on the tree), its channels and threads growing with the size,
    else Simple on every channel (`proto` forces either; 2.4 had no LL128). threadThreshold is
    64 bytes from Volta (32 before), doubled by ncclThreadThreshold(minCompCap, multiNode) when
    its communicators were made one per process: ncclCommInitRank passes it the nodes its
    rings counted (init.cc initTransportsRank, "nnodes += treeIn[r]", which counts one node
    even on one machine: misc/rings.cc marks each node's master), while ncclCommInitAll, one
    process for all its GPUs (nccl-tests without MPI), passes 0 (init.cc ncclCommInitAll). The
    time is the 2.5 tuning model's for that choice: 2.4 had no figures of its own."""
    machine = tuning.machine
    algos, protos = enabled(ALGORITHM, algo, coll), enabled(PROTOCOL, proto, coll)
    # one of the two allowed decides; both (or neither) leave it to the threshold
    tree = coll == "all_reduce" and "tree" in algos and (
        "ring" not in algos or nbytes <= tree_threshold_2_4(machine))
    # without a tree (one machine), the ring, as NCCL falls back to it
    tree = tree and tuning.entry(coll, "tree", SIMPLE).bandwidth_GBps > 0
    a = "tree" if tree else "ring"
    chunks = 1 if tree or coll == "broadcast" else machine.ranks  # nchunksPerLoop
    thread_threshold = (THREAD_THRESHOLD_2_4 if machine.capability >= 70 else THREAD_THRESHOLD_2_4 // 2) * (
        1 if tuning.single_process else 2)
    per_thread_ll = min(thread_threshold, LL_CHANNEL_THRESHOLD_2_4)
    nt = LL_MIN_THREADS_2_4
    while -(-int(nbytes) // (nt * chunks)) > per_thread_ll and nt * 2 <= MAX_THREADS_2_4:
        nt *= 2
    nc = min(max(-(-int(nbytes) // (nt * chunks * per_thread_ll)), 1), machine.comm_channels)
    ll_threshold = nc * nt * chunks * thread_threshold * (4 if tree else 1)
    if (LL in protos) != (SIMPLE in protos):
        p = LL if LL in protos else SIMPLE
    else:
        p = LL if nbytes <= ll_threshold else SIMPLE
    if p == SIMPLE:
        nc, nt = machine.comm_channels, MAX_THREADS_2_4
    time = algo_time_us(tuning, coll, a, p, nbytes)
    assert time is not None  # a ring or a tree, LL or Simple: always tuned
    return Choice(a, p, time, nc, nt)


def channels_for(tuning: Tuning, algo: str, proto: str, nbytes: float) -> tuple[int, int]:
    """enqueue.cc topoGetAlgoInfo: small messages use fewer channels (and threads) until each
    thread has `threadThreshold` bytes; NVLS and NVLS-Tree run on all of comm->nvlsChannels
    at every size ("nc = comm->nvlsChannels"), each channel on every head of the NVLS graph."""
    machine = tuning.machine
    if algo in ("nvls", "nvls_tree"):
        return nvls_channels(tuning.era, machine), NCCL_MAX_NTHREADS
    nc = machine.comm_channels
    nt = MAX_THREADS[proto]
    if algo == "ring" and proto == SIMPLE and machine.ring.bw_intra * machine.ring.channels <= 12.0:
        nt = 256  # tuning.cc: simpleDefaultThreads on PCI-class rings
    threshold = THREAD_THRESHOLD[proto] * (machine.ranks if algo == "ring" and proto == LL else 1)
    while nbytes < nc * nt * threshold and nc >= 2:
        nc -= 1
    while nbytes < nc * nt * threshold and nt % 128 == 0:
        nt //= 2
    if algo == "pat":
        nt = NCCL_MAX_NTHREADS  # enqueue.cc: "if (algorithm == NCCL_ALGO_PAT) nt = NCCL_MAX_NTHREADS"
    return nc, nt


def nvls_channels(era: NcclEra, machine: NcclMachine) -> int:
    """comm->nvlsChannels, the CTAs an NVLS or NVLS-Tree collective runs on (transport/nvls.cc:
    NVLS_NCHANNELS_SM90 16, NVLS_NCHANNELS_SM100 32 from 2.25; 16 for every GPU before)."""
    return era.nvls_channels_sm100 if machine.capability >= 100 else 16


def nvls_concurrent_ops(era: NcclEra, machine: NcclMachine) -> int:
    """enqueue.cc concurrentOps: nvlsChannels x nvls.nHeads, the NVLS operations that run at
    once, each on its share of the buffer."""
    return nvls_channels(era, machine) * (machine.nvls.channels if machine.nvls else 1)


def nvls_tree_chunk_bytes(era: NcclEra, machine: NcclMachine, nbytes: float) -> int:
    """enqueue.cc computeCollChunkInfo for NVLS-Tree: the era's first chunk, capped from 4
    nodes on, then halved while the message is small against the concurrent operations
    (nvlsChannels x nvls.nHeads): below 32 / 16 / 4 / 1 of them at 256 / 128 / 64 / 32 KiB."""
    concurrent = nvls_concurrent_ops(era, machine)
    chunk = era.nvls_tree_first_chunk
    if era.nvls_tree_many_nodes_chunk is not None and machine.node_count >= 4:
        chunk = min(chunk, era.nvls_tree_many_nodes_chunk)
    for times, smaller in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if nbytes < times * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nvls_chunk_bytes(era: NcclEra, machine: NcclMachine, nbytes: float) -> int:
    """enqueue.cc computeCollChunkInfo for NVLS (the same from 2.17 to 2.30): nvlsChunkSize
    (NCCL_NVLS_CHUNKSIZE, 128 KiB), halved while the message is small against the concurrent
    operations (nvlsChannels x nvls.nHeads): below 64 / 8 / 2 of them to 64 / 32 / 16 KiB. (The
    32 KiB cap of NVLS across machines under 150 GB/s is NVLS with CollNet, which gansim does not
    choose.)"""
    concurrent = nvls_concurrent_ops(era, machine)
    chunk = NVLS_CHUNK_BYTES
    for times, smaller in ((64, 65536), (8, 32768), (2, 16384)):
        if nbytes < times * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk


# device/all_reduce.h RunWorkColl<AllReduce, NVLS, Simple>, oneNode: each channel's warps are
# split into three groups that pass every chunk on, scatter (the rank's input into each head's
# NVLS buffer), reduce-and-broadcast (the head's multimem ld_reduce and st) and gather (the
# result out of the NVLS buffers); with registered user buffers (work->regUsed) scatter and
# gather move nothing, but nccl-tests and frameworks do not register them by default
NVLS_ONE_NODE_STAGES = 3
NVLS_CHUNK_BYTES = 128 * 1024  # comm->nvlsChunkSize, NCCL_NVLS_CHUNKSIZE's default


def pipeline_fill_us(tuning: Tuning, coll: str, algo: str, nbytes: float, algo_GBps: float) -> float:
    """What NCCL's additive model (latency + bytes / bandwidth) leaves out of an NVLS or
    NVLS-Tree all-reduce: the drain of its chunk pipeline. Every concurrent operation (an NVLS
    channel on one head, nvlsChannels x nHeads of them) moves its share of the buffer chunk by
    chunk through a pipeline of stages; in steady state one chunk leaves the pipeline per chunk
    time, which the bandwidth term counts, but the last chunk still has to pass the stages after
    the first: stages - 1 chunk times more. A chunk time is one operation's chunk (or its whole
    share, when that is smaller) at its share of the algorithm bandwidth.

    - NVLS-Tree across machines: the stages are the 2 log2(nNodes) network crossings (up the
      tree of machines, then down), chunks of nvls_tree_chunk_bytes; its NVLink stages
      (multimem reduce and multicast) are left out of the drain: they run several times faster
      than the network stage.
    - NVLS inside one machine: the three warp groups of NVLS_ONE_NODE_STAGES, chunks of
      nvls_chunk_bytes, each stage moving a chunk at the algorithm's rate (a 16 MiB all-reduce
      on 8 H100, 128 operations of four 32 KiB chunks, takes (4 + 2) / 4 of its bandwidth time).

    Other algorithms: none (the ring's steps are sequential already in NCCL's latency and
    bandwidth terms; the tree's medium sizes carry NCCL's own correction, tree_correction)."""
    machine = tuning.machine
    if coll != "all_reduce" or algo_GBps <= 0:
        return 0.0
    if algo == "nvls_tree" and machine.node_count >= 2:
        stages = 2 * log2i(machine.node_count)
        chunk = nvls_tree_chunk_bytes(tuning.era, machine, nbytes)
    elif algo == "nvls" and machine.node_count == 1:
        stages = NVLS_ONE_NODE_STAGES
        chunk = nvls_chunk_bytes(tuning.era, machine, nbytes)
    else:
        return 0.0
    concurrent = nvls_concurrent_ops(tuning.era, machine)
    chunk = min(chunk, nbytes / concurrent)
    return (stages - 1) * chunk * concurrent / (algo_GBps * 1e3)


def proxy_channels(tuning: Tuning, algo: str, channels: int) -> list[tuple[int, int]]:
    """Per proxy thread that drives network sends in a collective on `channels` channels, how
    many of them it serves on the first and on the second of NCCL's two trees (a ring's all
    count as the first). NCCL runs one proxy thread per GPU, and its progress loop
    (src/proxy.cc progressOps, v2.26.2-1) calls each channel's op (net.cc sendProxyProgress /
    recvProxyProgress) one after another.

    NVLS-Tree: every GPU heads its own share on every NVLS channel and holds that channel's
    tree connections across machines (graph/connect.cc connectNvls: "Find the heads where I'm
    the head rank and retain tree up/down", channel c on tree c % 2), so its proxy serves all
    nvlsChannels, half on each tree; enqueue.cc topoGetAlgoInfo runs NVLS and NVLS-Tree on
    all of them at every size ("nc = comm->nvlsChannels"). Ring and tree: a channel's network
    hop is driven by the GPU next to the channel's NIC (search.cc; with PXN, net.cc hands the
    send to that GPU's proxy), so a proxy serves the channels in use over its NIC: the ring's
    channels the NIC they leave by, the tree's the NIC of the channel's chain head, the
    ring graph's channels on the first tree and their duplicates on the second, later copies
    as the channel they copy (NcclMachine.source_channel, as nccl.py's flows take them)."""
    machine = tuning.machine
    if algo == "nvls_tree":
        n = nvls_channels(tuning.era, machine)
        return [(n - n // 2, n // 2)]
    nics = machine.ring.nics
    if not nics:
        return [(channels, 0)]
    side = 0 if algo == "tree" else 1
    per_nic: dict[int, list[int]] = {}
    for c in map(machine.source_channel, range(channels)):
        counts = per_nic.setdefault(nics[c % len(nics)][side], [0, 0])
        counts[1 if algo == "tree" and c >= machine.ring.channels else 0] += 1
    return [(first, second) for first, second in per_nic.values()]


@lru_cache(maxsize=None)
def tree_senders(nodes: int, parent: Callable[[int, int, int], int]) -> tuple[int, int]:
    """Of NCCL's two trees over `nodes` machines (trees.cc ncclGetDtree; `parent(nranks,
    rank, tree)` is its parent, -1 at the root), in how many a machine sends up (it has a
    parent) and down (it has a child), the most over machines: on 2 machines 1 and 1 (each
    is the root of one tree and the leaf of the other); from 3, 2 up and 1 or 2 down."""
    up = max(sum(parent(nodes, r, t) >= 0 for t in (0, 1)) for r in range(nodes))
    has_child = [[False, False] for _ in range(nodes)]
    for r in range(nodes):
        for t in (0, 1):
            above = parent(nodes, r, t)
            if above >= 0:
                has_child[above][t] = True
    return up, max(sum(flags) for flags in has_child)


def proxy_serial_us(tuning: Tuning, coll: str, algo: str, channels: int,
                    parent: Callable[[int, int, int], int]) -> float:
    """What NCCL's additive model leaves out of every network crossing: the one proxy thread
    per GPU posts its channels' network sends one after another, each costing NCCL's own
    "Network post overhead" (tuning.cc getNetOverhead, from v2.18.3-1: 1 us on an Intel x86
    CPU, 2 us on an AMD one, 1 us otherwise). net.cc sendProxyProgress (v2.26.2-1) posts one
    isend per channel (sub) and step; recvProxyProgress posts its irecvs ahead of the data
    and groups several channels in one (subCount), so only the sends are on the critical
    path. NCCL's latency counts one post per network hop (a ring step's intraLat is at least
    the overhead; the tree's and NVLS-Tree's hop latencies are one channel's), so a crossing
    ends (sends - 1) posts later, sends being what the busiest proxy posts in it:

    - ring: every crossing (tuning.cc's nInterSteps: 2 (nNodes - 1) for an all-reduce,
      nNodes - 1 for all-gather and reduce-scatter, one for a broadcast's chain) sends on all
      the proxy's channels (proxy_channels);
    - tree and NVLS-Tree all-reduce: log2(nNodes) crossings up, then as many down; the
      proxy's channels are split over NCCL's two trees (proxy_channels), and going up (down)
      it sends on those of the trees in which its machine has a parent (children),
      tree_senders.

    NCCL's x3 for a Simple ring step (the send, the receive and the flush of one channel) is
    not applied: per crossing only the sends are serial. The figure is the same in every era:
    the proxy predates 2.18, its overhead only entered NCCL's model then."""
    machine = tuning.machine
    nodes = machine.node_count
    if nodes < 2 or algo == "nvls":
        return 0.0
    proxies = proxy_channels(tuning, algo, channels)
    overhead = NET_OVERHEAD[machine.cpu_vendor]
    if algo == "ring":
        crossings = 2 * (nodes - 1) if coll == "all_reduce" else 1 if coll == "broadcast" else nodes - 1
        return crossings * (max(first for first, _ in proxies) - 1) * overhead
    if coll != "all_reduce":
        return 0.0

    def sends(trees: int) -> int:
        # the busiest proxy's sends when its machine sends on `trees` of the two trees (on
        # one tree, the larger of its two shares: each tree has a machine that sends on it)
        return max(first + second if trees == 2 else max(first, second) if trees == 1 else 0
                   for first, second in proxies)

    up, down = tree_senders(nodes, parent)
    return log2i(nodes) * sum(max(0, sends(trees) - 1) for trees in (up, down)) * overhead
