"""NCCL's tuning model as it stood in each release: the constants and rules of
src/graph/tuning.cc (ncclTopoTuneModel, ncclTopoGetAlgoTime) that changed between versions,
read from the release tags of NVIDIA/nccl (v2.5.7-1 ... v2.30.7-1). gansim/collectives/
nccl_tuning.py applies whichever era a topology or scenario names (`nccl_version`), so a
measurement taken with NCCL 2.18 is compared with 2.18's choices and figures, not today's.

An era starts at the first release whose tuning.cc differs in something the model uses and
holds until the next era; each field says in which tag it was read. What the model takes
from tuning.cc and did not change across these eras (the per-protocol thread counts and
thresholds, the tree's LL128 share on one node) stays in nccl_tuning.py.

Releases 2.5 to 2.11 had fewer tables: LL128's cap per collective rather than per GPU
generation (ll128MaxBwPerCh[coll] from 2.7, ll128MaxBw[coll] for all channels together
before), one tree cap for all channels before 2.8 (perChMaxTreeBws from 2.8), no llMaxBws
before 2.8; their fields below say so. Releases before 2.5 had no tuning model at all
(src/graph/tuning.cc arrived in v2.5.6-1; 2.4 chose the tree by a threshold and LL by
another, init.cc ncclTreeThreshold and enqueue.cc getKernelInfo): 2.4 chooses by those
thresholds and is timed by 2.5's figures (ERA_2_4); releases before 2.4 are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gansim.collectives.nccl_topology import NEWEST_DUP_CHANNELS, NEWEST_HOPPER_DOUBLING
from gansim.core.errors import UserInputError
from gansim.core.nccl_release import check_version, parse_version

Triple = tuple[float, float, float]  # per protocol: LL, LL128, Simple
Row = tuple[float, float, float]  # per node count: 1 node, 2 nodes, more (the "N1/N2/N4" columns)

# GPU generations, as tuning.cc's compCapIndex rows
VOLTA, AMPERE, HOPPER, BLACKWELL = range(4)

# search.cc: the per-channel bandwidths the graph search tries, per GPU generation (from the
# lowest compute capability x 10 it covers): (intra-node, inter-node); one array for both
# before 2.10, Hopper's own from 2.16, Blackwell's from 2.25
_LOW = (2.4, 1.2, 0.24, 0.12)
_TAIL = (10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
_ONE_2_6 = (24.0, 21.0, 18.0, 15.0, 12.0) + _TAIL + _LOW  # v2.6.4-1 (2.5 taken as 2.6)
_ONE_2_7 = (42.0,) + _ONE_2_6  # v2.7.8-1
_ONE_2_8 = (42.0, 30.0) + _ONE_2_6  # v2.8.4-1, v2.9.9-1
_INTRA_2_10 = (44.0, 30.0, 22.0, 18.0, 15.0, 12.0) + _TAIL  # v2.10.3-1 ... v2.17.1-1
_INTER_2_10 = (48.0, 30.0, 24.0, 22.0, 18.0, 15.0, 12.0) + _TAIL + _LOW  # v2.10.3-1 ... v2.14.3-1
_INTER_2_15 = (48.0, 30.0, 28.0, 24.0, 22.0, 18.0, 15.0, 12.0) + _TAIL + _LOW  # v2.15.5-1 ... v2.17.1-1
_INTRA_2_18 = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0) + _TAIL  # v2.18.3-1 on
_INTER_2_18 = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0) + _TAIL + _LOW
_SM90_2_16 = ((66.0, 33.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0), (48.0, 45.0, 30.0, 24.0, 15.0, 12.0, 6.0, 3.0) + _LOW)
_SM90_INTER_2_18 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0) + _LOW
_SM90_2_18 = ((60.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0), _SM90_INTER_2_18)
_SM90_INTER_2_19 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0) + _LOW
_SM90_2_19 = ((60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0), _SM90_INTER_2_19)
_SM90_2_21 = ((60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0), _SM90_INTER_2_19)
_SM100_INTRA_2_25 = (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0)
_SM100_2_25 = (_SM100_INTRA_2_25, _SM90_INTER_2_19)
_SM100_2_27 = (_SM100_INTRA_2_25 + (18.0,), (47.9,) + _SM90_INTER_2_19[1:])
_SM100_2_28 = (_SM100_INTRA_2_25 + (18.0,), (96.0, 48.0, 45.1) + _SM90_INTER_2_19[2:])
_SM100_INTRA_2_29 = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
_SM100_2_29 = (_SM100_INTRA_2_29, (96.0, 80.0, 48.0, 45.1) + _SM90_INTER_2_19[2:])


def _speeds(default: tuple, *newer: tuple[int, tuple]) -> tuple:
    """A release's speed table: its arrays for every GPU, then those of newer generations."""
    return ((0, *default),) + tuple((cap, *arrays) for cap, arrays in newer)


