"""A task graph executed on the flow network.

Every piece of a simulated step is a task: a *flow* (bytes over a route, or seconds of
work on a compute resource, both shared max-min fairly by `FlowNetwork`), a *delay*
(fixed time, e.g. a local reduction or a host overhead; one with a route is work that ran
alone on that route, which then carried its amount, and takes what a flow alone on it
would: the route's latency, then the amount at its slowest resource's rate) or a *solved*
task, whose end is computed when it starts by the function it was added with (a whole
collective timed without the flow network, gansim/collectives/uncontended.py). A task
starts when all of its predecessors have ended. Only flows need the clock: delays and
solved tasks are timed as soon as their predecessors' ends are known, and flows that become
ready at the same instant are started together, so a step of many ranks costs a handful of
numpy calls and an event per batch of flows, not one Python event per rank.

A graph without flows shares nothing: nothing a task does changes when another ends, so
it is timed without events, in waves (every task whose predecessors have all been timed,
whatever the instant), with the same sums the events would add."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import numpy as np
import simpy

from gansim.core import limits
from gansim.core.errors import SimulationError
from gansim.network.flows import FlowNetwork, distinct

FLOW = 0
DELAY = 1
SOLVED = 2

def ran_alone(kind: np.ndarray, route: np.ndarray) -> np.ndarray:
    """Which tasks are delays with a route: work that ran alone on that route's resource."""
    return (kind == DELAY) & (route >= 0)


def carried_work(kind: np.ndarray, route: np.ndarray) -> np.ndarray:
    """Which tasks carried their amount over their route: flows, work that ran alone and
    solved work with a route (gansim/network/pools.py)."""
    return (kind == FLOW) | ((kind != FLOW) & (route >= 0))


# solve(now, end) -> the end time of each of its tasks, from the end times of its tasks'
# predecessors (`end`, which holds at least those)
Solver = Callable[[float, np.ndarray], np.ndarray]

# what a task's time counts as in a rank's breakdown
CATEGORIES = ("compute", "communication", "data", "overhead", "sync")
COMPUTE, COMMUNICATION, DATA, OVERHEAD, SYNC = range(len(CATEGORIES))


def moved_alone(kind: np.ndarray, route: np.ndarray, category: np.ndarray) -> np.ndarray:
    """Which tasks are transfers timed as if alone on their routes: delays with a route that
    move a collective's bytes (first steps of a played collective that meet no other work,
    gansim/training/step.py), as opposed to other work that ran alone."""
    return ran_alone(kind, route) & (category == COMMUNICATION)


class Labels:
    """Interned strings: each distinct label stored once, tasks keep its number."""

    def __init__(self, labels: list[str] | None = None):
        self.list = list(labels or [])
        self._ids = {name: i for i, name in enumerate(self.list)}

    def id(self, name: str) -> int:
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = len(self.list)
            self.list.append(name)
        return found


