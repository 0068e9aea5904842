"""A scenario's `profile:`: the calibration profile's measured compute replaces the
workload's figures, so that `gansim simulate` runs the user's own training step on the
scenario's topology (every what-if included), as `gansim predict --topology` does for one
machine.

What the profile gives: each phase's time at the calibrated batch (scaled with the batch as
inline figures are), its gradient tensors (the DDP buckets the script really issued, or the
model's tensors), its buffers, its D steps per G step; and the training-loop figures the
scenario leaves unset: DDP overlap and buffer broadcast (a `ddp` profile), the bucket caps,
the per-rank compute variability and the reduction cost per byte. A profile measured on
another device is moved to the topology's GPU by the roofline (gansim/prediction/roofline.py).
The link figures come from the profile only on the machine it was measured on: `topology:
calibrated` is that machine as `gansim predict --profile` simulates it (ranks on its cores,
rank to rank at the fitted alpha and beta, each rank's compute slowed by the measured core
sharing at that rank count). On any other topology the links are the topology's: the fitted
alpha and beta say nothing of another machine's links."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pydantic import ValidationError

from gansim.calibration.profile import Profile, load_profile
from gansim.core.config import ProfiledWorkloadSpec, Scenario, StepPhaseFigures, parse, validation_error
from gansim.core.errors import UserInputError
from gansim.prediction.calibrated import (
    profile_options,
    profile_topology,
    profile_workload,
    sharing_factor,
    without_core_pools,
)
from gansim.prediction.roofline import measured_device, needs_scaling, scale_phases, target_device
from gansim.runner.scenario import LoadedScenario


# the `topology` of a scenario that runs on the machine its profile was measured on
CALIBRATED = "calibrated"


def topology_names(scenario: Scenario) -> list[str]:
    """Every topology the scenario runs on (its sweep axis, or the one it names), read off
    the axis rather than from the sweep's combinations, which may number millions before
    the run limit refuses them."""
    return list(scenario.sweep.get("topology", [scenario.topology]))


def profile_path(loaded: LoadedScenario) -> Path:
    """The profile file a scenario names, relative to the scenario's folder."""
    assert loaded.scenario.profile is not None
    path = Path(loaded.scenario.profile).expanduser()
    if not path.is_absolute() and loaded.base_dir:
        path = Path(loaded.base_dir) / path
    if not path.is_file():
        raise UserInputError(f"profile file {str(path)!r} does not exist (a path relative to the scenario's "
                             "folder, or absolute)", source=loaded.source, field="profile")
    return path


def apply_profile(loaded: LoadedScenario) -> LoadedScenario:
    """The scenario with its profile's figures in place of its workload's (unchanged when it
    names no profile)."""
    scenario = loaded.scenario
    if scenario.profile is None:
        if CALIBRATED in topology_names(scenario):
            raise UserInputError(f"topology {CALIBRATED!r} is the machine a calibration profile was measured on; "
                                 "name the profile with profile: PATH", source=loaded.source, field="topology")
        return loaded
    if "workload" in scenario.sweep:
        raise UserInputError("a scenario with a profile simulates the profile's workload; remove the workload "
                             "sweep axis or the profile", source=loaded.source, field="sweep.workload")
    path = profile_path(loaded)
    profile = load_profile(path)
    topologies = set(topology_names(scenario))
    sharing: dict[int, float] = {}
    if CALIBRATED in topologies:
        if len(topologies) > 1:
            raise UserInputError(f"topology {CALIBRATED!r} (the machine the profile was measured on) cannot be swept "
                                 "with other topologies", source=loaded.source, field="sweep.topology")
        machine = without_core_pools(profile_topology(profile, max(scenario.gpus)))
        loaded = dataclasses.replace(loaded, machines=((CALIBRATED, machine),))
        sharing = {gpus: sharing_factor(profile, gpus) for gpus in sorted(set(scenario.gpus) | {1})}
    data = scenario.model_dump(exclude_none=False)
    try:
        workload = profiled_workload(profile, loaded, str(path))
    except ValidationError as err:  # a phase moved to a far slower GPU: beyond the range of a duration
        problem = validation_error(err, str(path))
        raise UserInputError(f"profile {path} on this topology gives {problem.field} out of range: {problem.message}",
                             source=loaded.source, field="profile") from None
    data["workload"] = workload.model_copy(update={"core_sharing": sharing}).model_dump()
    data["options"] = {**profile_options(profile), **scenario.options.model_dump(exclude_unset=True)}
    return dataclasses.replace(loaded, scenario=parse(Scenario, data, loaded.source))


def profiled_workload(profile: Profile, loaded: LoadedScenario, path: str) -> ProfiledWorkloadSpec:
    workload = profile_workload(profile)
    phases = workload.measured
    assert phases is not None
    targets = {}
    for name in topology_names(loaded.scenario):
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
        try:
            source = measured_device(profile)
        except UserInputError:
            raise UserInputError(
                f"profile {path} was measured on {profile.provenance.device!r}, whose peak FLOP/s and memory "
                "bandwidth gansim does not know, so its compute cannot be moved to the topology's GPU; add its "
                "datasheet figures to the profile as provenance.device_tflops and "
                "provenance.device_memory_bandwidth_GBps", source=loaded.source, field="profile") from None
        phases, _ = scale_phases(phases, profile.measured.phase_costs, source, target)
    return ProfiledWorkloadSpec(
        name=workload.name, from_profile=path, d_steps_per_g_step=workload.d_steps_per_g_step,
        phases=StepPhaseFigures(**dataclasses.asdict(phases)),
        d_param_tensors=list(workload.d_param_tensors), g_param_tensors=list(workload.g_param_tensors),
        d_buffer_bytes=workload.d_buffer_bytes, g_buffer_bytes=workload.g_buffer_bytes,
    )