# tuning.cc treeCorrectionFactor ("Trees are not perfectly sticking to the model for medium
# sizes"): per protocol (LL, LL128, Simple), powers of two from 64 B
TREE_CORRECTION_2_5 = (  # v2.5.7-1, v2.6.4-1
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .5, .5, .6, .7, .8, .9, .9, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .8, .7, .7, .7, .6, .6, .7, .7, .8, .8, .9, .9, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
)
TREE_CORRECTION_2_7 = (  # v2.7.8-1
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),
    TREE_CORRECTION_2_5[2],
)
TREE_CORRECTION_2_8 = (  # v2.8.4-1, v2.9.9-1
    TREE_CORRECTION_2_7[0] + (1.0,),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, .92, .92),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)
TREE_CORRECTION_2_10 = (  # v2.10.3-1 on
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)


@dataclass(frozen=True)
class NcclEra:
    """What tuning.cc held from release `first` on."""

    first: tuple[int, int]
    tag: str  # the release tag the figures were read from
    base_latency: dict[str, Triple]  # baseLat, us
    hw_latency: dict[str, dict[str, Triple]]  # hwLat[NVLINK | PCI | NET][algorithm], us per hop
    ll_max_bws: tuple[Row, ...]  # llMaxBws by row (GPU generation on one node, CPU vendor across)
    per_ch_ring_ll128: tuple[Row, ...]  # perChMaxRingLL128Bws (ll128MaxBwPerCh before 2.17)
    per_ch_tree_ll128: tuple[Row, ...]
    per_ch_tree: tuple[Row, ...]  # perChMaxTreeBws
    per_ch_nvls_tree: tuple[Row, ...] = ()  # perChMaxNVLSTreeBws (2.28 on); none: no cap
    # how compCapIndex is found: "exact" (2.12-2.16: a row only for min == max == 80 (90),
    # every other GPU takes Volta's) or "at_least" (2.17 on: >= 90 Hopper, >= 80 Ampere)
    arch_rule: str = "at_least"
    blackwell_row: bool = False  # 2.28 on: >= 100 has its own row
    bus_caps: dict[int, float] = field(default_factory=dict)  # "busBw = std::min(busBw, 235.0f)" per generation
    ll_ring_factor: float = 0.5  # ring LL bus bandwidth factor: 1/4 before 2.21, .5 from 2.21
    # 2.7-2.20: 1/3 instead for a single node's collectives other than all-reduce (and reduce)
    ll_ring_single_node_other_factor: float | None = None
    ll128_ring_factor: float = 0.92  # "0.92 /*120.0/128.0*/" from 2.7; 120/128 before
    ll128_ring_one_gpu_per_node_factor: float = 0.92  # 0.7 "if ppn < 2" before 2.23
    multi_node_ll_intra_factor: float = 1.0  # "if (nNodes > 1 && p == NCCL_PROTO_LL) intraLat *= 1.8" before 2.18
    inter_steps_all_nodes: bool = False  # all-reduce ring nInterSteps = 2*nNodes (2.12-2.22) instead of 2*(nNodes-1)
    one_gpu_per_node_tree_net_latency: bool = True  # "interLat = ppn == 1 ? hwLat[NET][TREE]" from 2.23
    net_overhead: bool = True  # getNetOverhead (Intel 1 us, AMD 2 us) from 2.18
    # the ring's "plateau effect" on multi-node Simple all-reduce latency: "by_generation"
    # (2.18 on), "ranks" (2.7-2.17: x1.9 from nBytes >= nRanks/16*64 KiB), None (before 2.7)
    plateau: str | None = "by_generation"
    # NVLS: None (before 2.17), "ring_graph" (2.17: the ring graph's bandwidth x .75),
    # "five_sixths" (2.18-2.27: the NVLS graph's bandwidth x 5/6), "efficiency" (2.28 on:
    # nvlsEfficiency and the (channels - 1) / channels share)
    nvls: str | None = "efficiency"
    nvls_tree: bool = True
    nvls_tree_ratio_2_18: bool = False  # 2.18 only: NVLS-Tree ratio .70 * nNodes / (2 (nNodes - 1))
    nvls_efficiency: tuple[float, ...] = (0.0, 0.0, 0.85, 0.74)
    # compute capabilities (x 10) LL128 is enabled on by default: None = any from 7.0 (2.27
    # on, "!(minCompCap < 70 ...)"); before, a switch on minCompCap
    ll128_capabilities: frozenset[int] | None = None
    ll128_intra_path: str = "nvb"  # typeIntra <= PATH_NVB (2.18 on) or <= PATH_NVL (before)
    ll128_pxn_from_hopper: bool = True  # typeInter <= PATH_PXN allowed on >= 9.0 (2.17 on)
    # enqueue.cc computeCollChunkInfo for NVLS-Tree: the chunk it starts from (2.18-2.20 the
    # Simple stepSize, buffSize 4 MiB / NCCL_STEPS 8; from 2.21 comm->nvlsChunkSize,
    # NCCL_NVLS_CHUNKSIZE 128 KiB) and its cap from 4 nodes on (2.19 on: 64 KiB; None: none)
    nvls_tree_first_chunk: int = 128 * 1024
    nvls_tree_many_nodes_chunk: int | None = 64 * 1024
    # transport/nvls.cc: NVLS channels (CTAs) by default, Hopper and Blackwell (NVLS_NCHANNELS
    # 16 for every GPU before 2.25; NVLS_NCHANNELS_SM100 32 from 2.25)
    nvls_channels_sm100: int = 32
    # include/graph.h NCCL_TOPO_MAX_NODES: the most nodes of one kind (GPUs of a machine among
    # them) NCCL's topology holds; ncclTopoCreateNode fails past it ("tried to create too many
    # nodes of type 0"): 256 from 2.5 (2.4 had no topology search) to 2.26, 576 in 2.27-2.28,
    # 640 from 2.29; None: no such bound
    topology_max_nodes: int | None = 640
    # graph/topo.h NCCL_TOPO_MAX_LINKS: the most links one node of NCCL's topology has (NVLinks
    # to one peer merged into one link); ncclTopoConnectNodes fails past it ("too many Topo
    # links"): 32 from 2.5 to 2.20, 128 in 2.21-2.24, 576 from 2.25; None: no such bound (2.4)
    topology_max_links: int | None = 576
    # device.h MAXCHANNELS: the most channels a communicator has (connect.cc caps comm->nChannels
    # at it) and, halved, the most the ring search looks for (init.cc "ringGraph.maxChannels =
    # MAXCHANNELS/2"): 16 in v2.4.8-1, 32 from v2.5.6-1 to v2.24.3-1, 64 from v2.25.1-1
    max_channels: int = 64
    # NCCL_MIN_NCHANNELS applies after NCCL_MAX_NCHANNELS cut the channels (connect.cc, from
    # 2.5); 2.4's misc/rings.cc takes NCCL_MIN_NRINGS only where NCCL_MAX_NRINGS did not cut
    min_channels_after_max: bool = True
    # tuning.cc interLat with a net plugin's latency (graph->latencyInter): added to hwLat[NET]
    # (twice for Simple, for the flush) from 2.18; 2.12-2.17 it replaced hwLat[NET]; before
    # 2.12 NCCL did not read it (plugin_latency_read False)
    plugin_latency_adds: bool = True
    plugin_latency_read: bool = True
    tree_correction: tuple[tuple[float, ...], ...] = TREE_CORRECTION_2_10
    # -- what releases before 2.12 did differently (defaults: as 2.10 on)
    # LL128's bandwidth cap by collective: ll128MaxBwPerCh[coll] per channel (2.7-2.9) or
    # ll128MaxBw[coll] for all channels (2.5-2.6, ll128_cap_per_channel False); None: the
    # per-generation tables above
    ll128_cap_by_collective: dict[str, float] | None = None
    ll128_cap_per_channel: bool = True
    tree_factor: float = 0.92  # "busBw * .92" from 2.8, .9 before
    # before 2.8, one tree cap for all channels: (nodes up to which the first holds, first,
    # beyond); 2.7 has higher ones for LL128 on Ampere (tree_total_cap_ampere_ll128)
    tree_total_cap: tuple[int, float, float] | None = None
    tree_total_cap_ampere_ll128: tuple[int, float, float] | None = None
    tree_ll_divisor: float = 3.8  # "busBw * 1.0/3.8" from 2.7, 1/3 before
    tree_ll128_multi_node_factor: float = 120.0 / 128.0  # .915 in 2.7-2.9; 7/9 (as one node) before 2.7
    # the tree LL128 cap is ll128_cap_by_collective x channels x this (2.7: 7/9); None: no cap
    tree_ll128_cap_scale: float | None = 1.0
    # 2.5-2.6: every step of a ring across nodes at the network's hop latency (no intra/inter split)
    ring_net_every_step: bool = False
    ll128_inter_path: str = "pxb"  # LL128 enabled up to typeInter PATH_PXB (2.7 on), PATH_PIX before
    # PAT (all-gather and reduce-scatter at one GPU per node, Simple, on the tree graph): its
    # bandwidth factor ("busBw *= .85" in 2.23, ".75" from 2.24); None: no PAT (before 2.23)
    pat_factor: float | None = 0.75
    pat_min_capability: int = 60  # ncclPatEnable: "Need SM60 or higher for CUDA atomics" (2.26 on)
    # "if (a == TREE && pattern == NCCL_TOPO_PATTERN_TREE) busBw *= .85" (2.18 on); search.cc
    # gives a machine of one GPU that pattern; None: no such factor
    tree_pattern_tree_factor: float | None = 0.85
    # the search's rules (NcclMachine): ncclTopoDupChannels' ("2.7": up to 2.15, "2.16": 2.16-2.17,
    # "2.18": from 2.18), and connect.cc's doubling of the channels across machines on fast
    # rings (from 2.18): the compute capabilities (x 10) it applies to and the most channels
    # before it; None: none
    dup_channels: str = NEWEST_DUP_CHANNELS
    hopper_doubling: tuple[int, int, int] | None = NEWEST_HOPPER_DOUBLING
    # search.cc's speed steps per GPU generation (_speeds); None: the newest release's
    speeds: tuple | None = None
    # how the algorithm and protocol are chosen: "model" (tuning.cc's fastest, 2.5 on) or
    # "thresholds" (2.4: a tree threshold and an LL threshold, nccl_tuning._choose_by_thresholds)
    choice: str = "model"
    # which collectives NCCL_ALGO's list restricts (tuning.cc, where it zeroes bandwidths):
    # "all" (2.5-2.6, 2.19 on), "all_reduce" (2.7-2.16: "Only disable algo for Allreduce since
    # others only have one") or "all_but_ring" (2.17-2.18: "Never disable ring for
    # non-allreduce operations. That allows to run real apps with NCCL_ALGO=TREE")
    algo_list_reach: str = "all"
    # 2.8-2.23 ("If user has hard set NCCL_ALGO=COLLNET, ignore it"): where the list leaves
    # none of these on (NVLS is off across machines and NVLS-Tree on one machine first, from
    # 2.18), NCCL turns the ring and the tree on again; (): never
    ring_tree_again_when_none_of: tuple[str, ...] = ()
    # 2.19-2.23: a collective the settings leave without any algorithm runs the ring (tuning.cc
    # "at least set ring algo available", from comm->ringbdw): "any_protocol" (2.19-2.21, whose
    # ringbdw kept every protocol: "the fallback-to-ring code was re-enabling all protocols",
    # NVIDIA/nccl#1304) or "allowed_protocols" (2.22-2.23). None: NCCL stops with "no
    # algorithm/protocol available" (enqueue.cc topoGetAlgoInfo)
    ring_backup: str | None = None

    @property
    def name(self) -> str:
        return f"{self.first[0]}.{self.first[1]}"

    def search_rules(self) -> dict:
        """The graph search's rules of this release, as NcclMachine.build takes them."""
        rules: dict = {"dup_channels": self.dup_channels, "hopper_doubling": self.hopper_doubling,
                       "max_gpus": (self.topology_max_nodes, self.tag),
                       "max_links": (self.topology_max_links, self.tag), "max_channels": self.max_channels,
                       "min_after_max": self.min_channels_after_max}
        if self.speeds is not None:
            rules["speeds"] = self.speeds
        return rules