class TaskGraph:
    """Append-only builder of tasks and dependencies (vectorised: arrays in, ids out)."""

    def __init__(self) -> None:
        self._kind: list[np.ndarray] = []
        self._route: list[np.ndarray] = []
        self._amount: list[np.ndarray] = []
        self._rank: list[np.ndarray] = []
        self._category: list[np.ndarray] = []
        self._label: list[np.ndarray] = []
        self._detail: list[np.ndarray] = []
        self._edge_src: list[np.ndarray] = []
        self._edge_dst: list[np.ndarray] = []
        self._labels = Labels()
        self._solved: list[SolvedGroup] = []
        self.size = 0
        self.max_size = limits.TASKS.value

    @property
    def labels(self) -> list[str]:
        return self._labels.list

    def label_id(self, label: str) -> int:
        return self._labels.id(label)

    def add(self, kind: int, route: np.ndarray | int, amount: np.ndarray | float, rank: np.ndarray | int,
            category: int, label: str, count: int | None = None, detail: np.ndarray | int = -1) -> np.ndarray:
        """Add `count` tasks (or as many as the array arguments); return their ids.
        `detail` is a per-task number that qualifies the label (an all-reduce's step)."""
        arrays = [a for a in (route, amount, rank) if isinstance(a, np.ndarray)]
        n = count if count is not None else (arrays[0].size if arrays else 1)
        if self.size + n > self.max_size:  # memory grows with the graph: stop before it runs out
            limits.TASKS.check(self.size + n)
        ids = np.arange(self.size, self.size + n, dtype=np.int64)
        self._kind.append(np.full(n, kind, dtype=np.int8))
        self._route.append(np.broadcast_to(np.asarray(route, dtype=np.int64), (n,)))
        self._amount.append(np.broadcast_to(np.asarray(amount, dtype=float), (n,)))
        self._rank.append(np.broadcast_to(np.asarray(rank, dtype=np.int64), (n,)))
        self._category.append(np.full(n, category, dtype=np.int8))
        self._label.append(np.full(n, self.label_id(label), dtype=np.int32))
        self._detail.append(np.broadcast_to(np.asarray(detail, dtype=np.int32), (n,)))
        self.size += n
        return ids

    def add_solved(self, rank: np.ndarray, category: int, label: str, solve: Solver,
                   route: np.ndarray | int = -1, amount: np.ndarray | float = 0.0, gather: bool = False) -> np.ndarray:
        """Tasks (one per entry of `rank`) whose end times `solve` gives when they start; with
        a route, each is work of `amount` on it (what the run's resources carried). With
        `gather`, `solve` is asked once the predecessors of every one of them have ended
        (each still starts when its own have): work that shares something among the group
        alone, such as input pipelines on their hosts' cores (gansim/network/pools.py)."""
        ids = self.add(SOLVED, route, amount, rank, category, label, count=np.asarray(rank).size)
        self._solved.append(SolvedGroup(int(ids[0]), int(ids.size), solve, gather))
        return ids

    def depend(self, before: np.ndarray, after: np.ndarray) -> None:
        """Each `after[i]` waits for `before[i]`; negative ids in `before` mean no dependency."""
        before = np.asarray(before, dtype=np.int64)
        after = np.asarray(after, dtype=np.int64)
        before, after = np.broadcast_arrays(before, after)
        keep = before >= 0
        self._edge_src.append(before[keep])
        self._edge_dst.append(after[keep])

    def freeze(self) -> "FrozenGraph":
        """The graph as arrays. The builder's lists are let go as each is joined (a graph of
        millions of tasks would otherwise be held twice while it runs); nothing can be added
        after."""
        def cat(name: str, dtype: type) -> np.ndarray:
            parts = getattr(self, name)
            setattr(self, name, None)
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)

        src = cat("_edge_src", np.int64)
        dst = cat("_edge_dst", np.int64)
        # task ids fit in 32 bits below limits.TASKS' default: the tables of successors are
        # kept so, half the memory of a run of millions of tasks
        ids = np.int32 if self.size < np.iinfo(np.int32).max else np.int64
        succ = dst[np.argsort(src, kind="stable")].astype(ids)
        ptr = np.zeros(self.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=self.size), out=ptr[1:])
        del src
        degree = np.diff(ptr)
        narrow = np.full((self.size, _NARROW), -1, dtype=ids)
        small = np.flatnonzero((degree > 0) & (degree <= _NARROW))
        for j in range(_NARROW):
            has = small[degree[small] > j]
            narrow[has, j] = succ[ptr[has] + j]
        indegree = np.bincount(dst, minlength=self.size).astype(ids)
        del dst
        return FrozenGraph(
            narrow_succ=narrow, wide=degree > _NARROW,
            kind=cat("_kind", np.int8), route=cat("_route", np.int64), amount=cat("_amount", float),
            rank=cat("_rank", np.int64), category=cat("_category", np.int8), label=cat("_label", np.int32),
            detail=cat("_detail", np.int32), labels=list(self.labels), succ_ptr=ptr, succ=succ,
            indegree=indegree, solved=list(self._solved),
        )


@dataclass(frozen=True)
class SolvedGroup:
    first: int  # its first task; the others follow it
    count: int
    solve: Solver
    gather: bool = False  # asked once every one of its tasks is ready (TaskGraph.add_solved)


class GatheredTooLate(SimulationError):
    """A gathered group was solved once the clock had passed the end of one of its tasks,
    and that task released a flow: the flow would start late. The run must be built without
    gathering (its work as flows)."""


# Most tasks have one or two successors; those are kept in a padded table so that the
# successors of a batch of tasks are one gather instead of a ragged-array dance.
_NARROW = 2


@dataclass
class FrozenGraph:
    narrow_succ: np.ndarray  # (tasks, _NARROW) successors, -1 padded, for tasks with few
    wide: np.ndarray  # tasks with more successors than that: looked up in succ_ptr/succ
    kind: np.ndarray
    route: np.ndarray
    amount: np.ndarray
    rank: np.ndarray
    category: np.ndarray
    label: np.ndarray
    detail: np.ndarray
    labels: list[str]
    succ_ptr: np.ndarray
    succ: np.ndarray
    indegree: np.ndarray
    solved: list[SolvedGroup] = field(default_factory=list)

    @property
    def size(self) -> int:
        return int(self.kind.size)

    @cached_property
    def solved_firsts(self) -> np.ndarray:
        """Each solved group's first task, in order (the groups' tasks follow one another)."""
        return np.array([group.first for group in self.solved], dtype=np.int64)


@dataclass
class Execution:
    start: np.ndarray  # seconds, per task
    end: np.ndarray
    makespan: float
    events: int  # batches of tasks processed: SimPy events, or waves when the graph has no flows


