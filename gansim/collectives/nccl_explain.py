"""Why a collective under the `nccl` algorithm takes the time it takes (`gansim nccl-tests
--explain`): what NCCL chose and what came next by its own tuning model, how many channels and
threads it runs on, how much of the time is NCCL's latency, and which resource of the run's
machine bounds the bandwidth part.

It reads only the public objects of gansim/collectives/nccl.py (`plan`, `Plan`, `ChannelFlow`,
`NcclState`) and nccl_tuning.py (`choose`'s `Choice`, `algo_time_us`, `algo_latency_us`,
`ALGORITHMS`, `PROTOCOLS`), and decides nothing: the numbers are those the simulation uses.

The bound: the plan's flows (each a group of lock-step channels, weighted on every resource by
what a byte of payload costs there) share the machine's resources max-min fairly, as the flow
model plays them; the flow that finishes last is held at the rate of a saturated resource on
its route, and of the saturated ones the tightest (capacity over the summed weights of the
flows crossing it) is the bound. Its efficiency is the share of its line rate that carries
data on one crossing: NCCL's figure for the link kind (nccl_topology.link_efficiency), over the
protocol's bytes on the wire per data byte (nccl.WIRE_BYTES_PER_DATA_BYTE), times the SHM share
of a staged PCI path (nccl_topology.shm_fraction) or NVLS's efficiency where they apply; host
memory that stages a copy is written and read back (half); a GPU's collective kernels are
measured in NCCL's own figure for them (efficiency 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gansim.collectives.nccl import WIRE_BYTES_PER_DATA_BYTE, NcclState, Plan, dtree_parent, nvls_efficiency, plan
from gansim.collectives.nccl_topology import Hop, NcclMachine, link_efficiency, shm_fraction
from gansim.collectives.nccl_tuning import (
    ALGORITHMS,
    LL,
    LL128,
    PROTOCOLS,
    algo_time_us,
    candidates,
    nccl_proto,
    nvls_channels,
    pipeline_fill_us,
    plugin_latency_times,
    plugin_protocol,
    proxy_serial_us,
)
from gansim.core.nccl_env import as_environment
from gansim.network.cluster import Cluster
from gansim.network.flows import max_min_rates

LINK_LABELS = {"nvlink": "NVLink", "pcie": "PCIe", "net": "network link"}
# relative tolerance for "saturated" and for ties between equally tight resources
_RTOL = 1e-9


@dataclass(frozen=True)
class Contender:
    """An (algorithm, protocol) pair and NCCL's model time for it (latency + bytes / bandwidth)."""

    algorithm: str
    protocol: str
    model_time_us: float


# What a row bound by SHM staging rests on. NCCL's maintainers: "Some components (in particular
# some CPUs) do not handle bidirectional traffic well" (NVIDIA/nccl#384, a 2-GPU PCIe 3.0 box:
# all-reduce 3.9 GB/s, broadcast 10.31); "Performance tends to degrade significantly when we have
# traffic going from/to all GPUs and interleaving in the CPU" (NVIDIA/nccl#1285). The published
# 4-GPU boxes without peer-to-peer measure 2.6 to 27 GB/s busbw (docs/nccl-model.md).
SHM_CAVEAT = ("SHM through the CPU: the host decides its rate (NVIDIA/nccl#384, #1285), which gansim takes "
              "from the PCIe links and host memory only; measure the host if the busbw is lower")


@dataclass(frozen=True)
class Bound:
    """The resource that bounds the bandwidth part of the time."""

    resource: str  # as a user reads it: "NVLink gpu0->nvswitch", "host memory of host (SHM staging)"
    name: str  # the Cluster's name for it
    kind: str  # nvlink | pcie | net | ... (a link's kind), memory, kernels
    line_rate_GBps: float  # its capacity (for kernels: NCCL's figure for what they move)
    link_efficiency: float  # NCCL's bandwidth over the line rate (x SHM share, x NVLS efficiency)
    wire_bytes_per_data_byte: float  # the protocol's overhead on it (host memory: x2, written and read)
    efficiency: float  # link_efficiency / wire_bytes_per_data_byte: the share of the line rate that is data
    staged_in_host: bool = False  # an SHM hop staged in host memory (or that memory): the host's CPU sets its rate


