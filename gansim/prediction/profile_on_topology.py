"""What a scenario's `profile:` makes of it (gansim/prediction/scenario_profile.py says what
and why): the profile's measured compute as its workload, moved to the topology's GPU by the
roofline, and the machine the profile was measured on as the `calibrated` topology. Imported
only when a scenario names a profile."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pydantic import ValidationError

from gansim.calibration.profile.schema import Profile, load_profile
from gansim.core.config import ProfiledWorkloadSpec, Scenario, StepPhaseFigures, parse, validation_error
from gansim.core.errors import UserInputError
from gansim.prediction.calibrated import (
    check_movable,
    oversubscribed_host,
    profile_options,
    profile_topology,
    profile_workload,
    sharing_factor,
    without_core_pools,
)
from gansim.prediction.bands import with_scenario_bands
from gansim.prediction.roofline import measured_device, needs_scaling, scale_phases, target_device
from gansim.runner.record import RunRecord
from gansim.runner.scenario import LoadedScenario
from gansim.training.workloads import GanWorkload, resolve_workload


def with_profile(loaded: LoadedScenario, path: Path, topology_names: list[str], calibrated: str) -> LoadedScenario:
    """The scenario with the figures of the profile at `path` in place of its workload's
    (gansim/prediction/scenario_profile.py: apply_profile). `topology_names` are those the
    scenario runs on; `calibrated` is the name of the machine the profile was measured on."""
    scenario = loaded.scenario
    profile = load_profile(path)
    topologies = set(topology_names)
    sharing: dict[int, float] = {}
    if calibrated in topologies:
        if len(topologies) > 1:
            raise UserInputError(f"topology {calibrated!r} (the machine the profile was measured on) cannot be swept "
                                 "with other topologies", source=loaded.source, field="sweep.topology")
        ranks = max(scenario.gpus)
        machine = without_core_pools(profile_topology(profile, ranks))
        # runs of more ranks than cores find their messages slowed as their compute (oversubscription)
        at_ranks = tuple((calibrated, gpus, host) for gpus in sorted(set(scenario.gpus))
                         if (host := oversubscribed_host(profile, ranks, gpus)) is not None)
        loaded = dataclasses.replace(loaded, machines=((calibrated, machine),), machines_at_ranks=at_ranks)
        sharing = {gpus: sharing_factor(profile, gpus) for gpus in sorted(set(scenario.gpus) | {1})}
    data = scenario.model_dump(exclude_none=False)
    try:
        workload = profiled_workload(profile, loaded, str(path), topology_names)
    except ValidationError as err:  # a phase moved to a far slower GPU: beyond the range of a duration
        problem = validation_error(err, str(path))
        raise UserInputError(f"profile {path} on this topology gives {problem.field} out of range: {problem.message}",
                             source=loaded.source, field="profile") from None
    data["workload"] = workload.model_copy(update={"core_sharing": sharing}).model_dump()
    data["options"] = {**profile_options(profile), **scenario.options.model_dump(exclude_unset=True)}
    return dataclasses.replace(loaded, scenario=parse(Scenario, data, loaded.source))


def profiled_workload(profile: Profile, loaded: LoadedScenario, path: str,
                      topology_names: list[str]) -> ProfiledWorkloadSpec:
    workload = profile_workload(profile)
    phases = workload.measured
    assert phases is not None
    batches = set(loaded.scenario.sweep.get("per_gpu_batch", [loaded.scenario.per_gpu_batch]))
    if not profile.provenance.batch_known and batches != {phases.batch}:
        raise UserInputError(f"profile {path} does not know its per-rank batch (a trace without input shapes), so "
                             f"its phases cannot be moved to per_gpu_batch {', '.join(f'{b:g}' for b in sorted(batches))}"
                             "; import the trace again with --batch-size N", source=loaded.source,
                             field="per_gpu_batch")
    targets = {}
    for name in topology_names:
        topology = loaded.topology(loaded.scenario.model_copy(update={"topology": name}))
        targets[topology.name] = target_device(topology)
    devices = set(targets.values())
    if len(devices) > 1:
        raise UserInputError(f"the swept topologies {', '.join(sorted(targets))} have different rank devices; a "
                             "profile's compute is moved to one device, so sweep topologies of one kind",
                             source=loaded.source, field="sweep.topology")
    (target,) = devices
    if needs_scaling(profile, target):
        if target is None:
            raise UserInputError(f"the topology's ranks are CPUs but profile {path} was measured on "
                                 f"{profile.provenance.device!r}; allowed: a topology of GPUs",
                                 source=loaded.source, field="topology")
        check_movable(profile, target)
        try:
            source = measured_device(profile)
        except UserInputError:
            raise UserInputError(
                f"profile {path} was measured on {profile.provenance.device!r}, whose peak FLOP/s and memory "
                "bandwidth gansim does not know, so its compute cannot be moved to the topology's GPU; add its "
                "datasheet figures to the profile as provenance.device_tflops and "
                "provenance.device_memory_bandwidth_GBps", source=loaded.source, field="profile") from None
        phases, _ = scale_phases(phases, profile.measured.phase_costs, source, target)
    assert not phases.regularization  # a profile measures no lazy regularisation phases
    return ProfiledWorkloadSpec(
        name=workload.name, from_profile=path, d_steps_per_g_step=workload.d_steps_per_g_step,
        phases=StepPhaseFigures(**{k: v for k, v in dataclasses.asdict(phases).items() if k != "regularization"}),
        d_param_tensors=list(workload.d_param_tensors), g_param_tensors=list(workload.g_param_tensors),
        d_buffer_bytes=workload.d_buffer_bytes, g_buffer_bytes=workload.g_buffer_bytes,
    )


def with_bands(loaded: LoadedScenario, runs: list[RunRecord]) -> list[RunRecord]:
    """The runs of a scenario run from a profile, each with the band of its step time and speed-up
    (gansim/prediction/bands.py), from its profile's run-to-run spread and the communication
    model's validation error in the size band of its workload's all-reduces."""
    spec = loaded.scenario.workload
    assert isinstance(spec, ProfiledWorkloadSpec)
    workload = resolve_workload(spec, loaded.scenario.reference_batch(), source=loaded.source)
    assert isinstance(workload, GanWorkload)
    return with_scenario_bands(runs, workload, loaded.scenario.options, load_profile(spec.from_profile))
