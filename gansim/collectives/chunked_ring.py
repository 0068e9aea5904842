"""A chunked ring all-reduce that nothing else contends with, played per link without the
flow network.

With `chunks: C`, the flow network plays the ring's schedule C times (gansim/collectives/
communicator.py, play_schedule): chunk c's transfer of step k on ring edge i -> i+1 starts
when both ends have finished chunk c's step k - 1 (per-rank rendezvous, each rank's "step
done" ending when its received and its sent transfer of that step have ended, plus its
reduction time) and chunk c - 1's transfer of step k on that edge has ended. The chunks
pipeline: several of them, at most one per chunk, are on one edge at the same time.

When no resource of the ring's routes is crossed by two of its edges (and nothing from
outside meets them, which `contended` checks after the run, as for every play), the only
flows that ever share a resource are the chunks in flight on one edge. They share one
route, so the flow network gives each of the n in flight the same rate, the route's alone
rate over n: every edge is a processor-sharing server, whose jobs arrive a route latency
after they start. This module plays those servers, all edges at once, as a conservative
discrete-event simulation: each round, every edge whose next event (an arrival or a
completion) cannot be preceded by an arrival it does not know yet (one caused by an event
of a neighbouring edge, which comes a latency later at the earliest) handles that event.
A transfer's start waits for four ends (its chunk's step before on its edge and on the edges
before and after, and the chunk before's same step on its edge): a count per (chunk, edge)
and step, raised at each of these ends, says when the last has come, and the latest of them
is kept beside it, so nothing looks at the others' progress or keeps their past ends.

The figures are the flow network's up to the order of floating-point additions (it updates
every flow's remaining bytes at every event of the whole network, this at every event of its
edge), far below the 1e-9 relative tolerance tests/test_perf_ring_chunked.py holds them to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gansim.collectives.uncontended import (
    PlayPlan,
    UncontendedPlay,
    played_from_grid,
    ring_time_scale,
    shortest_period,
)

# Chunked rings of fewer transfers (over all chunks) stay on the flow network, which keeps
# every transfer for the run's details (trace) and its figures to the last digit; a play
# keeps none of its transfers, so a trace stops where the first rank joined it.
CHUNKED_MIN_TRANSFERS = 1 << 20
# flows whose finishing times agree to this relative precision end in the same event, as
# the flow network's (gansim/network/flows.py, SAME_TIME_RTOL)
_SAME_TIME_RTOL = 1e-9
# the ends counted towards a step are kept until it starts, also those of a chunk that the
# chunk before runs ahead of: ring buffers of steps per (chunk, edge), grown when a chunk runs
# further ahead (a power of 2)
_HISTORY = 64
# how often (rounds, less one: a power of 2 less one) the history is checked against the chunks' leads
_CHECK_EVERY = 15


def chunked_ring_plan(plan: PlayPlan) -> bool:
    """Whether a played plan is a ring this module can play in chunks: one successor ring
    of every participant in every step (participant i sends to i + 1), each pair one
    transfer per step, and no resource crossed by two of its pairs."""
    if len(plan.shapes) != 1:
        return False
    shape = plan.shapes[0]
    if shape.sender_slot is not None:  # a whole, whose steps move only some of its pairs
        return False
    if not shape.successor or shape.merged or plan.participants != plan.cluster.ranks:
        return False
    if plan.participants < 2 or not np.isfinite(shape.rate).all() or not (shape.rate > 0).all():
        return False
    _, res = plan.cluster.network.route_pairs(shape.route)
    return bool(np.bincount(res).max(initial=0) <= 1)  # (counted: sorting them cost a sort per bucket)


@dataclass
class _Amounts:
    """Bytes per (step, edge) of one chunk: base[offset[k] + edge], or dense[k, edge]."""

    base: np.ndarray | None
    offset: np.ndarray | None
    dense: np.ndarray | None

    @classmethod
    def of(cls, plan: PlayPlan, chunks: int) -> "_Amounts":
        steps = plan.schedule.steps
        n = plan.participants
        per_element = plan.bytes_per_element / chunks
        sized = plan.schedule.size_windows() if steps else None
        if sized is not None:
            return cls(sized[0].ravel() * per_element, np.array(sized[1], dtype=np.int64), None)
        dense = np.stack([s.size * per_element for s in steps])
        return cls(None, None, dense.reshape(len(steps), n))

    def same(self) -> float | None:
        """The bytes of every transfer where they are all the same (a ring's equal shares)."""
        values = self.base if self.base is not None else self.dense
        return float(values.flat[0]) if values.size and (values == values.flat[0]).all() else None

    def at(self, k: np.ndarray, edge: np.ndarray) -> np.ndarray:
        if self.base is not None:
            return self.base[self.offset[k] + edge]
        return self.dense[k, edge]


class ChunkedRingPlay(UncontendedPlay):
    """A play (see UncontendedPlay) of a chunked ring: `chunks` pieces pipelined per edge."""

    def __init__(self, plan: PlayPlan, gamma_s_per_byte: float, entry: np.ndarray, chunks: int, budget=None):
        super().__init__(plan, gamma_s_per_byte, entry, *(() if budget is None else (budget,)))
        self.chunks = chunks
        self._first: np.ndarray | None = None  # per edge: its first transfer's start
        self._last: np.ndarray | None = None  # and its last transfer's end
        self._carried: np.ndarray | None = None  # per edge: the bytes it carried

    def solve(self, now: float, end: np.ndarray) -> np.ndarray:
        if self.exit_times is not None:
            return self.exit_times
        plan = self.plan
        shape = plan.shapes[0]
        reduce = np.array(plan.schedule.reduces(), dtype=bool)
        amounts = _Amounts.of(plan, self.chunks)
        entry_t = np.where(self.entry >= 0, end[np.maximum(self.entry, 0)], 0.0)
        # each bucket's play once per run (played_from_grid)
        values = amounts.base if amounts.base is not None else amounts.dense
        largest = float(values.max()) if values.size else 0.0  # (bytes of a chunk's transfer)
        scale = ring_time_scale(reduce.size, shape.latency, largest / np.asarray(shape.rate, dtype=float))

        def play(joins: np.ndarray) -> tuple[np.ndarray, ...]:
            played = play_periodic_chunked_ring(joins, shape.latency, shape.rate, amounts, reduce,
                                                self.gamma_s_per_byte, self.chunks)
            return played if played is not None else play_chunked_ring(
                joins, shape.latency, shape.rate, amounts, reduce, self.gamma_s_per_byte, self.chunks)

        exits, first, last = played_from_grid(entry_t, scale, plan.chunked_plays,
                                              (self.gamma_s_per_byte, self.chunks), play)
        self._first, self._last = first, last
        if self._carried is None:
            self._carried = carried_bytes(amounts, plan.participants, len(reduce), self.chunks)
        self.exit_times = exits
        self.early_exit = bool((exits < now).any())
        return exits

    def carried(self) -> tuple[np.ndarray, np.ndarray]:
        plan = self.plan
        if self.exit_times is None or self._carried is None:
            return np.zeros(0, np.int64), np.zeros(0)
        return plan.shapes[0].route, self._carried

    def resource_spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._first is None:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        flow, res = self.plan.cluster.network.route_pairs(self.plan.shapes[0].route)
        return res, self._first[flow], self._last[flow]


def carried_bytes(amounts: _Amounts, edges: int, steps: int, chunks: int) -> np.ndarray:
    """Bytes each edge carried, added up transfer by transfer in the order the flow network's
    tally adds them (chunk by chunk, step by step), so that equal links stay equal to the
    last digit and the run's bottleneck is the same link; where every transfer moves the
    same bytes, their product (equal links equal all the same)."""
    same = amounts.same()
    if same is not None:
        return np.full(edges, same * (steps * chunks))
    total = np.zeros(edges)
    for _ in range(chunks):
        for k in range(steps):
            if amounts.base is not None:
                off = amounts.offset[k]
                total += amounts.base[off:off + edges]
            else:
                total += amounts.dense[k]
    return total


# A play of a ring alike in every period is extrapolated from plays of this many steps a
# phase and more (a whole number of `_REGIME_STEPS` more), where they say it has settled into
# a regime that repeats every `_REGIME_STEPS` steps: the same ends, later by the same time,
# to this precision relative to the time the plays take (so that extrapolating a few hundred
# regimes stays far below the 1e-9 the plays are held to; a regime not yet settled shows as more)
_SETTLED_STEPS = 128
_REGIME_STEPS = 64
_REGIME_RTOL = 1e-12
# Rings that repeat machine by machine (periods up to this many ranks) are extrapolated so;
# those that repeat only over a fabric's leaf groups (a rail fabric's 256 ranks, whose
# crossings between leaf groups are one link longer) did not settle into a 64-step regime
# in plays of 128 or 2P steps (at 1,024 and 4,096 GPUs), and are played whole on one period
_SETTLING_PERIOD_MAX = 64


def play_periodic_chunked_ring(entry: np.ndarray, latency: np.ndarray, rate: np.ndarray, amounts: _Amounts,
                               reduce: np.ndarray, gamma: float,
                               chunks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """play_chunked_ring's figures for a ring whose ranks repeat every P (P < p: rates,
    latencies and entries; machines that copy one another, joined alike; leaf groups or pods
    of a fabric) and whose every transfer moves the same bytes (a ring's equal shares), from
    plays of the ring of P closed on itself, which is the same ring: every rank's events are
    its copy's in each period. Where its phases (the reduce-scatter's K1 steps, then the
    all-gather's K2) are long, each phase settles into a regime that repeats every
    _REGIME_STEPS steps, every end later by the same time: plays of the first _SETTLED_STEPS
    or so steps of each phase, then of one and two regimes more of each, say by how much, and
    check that it holds, and the ends of the whole phases follow (so a 16,384-rank ring's
    32,766 steps are six plays of a few hundred steps on 8 ranks). Without a reduction cost
    the two phases are alike (a step's phase only says whether its ranks reduce what they
    received), so the ring is one phase of K1 + K2 steps: three plays. None where the ranks
    do not repeat, the bytes differ, or the steps are not one reduce-scatter then one
    all-gather; where the plays do not settle, or would play more steps than the ring has,
    or P is longer than a machine (_SETTLING_PERIOD_MAX), the ring of P is played step by step."""
    p = entry.size
    same = amounts.same()
    period = shortest_period(latency, rate, entry, longest=p // 2)
    if same is None or period is None:
        return None
    k1 = int(np.count_nonzero(reduce))
    k2 = reduce.size - k1
    if k1 == 0 or k2 == 0 or not reduce[:k1].all():
        return None
    copies = p // period
    base = np.full(3 * period, same)

    def play(steps1: int, steps2: int, origin: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        phases = np.concatenate([np.ones(steps1, dtype=bool), np.zeros(steps2, dtype=bool)])
        small = _Amounts(base, np.full(phases.size, period, dtype=np.int64), None)
        return play_chunked_ring(entry[:period] - origin, latency[:period], rate[:period], small, phases, gamma,
                                 chunks)

    def play_side_by_side(lengths: list[int], origin: float) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """play(n, 0, origin) for each n of `lengths`, as rings side by side in one play
        (gamma 0 only: the phases do not matter), each its own play's figures."""
        rings = len(lengths)
        wide = _Amounts(np.full((rings + 1) * period, same), np.full(max(lengths), period, dtype=np.int64), None)
        played = play_chunked_ring(np.tile(entry[:period] - origin, rings), np.tile(latency[:period], rings),
                                   np.tile(rate[:period], rings), wide, np.ones(max(lengths), dtype=bool), gamma,
                                   chunks, ring=period, ring_steps=np.array(lengths, dtype=np.int64))
        return [tuple(a[r * period:(r + 1) * period] for a in played) for r in range(rings)]

    tile = _tiler(copies)
    q = _REGIME_STEPS
    # (timed from the first rank's joining, so that the check's precision is the ring's own)
    origin = float(entry.min())
    if period > _SETTLING_PERIOD_MAX:
        return tile(play(k1, k2))
    if gamma == 0:
        steps = k1 + k2
        start = _SETTLED_STEPS + (steps - _SETTLED_STEPS) % q
        if steps <= 3 * start + 3 * q:  # (the three plays would take as many steps as the ring)
            return tile(play(k1, k2))
        at, one, two = play_side_by_side([start, start + q, start + 2 * q], origin)
        exits, first, last = at
        d_exit, d_last = one[0] - exits, one[2] - last
        if not (_close(two[0], exits + 2 * d_exit, float(np.abs(two[2]).max()))
                and _close(two[2], last + 2 * d_last, float(np.abs(two[2]).max()))):
            return tile(play(k1, k2))
        m = (steps - start) // q
        return tile((exits + m * d_exit + origin, first + origin, last + m * d_last + origin))
    start1 = _SETTLED_STEPS + (k1 - _SETTLED_STEPS) % q
    start2 = _SETTLED_STEPS + (k2 - _SETTLED_STEPS) % q
    if k1 < start1 + 2 * q or k2 < start2 + 2 * q or k1 + k2 <= 6 * (start1 + start2) + 8 * q:
        return tile(play(k1, k2))
    at = play(start1, start2, origin)
    one = play(start1 + q, start2, origin), play(start1, start2 + q, origin)
    two = play(start1 + 2 * q, start2, origin), play(start1, start2 + 2 * q, origin)
    both = play(start1 + q, start2 + q, origin)
    exits, first, last = at
    by = [(one[i][0] - exits, one[i][2] - last) for i in (0, 1)]
    expected = [(exits + 2 * d_exit, last + 2 * d_last) for d_exit, d_last in by]
    expected_both = (exits + by[0][0] + by[1][0], last + by[0][1] + by[1][1])
    span = float(np.abs(both[2]).max())
    if not all(_close(got[0], want[0], span) and _close(got[2], want[1], span)
               for got, want in [*zip(two, expected), (both, expected_both)]):
        return tile(play(k1, k2))
    m1, m2 = (k1 - start1) // q, (k2 - start2) // q
    return tile((exits + m1 * by[0][0] + m2 * by[1][0] + origin, first + origin,
                 last + m1 * by[0][1] + m2 * by[1][1] + origin))


def _tiler(copies: int):
    return lambda played: tuple(np.tile(a, copies) for a in played)


def _close(got: np.ndarray, want: np.ndarray, span: float) -> bool:
    return bool((np.abs(got - want) <= _REGIME_RTOL * span).all())


def play_chunked_ring(entry: np.ndarray, latency: np.ndarray, rate: np.ndarray, amounts: _Amounts,
                      reduce: np.ndarray, gamma: float, chunks: int, ring: int | None = None,
                      ring_steps: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exit per rank, first start per edge, last end per edge) of a ring all-reduce of
    len(reduce) steps over len(entry) ranks, in `chunks` chunks, edge i (rank i to i + 1)
    taking `latency[i]`, then moving its bytes at `rate[i]` shared equally among the chunks
    on it. Rank i joins at entry[i]; after a reduce step a rank spends gamma per byte it
    received.

    Each (chunk, edge) is a lane, numbered (chunk + 1) * p + edge; lanes 0 .. p - 1 stand for
    a chunk before the first (they only take counts that nothing reads). A lane's `arrive` is
    the arrival of its next transfer once that has started (inf while it waits for what it
    depends on, nan while it moves and after its last step); a moving lane has `left` bytes
    (inf otherwise) as of its edge's `clock`. The next of an edge's moving lanes end at
    `finish` (those flagged `ending`, decided as the flow network decides it, when their
    rates were set).

    With `ring` (a divisor of len(entry)), the edges are rings of that many side by side, ring
    r of `ring_steps[r]` steps (at most len(reduce); without a reduction cost, where a step's
    phase does not matter): each ring's figures are those of a play of it alone, to the last
    digit (every edge's events are handled in the same order, with the same arithmetic),
    for the rounds of one."""
    p = entry.size
    steps = reduce.size
    ring = p if ring is None else ring
    rings = p // ring
    if ring_steps is None:
        ring_steps = np.full(rings, steps, dtype=np.int64)
    if rings * ring != p or ring_steps.size != rings or int(ring_steps.max()) > steps or (
            gamma > 0 and bool((ring_steps != steps).any())):
        raise ValueError("rings side by side: a divisor of the edges, each of at most the steps given, "
                         "all of them with a reduction cost")  # a bug, not bad input
    C = chunks
    W = (C + 1) * p
    lat = np.asarray(latency, dtype=float)
    rate = np.asarray(rate, dtype=float)
    lat_min = float(lat.min())
    history = _HISTORY
    edges = np.arange(p)
    first_of_ring = edges - edges % ring
    left_of = first_of_ring + (edges - 1) % ring  # edge i - 1 (the edge into rank i), in i's ring
    right_of = first_of_ring + (edges + 1) % ring  # edge i + 1 (and rank i + 1)
    chunk_entry = np.maximum(entry, entry[right_of])  # when both ends of an edge have joined
    lane = np.arange(W).reshape(C + 1, p)
    lane_edge = np.tile(edges, C + 1)
    lane_lat = np.tile(lat, C + 1)
    lane_chunk = np.repeat(np.arange(-1, C), p)
    # the lanes whose next transfer waits for a lane's end of its step k - 1: its own step k,
    # its neighbours' on the edges after and before (rank i's step k - 1 is done when both its
    # transfers have ended), and the chunk after's step k - 1 on its edge (the last chunk's
    # goes to a lane before the first)
    real = lane[1:]
    waiters = np.empty((4, W), dtype=np.int64)
    waiters[:, :p] = lane[0]
    waiters[:, p:] = np.stack([real, real[:, right_of], real[:, left_of], np.vstack([lane[2:], lane[:1]])]
                              ).reshape(4, -1)
    # per lane and step (at [(step + chunk) % history], so that the four ends of a lane's
    # step k - 1 count at one slot): the ends counted, 4 starting the transfer, and the latest
    # of them. The first chunk has no chunk before (counted from the start), no chunk's step
    # 0 waits for a step -1, and the first chunk's step 0 starts when its ranks have joined.
    first_chunk = np.zeros(W, dtype=np.int64)
    first_chunk[p:2 * p] = 1
    counted = np.empty((history, W), dtype=np.int64)
    counted[:] = first_chunk
    for c in range(1, C):
        counted[c & (history - 1), (c + 1) * p:(c + 2) * p] = 3
    latest = np.full((history, W), -np.inf)
    end_of = np.full(W, np.nan)  # each lane's last end
    done = np.zeros(W, dtype=np.int64)  # steps each lane has finished
    arrive = np.full(W, np.nan)
    arrive[p:2 * p] = chunk_entry + lat
    arrive[2 * p:] = np.inf
    lane_steps = np.tile(np.repeat(ring_steps, ring), C + 1)  # each lane's ring's steps
    left = np.full(W, np.inf)
    ending = np.zeros(W, dtype=bool)
    clock = np.zeros(p)
    finish = np.full(p, np.inf)
    share = np.zeros(p)  # what each chunk moving on an edge moves per second
    moving = np.zeros(p, dtype=np.int64)  # chunks moving on each edge
    # (a later chunk's step 0 starts at the end of the chunk before's, after chunk_entry)
    first = chunk_entry.astype(float)
    offsets = (np.arange(1, C + 1) * p)[:, None]
    arrive_real = arrive[p:].reshape(C, p)
    nxt_ring = np.empty(p + 2)  # every edge's next event, with its neighbours' across the wrap
    nxt = nxt_ring[1:-1]
    bound = np.empty(p)
    safe = np.empty(p, dtype=bool)
    limit = 1 + _SAME_TIME_RTOL
    errors = np.seterr(divide="ignore", invalid="ignore")  # (edges with nothing moving)
    try:
        rounds = 0
        while True:
            if rounds & _CHECK_EVERY == 0:
                # a lane's counts of step k share a slot with its step k + history's: keep the
                # history longer than any chunk can be ahead of the next after the coming
                # rounds (each ends at most one step per lane)
                real_done = done[p:]
                while history < 4 or (C > 1 and int((real_done[:-p] - real_done[p:]).max()) + 3 + _CHECK_EVERY
                                      >= history):
                    counted, latest = _grow(counted, latest, done, first_chunk, history, p)
                    history *= 2
                mask = history - 1
                flat_counted = counted.reshape(-1)
                flat_latest = latest.reshape(-1)
            rounds += 1
            np.fmin(finish, np.fmin.reduce(arrive_real, axis=0), out=nxt)
            now = float(nxt.min())
            if now == np.inf:
                break
            if rings == 1:
                nxt_ring[0] = nxt[-1]
                nxt_ring[-1] = nxt[0]
                np.minimum(nxt_ring[:-2], nxt_ring[2:], out=bound)
            else:
                np.minimum(nxt[left_of], nxt[right_of], out=bound)
            np.minimum(bound, now + lat_min, out=bound)
            bound += lat
            np.less_equal(nxt, bound, out=safe)
            S = safe.nonzero()[0]
            tau = nxt[S]
            lanes = offsets + S  # (C, s)
            finishing_edge = finish[S] <= tau
            arriving = arrive[lanes] <= tau
            any_finishing = np.count_nonzero(finishing_edge) > 0
            any_arriving = np.count_nonzero(arriving) > 0
            idle = False
            if any_finishing:
                finishing = ending[lanes]
                finishing &= finishing_edge
                lf = lanes[finishing]
                t_end = finish[lane_edge[lf]]
                end_of[lf] = t_end
                k = done[lf]
                k += 1
                done[lf] = k
                # (a lane's `arrive` once it has finished k steps: inf until its last, then nan)
                arrive[lf] = np.where(k < lane_steps[lf], np.inf, np.nan)
                # every edge's moving chunks end, nothing arrives: the edges fall idle
                idle = not any_arriving and lf.size == int(moving[S].sum())
            if idle:
                left[lf] = np.inf
                finish[S] = np.inf
                clock[S] = tau
                moving[S] = 0
            else:
                lv = left[lanes]
                if any_finishing or np.count_nonzero(moving[S]):
                    # the moving lanes brought up to the event (the others have nothing left)
                    moved = share[S] * (tau - clock[S])
                    lv -= moved
                    np.maximum(lv, 0.0, out=lv)
                if any_finishing:
                    lv[finishing] = np.inf
                if any_arriving:
                    la = lanes[arriving]
                    arrive[la] = np.nan
                    lv[arriving] = amounts.at(done[la], lane_edge[la])
                left[lanes] = lv
                # the rates of every edge that had an event, and its next completions
                count = (lv < np.inf).sum(axis=0)
                moving[S] = count
                np.maximum(count, 1, out=count)  # (an idle edge's share is never used)
                rates = rate[S] / count
                dt = lv / rates
                soonest = dt.min(axis=0)
                ending[lanes] = dt <= soonest * limit
                finish[S] = tau + soonest
                clock[S] = tau
                share[S] = rates
            if any_finishing:
                slot = k + lane_chunk[lf]
                slot &= mask
                slot *= W
                # (take, not [:, lf]: the latter is Fortran-ordered, and slow to add a row to)
                waiting = waiters.take(lf, axis=1)
                at = (waiting + slot).ravel()
                waiting = waiting.ravel()
                np.add.at(flat_counted, at, 1)  # (two of these ends can be a lane's)
                ready = np.empty((4, lf.size))
                ready[:] = t_end
                if gamma > 0:
                    # rank e's step k - 1 is done when its transfers on edges e - 1 and e have
                    # ended and it has reduced what edge e - 1 brought; rank e + 1's when edges
                    # e and e + 1 have, and it has reduced what edge e brought (rounding is
                    # monotonic: max(a, b) + r is max(a + r, b + r) to the last bit)
                    kr = k - 1
                    e = lane_edge[lf]
                    into_sender = np.where(reduce[kr], amounts.at(kr, left_of[e]) * gamma, 0.0)
                    into_receiver = np.where(reduce[kr], amounts.at(kr, e) * gamma, 0.0)
                    ready[0] += np.maximum(into_sender, into_receiver)
                    ready[1] += into_receiver  # (rank e + 1 sends on the edge after)
                    ready[2] += into_sender  # (rank e receives from the edge before)
                np.maximum.at(flat_latest, at, ready.ravel())  # (1-d: broadcast values go wrong)
                started = (flat_counted[at] == 4).nonzero()[0]
                if started.size:
                    # (a lane whose last two ends came together is here twice, with the same times)
                    at = at[started]
                    y = waiting[started]
                    start = flat_latest[at]
                    flat_counted[at] = first_chunk[y]
                    flat_latest[at] = -np.inf
                    start += lane_lat[y]
                    arrive[y] = np.minimum(arrive[y], start)  # (one past its last step stays nan)
    finally:
        np.seterr(**errors)
    if (done[p:] < lane_steps[p:]).any():
        raise RuntimeError("chunked ring play stopped before every chunk finished")  # a bug, not bad input
    last_ends = end_of[p:].reshape(C, p)
    exits = np.full(p, -np.inf)
    # what each rank reduces after the last step, when it is a reduce step
    red = amounts.at(np.full(p, steps - 1), left_of) * gamma if gamma > 0 and reduce[-1] else None
    for c in range(C):  # every rank's last step of every chunk done: what the chunks-joined task waits for
        t = np.maximum(last_ends[c, left_of], last_ends[c])
        if red is not None:
            t = np.where(red > 0, t + red, t)
        exits = np.maximum(exits, t)
    return exits, first, last_ends.max(axis=0)


def _grow(counted: np.ndarray, latest: np.ndarray, done: np.ndarray, first_chunk: np.ndarray, history: int,
          p: int) -> tuple[np.ndarray, np.ndarray]:
    """The ring buffers of counts and latest ends with twice the history, those of every
    step a lane has not started at its new slot."""
    wide = 2 * history
    grown_counted = np.empty((wide, counted.shape[1]), dtype=counted.dtype)
    grown_counted[:] = first_chunk
    grown_latest = np.full((wide, latest.shape[1]), -np.inf)
    lanes = np.arange(p, done.size)
    chunk = lanes // p - 1
    done = done[p:]
    for ahead in range(history):
        k = done + ahead + chunk
        grown_counted[k & (wide - 1), lanes] = counted[k & (history - 1), lanes]
        grown_latest[k & (wide - 1), lanes] = latest[k & (history - 1), lanes]
    return grown_counted, grown_latest