_VOLTA_AMPERE_ROWS = dict(
    ll=((39.0, 39.0, 20.4), (87.7, 22.5, 19.0)),
    tree=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8)),
)
_LL128_20 = ((20.0, 20.0, 20.0),) * 4

_HW_2_12: dict[str, dict[str, Triple]] = {
    "nvlink": {"tree": (0.52, 1.25, 28.0), "ring": (0.47, 1.9, 3.4)},
    "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 28.0)},
}


def _hw(base: dict[str, dict[str, Triple]], **changes: dict[str, Triple]) -> dict[str, dict[str, Triple]]:
    return {hw: {**algos, **changes.get(hw, {})} for hw, algos in base.items()}


_NO_NVLS = {"nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0)}

ERA_2_12 = NcclEra(
    first=(2, 12), tag="v2.12.12-1", topology_max_nodes=256, topology_max_links=32, max_channels=32,
    base_latency={"tree": (4.4, 4.4, 0.0), "ring": (3.6, 10.0, 8.4), **_NO_NVLS},
    hw_latency=_hw(_HW_2_12, nvlink=_NO_NVLS, pci=_NO_NVLS, net=_NO_NVLS),
    ll_max_bws=_VOLTA_AMPERE_ROWS["ll"], per_ch_ring_ll128=_LL128_20, per_ch_tree_ll128=_LL128_20,
    per_ch_tree=_VOLTA_AMPERE_ROWS["tree"], arch_rule="exact", bus_caps={AMPERE: 235.0}, ll_ring_factor=0.25,
    ll128_ring_one_gpu_per_node_factor=0.7, multi_node_ll_intra_factor=1.8, inter_steps_all_nodes=True,
    one_gpu_per_node_tree_net_latency=False, net_overhead=False, plateau="ranks", nvls=None, nvls_tree=False,
    ll128_capabilities=frozenset({70, 80}), ll128_intra_path="nvl", ll128_pxn_from_hopper=False,
    nvls_tree_first_chunk=512 * 1024, nvls_tree_many_nodes_chunk=None, nvls_channels_sm100=16,
    plugin_latency_adds=False, ll_ring_single_node_other_factor=1.0 / 3.0, pat_factor=None, pat_min_capability=0,
    tree_pattern_tree_factor=None, dup_channels="2.7", hopper_doubling=None,
    speeds=_speeds((_INTRA_2_10, _INTER_2_10)), algo_list_reach="all_reduce",
    ring_tree_again_when_none_of=("ring", "tree"))
# v2.10.3-1 (and v2.11.4-1, the same figures): 2.12's but for the network ring Simple latency
# (9.6 us; 28 in 2.12), the ring's network steps (2 (nNodes - 1); 2 nNodes in 2.12) and a net
# plugin's latency, which NCCL read from 2.12 on
ERA_2_10 = replace(ERA_2_12, first=(2, 10), tag="v2.11.4-1",
                   hw_latency=_hw(ERA_2_12.hw_latency, net={"ring": (2.7, 4.0, 9.6)}), inter_steps_all_nodes=False,
                   plugin_latency_read=False)
# v2.9.9-1 (2.8 on, the same figures but CollNet's): LL128 capped per collective
# (ll128MaxBwPerCh), Ampere's tree cap 22.5 / 16.0, tree LL128 x .915 across nodes
ERA_2_8 = replace(ERA_2_10, first=(2, 8), tag="v2.9.9-1",
                  per_ch_tree=(_VOLTA_AMPERE_ROWS["tree"][0], (24.0, 22.5, 16.0)),
                  ll128_cap_by_collective={"broadcast": 18.8, "all_gather": 18.3, "reduce_scatter": 15.2,
                                           "all_reduce": 16.9},
                  tree_ll128_multi_node_factor=0.915, tree_correction=TREE_CORRECTION_2_8,
                  speeds=_speeds((_ONE_2_8, _ONE_2_8)))
# v2.7.8-1: no llMaxBws nor perChMaxTreeBws yet: the tree at .9 under one cap (110 / 80 GB/s,
# LL128 on Ampere 130 / 105), its LL128 cap x 7/9; the network tree Simple hop 50 us
ERA_2_7 = replace(ERA_2_8, first=(2, 7), tag="v2.7.8-1",
                  hw_latency=_hw(ERA_2_8.hw_latency, nvlink={"tree": (0.52, 1.2, 28.0)},
                                 net={"tree": (5.0, 8.5, 50.0)}),
                  ll_max_bws=(), per_ch_tree=(), tree_factor=0.9, tree_total_cap=(2, 110.0, 80.0),
                  tree_total_cap_ampere_ll128=(2, 130.0, 105.0),
                  ll128_cap_by_collective={**ERA_2_8.ll128_cap_by_collective, "all_reduce": 16.7},
                  tree_ll128_cap_scale=7.0 / 9.0, tree_correction=TREE_CORRECTION_2_7,
                  speeds=_speeds((_ONE_2_7, _ONE_2_7)), ring_tree_again_when_none_of=())
# v2.6.4-1: the first model's figures: ring LL128 base 3.6 us, every ring step across nodes at
# the network hop, LL128 capped for all channels (ll128MaxBw) and only on Volta over NVLink,
# the tree at .9 under 110 / 80 GB/s with LL at 1/3, no Ampere cap, no plateau
ERA_2_6 = replace(
    ERA_2_7, first=(2, 6), tag="v2.6.4-1",
    base_latency={"tree": (4.4, 4.4, 0.0), "ring": (3.6, 3.6, 8.4), **_NO_NVLS},
    hw_latency={"nvlink": {"tree": (0.5, 1.9, 28.0), "ring": (0.4, 2.5, 5.7), **_NO_NVLS},
                "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7), **_NO_NVLS},
                "net": {"tree": (5.0, 7.5, 50.0), "ring": (0.9, 2.5, 6.6), **_NO_NVLS}},
    bus_caps={}, ll_ring_single_node_other_factor=None, ll128_ring_factor=120.0 / 128.0,
    ll128_ring_one_gpu_per_node_factor=120.0 / 128.0,
    ll128_cap_by_collective={"broadcast": 113.0, "all_gather": 110.0, "reduce_scatter": 91.0, "all_reduce": 100.0},
    ll128_cap_per_channel=False, tree_total_cap_ampere_ll128=None, tree_ll_divisor=3.0,
    tree_ll128_multi_node_factor=7.0 / 9.0, tree_ll128_cap_scale=None, ring_net_every_step=True,
    multi_node_ll_intra_factor=1.0, plateau=None, ll128_capabilities=frozenset({70}), ll128_inter_path="pix",
    tree_correction=TREE_CORRECTION_2_5, speeds=_speeds((_ONE_2_6, _ONE_2_6)), algo_list_reach="all")
# v2.5.7-1: 2.6's but the tree's cap, 90 GB/s on one node and 70 across nodes
ERA_2_5 = replace(ERA_2_6, first=(2, 5), tag="v2.5.7-1", tree_total_cap=(1, 90.0, 70.0))
# v2.4.8-1: no tuning model yet, nor LL128: the choice by thresholds, timed by 2.5's figures
ERA_2_4 = replace(ERA_2_5, first=(2, 4), tag="v2.4.8-1; figures v2.5.7-1", choice="thresholds", topology_max_nodes=None,
                  topology_max_links=None, ll128_capabilities=frozenset(), max_channels=16,
                  min_channels_after_max=False)
# v2.14.3-1: the network ring Simple latency 28 -> 9.6 us
ERA_2_14 = replace(ERA_2_12, first=(2, 14), tag="v2.14.3-1",
                   hw_latency=_hw(ERA_2_12.hw_latency, net={"ring": (2.7, 4.0, 9.6)}))
# v2.15.5-1 (its tuning.cc as v2.16.5-1's): a Hopper row (exactly 9.0) with Ampere's figures; LL128 on 9.0 too
ERA_2_15 = replace(ERA_2_14, first=(2, 15), tag="v2.15.5-1",
                   ll_max_bws=ERA_2_14.ll_max_bws + ((87.7, 22.5, 19.0),),
                   per_ch_tree=ERA_2_14.per_ch_tree + ((24.0, 23.6, 17.8),),
                   ll128_capabilities=frozenset({70, 80, 90}), speeds=_speeds((_INTRA_2_10, _INTER_2_15)))
# v2.16.5-1 search.cc: channels duplicated from 25 GB/s up to Ampere, from 50 GB/s on Hopper
ERA_2_16 = replace(ERA_2_15, first=(2, 16), tag="v2.16.5-1", dup_channels="2.16",
                   speeds=_speeds((_INTRA_2_10, _INTER_2_15), (90, _SM90_2_16)))
# v2.17.1-1: NVLS (base 40 us), Hopper's own figures and a 370 GB/s cap, compCapIndex by ">="
ERA_2_17 = replace(ERA_2_16, first=(2, 17), tag="v2.17.1-1",
                   base_latency={**ERA_2_15.base_latency, "nvls": (0.0, 0.0, 40.0)},
                   per_ch_ring_ll128=((20.0,) * 3, (20.0,) * 3, (36.7,) * 3),
                   per_ch_tree_ll128=((20.0,) * 3, (20.0,) * 3, (36.7,) * 3),
                   per_ch_tree=ERA_2_15.per_ch_tree[:2] + ((38.7, 41.4, 33.0),),
                   arch_rule="at_least", bus_caps={AMPERE: 235.0, HOPPER: 370.0}, nvls="ring_graph",
                   ll128_pxn_from_hopper=True, algo_list_reach="all_but_ring")
# v2.18.3-1: NVLS-Tree, new base latencies, tree Simple 4 / 6 / 14 us, getNetOverhead, the
# ring plateau by generation, LL128 inside NVB paths, no more LL x1.8 across nodes
ERA_2_18 = replace(
    ERA_2_17, first=(2, 18), tag="v2.18.3-1",
    base_latency={"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 23.0),
                  "nvls_tree": (0.0, 0.0, 23.0)},
    hw_latency={"nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), **_NO_NVLS},
                "pci": {"tree": (1.0, 1.9, 6.0), "ring": (1.0, 2.5, 5.7), **_NO_NVLS},
                "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0),
                        "nvls_tree": (0.0, 0.0, 19.0)}},
    per_ch_tree_ll128=((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0)),
    per_ch_tree=ERA_2_17.per_ch_tree[:2] + ((38.7, 41.4, 36.0),),
    bus_caps={}, multi_node_ll_intra_factor=1.0, net_overhead=True, plugin_latency_adds=True, plateau="by_generation",
    tree_pattern_tree_factor=0.85, dup_channels="2.18", hopper_doubling=(90, 90, 16), nvls="five_sixths",
    nvls_tree=True, nvls_tree_ratio_2_18=True, ll128_intra_path="nvb",
    speeds=_speeds((_INTRA_2_18, _INTER_2_18), (90, _SM90_2_18)),
    ring_tree_again_when_none_of=("ring", "tree", "nvls", "nvls_tree"))
