"""From a simulated timeline to a run's record: step time, breakdown, algbw and busbw,
every resource's utilisation and the bottleneck."""

from __future__ import annotations

from typing import Any

import numpy as np

from gansim.collectives.closed_forms import algbw, busbw
from gansim.network.engine import COMPUTE, DATA
from gansim.training.step import RunTimeline
from gansim.training.workloads import AllreduceWorkload, Workload


def union_length_per_rank(rank: np.ndarray, start: np.ndarray, end: np.ndarray, ranks: int) -> np.ndarray:
    """Measure of the union of each rank's intervals (overlaps counted once)."""
    if rank.size == 0:
        return np.zeros(ranks)
    span = float(max(end.max(), 0.0)) + 1.0
    # shift each rank into its own window so one sorted sweep merges all ranks at once
    s = start + rank * span
    e = end + rank * span
    order = np.argsort(s, kind="stable")
    s, e, r = s[order], e[order], rank[order]
    reach = np.maximum.accumulate(e)
    new_segment = np.ones(s.size, dtype=bool)
    new_segment[1:] = s[1:] > reach[:-1]
    seg_id = np.cumsum(new_segment) - 1
    seg_start = s[new_segment]
    seg_end = np.zeros(seg_start.size)
    np.maximum.at(seg_end, seg_id, e)
    return np.bincount(r[new_segment], weights=seg_end - seg_start, minlength=ranks)


def breakdown(timeline: RunTimeline) -> dict[str, float]:
    """Per-step seconds of compute, exposed communication, data and idle, averaged over
    ranks; where they overlap, compute wins over data, data over communication."""
    g, ex = timeline.graph, timeline.execution
    ranks = timeline.cluster.ranks
    owned = g.rank >= 0
    intervals: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, category in (("compute", COMPUTE), ("data", DATA)):
        sel = owned & (g.category == category)
        intervals[name] = (g.rank[sel], ex.start[sel], ex.end[sel])
    comm_rank, comm_start, comm_end = [], [], []
    for span in timeline.spans:
        entry_end = np.where(span.entry >= 0, ex.end[np.maximum(span.entry, 0)], 0.0)
        comm_rank.append(np.arange(ranks))
        comm_start.append(entry_end)
        comm_end.append(ex.end[span.exit])
    if comm_rank:
        intervals["communication"] = (np.concatenate(comm_rank), np.concatenate(comm_start), np.concatenate(comm_end))
    else:
        intervals["communication"] = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    covered = {}
    acc_r, acc_s, acc_e = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    for name in ("compute", "data", "communication"):
        r, s, e = intervals[name]
        acc_r, acc_s, acc_e = np.concatenate([acc_r, r]), np.concatenate([acc_s, s]), np.concatenate([acc_e, e])
        covered[name] = union_length_per_rank(acc_r, acc_s, acc_e, ranks)
    makespan = ex.makespan
    compute = covered["compute"]
    data = covered["data"] - covered["compute"]
    comm = covered["communication"] - covered["data"]
    idle = makespan - covered["communication"]
    steps = timeline.steps
    return {
        "compute_s": float(compute.mean() / steps),
        "communication_s": float(comm.mean() / steps),
        "data_s": float(data.mean() / steps),
        "idle_s": float(max(idle.mean(), 0.0) / steps),
    }


def utilisation(timeline: RunTimeline) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every used resource's average utilisation over the run, busiest first, and the
    bottleneck (the busiest one)."""
    net = timeline.cluster.network
    carried = timeline.carried_per_resource()
    makespan = timeline.execution.makespan
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where((carried > 0) & np.isfinite(net.capacity), carried / (net.capacity * makespan), 0.0)
    order = np.argsort(-util, kind="stable")
    rows = []
    for i in order:
        if carried[i] <= 0:
            break
        if not np.isfinite(net.capacity[i]):
            continue  # a resource without a limit (a host memory of unknown bandwidth) binds nothing
        res = timeline.cluster.resource(i)
        rows.append({"resource": res.name, "kind": res.kind, "utilization": round(float(util[i]), 6)})
    bottleneck = rows[0] if rows else {"resource": None, "kind": None, "utilization": 0.0}
    return rows, bottleneck


def analyze(timeline: RunTimeline, workload: Workload) -> dict[str, Any]:
    """The run's figures. step_time_s is the makespan over the simulated steps: with lazy
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
    links, bottleneck = utilisation(timeline)
    busiest_link = next((row for row in links if row["kind"] not in ("compute", "cores")), None)
    return {
        "step_time_s": step_time,
        "allreduce_time_s": allreduce_time,
        "algbw_GBps": bw / 1e9,
        "busbw_GBps": (busbw(timeline.gradient_bytes_per_step, allreduce_time, ranks) / 1e9) if bw else 0.0,
        "breakdown": breakdown(timeline),
        "bottleneck": bottleneck,
        "busiest_link": busiest_link,
        "top_resources": links[:8],
        "simulated_events": ex.events,
        "simulated_tasks": timeline.graph.size,
    }
