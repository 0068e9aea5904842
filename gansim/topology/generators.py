"""Topology generators: a name plus validated parameters -> a topology dict.

A topology is ``{"nodes": [...], "links": [...]}`` (docs/formats.md, "Topology file"):
nodes carry ``id`` and ``kind`` (gpu | cpu | host | pcie_switch | nvswitch | nic | switch)
plus attributes; links carry ``a``, ``b``, ``kind`` (pcie | nvlink | net | loopback),
``bandwidth_GBps`` (per direction, 1e9 bytes/s; every link is full duplex) and
``latency_us``. Ranks are the gpu/cpu nodes in the order listed, so every generator lists
GPUs in rank order (gpu0, gpu1, ...; multi-node: all of node 0's GPUs before node 1's).
Graphs are simple: two GPUs joined by k NVLink bricks are ONE link with k times the
bandwidth.

Default figures and where they come from
-----------------------------------------
Bandwidths are LINE RATES from datasheets, per direction: what the link signals, not what a
program gets through it. What a communication library achieves on them (protocol overhead,
per-channel limits) is the communication model's business (gansim/collectives/nccl_topology.py
turns them into NCCL's figures). PCIe x16 line rates after 128b/130b encoding: 3.0 (8 GT/s)
15.75 GB/s, 4.0 (16 GT/s) 31.5 GB/s, 5.0 (32 GT/s) 63.0 GB/s (PCI-SIG base specifications).
NVLink: 25 GB/s per NVLink2 brick (V100), 12 x 25 = 300 GB/s per A100 GPU (NVLink3),
18 x 25 = 450 GB/s per H100 GPU (NVLink4) (NVIDIA datasheets; gansim/topology/devices.py).
NICs: the port's signalling rate (200 Gb/s HDR InfiniBand = 25 GB/s), which is also the
figure NCCL takes from the port (src/graph/topo.cc: bw = speed in Mb/s / 8000).

Latencies are per link. They are order-of-magnitude figures used by the textbook algorithms
(the `nccl` algorithm charges NCCL's own per-hop latencies instead); they follow NCCL's tuning
model (NVIDIA/nccl src/graph/tuning.cc, ``hwLat``), which charges per GPU-to-GPU hop
0.6-3.4 us over NVLink and 1.0-5.7 us over PCI depending on the protocol:

- a direct NVLink link: 0.5 us; a link to an NVSwitch: 0.25 us (a GPU -> NVSwitch -> GPU
  route crosses two links, 0.5 us in all);
- a PCIe link: 1.0 us;
- a NIC <-> network-switch link: 1.0 us (GPU -> NIC -> switch -> NIC -> GPU is then 4 us;
  NCCL charges 2.7 us (LL) to 14 us (Simple) per network step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal

import pydantic
from pydantic import AfterValidator, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from gansim.core import limits
from gansim.core.config import BandwidthGBps, Count, MemoryGB, Microseconds, RankCount, Strict, Tflops
from gansim.core.errors import UserInputError
from gansim.core.registry import Registry

__all__ = ["Generator", "GENERATORS", "generate"]

LinkKind = Literal["pcie", "nvlink", "net", "loopback"]


@dataclass(frozen=True)
class Generator:
    params_model: type[pydantic.BaseModel]
    build: Callable[[pydantic.BaseModel], dict]
    description: str


GENERATORS: Registry[Generator] = Registry("generator")


def generate(name: str, params: dict | None, *, source: str | None = None) -> dict:
    """Validate ``params`` for generator ``name`` and build the topology dict.

    Unknown generator -> UserInputError(field="generator"); bad params -> UserInputError
    whose field is ``params.<field>`` and whose message is pydantic's."""
    gen = GENERATORS.get(name, source=source, field="generator")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise UserInputError(
            f"must be a mapping of parameter names to values, got {type(params).__name__}",
            source=source,
            field="params",
        )
    try:
        model = gen.params_model.model_validate(params)
    except pydantic.ValidationError as err:
        raise _user_error(err, source) from None
    try:
        return gen.build(model)
    except _TooLarge as err:
        raise UserInputError(str(err), source=source, field="params") from None


