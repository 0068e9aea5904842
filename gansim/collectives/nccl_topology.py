"""NCCL's view of the machine a run uses: what its topology detection and graph search
(NVIDIA/nccl v2.30.7-1, src/graph/topo.cc, paths.cc, search.cc, connect.cc) make of the
topology file's links, so that the tuning model (gansim/collectives/nccl_tuning.py) can choose
as NCCL does and the flow model (gansim/collectives/nccl.py) can play what NCCL runs.

From line rates to NCCL's figures (per direction):
- NVLink: NCCL counts each link at a per-generation figure (src/graph/topo.h: SM60_NVLINK_BW
  18, SM70 20, SM80 20, SM86 12, SM90 20.6, SM100 40.1 GB/s; topo.cc ncclTopoNVLinkBw) against
  a line rate of 20/25/25/14.06/25/50 GB/s (gansim/topology/devices.py). Its maintainers call
  the difference protocol overhead: "450GB/s is the line rate. With the protocol overhead
  (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s" (S. Jeaugey,
  https://github.com/NVIDIA/nccl-tests/issues/212). A link's NCCL figure is its line rate
  times that ratio.
- PCIe: NCCL reads the link's speed and width from sysfs and counts 60 (x 100 Mb/s) per lane
  at 8 GT/s, 120 at 16 GT/s, 240 at 32 GT/s, divided by 80 (topo.cc, kvDictPciGen and
  ncclTopoAddPci: bw = width * speed / 80): 12 GB/s for a x16 Gen3 link (topo.h PCI_BW "PCI
  Gen3 x16"), 24 for Gen4, 48 for Gen5, against line rates of 15.75 / 31.5 / 63.0 GB/s: the
  ratio is 12 / 15.75 for every generation.
- Network: NCCL takes the port's speed (topo.cc: net bw = speed in Mb/s / 8000), i.e. the
  line rate itself.

Transports (paths.cc ncclTopoCheckP2p): two GPUs of one machine use P2P when their path is at
most PXB (NVLink, or PCIe switches without crossing a CPU); otherwise, or when a GPU cannot do
peer-to-peer, NCCL "diverts all traffic through the CPU" (paths.cc, addInterStep) with its SHM
transport, whose buffer lives in the receiver's host memory (src/transport/shm.cc,
NCCL_SHM_LOCALITY default SHM_RECV_SIDE): the sender writes it over PCIe, the receiver reads it.
On AMD hosts with at most two GPUs P2P is allowed up to SYS (ncclTopoCheckP2p).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from gansim.core.config import NCCL_MAXCHANNELS
from gansim.core.errors import UserInputError
from gansim.topology.devices import compute_capability, cpu_vendor, nvlink_line_rate_GBps
from gansim.topology.graph import Topology

# NCCL's path types, in its order (src/graph/topo.h): a path's type is its worst hop
PATH_LOC, PATH_NVL, PATH_NVB, PATH_C2C, PATH_PIX, PATH_PXB, PATH_PXN, PATH_P2C, PATH_PHB, PATH_SYS, PATH_NET = range(11)
PATH_NAMES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "P2C", "PHB", "SYS", "NET")

# src/graph/topo.h: NCCL's NVLink figure per link, GB/s, by compute capability (x 10)
SM60_NVLINK_BW, SM70_NVLINK_BW, SM80_NVLINK_BW, SM86_NVLINK_BW, SM90_NVLINK_BW, SM100_NVLINK_BW = (
    18.0, 20.0, 20.0, 12.0, 20.6, 40.1)
# topo.h PCI_BW: "PCI Gen3 x16" = 16 lanes x 60 (x 100 Mb/s) / 80; the line rate is 15.75 GB/s
PCI_BW, PCIE3_X16_LINE_RATE_GBps = 12.0, 15.75
# topo.h LOC_BW: a GPU alone (no communication)
LOC_BW = 5000.0

# search.cc: the per-channel bandwidths the search tries, highest first
SPEED_ARRAY_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEED_ARRAY_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2,
                     0.24, 0.12)
SM90_SPEED_ARRAY_INTRA = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SM90_SPEED_ARRAY_INTER = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
                          0.12)
SM100_SPEED_ARRAY_INTRA = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
SM100_SPEED_ARRAY_INTER = (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                           3.0, 2.4, 1.2, 0.24, 0.12)
# init.cc: the ring search may find up to MAXCHANNELS / 2 channels; connect.cc then doubles
# them (comm->nChannels = min(MAXCHANNELS, 2 nChannels)); device.h MAXCHANNELS, the newest
# release's (NcclEra.max_channels has each release's)
NEWEST_MAX_CHANNELS = NCCL_MAXCHANNELS
NCCL_MAX_NVLS_ARITY = 32  # device.h
# search.cc bounds how long it looks (NCCL_SEARCH_TIMEOUT 1 << 14 steps); so do we
SEARCH_BUDGET = 1 << 14
# What SHM gets of a PCI path: "using NICs instead of SHM you would always stay within the PCI
# switch and achieve 12GB/s instead of 9 or 6" (S. Jeaugey on a 12 GB/s PCIe 3.0 system,
# https://github.com/NVIDIA/nccl/issues/406): 9 of 12 through one CPU (PHB), 6 across two (SYS).
SHM_FRACTION = {PATH_PHB: 9.0 / 12.0, PATH_SYS: 6.0 / 12.0}


@dataclass(frozen=True)
class NicModel:
    """A NIC driven by a net plugin: what the plugin reports to NCCL and sets for it."""

    reported_latency_us: float  # ncclNetProperties_t.latency: NCCL's tuning adds it (interLat)
    # the plugin shows NCCL each GPU's NICs as one device of their summed speed (aws-ofi-nccl's
    # RDMA protocol: src/nccl_ofi_rdma.cpp "Scale speed by the total number of rails",
    # port_speed *= max_group_size; platform-aws.cpp default_protocol RDMA on p5 / p5e and
    # p5en, SENDRECV, one device per NIC, on p3dn and p4d / p4de)
    grouped_rails: bool = False
    # the only protocol the plugin leaves NCCL unless the user sets NCCL_PROTO (None: all):
    # aws-ofi-nccl sets NCCL_PROTO=simple (setenv without overwrite) where EFA does not deliver
    # 128-byte lines in order, which LL and LL128 need: "LL/LL128 protocols are not safe, such
    # as on P4d/P4e" (src/platform-aws.c, 76ebc2bc), platform_data_map force_proto_simple on
    # p3dn, p4d and p4de (0bac2382, v1.6.0 on); the endpoint's IN_ORDER_ALIGNED_128_BYTES check
    # since. Before that AWS's EFA guide asked for it ("NCCL_PROTO=simple is a must ... EFA
    # doesn't support LL and LL128", aws/aws-ofi-nccl#76). P5's RDMA writes report the
    # ordering (ece41f0c; allowed from v1.8.0 by 3d5e21db), P5en's are allowed (ef08e658).
    # NCCL reads NCCL_PROTO from 2.5 (tuning.cc); 2.4 chose LL by its threshold regardless.
    forced_protocol: str | None = None


# NICs a topology may name (a NIC node's `model`); one left out or unnamed is driven by NCCL's
# own IB / RoCE / socket transport, which reports no latency (net_ib.cc, net_socket.cc:
# "props->latency = 0; // Not set") and whose hop costs NCCL's hwLat[NET] figures. AWS's EFA
# plugin, aws-ofi-nccl: the reported latency from src/platform-aws.cpp platform_data_map
# (.latency: p3dn.24xlarge 150 us, p4d / p4de and p5 / p5e 75 us, p5en / p6-b200 35 us; set
# where NCCL's own model chose well with it, d87d61e0), which NCCL's model adds to each network
# hop (nccl_tuning.played_inter_latency).
NIC_MODELS = {
    "AWS EFA (p3dn)": NicModel(150.0, forced_protocol="Simple"),
    "AWS EFA (p4d)": NicModel(75.0, forced_protocol="Simple"),
    "AWS EFA (p5)": NicModel(75.0, grouped_rails=True),
    "AWS EFA (p5en)": NicModel(35.0, grouped_rails=True),
}


def nic_model(model: str | None, source: str | None = None) -> NicModel | None:
    """The net-plugin NIC a topology names (None: one NCCL drives itself); an unknown name is
    the one-line error naming the known ones."""
    if model is None:
        return None
    if model not in NIC_MODELS:
        raise UserInputError(f"unknown NIC model {model!r} for the nccl algorithm; known: "
                             f"{', '.join(NIC_MODELS)} (leave it out for InfiniBand, RoCE or sockets)",
                             source=source, field="nodes")
    return NIC_MODELS[model]


def shm_fraction(path_type: int) -> float:
    """The share of its PCI bandwidth an SHM hop gets (1 for other transports' paths)."""
    return SHM_FRACTION[PATH_SYS] if path_type >= PATH_SYS else SHM_FRACTION[PATH_PHB]


def nvlink_nccl_bw(capability: int) -> float:
    """NCCL's figure for one NVLink (topo.h ncclTopoNVLinkBw)."""
    if capability >= 100:
        return SM100_NVLINK_BW
    if capability >= 90:
        return SM90_NVLINK_BW
    if capability == 86:
        return SM86_NVLINK_BW
    if capability >= 80:
        return SM80_NVLINK_BW
    if capability >= 70:
        return SM70_NVLINK_BW
    if capability >= 60:
        return SM60_NVLINK_BW
    return SM80_NVLINK_BW


def link_efficiency(kind: str, capability: int) -> float:
    """NCCL's bandwidth over the line rate on a link of this kind (module docstring)."""
    if kind == "nvlink":
        return nvlink_nccl_bw(capability) / nvlink_line_rate_GBps(capability)
    if kind == "pcie":
        return PCI_BW / PCIE3_X16_LINE_RATE_GBps
    return 1.0


# the newest release's other search rules (NcclMachine.dup_channels, .hopper_doubling)
NEWEST_DUP_CHANNELS = "2.18"
NEWEST_HOPPER_DOUBLING = (90, 1000, 15)
NEWEST_MAX_GPUS = (640, "v2.30.7-1")  # NcclEra.topology_max_nodes, and the release's tag
NEWEST_MAX_LINKS = (576, "v2.30.7-1")  # NcclEra.topology_max_links, and the release's tag
# per GPU generation, from the lowest compute capability (x 10) it covers: (intra, inter)
SpeedTable = tuple[tuple[int, tuple[float, ...], tuple[float, ...]], ...]
NEWEST_SPEEDS: SpeedTable = ((0, SPEED_ARRAY_INTRA, SPEED_ARRAY_INTER),
                             (90, SM90_SPEED_ARRAY_INTRA, SM90_SPEED_ARRAY_INTER),
                             (100, SM100_SPEED_ARRAY_INTRA, SM100_SPEED_ARRAY_INTER))


def speed_arrays(capability: int, table: SpeedTable = NEWEST_SPEEDS) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """search.cc ncclTopoCompute: (intra-node, inter-node) speed arrays for this GPU generation,
    as the release's table has them (the newest release's by default)."""
    _, intra, inter = [row for row in table if row[0] <= capability][-1]
    return intra, inter


@dataclass(frozen=True)
class Hop:
    """How NCCL moves bytes from one rank to another: the directed links crossed (a host
    memory's pseudo-link included for SHM, as None entries are not allowed: see `memory`),
    NCCL's path type and transport."""

    links: tuple[int, ...]
    path_type: int
    transport: str  # "p2p" | "shm" | "net"
    memory: str | None = None  # the host whose DRAM an SHM hop writes and reads


@dataclass(frozen=True)
class Graph:
    """The result of one of NCCL's graph searches (src/graph/search.cc ncclTopoGraph)."""

    pattern: str  # ring | tree | nvls
    channels: int
    bw_intra: float  # GB/s per channel
    bw_inter: float
    type_intra: int
    type_inter: int
    orders: tuple[tuple[int, ...], ...] = ()  # ring: per channel, the global rank order
    nics: tuple[tuple[int, int], ...] = ()  # ring (multi-node): per channel, (NIC in, NIC out) index per node


def _check_topology_links(topology: Topology, rows: np.ndarray, max_links: tuple[int | None, str]) -> None:
    """One line where a node of NCCL's topology of these rank GPUs (`rows`, node indices) would
    have more links than the release allows (graph/topo.h NCCL_TOPO_MAX_LINKS;
    ncclTopoConnectNodes fails with "too many Topo links"): a GPU links to each GPU it has
    NVLinks to (merged into one link a peer), to the NVSwitch node and to its PCI parent;
    NCCL's one NVSwitch node of a machine (topo.cc: every NVSwitch is NVS node 0) links to
    every GPU on it. Only GPUs of the run count (NCCL's topology holds its communicator's)."""
    most, release = max_links
    if most is None:
        return
    kinds, link_kinds = topology.node_kind_codes, topology.link_kind_codes
    tail, head = topology.ends[:, 0], topology.ends[:, 1]
    ours = np.zeros(len(topology.nodes), dtype=bool)
    ours[rows] = True
    nvlink = link_kinds.mask("nvlink") & ours[tail]
    to_gpu = nvlink & ours[head]
    pairs = np.unique(tail[to_gpu].astype(np.int64) * len(ours) + head[to_gpu])  # NVLinks to one peer: one link
    count = np.bincount(pairs // len(ours), minlength=len(ours))
    switched = np.zeros(len(ours), dtype=bool)
    switched[tail[nvlink & kinds.mask("nvswitch")[head]]] = True
    count = count + switched + 1  # the NVSwitch node, the PCI parent
    worst = int(np.argmax(np.where(ours, count, -1)))
    on_switch = topology.machine_index[switched]
    fan_in = int(np.bincount(on_switch).max()) if on_switch.size else 0
    if count[worst] <= most and fan_in <= most:
        return
    ids = list(topology.nodes)
    if count[worst] > most:
        parts = [f"NVLinks to {int(count[worst]) - 1 - int(switched[worst])} GPUs"] + (
            ["its NVSwitch"] if switched[worst] else []) + ["its PCI parent"]
        what = f"GPU {ids[worst]!r} would have {int(count[worst])} links ({', '.join(parts)})"
    else:
        what = f"the NVSwitch node of a machine would link to {fan_in} GPUs"
    raise UserInputError(
        f"the nccl algorithm cannot run here: in NCCL {release}'s topology {what}, and a node may have at most "
        f"{most} (NCCL_TOPO_MAX_LINKS, src/graph/topo.h; ncclTopoConnectNodes fails with \"too many Topo links\"); "
        f"allowed: at most {most} links a node, a release that allows more (128 from 2.21, 576 from 2.25), "
        f"or another algorithm", source=topology.source, field="algorithms")


@dataclass
class NcclMachine:
    """NCCL's view of the first `ranks` rank devices of a topology."""

    topology: Topology
    ranks: int
    nodes: list[list[int]]  # ranks per machine, in rank order
    capability: int  # NCCL's minCompCap (x 10)
    max_capability: int
    cpu_vendor: str
    nvswitch: bool  # every machine's GPUs hang off an NVSwitch
    nvls_supported: bool
    nics: list[list[str]]  # per machine, its NIC node ids (those with a network link)
    nic: NicModel | None = None  # the NICs' net plugin (NIC_MODELS), None: NCCL's own transport
    # the release's search rules (gansim/collectives/nccl_versions.py NcclEra): when
    # ncclTopoDupChannels duplicates the ring's channels, and when connect.cc doubles the
    # communicator's channels again on Hopper and newer across machines
    dup_channels: str = NEWEST_DUP_CHANNELS
    hopper_doubling: tuple[int, int, int] | None = NEWEST_HOPPER_DOUBLING
    speeds: SpeedTable = NEWEST_SPEEDS  # the search's speed steps
    max_channels: int = NEWEST_MAX_CHANNELS  # the release's MAXCHANNELS
    # NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS as set (None: not set); whether the minimum
    # applies after the maximum cut the channels (from 2.5; 2.4: no)
    channel_limits: tuple[int | None, int | None] = (None, None)
    min_after_max: bool = True
    _hops: dict[tuple[int, int, int], Hop] = field(default_factory=dict, repr=False)
    _routes_from: set[int] = field(default_factory=set, repr=False)  # ranks whose machine's routes are found
    _cross_hops: dict[tuple[int, int, tuple[int, int] | None], Hop] = field(default_factory=dict, repr=False)
    # gansim/collectives/nccl.py's loads of every hop of a set of channels, per protocol's wire
    # factor and channels (the same for every message size)
    channel_hops: dict[tuple, tuple] = field(default_factory=dict, repr=False)
    channel_loads: dict[tuple, list] = field(default_factory=dict, repr=False)  # _channel_loads' results
    _nic_bws: dict[tuple[int, str], float] = field(default_factory=dict, repr=False)
    _first_links: dict[tuple[int, int], set[int]] = field(default_factory=dict, repr=False)  # _channel_bound's

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, topology: Topology, ranks: int, dup_channels: str = NEWEST_DUP_CHANNELS,
              hopper_doubling: tuple[int, int, int] | None = NEWEST_HOPPER_DOUBLING,
              speeds: SpeedTable = NEWEST_SPEEDS,
              max_gpus: tuple[int | None, str] = NEWEST_MAX_GPUS,
              max_links: tuple[int | None, str] = NEWEST_MAX_LINKS,
              max_channels: int = NEWEST_MAX_CHANNELS, min_after_max: bool = True,
              channel_limits: tuple[int | None, int | None] = (None, None)) -> "NcclMachine":
        nodes_of = topology.ranks[:ranks]
        machine = topology.machine_of
        groups = topology.rank_groups(ranks)
        most, release = max_gpus
        crowded = next((members for members in groups if most is not None and len(members) > most), None)
        if crowded is not None:
            raise UserInputError(
                f"the nccl algorithm cannot run {len(crowded)} ranks on one machine (that of {nodes_of[crowded[0]]!r}): "
                f"NCCL {release} keeps at most {most} GPUs of a machine in its topology (NCCL_TOPO_MAX_NODES, "
                f"src/include/graph.h) and fails to start past it; allowed: at most {most} ranks a machine, "
                f"or another algorithm", source=topology.source, field="algorithms")
        ids = list(topology.nodes)
        rows = topology.rank_index[:ranks]
        not_gpu = np.flatnonzero(~topology.node_kind_codes.mask("gpu")[rows])
        if not_gpu.size:
            node = nodes_of[int(not_gpu[0])]
            raise UserInputError(f"the nccl algorithm runs on GPUs; {node!r} is a {topology.nodes[node].kind}",
                                 source=topology.source, field="algorithms")
        _check_topology_links(topology, rows, max_links)
        # a GPU's capability follows from its model or its own field: worked out once per pair
        capability_of: dict[tuple[float | None, str | None], int] = {}
        caps = []
        for node in nodes_of:
            spec = topology.nodes[node]
            key = (spec.compute_capability, spec.model)
            if key not in capability_of:
                cap = compute_capability(spec)
                capability_of[key] = cap if cap is not None else 70  # unknown GPUs: Volta's figures (an assumption)
            caps.append(capability_of[key])
        hosts = np.flatnonzero(topology.node_kind_codes.mask("host"))
        vendor = cpu_vendor(topology.nodes[ids[hosts[0]]]) if hosts.size else "intel"
        nvswitches = [ids[i] for i in np.flatnonzero(topology.node_kind_codes.mask("nvswitch")).tolist()]
        # (every link is in `ends` both ways, so a node's links are those whose tail it is)
        tail, head = topology.ends[:, 0], topology.ends[:, 1]
        by_switch = np.zeros(len(ids), dtype=bool)
        by_switch[tail[topology.node_kind_codes.mask("nvswitch")[head]]] = True
        on_switch = bool(nvswitches) and bool(by_switch[rows].all())
        sharp = on_switch and all(
            topology.nodes[s].nvlink_sharp if topology.nodes[s].nvlink_sharp is not None else min(caps) >= 90
            for s in nvswitches)
        networked = np.zeros(len(ids), dtype=bool)
        networked[tail[topology.link_kind_codes.mask("net")]] = True
        on_net: dict[int, list[str]] = {}  # per machine, its NICs (nodes with a network link)
        for i in np.flatnonzero(networked & topology.node_kind_codes.mask("nic")).tolist():
            on_net.setdefault(machine[ids[i]], []).append(ids[i])
        nics: list[list[str]] = []
        for members in groups:
            found = sorted(on_net.get(machine[nodes_of[members[0]]], []))
            if not found:
                # a GPU linked to the network itself (one on a network switch: the switch
                # generator) is its machine's NIC, reached without a PCIe hop
                found = [nodes_of[r] for r in members if networked[rows[r]]]
            nics.append(found)
        named = {topology.nodes[n].model for found in nics for n in found
                 if topology.nodes[n].kind == "nic" and topology.nodes[n].model is not None}
        if len(named) > 1:
            raise UserInputError(f"NICs of different models {sorted(named)}: the nccl algorithm models one "
                                 "network", source=topology.source, field="nodes")
        plugin = nic_model(next(iter(named)), topology.source) if named else None
        return cls(topology, ranks, groups, min(caps), max(caps), vendor, on_switch,
                   # NCCL needs CUDA multicast and compute capability 9.0 for NVLS (search.cc
                   # ncclTopoCompute returns no NVLS graph "if NVS count == 0 || ccMin < 90")
                   bool(sharp and min(caps) >= 90), nics, plugin, dup_channels, hopper_doubling, speeds,
                   max_channels, channel_limits, min_after_max)

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    @cached_property
    def rank_nodes(self) -> list[str]:
        return self.topology.ranks[:self.ranks]

    # ------------------------------------------------------------------ links and paths
    def nccl_bw(self, link: int) -> float:
        """NCCL's figure for a directed link, GB/s."""
        return self._link_bw_list[link]

    @cached_property
    def _link_bw_list(self) -> list[float]:
        """link_bws as Python floats (the search reads them link by link)."""
        return self.link_bws.tolist()

    def path_type(self, links: list[int]) -> int:
        """NCCL's type of a path over these directed links (paths.cc ncclTopoSetPaths):
        NVLink only is NVL, one PCIe switch PIX, more PXB, through a CPU PHB, two CPUs SYS."""
        reached = self._link_head_kinds
        kinds = [reached[link] for link in links[:-1]]  # the nodes it passes through
        link_kinds = {self.topology.link_kinds[link] for link in links}
        if "net" in link_kinds:
            return PATH_NET
        hosts = kinds.count("host")
        if hosts >= 2:
            return PATH_SYS
        if hosts == 1:
            return PATH_PHB
        if link_kinds <= {"nvlink"}:
            return PATH_NVL
        return PATH_PXB if kinds.count("pcie_switch") + kinds.count("nic") > 1 else PATH_PIX

    @cached_property
    def _machine_of_rank(self) -> list[list[int]]:
        """Per rank, the ranks of its machine (`nodes`)."""
        out: list[list[int]] = [[] for _ in self.rank_nodes]
        for members in self.nodes:
            for r in members:
                out[r] = members
        return out

    @cached_property
    def _link_head_kinds(self) -> list[str]:
        """The kind of the node each directed link leads to."""
        kinds = [spec.kind for spec in self.topology.nodes.values()]
        return [kinds[i] for i in self.topology.ends[:, 1].tolist()]

    def hop(self, a: int, b: int, via_nic: tuple[str, str] | None = None) -> Hop:
        """How rank a's bytes reach rank b: P2P, SHM through b's host memory, or over the
        network through the NICs `via_nic` (out of a's machine, into b's)."""
        key = (a, b, hash(via_nic))
        found = self._hops.get(key)
        if found is not None:
            return found
        topo = self.topology
        na, nb = self.rank_nodes[a], self.rank_nodes[b]
        if via_nic is not None:
            links: list[int] = []
            for s, d in ((na, via_nic[0]), (via_nic[0], via_nic[1]), (via_nic[1], nb)):
                links += topo.route(s, d).links.tolist()
            found = Hop(tuple(links), PATH_NET, "net")
        else:
            if a not in self._routes_from:
                # every route out of a to its machine's ranks in one search (Topology.routes),
                # not one search per pair: rings and path types look at every pair of a machine
                self._routes_from.add(a)
                topo.routes([(na, self.rank_nodes[r]) for r in self._machine_of_rank[a] if r != a])
            direct = topo.route(na, nb).links.tolist()
            ptype = self.path_type(direct)
            if ptype == PATH_NET:
                found = Hop(tuple(direct), PATH_NET, "net")
            elif not self._staged(na, nb, ptype):
                found = Hop(tuple(direct), ptype, "p2p")
            else:
                host = topo.host_of.get(nb)
                if host is None:
                    raise UserInputError(f"{na} and {nb} cannot use peer-to-peer and no host node is near {nb} to "
                                         "stage their bytes in", source=topo.source, field="nodes")
                first, second = topo.route(na, host).links.tolist(), topo.route(host, nb).links.tolist()
                found = Hop(tuple(first + second), max(self.path_type(first), self.path_type(second), PATH_PHB),
                            "shm", memory=host)
        self._hops[key] = found
        return found

    def _staged(self, na: str, nb: str, ptype: int) -> bool:
        """Whether na's bytes to nb (on a path of type `ptype` that is not the network's) are
        staged in nb's host memory (SHM): the two cannot use peer-to-peer over that path."""
        capable = ptype == PATH_NVL or (self.topology.nodes[na].p2p and self.topology.nodes[nb].p2p)
        return not (capable and ptype <= self._p2p_level)

    @cached_property
    def _p2p_level(self) -> int:
        """paths.cc ncclTopoCheckP2p: the worst path P2P may take, NCCL_P2P_LEVEL where the
        topology gives it (its runs set it), else PXB, or SYS on AMD hosts with at most two
        GPUs."""
        if self.topology.nccl_p2p_level is not None:
            return PATH_NAMES.index(self.topology.nccl_p2p_level)
        return PATH_SYS if (self.cpu_vendor == "amd" and len(self.rank_nodes) <= 2) else PATH_PXB

    def hop_bw(self, hop: Hop) -> float:
        """NCCL's bandwidth of a path: its slowest link (paths.cc: path->bw is the minimum)."""
        return min((self.nccl_bw(link) for link in hop.links), default=LOC_BW)

    # ------------------------------------------------------------------ search
    def _gpu_total_bw(self, rank: int) -> float:
        """search.cc getTotalBw: a GPU's NVLink bandwidth summed, or its PCI link's."""
        return self._gpu_total_bws[rank]

    @cached_property
    def _gpu_total_bws(self) -> list[float]:
        """_gpu_total_bw of every rank: the NCCL figures of its links out summed (NVLink,
        in the order of its links) or their largest (PCIe, but to a NIC)."""
        topo = self.topology
        bw = self.link_bws
        tails = topo.ends[:, 0]
        nvlink = np.bincount(tails, weights=np.where(topo.link_kind_codes.mask("nvlink"), bw, 0.0),
                             minlength=len(topo.nodes))
        pci = np.zeros(len(topo.nodes))
        counted = topo.link_kind_codes.mask("pcie") & ~topo.node_kind_codes.mask("nic")[topo.ends[:, 1]]
        np.maximum.at(pci, tails[counted], bw[counted])
        rows = topo.rank_index[:self.ranks]
        return np.maximum(pci[rows], nvlink[rows]).tolist()

    @cached_property
    def link_efficiencies(self) -> np.ndarray:
        """link_efficiency of every directed link."""
        kinds = self.topology.link_kind_codes
        return np.array([link_efficiency(kind, self.capability) for kind in kinds.names])[kinds.codes]

    @cached_property
    def link_bws(self) -> np.ndarray:
        """nccl_bw of every directed link."""
        return self.topology.capacity_Bps / 1e9 * self.link_efficiencies

    def _nic_bw(self, machine: int, nic: str) -> float:
        """NCCL's bandwidth of the path from the NIC's nearest GPU to the network."""
        if not self._nic_bws:
            self._nic_bws.update(self._all_nic_bws())
        found = self._nic_bws.get((machine, nic))
        if found is None:
            topo = self.topology
            net = [topo.link_index(nic, m) for m in topo.neighbors(nic) if topo.link_kind(nic, m) == "net"]
            local = {self.rank_nodes[r] for r in self.nodes[machine]}
            to_gpu = [self.nccl_bw(topo.link_index(m, nic)) for m in topo.neighbors(nic) if m in local]
            found = self._nic_bws[(machine, nic)] = min([self.nccl_bw(x) for x in net] +
                                                        ([max(to_gpu)] if to_gpu else []))
        return found

    @cached_property
    def _every_nic_bw(self) -> list[float]:
        """_nic_bw of every machine's NICs, machine by machine."""
        return [self._nic_bw(m, nic) for m in range(self.node_count) for nic in self.nics[m]]

    def _all_nic_bws(self) -> dict[tuple[int, str], float]:
        """_nic_bw of every machine's NICs at once: the smallest of its network links' NCCL
        figures and the largest of those of its links from the machine's ranks."""
        topo = self.topology
        table = self.nic_nodes
        machine_of_nic = np.repeat(np.arange(table.shape[0]), table.shape[1])
        nic = table.ravel()
        machine_of_nic, nic = machine_of_nic[nic >= 0], nic[nic >= 0]
        slot = np.full(len(topo.nodes), -1, dtype=np.int64)
        slot[nic] = np.arange(nic.size)  # a NIC belongs to one machine
        bw = self.link_bws
        tail, head = topo.ends[:, 0], topo.ends[:, 1]
        net_min = np.full(nic.size, np.inf)
        out = np.flatnonzero((slot[tail] >= 0) & topo.link_kind_codes.mask("net"))
        np.minimum.at(net_min, slot[tail[out]], bw[out])
        rank_machine = np.full(len(topo.nodes), -1, dtype=np.int64)
        rank_machine[topo.rank_index[:self.ranks]] = self.rank_machine
        into = np.flatnonzero((slot[head] >= 0) & (rank_machine[tail] >= 0))
        into = into[rank_machine[tail[into]] == machine_of_nic[slot[head[into]]]]
        gpu_max = np.full(nic.size, -np.inf)
        np.maximum.at(gpu_max, slot[head[into]], bw[into])
        best = np.minimum(net_min, gpu_max)  # min(nets + [max(to_gpu)]), as _nic_bw takes it
        best = np.where(np.isfinite(gpu_max), best, net_min)
        ids = list(topo.nodes)
        return {(int(m), ids[n]): float(b) for m, n, b in zip(machine_of_nic.tolist(), nic.tolist(), best.tolist())
                if np.isfinite(b)}

    def nics_of(self, machine: int, rank: int) -> list[int]:
        """Indices of the NICs a rank links to directly (its rail NICs)."""
        node = self.rank_nodes[rank]
        return [i for i, nic in enumerate(self.nics[machine]) if nic == node or self.topology.has_link(node, nic)]

    def nic_gpu(self, machine: int, nic: int) -> int | None:
        """The first rank of a machine that links to NIC `nic` (None: no GPU does)."""
        name = self.nics[machine][nic]
        return next((r for r in self.nodes[machine]
                     if self.rank_nodes[r] == name or self.topology.has_link(self.rank_nodes[r], name)), None)

    def _ring_orders(self, members: list[int], bw: float, max_type: int, want: int) -> list[list[int]]:
        """Up to `want` rings through the machine's ranks at `bw` GB/s each, no path worse
        than `max_type` (search.cc ncclTopoSearchRec: every channel starts at the first GPU,
        tries next GPUs by path bandwidth, then hops, then index; the NCCL bandwidth left on
        each link is what constrains; depth-first with backtracking within a step budget)."""
        n = len(members)
        if n == 1:
            return [[members[0]]] * want
        # no GPU can start more channels than its links out carry at bw: stop there
        want = min(want, min(self._channel_bound(r, members, bw, max_type) for r in members))
        if want <= 0:
            return []
        residual: dict[int, float] = {}

        def fits(hop: Hop, sign: float) -> bool:
            for link in hop.links:
                left = residual.setdefault(link, self.nccl_bw(link))
                if sign > 0 and left < bw - 1e-9:
                    return False
            for link in hop.links:
                residual[link] = round((residual[link] - sign * bw) * 1000) / 1000  # search.cc SUB_ROUND
            return True

        def candidates(cur: int, used: set[int]) -> list[int]:
            here = members.index(cur)
            if self.nvswitch:  # search.cc NextGpuSort: "NVSwitches prefer when we talk to a limited
                # set of peers": only the next and the previous GPU are tried
                near = [members[(here + 1) % n], members[(here - 1) % n]]
                return [r for r in near if r not in used and self.hop(cur, r).path_type <= max_type]
            options = []
            for i, r in enumerate(members):
                if r in used:
                    continue
                hop = self.hop(cur, r)
                if hop.path_type > max_type:
                    continue
                options.append((-self.hop_bw(hop), len(hop.links), (i - here) % n, r))
            options.sort()
            return [o[3] for o in options]

        budget = [SEARCH_BUDGET]
        best: list[list[int]] = []
        chosen: list[list[int]] = []

        # The search goes as deep as it has steps (a ring of a 72-GPU machine is 72 calls deep,
        # each further channel as deep again), past Python's recursion limit: each call of
        # `extend` is a generator that yields the calls it makes, run from a stack of them.
        Call = tuple[list[int], set[int]]

        def extend(order: list[int], used: set[int]) -> Iterator[Call]:
            nonlocal best
            if budget[0] <= 0 or len(best) >= want:
                return
            budget[0] -= 1
            cur = order[-1]
            if len(order) == n:
                back = self.hop(cur, order[0])
                if back.path_type <= max_type and fits(back, 1):
                    chosen.append(list(order))
                    if len(chosen) > len(best):
                        best = [list(c) for c in chosen]
                    if len(chosen) < want:
                        yield [members[0]], {members[0]}
                    chosen.pop()
                    fits(back, -1)
                return
            for nxt in candidates(cur, used):
                hop = self.hop(cur, nxt)
                if fits(hop, 1):
                    order.append(nxt)
                    used.add(nxt)
                    yield order, used
                    used.discard(nxt)
                    order.pop()
                    fits(hop, -1)
                if len(best) >= want or budget[0] <= 0:
                    return

        calls = [extend([members[0]], {members[0]})]
        while calls:
            made = next(calls[-1], None)
            if made is None:
                calls.pop()
            else:
                calls.append(extend(*made))
        return best

    def _channel_bound(self, rank: int, members: list[int], bw: float, max_type: int) -> int:
        """How many channels of bw can leave a rank at most: every channel's hop out of it
        starts on one of the links its allowed paths start with."""
        key = (rank, max_type)
        first = self._first_links.get(key)
        if first is None:  # the same for every bandwidth the search tries
            first = self._first_links[key] = {
                self.hop(rank, other).links[0] for other in members
                if other != rank and self.hop(rank, other).path_type <= max_type and self.hop(rank, other).links}
        return sum(int(self.nccl_bw(link) / bw + 1e-9) for link in first)

    def _min_type(self, members: list[int]) -> int:
        if len(members) < 2:
            return PATH_LOC
        return min(self.hop(a, b).path_type for a in members for b in members if a != b)

    def _max_type(self, members: list[int]) -> int:
        if len(members) < 2:
            return PATH_LOC
        return max(self.hop(a, b).path_type for a in members for b in members if a != b)

    def _channels_at(self, bw: float, max_type: int, want: int, nics: bool = True) -> tuple[int, list[list[int]]]:
        """How many rings fit at `bw` in every machine (their minimum, as NCCL takes the
        minimum over nodes, init.cc), and machine 0's intra-node orders; each channel also
        through a NIC at `bw` where there are machines to reach and `nics`."""
        counts, orders0 = [], []
        seen: dict[tuple, int] = {}
        for m, (members, shape) in enumerate(zip(self.nodes, self._machine_shapes)):
            if shape in seen and m > 0:
                counts.append(seen[shape])
                continue
            limit = want
            if self.node_count > 1 and nics:
                limit = min(want, sum(int(self._nic_bw(m, nic) // bw) for nic in self.nics[m]))
            orders = self._ring_orders(members, bw, max_type, limit) if limit > 0 else []
            seen[shape] = len(orders)
            counts.append(len(orders))
            if m == 0:
                orders0 = orders
        return min(counts), orders0

    @cached_property
    def _machine_shapes(self) -> list[tuple]:
        """Per machine, what _channels_at takes as alike: its GPU count and models."""
        return [(len(members), tuple(self.topology.nodes[self.rank_nodes[r]].model for r in members))
                for members in self.nodes]

    @cached_property
    def ring(self) -> Graph:
        """search.cc ncclTopoCompute for the ring pattern (first pass: from the highest speed
        down, path types from the best up; then DupChannels; second pass: raise the speed), for at
        most MAXCHANNELS / 2 channels (init.cc ringGraph maxChannels)."""
        intra_speeds, inter_speeds = speed_arrays(self.capability, self.speeds)
        most = self.max_channels // 2
        inter = self.node_count > 1
        speeds = inter_speeds if inter else intra_speeds
        members0 = self.nodes[0]
        if len(self.rank_nodes) == 1:
            return Graph("ring", 1, LOC_BW, LOC_BW, PATH_LOC, PATH_LOC, ((0,),))
        if inter:
            max_bw = max(self._every_nic_bw)
        else:
            max_bw = max((self.hop_bw(self.hop(a, b)) for a in members0 for b in members0 if a != b), default=LOC_BW)
        total_bw = max(self._gpu_total_bws)
        if len(members0) == 1:
            total_bw = max_bw
        min_type = self._min_type(members0)
        # machines are searched as alike (one of each size), as _channels_at does
        max_type = max(self._max_type(m) for m in {len(m): m for m in self.nodes}.values())
        i = 0
        while i < len(speeds) - 1 and (speeds[i] > max_bw or speeds[i] > total_bw):
            i += 1
        best: tuple[int, float, int, list[list[int]]] | None = None
        while True:
            found = None
            for ptype in range(min_type, max(max_type, min_type) + 1):
                count, orders = self._channels_at(speeds[i], ptype, most)
                if count >= 1:
                    found = (count, speeds[i], ptype, orders)
                    break
            if found and (best is None or found[0] * found[1] > best[0] * best[1]):
                best = found
            if best and (best[0] == most or best[0] * best[1] >= total_bw):
                break
            if i < len(speeds) - 1 and (best is None or speeds[i + 1] / best[1] > .49):
                i += 1
                continue
            break
        if best is None:  # search.cc: "Could not find a path", one slow channel in rank order
            order = list(range(self.ranks))
            return Graph("ring", 1, 0.1, 0.1, PATH_SYS, PATH_SYS, (tuple(order),), ((0, 0),))
        count, bw, ptype, orders = best
        # ncclTopoDupChannels: fast channels are duplicated, each with half the bandwidth
        if self._duplicates(bw, count):
            dup = min(2 * count, most)
            bw /= math.ceil(dup / count)
            orders = (orders * 2)[:dup]
            count = dup
        # pass 2: raise the speed while the same number of channels still fits
        j = next((k for k, s in enumerate(speeds) if s <= bw), len(speeds) - 1)
        while j > 0:
            got, more = self._channels_at(speeds[j - 1], ptype, count)
            if got < count:
                break
            j -= 1
            bw, orders = speeds[j], more
        orders = (orders * count)[:count] if orders else [list(self.nodes[0])] * count
        placed = [self._global_order(orders[c % len(orders)], c) for c in range(count)]
        type_inter = PATH_PIX if inter else PATH_LOC
        return Graph("ring", count, bw, bw, ptype, type_inter, tuple(o for o, _ in placed), tuple(n for _, n in placed))

    def _duplicates(self, bw: float, count: int) -> bool:
        """search.cc ncclTopoDupChannels, as the release has it: from 2.18, not below 25 GB/s
        a channel, nor past Ampere below 50 GB/s with more than 4 channels; 2.16-2.17, from
        25 GB/s up to Ampere and 50 GB/s on Hopper ("(ccMin <= 80 && bwIntra >= 25.0) ||
        (ccMin <= 90 && bwIntra >= 50.0)"); before, from 25 GB/s on every GPU."""
        cap = self.capability
        if self.dup_channels == "2.16":
            return (cap <= 80 and bw >= 25.0) or (cap <= 90 and bw >= 50.0)
        if self.dup_channels == "2.7":
            return bw >= 25.0
        return bw >= 25.0 and not (cap > 80 and bw < 50.0 and count > 4)

    def _global_order(self, local: list[int], channel: int) -> tuple[tuple[int, ...], tuple[int, int]]:
        """A channel's ring over every rank, and its (NIC in, NIC out) index on every machine:
        machine 0's intra-node order mapped onto each machine (machines are alike), rotated to
        enter at the GPU of NIC (channel mod NICs) and leave from the GPU before it, through
        that GPU's NIC of the same rank among its own (NCCL's rings enter through one NIC and
        may leave through another, crossNic, search.cc), machines in order (connect.cc
        connectRings). Across the channels every NIC carries as many in as out."""
        base = self.nodes[0]
        position = [base.index(r) for r in local]
        table = self._rank_table
        if table is not None:  # machines of one size: every machine's order at once
            picked = table[:, position]
            orders = [picked[0].tolist()]
        else:
            orders = [[members[q] for q in position] if len(members) == len(base) else list(members)
                      for members in self.nodes]
        start = 0
        nics = (0, 0)
        if self.node_count > 1 and self.nics[0]:
            k = channel % len(self.nics[0])
            first = self.nic_gpu(0, k)
            if first is not None and first in orders[0]:
                start = orders[0].index(first)
                if table is None:
                    orders = [o[start:] + o[:start] for o in orders]
                slot = self.nics_of(0, first).index(k)
                last = orders[0][-1] if table is None else orders[0][start - 1]
                exits = self.nics_of(0, last) or [k]
                nics = (k, exits[slot % len(exits)])
            else:
                nics = (k, k)
        if table is not None:
            turned = picked[:, (np.arange(len(position)) + start) % len(position)] if position else picked
            return tuple(turned.ravel().tolist()), nics
        return tuple(r for o in orders for r in o), nics

    @cached_property
    def _rank_table(self) -> np.ndarray | None:
        """The ranks of each machine as rows, where every machine has as many (else None)."""
        sizes = {len(members) for members in self.nodes}
        return np.array(self.nodes, dtype=np.int64) if len(sizes) == 1 else None

    @cached_property
    def tree(self) -> Graph:
        """The tree graph: NCCL searches it with the ring's channel count (init.cc: tree
        min = max channels = ring channels). Simplified here: between machines the NICs'
        share per channel (bwInter); inside a machine, pass 2 of ncclTopoCompute raises
        bwIntra up to twice bwInter while the channels still fit ("increase bwIntra for
        trees"), a check of GPU-to-GPU paths only: search.cc ncclTopoFollowPath holds paths
        between GPUs (and NVSwitches) to bwIntra and paths to a NIC to bwInter."""
        ring = self.ring
        if self.node_count == 1:
            return Graph("tree", ring.channels, ring.bw_intra, ring.bw_intra, ring.type_intra, PATH_LOC)
        intra_speeds, inter_speeds = speed_arrays(self.capability, self.speeds)
        nic_bw = min(self._every_nic_bw)
        per_nic = max(1, math.ceil(ring.channels / max(len(self.nics[0]), 1)))
        bw_inter = next((s for s in inter_speeds if s <= nic_bw / per_nic), inter_speeds[-1])
        bw_intra = bw_inter
        members = self.nodes[0]
        for s in sorted((x for x in inter_speeds if bw_inter < x <= 2 * bw_inter), reverse=False):
            count, _ = self._channels_at(s, self._max_type(members), ring.channels, nics=False) \
                if len(members) > 1 else (ring.channels, [])
            if count >= ring.channels:
                bw_intra = s
        return Graph("tree", ring.channels, bw_intra, bw_inter, ring.type_intra, PATH_PIX)

    @cached_property
    def nvls(self) -> Graph | None:
        """search.cc for NVLS: one channel per GPU (a "head"), forced when there is no
        network; each channel uses its bandwidth on every GPU's links to the switch in both
        directions and twice on its head's (ncclTopoSearchTryNvls). None without NVLS."""
        if not self.nvls_supported:
            return None
        members = self.nodes[0]
        heads = min(NCCL_MAX_NVLS_ARITY, len(members))
        per_gpu = min(self._gpu_total_bw(r) for r in members)
        speeds = speed_arrays(self.capability, self.speeds)[1 if self.node_count > 1 else 0]
        # heads channels, each taking bw from every GPU and 2 bw from its head: (heads + 1) bw
        i = next((k for k, s in enumerate(speeds) if (heads + 1) * s <= per_gpu + 1e-9), len(speeds) - 1)
        bw = speeds[i]
        # pass 2 raises bwInter while the search still succeeds and bwInter < 2 bwIntra: inside
        # one machine nothing limits it; across machines, the NICs
        limit = float("inf") if self.node_count == 1 else min(self._every_nic_bw)
        if self.node_count > 1 and self.nic is not None and self.nic.grouped_rails:
            # one device per GPU, as fast as its NICs together (NicModel.grouped_rails)
            limit = min(sum(self._nic_bw(m, self.nics[m][k]) for k in self.nics_of(m, r)) or limit
                        for m in range(self.node_count) for r in self.nodes[m])
        j = i
        while j > 0 and speeds[j] < 2 * bw and speeds[j - 1] <= limit:
            j -= 1
        bw_inter = speeds[j] if speeds[j] <= limit else next((s for s in speeds if s <= limit), speeds[-1])
        return Graph("nvls", heads, bw, bw_inter, PATH_NVL, PATH_PIX if self.node_count > 1 else PATH_LOC)

    @property
    def doubled_channels(self) -> int:
        """connect.cc: the ring graph's channels, doubled, each copy on NCCL's other tree
        ("Duplication should be complete now"), at most MAXCHANNELS."""
        return min(self.max_channels, 2 * self.ring.channels)

    @property
    def searched_comm_channels(self) -> int:
        """comm->nChannels before NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS: the doubled channels,
        doubled again across machines on rings faster than 45 GB/s, from 2.18 ("Use 4 compute
        channels per search channel to reach peak BW on <8 PPN"): on compute capability 9.0
        only until 2.24 ("minCompCap == 90", then ">= 90"), up to 16 channels before it in
        2.18-2.19 ("2*nChannels <= MAXCHANNELS"), fewer than 16 from 2.20. The graph's
        bandwidth is what these channels carry together."""
        ring = self.ring
        n = self.doubled_channels
        if self.hopper_doubling is not None:
            low, high, most = self.hopper_doubling  # capabilities it applies to, channels before it
            if low <= self.capability <= high and self.node_count > 1 and ring.bw_intra > 45.0 and n <= most:
                n = min(self.max_channels, 2 * n)
        return n

    def _limited_channels(self) -> tuple[int, int]:
        """(channels left by NCCL_MAX_NCHANNELS, then those NCCL_MIN_NCHANNELS makes of them):
        connect.cc caps comm->nChannels at the maximum, then copies channels up to the minimum
        ("We permit combining max, then min, to only use the first channels, then duplicate
        them"), each at most MAXCHANNELS (ncclMinNchannels, ncclMaxNchannels). 2.4's
        misc/rings.cc applies the minimum only where the maximum did not cut the rings
        ("maxNrings <= *nrings") and ignores one above the maximum."""
        n = self.searched_comm_channels
        least, most = self.channel_limits
        cut = n if most is None else min(n, most, self.max_channels)
        if least is None:
            return cut, cut
        least = min(least, self.max_channels)
        if not self.min_after_max and most is not None and (most <= n or least > most):
            return cut, cut
        return cut, max(cut, least)

    @property
    def comm_channels(self) -> int:
        """comm->nChannels: searched_comm_channels within NCCL_MIN_NCHANNELS and
        NCCL_MAX_NCHANNELS (_limited_channels)."""
        return self._limited_channels()[1]

    def source_channel(self, channel: int) -> int:
        """The one of the doubled channels (doubled_channels) whose ring and tree a channel of
        the communicator runs: connect.cc's copyChannels copies channel c from c - start, so
        the copies made up to NCCL_MIN_NCHANNELS repeat the channels NCCL_MAX_NCHANNELS left,
        and those of the doubling across machines repeat the doubled ones."""
        cut, _ = self._limited_channels()
        channel %= cut
        return channel % self.doubled_channels

    def prefetch(self, hops: list[tuple[int, int, tuple[int, int] | None]]) -> None:
        """Compute the routes of many hops (a, b, NICs) in one batch (Topology.routes) before
        `cross_hop` asks for them one by one."""
        machine, names, pairs, inside = self.topology.machine_of, self.rank_nodes, [], []
        for a, b, nics in set(hops):
            na, nb = names[a], names[b]
            ma, mb = self._machine_index(a), self._machine_index(b)
            if machine[na] == machine[nb] or not self.nics[ma] or not self.nics[mb]:
                pairs.append((na, nb))
                if machine[na] == machine[nb]:
                    inside.append((na, nb))
                    if a not in self._routes_from:
                        # what `hop` asks for, one rank at a time: every route out of a to its machine's ranks
                        self._routes_from.add(a)
                        pairs += [(na, names[r]) for r in self._machine_of_rank[a] if r != a]
                continue
            if nics is None:
                nics = ((self.nics_of(ma, a) or [0])[0], (self.nics_of(mb, b) or [0])[0])
            out, into = self.nics[ma][nics[0]], self.nics[mb][nics[1]]
            pairs += [(na, out), (out, into), (into, nb)]
        topo = self.topology
        topo.routes(pairs)
        # and, for the hops inside a machine staged in the receiver's host memory, the routes through it
        staged = []
        for na, nb in inside:
            ptype = self.path_type(topo.route(na, nb).links.tolist())
            host = topo.host_of.get(nb)
            if ptype != PATH_NET and host is not None and self._staged(na, nb, ptype):
                staged += [(na, host), (host, nb)]
        topo.routes(staged)

    def cross_hop(self, a: int, b: int, nics: tuple[int, int] | None = None) -> Hop:
        """A hop between ranks; between machines, out through NIC nics[0] of a's machine and in
        through NIC nics[1] of b's (default: each rank's first own NIC)."""
        machines = self._rank_machines
        if machines[a] == machines[b]:
            return self.hop(a, b)
        found = self._cross_hops.get((a, b, nics))
        if found is None:
            found = self._cross_hops[(a, b, nics)] = self._cross_hop(a, b, nics)
        return found

    def _cross_hop(self, a: int, b: int, nics: tuple[int, int] | None) -> Hop:
        machine = self.topology.machine_of
        na, nb = self.rank_nodes[a], self.rank_nodes[b]
        if machine[na] == machine[nb]:
            return self.hop(a, b)
        ma, mb = self._machine_index(a), self._machine_index(b)
        if not self.nics[ma] or not self.nics[mb]:
            return self.hop(a, b)
        if nics is None:
            nics = ((self.nics_of(ma, a) or [0])[0], (self.nics_of(mb, b) or [0])[0])
        return self.hop(a, b, (self.nics[ma][nics[0]], self.nics[mb][nics[1]]))

    @cached_property
    def nic_nodes(self) -> np.ndarray:
        """Per machine, the node indices of its NICs (`nics`), -1 past its last."""
        index = self.topology.node_index
        out = np.full((self.node_count, max([len(n) for n in self.nics] + [1])), -1, dtype=np.int64)
        for m, names in enumerate(self.nics):
            out[m, :len(names)] = [index[n] for n in names]
        return out

    @cached_property
    def _rank_machines(self) -> list[int]:
        return self.rank_machine.tolist()

    def _machine_index(self, rank: int) -> int:
        return int(self.rank_machine[rank])

    @cached_property
    def rank_machine(self) -> np.ndarray:
        """Per rank, the index of its machine in `nodes`."""
        out = np.zeros(self.ranks, dtype=np.int64)
        for m, members in enumerate(self.nodes):
            out[members] = m
        return out