@dataclass(frozen=True)
class Explanation:
    chosen: Contender
    runner_up: Contender | None  # the next best pair NCCL would allow, None when nothing else is allowed
    channels: int  # channels this size runs on
    comm_channels: int  # of the communicator's (NVLS: of its NVLS channels)
    threads: int
    # the latency played before the flows: NCCL's for the choice (algo_latency_us), with the
    # network hops as played (played_inter_latency), NVLS-Tree's pipeline drain and the proxy's posts (nccl.py
    # Plan.latency_s)
    latency_us: float
    time_us: float  # the predicted time
    bound_by: Bound | None  # None: no flow, or none that a finite resource holds
    # of latency_us, the proxy thread's posts channel after channel at the network crossings
    # (nccl_tuning.proxy_serial_us)
    proxy_us: float = 0.0
    # of latency_us, the drain of NVLS's or NVLS-Tree's chunk pipeline (nccl_tuning.pipeline_fill_us)
    drain_us: float = 0.0
    # how NCCL chose: "model" (its tuning model's fastest) or "thresholds" (2.4, which had no
    # model: the runner-up's loss is then by 2.5's figures and may be below zero)
    chosen_by: str = "model"
    # the protocol the NICs' net plugin set (NCCL_PROTO) where the user did not; None: none
    plugin_protocol: str | None = None
    nvls_heads: int | None = None  # NVLS and NVLS-Tree: the NVLS graph's heads each channel runs on
    # the network hops NCCL's latency counts (0 inside one machine; PAT: a fraction), one of them
    # as played (hwLat[NET], plus what a net plugin reports: nccl_tuning.played_inter_latency)
    network_hops: float = 0.0
    network_hop_us: float = 0.0
    plugin_latency_us: float | None = None  # what the NICs' net plugin reports to NCCL; None: no plugin
    # the user's NCCL_ALGO / NCCL_PROTO as an environment sets them ("NCCL_ALGO=ring,tree
    # NCCL_PROTO=Simple"); None: NCCL chose among all
    settings: str | None = None
    fell_back: bool = False  # nothing the settings allow was available: NCCL's fallback, the ring
    # how the release does not apply NCCL_ALGO as written here (nccl_tuning.Candidates); None: it does
    overruled: str | None = None
    ll128_by_listing: bool = False  # LL128 runs because NCCL_PROTO lists it; NCCL leaves it off here else

    @property
    def latency_share(self) -> float:
        """NCCL's latency over the predicted time (1 when the time is nothing but it)."""
        return min(1.0, self.latency_us / self.time_us) if self.time_us > 0 else 1.0

    @property
    def staged_in_host(self) -> bool:
        """Whether the bound is an SHM hop staged in host memory, whose rate is the host's."""
        return self.bound_by is not None and self.bound_by.staged_in_host

    @property
    def bandwidth_share(self) -> float:
        return 1.0 - self.latency_share

    @property
    def runner_up_loss(self) -> float | None:
        """How much slower the runner-up is by NCCL's model (0.12: 12 % slower)."""
        if self.runner_up is None or self.chosen.model_time_us <= 0:
            return None
        return self.runner_up.model_time_us / self.chosen.model_time_us - 1.0

    def sentence(self) -> str:
        c = self.chosen
        heads = f" on {self.nvls_heads} heads" if self.nvls_heads is not None else ""
        parts = [f"{c.algorithm}/{c.protocol} x{self.channels}/{self.comm_channels} ch{heads}, {self.threads} thr"]
        b = self.bound_by
        if b is None:
            parts.append("no link to bound it")
        elif b.kind == "kernels":
            parts.append(f"bound by {b.resource[:-1]}, {_rate(b.line_rate_GBps)} GB/s)")
        else:
            parts.append(f"bound by {b.resource} ({_rate(b.line_rate_GBps)} GB/s line rate, "
                         f"x{b.efficiency:.2f} {c.protocol} efficiency)")
        of_it = ([f"{self.proxy_us:.0f} us of it the proxy's posts"] if self.proxy_us > 0 else []) + \
            ([f"{self.drain_us:.0f} us the drain of its chunk pipeline"] if self.drain_us > 0 else [])
        if self.network_hops > 0:
            times = {1: "once", 2: "twice"}[plugin_latency_times(c.protocol)]
            plugin = "" if self.plugin_latency_us is None else \
                f", the net plugin's {self.plugin_latency_us:.0f} us in it {times}"
            of_it.insert(0, f"{self.network_hops:g} network hops of {self.network_hop_us:.0f} us{plugin}")
        parts.append(f"latency {100 * self.latency_share:.0f} % of the time"
                     + (f" ({', '.join(of_it)})" if of_it else ""))
        if self.settings is not None:
            named = self.settings.replace(" ", " and ")
            verb = "allow" if " " in self.settings else "allows"
            if self.fell_back:
                parts.append(f"nothing {named} {verb} runs here: NCCL's fallback, the ring")
            elif self.overruled is not None:
                parts.append(self.overruled)
            else:
                parts.append(f"chosen among what {named} {verb}")
        if self.ll128_by_listing:
            parts.append("LL128 because NCCL_PROTO names it: NCCL leaves it off on this machine by default")
        loss = self.runner_up_loss
        if self.runner_up is None:
            parts.append("no runner-up allowed")
        else:
            parts.append(f"runner-up {self.runner_up.algorithm}/{self.runner_up.protocol} {100 * loss:+.0f} %")
        if self.plugin_protocol is not None:
            parts.append(f"NCCL_PROTO={self.plugin_protocol} set by the net plugin")
        if self.chosen_by == "thresholds":
            parts.append("chosen by NCCL 2.4's size thresholds, timed by the 2.5 model's figures")
        if self.staged_in_host:
            parts.append(SHM_CAVEAT)
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        def contender(x: Contender | None) -> dict[str, Any] | None:
            return None if x is None else {"algorithm": x.algorithm, "protocol": x.protocol,
                                           "model_time_us": x.model_time_us}

        b = self.bound_by
        return {
            "chosen": contender(self.chosen),
            "runner_up": contender(self.runner_up),
            "runner_up_loss": self.runner_up_loss,
            "chosen_by": self.chosen_by,
            "plugin_protocol": self.plugin_protocol,
            "settings": self.settings,
            "fell_back": self.fell_back,
            "overruled": self.overruled,
            "ll128_by_listing": self.ll128_by_listing,
            "staged_in_host": self.staged_in_host,
            "channels": self.channels,
            "comm_channels": self.comm_channels,
            "nvls_heads": self.nvls_heads,
            "network_hops": self.network_hops,
            "network_hop_us": self.network_hop_us,
            "plugin_latency_us": self.plugin_latency_us,
            "threads": self.threads,
            "latency_us": self.latency_us,
            "latency_share": self.latency_share,
            "proxy_us": self.proxy_us,
            "drain_us": self.drain_us,
            "bandwidth_share": self.bandwidth_share,
            "bound_by": None if b is None else {
                "resource": b.resource, "name": b.name, "kind": b.kind, "line_rate_GBps": b.line_rate_GBps,
                "link_efficiency": b.link_efficiency, "wire_bytes_per_data_byte": b.wire_bytes_per_data_byte,
                "efficiency": b.efficiency},
            "sentence": self.sentence(),
        }