# (2.18's NVLS-Tree chunks start from the Simple stepSize, 512 KiB, with no cap by node count)
# v2.19.3-1: NVLS latency moves from base (0) to the NVLink hop (23 us); tree Simple back to 28 us
ERA_2_19 = replace(
    ERA_2_18, first=(2, 19), tag="v2.19.3-1",
    base_latency={"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4), **_NO_NVLS},
    hw_latency={"nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 23.0),
                           "nvls_tree": (0.0, 0.0, 23.0)},
                "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7), **_NO_NVLS},
                "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0),
                        "nvls_tree": (0.0, 0.0, 14.0)}},
    nvls_tree_ratio_2_18=False, nvls_tree_many_nodes_chunk=64 * 1024,
    speeds=_speeds((_INTRA_2_18, _INTER_2_18), (90, _SM90_2_19)), algo_list_reach="all", ring_backup="any_protocol")
# v2.20.5-1 connect.cc: the channels doubled again across machines only below 16 of them
ERA_2_20 = replace(ERA_2_19, first=(2, 20), tag="v2.20.5-1", hopper_doubling=(90, 90, 15))
# v2.21.5-1: ring LL at .5 (was 1/4), Hopper's llMaxBws 141 / 45 / 35, NVLS hop 25 us; 128 links a
# topology node (was 32)
ERA_2_21 = replace(
    ERA_2_20, first=(2, 21), tag="v2.21.5-1", topology_max_links=128,
    hw_latency=_hw(ERA_2_19.hw_latency, nvlink={"nvls": (0.0, 0.0, 25.0), "nvls_tree": (0.0, 0.0, 25.0)}),
    ll_max_bws=ERA_2_19.ll_max_bws[:2] + ((141.0, 45.0, 35.0),), ll_ring_factor=0.5,
    ll_ring_single_node_other_factor=None, nvls_tree_first_chunk=128 * 1024,
    speeds=_speeds((_INTRA_2_18, _INTER_2_18), (90, _SM90_2_21)))
