"""Scenarios: load and validate a scenario file, expand its axes (gpus x algorithms x
sweep) into run points, simulate each, and assemble the summary."""

from __future__ import annotations

import itertools
import time
from concurrent.futures import Executor, Future, as_completed
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

from . import __version__
from .cluster import Cluster
from .collectives import ALGORITHMS
from .config import Scenario, parse, read_yaml, resolve_file
from .errors import UserInputError
from .results import analyze
from .whatif import check_scenario, evaluate_run_extensions, evaluate_scenario_extensions, memory_report, oom_record
from .topology import Topology, load_topology
from .training import RunPoint, RunTimeline, simulate
from .workloads import AllreduceWorkload, GanWorkload, StepPhases, resolve_workload


@dataclass(frozen=True)
class LoadedScenario:
    scenario: Scenario
    source: str  # the file it came from (or "<name>" for a shipped one)
    base_dir: str  # relative paths inside it are taken from here

    def with_overrides(self, overrides: dict[str, Any]) -> Scenario:
        if not overrides:
            return self.scenario
        data = self.scenario.model_dump(exclude_none=False)
        data.pop("sweep")
        for axis, value in overrides.items():
            if axis in ("overlap", "gradient_dtype", "chunks"):
                data["options"] = {**data["options"], axis: value}
            else:
                data[axis] = value
        try:
            return parse(Scenario, data, self.source)
        except UserInputError as err:
            raise UserInputError(err.message, source=self.source, field=f"sweep.{err.field}") from None


def load_scenario(name_or_path: str) -> LoadedScenario:
    path = resolve_file(name_or_path, "scenarios")
    scenario: Scenario = parse(Scenario, read_yaml(path), str(path))
    loaded = LoadedScenario(scenario, str(path), str(path.resolve().parent))
    validate_references(loaded)
    return loaded


def validate_references(loaded: LoadedScenario) -> None:
    """Check every name the scenario refers to before simulating anything."""
    s, src = loaded.scenario, loaded.source
    for i, name in enumerate(s.algorithms):
        ALGORITHMS.get(name, source=src, field=f"algorithms[{i}]")
    for overrides in sweep_combinations(s):
        scenario = loaded.with_overrides(overrides)
        field = "sweep.topology" if "topology" in overrides else "topology"
        topo = topology_for(scenario.topology, loaded.base_dir, src, field)
        if max(scenario.gpus) > len(topo.ranks):
            raise UserInputError(
                f"{max(scenario.gpus)} GPUs asked but topology {topo.name!r} has {len(topo.ranks)}",
                source=src, field="gpus",
            )
        resolve_workload(scenario.workload, reference_batch(scenario), source=src)
    check_scenario(loaded)


def sweep_combinations(s: Scenario) -> list[dict[str, Any]]:
    axes = list(s.sweep)
    return [dict(zip(axes, values)) for values in itertools.product(*(s.sweep[a] for a in axes))]


def reference_batch(s: Scenario) -> float:
    """The batch at which inline compute figures were given (one GPU)."""
    return float(s.per_gpu_batch if s.per_gpu_batch is not None else s.global_batch)  # type: ignore[arg-type]


def per_gpu_batch(s: Scenario, gpus: int) -> float:
    return float(s.per_gpu_batch) if s.scaling == "weak" else float(s.global_batch) / gpus  # type: ignore[arg-type]


def _relative(value: str, base_dir: str) -> str:
    candidate = Path(value)
    if not candidate.is_absolute() and (base_dir and (Path(base_dir) / candidate).is_file()):
        return str(Path(base_dir) / candidate)
    return value


@lru_cache(maxsize=32)
def _load_topology_cached(path_or_name: str, source: str, field: str) -> Topology:
    return load_topology(path_or_name, source=source, field=field)


def topology_for(value: str, base_dir: str, source: str, field: str = "topology") -> Topology:
    return _load_topology_cached(_relative(value, base_dir), source, field)


# ----------------------------------------------------------------------------- one run
@dataclass(frozen=True)
class RunRequest:
    loaded: LoadedScenario
    overrides: tuple[tuple[str, Any], ...]
    gpus: int
    algorithm: str
    # what comes back beside the record: "none"; "links" (every link's utilisation);
    # "full" (also the Gantt of the first steps and the Chrome trace, see sim/trace.py)
    detail: str = "none"


def run_one(request: RunRequest) -> dict[str, Any]:
    """Simulate one point; returns its record without speed-up (that needs the baseline)."""
    return run_one_detailed(request)[0]