def _rate(gbps: float) -> str:
    return f"{gbps:.3g}" if gbps < 100 else f"{gbps:.0f}"


def explain(cluster: Cluster, state: NcclState, coll: str, nbytes: float, seconds: float,
            algo: str | None = None, proto: str | None = None) -> Explanation:
    """Explain the collective `plan(cluster, state, coll, nbytes, algo, proto)` that the
    simulation timed at `seconds`."""
    chosen_plan = plan(cluster, state, coll, float(nbytes), algo, proto)
    choice = chosen_plan.choice
    machine = state.machine
    nvls = choice.algorithm in ("nvls", "nvls_tree")
    comm = nvls_channels(state.tuning.era, machine) if nvls else machine.comm_channels
    heads = (machine.nvls.channels if machine.nvls else 1) if nvls else None
    entry = state.tuning.entry(coll, choice.algorithm, choice.protocol, choice.listed)
    settings = " ".join(as_environment(algo, proto)) or None
    allowed = candidates(state.tuning, coll, algo, nccl_proto(state.tuning, proto))
    fell_back = allowed.fell_back
    return Explanation(
        chosen=Contender(choice.algorithm, choice.protocol, choice.model_time_us),
        runner_up=runner_up(state, coll, float(nbytes), choice.algorithm, choice.protocol, algo, proto),
        channels=choice.channels, comm_channels=comm, nvls_heads=heads, threads=choice.threads,
        network_hops=entry.network_hops, network_hop_us=entry.played_hop_us if entry.network_hops else 0.0,
        plugin_latency_us=machine.nic.reported_latency_us if machine.nic and entry.network_hops else None,
        latency_us=chosen_plan.latency_s * 1e6,
        time_us=seconds * 1e6,
        bound_by=bottleneck(cluster, state, chosen_plan),
        proxy_us=proxy_serial_us(state.tuning, coll, choice.algorithm, choice.channels, dtree_parent),
        drain_us=pipeline_fill_us(state.tuning, coll, choice.algorithm, float(nbytes), entry.bandwidth_GBps),
        chosen_by=state.tuning.era.choice,
        plugin_protocol=None if proto is not None else plugin_protocol(state.tuning),
        settings=settings, fell_back=fell_back, overruled=allowed.overruled,
        ll128_by_listing=choice.listed and not fell_back and (
            coll, choice.algorithm, choice.protocol) in state.tuning.ll128_when_listed,
    )