def _user_error(err: pydantic.ValidationError, source: str | None) -> UserInputError:
    problems = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(part) for part in e["loc"])
        msg = e["msg"]
        if e["type"] == "nested_params":  # an error inside multi_node's intra_params
            loc, msg = f"{loc}.{e['ctx']['where']}", e["ctx"]["msg"]
        problems.append((f"params.{loc}" if loc else "params", msg))
    field, message = problems[0]
    for other_field, other_message in problems[1:]:
        message += f"; {other_field}: {other_message}"
    return UserInputError(message, source=source, field=field)


# --------------------------------------------------------------------------- helpers


class _Params(Strict):
    """Generator parameters: strict, finite and bounded like every config model."""


class _TooLarge(Exception):
    """A generator's parameters ask for more than a limit allows (gansim.core.limits)."""


class _Builder:
    """Accumulates nodes and links; ``prefix`` namespaces ids (``n3.`` in multi_node).
    Counts what it builds against the topology limits, so that parameters asking for
    millions of GPUs stop at the limit instead of exhausting memory; `counts` is shared by
    the builders of one topology."""

    def __init__(self, prefix: str = "", counts: dict[str, int] | None = None):
        self.prefix = prefix
        self.nodes: list[dict] = []
        self.links: list[dict] = []
        self.counts = counts if counts is not None else {"ranks": 0, "nodes": 0, "links": 0}
        # the limits in force, read once: an environment lookup per node and link took a
        # quarter of a second at 16,384 GPUs
        self.ceilings = {"ranks": limits.RANKS.value, "nodes": limits.TOPOLOGY_NODES.value,
                         "links": limits.TOPOLOGY_LINKS.value}

    def _count(self, what: str, limit: limits.Limit) -> None:
        self.counts[what] += 1
        if self.counts[what] > self.ceilings[what]:
            raise _TooLarge(f"the parameters build more {limit.what} than the limit of {limit.value:,} "
                            f"({limit.variable}; set it higher to allow more)")

    def node(self, name: str, kind: str, **attrs: Any) -> str:
        node_id = self.prefix + name
        self._count("nodes", limits.TOPOLOGY_NODES)
        if kind in ("gpu", "cpu"):
            self._count("ranks", limits.RANKS)
        self.nodes.append({"id": node_id, "kind": kind, **attrs})
        return node_id

    def gpu(self, name: str, p: Any) -> str:
        # only a GPU without peer-to-peer says so: the default (True) stays out of the dict
        extra = {} if getattr(p, "p2p", True) else {"p2p": False}
        return self.node(
            name, "gpu", memory_GB=p.gpu_memory_GB, tflops=p.gpu_tflops,
            memory_bandwidth_GBps=p.gpu_memory_bandwidth_GBps, model=p.gpu_model, **extra
        )

    def link(self, a: str, b: str, kind: str, bandwidth_GBps: float, latency_us: float) -> None:
        self._count("links", limits.TOPOLOGY_LINKS)
        self.links.append(
            {"a": a, "b": b, "kind": kind, "bandwidth_GBps": bandwidth_GBps, "latency_us": latency_us}
        )

    def topology(self) -> dict:
        return {"nodes": self.nodes, "links": self.links}


# GPU figures used as defaults (fp32 peak TFLOP/s, memory in GB, memory bandwidth in GB/s):
# - GeForce GTX 1080 Ti: 11 GB, 11.34 TFLOPS (NVIDIA spec: 3584 CUDA cores x 1582 MHz boost x 2),
#   484 GB/s (NVIDIA GeForce GTX 1080 Ti specifications, 2017: 11 Gbps GDDR5X on 352 bits).
# - Tesla V100 SXM2 16GB: 15.7 TFLOPS, 900 GB/s HBM2 (NVIDIA Tesla V100 datasheet, 2017).
# - A100 SXM4 40GB: 19.5 TFLOPS, 1,555 GB/s HBM2 (NVIDIA A100 Tensor Core GPU datasheet, 2020).
class _GTX1080Ti(_Params):
    gpu_model: str = "GTX 1080 Ti"
    gpu_tflops: Tflops = 11.34
    gpu_memory_GB: MemoryGB = 11.0
    gpu_memory_bandwidth_GBps: BandwidthGBps = 484.0


