"""gansim: a discrete-event simulator of synchronous data-parallel GAN training on GPU
clusters, calibrated against short real torch.distributed runs.

The Python API (gansim.api; each function does what its command does and returns a typed
result whose `to_dict()` is the command's JSON)::

    import gansim

    result = gansim.simulate("paper-table3")           # a shipped name, a YAML path or a dict
    for run in result.runs: print(run.gpus, run.algorithm, run.speedup)
    summary = result.to_dict()                         # summary.json's object
    predicted = gansim.predict("profile.json", [1, 2, 4], topology="dgx-a100")
    table = gansim.nccl_tests("dgx-a100", 8, maxbytes="1G")
    report = gansim.validate(published=True)
    made = gansim.calibrate(from_timings="times.csv", workload="paper-mlp-gan",
                            topology="paper-gtx1080ti-pcie", out="profile.json")

Bad input raises gansim.UserInputError with the command's one-line message.

Subpackages follow the data flow, each importing only those below it: core (config,
files, errors) -> topology -> network -> collectives -> training -> runner | calibration
-> whatif | prediction -> outputs -> api -> cli. docs/architecture.md has the picture."""

from __future__ import annotations

import importlib
from typing import Any

from gansim.core.version import __version__

# The API by name -> (module, attribute). Loaded on first use (PEP 562), so that the
# `gansim` command, which imports this package before any of its layers, pays only for
# the layers its subcommand uses.
_API = {
    "LoadedScenario": ("gansim.runner.scenario", "LoadedScenario"),
    "NcclTestsResult": ("gansim.api", "NcclTestsResult"),
    "Prediction": ("gansim.prediction.calibrated", "Prediction"),
    "PredictionResult": ("gansim.api", "PredictionResult"),
    "Profile": ("gansim.calibration.profile.schema", "Profile"),
    "Run": ("gansim.api", "Run"),
    "SimulationResult": ("gansim.api", "SimulationResult"),
    "Topology": ("gansim.topology.graph", "Topology"),
    "UserInputError": ("gansim.core.errors", "UserInputError"),
    "ValidationResult": ("gansim.api", "ValidationResult"),
    "CalibrationResult": ("gansim.api.calibration", "CalibrationResult"),
    "calibrate": ("gansim.api.calibration", "calibrate"),
    "load_profile": ("gansim.calibration.profile.schema", "load_profile"),
    "load_scenario": ("gansim.whatif.study", "load_scenario"),
    "load_topology": ("gansim.topology.graph", "load_topology"),
    "nccl_tests": ("gansim.api", "nccl_tests"),
    "predict": ("gansim.api", "predict"),
    "run_scenario": ("gansim.whatif.study", "run_scenario"),
    "simulate": ("gansim.api", "simulate"),
    "validate": ("gansim.api", "validate"),
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
