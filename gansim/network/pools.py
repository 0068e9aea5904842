"""Work that shares a pool and nothing else, timed without the event engine.

A GPU rank's input pipeline is one loader thread (a resource of capacity 1 that only it
uses) on its host's cores (a pool of capacity `cores`). Where a host has fewer cores than
GPU ranks, its loaders share the pool: while n of them run, each gets min(1, cores / n),
which is what max-min fair sharing (gansim/network/flows.py) gives them. The pools of
different hosts share nothing, so every pool is a processor-sharing queue of its own,
and all of them are played at once: one numpy pass per event of the busiest pool
(an arrival or a completion), over every pool together.

The arithmetic is the flow network's: at every event the remaining work of each running
flow drops by rate x elapsed time; a completion ends every flow whose remaining time is
within `SAME_TIME_RTOL` of the soonest. The flow network also advances a pool's flows at
events of other pools, so the two can differ in the last digits (tests/test_scale.py
holds them to 1e-9 against the event engine)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gansim.core.errors import SimulationError
from gansim.network.flows import SAME_TIME_RTOL


def shared_pool_ends(start: np.ndarray, amount: np.ndarray, own_capacity: np.ndarray, pool: np.ndarray,
                     pool_capacity: np.ndarray) -> np.ndarray:
    """End time of each flow i, which starts at start[i] with amount[i] of work, may move at
    most own_capacity[i] per second on its own, and shares pool[i] (an index into
    pool_capacity) with the other flows of that pool."""
    n = start.size
    if n == 0:
        return np.zeros(0)
    order = np.lexsort((start, pool))
    pools, first, counts = np.unique(pool[order], return_index=True, return_counts=True)
    width = int(counts.max())
    row = np.repeat(np.arange(pools.size), counts)
    col = np.arange(n) - np.repeat(first, counts)
    shape = (pools.size, width)
    begin = np.full(shape, np.inf)
    begin[row, col] = start[order]
    remaining = np.zeros(shape)
    remaining[row, col] = amount[order]
    own = np.ones(shape)
    own[row, col] = own_capacity[order]
    capacity = np.asarray(pool_capacity, dtype=float)[pools][:, None]
    end = np.full(shape, np.nan)
    exists = np.zeros(shape, dtype=bool)
    exists[row, col] = True
    arrived = ~exists
    done = ~exists
    now = begin.min(axis=1)
    while not done.all():
        active = arrived & ~done
        running = active.sum(axis=1, keepdims=True)
        rate = np.where(active, np.minimum(own, capacity / np.maximum(running, 1)), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            finish = np.where(active, remaining / rate, np.inf)
        soonest = finish.min(axis=1)
        next_arrival = np.where(arrived, np.inf, begin).min(axis=1)
        live = ~done.all(axis=1)
        # a pool's next event: a completion, unless a flow arrives first
        completes = live & (now + soonest <= next_arrival)
        arrives = live & ~completes
        elapsed = np.where(completes, soonest, np.where(arrives, next_arrival - now, 0.0))
        elapsed = np.where(np.isfinite(elapsed), elapsed, 0.0)
        remaining = np.where(active, np.maximum(remaining - rate * elapsed[:, None], 0.0), remaining)
        ending = active & completes[:, None] & (finish <= (soonest * (1 + SAME_TIME_RTOL))[:, None])
        now = np.where(completes, now + soonest, np.where(arrives, next_arrival, now))
        end = np.where(ending, now[:, None], end)
        done |= ending
        joining = ~arrived & arrives[:, None] & (begin <= now[:, None])
        arrived |= joining
        # work of nothing ends as it arrives, as the flow network ends it
        empty = joining & (remaining <= 0.0)
        end = np.where(empty, now[:, None], end)
        done |= empty
    out = np.empty(n)
    out[order] = end[row, col]
    return out


@dataclass
class PooledGroup:
    """One phase's flows on shared pools (one per rank, each after its rank's `entry`
    task): the engine's solver for them, and the span over which each pool was used."""

    entry: np.ndarray  # per flow: the task after which it starts (-1: the run's start)
    amount: np.ndarray
    own_capacity: np.ndarray
    pool: np.ndarray  # per flow: its pool's resource
    pool_capacity: np.ndarray  # per resource (the network's capacities)
    ends: np.ndarray | None = None
    starts: np.ndarray | None = field(default=None, repr=False)

    def solve(self, now: float, end: np.ndarray) -> np.ndarray:
        """Every flow's end, from its entry's end (the engine asks once every entry has
        ended: a gathered solve, TaskGraph.add_solved)."""
        if self.ends is not None:
            return self.ends
        start = np.where(self.entry >= 0, end[np.maximum(self.entry, 0)], 0.0)
        if np.isnan(start).any():
            raise SimulationError("a pooled phase started before every rank's previous task ended")
        self.starts = start
        self.ends = shared_pool_ends(start, self.amount, self.own_capacity, self.pool, self.pool_capacity)
        return self.ends

    def spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(pool, first start, last end) of every pool the group used."""
        if self.ends is None or self.starts is None:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        used, inverse = np.unique(self.pool, return_inverse=True)
        first = np.full(used.size, np.inf)
        last = np.full(used.size, -np.inf)
        np.minimum.at(first, inverse, self.starts)
        np.maximum.at(last, inverse, self.ends)
        return used, first, last


def groups_overlap(groups: list[PooledGroup]) -> bool:
    """Whether two groups used one pool at the same time (each was timed as if it had the
    pool to itself)."""
    spans = [group.spans() for group in groups]
    if len(spans) < 2:
        return False
    pool, lo, hi = (np.concatenate(x) for x in zip(*spans))
    order = np.lexsort((lo, pool))
    pool, lo, hi = pool[order], lo[order], hi[order]
    # per pool in start order: a span overlaps when an earlier one reaches past its start
    # (pools laid end to end on one axis, so one running maximum serves them all)
    width = float(max(hi.max(), 0.0)) - float(min(lo.min(), 0.0)) + 1.0
    offset = pool * width
    reach = np.maximum.accumulate(hi + offset)
    same = pool[1:] == pool[:-1]
    return bool((same & (reach[:-1] > lo[1:] + offset[1:])).any())
