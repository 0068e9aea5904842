"""What a run looked like over time, extracted inside the worker that simulated it (the
timeline itself stays there: runs execute in a process pool or on Dask, so only small,
picklable data comes back):

* every directed link's utilisation over the run (for the report's heatmap);
* a per-rank Gantt of the first steps (for the report);
* a Chrome trace event file (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU)
  of the first steps, loadable in Perfetto (ui.perfetto.dev) or chrome://tracing.

Trace layout: one process (pid) per topology node; in a rank's process one thread (tid)
per kind of activity -- compute, data, host overhead, all-reduce (the whole collective
as the rank sees it), all-reduce steps, sends (one event per transfer) -- and in every
node's process one thread per directed link leaving it, whose events are the intervals
during which the link carried at least one transfer. Events on one thread never overlap:
where a rank does two things of one kind at once (a root sending to many peers, chunks
of a pipelined all-reduce), the activity gets as many lanes as it needs ("send",
"send #2", ...), assigned first-fit. Timestamps and durations are microseconds.

Traces are bounded: they cover the first `TRACE_STEPS` training steps and at most
`MAX_TRACE_EVENTS` complete events (the earliest ones; `otherData.truncated` says when
events were dropped)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from gansim.network.engine import (
    COMMUNICATION,
    COMPUTE,
    DATA,
    DELAY,
    FLOW,
    OVERHEAD,
    Labels,
)
from gansim.training.step import RunTimeline

TRACE_STEPS = 2
MAX_TRACE_EVENTS = 25_000
GANTT_MAX_RANKS = 32
GANTT_MAX_BARS = 6_000

# threads of a rank's process, in display order
RANK_TRACKS = ("compute", "data", "host overhead", "all-reduce", "all-reduce steps", "send")
_TRACK_TID = {name: 100_000 * (i + 1) for i, name in enumerate(RANK_TRACKS)}  # lanes: tid, tid+1, ...
_LINK_TID = 10_000_000  # + directed link index


@dataclass(frozen=True)
class Interval:
    """Columnar intervals: who (rank or link), which track, when, what."""

    owner: np.ndarray  # rank index (rank tracks) or directed link index (link tracks)
    track: np.ndarray  # index into RANK_TRACKS (rank tracks); 0 for links
    start: np.ndarray  # seconds
    end: np.ndarray
    name: np.ndarray  # index into a names list
    task: np.ndarray  # task id, or -1


# ----------------------------------------------------------------------------- helpers
def route_resources(timeline: RunTimeline, routes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flow index, resource) pairs for the given route ids."""
    return timeline.cluster.network.route_pairs(np.asarray(routes, dtype=np.int64))