def runner_up(state: NcclState, coll: str, nbytes: float, chosen_algo: str, chosen_proto: str,
              algo: str | None = None, proto: str | None = None) -> Contender | None:
    """The fastest (algorithm, protocol) by NCCL's model after the chosen one, among those
    NCCL chooses from under NCCL_ALGO / NCCL_PROTO (nccl_tuning.candidates: the ring it falls
    back to where they leave nothing)."""
    allowed = candidates(state.tuning, coll, algo, nccl_proto(state.tuning, proto))
    best: Contender | None = None
    for a in ALGORITHMS:
        for p in PROTOCOLS:
            if (a, p) == (chosen_algo, chosen_proto) or a not in allowed.algorithms or p not in allowed.protocols:
                continue
            t = algo_time_us(state.tuning, coll, a, p, nbytes, allowed.listed)
            if t is not None and t >= 0 and (best is None or t < best.model_time_us):
                best = Contender(a, p, t)
    return best


def bottleneck(cluster: Cluster, state: NcclState, chosen: Plan) -> Bound | None:
    """The resource that holds the plan's last flow, its flows alone on the machine."""
    flows = chosen.flows
    if not flows:
        return None
    capacity = cluster.network.capacity
    pair_flow = np.concatenate([np.full(f.resources.size, i, dtype=np.int64) for i, f in enumerate(flows)])
    pair_res = np.concatenate([f.resources for f in flows]).astype(np.int64)
    pair_weight = np.concatenate([f.weights for f in flows]).astype(float)
    keep = pair_weight > 0
    pair_flow, pair_res, pair_weight = pair_flow[keep], pair_res[keep], pair_weight[keep]
    if pair_res.size == 0:
        return None
    rates = max_min_rates(pair_flow, pair_res, len(flows), capacity, pair_weight)
    amounts = np.array([f.amount for f in flows])
    with np.errstate(divide="ignore"):
        finish = np.where(rates > 0, amounts / rates, np.inf)
    last = int(np.argmax(finish))
    if not np.isfinite(rates[last]):
        return None
    size = capacity.size
    load = np.bincount(pair_res, weights=pair_weight * rates[pair_flow], minlength=size)
    weight = np.bincount(pair_res, weights=pair_weight, minlength=size)
    mine = pair_res[pair_flow == last]
    finite = np.isfinite(capacity[mine])
    mine = mine[finite]
    if mine.size == 0:
        return None
    use = load[mine] / capacity[mine]
    saturated = mine[use >= use.max() * (1 - _RTOL)]
    tight = capacity[saturated] / weight[saturated]
    tightest = saturated[tight <= tight.min() * (1 + _RTOL)]
    return describe(cluster, state, chosen, int(tightest.min()))


