"""A scenario with its what-ifs: what `gansim simulate` and `gansim.simulate` run. The
runner simulates every point and this layer adds, through the runner's hooks, each run's
memory, whole-run, cost and energy figures, then the scenario's plan and dynamic
allocation."""

from __future__ import annotations

import time
from concurrent.futures import Executor
from typing import Any, Callable

from gansim.prediction.scenario_profile import apply_profile
from gansim.runner.partial import PointStore
from gansim.runner.point import PointHooks, TimelineDetails
from gansim.runner.scenario import LoadedScenario, planned_runs, read_scenario
from gansim.runner.sweep import ScenarioResult, simulate_runs
from gansim.whatif.extensions import (
    check_scenario,
    evaluate_run_extensions,
    evaluate_scenario_extensions,
)


def load_scenario(name_or_path: str) -> LoadedScenario:
    """A shipped scenario name or a YAML path, with every name it refers to checked:
    what the simulation needs and what the what-ifs need (catalog platforms, storage); a
    calibration profile it names replaces its workload's figures."""
    loaded = read_scenario(name_or_path, prepare=apply_profile)
    check_scenario(loaded)
    return loaded


def study_hooks(details: TimelineDetails | None = None) -> PointHooks:
    return PointHooks(extend=evaluate_run_extensions, details=details)


def count_runs(loaded: LoadedScenario) -> int:
    """How many points a scenario simulates, 1-GPU baselines included."""
    return planned_runs(loaded.scenario)


def run_scenario(loaded: LoadedScenario, executor: Executor | None = None,
                 progress: Callable[[int, int], None] | None = None, *, traces: str | None = "auto",
                 details: TimelineDetails | None = None, store: PointStore | None = None) -> ScenarioResult:
    """Every run of the scenario with its what-ifs, then the scenario-level what-ifs.
    `traces`, `details` and `store` as in gansim.runner.sweep.simulate_runs."""
    wall = time.perf_counter()
    result = simulate_runs(loaded, executor, progress, traces=traces, hooks=study_hooks(details), store=store)
    result.summary.update(evaluate_scenario_extensions(loaded))
    result.wall_s = time.perf_counter() - wall
    return result


def simulate_scenario(loaded: LoadedScenario, executor: Executor | None = None,
                      progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """summary.json's object for a scenario (no per-run details)."""
    return run_scenario(loaded, executor, progress, traces=None).summary