class _V100(_Params):
    gpu_model: str = "Tesla V100-SXM2-16GB"
    gpu_tflops: Tflops = 15.7
    gpu_memory_GB: MemoryGB = 16.0
    gpu_memory_bandwidth_GBps: BandwidthGBps = 900.0


class _A100(_Params):
    gpu_model: str = "A100-SXM4-40GB"
    gpu_tflops: Tflops = 19.5
    gpu_memory_GB: MemoryGB = 40.0
    gpu_memory_bandwidth_GBps: BandwidthGBps = 1555.0


# --------------------------------------------------------------------------- pcie_tree


class PcieTreeParams(_GTX1080Ti):
    gpus: RankCount = 4
    gpus_per_switch: Annotated[int, Field(ge=0), AfterValidator(limits.RANKS.validator)] = Field(
        0, description="GPUs per PCIe switch; 0 = every GPU directly on the host root complex"
    )
    pcie_bandwidth_GBps: BandwidthGBps = Field(15.75, description="line rate; PCIe 3.0 x16 by default")
    pcie_latency_us: Microseconds = 1.0
    switch_uplink_bandwidth_GBps: BandwidthGBps | None = Field(
        None, description="PCIe switch -> host link; default pcie_bandwidth_GBps"
    )
    host_cores: Count = 16
    p2p: bool = Field(True, description="False: the GPUs cannot reach each other's memory (GeForce, P2P "
                                        "disabled); GPU-to-GPU bytes go through host memory")
    host_dram_bandwidth_GBps: BandwidthGBps | None = Field(None, description="the host's DRAM bandwidth (all "
                                                                             "channels); default: unconstrained")
    host_model: str | None = Field(None, description="the host CPU, e.g. 'AMD EPYC 7302' (NCCL tunes for its vendor)")


def _pcie_tree(p: PcieTreeParams, b: _Builder) -> list[str]:
    gpus = [b.gpu(f"gpu{i}", p) for i in range(p.gpus)]
    extra: dict[str, Any] = {"model": p.host_model} if p.host_model else {}
    if p.host_dram_bandwidth_GBps:
        extra["dram_bandwidth_GBps"] = p.host_dram_bandwidth_GBps
    host = b.node("host", "host", cores=p.host_cores, **extra)
    if p.gpus_per_switch == 0:
        for g in gpus:
            b.link(g, host, "pcie", p.pcie_bandwidth_GBps, p.pcie_latency_us)
        return gpus
    uplink = p.switch_uplink_bandwidth_GBps or p.pcie_bandwidth_GBps
    for s, start in enumerate(range(0, p.gpus, p.gpus_per_switch)):
        sw = b.node(f"pcie_sw{s}", "pcie_switch")
        b.link(sw, host, "pcie", uplink, p.pcie_latency_us)
        for g in gpus[start : start + p.gpus_per_switch]:
            b.link(g, sw, "pcie", p.pcie_bandwidth_GBps, p.pcie_latency_us)
    return gpus


# --------------------------------------------------------------------------- ring


class RingParams(_V100):
    gpus: RankCount = 8
    bandwidth_GBps: BandwidthGBps = 25.0
    latency_us: Microseconds = 0.5
    link_kind: LinkKind = "nvlink"


def _ring(p: RingParams, b: _Builder) -> list[str]:
    gpus = [b.gpu(f"gpu{i}", p) for i in range(p.gpus)]
    n = len(gpus)
    pairs = [(0, 1)] if n == 2 else ([(i, (i + 1) % n) for i in range(n)] if n > 2 else [])
    for i, j in pairs:
        b.link(gpus[i], gpus[j], p.link_kind, p.bandwidth_GBps, p.latency_us)
    return gpus