def _successors(graph: FrozenGraph, nodes: np.ndarray, origins: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """Every dependency out of `nodes`: (the node it leaves, the successor it enters); the
    first None without `origins` (an event's release needs only the successors)."""
    rows = graph.narrow_succ[nodes]
    has = rows >= 0
    # as the platform's index type, which every array indexed with them wants (not the tables' 32 bits)
    found = rows[has].astype(np.intp)
    found_from = nodes.repeat(has.sum(axis=1)) if origins else None  # each node once per successor, in row order
    wide = nodes[graph.wide[nodes]]
    if not wide.size:
        return found_from, found
    starts = graph.succ_ptr[wide]
    lengths = graph.succ_ptr[wide + 1] - starts
    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    more = graph.succ[np.repeat(starts, lengths) + offsets].astype(np.intp)
    if found_from is not None:
        found_from = np.concatenate([found_from, np.repeat(wide, lengths)])
    return found_from, np.concatenate([found, more])


def _durations(graph: FrozenGraph, network: FlowNetwork) -> np.ndarray:
    """Every delay's duration: its amount, or for one that ran alone on a route, the time a
    flow of its amount alone on that route takes (its amount again on a route of no
    latency and capacity 1, such as a GPU's compute)."""
    duration = graph.amount.copy()
    alone = np.flatnonzero(ran_alone(graph.kind, graph.route))
    if alone.size:
        duration[alone] = network.alone_seconds(graph.route[alone], graph.amount[alone])
    return duration


def _solve(graph: FrozenGraph, tasks: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Durations of solved tasks that start at `start` (never negative: a solver that finds
    one of its tasks ending before it started says so itself). Each solver is asked once,
    at the first of its tasks' starts (a gathered one: once all of them are ready, _Gathering)."""
    out = np.zeros(tasks.size)
    group = _solved_group(graph, tasks)
    for g in distinct(group):
        solved = graph.solved[int(g)]
        mine = group == g
        their_start = start[mine]
        ends = solved.solve(float(their_start.min()), end)[tasks[mine] - solved.first]
        out[mine] = np.maximum(ends - their_start, 0.0)
    return out


def _solved_group(graph: FrozenGraph, tasks: np.ndarray) -> np.ndarray:
    """Which of graph.solved each of the solved `tasks` is in."""
    return np.searchsorted(graph.solved_firsts, tasks, side="right") - 1


class _Gathering:
    """The tasks of gathered solved groups held until every one of their group is ready."""

    def __init__(self, graph: FrozenGraph):
        self.graph = graph
        self.member = np.zeros(graph.size, dtype=bool)
        for group in graph.solved:
            if group.gather:
                self.member[group.first:group.first + group.count] = True
        self.held: dict[int, list[np.ndarray]] = {}  # per group, its tasks ready so far

    def take(self, timed: np.ndarray) -> np.ndarray:
        """Of tasks ready to be timed, those not held, and every task of a group that all of
        its tasks are now ready."""
        members = self.member[timed]
        if not members.any():
            return timed
        out = [timed[~members]]
        held = timed[members]
        group = _solved_group(self.graph, held)
        for g in distinct(group).tolist():
            ready = self.held.setdefault(g, [])
            ready.append(held[group == g])
            if sum(part.size for part in ready) == self.graph.solved[g].count:
                out.extend(self.held.pop(g))
        return np.concatenate(out)


class _Timing:
    """What both engines keep per task (start, end, the latest end among its predecessors
    so far, how many of them have not ended) and the two things they do with it: time tasks
    that are not flows, and release the successors of tasks that ended."""

    def __init__(self, graph: FrozenGraph, duration: np.ndarray, now: float):
        n = graph.size
        self.graph, self.duration = graph, duration
        self.start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.ready_at = np.full(n, float(now))
        self.waiting = graph.indegree.copy()
        # a count of its own type: numpy's ufunc.at casts a Python int on a slow path, 2 to 40
        # times the time of the subtraction itself on int32 counts
        self.one = self.waiting.dtype.type(1)
        self.gathering = _Gathering(graph)

    def time(self, tasks: np.ndarray) -> None:
        """Each of `tasks` (delays and solved tasks) starts when the last of its predecessors
        ended and ends its duration later (a solved task: when its solver says)."""
        graph, end = self.graph, self.end
        at = self.ready_at[tasks]
        self.start[tasks] = at
        durations = self.duration[tasks]
        solved = graph.kind[tasks] == SOLVED
        if solved.any():
            durations[solved] = _solve(graph, tasks[solved], at[solved], end)
        end[tasks] = np.where(durations > 0.0, at + durations, at)

    def release(self, done: np.ndarray) -> np.ndarray:
        """The successors of `done` (whose ends are set) that have no predecessor left."""
        before, succ = _successors(self.graph, done)
        if not succ.size:
            return succ
        np.maximum.at(self.ready_at, succ, self.end[before])
        np.subtract.at(self.waiting, succ, self.one)
        return distinct(succ[self.waiting[succ] == 0])


def execute(graph: FrozenGraph, env: simpy.Environment, network: FlowNetwork) -> Execution:
    """Run every task of the graph; return when and how long each ran. Only flows need the
    clock: a delay or a solved task is timed as soon as the ends of all its predecessors are
    known, ahead of the clock if they lie ahead (nothing the network does changes it: the
    rule of _execute_waves), and what it releases in turn. A batch of flows starts by one
    event at the instant the last of their predecessors ends, and flows end by the network's
    events. A step of ranks whose compute differs (`compute_cv`) thus costs events for its
    collectives' flows, not one per rank and phase."""
    duration = _durations(graph, network)
    if not bool((graph.kind == FLOW).any()):
        return _execute_waves(graph, duration, env.now)
    timing = _Timing(graph, duration, env.now)
    start, end, ready_at = timing.start, timing.end, timing.ready_at
    is_flow = graph.kind == FLOW
    later: dict[float, list[np.ndarray]] = {}  # flows waiting for the clock, by the instant they start

    def settle(ready: np.ndarray) -> None:
        """Time the tasks whose predecessors' ends are all known, and every task they release
        in turn; the flows among them start now or when the clock reaches their instant."""
        now = env.now
        due: list[np.ndarray] = []
        while ready.size:
            flows = ready[is_flow[ready]]
            if flows.size:
                at = ready_at[flows]
                if bool((at < now).any()):
                    raise GatheredTooLate("a flow was released after the instant it was to start")
                soon = at <= now
                due.append(flows[soon])
                if not soon.all():
                    # the others by instant: sorted once (stable: each batch in release order), cut where it changes
                    order = np.argsort(at[~soon], kind="stable")
                    waiting_flows, instants = flows[~soon][order], at[~soon][order]
                    cuts = np.flatnonzero(instants[1:] != instants[:-1]) + 1
                    for batch, instant in zip(np.split(waiting_flows, cuts), instants[np.r_[0, cuts]].tolist()):
                        if instant not in later:
                            later[instant] = []
                            _At(env, instant).callbacks.append(
                                lambda _e, t=instant: start_flows(np.concatenate(later.pop(t))))
                        later[instant].append(batch)
            timed = timing.gathering.take(ready[~is_flow[ready]])
            if not timed.size:
                break
            timing.time(timed)
            ready = timing.release(timed)
        if due:
            start_flows(np.concatenate(due))

    def start_flows(flows: np.ndarray) -> None:
        if flows.size:
            start[flows] = env.now
            network.start(flows, graph.route[flows], graph.amount[flows])
            network.flush()

    def complete(done: np.ndarray, now: float) -> None:
        end[done] = now
        settle(timing.release(done))

    network.on_complete = complete
    settle(np.flatnonzero(timing.waiting == 0))
    events = 0
    while True:
        try:
            env.step()
        except simpy.core.EmptySchedule:
            break
        events += 1
    return _finished(start, end, events)


class _At(simpy.events.Event):
    """An event at `instant` itself. SimPy schedules at now + delay, which cannot always land
    on an instant (where now has finer last digits, every sum near it can be a tie that
    rounds away from it), so the event goes into the environment's queue as
    Environment.schedule puts it there, at that time: flows start at the instant their last
    predecessor ends, to the last digit."""

    def __init__(self, env: simpy.Environment, instant: float):
        super().__init__(env)
        self._ok, self._value = True, None
        heapq.heappush(env._queue, (instant, simpy.events.NORMAL, next(env._eid), self))


def _execute_waves(graph: FrozenGraph, duration: np.ndarray, now: float) -> Execution:
    """execute() for a graph without flows. Each wave times every task whose predecessors
    have all been timed: it starts when the last of them ended (as the event that ended it
    would have started it) and ends its duration later (as a timeout would have: start +
    duration), so the figures are those of the events to the last digit."""
    timing = _Timing(graph, duration, now)
    wave = timing.gathering.take(np.flatnonzero(timing.waiting == 0))
    waves = 0
    while wave.size:
        waves += 1
        timing.time(wave)
        wave = timing.gathering.take(timing.release(wave))
    return _finished(timing.start, timing.end, waves)


def _finished(start: np.ndarray, end: np.ndarray, events: int) -> Execution:
    n = end.size
    if np.isnan(end).any():
        stuck = int(np.isnan(end).sum())
        raise SimulationError(f"{stuck} of {n} tasks never ran: the task graph has a cycle or a lost event")
    return Execution(start=start, end=end, makespan=float(np.nanmax(end)) if n else 0.0, events=events)