def describe(cluster: Cluster, state: NcclState, chosen: Plan, index: int) -> Bound:
    """A resource of the run's machine as the plan uses it, named as a user reads it."""
    machine = state.machine
    res = cluster.resource(index)
    capacity = float(cluster.network.capacity[index])
    proto, algo = chosen.choice.protocol, chosen.choice.algorithm
    wire = WIRE_BYTES_PER_DATA_BYTE[proto]
    if res.kind == "kernels":
        rank = int(np.flatnonzero(np.asarray(cluster.kernel_resource) == index)[0])
        return Bound(f"GPU kernels of rank {rank} ({_kernel_cap(chosen, state)})", res.name, res.kind,
                     chosen.kernel_GBps, 1.0, 1.0, 1.0)
    if res.kind == "memory":
        host = res.name.rsplit(":", 1)[0]
        return Bound(f"host memory of {host} (SHM staging)", res.name, res.kind, capacity / 1e9, 1.0, 2.0 * wire,
                     1.0 / (2.0 * wire), staged_in_host=True)
    efficiency = link_efficiency(res.kind, machine.capability)
    if algo in ("nvls", "nvls_tree") and res.kind == "nvlink":
        efficiency *= nvls_efficiency(state)
        wire = 1.0
    hop = _hop_across(cluster, machine, index)
    staged = hop is not None and hop.transport == "shm"
    if staged:
        efficiency *= shm_fraction(hop.path_type)
    label = f"{LINK_LABELS.get(res.kind, res.kind + ' link')} {res.name.replace('->', ' -> ') if res.kind == 'net' else res.name}"
    if staged:
        label += " (SHM staging)"
    return Bound(label, res.name, res.kind, capacity / 1e9, efficiency, wire, efficiency / wire, staged_in_host=staged)


def _kernel_cap(chosen: Plan, state: NcclState) -> str:
    """Which of NCCL's figures holds a GPU's collective kernels (nccl.py's kernels, tuning.cc)."""
    c, machine, tuning = chosen.choice, state.machine, state.tuning
    share = f"on {c.channels} of {machine.comm_channels} channels"
    if machine.comm_channels != machine.searched_comm_channels:  # the graph's bandwidth is for NCCL's own count
        share += f" (NCCL's own {machine.searched_comm_channels}, before NCCL_MIN/MAX_NCHANNELS)"
    if c.algorithm == "ring":
        if c.protocol == LL:
            return ("NCCL's per-GPU LL cap llMaxBw" if chosen.kernel_GBps >= tuning.ll_max_bw * (1 - _RTOL)
                    else f"NCCL's LL bandwidth {share}")
        if c.protocol == LL128:
            if tuning.era.ll128_cap_by_collective is not None and not tuning.era.ll128_cap_per_channel:
                return f"NCCL's LL128 cap for all channels (ll128MaxBw), {share}"
            return f"NCCL's per-channel LL128 cap {share}"
        return f"NCCL's graph bandwidth {share}"
    if c.algorithm == "tree":
        return f"NCCL's tree bandwidth {share}"
    if c.algorithm == "pat":
        return f"NCCL's tree graph bandwidth {share} (PAT)"
    return "NCCL's NVLS algorithm bandwidth"


def _hop_across(cluster: Cluster, machine: NcclMachine, link: int) -> Hop | None:
    """A hop between two ranks of one machine that crosses the link (it says whether NCCL
    stages such hops in host memory); None if no such hop does (links between machines)."""
    topo = cluster.topology
    names = list(topo.nodes)
    rank_of = {node: r for r, node in enumerate(machine.rank_nodes)}
    ends = [rank_of[names[n]] for n in topo.ends[link].tolist() if names[n] in rank_of]
    if not ends:
        return None
    r = ends[0]
    group = next(g for g in machine.nodes if r in g)
    for other in group:
        if other == r:
            continue
        for a, b in ((r, other), (other, r)):
            hop = machine.hop(a, b)
            if link in hop.links:
                return hop
    return None