# v2.22.3-1: 2.21's figures; the ring a collective falls back to keeps only the protocols
# allowed ("if (a == NCCL_ALGO_RING && pEnable == 0) comm->ringbdw[c][p] = 0", NVIDIA/nccl#1304)
ERA_2_22 = replace(ERA_2_21, first=(2, 22), tag="v2.22.3-1", ring_backup="allowed_protocols")
# v2.23.4-1: tree Simple 4 / 4 / 14 us with a base of 8.4, ring inter steps 2 (nNodes - 1),
# one GPU per node takes the tree's network latency, no LL128 ppn discount
ERA_2_23 = replace(
    ERA_2_22, first=(2, 23), tag="v2.23.4-1",
    base_latency={**ERA_2_21.base_latency, "tree": (6.8, 14.0, 8.4)},
    hw_latency=_hw(ERA_2_21.hw_latency, nvlink={"tree": (0.6, 1.25, 4.0)}, pci={"tree": (1.0, 1.9, 4.0)},
                   net={"tree": (5.0, 8.5, 14.0)}),
    ll128_ring_one_gpu_per_node_factor=0.92, inter_steps_all_nodes=False, one_gpu_per_node_tree_net_latency=True,
    pat_factor=0.85)
# v2.24.3-1: PAT at .75 of the tree graph's bandwidth; NCCL_ALGO / NCCL_PROTO per collective,
# and no fallback: settings that leave a collective nothing stop NCCL
ERA_2_24 = replace(ERA_2_23, first=(2, 24), tag="v2.24.3-1", pat_factor=0.75, ring_tree_again_when_none_of=(),
                   ring_backup=None)
