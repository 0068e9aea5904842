"""One run point (a scenario combination at one GPU count and algorithm): check that it
fits in memory, simulate it, and build its record.

The runner knows nothing of what callers above it add to a point: they pass `PointHooks`,
functions (module-level, so a process pool or Dask can ship them) that run in the worker
beside the simulation."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from gansim.collectives.nccl_tuning import NcclSettingError
from gansim.core.config import Scenario
from gansim.core.errors import UserInputError
from gansim.network.cluster import Cluster
from gansim.runner.record import Memory, RunRecord, analyze
from gansim.runner.scenario import LoadedScenario
from gansim.topology.graph import Topology
from gansim.training.memory import memory_report
from gansim.training.step import RunPoint, RunTimeline, simulate
from gansim.training.workloads import GanWorkload, StepPhases, scenario_workload

# extend(scenario, topology, gpus, algorithm, record, source=...) -> extra record fields
# (RunRecord.with_extensions)
ExtendRecord = Callable[..., dict[str, Any]]
# details(timeline, level=..., title=...) -> what the outputs keep of the raw timeline
TimelineDetails = Callable[..., dict[str, Any]]

# What comes back beside a run's record, from the least to the most: nothing; every link's
# utilisation; also the Gantt of the first steps; also the Chrome trace.
DETAIL_LEVELS = ("none", "links", "gantt", "full")
# Collectives played without the flow network keep this many of the run's first transfers,
# in all, for the "full" details (the Chrome trace shows at most 25,000 events of a run).
FULL_DETAIL_TRANSFERS = 50_000


@dataclass(frozen=True)
class PointHooks:
    """What the layers above add to every simulated point, in the worker that simulates
    it: `extend` returns extra fields for the record (the what-ifs); `details` turns the
    raw timeline, which never leaves the worker, into what the outputs write (per-link
    utilisation, with `full` also the Gantt and the Chrome trace)."""

    extend: ExtendRecord | None = None
    details: TimelineDetails | None = None  # called with level "links", "gantt" or "full"


@dataclass(frozen=True)
class RunRequest:
    loaded: LoadedScenario
    overrides: tuple[tuple[str, Any], ...]
    gpus: int
    algorithm: str
    detail: str = "none"  # one of DETAIL_LEVELS, made by hooks.details
    hooks: PointHooks = PointHooks()
    baseline_only: bool = False  # a 1-GPU run the scenario does not list, for its speed-ups


def run_one_detailed(request: RunRequest) -> tuple[RunRecord, dict[str, Any]]:
    """Simulate one point in whatever process runs it; return its record and the details
    its request asked for, plus the CPU seconds this process spent on it (`cpu_s`)."""
    cpu = time.process_time()
    loaded, hooks = request.loaded, request.hooks
    s = loaded.with_overrides(dict(request.overrides))
    topo = loaded.topology(s, ranks=request.gpus)
    details: dict[str, Any] = {}
    inspect = None
    if request.detail != "none" and hooks.details is not None:
        title = f"{s.name}: {request.gpus} x {request.algorithm} on {topo.name}" + "".join(
            f", {k}={v}" for k, v in request.overrides)

        def inspect(timeline: RunTimeline) -> None:
            details.update(hooks.details(timeline, level=request.detail, title=title))

    memory = memory_report(s, topo, request.gpus)
    if memory["fits"] is False:
        # out of device memory: reported as such, never simulated as if it fitted
        record = oom_record(s, topo, request.gpus, request.algorithm, memory)
    else:
        record = simulate_point(s, topo, request.gpus, request.algorithm, source=loaded.source,
                                on_timeline=inspect,
                                keep_transfers=FULL_DETAIL_TRANSFERS if request.detail == "full" else 0)
        if hooks.extend is not None:
            record = record.with_extensions(
                hooks.extend(s, topo, request.gpus, request.algorithm, record, source=loaded.source))
    if request.overrides:
        record = replace(record, sweep=dict(request.overrides))
    details["cpu_s"] = time.process_time() - cpu
    return record, details


def simulate_point(s: Scenario, topology: Topology, gpus: int, algorithm: str, *, source: str | None = None,
                   workload: tuple[GanWorkload, StepPhases] | None = None,
                   on_timeline: Callable[[RunTimeline], None] | None = None,
                   keep_transfers: int = 0) -> RunRecord:
    """Simulate one point. `workload` (a workload and its phase times) replaces the
    scenario's workload, for predictions from a calibration profile; `on_timeline` sees
    the raw timeline before it is dropped (for traces and per-link figures), which keeps
    the first `keep_transfers` transfers of the collectives played without the flow network."""
    topo = topology.scaled(s.link_bandwidth_scale)
    batch = s.batch_per_gpu(gpus)
    given_phases = None
    if workload is not None:
        workload, given_phases = workload
    else:
        workload = scenario_workload(s, source=source)
    if isinstance(workload, GanWorkload):
        workload = workload.at_ranks(gpus)
    point = RunPoint(gpus, algorithm, s.cost_model, batch, s.steps, s.options, s.seed)

    def make_cluster(env: Any) -> Cluster:
        return Cluster(topo, gpus, env, source=source)

    phases: StepPhases | None = given_phases
    if isinstance(workload, GanWorkload) and phases is None:
        tflops = [topo.nodes[n].tflops for n in topo.ranks[:gpus]]
        device = None if any(t is None for t in tflops) else min(tflops)  # type: ignore[type-var]
        phases = workload.phases(batch, device, s.options, source=source)
    try:
        timeline = simulate(make_cluster, workload, phases, point, s.options.gamma_s_per_byte,
                            keep_transfers=keep_transfers)
    except NcclSettingError as err:
        raise UserInputError(err.message, source=source, field=f"options.{err.option}") from None
    if on_timeline is not None:
        on_timeline(timeline)
    return RunRecord(gpus=gpus, algorithm=algorithm, cost_model=s.cost_model, topology=topo.name,
                     scaling=s.scaling, workload=workload.name, per_gpu_batch=batch, **analyze(timeline, workload))


def oom_record(scenario: Scenario, topology: Topology, gpus: int, algorithm: str, report: dict[str, Any]) -> RunRecord:
    """The record of a run that does not fit (never simulated)."""
    return RunRecord(gpus=gpus, algorithm=algorithm, cost_model=scenario.cost_model, topology=topology.name,
                     scaling=scenario.scaling, out_of_memory=True, memory=Memory.from_report(report))