def run_one_detailed(request: RunRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """Simulate one point in whatever process runs it; return its record and the details
    its request asked for, plus the CPU seconds this process spent on it (`cpu_s`)."""
    cpu = time.process_time()
    loaded = request.loaded
    s = loaded.with_overrides(dict(request.overrides))
    topo = topology_for(s.topology, loaded.base_dir, loaded.source)
    details: dict[str, Any] = {}

    def inspect(timeline: RunTimeline) -> None:
        if request.detail in ("links", "full"):
            from .trace import run_details

            title = f"{s.name}: {request.gpus} x {request.algorithm} on {topo.name}" + "".join(
                f", {k}={v}" for k, v in request.overrides)
            details.update(run_details(timeline, full=request.detail == "full", title=title))

    memory = memory_report(s, topo, request.gpus)
    if memory["fits"] is False:
        # out of device memory: reported as such, never simulated as if it fitted
        record = oom_record(s, topo, request.gpus, request.algorithm, memory)
    else:
        record = simulate_point(s, topo, request.gpus, request.algorithm, source=loaded.source,
                                on_timeline=inspect if request.detail != "none" else None)
        record.update(evaluate_run_extensions(s, topo, request.gpus, request.algorithm, record,
                                              source=loaded.source))
    if request.overrides:
        record["sweep"] = {k: v for k, v in request.overrides}
    details["cpu_s"] = time.process_time() - cpu
    return record, details


def simulate_point(s: Scenario, topology: Topology, gpus: int, algorithm: str, *, source: str | None = None,
                   workload: tuple[GanWorkload, StepPhases] | None = None,
                   on_timeline: Callable[[RunTimeline], None] | None = None) -> dict[str, Any]:
    """Simulate one point. `workload` (a workload and its phase times) replaces the
    scenario's workload, for predictions from a calibration profile; `on_timeline` sees
    the raw timeline before it is dropped (for traces and per-link figures)."""
    topo = topology.scaled(s.link_bandwidth_scale)
    batch = per_gpu_batch(s, gpus)
    given_phases = None
    if workload is not None:
        workload, given_phases = workload
    else:
        workload = resolve_workload(s.workload, reference_batch(s), source=source)
    point = RunPoint(gpus, algorithm, s.cost_model, batch, s.steps, s.options, s.seed)

    def make_cluster(env: Any) -> Cluster:
        return Cluster(topo, gpus, env, source=source)

    phases: StepPhases | None = given_phases
    if isinstance(workload, GanWorkload) and phases is None:
        tflops = [topo.nodes[n].tflops for n in topo.ranks[:gpus]]
        device = None if any(t is None for t in tflops) else min(tflops)  # type: ignore[type-var]
        phases = workload.phases(batch, device, s.options, source=source)
    timeline = simulate(make_cluster, workload, phases, point, s.options.gamma_s_per_byte)
    if on_timeline is not None:
        on_timeline(timeline)
    record: dict[str, Any] = {
        "gpus": gpus,
        "algorithm": algorithm,
        "cost_model": s.cost_model,
        "topology": topo.name,
        "workload": workload.name,
        "scaling": s.scaling,
        "per_gpu_batch": batch,
    }
    record.update(analyze(timeline, workload))
    return record


def run_requests(loaded: LoadedScenario) -> list[RunRequest]:
    s = loaded.scenario
    requests = []
    for overrides in sweep_combinations(s):
        frozen = tuple(overrides.items())
        gpus = loaded.with_overrides(overrides).gpus
        for algorithm in s.algorithms:
            for g in gpus:
                requests.append(RunRequest(loaded, frozen, g, algorithm))
        if 1 not in gpus:  # the baseline every speed-up is measured against
            requests.append(RunRequest(loaded, frozen, 1, s.algorithms[0]))
    return requests


# Reports draw a Gantt (and every run gets a trace) for at most this many featured runs
# when a sweep is large: per algorithm, its largest GPU count, in the first few sweep
# combinations.
FEATURED_COMBINATIONS = 4
AUTO_TRACE_LIMIT = 100
TRACE_POLICIES = ("auto", "all", "featured", "none")


@dataclass
class ScenarioResult:
    """A simulated scenario: the summary (summary.json), and per summary run the details
    that came back from its worker (link utilisation; Gantt and trace where asked)."""

    summary: dict[str, Any]
    details: list[dict[str, Any]]
    featured: list[int]  # indices into summary["runs"] the report draws a Gantt for
    cpu_s: float = 0.0  # CPU seconds the workers spent simulating, all runs
    wall_s: float = 0.0
    topologies: dict[str, Topology] = field(default_factory=dict)  # by name, as in the files (unscaled)


def simulate_scenario(loaded: LoadedScenario, executor: Executor | None = None,
                      progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    return run_scenario(loaded, executor, progress, traces=None).summary


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
        if req.gpus not in loaded.with_overrides(dict(req.overrides)).gpus:
            continue  # an added baseline
        key = (req.overrides, req.algorithm)
        if key not in best or requests[best[key]].gpus < req.gpus:
            best[key] = i
    return set(best.values())


def run_scenario(loaded: LoadedScenario, executor: Executor | None = None,
                 progress: Callable[[int, int], None] | None = None, *, traces: str | None = "auto") -> ScenarioResult:
    """Simulate every run of the scenario (in parallel through `executor`, any
    concurrent.futures executor) and assemble the summary. `traces` decides which runs
    come back with a Gantt and a Chrome trace: "all", "featured" (see
    featured_requests), "auto" (all up to AUTO_TRACE_LIMIT runs, else featured), "none"
    (featured runs only, for the report's Gantt); None: no details at all."""
    if traces is not None and traces not in TRACE_POLICIES:
        raise UserInputError(f"unknown trace policy {traces!r}; allowed: {', '.join(TRACE_POLICIES)}",
                             field="--traces")
    wall = time.perf_counter()
    requests = run_requests(loaded)
    featured = featured_requests(loaded, requests) if traces is not None else set()
    if traces is not None:
        wanted_all = traces == "all" or (traces == "auto" and len(requests) <= AUTO_TRACE_LIMIT)
        requests = [RunRequest(r.loaded, r.overrides, r.gpus, r.algorithm,
                               "full" if (wanted_all or i in featured) else "links")
                    for i, r in enumerate(requests)]
    results = _map(executor, requests, progress)
    records = [rec for rec, _ in results]
    baseline: dict[tuple, dict[str, Any]] = {}
    for req, rec in zip(requests, records):
        if req.gpus == 1:
            baseline.setdefault(req.overrides, rec)
    runs = []
    run_details: list[dict[str, Any]] = []
    run_featured: list[int] = []
    wanted = {(r.overrides, r.gpus, r.algorithm) for r in requests if r.gpus in loaded.with_overrides(dict(r.overrides)).gpus}
    seen = set()
    for i, (req, rec) in enumerate(zip(requests, records)):
        key = (req.overrides, req.gpus, req.algorithm)
        if key not in wanted or key in seen:
            continue
        seen.add(key)
        base = baseline[req.overrides]
        s = loaded.with_overrides(dict(req.overrides))
        if rec["step_time_s"] and base["step_time_s"]:
            ratio = base["step_time_s"] / rec["step_time_s"]
            speedup: float | None = ratio * req.gpus if s.scaling == "weak" else ratio
        else:
            speedup = None  # out of memory here or at the 1-GPU baseline: no speed-up to give
        ordered = {k: rec.get(k) for k in ("gpus", "algorithm", "cost_model", "topology", "workload", "scaling",
                                            "per_gpu_batch", "step_time_s")}
        ordered["speedup"] = speedup
        ordered["efficiency"] = speedup / req.gpus if speedup is not None else None
        ordered.update({k: v for k, v in rec.items() if k not in ordered})
        if i in featured:
            run_featured.append(len(runs))
        runs.append(ordered)
        details = results[i][1]
        if traces == "none":
            details.pop("trace", None)  # the Gantt of featured runs stays, for the report
        run_details.append(details)
    s = loaded.scenario
    summary = {
        "scenario": s.name,
        "gansim_version": __version__,
        "source": Path(loaded.source).name,
        "sweep_axes": list(s.sweep),
        "reference": s.reference.model_dump() if s.reference else None,
        "runs": runs,
    }
    summary.update(evaluate_scenario_extensions(loaded))
    topologies: dict[str, Topology] = {}
    if traces is not None:
        for overrides in dict.fromkeys(r.overrides for r in requests):
            sc = loaded.with_overrides(dict(overrides))
            topo = topology_for(sc.topology, loaded.base_dir, loaded.source)
            topologies.setdefault(topo.name, topo)
    return ScenarioResult(summary, run_details, run_featured, cpu_s=sum(d.get("cpu_s", 0.0) for _, d in results),
                          wall_s=time.perf_counter() - wall, topologies=topologies)


def _map(executor: Executor | None, requests: list[RunRequest],
         progress: Callable[[int, int], None] | None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every request's (record, details), in request order; progress counts completions
    in whatever order they come."""
    total = len(requests)
    if executor is None:
        out = []
        for i, req in enumerate(requests):
            out.append(run_one_detailed(req))
            if progress:
                progress(i + 1, total)
        return out
    futures: dict[Future, int] = {executor.submit(run_one_detailed, req): i for i, req in enumerate(requests)}
    results: list[Any] = [None] * total
    try:
        for done, fut in enumerate(as_completed(futures), start=1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, total)
    except BaseException:
        for fut in futures:
            fut.cancel()
        raise
    return results