# v2.25.1-1: 32 NVLS channels on Blackwell (NVLS_NCHANNELS_SM100), its channels doubled across machines
# too; MAXCHANNELS 64 (was 32); 576 links a topology node (was 128)
ERA_2_25 = replace(ERA_2_24, first=(2, 25), tag="v2.25.1-1", nvls_channels_sm100=32, max_channels=64,
                   topology_max_links=576,
                   hopper_doubling=NEWEST_HOPPER_DOUBLING,  # connect.cc "minCompCap >= 90" (was == 90)
                   speeds=_speeds((_INTRA_2_18, _INTER_2_18), (90, _SM90_2_21), (100, _SM100_2_25)))
# v2.26.2-1: PAT only from compute capability 6.0
ERA_2_26 = replace(ERA_2_25, first=(2, 26), tag="v2.26.2-1", pat_min_capability=60)
# v2.27.7-1: LL128 on every GPU from 7.0
ERA_2_27 = replace(ERA_2_26, first=(2, 27), tag="v2.27.7-1", ll128_capabilities=None, topology_max_nodes=576,
                   speeds=_speeds((_INTRA_2_18, _INTER_2_18), (90, _SM90_2_21), (100, _SM100_2_27)))
# v2.28.9-1: Blackwell rows, NVLS by nvlsEfficiency, perChMaxNVLSTreeBws
ERA_2_28 = replace(
    ERA_2_27, first=(2, 28), tag="v2.28.9-1",
    ll_max_bws=ERA_2_27.ll_max_bws + ((2 * 141.0, 2 * 45.0, 2 * 35.0),),
    per_ch_ring_ll128=ERA_2_27.per_ch_ring_ll128 + ((40.0, 40.0, 40.0),),
    per_ch_tree_ll128=ERA_2_27.per_ch_tree_ll128 + ((55.6, 31.67, 20.0),),
    per_ch_tree=ERA_2_27.per_ch_tree + ((70.0, 42.8, 24.0),),
    per_ch_nvls_tree=((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5), (0.0, 96.0, 80.0)),
    blackwell_row=True, nvls="efficiency",
    speeds=_speeds((_INTRA_2_18, _INTER_2_18), (90, _SM90_2_21), (100, _SM100_2_28)))
