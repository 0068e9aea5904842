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
alpha and beta say nothing of another machine's links.

This module is what loading any scenario imports; the rest (the calibration profile's models,
the calibrated machine, the roofline: gansim/prediction/profile_on_topology.py) is imported only
for a scenario that names a profile, so that `gansim simulate` of any other starts sooner."""

from __future__ import annotations

from pathlib import Path

from gansim.core.config import Scenario
from gansim.core.errors import UserInputError
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
    # imported here, not above: ~25 ms of start-up that a scenario without a profile never needs
    from gansim.prediction.profile_on_topology import with_profile

    return with_profile(loaded, path, topology_names(scenario), CALIBRATED)
