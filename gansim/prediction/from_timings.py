"""``gansim calibrate --from-timings``: a profile from a table of reported timings.

The table's rows are fitted to the step model of gansim/calibration/fit/timings.py; the
communication each row contains is the network model's (the simulator's collectives for the
workload's gradients on the topology the timings came from, with no compute), never fitted.
The profile it writes predicts with that topology by default; every row's residual is the
difference between what `gansim predict` gives for the row and what the table says.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gansim.calibration.profile.schema import (
    NETWORK_PHASES,
    Fit,
    GradientBuckets,
    GradientBytes,
    Measured,
    Profile,
    Provenance,
    TimingsFigures,
    TimingsRow,
)
from gansim.calibration.fit.timings import FIGURES, TimingRow, TimingsFit, compute_per_step, fit_timings
from gansim.collectives.schedules import ALGORITHMS
from gansim.core.config import GanWorkloadSpec, TrainingOptions, parse
from gansim.core.errors import UserInputError
from gansim.core.files import read_yaml
from gansim.prediction.calibrated import predict, profile_options, profile_workload, simulate_profile_point
from gansim.prediction.roofline import target_device
from gansim.topology.graph import Topology, load_topology
from gansim.training.step import GRADIENT_SYNCS
from gansim.training.workloads import ARCHITECTURES, GanWorkload, StepPhases, resolve_workload

# what the simulator sums a network's gradients with when the table's framework is not said:
# one all-reduce of all of a network's gradients after its backward (TensorFlow's
# MirroredStrategy packs the gradients into few all-reduces; PyTorch's StyleGAN3 loop
# flattens them into one)
DEFAULT_SYNC = "per_phase_flat"


@dataclass(frozen=True)
class TimingsCalibration:
    profile: Profile
    fit: TimingsFit


def load_timings_workload(name_or_path: str, batch: float, topology: Topology) -> tuple[str, GanWorkload, StepPhases]:
    """(name, workload, its phases at `batch` on the topology's GPU): a shipped workload, a
    workload YAML (GanWorkloadSpec; its networks' forward/backward/optimizer seconds may be
    left out: then a network's forward is taken in proportion to its parameters, its backward
    as twice that, only to split the step's compute over the phases), or a scenario YAML's
    `workload:`."""
    if name_or_path in ARCHITECTURES.names():
        workload = resolve_workload(name_or_path, batch)
        assert isinstance(workload, GanWorkload)
        device = target_device(topology)
        phases = workload.phases(batch, device.tflops if device else None, TrainingOptions(), source=name_or_path)
        return name_or_path, workload, phases
    if not name_or_path.endswith((".yaml", ".yml")):
        raise UserInputError(f"{name_or_path!r}; allowed: {', '.join(ARCHITECTURES.names())} or a workload YAML file",
                             field="--workload")
    data = read_yaml(Path(name_or_path))
    if isinstance(data.get("workload"), dict):  # a scenario file: its workload
        data = data["workload"]
    networks = data.get("networks")
    if isinstance(networks, dict):
        for net in networks.values():
            if isinstance(net, dict) and isinstance(net.get("params"), int) and net["params"] > 0:
                net.setdefault("forward_s", net["params"] * 1e-9)
                net.setdefault("backward_s", 2 * net["forward_s"])
                net.setdefault("optimizer_s", 0.0)
    spec: GanWorkloadSpec = parse(GanWorkloadSpec, data, name_or_path)
    workload = resolve_workload(spec, batch, source=name_or_path)
    assert isinstance(workload, GanWorkload) and workload.measured is not None
    return spec.name, workload, workload.measured


def phase_shares(phases: StepPhases) -> dict[str, float]:
    """Each network phase's share of the step's compute (lazy regularisation, run every so
    many steps, counted in the phase of its network's backward)."""
    per_phase = {name: getattr(phases, name) for name in NETWORK_PHASES}
    for reg in phases.regularization:
        per_phase["d_backward_s" if reg.network == "D" else "g_backward_s"] += reg.compute_s / reg.every
    total = sum(per_phase.values())
    if total <= 0:
        raise UserInputError("the workload's phases add up to 0 s; give its networks' forward_s and backward_s",
                             field="--workload")
    return {name: value / total for name, value in per_phase.items()}


def calibrate_from_timings(rows: list[TimingRow], source: str, workload_name: str, topology_name: str,
                           algorithm: str = "nccl", gradient_sync: str = DEFAULT_SYNC,
                           fit_gpus: Optional[set[int]] = None) -> TimingsCalibration:
    """Fit the rows (those at `fit_gpus` when given; the others are held out and predicted)
    and return the profile."""
    GRADIENT_SYNCS.get(gradient_sync, field="--gradient-sync")
    ALGORITHMS.get(algorithm, field="--algorithm")
    topology = load_topology(topology_name, field="--topology")
    fitted = [r for r in rows if fit_gpus is None or r.gpus in fit_gpus]
    if fit_gpus is not None and not fitted:
        raise UserInputError(f"no row at {', '.join(map(str, sorted(fit_gpus)))} GPU(s)", source=source,
                             field="--fit-gpus")
    largest = max(r.gpus for r in rows)
    if largest > len(topology.ranks):
        raise UserInputError(f"a row at {largest} GPUs but topology {topology.name!r} has {len(topology.ranks)}",
                             source=source, field="--topology")
    reference = min(fitted, key=lambda r: (r.gpus, r.per_gpu_batch))
    name, workload, phases = load_timings_workload(workload_name, reference.per_gpu_batch, topology)
    device = target_device(topology)
    shares = phase_shares(phases)
    tensors = {"discriminator": [t * workload.bytes_per_param for t in workload.d_param_tensors],
               "generator": [t * workload.bytes_per_param for t in workload.g_param_tensors]}
    provenance = Provenance(
        host="reported timings", device=device.name if device else "cpu", backend=algorithm, torch="",
        date="", model=name, batch_size=reference.per_gpu_batch, cores=1, mode="flat", source="timings",
        world_sizes=sorted({r.gpus for r in fitted}), d_steps=workload.d_steps_per_g_step,
        device_tflops=device.tflops if device else None,
        device_memory_bandwidth_GBps=device.memory_bandwidth_GBps if device else None)

    def profile_with(figures: dict[str, float], table: list[TimingsRow], repeat_spread: Optional[float],
                     determined: tuple[str, ...], combined: Optional[str]) -> Profile:
        timings = TimingsFigures(
            **figures, determined=list(determined), combined=combined,
            round_batch=max(r.round_batch for r in fitted), topology=str(topology_name), algorithm=algorithm,
            gradient_sync=gradient_sync, phase_shares=shares, repeat_spread=repeat_spread, rows=table)
        compute_s = max(compute_per_step(figures["round_fixed_s"], figures["per_sample_s"],
                                         reference.per_gpu_batch, reference.accumulation), 1e-12)
        return Profile(provenance=provenance, measured=Measured(), fit=Fit(
            alpha_s=0.0, beta_s_per_byte=0.0, gamma_s_per_byte=0.0,
            compute={"data_s": 0.0, **{p: compute_s * shares[p] for p in NETWORK_PHASES}},
            gradient_bytes=GradientBytes(discriminator=workload.d_params * workload.bytes_per_param,
                                         generator=workload.g_params * workload.bytes_per_param),
            gradient_buckets=GradientBuckets(**tensors) if name not in ARCHITECTURES.names() else None,
            timings=timings))

    # the network model's communication per configuration: the profile's own simulation with
    # no compute and no host work
    provisional = profile_with({"round_fixed_s": 0.0, "per_sample_s": 1.0, "host_overhead_per_replica_s": 0.0},
                               [], None, (), None)
    options = TrainingOptions(**{**profile_options(provisional), "host_overhead_per_replica_s": 0.0})
    sim_workload = profile_workload(provisional)
    idle = StepPhases(batch=float(reference.per_gpu_batch), data_host_s=0.0, sample_bytes=0.0,
                      **{p: 0.0 for p in NETWORK_PHASES})
    communication: dict[int, float] = {}
    for gpus in sorted({r.gpus for r in rows}):
        communication[gpus] = 0.0 if gpus == 1 else simulate_profile_point(
            provisional, topology, gpus, algorithm, options, sim_workload, idle).step_time_s
    # the host work per replica is done in each machine's process: a row's step waits for its fullest machine's
    fit = fit_timings(fitted, [communication[r.gpus] for r in fitted], source,
                      [int(topology.machine_ranks(r.gpus).max()) for r in fitted])
    figures = {k: fit.figures[k] for k in FIGURES}
    table = [TimingsRow(gpus=r.gpus, per_gpu_batch=r.per_gpu_batch, accumulation=r.accumulation,
                        step_time_s=r.step_time_s, communication_s=communication[r.gpus],
                        held_out=r not in fitted, label=r.label) for r in rows]
    profile = profile_with(figures, table, fit.repeat_spread, fit.determined, fit.combined)
    # every row's residual from the prediction itself (what `gansim predict` will say)
    predicted: dict[tuple[int, int], float] = {}
    for batch in sorted({r.per_gpu_batch for r in rows}):
        sizes = sorted({r.gpus for r in rows if r.per_gpu_batch == batch})
        for p in predict(profile, sizes, per_gpu_batch=batch):
            predicted[(p.world_size, batch)] = p.step_time_s
    table = [row.model_copy(update={"residual": predicted[(row.gpus, row.per_gpu_batch)] / row.step_time_s - 1})
             for row in table]
    profile = profile_with(figures, table, fit.repeat_spread, fit.determined, fit.combined)
    return TimingsCalibration(profile, fit)


def describe(calibration: TimingsCalibration) -> list[str]:
    """What `calibrate --from-timings` prints: the figures, which the table determined, each
    row's residual."""
    timings = calibration.profile.fit.timings
    assert timings is not None
    fit = calibration.fit
    lines = [f"fitted from {sum(not r.held_out for r in timings.rows)} row(s) on {timings.topology} "
             f"({calibration.profile.provenance.device}, {timings.algorithm}, gradients {timings.gradient_sync}); "
             "communication from the network model, not fitted"]
    for name in FIGURES:
        value = getattr(timings, name)
        how = "determined by the table" if name in fit.determined else \
            f"not determined alone (the table fixes {fit.combined})" if fit.combined else "set"
        lines.append(f"  {name:<28} {value * 1e3:>12.4f} ms   {how}")
    lines.extend(f"  note: {note}" for note in fit.notes)
    spread = "not measured (no repeated configuration)" if timings.repeat_spread is None \
        else f"{timings.repeat_spread:.1%} (slowest / fastest - 1 over repeated configurations)"
    lines.append(f"  run-to-run spread: {spread}")
    lines.append(f"  {'gpus':>4} {'batch':>6} {'rounds':>6} {'measured s':>11} {'comm s':>10} {'predicted s':>11} "
                 f"{'residual':>9}  row")
    for row in timings.rows:
        assert row.residual is not None
        lines.append(f"  {row.gpus:>4} {row.per_gpu_batch:>6} {row.accumulation:>6} {row.step_time_s:>11.5g} "
                     f"{row.communication_s:>10.4g} {row.step_time_s * (1 + row.residual):>11.5g} "
                     f"{row.residual:>+9.2%}  {'held out' if row.held_out else 'fitted'}"
                     f"{' ' + row.label if row.label else ''}")
    return lines
