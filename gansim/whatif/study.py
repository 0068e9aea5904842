"""A scenario with its what-ifs: the hooks through which this layer adds, to what the
runner (gansim.runner.run) loads and simulates, a calibration profile's figures, each
run's memory, whole-run, cost and energy figures, then the scenario's plan and dynamic
allocation."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any, Callable

from gansim.prediction.scenario_profile import apply_profile
from gansim.runner import run
from gansim.runner.partial import PointStore
from gansim.runner.point import TimelineDetails
from gansim.runner.run import ScenarioHooks
from gansim.runner.scenario import LoadedScenario, planned_runs
from gansim.runner.sweep import ScenarioResult
from gansim.whatif.extensions import (
    check_scenario,
    evaluate_run_extensions,
    evaluate_scenario_extensions,
)

# what `gansim simulate` and gansim.simulate run: a scenario and all its what-ifs
WHATIF_HOOKS = ScenarioHooks(prepare=apply_profile, check=check_scenario, extend=evaluate_run_extensions,
                             summary=evaluate_scenario_extensions)


def load_scenario(name_or_path: str) -> LoadedScenario:
    """A shipped scenario name or a YAML path, with every name it refers to checked:
    what the simulation needs and what the what-ifs need (catalog platforms, storage); a
    calibration profile it names replaces its workload's figures."""
    return run.load_scenario(name_or_path, WHATIF_HOOKS)


def count_runs(loaded: LoadedScenario) -> int:
    """How many points a scenario simulates, 1-GPU baselines included."""
    return planned_runs(loaded.scenario)


def run_scenario(loaded: LoadedScenario, executor: str | Executor | None = None,
                 progress: Callable[[int, int], None] | None = None, *, traces: str | None = "auto",
                 details: TimelineDetails | None = None, store: PointStore | None = None,
                 workers: int | None = None) -> ScenarioResult:
    """Every run of the scenario with its what-ifs, then the scenario-level what-ifs
    (gansim.runner.run.run_scenario with this layer's hooks; serially by default)."""
    return run.run_scenario(loaded, executor, workers=workers, progress=progress, traces=traces,
                            hooks=WHATIF_HOOKS, details=details, store=store)


def simulate_scenario(loaded: LoadedScenario, executor: str | Executor | None = None,
                      progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """summary.json's object for a scenario (no per-run details)."""
    return run_scenario(loaded, executor, progress, traces=None).summary
