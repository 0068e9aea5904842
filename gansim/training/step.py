"""One simulated run: N ranks of a topology doing `steps` synchronous data-parallel
steps of a workload (seed 002, Algorithms 1 and 2), built as a task graph and played on
the flow network. Returns raw timings; gansim/runner/record.py turns them into figures."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import numpy as np
import simpy

from gansim.collectives.communicator import CollectiveSpan, Communicator
from gansim.collectives import uncontended as uncontended_plays
from gansim.core.config import TrainingOptions
from gansim.core.registry import Registry
from gansim.core.units import MiB
from gansim.network.cluster import Cluster
from gansim.network.engine import (
    COMPUTE,
    DATA,
    DELAY,
    FLOW,
    OVERHEAD,
    SYNC,
    Execution,
    FrozenGraph,
    GatheredTooLate,
    TaskGraph,
    execute,
    carried_work,
    moved_alone,
    ran_alone,
)
from gansim.network.pools import PooledGroup, groups_overlap
from gansim.training.memory import (
    bytes_per_gradient_element,
    quantize_seconds,
    recompute_extra_forward,
)
from gansim.training.workloads import (
    AllreduceWorkload,
    GanWorkload,
    StepPhases,
    Workload,
)


@dataclass(frozen=True)
class RunPoint:
    """Everything one simulated run depends on (one point of a sweep)."""

    gpus: int
    algorithm: str
    cost_model: str
    per_gpu_batch: float
    steps: int
    options: TrainingOptions
    seed: int = 0  # of the compute variability draws


@dataclass
class RunTimeline:
    cluster: Cluster
    graph: FrozenGraph
    execution: Execution
    spans: list[CollectiveSpan]
    step_ends: np.ndarray  # per step: the task per rank that ends it, shape (steps, ranks)
    steps: int
    gradient_bytes_per_step: float
    pooled: list[PooledGroup]  # input phases timed on shared host core pools without events

    def carried_per_resource(self) -> np.ndarray:
        """Work every resource carried over the run (bytes on links, seconds on compute):
        its flows on the flow network, and the transfers of collectives played without it
        (worked out once: the record and the details both ask; not to be written to)."""
        return self._carried_per_resource

    @cached_property
    def _carried_per_resource(self) -> np.ndarray:
        g = self.graph
        flows = carried_work(g.kind, g.route)
        # added route by route in one order, play after play: the plays of a run repeat a
        # plan's routes, whose lists laid end to end held hundreds of MB at 16,384 GPUs
        pieces = itertools.chain([(g.route[flows], g.amount[flows])],
                                 (span.play.carried() for span in self.spans if span.play is not None))
        return self.cluster.network.carried_per_resource(pieces)

    @cached_property
    def shared_rows(self) -> tuple[list[uncontended_plays.UncontendedPlay], tuple[np.ndarray, ...],
                                   tuple[np.ndarray, ...], np.ndarray]:
        """_shared_rows of the run, worked out once: what was shared, how long heads must be
        and which compute phases met something all ask."""
        return _shared_rows(self)


def ddp_buckets(tensor_bytes: list[float], first_bucket: float, bucket: float) -> list[float]:
    """PyTorch DDP's bucket assignment: tensors in gradient-ready order fill a bucket until
    it reaches its cap (the first bucket's cap is small, so communication starts early)."""
    buckets: list[float] = []
    current = 0.0
    cap = first_bucket
    for size in tensor_bytes:
        current += size
        if current >= cap:
            buckets.append(current)
            current = 0.0
            cap = bucket
    if current > 0:
        buckets.append(current)
    return buckets


class StepBuilder:
    def __init__(self, cluster: Cluster, graph: TaskGraph, comm: Communicator, point: RunPoint, alone: bool,
                 pooled: bool = False, flow_phases: frozenset[str] = frozenset()):
        self.cluster = cluster
        self.graph = graph
        self.comm = comm
        self.point = point
        self.ranks = np.arange(cluster.ranks)
        # the topology's datasheet figure (NodeSpec.memory_bandwidth_GBps), the one source of it
        bandwidths = [cluster.topology.nodes[n].memory_bandwidth_GBps for n in cluster.rank_nodes]
        self.bandwidth_GBps = None if any(b is None for b in bandwidths) else min(bandwidths)
        self.rng = np.random.default_rng(point.seed)
        # With `alone`, large runs time each compute phase (and, of GPU ranks, input phase and
        # host-to-device copy) as a delay instead of a flow alone on the rank's own resources
        # (simulate() checks afterwards that nothing else used those resources at the same
        # time, and plays the run again with them as flows if something did: a CPU rank's
        # messages, which its core moves).
        large = self.large = alone and cluster.ranks >= uncontended_plays.UNCONTENDED_MIN_RANKS
        self.compute_kind = DELAY if large and cluster.private_compute else FLOW
        # compute phases (by label) that met other work when timed alone: flows in any case
        self.flow_phases = flow_phases
        self.loader_kind = DELAY if large and cluster.private_loader else FLOW
        # With `pooled`, input pipelines that share their host's cores (and nothing else) are
        # timed per pool without events (gansim/network/pools.py), each phase once every
        # rank's previous task has ended (a gathered solve: TaskGraph.add_solved).
        self.pooled = pooled and large and self.loader_kind == FLOW and cluster.loader_pool is not None
        self.pooled_groups: list[PooledGroup] = []
        # whether compute timed as a delay is sure to meet other compute on its resource
        # (ddp_bucketed: a bucket's compression beside the next bucket's backward)
        self.delays_meet = False

    @cached_property
    def h2d_kind(self) -> int:
        """How host-to-device copies are timed (worked out on first use: an all-reduce
        workload has none, and finding every rank's copy route takes a search per rank)."""
        return DELAY if self.large and self.cluster.private_h2d() else FLOW

    def variability(self) -> np.ndarray | float:
        """Per-rank factors of one compute phase (lognormal, mean 1, cv compute_cv). One rank
        waits for nobody, so it keeps the mean and the simulation stays exact."""
        cv = self.point.options.compute_cv
        if cv == 0 or self.cluster.ranks == 1:
            return 1.0
        sigma2 = np.log1p(cv * cv)
        return self.rng.lognormal(-sigma2 / 2, np.sqrt(sigma2), self.cluster.ranks)

    def compute(self, after: np.ndarray, seconds: float, label: str) -> np.ndarray:
        amounts = seconds * self.variability() * self.cluster.work_scale
        kind = FLOW if label in self.flow_phases else self.compute_kind
        tasks = self.graph.add(kind, self.cluster.compute_route, amounts, self.ranks, COMPUTE, label)
        self.graph.depend(after, tasks)
        return tasks

    def join(self, *before: np.ndarray, label: str) -> np.ndarray:
        tasks = self.graph.add(DELAY, -1, 0.0, self.ranks, SYNC, label, count=self.ranks.size)
        for b in before:
            self.graph.depend(b, tasks)
        return tasks

    def allreduce(self, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        """An all-reduce of gradients, compressed to the wire dtype before and expanded after
        (memory-bound kernels on the device) when the dtype is not fp32."""
        squeeze = self.quantize_s(nbytes) / 2
        if squeeze > 0:
            entry = self.compute(entry, squeeze, f"{label}: compress")
        done = self.comm.allreduce(entry, nbytes, label)
        return self.compute(done, squeeze, f"{label}: expand") if squeeze > 0 else done

    def quantize_s(self, wire_bytes: float) -> float:
        dtype = self.point.options.gradient_dtype
        if dtype == "fp32" or self.bandwidth_GBps is None:
            return 0.0  # nothing to do, or a device whose memory bandwidth is unknown
        return quantize_seconds(wire_bytes / bytes_per_gradient_element(dtype), dtype, self.bandwidth_GBps)

    def network_step(self, after: np.ndarray, net: str, forward: float | None, backward: float, optimizer: float,
                     tensors: tuple[int, ...], bytes_per_param: float, recompute: float = 0.0,
                     buffers: tuple[tuple[str, float], ...] = (), rounds: tuple[float, ...] = (1.0,)) -> np.ndarray:
        """One network's forward (none for a regularisation phase, whose `backward` is all its
        compute), backward with its gradient all-reduce (as options.gradient_sync issues it,
        GRADIENT_SYNCS) and optimizer; `buffers` (network, bytes) are broadcast from rank 0
        first (DDP's broadcast_buffers). With gradient accumulation, forward and backward run
        once per round, each its share (`rounds`) of the seconds, and the gradients are
        all-reduced after the last round, or after each with options.sync_each_round."""
        opts = self.point.options
        if opts.broadcast_buffers and self.cluster.ranks > 1:
            for owner, nbytes in buffers:
                if nbytes > 0:
                    after = self.comm.broadcast(after, nbytes, f"{owner} buffers broadcast")
        grad_bytes = [t * bytes_per_param for t in tensors]
        ready = after
        for k, share in enumerate(rounds):
            done_forward = ready if forward is None else self.compute(ready, forward * share, f"{net} forward")
            if recompute > 0:  # activation checkpointing: the forward again, inside backward
                done_forward = self.compute(done_forward, recompute * share, f"{net} recompute")
            if self.cluster.ranks == 1 or not (opts.sync_each_round or k == len(rounds) - 1):
                ready = self.compute(done_forward, backward * share, f"{net} backward")
            else:
                ready = GRADIENT_SYNCS.get(opts.sync(), field="options.gradient_sync")(
                    self, done_forward, net, backward * share, grad_bytes)
        return self.compute(ready, optimizer, f"{net} optimizer")

    def gan_step(self, after: np.ndarray, workload: GanWorkload, phases: StepPhases, step: int = 0) -> np.ndarray:
        """Minibatch `step` (from 0): input, the D steps, D's regularisation phases that run
        at this step, the G step, then G's (NVlabs/stylegan2 runs G's before D's; the order
        only decides what waits for what inside the step)."""
        opts = self.point.options
        graph, cluster = self.graph, self.cluster
        if opts.host_overhead_per_replica_s > 0:
            # one replica after another in the process that drives a machine's GPUs (TF's
            # MirroredStrategy; MultiWorkerMirroredStrategy runs one such worker a machine)
            overhead = graph.add(DELAY, -1, opts.host_overhead_per_replica_s * cluster.topology.machine_ranks(
                cluster.ranks).astype(float), self.ranks, OVERHEAD, "host overhead", count=cluster.ranks)
            graph.depend(after, overhead)
            after = overhead
        prep = self.input_phase(after, phases.data_host_s * cluster.loader_scale)
        h2d_routes = cluster.h2d_routes()
        if (h2d_routes >= 0).all() and phases.sample_bytes > 0:
            copy = graph.add(self.h2d_kind, h2d_routes, phases.sample_bytes * phases.batch, self.ranks, DATA,
                             "data: host-to-device")
            graph.depend(prep, copy)
            after = copy
        else:
            after = prep
        bytes_per_param = wire_bytes_per_param(workload, opts)
        d_again, g_again = recompute_extra_forward(phases) if opts.recompute else (0.0, 0.0)
        # DDP broadcasts a network's buffers once per step (see TrainingOptions.broadcast_buffers):
        # G's at the D step, where its forward makes the fakes, D's at its first D step
        once = (("G", float(workload.g_buffer_bytes)), ("D", float(workload.d_buffer_bytes)))
        rounds = tuple(opts.round_shares(phases.batch))
        for k in range(workload.d_steps_per_g_step):
            after = self.network_step(after, "D", phases.d_forward_s, phases.d_backward_s, phases.d_optimizer_s,
                                      workload.d_param_tensors, bytes_per_param, d_again, once if k == 0 else (),
                                      rounds)
        after = self.regularization_steps(after, "D", step, workload, phases, bytes_per_param, rounds)
        after = self.network_step(after, "G", phases.g_forward_s, phases.g_backward_s, phases.g_optimizer_s,
                                  workload.g_param_tensors, bytes_per_param, g_again, rounds=rounds)
        return self.regularization_steps(after, "G", step, workload, phases, bytes_per_param, rounds)

    def input_phase(self, after: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """Each rank's loader thread assembling its batch, after its `after` task."""
        cluster, graph = self.cluster, self.graph
        if not self.pooled:
            prep = graph.add(self.loader_kind, cluster.loader_route, seconds, self.ranks, DATA, "data: host prep")
            graph.depend(after, prep)
            return prep
        network = cluster.network
        _, own = network.route_pairs(cluster.loader_route)
        group = PooledGroup(entry=np.asarray(after, dtype=np.int64),
                            amount=np.broadcast_to(np.asarray(seconds, dtype=float), self.ranks.shape).copy(),
                            own_capacity=network.capacity[own[::2]], pool=cluster.loader_pool,
                            pool_capacity=network.capacity)
        self.pooled_groups.append(group)
        prep = graph.add_solved(self.ranks, DATA, "data: host prep", group.solve, route=cluster.loader_route,
                                amount=group.amount, gather=True)
        graph.depend(after, prep)
        return prep

    def regularization_steps(self, after: np.ndarray, net: str, step: int, workload: GanWorkload,
                             phases: StepPhases, bytes_per_param: float,
                             rounds: tuple[float, ...] = (1.0,)) -> np.ndarray:
        """Network `net`'s lazy regularisation phases due at `step`: each its compute, the
        all-reduce of all the network's gradients and its optimizer update (the TF code's
        RegD/RegG optimizers share TrainD/TrainG's Adam state and apply it again), in the
        step's rounds (the TF loop runs the regularisation op once per round)."""
        tensors = workload.d_param_tensors if net == "D" else workload.g_param_tensors
        optimizer = phases.d_optimizer_s if net == "D" else phases.g_optimizer_s
        for reg in phases.regularization:
            if reg.network == net and reg.runs_at(step):
                after = self.network_step(after, f"{net} {reg.name}", None, reg.compute_s, optimizer, tensors,
                                          bytes_per_param, rounds=rounds)
        return after


def gradient_params_per_step(workload: GanWorkload, phases: StepPhases, options: TrainingOptions) -> float:
    """Gradient elements all-reduced per minibatch, averaged over a regularisation period:
    every D step's and the G step's, and each regularisation phase's network's 1/every, as
    many times as a network step all-reduces them (options.syncs_per_step)."""
    params = float(workload.d_params * workload.d_steps_per_g_step + workload.g_params)
    for reg in phases.regularization:
        params += (workload.d_params if reg.network == "D" else workload.g_params) / reg.every
    return params * options.syncs_per_step(phases.batch)


# How a network's gradients are all-reduced: each takes the builder, the task after which
# the backward starts, the network's label, the backward's seconds and the gradient bytes of
# each trainable variable (gradient-ready order), and returns per rank the task at whose end
# the summed gradients are ready. The names are config.GradientSync's.
GradientSync = Callable[[StepBuilder, np.ndarray, str, float, list[float]], np.ndarray]
GRADIENT_SYNCS: Registry[GradientSync] = Registry("gradient sync")


@GRADIENT_SYNCS.register("per_phase_flat")
def per_phase_flat(b: StepBuilder, after: np.ndarray, net: str, backward: float, grad_bytes: list[float]) -> np.ndarray:
    """The backward, then one all-reduce of all the phase's gradients as one buffer
    (StyleGAN3's training/training_loop.py: torch.cat of every grad, one
    torch.distributed.all_reduce per phase). The copy into the flat buffer is not charged."""
    done = b.compute(after, backward, f"{net} backward")
    return b.allreduce(done, sum(grad_bytes), f"{net} all-reduce")


@GRADIENT_SYNCS.register("per_variable")
def per_variable(b: StepBuilder, after: np.ndarray, net: str, backward: float, grad_bytes: list[float]) -> np.ndarray:
    """The backward, then one all-reduce per trainable variable, one after another (NVlabs/
    stylegan2 dnnlib/tflib/optimizer.py apply_updates: nccl_ops.all_sum per variable, over
    the variables in order; NCCL runs a communicator's collectives in the order issued). Each
    is a collective of its own: its own latency and pipeline fill in the cost model."""
    ready = b.compute(after, backward, f"{net} backward")
    for i, size in enumerate(grad_bytes):
        ready = b.allreduce(ready, size, f"{net} all-reduce (variable {i})")
    return ready


@GRADIENT_SYNCS.register("ddp_buckets")
def ddp_bucketed(b: StepBuilder, after: np.ndarray, net: str, backward: float, grad_bytes: list[float]) -> np.ndarray:
    """PyTorch DDP: the variables fill buckets in gradient-ready order (ddp_buckets); each
    bucket's share of the backward (by bytes) runs, then its all-reduce, overlapped with the
    rest of the backward and issued in bucket order."""
    opts = b.point.options
    total = sum(grad_bytes)
    buckets = ddp_buckets(grad_bytes, opts.first_bucket_MiB * MiB, opts.bucket_MiB * MiB)
    piece_done = after
    comm_done: np.ndarray | None = None
    for i, size in enumerate(buckets):
        piece_done = b.compute(piece_done, backward * size / total, f"{net} backward (bucket {i})")
        entry = piece_done if comm_done is None else b.join(piece_done, comm_done, label=f"{net} bucket {i} ready")
        comm_done = b.allreduce(entry, size, f"{net} all-reduce (bucket {i})")
        if i == 0 and len(buckets) > 1 and b.compute_kind == DELAY and b.quantize_s(size) > 0 and backward > 0:
            # the first bucket's compression starts as the next piece of the backward does, on
            # the same device
            b.delays_meet = True
    assert comm_done is not None
    return b.join(piece_done, comm_done, label=f"{net} gradients ready")


def gradient_message_sizes(workload: GanWorkload, options: TrainingOptions) -> list[float]:
    """The bytes of each gradient all-reduce one D and one G step issue, as the registered
    gradient sync issues them: one per network (per_phase_flat), one per variable
    (per_variable), or DDP's buckets (ddp_buckets, with its caps), on the wire's dtype."""
    per_param = wire_bytes_per_param(workload, options)
    sync = options.sync()
    sizes: list[float] = []
    for tensors in (workload.d_param_tensors, workload.g_param_tensors):
        grad_bytes = [t * per_param for t in tensors]
        if sync == "per_variable":
            sizes += grad_bytes
        elif sync == "ddp_buckets":
            sizes += ddp_buckets(grad_bytes, options.first_bucket_MiB * MiB, options.bucket_MiB * MiB)
        else:
            sizes.append(sum(grad_bytes))
    return sizes


def wire_bytes_per_param(workload: GanWorkload, options: TrainingOptions) -> float:
    """Gradient bytes per parameter on the wire: the workload's element size, scaled to the
    all-reduce dtype (fp16 halves it, int8 quarters it)."""
    return workload.bytes_per_param * bytes_per_gradient_element(options.gradient_dtype) / 4


def simulate(cluster_factory, workload: Workload, phases: StepPhases | None, point: RunPoint,
             gamma_s_per_byte: float, *, keep_transfers: int = 0, uncontended: bool = True) -> RunTimeline:
    """Build and play the run. `cluster_factory(env)` makes the machine in a fresh env.
    Large all-reduces that nothing contends with are played without the flow network
    (gansim/collectives/uncontended.py), keeping their first `keep_transfers` transfers for
    the details; from UNCONTENDED_MIN_RANKS ranks, compute phases, input phases and
    host-to-device copies alone on their resources are delays. If, after the run, such a
    delay turns out to have shared its resources with something, the run is played again
    with the compute phases that did as flows (by label, `_as_flows`; all of that work where
    input phases or copies did); where that is sure as the run is built (fp16 compression of
    DDP's first bucket beside the next piece of the backward on one GPU: StepBuilder.
    delays_meet), it is built again so before it is played.
    If a play did, and only its first steps met other work (a CPU rank's core still computing
    the backward while DDP's first bucket is all-reduced on it), the run is played again with
    those first steps taken out of the play (`_longer_heads`) and the compute phases that met
    it as flows (`_as_flows`: by label, the others staying delays); else wholly on the flow
    network. The transfers of those first steps are timed as if alone at first, and after
    the run each that met something puts its rank's transfers on the flow network up to a
    step past it (`_heads_met`), and the run is played again: only the first steps that
    meet the backward cost events."""
    threshold = uncontended_plays.UNCONTENDED_MIN_TRANSFERS if uncontended else None
    alone, heads = uncontended, {}
    flow_phases: frozenset[str] = frozenset()
    nccl_states: dict = {}  # NCCL's view of the machine, worked out once for every play of the run
    timeline = _simulate(cluster_factory, workload, phases, point, gamma_s_per_byte, keep_transfers, threshold,
                         alone, pooled=uncontended, heads=heads, nccl_states=nccl_states)
    for _ in range(_MAX_REPLAYS):
        shared = _WORK if timeline is None else _what_was_shared(timeline)
        if shared is None:
            met = _heads_met(timeline, heads) if heads else None
            if met is None:
                return timeline
            heads = met
        elif shared == _WORK and alone:
            flow_phases, alone = _as_flows(timeline, flow_phases)
        elif shared == _PLAYS and (longer := _longer_heads(timeline, heads)) is not None:
            heads = longer[0]
            if longer[1] and alone:
                # work timed as alone that met a play would meet its first steps as flows too
                flow_phases, alone = _as_flows(timeline, flow_phases)
        else:
            break
        # (let go before the run is built again: at 16,384 GPUs its graph is hundreds of MB)
        del timeline
        timeline = _simulate(cluster_factory, workload, phases, point, gamma_s_per_byte, keep_transfers, threshold,
                             alone, heads=heads, nccl_states=nccl_states, flow_phases=flow_phases)
    del timeline
    return _simulate(cluster_factory, workload, phases, point, gamma_s_per_byte, keep_transfers, None, False,
                     nccl_states=nccl_states)


# what _what_was_shared finds: a play met something, or only work timed as alone did
_PLAYS, _WORK = "plays", "work"
# runs played again before the flow network plays the whole run
_MAX_REPLAYS = 6


def _shared_rows(timeline: RunTimeline) -> tuple[list[uncontended_plays.UncontendedPlay], tuple[np.ndarray, ...],
                                                  tuple[np.ndarray, ...], np.ndarray]:
    """The run's plays; and, as (resource, start, end) rows, its flows (and transfers
    timed as if alone, which a play must not meet either) on the resources that plays or work
    timed as alone used, and that work's own, with the task of each of these. Host core
    pools that cannot bind (Cluster.idle_pools) are no one's to share."""
    g, ex = timeline.graph, timeline.execution
    plays = [span.play for span in timeline.spans if span.play is not None]
    apart = moved_alone(g.kind, g.route, g.category)
    alone = np.flatnonzero(ran_alone(g.kind, g.route) & ~apart)
    network = timeline.cluster.network
    alone_row, alone_resource = network.route_pairs(g.route[alone])
    idle = np.zeros(network.capacity.size, dtype=bool)
    idle[list(timeline.cluster.idle_pools)] = True
    keep = ~idle[alone_resource]
    alone_row, alone_resource = alone_row[keep], alone_resource[keep]
    # flows matter only on resources a play or an alone task used (what `contended` keeps)
    wanted = np.zeros(network.capacity.size, dtype=bool)
    wanted[alone_resource] = True
    for play in plays:
        wanted[play.resource_spans()[0]] = True
    flows = np.flatnonzero((g.kind == FLOW) | apart)
    flow_row, flow_resource = network.route_pairs_on(g.route[flows], wanted)
    flow_rows = (flow_resource, ex.start[flows][flow_row], ex.end[flows][flow_row])
    alone_rows = (alone_resource, ex.start[alone][alone_row], ex.end[alone][alone_row])
    return plays, flow_rows, alone_rows, alone[alone_row]


def _what_was_shared(timeline: RunTimeline) -> str | None:
    """_PLAYS when a play shared a resource at the same time with anything else (a flow,
    another play, a delay timed as alone on its route) or left a rank early; else _WORK when
    such a delay shared one with a flow or another such delay, or input phases timed on a
    shared pool met on it; else None."""
    g = timeline.graph
    if not any(span.play is not None for span in timeline.spans) and not ran_alone(g.kind, g.route).any():
        return _WORK if groups_overlap(timeline.pooled) else None
    plays, flow_rows, alone_rows, _ = timeline.shared_rows
    # first as flows would be (a play beside them stays contended whatever they become)
    if plays and uncontended_plays.contended(plays, *(np.concatenate(x) for x in zip(flow_rows, alone_rows))):
        return _PLAYS
    if groups_overlap(timeline.pooled):
        return _WORK
    return _WORK if uncontended_plays.contended([], *flow_rows, *alone_rows) else None


def _as_flows(timeline: RunTimeline | None, flow_phases: frozenset[str]) -> tuple[frozenset[str], bool]:
    """After a run in which work timed as alone met something: the compute phases (labels)
    to build as flows from now on, and whether other work may stay timed as alone. Where
    only compute phases met (on their ranks' resources, anything there at the same time: a
    flow, a play, other such work), those phases become flows and the rest stays as it was;
    else (input phases or copies met, or no new phase is found) all of it becomes flows, as
    before phases were told apart."""
    if timeline is None:
        return flow_phases, False
    met = _phases_met(timeline)
    if met is None or met <= flow_phases:
        return flow_phases, False
    return flow_phases | met, True


def _phases_met(timeline: RunTimeline) -> frozenset[str] | None:
    """The labels of the compute phases timed as alone that shared a resource, at the same
    time, with anything else the run put on it (flows, transfers timed alone, plays, other
    work timed alone); None where other work timed as alone did, or pooled input phases met."""
    if groups_overlap(timeline.pooled):
        return None
    g = timeline.graph
    plays, flow_rows, alone_rows, alone_tasks = timeline.shared_rows
    spans = [play.resource_spans() for play in plays]
    res, lo, hi = (np.concatenate([alone_rows[i], flow_rows[i], *(span[i] for span in spans)]) for i in range(3))
    task = np.concatenate([alone_tasks, np.full(res.size - alone_tasks.size, -1)])
    moving = hi > lo
    res, lo, hi, task = res[moving], lo[moving], hi[moving], task[moving]
    order = np.lexsort((hi, lo, res))
    res, lo, hi, task = res[order], lo[order], hi[order], task[order]
    # a row meets another on its resource where one before it reaches past its start, or the
    # next one starts before its end (rows by start; resources apart by more than every time)
    width = float(max(hi.max(), 0.0)) - float(min(lo.min(), 0.0)) + 1.0 if res.size else 1.0
    reach = np.maximum.accumulate(hi + res * width)
    same_next = np.r_[res[1:] == res[:-1], False]
    met = np.r_[False, (reach[:-1] > lo[1:] + res[1:] * width)] | (same_next & (np.r_[lo[1:], np.inf] < hi))
    met_tasks = np.unique(task[met & (task >= 0)])
    if not met_tasks.size:
        return None
    if not (g.category[met_tasks] == COMPUTE).all():
        return None
    return frozenset(g.labels[label] for label in np.unique(g.label[met_tasks]).tolist())


# per collective (its index among the run's): how many first steps to take out of its play,
# and per rank how many of those are flows (Communicator.head_steps)
Heads = dict[int, tuple[int, np.ndarray]]


def _longer_heads(timeline: RunTimeline, heads: Heads) -> tuple[Heads, bool] | None:
    """Per collective (its index among the run's), how many first steps to take out of its
    play so that what met the play meets only those: the steps the play took until the last
    of the work that met it ended (its share of the play's time, as a ring's steps take
    alike), a quarter more, and at least twice as many as before. Of those, each rank's
    transfers stay timed as if alone as far as they were (from none: _heads_met puts those
    that met something on the flow network). Also whether work timed as alone met a play.
    None where that cannot help: a play met something until its end, left a rank early, or
    would need half its steps or more taken out."""
    plays, flow_rows, alone_rows, _ = timeline.shared_rows
    res, lo, hi = (np.concatenate(x) for x in zip(flow_rows, alone_rows))
    # who used each row: -2 work timed as alone, -1 a flow, i >= 0 the i-th play
    owner = np.concatenate([np.full(flow_rows[0].size, -1), np.full(alone_rows[0].size, -2)])
    spans = [play.resource_spans() for play in plays]
    res, lo, hi = (np.concatenate([a, *(span[i] for span in spans)]) for i, a in enumerate((res, lo, hi)))
    owner = np.concatenate([owner, *(np.full(span[0].size, i) for i, span in enumerate(spans))])
    indices = [k for k, span in enumerate(timeline.spans) if span.play is not None]
    p = timeline.cluster.ranks
    longer = dict(heads)
    met_alone = False
    for i, (play, (used, first, last)) in enumerate(zip(plays, spans)):
        if play.early_exit:
            return None
        play_lo = np.full(timeline.cluster.network.capacity.size, np.inf)
        play_hi = np.full(play_lo.size, -np.inf)
        play_lo[used], play_hi[used] = first, last
        met = (owner != i) & (hi > play_lo[res]) & (lo < play_hi[res])
        if not met.any():
            continue
        met_alone = met_alone or bool((owner[met] == -2).any())
        start, end, met_until = float(first.min()), float(last.max()), float(hi[met].max())
        if met_until >= end:
            return None
        head, flow_steps = heads.get(indices[i], (0, np.zeros(p, dtype=np.int64)))
        steps = len(play.plan.schedule.steps)
        more = int(np.ceil(steps * (met_until - start) / (end - start) * 1.25)) + 1
        total = max(2 * head, head + more)
        if 2 * total > head + steps:
            return None
        longer[indices[i]] = (total, flow_steps)
    return (longer, met_alone) if any(longer[k][0] != heads.get(k, (0,))[0] for k in longer) else None


def _heads_met(timeline: RunTimeline, heads: Heads) -> Heads | None:
    """None where every first-step transfer timed as if alone moved as it would have on the
    flow network: on each resource it crossed, while it moved, what crossed the resource
    (flows and transfers timed alone) would fit in its capacity each at its alone rate. Each
    flow then had its rate on the flow network with the resource's spare capacity left over,
    and each of those transfers its alone rate, which is what max-min fairness gives all of
    them together. Else the heads with, for the rank whose compute resource each that did
    not met something on (or, on another resource, its two ranks), their transfers on the
    flow network to a step past it (at most all of the collective's first steps)."""
    g, ex = timeline.graph, timeline.execution
    network = timeline.cluster.network
    apart = np.flatnonzero(moved_alone(g.kind, g.route, g.category))
    if not apart.size:
        return None
    a_row, a_res, a_weight = network.binding_pairs(g.route[apart])
    wanted = np.zeros(network.capacity.size, dtype=bool)
    wanted[a_res] = True
    flows = np.flatnonzero(g.kind == FLOW)
    f_row, f_res, f_weight = network.binding_pairs(g.route[flows])
    on = wanted[f_res]
    f_row, f_res = f_row[on], f_res[on]
    f_weight = None if f_weight is None else f_weight[on]

    def rows(tasks: np.ndarray, row: np.ndarray, weight: np.ndarray | None) -> tuple[np.ndarray, ...]:
        # while each moves (after its route's latency, until it ends), at its alone rate
        routes = g.route[tasks]
        lo = (ex.start[tasks] + network.route_latency(routes))[row]
        load = network.alone_rate(routes)[row] * (1.0 if weight is None else weight)
        return lo, ex.end[tasks][row], load

    a_lo, a_hi, a_load = rows(apart, a_row, a_weight)
    f_lo, f_hi, f_load = rows(flows, f_row, f_weight)
    over = _overloaded(np.concatenate([a_res, f_res]), np.concatenate([a_lo, f_lo]), np.concatenate([a_hi, f_hi]),
                       np.concatenate([a_load, f_load]), network.capacity)
    bad_row = _meets(a_res, a_lo, a_hi, *over)
    if not bad_row.any():
        return None
    p = timeline.cluster.ranks
    # whose the resource each met on is: the rank whose compute it is (else both of its ranks)
    rank_of_resource = np.full(network.capacity.size, -1, dtype=np.int64)
    rank_of_resource[timeline.cluster.compute_resource] = np.arange(p)
    bad_task, bad_rank = apart[a_row[bad_row]], rank_of_resource[a_res[bad_row]]
    longer = {k: (head, flow_steps.copy()) for k, (head, flow_steps) in heads.items()}
    for k, span in enumerate(timeline.spans):
        lo_id, hi_id = span.transfers
        mine = (bad_task >= lo_id) & (bad_task < hi_id)
        if not mine.any() or k not in longer:
            continue
        head, flow_steps = longer[k]
        for task, rank in set(zip(bad_task[mine].tolist(), bad_rank[mine].tolist())):
            # its ranks: the one whose compute it met, else its owner and those of the steps it
            # ends (its ends' "step done"); their transfers are flows a step past it
            step = int(g.detail[task])
            for r in ({rank} if rank >= 0 else {int(g.rank[task]), *_successor_ranks(g, task)}):
                if 0 <= r < p:
                    flow_steps[r] = min(max(int(flow_steps[r]), step + 2), head)
    return longer


def _successor_ranks(g: FrozenGraph, task: int) -> list[int]:
    lo, hi = int(g.succ_ptr[task]), int(g.succ_ptr[task + 1])
    return g.rank[g.succ[lo:hi]].tolist()


def _meets(res: np.ndarray, lo: np.ndarray, hi: np.ndarray, o_res: np.ndarray, o_lo: np.ndarray,
           o_hi: np.ndarray) -> np.ndarray:
    """Per row (resource, lo, hi), whether it overlaps one of the `o_*` intervals on its
    resource (which do not overlap one another)."""
    if not res.size or not o_res.size:
        return np.zeros(res.size, dtype=bool)
    span = float(max(hi.max(), o_hi.max(), 0.0)) - float(min(lo.min(), o_lo.min(), 0.0)) + 1.0
    order = np.lexsort((o_lo, o_res))
    o_res, o_lo, o_hi = o_res[order], o_lo[order] + o_res[order] * span, o_hi[order] + o_res[order] * span
    at = np.searchsorted(o_lo, hi + res * span, side="left") - 1
    found = at >= 0
    at = np.maximum(at, 0)
    return found & (o_res[at] == res) & (o_hi[at] > lo + res * span) & (hi > lo)


def _overloaded(res: np.ndarray, lo: np.ndarray, hi: np.ndarray, load: np.ndarray,
                capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals (resource, lo, hi) in which the rows moving on a resource together, at
    their loads, exceed its capacity."""
    moving = hi > lo
    n = int(moving.sum())
    r = np.concatenate([res[moving], res[moving]])
    t = np.concatenate([lo[moving], hi[moving]])
    delta = np.concatenate([load[moving], -load[moving]])
    ending = np.concatenate([np.zeros(n, dtype=bool), np.ones(n, dtype=bool)])
    # by resource, then time, ends before starts at one instant (touching is not overlapping)
    order = np.lexsort((~ending, t, r))
    r, t, delta = r[order], t[order], delta[order]
    total = np.cumsum(delta)
    first = np.r_[True, r[1:] != r[:-1]]
    began = np.maximum.accumulate(np.where(first, np.arange(r.size), 0))
    carried = total - np.r_[0.0, total][began]  # each resource's own running sum, after each event
    # between an event and the next one of the same resource
    inside = np.r_[r[1:] == r[:-1], False]
    over = inside & (carried > capacity[r] * (1 + _CAPACITY_RTOL))
    at = np.flatnonzero(over)
    return r[at], t[at], t[at + 1]


# loads of transfers timed alone count as fitting a resource's capacity to this relative
# precision (two at half its capacity each fill it exactly, up to rounding)
_CAPACITY_RTOL = 1e-9


def _flows_on_pools(graph: FrozenGraph, cluster: Cluster) -> bool:
    """Whether a flow of the run crosses a host core pool or a loader thread that pooled
    input pipelines use (they were timed as if they had them to themselves)."""
    flows = np.flatnonzero(graph.kind == FLOW)
    if not flows.size:
        return False
    network = cluster.network
    wanted = np.zeros(network.capacity.size, dtype=bool)
    wanted[network.route_pairs(cluster.loader_route)[1]] = True
    return bool(network.route_pairs_on(graph.route[flows], wanted)[0].size)


def _simulate(cluster_factory, workload: Workload, phases: StepPhases | None, point: RunPoint,
              gamma_s_per_byte: float, keep_transfers: int, uncontended_min_transfers: int | None,
              alone: bool, pooled: bool = False, heads: Heads | None = None, *,
              nccl_states: dict, flow_phases: frozenset[str] = frozenset()) -> RunTimeline | None:
    env = simpy.Environment()
    cluster: Cluster = cluster_factory(env)
    graph = TaskGraph()
    element_bytes = bytes_per_gradient_element(point.options.gradient_dtype)
    comm = Communicator.for_options(cluster, graph, point.algorithm, point.cost_model, point.options,
                                    gamma_s_per_byte=gamma_s_per_byte, element_bytes=element_bytes,
                                    uncontended_min_transfers=uncontended_min_transfers,
                                    keep_transfers=keep_transfers, head_steps=dict(heads or {}),
                                    nccl_states=nccl_states)
    builder = StepBuilder(cluster, graph, comm, point, alone, pooled, flow_phases)
    after = np.full(cluster.ranks, -1, dtype=np.int64)
    step_ends = []
    if isinstance(workload, AllreduceWorkload):
        grad_bytes = float(workload.nbytes)
        for _ in range(point.steps):
            after = comm.allreduce(after, grad_bytes, "all-reduce") if cluster.ranks > 1 else builder.join(
                after, label="all-reduce (one rank)")
            step_ends.append(after)
    else:
        assert phases is not None
        grad_bytes = wire_bytes_per_param(workload, point.options) * gradient_params_per_step(workload, phases,
                                                                                              point.options)
        for step in range(point.steps):
            after = builder.gan_step(after, workload, phases, step)
            if builder.delays_meet:
                return None  # (work timed as alone is sure to meet other work: the caller builds it as flows)
            step_ends.append(after)
    frozen = graph.freeze()
    execution = None
    if not (builder.pooled_groups and _flows_on_pools(frozen, cluster)):
        try:
            execution = execute(frozen, env, cluster.network)
        except GatheredTooLate:
            if not builder.pooled_groups:
                raise
    if execution is None:
        # pooled input phases would share their pools with a flow, or were timed once the
        # clock had passed the start of a flow they released: built again with them as flows
        del frozen, graph, builder, comm
        return _simulate(cluster_factory, workload, phases, point, gamma_s_per_byte, keep_transfers,
                         uncontended_min_transfers, alone, pooled=False, heads=heads, nccl_states=nccl_states,
                         flow_phases=flow_phases)
    return RunTimeline(cluster, frozen, execution, comm.spans, np.array(step_ends), point.steps, grad_bytes,
                       builder.pooled_groups)