# --------------------------------------------------------------------------- switch


class SwitchParams(_A100):
    gpus: RankCount = 8
    bandwidth_GBps: BandwidthGBps = Field(25.0, description="each GPU's port, per direction")
    latency_us: Microseconds = 1.0


def _switch(p: SwitchParams, b: _Builder) -> list[str]:
    gpus = [b.gpu(f"gpu{i}", p) for i in range(p.gpus)]
    sw = b.node("switch", "switch")
    for g in gpus:
        b.link(g, sw, "net", p.bandwidth_GBps, p.latency_us)
    return gpus


# --------------------------------------------------------------------------- fully_connected


class FullyConnectedParams(_V100):
    gpus: RankCount = 4
    bandwidth_GBps: BandwidthGBps = Field(25.0, description="each pair's link, per direction")
    latency_us: Microseconds = 0.5
    link_kind: LinkKind = "nvlink"


def _fully_connected(p: FullyConnectedParams, b: _Builder) -> list[str]:
    gpus = [b.gpu(f"gpu{i}", p) for i in range(p.gpus)]
    for i in range(len(gpus)):
        for j in range(i + 1, len(gpus)):
            b.link(gpus[i], gpus[j], p.link_kind, p.bandwidth_GBps, p.latency_us)
    return gpus


# --------------------------------------------------------------------------- nvswitch


class NvswitchParams(_A100):
    gpus: RankCount = 8
    # A100: 12 NVLink3 links x 25 GB/s = 300 GB/s per direction per GPU (NVIDIA A100 datasheet).
    nvlink_bandwidth_GBps: BandwidthGBps = Field(300.0, description="per GPU to the NVSwitch, per direction")
    nvlink_latency_us: Microseconds = 0.25
    pcie_bandwidth_GBps: BandwidthGBps = Field(31.5, description="each GPU to the host, line rate (PCIe 4.0 x16)")
    pcie_latency_us: Microseconds = 1.0
    # DGX A100: 2 x AMD EPYC 7742, 64 cores each (NVIDIA DGX A100 datasheet, 2020).
    host_cores: Count = 128
    host_model: str | None = Field(None, description="the host CPU, e.g. 'AMD EPYC 7742' (NCCL tunes for its vendor)")
    nvlink_sharp: bool | None = Field(
        None, description="in-switch reduction (NCCL's NVLS); default: yes for Hopper or newer GPUs")


def _nvswitch(p: NvswitchParams, b: _Builder) -> list[str]:
    gpus = [b.gpu(f"gpu{i}", p) for i in range(p.gpus)]
    nvs = b.node("nvswitch", "nvswitch", **({} if p.nvlink_sharp is None else {"nvlink_sharp": p.nvlink_sharp}))
    host = b.node("host", "host", cores=p.host_cores, **({"model": p.host_model} if p.host_model else {}))
    for g in gpus:
        b.link(g, nvs, "nvlink", p.nvlink_bandwidth_GBps, p.nvlink_latency_us)
    for g in gpus:
        b.link(g, host, "pcie", p.pcie_bandwidth_GBps, p.pcie_latency_us)
    return gpus


# --------------------------------------------------------------------------- dgx1

