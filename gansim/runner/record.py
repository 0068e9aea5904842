"""A run's record (`RunRecord`, one row of summary.json's `runs`) and how it is made from a
simulated timeline: step time, breakdown, algbw and busbw, every resource's utilisation and
the bottleneck."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from gansim.collectives.closed_forms import algbw, busbw
from gansim.network.engine import COMPUTE, DATA
from gansim.training.step import RunTimeline
from gansim.training.workloads import AllreduceWorkload, Workload


def union_lengths_per_rank(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], ranks: int) -> list[np.ndarray]:
    """Per level L (parts[L]: its intervals' ranks, starts and ends), the measure of the union
    of each rank's intervals of level L or less (overlaps counted once). Every interval is
    sorted once, each rank in a window of its own so that one sweep merges all ranks at once;
    each level then sweeps its own, in that order. A run holds millions of intervals: `parts`
    is emptied as it is read, and each array freed once it is used."""
    levels = len(parts)
    sizes = [part[0].size for part in parts]
    rank, start, end = (np.concatenate([part[i] for part in parts]) for i in range(3))
    parts.clear()
    if rank.size == 0:
        return [np.zeros(ranks) for _ in range(levels)]
    level = np.repeat(np.arange(levels, dtype=np.int8), sizes)
    order = np.argsort(start + rank * (float(max(end.max(), 0.0)) + 1.0), kind="stable")
    rank, start, end, level = rank[order], start[order], end[order], level[order]
    del order
    out = []
    for at in range(levels):
        keep = None if at == levels - 1 else level <= at
        r, s, e = (rank, start, end) if keep is None else (rank[keep], start[keep], end[keep])
        del keep
        if r.size == 0:
            out.append(np.zeros(ranks))
            continue
        # each level in windows of its own span, as its intervals alone would be measured: the
        # same order (by rank, then start), so the same sums to the last digit
        shift = r * (float(max(e.max(), 0.0)) + 1.0)
        s = s + shift
        e = np.add(e, shift, out=shift)
        reach = np.maximum.accumulate(e)
        new_segment = np.empty(s.size, dtype=bool)
        new_segment[0] = True
        np.greater(s[1:], reach[:-1], out=new_segment[1:])
        del reach
        firsts = np.flatnonzero(new_segment)
        seg_end = np.maximum.reduceat(e, firsts)  # each segment's furthest end
        del e
        out.append(np.bincount(r[firsts], weights=seg_end - s[firsts], minlength=ranks))
        del r, s
    return out


@dataclass(frozen=True)
class Breakdown:
    """Per-step seconds of a run, averaged over ranks (see `breakdown`)."""

    compute_s: float
    communication_s: float
    data_s: float
    idle_s: float

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class ResourceUse:
    """A resource's average utilisation over a run (0..1); a run that used no limited
    resource has a bottleneck named None."""

    resource: str | None
    kind: str | None
    utilization: float

    def to_dict(self) -> dict[str, Any]:
        return {"resource": self.resource, "kind": self.kind, "utilization": self.utilization}

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> "ResourceUse":
        return cls(row["resource"], row["kind"], row["utilization"])


@dataclass(frozen=True)
class Memory:
    """Peak memory per rank against its device's (gansim.training.memory.memory_report);
    `fits` is None where the device's capacity is not known."""

    peak_GB: float | None
    capacity_GB: float | None
    fits: bool | None
    parts: Mapping[str, float]  # GB per part (parameters, gradients, activations, ...)

    @classmethod
    def from_report(cls, report: Mapping[str, Any]) -> "Memory":
        return cls(report["memory_peak_GB"], report["memory_capacity_GB"], report["fits"], dict(report["parts"]))


# the memory fields of a record as summary.json names them
_MEMORY_KEYS = ("memory_peak_GB", "memory_capacity_GB", "fits", "memory_parts")
# the fields simulate_point computes for a run that fits, in summary.json's order after `efficiency`
_SIMULATED_KEYS = ("allreduce_time_s", "algbw_GBps", "busbw_GBps", "breakdown", "bottleneck", "busiest_link",
                   "top_resources", "simulated_events", "simulated_tasks")


@dataclass(frozen=True)
class RunRecord:
    """One run: a scenario combination at one GPU count and all-reduce algorithm, as a row
    of summary.json's `runs` (docs/formats.md). `to_dict()` is that row, key for key and in
    its order; `from_dict` reads it back, losslessly.

    A run that does not fit in memory (`out_of_memory`) is never simulated: it has its
    memory and none of the timings. `speedup` and `efficiency` are None until the sweep
    sets them against the 1-GPU baseline of the same combination.

    Attributes:
        gpus: Ranks (GPUs) of the run.
        algorithm: All-reduce algorithm (`ring`, `tree`, `nccl`, ...).
        cost_model: How communication was timed (`flow`, `alpha_beta`, ...).
        topology: Name of the machine the run was simulated on.
        scaling: `strong` or `weak`.
        workload: Name of the workload (None: out of memory).
        per_gpu_batch: Samples per GPU per step (None: out of memory).
        step_time_s: Simulated seconds per training step (None: out of memory).
        speedup: Speed-up over the 1-GPU run of the same combination (None: no step time).
        efficiency: `speedup / gpus` (None: no speed-up).
        out_of_memory: The run does not fit in its devices' memory and was not simulated.
        allreduce_time_s: Seconds per step the gradients' all-reduces take, first entry to last exit.
        algbw_GBps: Gradient bytes per step over `allreduce_time_s`, in GB/s.
        busbw_GBps: nccl-tests' bus bandwidth of those all-reduces, in GB/s.
        breakdown: Per-step compute, exposed communication, data and idle seconds.
        bottleneck: The busiest resource.
        busiest_link: The busiest resource that is not compute.
        top_resources: The eight busiest resources, busiest first.
        simulated_events: Events the simulation processed.
        simulated_tasks: Tasks of the simulated task graph.
        memory: Peak memory per rank against the device's capacity.
        extensions: The what-ifs' fields (whole run, storage, cost, energy), readable as
            attributes too (`run.cost_usd`).
        sweep: The sweep axes' values of this run's combination (empty without a sweep).
        band: The step time's and speed-up's range, for a run from a calibration profile.
    """

    gpus: int
    algorithm: str
    cost_model: str
    topology: str
    scaling: str
    workload: str | None = None
    per_gpu_batch: float | None = None
    step_time_s: float | None = None
    speedup: float | None = None
    efficiency: float | None = None
    out_of_memory: bool = False
    allreduce_time_s: float | None = None
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None
    breakdown: Breakdown | None = None
    bottleneck: ResourceUse | None = None
    busiest_link: ResourceUse | None = None  # None: every used resource is compute or cores
    top_resources: tuple[ResourceUse, ...] = ()
    simulated_events: int | None = None
    simulated_tasks: int | None = None
    memory: Memory | None = None  # None: nobody asked (a run simulated without the what-ifs)
    # The fields the layers above add per run (gansim.whatif: whole run, storage, cost and
    # energy, notes), in their order. Open-ended on purpose: which of them a run has depends
    # on what its scenario configures (run:, checkpoint:, storage:, platform:), and this
    # layer may not import the what-ifs that define them (import-linter's layers).
    extensions: Mapping[str, Any] = field(default_factory=dict)
    sweep: Mapping[str, Any] = field(default_factory=dict)  # the sweep axes' values of its combination
    # A run of a scenario from a calibration profile: the range of its step time and
    # speed-up (gansim.prediction.bands.StepBand.as_dict), added after the sweep.
    band: Mapping[str, Any] | None = None

    @property
    def fits(self) -> bool | None:
        return None if self.memory is None else self.memory.fits

    def with_extensions(self, extra: Mapping[str, Any]) -> "RunRecord":
        """This record with a hook's fields: its memory fields typed, the others kept in order."""
        memory = self.memory
        if all(key in extra for key in _MEMORY_KEYS):
            memory = Memory(extra["memory_peak_GB"], extra["memory_capacity_GB"], extra["fits"],
                            dict(extra["memory_parts"]))
            extra = {k: v for k, v in extra.items() if k not in _MEMORY_KEYS}
        return replace(self, memory=memory, extensions={**self.extensions, **extra})

    def to_dict(self) -> dict[str, Any]:
        """The run as summary.json holds it."""
        out: dict[str, Any] = {"gpus": self.gpus, "algorithm": self.algorithm, "cost_model": self.cost_model,
                               "topology": self.topology, "workload": self.workload, "scaling": self.scaling,
                               "per_gpu_batch": self.per_gpu_batch, "step_time_s": self.step_time_s,
                               "speedup": self.speedup, "efficiency": self.efficiency}
        memory = self.memory
        if self.out_of_memory:
            assert memory is not None
            out["out_of_memory"] = True
            out.update({"fits": memory.fits, "memory_peak_GB": memory.peak_GB,
                        "memory_capacity_GB": memory.capacity_GB, "memory_parts": dict(memory.parts)})
        else:
            out.update({
                "allreduce_time_s": self.allreduce_time_s, "algbw_GBps": self.algbw_GBps,
                "busbw_GBps": self.busbw_GBps,
                "breakdown": None if self.breakdown is None else self.breakdown.to_dict(),
                "bottleneck": None if self.bottleneck is None else self.bottleneck.to_dict(),
                "busiest_link": None if self.busiest_link is None else self.busiest_link.to_dict(),
                "top_resources": [row.to_dict() for row in self.top_resources],
                "simulated_events": self.simulated_events, "simulated_tasks": self.simulated_tasks,
            })
            if memory is not None:
                out.update({"memory_peak_GB": memory.peak_GB, "memory_capacity_GB": memory.capacity_GB,
                            "fits": memory.fits, "memory_parts": dict(memory.parts)})
        out.update(self.extensions)
        if self.sweep:
            out["sweep"] = dict(self.sweep)
        if self.band is not None:
            out["band"] = dict(self.band)
        return out

    @classmethod
    def from_dict(cls, run: Mapping[str, Any]) -> "RunRecord":
        """A record from its row of summary.json's `runs` (or `to_dict()`'s output)."""
        known = {"gpus", "algorithm", "cost_model", "topology", "workload", "scaling", "per_gpu_batch",
                 "step_time_s", "speedup", "efficiency", "out_of_memory", "sweep", "band",
                 *_SIMULATED_KEYS}
        memory = Memory(run["memory_peak_GB"], run["memory_capacity_GB"], run["fits"], dict(run["memory_parts"])) \
            if all(k in run for k in _MEMORY_KEYS) else None
        if memory is not None:
            known.update(_MEMORY_KEYS)

        def use(key: str) -> ResourceUse | None:
            return None if run.get(key) is None else ResourceUse.from_dict(run[key])

        return cls(
            gpus=run["gpus"], algorithm=run["algorithm"], cost_model=run["cost_model"], topology=run["topology"],
            scaling=run["scaling"], workload=run.get("workload"), per_gpu_batch=run.get("per_gpu_batch"),
            step_time_s=run.get("step_time_s"), speedup=run.get("speedup"), efficiency=run.get("efficiency"),
            out_of_memory=bool(run.get("out_of_memory", False)), allreduce_time_s=run.get("allreduce_time_s"),
            algbw_GBps=run.get("algbw_GBps"), busbw_GBps=run.get("busbw_GBps"),
            breakdown=None if run.get("breakdown") is None else Breakdown(**run["breakdown"]),
            bottleneck=use("bottleneck"), busiest_link=use("busiest_link"),
            top_resources=tuple(ResourceUse.from_dict(row) for row in run.get("top_resources") or ()),
            simulated_events=run.get("simulated_events"), simulated_tasks=run.get("simulated_tasks"),
            memory=memory, extensions={k: v for k, v in run.items() if k not in known},
            sweep=dict(run.get("sweep") or {}), band=None if run.get("band") is None else dict(run["band"]))

    def __getattr__(self, name: str) -> Any:
        # an extension's field read as an attribute (run.cost_usd), as gansim.api promises
        if not name.startswith("__"):
            extensions = self.__dict__.get("extensions", {})
            if name in extensions:
                return extensions[name]
        raise AttributeError(f"this run has no field {name!r}")


def breakdown(timeline: RunTimeline) -> Breakdown:
    """Per-step seconds of compute, exposed communication, data and idle, averaged over
    ranks; where they overlap, compute wins over data, data over communication."""
    g, ex = timeline.graph, timeline.execution
    ranks = timeline.cluster.ranks
    owned = g.rank >= 0

    def intervals(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if name != "communication":
            sel = owned & (g.category == (COMPUTE if name == "compute" else DATA))
            return g.rank[sel], ex.start[sel], ex.end[sel]
        if not timeline.spans:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        entry_end = [np.where(span.entry >= 0, ex.end[np.maximum(span.entry, 0)], 0.0) for span in timeline.spans]
        return (np.tile(np.arange(ranks), len(timeline.spans)), np.concatenate(entry_end),
                np.concatenate([ex.end[span.exit] for span in timeline.spans]))

    # compute, then compute and data, then all three: each covers what the ones before did
    names = ("compute", "data", "communication")
    covered = dict(zip(names, union_lengths_per_rank([intervals(name) for name in names], ranks)))
    makespan = ex.makespan
    compute = covered["compute"]
    data = covered["data"] - covered["compute"]
    comm = covered["communication"] - covered["data"]
    idle = makespan - covered["communication"]
    steps = timeline.steps
    return Breakdown(
        compute_s=float(compute.mean() / steps),
        communication_s=float(comm.mean() / steps),
        data_s=float(data.mean() / steps),
        idle_s=float(max(idle.mean(), 0.0) / steps),
    )


def utilisation(timeline: RunTimeline, top: int | None = None) -> tuple[list[ResourceUse], ResourceUse]:
    """Every used resource's average utilisation over the run, busiest first, and the
    bottleneck (the busiest one). With `top`, only the busiest `top` resources and, where
    none of them is a link, the busiest link (a resource that is not compute or cores)."""
    net = timeline.cluster.network
    carried = timeline.carried_per_resource()
    makespan = timeline.execution.makespan
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where((carried > 0) & np.isfinite(net.capacity), carried / (net.capacity * makespan), 0.0)
    order = np.argsort(-util, kind="stable")
    unused = np.flatnonzero(carried[order] <= 0)
    order = order[:unused[0]] if unused.size else order  # up to the first resource nothing used
    # a resource without a limit (a host memory of unknown bandwidth) binds nothing
    order = order[np.isfinite(net.capacity[order])]
    rows = []
    link_found = False
    names, kinds = timeline.cluster.resource_names, timeline.cluster.resource_kinds
    for i in order.tolist():
        is_link = kinds[i] not in _NOT_LINKS
        if top is not None and len(rows) >= top:
            if link_found:
                break
            if not is_link:  # (past the top, only the busiest link is wanted: 16,384 GPUs' compute come first)
                continue
        rows.append(ResourceUse(names[i], kinds[i], round(float(util[i]), 6)))
        link_found = link_found or is_link
    bottleneck = rows[0] if rows else ResourceUse(None, None, 0.0)
    return rows, bottleneck


_NOT_LINKS = ("compute", "cores")  # resource kinds the busiest link is not


def analyze(timeline: RunTimeline, workload: Workload) -> dict[str, Any]:
    """The run's figures, as RunRecord's fields. step_time_s is the makespan over the simulated steps: with lazy
    regularisation phases, the config makes `steps` a whole number of their period (the lcm of
    their intervals), so it is the exact mean over whole periods, every phase weighted by how
    often it runs (1/every), and the all-reduced bytes per step are averaged the same way
    (gansim.training.step.gradient_params_per_step)."""
    ex = timeline.execution
    steps = timeline.steps
    step_time = ex.makespan / steps
    ranks = timeline.cluster.ranks
    if isinstance(workload, AllreduceWorkload):
        allreduce_time = step_time if ranks > 1 else 0.0
    else:
        total = 0.0
        for span in timeline.spans:
            entry_end = np.where(span.entry >= 0, ex.end[np.maximum(span.entry, 0)], 0.0)
            total += float(ex.end[span.exit].max() - entry_end.min())
        allreduce_time = total / steps
    bw = algbw(timeline.gradient_bytes_per_step, allreduce_time) if allreduce_time > 0 else 0.0
    links, bottleneck = utilisation(timeline, top=8)
    busiest_link = next((row for row in links if row.kind not in _NOT_LINKS), None)
    return {
        "step_time_s": step_time,
        "allreduce_time_s": allreduce_time,
        "algbw_GBps": bw / 1e9,
        "busbw_GBps": (busbw(timeline.gradient_bytes_per_step, allreduce_time, ranks) / 1e9) if bw else 0.0,
        "breakdown": breakdown(timeline),
        "bottleneck": bottleneck,
        "busiest_link": busiest_link,
        "top_resources": tuple(links[:8]),
        "simulated_events": ex.events,
        "simulated_tasks": timeline.graph.size,
    }
