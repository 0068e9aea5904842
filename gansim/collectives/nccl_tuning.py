"""NCCL's tuning model: for each collective, algorithm and protocol, a latency (us) and a
bandwidth (GB/s), and the choice among them for a message of n bytes, as NVIDIA/nccl
v2.30.7-1 makes it (src/graph/tuning.cc ncclTopoTuneModel and ncclTopoGetAlgoTime,
src/enqueue.cc topoGetAlgoInfo). Every constant below is NCCL's, quoted from those files;
none is fitted to measurements.

What NCCL models and gansim keeps: Ring, Tree, NVLS and NVLS-Tree; the LL, LL128 and Simple
protocols. Left out: CollNet (needs a SHARP network and NCCL_COLLNET_ENABLE, off by
default), PAT (one GPU per node, all-gather / reduce-scatter only), tuner plugins, the
registered-buffer policy (NCCL_CTA_POLICY_EFFICIENCY), POWER CPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from gansim.collectives.nccl_topology import PATH_NVB, PATH_NVL, PATH_PXB, PATH_PXN, Graph, NcclMachine

ALGORITHMS = ("tree", "ring", "nvls", "nvls_tree")
PROTOCOLS = ("LL", "LL128", "Simple")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
LL, LL128, SIMPLE = PROTOCOLS

# tuning.cc ncclTunerConstantsDefaults.baseLatencies, us: {LL, LL128, Simple}
BASE_LATENCY = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0),
                "nvls_tree": (0.0, 0.0, 0.0)}
# tuning.cc hwLatencies[NVLINK | PCI | NET][algorithm][protocol], us per hop
HW_LATENCY = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0, 0, 25), "nvls_tree": (0, 0, 25)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0)},
    "net": {"tree": (5.0, 8.5, 14), "ring": (2.7, 4.0, 14.0), "nvls": (0, 0, 18), "nvls_tree": (0, 0, 20.9)},
}
# tuning.cc, by [Volta, Ampere, Hopper, Blackwell] x [1 node, 2 nodes, more]; llMaxBws'
# first index is the GPU generation on one node and the CPU vendor (Intel, AMD) across nodes
LL_MAX_BWS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (2 * 141.0, 2 * 45.0, 2 * 35.0))
PER_CH_MAX_RING_LL128_BWS = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
PER_CH_MAX_TREE_LL128_BWS = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE_BWS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_MAX_NVLS_TREE_BWS = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0))
# tuning.cc nvlsEfficiency [Volta, Ampere, Hopper, Blackwell]
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
# tuning.cc: "Trees are not perfectly sticking to the model for medium sizes": per protocol,
# powers of two from 64 B
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
# tuning.cc protocol and algorithm factors on a graph's bandwidth
LL_RING_FACTOR = 0.5  # "if (a == RING && p == LL) busBw = min(llMaxBw, busBw * .5)"
LL128_RING_FACTOR = 0.92  # "busBw * (0.92 /*120.0/128.0*/)"
TREE_FACTOR = 0.92  # "if (a == TREE && coll == AllReduce) busBw = min(busBw * .92, ...)"
TREE_LL_DIVISOR = 3.8  # "if (a == TREE && p == LL) busBw = min(busBw * 1.0 / 3.8, llMaxBw)"
TREE_LL128_FACTOR_ONE_NODE, TREE_LL128_FACTOR = 7.0 / 9.0, 120.0 / 128.0
RING_PLATEAU = (1.9, 1.4)  # ncclTopoGetAlgoTime: ring Simple multi-node latency, before / from Ampere
# getNetOverhead, us: Intel 1.0, AMD 2.0, x3 for Simple
NET_OVERHEAD = {"intel": 1.0, "amd": 2.0}
# comm.h thread thresholds and device.h thread counts (enqueue.cc topoGetAlgoInfo channel tuning)
THREAD_THRESHOLD = {LL: 8, LL128: 8, SIMPLE: 64}
MAX_THREADS = {LL: 512, LL128: 640, SIMPLE: 512}
WARP_SIZE = 32


def log2i(n: int) -> int:
    """utils.h log2i (log2Down): floor(log2 n), -1 for 0."""
    return int(n).bit_length() - 1


def arch_index(capability: int) -> int:
    """tuning.cc compCapIndex: Volta 0 (and older), Ampere 1 (8.x), Hopper 2, Blackwell 3."""
    return 3 if capability >= 100 else 2 if capability >= 90 else 1 if capability >= 80 else 0


@dataclass(frozen=True)
class Entry:
    latency_us: float
    bandwidth_GBps: float  # NCCL's algorithm bandwidth; 0: not available


@dataclass
class Tuning:
    """comm->latencies and comm->bandwidths for every collective, algorithm and protocol."""

    machine: NcclMachine
    table: dict[tuple[str, str, str], Entry]
    ll_max_bw: float
    per_channel_max_ring_ll128_bw: float
    per_channel_max_tree_bw: float
    per_channel_max_tree_ll128_bw: float
    graphs: dict[str, Graph | None]

    def entry(self, coll: str, algo: str, proto: str) -> Entry:
        return self.table.get((coll, algo, proto), Entry(0.0, 0.0))


def _graph_for(machine: NcclMachine, algo: str) -> Graph | None:
    if algo == "ring":
        return machine.ring
    if algo == "tree":
        return machine.tree
    return machine.nvls


def tune(machine: NcclMachine) -> Tuning:
    """tuning.cc ncclTopoTuneModel, with its enable rules (LL128 where NCCL enables it by
    default; NVLS-Tree only across nodes; NVLS alone only inside one node without CollNet)."""
    nodes, ranks = machine.node_count, machine.ranks
    cap = arch_index(machine.capability)
    index2 = nodes - 1 if nodes <= 2 else 2
    index1 = cap if nodes == 1 else (1 if machine.cpu_vendor == "amd" else 0)
    ll_max = LL_MAX_BWS[index1][index2]
    tree_max = PER_CH_MAX_TREE_BWS[cap][index2]
    ring_ll128_max = PER_CH_MAX_RING_LL128_BWS[cap][index2]
    tree_ll128_max = PER_CH_MAX_TREE_LL128_BWS[cap][index2]
    nvls_tree_max = PER_CH_MAX_NVLS_TREE_BWS[cap][index2]
    ppn = ranks / nodes
    graphs = {a: _graph_for(machine, a) for a in ALGORITHMS}
    table: dict[tuple[str, str, str], Entry] = {}
    for coll in COLLECTIVES:
        nsteps = 2 * (ranks - 1) if coll == "all_reduce" else ranks - 1 if coll in ("all_gather", "reduce_scatter") \
            else ranks
        for algo in ALGORITHMS:
            if coll == "broadcast" and algo != "ring":
                continue
            if coll in ("all_gather", "reduce_scatter") and algo not in ("ring", "nvls"):
                continue
            graph = graphs[algo]
            if graph is None:
                continue
            intra_hw = "nvlink" if graph.type_intra == PATH_NVL else "pci"
            hw = intra_hw if nodes == 1 else "net"
            for p, proto in enumerate(PROTOCOLS):
                if algo in ("nvls", "nvls_tree") and proto != SIMPLE:
                    continue
                bw = graph.bw_intra if nodes <= 2 else graph.bw_inter
                if algo in ("nvls", "nvls_tree"):
                    if graph.channels < 2:
                        continue
                    intra_bw = graph.bw_intra * NVLS_EFFICIENCY[cap] * (graph.channels - 1) / graph.channels
                    intra_bw *= 2.0 if coll == "all_reduce" else (ppn - 1) / ppn
                    inter_bw = graph.bw_inter * (2 if nodes <= 2 and algo == "nvls_tree" else 1)
                    bw = min(intra_bw, inter_bw, nvls_tree_max if algo == "nvls_tree" else float("inf"))
                bus = graph.channels * bw
                if algo == "ring" and proto == LL:
                    bus = min(ll_max, bus * LL_RING_FACTOR)
                if algo == "ring" and proto == LL128:
                    bus = min(bus * LL128_RING_FACTOR, graph.channels * ring_ll128_max)
                if algo == "tree" and coll == "all_reduce":
                    bus = min(bus * TREE_FACTOR, graph.channels * tree_max)
                if algo == "tree" and proto == LL:
                    bus = min(bus / TREE_LL_DIVISOR, ll_max)
                if algo == "tree" and proto == LL128:
                    bus = min(bus * (TREE_LL128_FACTOR_ONE_NODE if nodes == 1 else TREE_LL128_FACTOR),
                              graph.channels * tree_ll128_max)
                # bus bandwidth to algorithm bandwidth
                if not (algo != "ring" and coll in ("all_gather", "reduce_scatter")):
                    bus *= ranks / nsteps if algo in ("ring", "nvls", "nvls_tree") else 0.5
                latency = BASE_LATENCY[algo][p]
                intra_lat = HW_LATENCY[intra_hw][algo][p]
                inter_lat = HW_LATENCY["net"]["tree" if ppn == 1 else algo][p]  # + latencyInter (0: no plugin figure)
                if algo == "ring":
                    lat = HW_LATENCY[hw][algo][p]
                    if coll == "broadcast":
                        # rings in gansim are the same shape on every channel (sameChannels)
                        latency += lat
                    else:
                        overhead = 0.0
                        if nodes > 1:
                            overhead = NET_OVERHEAD[machine.cpu_vendor] * (3 if proto == SIMPLE else 1)
                        intra_lat = max(intra_lat, overhead)
                        inter_steps = 0 if nodes == 1 else 2 * (nodes - 1) if coll == "all_reduce" else nodes - 1
                        latency += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat
                elif algo == "tree":
                    if coll == "all_reduce":
                        latency += 2 * ((ranks // nodes - 1) * intra_lat + log2i(nodes) * inter_lat)
                elif algo == "nvls":
                    latency = intra_lat + (inter_lat if nodes > 1 else 0.0)
                elif algo == "nvls_tree":
                    latency += intra_lat + 2 * log2i(nodes) * inter_lat
                if not _enabled(machine, graph, algo, proto):
                    bus = 0.0
                table[(coll, algo, proto)] = Entry(latency, bus)
    return Tuning(machine, table, ll_max, ring_ll128_max, tree_max, tree_ll128_max, graphs)


def _enabled(machine: NcclMachine, graph: Graph, algo: str, proto: str) -> bool:
    """tuning.cc: LL128 only where NCCL enables it by default, NVLS-Tree only across nodes,
    NVLS alone only inside one node (CollNet disabled)."""
    if algo == "nvls_tree" and machine.node_count == 1:
        return False
    if algo == "nvls" and machine.node_count > 1:
        return False
    if proto == LL128:
        if machine.capability >= 90:
            ok = graph.type_inter <= PATH_PXN  # NCCL_LL128_C2C default 1
        else:
            ok = graph.type_inter <= PATH_PXB
        ok = ok and graph.type_intra <= PATH_NVB
        ok = ok and (machine.capability == machine.max_capability or machine.capability >= 90)
        return ok and machine.capability >= 70
    return True


def algo_latency_us(tuning: Tuning, coll: str, algo: str, proto: str, nbytes: float) -> float:
    """ncclTopoGetAlgoTime's latency: the table's, times the ring's "plateau effect" for
    multi-node Simple all-reduces."""
    machine = tuning.machine
    lat = tuning.entry(coll, algo, proto).latency_us
    if algo == "ring" and proto == SIMPLE and machine.node_count > 1 and coll == "all_reduce" \
            and nbytes / (machine.comm_channels * machine.ranks) >= 64:
        lat *= RING_PLATEAU[0] if machine.capability < 80 else RING_PLATEAU[1]
    return lat


def tree_correction(coll: str, algo: str, proto: str, nbytes: float) -> float:
    """ncclTopoGetAlgoTime's correction of the tree's bandwidth at medium sizes."""
    log_size = log2i(int(nbytes) >> 6)
    if algo == "tree" and coll == "all_reduce" and 0 <= log_size < 23:
        return TREE_CORRECTION[PROTOCOLS.index(proto)][log_size]
    return 1.0


def algo_time_us(tuning: Tuning, coll: str, algo: str, proto: str, nbytes: float) -> float | None:
    """tuning.cc ncclTopoGetAlgoTime: latency + bytes / bandwidth, with the tree correction
    and the ring plateau; None where the algorithm is not available."""
    bw = tuning.entry(coll, algo, proto).bandwidth_GBps * tree_correction(coll, algo, proto, nbytes)
    if bw == 0:
        return None
    return algo_latency_us(tuning, coll, algo, proto, nbytes) + nbytes / (1000.0 * bw)


@dataclass(frozen=True)
class Choice:
    algorithm: str
    protocol: str
    model_time_us: float  # NCCL's own estimate
    channels: int  # channels this message runs on (of comm->nChannels)
    threads: int


def choose(tuning: Tuning, coll: str, nbytes: float, algo: str | None = None, proto: str | None = None) -> Choice:
    """enqueue.cc topoGetAlgoInfo: the fastest (algorithm, protocol) by NCCL's model, among
    those allowed (NCCL_ALGO / NCCL_PROTO), then how many channels and threads it uses."""
    best: tuple[float, str, str] | None = None
    for a in ALGORITHMS:
        if algo is not None and a != algo:
            continue
        for p in PROTOCOLS:
            if proto is not None and p != proto:
                continue
            t = algo_time_us(tuning, coll, a, p, nbytes)
            if t is not None and t >= 0 and (best is None or t < best[0]):
                best = (t, a, p)
    if best is None:
        # tuning.cc: with nothing left, NCCL falls back to the ring (its "backup")
        if algo not in (None, "ring") or proto is not None:
            return choose(tuning, coll, nbytes, "ring", None)
        raise ValueError(f"no NCCL algorithm available for {coll}")
    time, a, p = best
    nc, nt = channels_for(tuning.machine, a, p, nbytes)
    return Choice(a, p, time, nc, nt)


def channels_for(machine: NcclMachine, algo: str, proto: str, nbytes: float) -> tuple[int, int]:
    """enqueue.cc topoGetAlgoInfo: small messages use fewer channels (and threads) until each
    thread has `threadThreshold` bytes; NVLS uses its own channels."""
    if algo in ("nvls", "nvls_tree"):
        graph = machine.nvls
        return (graph.channels if graph else 1), 640
    nc = machine.comm_channels
    nt = MAX_THREADS[proto]
    if algo == "ring" and proto == SIMPLE and machine.ring.bw_intra * machine.ring.channels <= 12.0:
        nt = 256  # tuning.cc: simpleDefaultThreads on PCI-class rings
    threshold = THREAD_THRESHOLD[proto] * (machine.ranks if algo == "ring" and proto == LL else 1)
    while nbytes < nc * nt * threshold and nc >= 2:
        nc -= 1
    while nbytes < nc * nt * threshold and nt % 128 == 0:
        nt //= 2
    return nc, nt
