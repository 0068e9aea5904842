"""Predictions from a calibration profile: the fitted alpha/beta/gamma, the world-size-1
phase times and the core-sharing factors become a simulated machine and workload.
Only fitted figures are used, never the measured multi-rank step times (those are what
`validate` compares against)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from gansim.calibration.fit.timings import compute_per_step
from gansim.calibration.profile.phases import COMPUTE_PHASES
from gansim.calibration.profile.schema import NETWORK_PHASES, Profile
from gansim.core import limits
from gansim.core.config import Scenario, TrainingOptions
from gansim.core.errors import UserInputError
from gansim.core.units import MiB
from gansim.prediction.bands import StepBand, calibration_spread, fit_error, record_band, size_band
from gansim.prediction.roofline import measured_device, needs_scaling, scale_phases, target_device
from gansim.runner.point import simulate_point
from gansim.runner.record import RunRecord
from gansim.topology.graph import Topology, load_topology, topology_from_dict
from gansim.training.step import gradient_message_sizes
from gansim.training.workloads import ARCHITECTURES, GanWorkload, StepPhases

# PyTorch DDP's defaults (torch.nn.parallel.DistributedDataParallel: bucket_cap_mb=25 and
# dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB)
DDP_BUCKET_MiB, DDP_FIRST_BUCKET_MiB = 25.0, 1.0
MAX_BANDWIDTH_GBps = 1e6  # the largest link bandwidth a topology takes (core.config.BandwidthGBps)
# steps simulated when ranks vary (predicted_steps): 100 at two ranks, fewer with more ranks
# (each step draws every phase once per rank), at least 5
PREDICTED_STEPS, PREDICTED_DRAWS, MIN_PREDICTED_STEPS = 100, 200, 5


def profile_workload(profile: Profile) -> GanWorkload:
    """The measured GAN: phase times at the calibrated batch, gradient tensors in backward
    order when the model is one gansim knows (for DDP's bucket boundaries)."""
    fit, prov = profile.fit, profile.provenance
    c = compute_phases(profile)
    phases = StepPhases(
        batch=float(prov.batch_size), data_host_s=c.get("data_s", 0.0), sample_bytes=0.0,
        d_forward_s=c["d_forward_s"], d_backward_s=c["d_backward_s"], d_optimizer_s=c["d_optimizer_s"],
        g_forward_s=c["g_forward_s"], g_backward_s=c["g_backward_s"], g_optimizer_s=c["g_optimizer_s"],
    )
    d_bytes, g_bytes = fit.gradient_bytes.discriminator, fit.gradient_bytes.generator
    buckets = fit.gradient_buckets
    if buckets is not None and buckets.discriminator and buckets.generator:
        # the buckets the script's DDP really issued (4-byte elements); predict() keeps each one whole
        d_tensors, g_tensors = tuple(b // 4 for b in buckets.discriminator), tuple(b // 4 for b in buckets.generator)
    elif prov.model in ARCHITECTURES:
        arch = ARCHITECTURES.get(prov.model)()
        d_tensors, g_tensors = tuple(arch.discriminator.param_tensors()), tuple(arch.generator.param_tensors())
    else:
        d_tensors, g_tensors = (d_bytes // 4,), (g_bytes // 4,)
    return GanWorkload(
        name=prov.model, d_params=d_bytes // 4, g_params=g_bytes // 4, bytes_per_param=4,
        d_steps_per_g_step=prov.d_steps, d_param_tensors=d_tensors, g_param_tensors=g_tensors,
        measured=phases, architecture=None,
        d_buffer_bytes=fit.buffer_bytes.discriminator, g_buffer_bytes=fit.buffer_bytes.generator,
        pad_per_rank=True,
    )


def compute_phases(profile: Profile) -> dict[str, float]:
    """Per-phase seconds of one rank alone. The world-size-1 training run is preferred: it
    trains exactly as the multi-rank runs do (DDP's bucket copies and hooks, the timing
    barriers) but has nobody to talk to, so it is compute only; the bare compute-only run
    misses DDP's own cost (on this 2-core VM about 20 % of the step)."""
    alone = profile.measured.phases.get("1")
    if alone and all(name in alone for name in COMPUTE_PHASES):
        phases = {name: alone[name] for name in COMPUTE_PHASES}
        # flat mode: at world size 1 the all-reduce moves nothing, and what its phase took is
        # the copies into and out of the flat buffer, which every world size pays: with backward
        for net in ("d", "g"):
            phases[f"{net}_backward_s"] += alone.get(f"{net}_allreduce_s", 0.0)
        return phases
    return dict(profile.fit.compute)


def shared_cores(profile: Profile) -> int | None:
    """The cores the ranks of a profile's machine compute on together: the host's for CPU
    ranks; None for ranks on GPUs, each of which computes on a GPU of its own however many
    cores its host has (the host that imported a GPU trace is not the one that ran it)."""
    return profile.provenance.cores if profile.provenance.on_cpu else None


def oversubscription(cores: int | None, ranks: int) -> int:
    """How many ranks the busiest core carries when `ranks` single-threaded rank processes
    share `cores` cores: ceil(ranks / cores), not ranks / cores. Linux keeps one run queue per
    CPU and places tasks by count, so 3 ranks on 2 cores run as 2 + 1: the two on one core
    each get half of it, the third a whole core (kernel Documentation/scheduler/
    sched-design-CFS.rst: a run queue per CPU; sched-domains.rst: tasks move between them only
    when that lessens the imbalance, and moving one of 2 + 1 does not). A synchronous step goes
    at the pace of the busiest core: its ranks' compute, and the messages their threads move,
    take this many times as long. bench/oversubscription.py measures the pace on the machine at
    hand, beside ceil(ranks / cores) and the ranks / cores of processor sharing."""
    return 1 if cores is None else max(1, math.ceil(ranks / max(1, cores)))


def sharing_factor(profile: Profile, world_size: int) -> float:
    """How much slower each rank computes when `world_size` ranks compute at once: the
    measured factor when calibrated at that size; beyond, the largest factor measured without
    oversubscription times the busiest core's share (oversubscription)."""
    # A rank never computes faster because others compute too: a measured factor below 1 is
    # noise (on a shared VM the runs at different world sizes see different background load).
    factors = {int(k): max(1.0, v) for k, v in profile.fit.core_sharing.items()}
    if world_size in factors:
        return factors[world_size]
    cores = shared_cores(profile)
    base = max((v for k, v in factors.items() if cores is None or k <= cores), default=1.0)
    return base * oversubscription(cores, world_size)


def profile_topology(profile: Profile, ranks: int, world_size: int | None = None) -> Topology:
    """This machine as the calibration saw it: `ranks` CPU processes on the host's cores (or,
    for a profile of GPU ranks, `ranks` GPUs), rank-to-rank through two hops whose latencies
    add up to alpha and whose bandwidth is 1/beta (so a ring step costs alpha + n beta, the
    fitted closed form). For a
    run of `world_size` ranks that outnumber the cores, both take as many times as long as
    the busiest core carries ranks (oversubscription): the ranks' own threads move the bytes."""
    fit = profile.fit
    slower = 1 if world_size is None else oversubscription(shared_cores(profile), world_size)
    # beta below 1e-15 s/B (a petabyte per second) is as good as free: the topology's ceiling
    bandwidth_GBps = min(1.0 / fit.beta_s_per_byte / 1e9 / slower, MAX_BANDWIDTH_GBps) if fit.beta_s_per_byte > 0 \
        else MAX_BANDWIDTH_GBps
    prov = profile.provenance
    named = {"name": f"calibrated-{prov.host}", "description": f"{prov.device} calibrated {prov.date}"}
    if not prov.on_cpu:
        # GPU ranks: their collectives' kernels run beside their compute, not on a core that
        # computes too; rank to rank through two hops of a switch whose latencies add up to
        # alpha, at 1/beta
        figures = {"model": prov.device, **({"tflops": prov.device_tflops} if prov.device_tflops else {}),
                   **({"memory_bandwidth_GBps": prov.device_memory_bandwidth_GBps}
                      if prov.device_memory_bandwidth_GBps else {})}
        return topology_from_dict({
            **named,
            "nodes": [{"id": f"gpu{i}", "kind": "gpu", **figures} for i in range(ranks)] + [
                {"id": "switch", "kind": "switch"}],
            "links": [{"a": f"gpu{i}", "b": "switch", "kind": "net", "bandwidth_GBps": bandwidth_GBps,
                       "latency_us": fit.alpha_s / 2 * 1e6} for i in range(ranks)],
        }, "profile")
    return topology_from_dict({
        **named,
        "generator": "cpu_host",
        "params": {"ranks": ranks, "cores": profile.provenance.cores, "bandwidth_GBps": bandwidth_GBps,
                   "latency_us": fit.alpha_s / 2 * 1e6 * slower},
    }, "profile")


@dataclass(frozen=True)
class Prediction:
    world_size: int
    step_time_s: float
    speedup: float
    record: RunRecord
    # the roofline that moved the compute to the target device (None: same device)
    compute_scaled_from: dict[str, Any] | None = None
    per_gpu_batch: float | None = 0.0  # None where the profile does not know its batch
    # the range the step time's known errors give (gansim/prediction/bands.py)
    band: StepBand | None = None


def bucket_caps_MiB(profile: Profile) -> tuple[float, float]:
    """DDP's (bucket, first bucket) caps; with measured buckets, a cap no bucket exceeds
    keeps every measured bucket whole (ddp_buckets closes a bucket once it reaches the cap)."""
    buckets = profile.fit.gradient_buckets
    if buckets is not None and buckets.discriminator and buckets.generator:
        smallest = min(b // 4 * 4 for b in (*buckets.discriminator, *buckets.generator)) / MiB
        return smallest, smallest
    return DDP_BUCKET_MiB, DDP_FIRST_BUCKET_MiB


def batch_shape(profile: Profile, per_gpu_batch: float | None, global_batch: float | None,
                world_size: int) -> float:
    """Samples per GPU per optimizer step at `world_size`: the profile's (as calibrated), a
    given per-GPU batch (weak scaling) or a global batch split over the ranks (strong)."""
    if per_gpu_batch is not None and global_batch is not None:
        raise UserInputError("give --per-gpu-batch or --global-batch, not both", field="--global-batch")
    if (per_gpu_batch is not None or global_batch is not None) and not profile.provenance.batch_known:
        raise UserInputError("the profile does not know its per-rank batch (a trace without input shapes), so it "
                             "cannot be moved to another batch; import the trace again with --batch-size N",
                             field="--per-gpu-batch" if per_gpu_batch is not None else "--global-batch")
    if global_batch is not None:
        if global_batch < world_size:
            raise UserInputError(f"a global batch of {global_batch:g} samples cannot be split over {world_size} ranks, "
                                 f"each of which trains on at least one; allowed: {world_size} or more",
                                 field="--global-batch")
        return global_batch / world_size
    return float(per_gpu_batch if per_gpu_batch is not None else profile.provenance.batch_size)


def phases_at_batch(profile: Profile, phases: StepPhases, batch: float) -> StepPhases:
    """The step's phases at `batch` samples per GPU. From timings: the fitted step model (a
    fixed part per round, rounds of at most the table's largest round batch, a part per
    sample) split over the phases in the workload's proportions. From any other profile:
    forward and backward scale with the batch, optimizer updates do not (StepPhases.at_batch)."""
    timings = profile.fit.timings
    if timings is None:
        return phases if batch == phases.batch else phases.at_batch(batch)
    rounds = max(1, math.ceil(batch / timings.round_batch - 1e-9))
    total = compute_per_step(timings.round_fixed_s, timings.per_sample_s, batch, rounds)
    return replace(phases, batch=batch, data_host_s=0.0,
                   **{name: total * timings.phase_shares.get(name, 0.0) for name in NETWORK_PHASES})


def default_topology(profile: Profile, ranks: int) -> Topology:
    """The machine a profile describes: the topology its timings came from, else the
    calibrated host (profile_topology)."""
    if profile.fit.timings is not None:
        return load_topology(profile.fit.timings.topology, source="profile", field="fit.timings.topology")
    return profile_topology(profile, ranks)


def predict(profile: Profile, world_sizes: list[int], topology: Topology | None = None,
            algorithm: str | None = None, measured_tflops: float | None = None,
            measured_memory_bandwidth_GBps: float | None = None, *, per_gpu_batch: float | None = None,
            global_batch: float | None = None, with_bands: bool = False) -> list[Prediction]:
    """Step time and speed-up at each world size. Speed-up is samples per second over one
    GPU's at the same batch shape (weak: w x T(1) / T(w); strong: T(1) / T(w))."""
    for w in world_sizes:
        limits.RANKS.check(w, field="--world-sizes")
    timings = profile.fit.timings
    algorithm = algorithm or (timings.algorithm if timings is not None else "ring")
    workload = profile_workload(profile)
    sizes = sorted(set(world_sizes) | {1})
    given_topology = topology
    if topology is None:
        topology = default_topology(profile, max(sizes))
    if max(sizes) > len(topology.ranks):
        raise UserInputError(f"{max(sizes)} ranks asked but topology {topology.name!r} has {len(topology.ranks)}",
                             field="--world-sizes")
    # the measured sharing factor already contains any oversubscription of the cores
    unshared = without_core_pools(topology)
    phases = workload.measured
    assert phases is not None
    scaled_from = None
    target = target_device(topology) if (given_topology is not None or timings is not None) else None
    if given_topology is not None and needs_scaling(profile, target):
        if target is None:
            raise UserInputError(f"topology {topology.name!r} has CPU ranks but the profile was measured on "
                                 f"{profile.provenance.device!r}; allowed: a topology of GPUs", field="--topology")
        check_movable(profile, target)
        source = measured_device(profile, measured_tflops, measured_memory_bandwidth_GBps)
        phases, scaled_from = scale_phases(phases, profile.measured.phase_costs, source, target)
    options = TrainingOptions(**profile_options(profile))
    # on the profile's own machine the fitted all-reduce cost predicts the communication (and
    # ranks that outnumber its cores are slowed); on a topology, the network model does
    own_machine = given_topology is None and timings is None
    records: dict[int, RunRecord] = {}
    batches: dict[int, float] = {}
    for w in sizes:
        batches[w] = batch_shape(profile, per_gpu_batch, global_batch, w)
        # ranks on GPUs of their own share no cores
        factor = sharing_factor(profile, w) if target is None else 1.0
        step_phases = phases_at_batch(profile, phases, batches[w]).slowed(factor)
        machine = (oversubscribed_host(profile, max(sizes), w) if own_machine else None) or unshared
        records[w] = simulate_profile_point(profile, machine, w, algorithm, options, workload, step_phases)
    t1 = records[1].step_time_s
    predictions = []
    for w in sorted(set(world_sizes)):
        speedup = w * batches[w] / batches[1] * t1 / records[w].step_time_s
        band = None
        if with_bands:
            band = record_band(records[w], speedup, calibration_spread(profile),
                               size_band(gradient_message_sizes(workload, options)),
                               fit_error(profile) if own_machine else None)
        batch = batches[w] if profile.provenance.batch_known else None
        predictions.append(Prediction(w, records[w].step_time_s, speedup, records[w], scaled_from, batch, band))
    return predictions


def check_movable(profile: Profile, target: Any) -> None:
    """A profile from timings carries no FLOPs and bytes per phase, which the roofline needs
    to move its compute to another GPU: one line saying so rather than the calibrator's hint."""
    if profile.fit.timings is not None and not profile.measured.phase_costs:
        raise UserInputError(
            f"the profile was fitted from timings on {profile.provenance.device!r}; a table of timings gives no FLOPs "
            f"and bytes per phase, which the roofline needs to move its compute to {getattr(target, 'name', target)!r}; "
            f"allowed: a topology of {profile.provenance.device} GPUs", field="--topology")


def simulate_profile_point(profile: Profile, topology: Topology, world_size: int, algorithm: str,
                           options: TrainingOptions, workload: GanWorkload, phases: StepPhases) -> RunRecord:
    """One simulated world size of a profile's training with the given phases."""
    scenario = Scenario(name="predict", topology=topology.name, workload="calibrated", gpus=[world_size],
                        algorithms=[algorithm], per_gpu_batch=profile.provenance.batch_size,
                        steps=predicted_steps(world_size) if options.compute_cv > 0 else 5, options=options)
    return simulate_point(scenario, topology, world_size, algorithm, workload=(workload, phases))


def profile_options(profile: Profile) -> dict[str, Any]:
    """The training-loop figures a profile measured: DDP's overlap and buffer broadcast (a
    ddp profile), its bucket caps, the ranks' compute variability, the reduction cost."""
    ddp = profile.provenance.mode == "ddp"
    bucket_MiB, first_bucket_MiB = bucket_caps_MiB(profile)
    options = {"overlap": ddp, "broadcast_buffers": ddp, "bucket_MiB": bucket_MiB,
               "first_bucket_MiB": first_bucket_MiB, "compute_cv": profile.fit.compute_cv,
               "gamma_s_per_byte": profile.fit.gamma_s_per_byte}
    buckets = profile.fit.gradient_buckets
    if not ddp and buckets is not None and buckets.discriminator and buckets.generator:
        # a script's own all-reduces after the backward (one per parameter, or per flat
        # buffer): each measured one issued as it was, one after another (profile_workload
        # makes them the networks' tensors)
        options["gradient_sync"] = "per_variable"
    timings = profile.fit.timings
    if timings is not None:  # the sync the timings' framework ran, and the host work per replica fitted
        options.update(overlap=False, broadcast_buffers=False, gradient_sync=timings.gradient_sync,
                       host_overhead_per_replica_s=timings.host_overhead_per_replica_s)
    return options


def predicted_steps(ranks: int) -> int:
    """Steps simulated when ranks vary: enough that every compute phase is drawn
    PREDICTED_DRAWS times over all ranks (the mean over them settles), at least MIN_STEPS."""
    return max(MIN_PREDICTED_STEPS, min(PREDICTED_STEPS, math.ceil(PREDICTED_DRAWS / ranks)))


def oversubscribed_host(profile: Profile, ranks: int, world_size: int) -> Topology | None:
    """The calibrated host (`ranks` ranks, no core pools) for a run of `world_size` ranks that
    outnumber its cores: its messages slowed as its compute (profile_topology); None where
    they do not outnumber them."""
    if oversubscription(shared_cores(profile), world_size) == 1:
        return None
    return without_core_pools(profile_topology(profile, ranks, world_size))


def without_core_pools(topo: Topology) -> Topology:
    """The same machine with unlimited host cores (sharing is applied as measured)."""
    nodes = dict(topo.nodes)
    for name, spec in nodes.items():
        if spec.kind == "host" and spec.cores is not None:
            nodes[name] = spec.model_copy(update={"cores": None})
        if spec.kind == "cpu" and spec.host is not None:
            nodes[name] = spec.model_copy(update={"host": None})
    return topo.replace(nodes=nodes)

