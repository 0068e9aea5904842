"""A whole scenario: every run point (gpus x algorithms x sweep combinations, plus the
1-GPU baselines), simulated serially or in parallel on any concurrent.futures executor,
and assembled into the summary with speed-ups."""

from __future__ import annotations

import time
from concurrent.futures import Executor, Future, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from gansim.core.errors import UserInputError
from gansim.core.version import __version__
from gansim.runner.partial import PointResult, PointStore, point_keys
from gansim.runner.point import PointHooks, RunRequest, run_one_detailed
from gansim.runner.record import RunRecord
from gansim.runner.scenario import LoadedScenario
from gansim.topology.graph import Topology

# Reports draw a Gantt (and every run gets a trace) for at most this many featured runs
# when a sweep is large: per algorithm, its largest GPU count, in the first few sweep
# combinations.
FEATURED_COMBINATIONS = 4
AUTO_TRACE_LIMIT = 100
TRACE_POLICIES = ("auto", "all", "featured", "none")


@dataclass
class ScenarioResult:
    """A simulated scenario: its runs' records, the scenario's own fields, and per run the
    details that came back from its worker (link utilisation; Gantt and trace where asked).
    `summary` is summary.json's object."""

    header: dict[str, Any]  # summary.json's fields before `runs`: scenario, gansim_version, source, ...
    runs: list[RunRecord]
    details: list[dict[str, Any]]
    featured: list[int]  # indices into runs the report draws a Gantt for
    cpu_s: float = 0.0  # CPU seconds the workers spent simulating, the runs simulated by this call
    wall_s: float = 0.0
    topologies: dict[str, Topology] = field(default_factory=dict)  # by name, as in the files (unscaled)
    simulated: int = 0  # points this call simulated, 1-GPU baselines included
    resumed: int = 0  # points taken from the partial state an earlier, interrupted call kept
    # What the layers above add to the whole scenario (the what-ifs' plan, elastic), after
    # `runs`; each its own JSON document, open-ended like RunRecord.extensions.
    extensions: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, Any]:
        """summary.json's object (a new one on every call)."""
        return {**self.header, "runs": [run.to_dict() for run in self.runs], **self.extensions}


def run_requests(loaded: LoadedScenario, hooks: PointHooks = PointHooks()) -> list[RunRequest]:
    s = loaded.scenario
    requests = []
    for overrides, scenario in loaded.combinations():
        frozen = tuple(overrides.items())
        for algorithm in s.algorithms:
            for g in scenario.gpus:
                requests.append(RunRequest(loaded, frozen, g, algorithm, hooks=hooks))
        if 1 not in scenario.gpus:  # the baseline every speed-up is measured against
            requests.append(RunRequest(loaded, frozen, 1, s.algorithms[0], hooks=hooks, baseline_only=True))
    return requests


def featured_requests(loaded: LoadedScenario, requests: list[RunRequest]) -> set[int]:
    """Per algorithm, its largest GPU count, for the first FEATURED_COMBINATIONS sweep
    combinations (indices into `requests`)."""
    combos: list[tuple] = []
    best: dict[tuple, int] = {}
    for i, req in enumerate(requests):
        if req.overrides not in combos:
            combos.append(req.overrides)
        if combos.index(req.overrides) >= FEATURED_COMBINATIONS:
            continue
        if req.baseline_only:
            continue
        key = (req.overrides, req.algorithm)
        if key not in best or requests[best[key]].gpus < req.gpus:
            best[key] = i
    return set(best.values())