# v2.29.7-1 search.cc: Blackwell's speeds 45 (intra) and 80 (inter); v2.29.2-1 had only the first
ERA_2_29 = replace(ERA_2_28, first=(2, 29), tag="v2.29.7-1", topology_max_nodes=640,
                   speeds=_speeds((_INTRA_2_18, _INTER_2_18), (90, _SM90_2_21), (100, _SM100_2_29)))
# v2.30.7-1 (ncclTunerConstantsDefaults): NVLS-Tree network hop 20.9 us
ERA_2_30 = replace(ERA_2_28, first=(2, 30), tag="v2.30.7-1", topology_max_nodes=640,
                   hw_latency=_hw(ERA_2_28.hw_latency, net={"nvls_tree": (0.0, 0.0, 20.9)}),
                   speeds=None)  # NcclMachine's own, the newest

ERAS = (ERA_2_4, ERA_2_5, ERA_2_6, ERA_2_7, ERA_2_8, ERA_2_10, ERA_2_12, ERA_2_14, ERA_2_15, ERA_2_16, ERA_2_17,
        ERA_2_18, ERA_2_19, ERA_2_20, ERA_2_21, ERA_2_22, ERA_2_23, ERA_2_24, ERA_2_25, ERA_2_26, ERA_2_27, ERA_2_28,
        ERA_2_29, ERA_2_30)
