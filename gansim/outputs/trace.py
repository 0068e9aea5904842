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
from json.encoder import encode_basestring_ascii as json_string  # json.dumps of a str, without its overhead
from typing import Any

import numpy as np

from gansim.core.arrays import ragged, rounded
from gansim.network.engine import (
    COMPUTE,
    DATA,
    DELAY,
    FLOW,
    OVERHEAD,
    Labels,
    carried_work,
    moved_alone,
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
    route: np.ndarray  # sends: the transfer's route id; -1 otherwise
    amount: np.ndarray  # sends: bytes; compute: seconds of work; NaN otherwise
    step: np.ndarray  # sends: the collective's step; -1 otherwise

    def select(self, keep: np.ndarray) -> "Interval":
        return Interval(*(getattr(self, f)[keep] for f in self.__dataclass_fields__))


# ----------------------------------------------------------------------------- helpers
def route_resources(timeline: RunTimeline, routes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flow index, resource) pairs for the given route ids."""
    return timeline.cluster.network.route_pairs(np.asarray(routes, dtype=np.int64))


def merge_intervals(group: np.ndarray, start: np.ndarray, end: np.ndarray,
                    weight: np.ndarray | None = None, base: float | None = None) -> tuple[np.ndarray, ...]:
    """Union of the intervals of each group: (group, start, end, how many merged, weight sum).
    `base`: the window each group is shifted into (default: one wider than every interval
    given; `interval_base`)."""
    if group.size == 0:
        empty = np.zeros(0)
        return np.zeros(0, np.int64), empty, empty, np.zeros(0, np.int64), empty
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    w = weight[order] if weight is not None else np.zeros(g.size)
    # shift each group into its own window so one running maximum serves all groups
    if base is None:
        base = interval_base(s, e)
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


def interval_base(start: np.ndarray, end: np.ndarray) -> float:
    """A window wider than every interval, in which merge_intervals shifts each group."""
    return float(max(end.max(), start.max(), 0.0)) - float(min(start.min(), 0.0)) + 1.0


def first_fit_lanes(owner: np.ndarray, track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per interval such that intervals of one (owner, track, lane) never overlap
    (touching ends are allowed); as few lanes as the overlap needs."""
    lanes = np.zeros(owner.size, dtype=np.int64)
    order = np.lexsort((end, start, track, owner))
    if order.size > 1:
        # a group whose every interval starts where or after the one before it ends keeps
        # lane 0 throughout: only groups with an overlap need the first-fit walk
        o, t = owner[order], track[order]
        new_group = np.ones(order.size, dtype=bool)
        new_group[1:] = (o[1:] != o[:-1]) | (t[1:] != t[:-1])
        group = np.cumsum(new_group) - 1
        overlap = np.zeros(order.size, dtype=bool)
        overlap[1:] = ~new_group[1:] & (start[order[1:]] < end[order[:-1]])
        order = order[np.isin(group, group[overlap])]
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


def kept_until(timeline: RunTimeline) -> float:
    """Until when every transfer is known: collectives played without the flow network
    keep only their first transfers (gansim/collectives/uncontended.py)."""
    until = np.inf
    ex = timeline.execution
    for span in timeline.spans:
        if span.play is None:
            continue
        if span.play.recorded is not None:
            until = min(until, span.play.recorded.until)
        else:  # none kept: nothing after the first rank joined is known
            until = min(until, float(np.where(span.entry >= 0, ex.end[np.maximum(span.entry, 0)], 0.0).min()))
    return until


# ----------------------------------------------------------------------------- intervals
_IV_FIELDS = 8


def _part(owner, track, start, end, name, route=None, amount=None, step=None) -> tuple[np.ndarray, ...]:
    n = np.asarray(owner).size
    return (np.asarray(owner, np.int64), np.broadcast_to(np.asarray(track, np.int64), (n,)), np.asarray(start, float),
            np.asarray(end, float), np.broadcast_to(np.asarray(name, np.int64), (n,)),
            np.full(n, -1, np.int64) if route is None else np.asarray(route, np.int64),
            np.full(n, np.nan) if amount is None else np.asarray(amount, float),
            np.full(n, -1, np.int64) if step is None else np.asarray(step, np.int64))


def _step_names(names: Labels, label: str, steps: np.ndarray) -> np.ndarray:
    distinct, inverse = np.unique(steps, return_inverse=True)
    ids = np.array([names.id(f"{label}: step {int(k)}") for k in distinct], dtype=np.int64)
    return ids[inverse]


def rank_intervals(timeline: RunTimeline, until: float, *, ranks: int | None = None,
                   tracks: int = len(RANK_TRACKS)) -> tuple[Interval, list[str]]:
    """Every rank's activities that start before `until`, as intervals on rank tracks,
    and the names the intervals index; only for the first `ranks` ranks and the first
    `tracks` tracks when given (the Gantt needs four tracks of a few ranks)."""
    g, ex = timeline.graph, timeline.execution
    shown = timeline.cluster.ranks if ranks is None else min(ranks, timeline.cluster.ranks)
    names = Labels(g.labels)  # the graph's labels, plus the event names made here
    parts: list[tuple[np.ndarray, ...]] = []
    early = np.flatnonzero(ex.start < until)
    early = early[(ex.end[early] > ex.start[early]) & (g.rank[early] < shown)]
    track_of = {COMPUTE: 0, DATA: 1, OVERHEAD: 2}
    for category, track in track_of.items():
        if track >= tracks:
            continue
        sel = early[(g.category[early] == category) & (g.rank[early] >= 0)]
        parts.append(_part(g.rank[sel], track, ex.start[sel], ex.end[sel], g.label[sel],
                           amount=g.amount[sel] if category == COMPUTE else None))
    # a host overhead or a closed-form collective is one task for all ranks (rank -1)
    shared_overhead = early[(g.category[early] == OVERHEAD) & (g.rank[early] < 0)]
    if shared_overhead.size and tracks > 2:
        r = np.tile(np.arange(shown), shared_overhead.size)
        t = np.repeat(shared_overhead, shown)
        parts.append(_part(r, 2, ex.start[t], ex.end[t], g.label[t]))
    for span in timeline.spans:
        entry_end = np.where(span.entry >= 0, ex.end[np.maximum(span.entry, 0)], 0.0)[:shown]
        exit_end = ex.end[span.exit[:shown]]
        if tracks > 3:  # the collective as each rank sees it: from its entry to its exit
            sel = np.flatnonzero((entry_end < until) & (exit_end > entry_end))
            parts.append(_part(sel, 3, entry_end[sel], exit_end[sel], names.id(span.label)))
        if tracks > 4:
            parts += _step_parts(timeline, span, entry_end, until, shown, names)
        if tracks > 5:
            parts += _send_parts(timeline, span, until, shown, names)
    cols = [np.concatenate([p[i] for p in parts]) if parts else np.zeros(0) for i in range(_IV_FIELDS)]
    return Interval(cols[0].astype(np.int64), cols[1].astype(np.int64), cols[2].astype(float),
                    cols[3].astype(float), cols[4].astype(np.int64), cols[5].astype(np.int64),
                    cols[6].astype(float), cols[7].astype(np.int64)), names.list


def _step_parts(timeline: RunTimeline, span, entry_end: np.ndarray, until: float, shown: int,
                names: Labels) -> list[tuple[np.ndarray, ...]]:
    """A collective's steps on each rank: from the end of the rank's previous step (or its
    entry) to the end of this one."""
    g, ex = timeline.graph, timeline.execution
    # the steps on the flow network (all of them, or a played collective's first ones), then
    # the ones its play kept
    lo, hi = span.transfers
    ids = np.arange(lo, hi)
    step_done = names.id(f"{span.label}: step done")
    done = ids[(g.kind[ids] == DELAY) & (g.label[ids] == step_done) & (g.rank[ids] >= 0) & (g.rank[ids] < shown)]
    rank, step, end = g.rank[done], g.detail[done], ex.end[done]
    rec = span.play.recorded if span.play is not None else None
    if rec is not None:
        mine = rec.done_participant < shown
        rank = np.concatenate([rank, rec.done_participant[mine]])
        step = np.concatenate([step, rec.done_step[mine]])
        end = np.concatenate([end, rec.done_end[mine]])
    # a play's steps by their number; the flow network's by task (chunks restart at step 0)
    order = np.lexsort((step, rank)) if span.play is not None else np.lexsort((done, rank))
    rank, step, end = rank[order], step[order], end[order]
    if not rank.size:
        return []
    first = np.ones(rank.size, dtype=bool)
    # a rank's first step of each chunk starts at its entry (chunks restart at step 0)
    first[1:] = (rank[1:] != rank[:-1]) | (step[1:] <= step[:-1])
    prev_end = np.empty(rank.size)
    prev_end[1:] = end[:-1]
    prev_end[first] = entry_end[rank[first]]
    keep = (prev_end < until) & (end > prev_end)
    return [_part(rank[keep], 4, prev_end[keep], end[keep], _step_names(names, span.label, step[keep]))]


def _send_parts(timeline: RunTimeline, span, until: float, shown: int,
                names: Labels) -> list[tuple[np.ndarray, ...]]:
    """A collective's transfers, on the sending rank's "send" track (the receiver's for a
    non-rank sender)."""
    g, ex = timeline.graph, timeline.execution
    p = timeline.cluster.ranks
    # the transfers on the flow network or timed as if alone (all of them, or a played
    # collective's first steps'), then the ones its play kept
    lo, hi = span.transfers
    ids = np.arange(lo, hi)
    moved = (g.kind[ids] == FLOW) | moved_alone(g.kind[ids], g.route[ids], g.category[ids])
    sel = ids[moved & (ex.start[ids] < until) & (ex.end[ids] > ex.start[ids]) & (g.rank[ids] >= 0)
              & (g.rank[ids] < shown)]
    parts = [_part(g.rank[sel], 5, ex.start[sel], ex.end[sel], g.label[sel], g.route[sel], g.amount[sel],
                   g.detail[sel])]
    rec = span.play.recorded if span.play is not None else None
    if rec is not None:
        owner = np.where(rec.src < p, rec.src, rec.dst)
        keep = (rec.start < until) & (rec.end > rec.start) & (owner < shown)
        parts.append(_part(owner[keep], 5, rec.start[keep], rec.end[keep], names.id(f"{span.label}: transfer"),
                           rec.route[keep], rec.amount[keep], rec.step[keep]))
    return parts


def link_intervals(timeline: RunTimeline, until: float) -> tuple[np.ndarray, ...]:
    """Busy intervals of each directed link (union of the transfers on it) before `until`:
    (link, start, end, transfers, bytes)."""
    g, ex = timeline.graph, timeline.execution
    links = timeline.cluster.topology.num_links
    early = np.flatnonzero(ex.start < until)
    # what crossed links: flows, transfers timed as if alone and copies that ran alone (not
    # compute, whose routes cross no link)
    moved = carried_work(g.kind[early], g.route[early]) & (g.category[early] != COMPUTE)
    sel = early[moved & (ex.end[early] > ex.start[early])]
    routes, starts, ends, amounts = [g.route[sel]], [ex.start[sel]], [ex.end[sel]], [g.amount[sel]]
    for span in timeline.spans:
        rec = span.play.recorded if span.play is not None else None
        if rec is not None:
            keep = (rec.start < until) & (rec.end > rec.start)
            routes.append(rec.route[keep])
            starts.append(rec.start[keep])
            ends.append(rec.end[keep])
            amounts.append(rec.amount[keep])
    route, start, end, amount = (np.concatenate(x) for x in (routes, starts, ends, amounts))
    return _link_unions(timeline, links, route, start, end, amount)


def _link_unions(timeline: RunTimeline, links: int, route: np.ndarray, start: np.ndarray, end: np.ndarray,
                 amount: np.ndarray, pairs_per_batch: int = 1 << 20) -> tuple[np.ndarray, ...]:
    """merge_intervals over every (link, transfer) pair of the transfers' routes, the same
    figures, without every such pair at once (a collective's few routes may cross a hundred
    thousand links each: hundreds of MB): the links of each distinct route are found once;
    links that the same routes cross have the same transfers, merged once for all of them
    (_shared_unions); the others a batch of links at a time, each paired with the transfers
    of the routes crossing it."""
    distinct, which = np.unique(route, return_inverse=True)
    which = which.ravel()
    r_of, res = route_resources(timeline, distinct)
    on_link = res < links
    r_of, res = r_of[on_link], res[on_link]
    crosses = np.zeros(distinct.size, dtype=bool)
    crosses[r_of] = True
    counted = crosses[which]  # the transfers that cross some link
    if not counted.any():
        return merge_intervals(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    base = interval_base(start[counted], end[counted])
    # each distinct route's transfers, in their order
    by_route = np.argsort(which, kind="stable")
    first = np.searchsorted(which[by_route], np.arange(distinct.size + 1))
    # (route, link) pairs by link (each route's own in its order)
    order = np.argsort(res, kind="stable")
    r_of, res = r_of[order], res[order]
    parts = []
    shared = _shared_unions(r_of, res, distinct.size, by_route, first, start, end, amount, base)
    if shared is not None:
        parts.append(shared[0])
        r_of, res = r_of[shared[1]], res[shared[1]]
    if res.size:
        parts.append(_batched_unions(r_of, res, by_route, first, start, end, amount, base, pairs_per_batch))
    merged = tuple(np.concatenate([p[k] for p in parts]) for k in range(5))
    if len(parts) > 1:
        by_link = np.argsort(merged[0], kind="stable")  # each link's segments stay in their order
        merged = tuple(x[by_link] for x in merged)
    return merged


def _batched_unions(r_of: np.ndarray, res: np.ndarray, by_route: np.ndarray, first: np.ndarray, start: np.ndarray,
                    end: np.ndarray, amount: np.ndarray, base: float, pairs_per_batch: int) -> tuple[np.ndarray, ...]:
    """merge_intervals of the (link, transfer) pairs of these (route, link) pairs (sorted by
    link), a batch of links at a time."""
    size = (first[1:] - first[:-1])[r_of]
    ends = np.cumsum(size)
    bounds = np.append(np.flatnonzero(np.r_[True, res[1:] != res[:-1]]), res.size)  # where each link's pairs start
    parts = []
    lo = 0
    while lo < res.size:
        # as many pairs as fill the batch, whole links only (at least one link)
        full = int(np.searchsorted(ends, (ends[lo] - size[lo]) + pairs_per_batch, side="right"))
        hi = int(bounds[np.searchsorted(bounds, full, side="right") - 1])
        if hi <= lo:
            hi = int(bounds[np.searchsorted(bounds, lo, side="right")])
        count = size[lo:hi]
        at = np.repeat(first[r_of[lo:hi]] - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
        flow = by_route[at]
        link = np.repeat(res[lo:hi], count)
        keep = np.lexsort((flow, link))  # within a link, transfers in their order, as route_pairs gives them
        flow, link = flow[keep], link[keep]
        parts.append(merge_intervals(link, start[flow], end[flow], amount[flow], base=base))
        lo = hi
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(5))


SHARED_MAX_ROUTES = 1024  # _shared_unions marks each link's routes in a bit set of this many at most
SHARED_MAX_GROUPS = 256  # and merges at most this many sets of routes (one call each)


def _shared_unions(r_of: np.ndarray, res: np.ndarray, routes: int, by_route: np.ndarray, first: np.ndarray,
                   start: np.ndarray, end: np.ndarray, amount: np.ndarray,
                   base: float) -> tuple[tuple[np.ndarray, ...], np.ndarray] | None:
    """The unions of the links that the same routes cross, each set of routes merged once:
    (merge_intervals' figures for those links, the (route, link) pairs left to merge link by
    link), or None where there are too many routes or sets of them. merge_intervals decides
    whether an interval starts a new segment on values shifted by the link's window
    (link x base); the decision is the same for every link of a set unless an interval
    starts so little after the ones before it end that the shift rounds the gap away:
    such sets are left to merge link by link."""
    if routes > SHARED_MAX_ROUTES or res.size == 0:
        return None
    words = (routes + 63) // 64
    # the pairs come by link, each link's routes in ascending order (route_pairs' order)
    starts_link = np.r_[True, res[1:] != res[:-1]]
    link_ids, link_of = res[starts_link], np.cumsum(starts_link) - 1
    if ((~starts_link[1:]) & (r_of[1:] <= r_of[:-1])).any():
        return None  # not in that order, or a route that crosses a link twice (its transfers count twice)
    key = link_of * words + r_of // 64  # ascending
    first_of_key = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    bits = np.zeros(link_ids.size * words, dtype=np.uint64)
    bits[key[first_of_key]] = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), (r_of % 64).astype(np.uint64)),
                                                     first_of_key)
    if words == 1:
        sets, set_of = np.unique(bits, return_inverse=True)
        sets = sets.reshape(-1, 1)
    else:
        sets, set_of = np.unique(bits.reshape(link_ids.size, words), axis=0, return_inverse=True)
    set_of = set_of.ravel()
    if sets.shape[0] > SHARED_MAX_GROUPS:
        return None
    owner = np.repeat(np.arange(routes), first[1:] - first[:-1])  # each transfer's route, as by_route lists them
    done = np.zeros(sets.shape[0], dtype=bool)
    pieces: list[tuple[np.ndarray, ...]] = []
    for k in range(sets.shape[0]):
        members = np.flatnonzero((sets[k][owner // 64] >> (owner % 64).astype(np.uint64)) & np.uint64(1))
        flows = np.sort(by_route[members])  # the set's transfers, in their order
        s, e, w = start[flows], end[flows], amount[flows]
        order = np.argsort(s, kind="stable")
        s, e, w = s[order], e[order], w[order]
        reach = np.maximum.accumulate(e)
        gap = s[1:] - reach[:-1]
        shift = float(link_ids[set_of == k].max()) * base
        tolerance = 8.0 * float(np.spacing(shift + max(float(np.abs(s).max()), float(np.abs(e).max()))))
        if ((gap > 0) & (gap <= tolerance)).any():
            pieces.append(())
            continue
        new = np.ones(s.size, dtype=bool)
        new[1:] = gap > 0
        seg = np.cumsum(new) - 1
        seg_end = np.full(int(new.sum()), -np.inf)
        np.maximum.at(seg_end, seg, e)
        pieces.append((s[new], seg_end, np.bincount(seg, minlength=seg_end.size),
                       np.bincount(seg, weights=w, minlength=seg_end.size)))
        done[k] = True
    taken = done[set_of]
    link_sets = set_of[taken]
    lengths = np.array([p[0].size if p else 0 for p in pieces], dtype=np.int64)
    flat = [np.concatenate([p[i] for p in pieces if p]) if done.any() else np.zeros(0) for i in range(4)]
    at, which = ragged((np.cumsum(lengths) - lengths)[link_sets], lengths[link_sets])
    figures = (np.repeat(link_ids[taken], lengths[link_sets]), flat[0][at], flat[1][at],
               flat[2][at].astype(np.int64), flat[3][at])
    return figures, ~taken[link_of]


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
    return rounded(util, 6)


def gantt(timeline: RunTimeline, steps: int = TRACE_STEPS) -> dict[str, Any]:
    """Per-rank bars of the first steps for the report: compute, data, host overhead and
    all-reduce, for at most GANTT_MAX_RANKS ranks."""
    until = window_end(timeline, steps)
    shown = min(timeline.cluster.ranks, GANTT_MAX_RANKS)
    iv, names = rank_intervals(timeline, until, ranks=shown, tracks=4)
    order = np.lexsort((iv.start, iv.owner))
    idx = order[:GANTT_MAX_BARS]
    return {
        "ranks": int(timeline.cluster.ranks),
        "ranks_shown": int(shown),
        "steps_shown": int(min(steps, timeline.steps)),
        "window_s": until,
        "truncated": bool(order.size > GANTT_MAX_BARS),
        "rank_nodes": list(timeline.cluster.rank_nodes[:shown]),
        "bars": [[int(iv.owner[i]), RANK_TRACKS[int(iv.track[i])], float(iv.start[i]), float(iv.end[i]),
                  names[int(iv.name[i])]] for i in idx],
    }


def chrome_trace(timeline: RunTimeline, title: str, steps: int = TRACE_STEPS,
                 max_events: int = MAX_TRACE_EVENTS) -> str:
    """The run's first steps in Chrome trace event format (JSON text): every event that
    starts in the window, the earliest `max_events` of them. The window ends where the
    first steps end, or sooner where a collective played without the flow network kept no
    more transfers (`kept_until`)."""
    window = window_end(timeline, steps)
    until = min(window, kept_until(timeline))
    cluster = timeline.cluster
    topo = cluster.topology
    node_ids = list(topo.nodes)
    pid_of = {node: i + 1 for i, node in enumerate(node_ids)}
    rank_pid = np.array([pid_of[n] for n in cluster.rank_nodes], dtype=np.int64)

    iv, names = rank_intervals(timeline, until)
    link, l_start, l_end, l_count, l_bytes = link_intervals(timeline, until)
    # the earliest events first, capped; lanes need every interval up to the last one kept
    starts = np.concatenate([iv.start, l_start])
    order = np.argsort(starts, kind="stable")
    total = order.size
    order = order[:max_events]
    n_rank = iv.start.size
    if total > max_events:
        cut = starts[order[-1]]
        candidates = np.flatnonzero(iv.start <= cut)
        iv = iv.select(candidates)
        rank_sel = np.searchsorted(candidates, order[order < n_rank])  # in start order
    else:
        rank_sel = order[order < n_rank]
    link_sel = order[order >= n_rank] - n_rank

    num_links = topo.num_links
    path_of: dict[int, tuple[str, str, str]] = {}  # route id -> (sender, receiver, "a b c")
    sends = np.flatnonzero(iv.track == 5)
    send_routes = np.unique(iv.route[sends])
    if send_routes.size:  # every send's route that crosses links, at once
        route_of, resource = cluster.network.route_pairs(send_routes)
        bounds = np.searchsorted(route_of, np.arange(send_routes.size + 1)).tolist()
        resources = resource.tolist()
        for i, route in enumerate(send_routes.tolist()):
            hops = [topo.link_names[x] for x in resources[bounds[i]:bounds[i + 1]] if x < num_links]
            if hops:
                nodes = [h.split("->", 1)[0] for h in hops] + [hops[-1].split("->", 1)[1]]
                path_of[route] = (nodes[0], nodes[-1], " ".join(nodes))

    def path(route: int, rank: int) -> tuple[str, str, str]:
        """A send's path; one that crosses no link stays on the node of the first rank
        that sent on it."""
        found = path_of.get(route)
        if found is None:
            node = cluster.rank_nodes[rank]
            found = path_of[route] = (node, node, node)
        return found

    # a transfer shows on its sender's process (a parameter server's host is not a rank)
    pids = rank_pid[iv.owner] if iv.owner.size else np.zeros(0, np.int64)
    pids[sends] = [pid_of[path(r, k)[0]] for r, k in zip(iv.route[sends].tolist(), iv.owner[sends].tolist())]
    lanes = first_fit_lanes(pids, iv.track, iv.start, iv.end)
    link_src = [name.split("->", 1)[0] for name in topo.link_names]

    used_threads: dict[tuple[int, int], str] = {}
    # rank events, then link events; each event's JSON text is made here, in the order
    # (ts, pid, tid), as json.dumps would write it
    track = iv.track[rank_sel]
    r_pid = pids[rank_sel]
    r_tid = np.array([_TRACK_TID[t] for t in RANK_TRACKS], dtype=np.int64)[track] + lanes[rank_sel]
    l_pid = np.array([pid_of[link_src[li]] for li in link[link_sel].tolist()], dtype=np.int64)
    l_tid = _LINK_TID + link[link_sel]
    ts = np.concatenate([np.round(iv.start[rank_sel] * 1e6, 4), np.round(l_start[link_sel] * 1e6, 4)])
    dur = np.concatenate([np.round((iv.end[rank_sel] - iv.start[rank_sel]) * 1e6, 4),
                          np.round((l_end[link_sel] - l_start[link_sel]) * 1e6, 4)])
    if not (np.isfinite(ts).all() and np.isfinite(dur).all()):
        raise ValueError("Out of range float values are not JSON compliant")
    pid_all, tid_all = np.concatenate([r_pid, l_pid]), np.concatenate([r_tid, l_tid])
    event_order = np.lexsort((tid_all, pid_all, ts))
    # the threads used: a rank's activity lane, or a link (one thread per directed link)
    rank_threads = np.unique(np.stack([r_pid, r_tid, track, lanes[rank_sel]], axis=1), axis=0)
    for pid, tid, t, lane in rank_threads.tolist():
        used_threads[(pid, tid)] = RANK_TRACKS[t] + (f" #{lane + 1}" if lane else "")
    for li in np.unique(link[link_sel]).tolist():
        used_threads[(pid_of[link_src[li]], _LINK_TID + li)] = \
            f"link {topo.link_names[li]} ({topo.link_kinds[li]}, {topo.capacity_Bps[li] / 1e9:g} GB/s)"
    name_json = {n: json_string(names[n]) for n in set(iv.name[rank_sel].tolist())}
    args_json: dict[int, str] = {}  # route id -> the "to" and "route" arguments of its sends
    rank_args = []
    for t, rank, route, amount, step in zip(track.tolist(), iv.owner[rank_sel].tolist(),
                                             iv.route[rank_sel].tolist(), iv.amount[rank_sel].tolist(),
                                             iv.step[rank_sel].tolist()):
        if t == 5:
            where = args_json.get(route)
            if where is None:
                _, receiver, hops = path(route, rank)
                where = args_json[route] = f'"to":{json.dumps(receiver)},"route":{json.dumps(hops)}'
            rank_args.append(f',"args":{{"bytes":{amount!r},"step":{step},{where}}}')
        elif t == 0:
            rank_args.append(f',"args":{{"work_s":{amount!r}}}')
        else:
            rank_args.append("")
    rank_head = [f'{{"name":{name_json[n]},"cat":"{RANK_TRACKS[t]}","ph":"X"' for n, t in
                 zip(iv.name[rank_sel].tolist(), track.tolist())]
    link_head, link_args = [], []
    for count, nbytes, seconds in zip(l_count[link_sel].tolist(), l_bytes[link_sel].tolist(),
                                      (l_end[link_sel] - l_start[link_sel]).tolist()):
        link_head.append(f'{{"name":"busy ({count} transfer{"s" if count != 1 else ""})","cat":"link","ph":"X"')
        average = round(nbytes / seconds / 1e9, 6) if seconds > 0 else 0.0
        link_args.append(f',"args":{{"transfers":{count},"bytes":{float(nbytes)!r},"average_GBps":{average!r}}}')
    heads, args = rank_head + link_head, rank_args + link_args
    ts_l, dur_l, pid_l, tid_l = ts.tolist(), dur.tolist(), pid_all.tolist(), tid_all.tolist()
    events = [f'{heads[i]},"ts":{ts_l[i]!r},"dur":{dur_l[i]!r},"pid":{pid_l[i]},"tid":{tid_l[i]}{args[i]}}}'
              for i in event_order.tolist()]

    meta: list[str] = []
    rank_of = {node: r for r, node in enumerate(cluster.rank_nodes)}
    used_pids = {pid for pid, _ in used_threads} | set(rank_pid.tolist())
    for node in node_ids:
        pid = pid_of[node]
        if pid not in used_pids:
            continue
        kind = topo.nodes[node].kind
        label = json_string(f"{node} ({kind}, rank {rank_of[node]})" if node in rank_of else f"{node} ({kind})")
        meta.append(f'{{"name":"process_name","ph":"M","pid":{pid},"tid":0,"args":{{"name":{label}}}}}')
        meta.append(f'{{"name":"process_sort_index","ph":"M","pid":{pid},"tid":0,'
                    f'"args":{{"sort_index":{rank_of.get(node, len(rank_of) + pid)}}}}}')
    for (pid, tid), label in sorted(used_threads.items()):
        meta.append(f'{{"name":"thread_name","ph":"M","pid":{pid},"tid":{tid},"args":{{"name":{json_string(label)}}}}}')
        meta.append(f'{{"name":"thread_sort_index","ph":"M","pid":{pid},"tid":{tid},"args":{{"sort_index":{tid}}}}}')
    other = {
        "title": title,
        "steps_shown": int(min(steps, timeline.steps)),
        "steps_simulated": int(timeline.steps),
        "window_us": _us(until),
        "events": len(events),
        "events_in_window": int(total),
        "truncated": bool(total > max_events or until < window),
    }
    compact = {"separators": (",", ":"), "allow_nan": False}
    return ('{"traceEvents":[' + ",".join(meta + events)
            + '],"displayTimeUnit":"ms","otherData":' + json.dumps(other, **compact) + "}")


def _us(seconds: float) -> float:
    return round(float(seconds) * 1e6, 4)


def run_details(timeline: RunTimeline, *, level: str, title: str) -> dict[str, Any]:
    """What a worker sends back beside the run's record, at a detail level of the runner
    (gansim.runner.point.DETAIL_LEVELS): "links", every link's utilisation; "gantt", also
    the Gantt of the first steps; "full", also the Chrome trace."""
    details: dict[str, Any] = {"link_utilization": link_utilisation(timeline)}
    if level in ("gantt", "full"):
        details["gantt"] = gantt(timeline)
    if level == "full":
        details["trace"] = chrome_trace(timeline, title)
    return details
