"""Predictions from a calibration profile: the fitted alpha/beta/gamma, the world-size-1
phase times and the core-sharing factors become a simulated machine and workload.
Only fitted figures are used, never the measured multi-rank step times (those are what
`validate` compares against)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gansim.calibration.phases import COMPUTE_PHASES
from gansim.calibration.profile import Profile
from gansim.core import limits
from gansim.core.config import Scenario, TrainingOptions
from gansim.core.errors import UserInputError
from gansim.core.units import MiB
from gansim.prediction.roofline import measured_device, needs_scaling, scale_phases, target_device
from gansim.runner.point import simulate_point
from gansim.topology.graph import Topology, topology_from_dict
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


def sharing_factor(profile: Profile, world_size: int) -> float:
    """How much slower each rank computes when `world_size` ranks compute at once: the
    measured factor when calibrated at that size; beyond, processor sharing of the cores
    times the largest factor measured without oversubscription."""
    # A rank never computes faster because others compute too: a measured factor below 1 is
    # noise (on a shared VM the runs at different world sizes see different background load).
    factors = {int(k): max(1.0, v) for k, v in profile.fit.core_sharing.items()}
    if world_size in factors:
        return factors[world_size]
    cores = profile.provenance.cores
    base = max((v for k, v in factors.items() if k <= cores), default=1.0)
    return base * max(1.0, world_size / cores)


def profile_topology(profile: Profile, ranks: int) -> Topology:
    """This machine as the calibration saw it: `ranks` CPU processes on the host's cores,
    rank-to-rank through two loopback hops whose latencies add up to alpha and whose
    bandwidth is 1/beta (so a ring step costs alpha + n beta, the fitted closed form)."""
    fit = profile.fit
    # beta below 1e-15 s/B (a petabyte per second) is as good as free: the topology's ceiling
    bandwidth_GBps = min(1.0 / fit.beta_s_per_byte / 1e9, MAX_BANDWIDTH_GBps) if fit.beta_s_per_byte > 0 \
        else MAX_BANDWIDTH_GBps
    return topology_from_dict({
        "name": f"calibrated-{profile.provenance.host}",
        "description": f"{profile.provenance.device} calibrated {profile.provenance.date}",
        "generator": "cpu_host",
        "params": {"ranks": ranks, "cores": profile.provenance.cores, "bandwidth_GBps": bandwidth_GBps,
                   "latency_us": fit.alpha_s / 2 * 1e6},
    }, "profile")


@dataclass(frozen=True)
class Prediction:
    world_size: int
    step_time_s: float
    speedup: float
    record: dict[str, Any]
    # the roofline that moved the compute to the target device (None: same device)
    compute_scaled_from: dict[str, Any] | None = None


def bucket_caps_MiB(profile: Profile) -> tuple[float, float]:
    """DDP's (bucket, first bucket) caps; with measured buckets, a cap no bucket exceeds
    keeps every measured bucket whole (ddp_buckets closes a bucket once it reaches the cap)."""
    buckets = profile.fit.gradient_buckets
    if buckets is not None and buckets.discriminator and buckets.generator:
        smallest = min(b // 4 * 4 for b in (*buckets.discriminator, *buckets.generator)) / MiB
        return smallest, smallest
    return DDP_BUCKET_MiB, DDP_FIRST_BUCKET_MiB


def predict(profile: Profile, world_sizes: list[int], topology: Topology | None = None,
            algorithm: str = "ring", measured_tflops: float | None = None,
            measured_memory_bandwidth_GBps: float | None = None) -> list[Prediction]:
    for w in world_sizes:
        limits.RANKS.check(w, field="--world-sizes")
    workload = profile_workload(profile)
    sizes = sorted(set(world_sizes) | {1})
    topo = topology if topology is not None else profile_topology(profile, max(sizes))
    if max(sizes) > len(topo.ranks):
        raise UserInputError(f"{max(sizes)} ranks asked but topology {topo.name!r} has {len(topo.ranks)}",
                             field="--world-sizes")
    # the measured sharing factor already contains any oversubscription of the cores
    unshared = without_core_pools(topo)
    phases = workload.measured
    assert phases is not None
    scaled_from = None
    target = target_device(topology) if topology is not None else None
    if topology is not None and needs_scaling(profile, target):
        if target is None:
            raise UserInputError(f"topology {topology.name!r} has CPU ranks but the profile was measured on "
                                 f"{profile.provenance.device!r}; allowed: a topology of GPUs", field="--topology")
        source = measured_device(profile, measured_tflops, measured_memory_bandwidth_GBps)
        phases, scaled_from = scale_phases(phases, profile.measured.phase_costs, source, target)
    options = TrainingOptions(**profile_options(profile))
    records: dict[int, dict[str, Any]] = {}
    for w in sizes:
        # ranks on GPUs of their own share no cores
        factor = sharing_factor(profile, w) if target is None else 1.0
        scenario = Scenario(name="predict", topology=topo.name, workload="calibrated", gpus=[w],
                            algorithms=[algorithm], per_gpu_batch=profile.provenance.batch_size,
                            steps=predicted_steps(w) if profile.fit.compute_cv > 0 else 5, options=options)
        records[w] = simulate_point(scenario, unshared, w, algorithm,
                                    workload=(workload, phases.slowed(factor)))
    t1 = records[1]["step_time_s"]
    return [Prediction(w, records[w]["step_time_s"], w * t1 / records[w]["step_time_s"], records[w], scaled_from)
            for w in sorted(set(world_sizes))]


def profile_options(profile: Profile) -> dict[str, Any]:
    """The training-loop figures a profile measured: DDP's overlap and buffer broadcast (a
    ddp profile), its bucket caps, the ranks' compute variability, the reduction cost."""
    ddp = profile.provenance.mode == "ddp"
    bucket_MiB, first_bucket_MiB = bucket_caps_MiB(profile)
    return {"overlap": ddp, "broadcast_buffers": ddp, "bucket_MiB": bucket_MiB, "first_bucket_MiB": first_bucket_MiB,
            "compute_cv": profile.fit.compute_cv, "gamma_s_per_byte": profile.fit.gamma_s_per_byte}


def predicted_steps(ranks: int) -> int:
    """Steps simulated when ranks vary: enough that every compute phase is drawn
    PREDICTED_DRAWS times over all ranks (the mean over them settles), at least MIN_STEPS."""
    return max(MIN_PREDICTED_STEPS, min(PREDICTED_STEPS, math.ceil(PREDICTED_DRAWS / ranks)))


def without_core_pools(topo: Topology) -> Topology:
    """The same machine with unlimited host cores (sharing is applied as measured)."""
    nodes = dict(topo.nodes)
    for name, spec in nodes.items():
        if spec.kind == "host" and spec.cores is not None:
            nodes[name] = spec.model_copy(update={"cores": None})
        if spec.kind == "cpu" and spec.host is not None:
            nodes[name] = spec.model_copy(update={"host": None})
    return topo.replace(nodes=nodes)