NEWEST = ERA_2_30


def era_for(version: str | None, field: str = "nccl_version") -> NcclEra:
    """The tuning era of an NCCL version (None: the newest the model follows); a version the
    model does not follow is the one-line error naming `field`."""
    if version is None:
        return NEWEST
    try:
        major_minor = parse_version(check_version(version))[:2]
    except ValueError as exc:
        raise UserInputError(str(exc), field=field) from None
    return [era for era in ERAS if era.first <= major_minor][-1]


def arch_row(era: NcclEra, capability: int, max_capability: int) -> int:
    """tuning.cc's compCapIndex for the communicator's GPUs (min and max capability x 10)."""
    if era.arch_rule == "exact":
        if capability == max_capability == 80:
            return AMPERE
        if capability == max_capability == 90 and len(era.ll_max_bws) > HOPPER:
            return HOPPER
        return VOLTA
    if capability >= 100 and era.blackwell_row:
        return BLACKWELL
    return HOPPER if capability >= 90 else AMPERE if capability >= 80 else VOLTA


def table_row(rows: tuple[Row, ...], index: int) -> Row:
    """A table's row for a generation it may not have (older eras end at Ampere or Hopper:
    the last row, as the era's compCapIndex never went past it); no limit where the era had
    no such table (before 2.8)."""
    if not rows:
        return (float("inf"),) * 3
    return rows[min(index, len(rows) - 1)]