def merge_intervals(group: np.ndarray, start: np.ndarray, end: np.ndarray,
                    weight: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Union of the intervals of each group: (group, start, end, how many merged, weight sum)."""
    if group.size == 0:
        empty = np.zeros(0)
        return np.zeros(0, np.int64), empty, empty, np.zeros(0, np.int64), empty
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    w = weight[order] if weight is not None else np.zeros(g.size)
    # shift each group into its own window so one running maximum serves all groups
    base = float(max(e.max(), s.max(), 0.0)) - float(min(s.min(), 0.0)) + 1.0
    offset = g * base
    reach = np.maximum.accumulate(e + offset)
    new = np.ones(g.size, dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (s[1:] + offset[1:] > reach[:-1])
    seg = np.cumsum(new) - 1
    seg_start = s[new]
    seg_end = np.full(seg_start.size, -np.inf)
    np.maximum.at(seg_end, seg, e)
    counts = np.bincount(seg, minlength=seg_start.size)
    weights = np.bincount(seg, weights=w, minlength=seg_start.size)
    return g[new], seg_start, seg_end, counts, weights


def first_fit_lanes(owner: np.ndarray, track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per interval such that intervals of one (owner, track, lane) never overlap
    (touching ends are allowed); as few lanes as the overlap needs."""
    lanes = np.zeros(owner.size, dtype=np.int64)
    order = np.lexsort((end, start, track, owner))
    key = None
    lane_ends: list[float] = []
    for i in order:
        k = (owner[i], track[i])
        if k != key:
            key, lane_ends = k, []
        s = start[i]
        for lane, free_at in enumerate(lane_ends):
            if free_at <= s:
                lane_ends[lane] = end[i]
                lanes[i] = lane
                break
        else:
            lane_ends.append(end[i])
            lanes[i] = len(lane_ends) - 1
    return lanes


def window_end(timeline: RunTimeline, steps: int = TRACE_STEPS) -> float:
    """When the last rank finished the first `steps` steps."""
    k = min(steps, timeline.steps) - 1
    ends = timeline.step_ends[k]
    ex = timeline.execution
    valid = ends[ends >= 0]
    return float(ex.end[valid].max()) if valid.size else float(ex.makespan)


# ----------------------------------------------------------------------------- intervals
def rank_intervals(timeline: RunTimeline, until: float) -> tuple[Interval, list[str]]:
    """Every rank's activities that start before `until`, as intervals on rank tracks,
    and the names the intervals index."""
    g, ex = timeline.graph, timeline.execution
    names = Labels(g.labels)  # the graph's labels, plus the event names made here
    parts: list[tuple[np.ndarray, ...]] = []
    early = (ex.start < until) & (ex.end > ex.start)
    track_of = {COMPUTE: 0, DATA: 1, OVERHEAD: 2}
    for category, track in track_of.items():
        sel = np.flatnonzero(early & (g.category == category) & (g.rank >= 0))
        parts.append((g.rank[sel], np.full(sel.size, track), ex.start[sel], ex.end[sel], g.label[sel], sel))
    # a host overhead or a closed-form collective is one task for all ranks (rank -1)
    shared_overhead = np.flatnonzero(early & (g.category == OVERHEAD) & (g.rank < 0))
    ranks = timeline.cluster.ranks
    if shared_overhead.size:
        r = np.tile(np.arange(ranks), shared_overhead.size)
        t = np.repeat(shared_overhead, ranks)
        parts.append((r, np.full(r.size, 2), ex.start[t], ex.end[t], g.label[t], t))
    # the collective as each rank sees it: from its entry to its exit
    for span in timeline.spans:
        entry_end = np.where(span.entry >= 0, ex.end[np.maximum(span.entry, 0)], 0.0)
        exit_end = ex.end[span.exit]
        sel = (entry_end < until) & (exit_end > entry_end)
        label = names.id(span.label)
        r = np.flatnonzero(sel)
        parts.append((r, np.full(r.size, 3), entry_end[sel], exit_end[sel], np.full(r.size, label), span.exit[sel]))
        # its steps: from the end of the rank's previous step (or its entry) to its step done
        lo, hi = span.transfers
        ids = np.arange(lo, hi)
        step_done = names.id(f"{span.label}: step done")
        done = ids[(g.kind[ids] == DELAY) & (g.label[ids] == step_done) & (g.rank[ids] >= 0)]
        if done.size:
            order = np.lexsort((done, g.rank[done]))
            done = done[order]
            rank = g.rank[done]
            step = g.detail[done]
            first = np.ones(done.size, dtype=bool)
            # a rank's first step of each chunk starts at its entry (chunks restart at step 0)
            first[1:] = (rank[1:] != rank[:-1]) | (step[1:] <= step[:-1])
            prev_end = np.empty(done.size)
            prev_end[1:] = ex.end[done[:-1]]
            prev_end[first] = entry_end[rank[first]]
            end = ex.end[done]
            keep = (prev_end < until) & (end > prev_end)
            step_names = np.array([names.id(f"{span.label}: step {int(k)}") for k in step[keep]], dtype=np.int64)
            parts.append((rank[keep], np.full(int(keep.sum()), 4), prev_end[keep], end[keep], step_names, done[keep]))
    # transfers, on the sending rank's "send" track (the receiver for a non-rank sender)
    sel = np.flatnonzero(early & (g.kind == FLOW) & (g.category == COMMUNICATION) & (g.rank >= 0))
    parts.append((g.rank[sel], np.full(sel.size, 5), ex.start[sel], ex.end[sel], g.label[sel], sel))
    cols = [np.concatenate([p[i] for p in parts]) if parts else np.zeros(0) for i in range(6)]
    return Interval(cols[0].astype(np.int64), cols[1].astype(np.int64), cols[2].astype(float),
                    cols[3].astype(float), cols[4].astype(np.int64), cols[5].astype(np.int64)), names.list


def link_intervals(timeline: RunTimeline, until: float) -> tuple[np.ndarray, ...]:
    """Busy intervals of each directed link (union of the transfers on it) before `until`:
    (link, start, end, transfers, bytes)."""
    g, ex = timeline.graph, timeline.execution
    links = timeline.cluster.topology.num_links
    sel = np.flatnonzero((g.kind == FLOW) & (g.category != COMPUTE) & (ex.start < until) & (ex.end > ex.start))
    flow, res = route_resources(timeline, g.route[sel])
    on_link = res < links
    flow, res = flow[on_link], res[on_link]
    tasks = sel[flow]
    return merge_intervals(res, ex.start[tasks], ex.end[tasks], g.amount[tasks])


# ----------------------------------------------------------------------------- outputs
def link_utilisation(timeline: RunTimeline) -> list[float]:
    """Average utilisation of every directed link of the topology over the run, in the
    topology's link order (0 for links nothing crossed)."""
    net = timeline.cluster.network
    carried = timeline.carried_per_resource()
    links = timeline.cluster.topology.num_links
    makespan = timeline.execution.makespan
    capacity = net.capacity[:links]
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where((carried[:links] > 0) & (makespan > 0), carried[:links] / (capacity * makespan), 0.0)
    return [round(float(u), 6) for u in util]


def gantt(timeline: RunTimeline, steps: int = TRACE_STEPS) -> dict[str, Any]:
    """Per-rank bars of the first steps for the report: compute, data, host overhead and
    all-reduce, for at most GANTT_MAX_RANKS ranks."""
    until = window_end(timeline, steps)
    iv, names = rank_intervals(timeline, until)
    shown = min(timeline.cluster.ranks, GANTT_MAX_RANKS)
    keep = (iv.track <= 3) & (iv.owner < shown)
    order = np.lexsort((iv.start[keep], iv.owner[keep]))
    idx = np.flatnonzero(keep)[order][:GANTT_MAX_BARS]
    return {
        "ranks": int(timeline.cluster.ranks),
        "ranks_shown": int(shown),
        "steps_shown": int(min(steps, timeline.steps)),
        "window_s": until,
        "truncated": bool(int(keep.sum()) > GANTT_MAX_BARS),
        "rank_nodes": list(timeline.cluster.rank_nodes[:shown]),
        "bars": [[int(iv.owner[i]), RANK_TRACKS[int(iv.track[i])], float(iv.start[i]), float(iv.end[i]),
                  names[int(iv.name[i])]] for i in idx],
    }


def chrome_trace(timeline: RunTimeline, title: str, steps: int = TRACE_STEPS,
                 max_events: int = MAX_TRACE_EVENTS) -> str:
    """The run's first steps in Chrome trace event format (JSON text)."""
    until = window_end(timeline, steps)
    cluster = timeline.cluster
    topo = cluster.topology
    g = timeline.graph
    node_ids = list(topo.nodes)
    pid_of = {node: i + 1 for i, node in enumerate(node_ids)}
    rank_pid = np.array([pid_of[n] for n in cluster.rank_nodes], dtype=np.int64)

    iv, names = rank_intervals(timeline, until)
    num_links = topo.num_links
    path_of: dict[int, tuple[str, str, str]] = {}  # route id -> (sender, receiver, "a b c")

    def path(route: int, rank: int) -> tuple[str, str, str]:
        found = path_of.get(route)
        if found is None:
            hops = [topo.link_names[x] for x in cluster.network.route_pairs(np.array([route]))[1].tolist()
                    if x < num_links]
            if hops:
                nodes = [h.split("->", 1)[0] for h in hops] + [hops[-1].split("->", 1)[1]]
                found = (nodes[0], nodes[-1], " ".join(nodes))
            else:
                node = cluster.rank_nodes[rank]
                found = (node, node, node)
            path_of[route] = found
        return found

    # a transfer shows on its sender's process (a parameter server's host is not a rank)
    pids = rank_pid[iv.owner] if iv.owner.size else np.zeros(0, np.int64)
    sends = np.flatnonzero(iv.track == 5)
    send_routes = g.route[iv.task[sends]].tolist()
    send_ranks = iv.owner[sends].tolist()
    pids[sends] = [pid_of[path(r, k)[0]] for r, k in zip(send_routes, send_ranks)]
    lanes = first_fit_lanes(pids, iv.track, iv.start, iv.end)
    link, l_start, l_end, l_count, l_bytes = link_intervals(timeline, until)
    link_src = [name.split("->", 1)[0] for name in topo.link_names]

    # the earliest events first, capped
    starts = np.concatenate([iv.start, l_start])
    order = np.argsort(starts, kind="stable")
    total = order.size
    order = order[:max_events]
    n_rank = iv.start.size
    rank_sel = order[order < n_rank]
    link_sel = order[order >= n_rank] - n_rank

    events: list[dict[str, Any]] = []
    used_threads: dict[tuple[int, int], str] = {}
    cols = zip(iv.owner[rank_sel].tolist(), iv.track[rank_sel].tolist(), pids[rank_sel].tolist(),
               lanes[rank_sel].tolist(), iv.name[rank_sel].tolist(), iv.task[rank_sel].tolist(),
               np.round(iv.start[rank_sel] * 1e6, 4).tolist(),
               np.round((iv.end[rank_sel] - iv.start[rank_sel]) * 1e6, 4).tolist())
    amount, detail, route = g.amount, g.detail, g.route
    for rank, track, pid, lane, name, task, ts, dur in cols:
        category = RANK_TRACKS[track]
        tid = _TRACK_TID[category] + lane
        if (pid, tid) not in used_threads:
            used_threads[(pid, tid)] = category + (f" #{lane + 1}" if lane else "")
        ev: dict[str, Any] = {"name": names[name], "cat": category, "ph": "X", "ts": ts, "dur": dur,
                              "pid": pid, "tid": tid}
        if track == 5 and task >= 0:
            _, receiver, hops = path(int(route[task]), rank)
            ev["args"] = {"bytes": float(amount[task]), "step": int(detail[task]), "to": receiver, "route": hops}
        elif track == 0 and task >= 0:
            ev["args"] = {"work_s": float(amount[task])}
        events.append(ev)
    lcols = zip(link[link_sel].tolist(), np.round(l_start[link_sel] * 1e6, 4).tolist(),
                np.round((l_end[link_sel] - l_start[link_sel]) * 1e6, 4).tolist(), l_count[link_sel].tolist(),
                l_bytes[link_sel].tolist(), (l_end[link_sel] - l_start[link_sel]).tolist())
    for li, ts, dur, count, nbytes, seconds in lcols:
        pid = pid_of[link_src[li]]
        tid = _LINK_TID + li
        if (pid, tid) not in used_threads:
            used_threads[(pid, tid)] = f"link {topo.link_names[li]} ({topo.link_kinds[li]}, " \
                                       f"{topo.capacity_Bps[li] / 1e9:g} GB/s)"
        events.append({"name": f"busy ({count} transfer{'s' if count != 1 else ''})", "cat": "link", "ph": "X",
                       "ts": ts, "dur": dur, "pid": pid, "tid": tid,
                       "args": {"transfers": count, "bytes": nbytes,
                                "average_GBps": round(nbytes / seconds / 1e9, 6) if seconds > 0 else 0.0}})
    events.sort(key=lambda e: (e["ts"], e["pid"], e["tid"]))

    meta: list[dict[str, Any]] = []
    rank_of = {node: r for r, node in enumerate(cluster.rank_nodes)}
    used_pids = sorted({pid for pid, _ in used_threads} | set(rank_pid.tolist()))
    for node in node_ids:
        pid = pid_of[node]
        if pid not in used_pids:
            continue
        kind = topo.nodes[node].kind
        label = f"{node} ({kind}, rank {rank_of[node]})" if node in rank_of else f"{node} ({kind})"
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": label}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                     "args": {"sort_index": rank_of.get(node, len(rank_of) + pid)}})
    for (pid, tid), label in sorted(used_threads.items()):
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    doc = {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "title": title,
            "steps_shown": int(min(steps, timeline.steps)),
            "steps_simulated": int(timeline.steps),
            "window_us": _us(until),
            "events": len(events),
            "events_in_window": int(total),
            "truncated": bool(total > max_events),
        },
    }
    return json.dumps(doc, separators=(",", ":"), allow_nan=False)


def _us(seconds: float) -> float:
    return round(float(seconds) * 1e6, 4)


def run_details(timeline: RunTimeline, *, full: bool, title: str) -> dict[str, Any]:
    """What a worker sends back beside the run's record: always the link utilisation of
    every link; with `full`, the Gantt of the first steps and the Chrome trace."""
    details: dict[str, Any] = {"link_utilization": link_utilisation(timeline)}
    if full:
        details["gantt"] = gantt(timeline)
        details["trace"] = chrome_trace(timeline, title)
    return details
