"""The run path in one place: load a scenario, then simulate all its points on an executor
(serially, a local process pool or a Dask cluster), resuming from a partial state where one
is given. The layers above add their work through `ScenarioHooks` (the what-ifs: a
calibration profile's figures when loading, extra checks, fields per run and per
scenario); this layer imports none of them."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Callable

from gansim.runner.executors import make_executor
from gansim.runner.partial import PointStore
from gansim.runner.point import ExtendRecord, PointHooks, TimelineDetails
from gansim.runner.scenario import LoadedScenario, planned_baselines, planned_runs, read_scenario, scenario_from_data
from gansim.runner.sweep import ScenarioResult, simulate_runs

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ScenarioHooks:
    """What the layers above add to a scenario: `prepare` changes it once read, before
    the names it refers to are checked; `check` checks what they need beyond that;
    `extend` returns extra fields for each run's record (run in the worker, so a
    module-level function); `summary` returns extra fields for the whole summary."""

    prepare: Callable[[LoadedScenario], LoadedScenario] | None = None
    check: Callable[[LoadedScenario], None] | None = None
    extend: ExtendRecord | None = None
    summary: Callable[[LoadedScenario], dict[str, Any]] | None = None


# what a scenario given as a mapping is called in errors and in summary.json's `source`
MAPPING_SOURCE = "<dict>"


def load_scenario(scenario: str | os.PathLike[str] | Mapping[str, Any],
                  hooks: ScenarioHooks = ScenarioHooks()) -> LoadedScenario:
    """A shipped scenario name, a YAML path or the mapping such a file holds (its relative
    paths taken from the current folder), validated, with every name it refers to checked
    (by this layer and by `hooks.check`)."""
    if isinstance(scenario, Mapping):
        loaded = scenario_from_data(dict(scenario), MAPPING_SOURCE, os.getcwd(), hooks.prepare)
    else:
        loaded = read_scenario(os.fspath(scenario), prepare=hooks.prepare)
    if hooks.check is not None:
        hooks.check(loaded)
    return loaded


def run_scenario(loaded: LoadedScenario, executor: str | Executor | None = "local", *, workers: int | None = None,
                 progress: Progress | None = None, traces: str | None = "auto",
                 hooks: ScenarioHooks = ScenarioHooks(), details: TimelineDetails | None = None,
                 store: PointStore | None = None) -> ScenarioResult:
    """Every run of the scenario, then the scenario-level fields of `hooks.summary`.

    `executor` is where the points run: "local" (a process pool of `workers` processes,
    default one per core; serial where one suffices), "dask://HOST:PORT", None (serially,
    in this process) or any concurrent.futures executor (left open). `traces`, `details`
    and `store` as in gansim.runner.sweep.simulate_runs."""
    wall = time.perf_counter()
    close: Callable[[], None] = lambda: None  # noqa: E731
    if isinstance(executor, str):
        executor, close = make_executor(executor, workers, planned_runs(loaded.scenario),
                                        planned_baselines(loaded.scenario))
    try:
        result = simulate_runs(loaded, executor, progress, traces=traces,
                               hooks=PointHooks(extend=hooks.extend, details=details), store=store)
    finally:
        close()
    if hooks.summary is not None:
        result.extensions.update(hooks.summary(loaded))
    result.wall_s = time.perf_counter() - wall
    return result