# DGX-1 with V100 hybrid cube-mesh: NVLink bricks between each GPU pair.
# NVIDIA, "NVIDIA DGX-1 With Tesla V100 System Architecture" white paper (WP-08437-002_v01,
# 2017), sec. "DGX-1 NVLink Network Topology for Efficient Application Scaling": each V100
# has six NVLink bricks at 25 GB/s per direction; the topology is a cube with GPUs at the
# corners, all twelve edges connected (some with two NVLinks) plus the diagonals of two
# faces -- i.e. two fully connected quads {0,1,2,3}, {4,5,6,7} and the cross links i <-> i+4.
# Which pairs have two bricks (NVIDIA's GPU numbering, as `nvidia-smi topo -m` prints NV1/NV2):
# GPU0-GPU3 and GPU0-GPU4 two, GPU0-GPU1 and GPU0-GPU2 one (Alibaba Cloud ACK docs,
# "Overview of GPU topology-aware scheduling"); GPU1-GPU2 and GPU1-GPU5 two, GPU1-GPU3 one
# (NCCL topology dump of a DGX-1V, NVIDIA/nccl issue #671, 2022). Six bricks per GPU then
# leave two choices for GPU2/GPU3; the one below is the one whose multigraph is isomorphic
# to Microsoft's `dgx1()` link matrix (microsoft/msccl-tools, sccl/topologies/nvidia.py,
# another GPU numbering), in which only two of the four cross links are doubled. The tests
# check the six bricks per GPU and the isomorphism.
DGX1_NVLINK_BRICKS: dict[tuple[int, int], int] = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (1, 2): 2, (1, 3): 1, (2, 3): 2,  # quad 0
    (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2,  # quad 1
    (0, 4): 2, (1, 5): 2, (2, 6): 1, (3, 7): 1,  # cross links
}  # fmt: skip


class Dgx1Params(_V100):
    nvlink_brick_bandwidth_GBps: BandwidthGBps = Field(25.0, description="one NVLink2 brick, per direction")
    nvlink_latency_us: Microseconds = 0.5
    pcie_bandwidth_GBps: BandwidthGBps = Field(15.75, description="PCIe 3.0 x16 line rate, GPU <-> switch <-> CPU")
    pcie_latency_us: Microseconds = 1.0
    # 2 x Xeon E5-2698 v4: two QPI links at 9.6 GT/s = 2 x 19.2 GB/s per direction (theoretical).
    cpu_interconnect_bandwidth_GBps: BandwidthGBps = 38.4
    cpu_interconnect_latency_us: Microseconds = 1.0
    cores_per_socket: Count = 20