def simulate_runs(loaded: LoadedScenario, executor: Executor | None = None,
                  progress: Callable[[int, int], None] | None = None, *, traces: str | None = "auto",
                  hooks: PointHooks = PointHooks(), store: PointStore | None = None) -> ScenarioResult:
    """Simulate every run of the scenario (in parallel through `executor`, any
    concurrent.futures executor) and assemble the summary. `traces` decides which runs
    come back with a Chrome trace (made by `hooks.details`): "all", "featured" (see
    featured_requests), "auto" (all up to AUTO_TRACE_LIMIT runs, else featured), "none";
    every run of the summary comes back with its links' utilisation, the featured ones with
    a Gantt, and the 1-GPU baselines added for the speed-ups with nothing. None: no
    details at all. Each worker computes only the details its request asks for.

    With `store`, every point is kept there as it finishes, and a point already kept (by an
    earlier call that was interrupted) is taken from it rather than simulated again."""
    if traces is not None and traces not in TRACE_POLICIES:
        raise UserInputError(f"unknown trace policy {traces!r}; allowed: {', '.join(TRACE_POLICIES)}",
                             field="--traces")
    wall = time.perf_counter()
    requests = run_requests(loaded, hooks)
    featured = featured_requests(loaded, requests) if traces is not None else set()
    if traces is not None:
        wanted_all = traces == "all" or (traces == "auto" and len(requests) <= AUTO_TRACE_LIMIT)
        requests = [replace(r, detail=_detail(r, i in featured, wanted_all, traces))
                    for i, r in enumerate(requests)]
    results, simulated = _map(executor, requests, progress, store, loaded)
    records = [rec for rec, _ in results]
    baseline: dict[tuple, RunRecord] = {}
    for req, rec in zip(requests, records):
        if req.gpus == 1:
            baseline.setdefault(req.overrides, rec)
    runs: list[RunRecord] = []
    run_details: list[dict[str, Any]] = []
    run_featured: list[int] = []
    wanted = {(r.overrides, r.gpus, r.algorithm) for r in requests if not r.baseline_only}
    scaling = {overrides: scenario.scaling for overrides, scenario in
               ((tuple(o.items()), sc) for o, sc in loaded.combinations())}
    seen = set()
    for i, (req, rec) in enumerate(zip(requests, records)):
        key = (req.overrides, req.gpus, req.algorithm)
        if key not in wanted or key in seen:
            continue
        seen.add(key)
        base = baseline[req.overrides]
        if rec.step_time_s and base.step_time_s:
            ratio = base.step_time_s / rec.step_time_s
            speedup: float | None = ratio * req.gpus if scaling[req.overrides] == "weak" else ratio
        else:
            speedup = None  # out of memory here or at the 1-GPU baseline: no speed-up to give
        if i in featured:
            run_featured.append(len(runs))
        runs.append(replace(rec, speedup=speedup, efficiency=speedup / req.gpus if speedup is not None else None))
        run_details.append(results[i][1])
    s = loaded.scenario
    header = {
        "scenario": s.name,
        "gansim_version": __version__,
        "source": Path(loaded.source).name,
        "sweep_axes": list(s.sweep),
        "reference": s.reference.model_dump() if s.reference else None,
    }
    topologies: dict[str, Topology] = {}
    if traces is not None:
        for overrides in dict.fromkeys(r.overrides for r in requests):
            topo = loaded.topology(loaded.with_overrides(dict(overrides)))
            topologies.setdefault(topo.name, topo)
    return ScenarioResult(header, runs, run_details, run_featured,
                          cpu_s=sum(results[i][1].get("cpu_s", 0.0) for i in simulated),
                          wall_s=time.perf_counter() - wall, topologies=topologies,
                          simulated=len(simulated), resumed=len(requests) - len(simulated))


def _detail(request: RunRequest, featured: bool, wanted_all: bool, traces: str) -> str:
    if request.baseline_only:
        return "none"  # only its step time is used
    if traces != "none" and (wanted_all or featured):
        return "full"
    return "gantt" if featured else "links"


def _map(executor: Executor | None, requests: list[RunRequest], progress: Callable[[int, int], None] | None,
         store: PointStore | None, loaded: LoadedScenario) -> tuple[list[PointResult], list[int]]:
    """Every request's (record, details), in request order, and the indices of those
    simulated here (the others came from `store`); progress counts the simulated ones as
    they complete, in whatever order they come, and each is kept in `store` before it is
    counted."""
    results: list[Any] = [None] * len(requests)
    keys = point_keys(loaded, requests) if store is not None else []
    if store is not None:
        for i, key in enumerate(keys):
            results[i] = store.get(key)
    missing = [i for i, result in enumerate(results) if result is None]
    total = len(missing)

    def finished(i: int, result: PointResult, done: int) -> None:
        results[i] = result
        if store is not None:
            store.put(keys[i], result)
        if progress:
            progress(done, total)

    if executor is None:
        for done, i in enumerate(missing, start=1):
            finished(i, run_one_detailed(requests[i]), done)
        return results, missing
    futures: dict[Future, int] = {executor.submit(run_one_detailed, requests[i]): i for i in missing}
    try:
        for done, fut in enumerate(as_completed(futures), start=1):
            finished(futures[fut], fut.result(), done)
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise
    return results, missing
