"""gansim: a discrete-event simulator of synchronous data-parallel GAN training on GPU
clusters, calibrated against short real torch.distributed runs.

The Python API::

    import gansim

    loaded = gansim.load_scenario("paper-table3")     # a shipped name or a YAML path
    summary = gansim.simulate(loaded)                  # summary.json's object
    topo = gansim.load_topology("dgx-a100")
    profile = gansim.load_profile("profile.json")      # written by `gansim calibrate`
    for p in gansim.predict(profile, [1, 2, 4], topo): print(p.world_size, p.step_time_s)

Subpackages follow the data flow, each importing only those below it: core (config,
files, errors) -> topology -> network -> collectives -> training -> runner | calibration
-> whatif | prediction -> outputs -> cli. docs/architecture.md has the picture."""

from __future__ import annotations

import importlib
from typing import Any

from gansim.core.version import __version__

# The API by name -> (module, attribute). Loaded on first use (PEP 562), so that the
# `gansim` command, which imports this package before any of its layers, pays only for
# the layers its subcommand uses.
_API = {
    "LoadedScenario": ("gansim.runner.scenario", "LoadedScenario"),
    "Prediction": ("gansim.prediction.calibrated", "Prediction"),
    "Profile": ("gansim.calibration.profile", "Profile"),
    "Topology": ("gansim.topology.graph", "Topology"),
    "UserInputError": ("gansim.core.errors", "UserInputError"),
    "load_profile": ("gansim.calibration.profile", "load_profile"),
    "load_scenario": ("gansim.whatif.study", "load_scenario"),
    "load_topology": ("gansim.topology.graph", "load_topology"),
    "predict": ("gansim.prediction.calibrated", "predict"),
    "run_scenario": ("gansim.whatif.study", "run_scenario"),
    "simulate": ("gansim.whatif.study", "simulate_scenario"),
}
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _API[name]
    except KeyError:
        raise AttributeError(f"module 'gansim' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