def _dgx1(p: Dgx1Params, b: _Builder) -> list[str]:
    gpus = [b.gpu(f"gpu{i}", p) for i in range(8)]
    hosts = [b.node(f"host{s}", "host", cores=p.cores_per_socket, model="Intel Xeon E5-2698 v4") for s in range(2)]
    for (i, j), bricks in DGX1_NVLINK_BRICKS.items():
        b.link(gpus[i], gpus[j], "nvlink", bricks * p.nvlink_brick_bandwidth_GBps, p.nvlink_latency_us)
    # Two GPUs per PCIe switch (PLX PEX8764 in the NCCL dump above), two switches per socket.
    for s in range(4):
        sw = b.node(f"pcie_sw{s}", "pcie_switch")
        b.link(sw, hosts[s // 2], "pcie", p.pcie_bandwidth_GBps, p.pcie_latency_us)
        for g in gpus[2 * s : 2 * s + 2]:
            b.link(g, sw, "pcie", p.pcie_bandwidth_GBps, p.pcie_latency_us)
    # QPI is not one of the four link kinds; it carries the PCIe traffic between the sockets.
    b.link(hosts[0], hosts[1], "pcie", p.cpu_interconnect_bandwidth_GBps, p.cpu_interconnect_latency_us)
    return gpus


# --------------------------------------------------------------------------- multi_node

_INTRA: dict[str, tuple[type[_Params], Callable[[Any, _Builder], list[str]]]] = {
    "nvswitch": (NvswitchParams, _nvswitch),
    "pcie_tree": (PcieTreeParams, _pcie_tree),
    "fully_connected": (FullyConnectedParams, _fully_connected),
    "dgx1": (Dgx1Params, _dgx1),
}


class MultiNodeParams(_Params):
    nodes: RankCount = 4
    intra: Literal["nvswitch", "pcie_tree", "fully_connected", "dgx1"] = "nvswitch"
    gpus_per_node: RankCount = Field(8, validate_default=True)
    intra_params: dict[str, Any] = Field(
        default_factory=dict,
        validate_default=True,
        description="parameters of the intra-node generator (its own defaults otherwise), minus gpus",
    )
    # One 200 Gb/s HDR InfiniBand NIC per GPU = 25 GB/s per direction (signalling rate).
    nic_bandwidth_GBps: BandwidthGBps = 25.0
    nic_latency_us: Microseconds = Field(1.0, description="each NIC <-> network-switch link")
    nic_pcie_bandwidth_GBps: BandwidthGBps = Field(31.5, description="GPU <-> its NIC (GPUDirect RDMA), line rate "
                                                                     "(PCIe 4.0 x16)")
    nic_pcie_latency_us: Microseconds = 1.0
    nics_per_node: int | None = Field(None, ge=1, le=64, description="NICs (rails) per node, each serving an "
                                                                     "equal share of the GPUs; default one per GPU")
    nic_model: str | None = Field(None, description="the NICs' model where a net plugin drives them (the nccl "
                                                    "algorithm's NIC_MODELS, e.g. 'AWS EFA (p5)'); default: "
                                                    "InfiniBand / RoCE, driven by NCCL itself")
    # The fabric between the NICs. `switch`: every NIC on one non-blocking switch. `rail`: a
    # rail-optimised leaf-spine fat tree, as NVIDIA's reference architectures build the GPU
    # compute fabric (docs.nvidia.com/enterprise-reference-architectures, "Networking Physical
    # Topologies": a leaf-spine, full non-blocking fat tree, the GPUs on a rail-optimised
    # topology through their NICs; a super-spine tier for the largest): NIC k of every
    # machine of a group of `machines_per_leaf` on the group's leaf switch of rail k, the
    # leaves of a pod of `machines_per_pod` machines on the pod's spine, the pods' spines on
    # a core. Each switch tier is one node whose links up carry what the links below it do,
    # over `fabric_oversubscription` (1: non-blocking), so equal-cost paths need no choosing.
    fabric: Literal["switch", "rail"] = "switch"
    machines_per_leaf: RankCount = Field(32, description="rail fabric: machines whose NICs of one rail share a leaf")
    machines_per_pod: RankCount | None = Field(None, description="rail fabric: machines under one spine (a multiple "
                                                                 "of machines_per_leaf); default: all, two tiers")
    fabric_oversubscription: float = Field(1.0, ge=1.0, le=64.0, description="rail fabric: what a switch's links "
                                                                             "down carry over its links up")

    @field_validator("machines_per_pod")
    @classmethod
    def _pods_hold_whole_leaves(cls, v: int | None, info: ValidationInfo) -> int | None:
        per_leaf = info.data.get("machines_per_leaf")
        if v is not None and per_leaf is not None and v % per_leaf:
            raise PydanticCustomError("pod_leaves", "{v} is not a multiple of machines_per_leaf ({n})",
                                      {"v": v, "n": per_leaf})
        return v

    @field_validator("gpus_per_node")
    @classmethod
    def _dgx1_has_eight(cls, v: int, info: ValidationInfo) -> int:
        if info.data.get("intra") == "dgx1" and v != 8:
            raise PydanticCustomError(
                "dgx1_gpus", "intra dgx1 has exactly 8 GPUs per node, not {n}", {"n": v}
            )
        return v

    @field_validator("intra_params")
    @classmethod
    def _validate_intra(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        intra = info.data.get("intra")
        gpus_per_node = info.data.get("gpus_per_node")
        if intra is None or gpus_per_node is None:
            return v  # already reported
        if "gpus" in v:
            raise PydanticCustomError(
                "nested_params", "{where}: {msg}", {"where": "gpus", "msg": "set gpus_per_node instead"}
            )
        model, _ = _INTRA[intra]
        data = dict(v) if intra == "dgx1" else {**v, "gpus": gpus_per_node}
        try:
            validated = model.model_validate(data)
        except pydantic.ValidationError as err:
            first = err.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"]) or "(all)"
            raise PydanticCustomError(
                "nested_params", "{where}: {msg}", {"where": where, "msg": first["msg"]}
            ) from None
        return validated.model_dump()


def _multi_node(p: MultiNodeParams) -> dict:
    model, build_intra = _INTRA[p.intra]
    intra = model.model_validate(p.intra_params)
    nodes: list[dict] = []
    links: list[dict] = []
    switch = "switch"
    counts = {"ranks": 0, "nodes": 0, "links": 0}
    rails = 0
    for n in range(p.nodes):
        if n == 1 and _copy_machines(nodes, links, p.nodes, counts):
            break
        b = _Builder(prefix=f"n{n}.", counts=counts)
        gpus = build_intra(intra, b)
        hosts = [node["id"] for node in b.nodes if node["kind"] == "host"]
        nics = rails = p.nics_per_node or len(gpus)
        for k in range(nics):
            nic = b.node(f"nic{k}", "nic", **({"model": p.nic_model} if p.nic_model else {}))
            # fewer NICs than GPUs: NIC k serves GPUs [k g / n, (k+1) g / n) (a rail of a
            # rail-optimised cluster); more: GPU k g / n has n / g NICs of its own
            served = gpus[k * len(gpus) // nics:(k + 1) * len(gpus) // nics] or [gpus[k * len(gpus) // nics]]
            for g in served:
                b.link(g, nic, "pcie", p.nic_pcie_bandwidth_GBps, p.nic_pcie_latency_us)
            if p.fabric == "switch":
                b.link(nic, switch, "net", p.nic_bandwidth_GBps, p.nic_latency_us)
            if hosts:
                # the NIC also sits on the host's PCIe tree, so the host (a parameter server,
                # a checkpoint writer) reaches other nodes without passing through a GPU
                b.link(hosts[k * len(hosts) // nics], nic, "pcie", p.nic_pcie_bandwidth_GBps,
                       p.nic_pcie_latency_us)
        nodes.extend(b.nodes)
        links.extend(b.links)
    if p.fabric == "rail":
        _rail_fabric(p, rails, nodes, links, counts)
    else:
        nodes.append({"id": switch, "kind": "switch"})
    return {"nodes": nodes, "links": links}


def _rail_fabric(p: MultiNodeParams, rails: int, nodes: list[dict], links: list[dict], counts: dict[str, int]) -> None:
    """The rail-optimised leaf-spine fabric of MultiNodeParams.fabric, after the machines:
    leaf switch `leaf<g>.rail<k>` for rail k of leaf group g, `spine<q>` per pod q, `core`
    above the pods when there are several. A link up carries the bandwidth of the NIC links
    under it over the oversubscription."""
    b = _Builder(counts=counts)
    per_pod = p.machines_per_pod or p.nodes
    pods = -(-p.nodes // per_pod)
    groups = -(-p.nodes // p.machines_per_leaf)
    for g in range(groups):
        for k in range(rails):
            b.node(f"leaf{g}.rail{k}", "switch")
    for q in range(pods):
        b.node(f"spine{q}", "switch")
    if pods > 1:
        b.node("core", "switch")
    for m in range(p.nodes):
        for k in range(rails):
            b.link(f"n{m}.nic{k}", f"leaf{m // p.machines_per_leaf}.rail{k}", "net", p.nic_bandwidth_GBps,
                   p.nic_latency_us)
    for g in range(groups):
        machines = min(p.machines_per_leaf, p.nodes - g * p.machines_per_leaf)
        for k in range(rails):
            b.link(f"leaf{g}.rail{k}", f"spine{g * p.machines_per_leaf // per_pod}", "net",
                   machines * p.nic_bandwidth_GBps / p.fabric_oversubscription, p.nic_latency_us)
    if pods > 1:
        for q in range(pods):
            machines = min(per_pod, p.nodes - q * per_pod)
            b.link(f"spine{q}", "core", "net", machines * rails * p.nic_bandwidth_GBps / p.fabric_oversubscription,
                   p.nic_latency_us)
    nodes.extend(b.nodes)
    links.extend(b.links)


def _copy_machines(nodes: list[dict], links: list[dict], machines: int, counts: dict[str, int]) -> bool:
    """Machines 1 to `machines` - 1 as copies of machine 0 (`nodes`, `links`, prefixed
    "n0."), appended, as building each again would make them: every id and link end of
    machine 0 with its own prefix. Not done (False) where they would pass a limit (the
    builder then stops at the limit, as it says) or where a node names another node
    beside its id."""
    ceilings = _Builder().ceilings
    if any(counts[what] * machines > ceilings[what] for what in counts):
        return False
    own = "n0."
    if any(isinstance(v, str) and v.startswith(own) for node in nodes for k, v in node.items() if k != "id"):
        return False
    cut = len(own)
    # per node, its id without the prefix; per link, each end's too (None: an end outside)
    first_nodes = [(node, node["id"][cut:]) for node in nodes]
    first_links = [(link, link["a"][cut:] if link["a"].startswith(own) else None,
                    link["b"][cut:] if link["b"].startswith(own) else None) for link in links]
    for n in range(1, machines):
        prefix = f"n{n}."
        nodes.extend([{**node, "id": prefix + rest} for node, rest in first_nodes])
        links.extend([{**link, "a": link["a"] if a is None else prefix + a, "b": link["b"] if b is None else prefix + b}
                      for link, a, b in first_links])
    for what in counts:
        counts[what] *= machines
    return True


# --------------------------------------------------------------------------- cpu_host


class CpuHostParams(_Params):
    ranks: RankCount = 2
    cores: Count = 2
    # Placeholders: a calibration profile measured on the machine overrides both.
    bandwidth_GBps: BandwidthGBps = Field(5.0, description="each rank <-> host loopback, per direction")
    latency_us: Microseconds = 20.0


def _cpu_host(p: CpuHostParams) -> dict:
    b = _Builder()
    ranks = [b.node(f"cpu{i}", "cpu", host="host", threads=1) for i in range(p.ranks)]
    host = b.node("host", "host", cores=p.cores)
    for r in ranks:
        b.link(r, host, "loopback", p.bandwidth_GBps, p.latency_us)
    return b.topology()


# --------------------------------------------------------------------------- registration


def _single(fn: Callable[[Any, _Builder], list[str]]) -> Callable[[pydantic.BaseModel], dict]:
    def build(params: pydantic.BaseModel) -> dict:
        b = _Builder()
        fn(params, b)
        return b.topology()

    build.__name__ = f"build{fn.__name__}"
    return build


for _name, _gen in {
    "pcie_tree": Generator(
        PcieTreeParams,
        _single(_pcie_tree),
        "GPUs on PCIe links to one host root complex, optionally grouped under PCIe switches",
    ),
    "ring": Generator(RingParams, _single(_ring), "GPUs in a ring: gpu i <-> gpu (i+1) mod p only"),
    "switch": Generator(SwitchParams, _single(_switch), "GPUs on one non-blocking network switch"),
    "fully_connected": Generator(
        FullyConnectedParams, _single(_fully_connected), "a direct link between every pair of GPUs"
    ),
    "nvswitch": Generator(
        NvswitchParams,
        _single(_nvswitch),
        "GPUs on one NVSwitch (DGX A100 style) plus a host with a PCIe link to each GPU",
    ),
    "dgx1": Generator(
        Dgx1Params,
        _single(_dgx1),
        "DGX-1 (V100): 8 GPUs in the NVLink2 hybrid cube-mesh, 4 PCIe switches, 2 CPU sockets",
    ),
    "multi_node": Generator(
        MultiNodeParams,
        _multi_node,
        "nodes of an intra-node topology, one NIC per GPU, all NICs on one non-blocking switch",
    ),
    "cpu_host": Generator(
        CpuHostParams, _cpu_host, "CPU ranks on one host, each with a loopback link to it"
    ),
}.items():
    GENERATORS.register(_name)(_gen)
