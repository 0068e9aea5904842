"""Collectives that nothing contends with, timed without the flow network.

A schedule is *uncontended* when, on every resource its transfers cross, (1) within a
step only one pair of participants crosses it (several transfers of one pair in one step,
as channels are, move as one), or the pairs that do fit on it at once (their rates alone
add up to no more than its capacity: a CPU rank's core moving its send and its receive),
and (2) every pair that ever crosses it shares one participant, or all the pairs that
ever cross it fit on it at once (the rings of a hierarchical ring, one per place in a
machine, each crossing a pod's uplink where it leaves the pod). The per-rank rendezvous
then orders the transfers of different steps on a resource (the later one waits for that
participant's earlier step), so no resource ever binds: each transfer takes its route's
latency, then its bytes at its route's slowest capacity (over the route's weight on it: a
copy staged in host memory weighs 2 on that memory), exactly what the flow network gives
a flow that is alone on its route. Resources of unlimited capacity (a host's cores when
they are not counted) never bind and are left out of both rules. The whole collective is then
a max-plus recurrence over its steps, vectorised over the transfers of a step: no task per
transfer and no event per step, so a ring over 16,384 ranks (half a billion transfers) is
32,766 steps of a few numpy operations.

What (1) and (2) cannot see is traffic from *outside* the collective (another collective,
a host-to-device copy) on the same resources at the same time. The play keeps, per
resource, the interval in which it used it, and `contended` checks these after the run
against every other flow and every other uncontended play; the caller simulates the run
again on the flow network when that finds an overlap.

The recurrence adds the same floating-point terms as the flow network (start, plus the
route's latency, plus bytes / rate) but not always in the same order: where the flow
network would end a flow after several rate recomputations, the two can differ in the last
digits. Plays are therefore used only for schedules of at least
`UNCONTENDED_MIN_TRANSFERS` transfers, so small runs (and every shipped scenario) keep the
flow network's figures to the last digit; tests/test_uncontended.py holds the two to 1e-9.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable

import numpy as np

from gansim.collectives.schedules import Schedule, Step
from gansim.core.arrays import content_key
from gansim.network.cluster import Cluster

# Schedules with fewer transfers are played on the flow network, as they always were.
UNCONTENDED_MIN_TRANSFERS = 1 << 10
# Runs of fewer ranks keep every rank's compute on the flow network too; from this many, a
# compute phase that nothing else can share is timed as a delay (gansim/training/step.py),
# which differs from the flow network's timing only in the last digits, as plays do.
UNCONTENDED_MIN_RANKS = 1 << 8


# A plan keeps every step's transfer times (bytes / rate) when the schedule has at most this
# many transfers (32 MB), for the collectives of a run that play the same schedule again.
_DURATIONS_MAX_TRANSFERS = 1 << 22
# A successor ring's rates are looked at for a period up to this many slots (machines of up
# to 64 GPUs), and its base divided once per offset while that keeps at most this many floats.
_RATE_PERIOD_MAX = 64
_BASE_DURATIONS_MAX_ELEMENTS = 1 << 23
# Plays that step through every slot (a ring's loop, a chunked ring's per-edge play) start
# from joins taken on a grid of 2^-_GRID_BITS of the ring's own time scale (joined_on_grid):
# far below the 1e-9 the plays are held to against the flow network, far above the rounding
# that tells the joins of one training step's bucket from the next's, so that a run plays
# each bucket once
_GRID_BITS = 36
# A ring's loop starts so (and is reused) from this many rank-steps (4,096 ranks); smaller
# loops, which cost less than a tenth of a second, are played from the joins as they are,
# and their figures are the step-by-step play's to the last digit
_LOOP_REUSE_MIN_RANK_STEPS = 1 << 24
# A ring looped over more participants than this is looped on the period they repeat with,
# where they do (_ring_loop): below it numpy's calls cost more than their arrays
_PERIODIC_LOOP_MIN_PARTICIPANTS = 64
# A ring's loop looks every this many steps for its regime (_RingRegime), and skips a run of
# steps alike only where at least _REGIME_MIN_SKIP of them are left
_REGIME_CHECK_EVERY = 8
_REGIME_MIN_SKIP = 16


@dataclass
class _Shape:
    """The transfers of one or more steps that share their (src, dst) arrays: routes,
    latencies and rates once, and the pairs (slots) they move on."""

    slot_of: np.ndarray  # per transfer: its slot (a distinct (src, dst) pair)
    src: np.ndarray  # per slot
    dst: np.ndarray
    route: np.ndarray
    latency: np.ndarray
    rate: np.ndarray
    merged: bool  # some pair has several transfers in a step
    # when every participant sends once and receives once (a ring step): where it does
    send_slot: np.ndarray | None
    recv_slot: np.ndarray | None
    takes_part: np.ndarray  # participant ids that take part
    ring: bool  # and participant i sends slot i (src is 0, 1, 2, ...)
    successor: bool  # and to participant i + 1 (the last to the first): the ring algorithm's steps
    # a whole: the pairs of every step of some part of the schedule (PlayPlan.build), each step
    # moving between some of them, each once; per participant, the slot it sends on (-1: none).
    # A play makes each such step's shape as it reaches it, and keeps what it used and carried
    # per slot of the whole
    sender_slot: np.ndarray | None = None


@dataclass
class Recorded:
    """The first transfers of a play, as the flow network would have timed them: what the
    details of a run (trace) show. Every transfer that starts before `until` is here."""

    src: np.ndarray
    dst: np.ndarray
    route: np.ndarray
    amount: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step: np.ndarray
    done_participant: np.ndarray  # per (step, participant taking part): when it finished the step
    done_step: np.ndarray
    done_end: np.ndarray
    until: float


@dataclass
class PlayPlan:
    """What does not change between plays of one schedule of one size on one machine: the
    shapes of its steps, their transfer times and the bytes each pair carries."""

    cluster: Cluster
    schedule: Schedule
    participants: int
    bytes_per_element: float
    shapes: list[_Shape]
    step_shape: list[int]
    # filled by the first play: per shape and slot, bytes over the schedule; per step and
    # slot, bytes / rate (when the schedule is small enough to keep them)
    carried: list[np.ndarray] | None = None
    durations: list[np.ndarray] | None = None
    # per base array that steps' sizes are windows of (a ring's): its bytes
    _window_bytes: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    # per step whose bounds are such windows: (the base's bytes, where the step's window starts)
    _windows: dict[int, tuple[np.ndarray, int]] = field(default_factory=dict, repr=False)
    _last_steps: dict[int, int] | None = field(default=None, repr=False)
    _resources: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False)
    # per gamma: `ring_views`' lists (None: the schedule is not such a ring)
    _ring_views: dict[float, "RingViews | None"] = field(default_factory=dict, repr=False)
    # `periodic`'s form, once worked out (a list, so that None is an answer too)
    _periodic: list["_Periodic | None"] = field(default_factory=list, repr=False)
    _ring_run: list["_RingRun | None"] = field(default_factory=list, repr=False)  # and `ring_run`'s
    # a chunked ring's plays (gansim/collectives/chunked_ring.py), per (gamma, chunks, joins)
    chunked_plays: dict[tuple[float, int, bytes], tuple[np.ndarray, ...]] = field(
        default_factory=dict, repr=False)

    @classmethod
    def build(cls, cluster: Cluster, schedule: Schedule, participants: tuple[str, ...], nbytes: float,
              structures: dict | None = None) -> "PlayPlan | None":
        """The plan of `schedule`, or None when the schedule is not uncontended. Schedules
        that move between the same pairs step by step (one algorithm's for DDP's buckets of
        every size) share their shapes through `structures` (one table per machine, kept by
        its caller), worked out and checked once."""
        key = None if structures is None else _pairs_key(schedule, participants)
        if structures is not None and key is not None and key in structures:
            found = structures[key]
        else:
            shaped = cls._structure(cluster, schedule, participants)
            # (a table for `resources_of` goes with the shapes: it is the same for all)
            found = None if shaped is None else (*shaped, {})
            if structures is not None and key is not None:
                structures[key] = found
        if found is None:
            return None
        shapes, step_shape, resources = found
        return cls(cluster, schedule, len(participants), nbytes / schedule.count, shapes, step_shape,
                   _resources=resources)

    @staticmethod
    def _structure(cluster: Cluster, schedule: Schedule,
                   participants: tuple[str, ...]) -> tuple[list[_Shape], list[int]] | None:
        """The shapes of a schedule's steps and which shape each step has; None when the
        schedule is not uncontended."""
        n_part = len(participants)
        shapes: list[_Shape] = []
        step_shape: list[int] = []
        net = cluster.network
        pair_users: list[np.ndarray] = []  # (resource, src, dst) of every slot of every shape
        pair_loads: list[np.ndarray] = []  # and its rate alone there, times its weight on it

        def add(shape: _Shape) -> int | None:
            """The shape's index, once it keeps rule (1): within a step, one pair per resource,
            or pairs that all fit on it at once; None where it does not."""
            flow, res, weights = net.binding_pairs(shape.route)
            load = shape.rate[flow] * (1.0 if weights is None else weights)
            if not _fits_in_a_step(net, res, load):
                return None
            pair_users.append(np.stack([res, shape.src[flow], shape.dst[flow]]))
            pair_loads.append(load)
            shapes.append(shape)
            return len(shapes) - 1

        for part in schedule.parts():
            # A part whose every step moves between some of one set of pairs, each once (a ring
            # whose small buffer leaves some segments empty): the rules hold for each step if
            # they hold for the whole, as a step's pairs and its loads on each resource are some
            # of the whole's; its steps' shapes are made as a play reaches them.
            pairs = getattr(part.steps, "whole_pairs", None)
            one_pairing = pairs is None and part.one_pairing()
            whole = None
            if pairs is not None:
                whole = _whole(cluster, participants, *pairs)
            elif not one_pairing:
                whole = _successor_ring_around(cluster, participants, part.steps)
            index = None if whole is None else add(whole)
            if index is not None:
                step_shape += [index] * len(part.steps)
                continue
            if one_pairing:
                first = part.steps[0]
                index = add(_shape(cluster, participants, first.src, first.dst))
                if index is None:
                    return None
                step_shape += [index] * len(part.steps)
                continue
            by_arrays: dict[tuple[int, int], int] = {}
            alive = []  # steps made when asked for: kept, so that their arrays' ids are no other's
            for step in part.steps:
                key = (id(step.src), id(step.dst))
                index = by_arrays.get(key)
                if index is None:
                    alive.append(step)
                    index = add(_shape(cluster, participants, step.src, step.dst))
                    if index is None:
                        return None
                    by_arrays[key] = index
                step_shape.append(index)
        if not _never_bind(net.capacity, *_distinct_users(pair_users, pair_loads, n_part)):  # (2)
            return None
        return shapes, step_shape

    def resources_of(self, shapes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the slots of these shapes, one after another: per (slot, resource it crosses),
        the slot, in the order of the resources crossed; the resources crossed, sorted; and
        where each one's rows start. The same for every play of the plan, so worked out once."""
        found = self._resources.get(shapes)
        if found is None:
            net = self.cluster.network
            offsets = np.cumsum([0] + [self.shapes[k].src.size for k in shapes])
            flows, resources = [], []
            for k, at in zip(shapes, offsets.tolist()):
                flow, res, _ = net.binding_pairs(self.shapes[k].route)
                flows.append(flow + at)
                resources.append(res)
            resource = np.concatenate(resources)
            order = np.argsort(resource, kind="stable")
            resource = resource[order]
            starts = np.flatnonzero(np.concatenate([[True], resource[1:] != resource[:-1]])) if resource.size \
                else np.zeros(0, np.int64)
            found = self._resources[shapes] = (np.concatenate(flows)[order], resource[starts], starts)
        return found

    def last_steps(self) -> dict[int, int]:
        """Per shape, the last step that has it."""
        if self._last_steps is None:
            self._last_steps = {index: k for k, index in enumerate(self.step_shape)}
        return self._last_steps

    def amount(self, k: int, step: Step | None = None) -> np.ndarray:
        """Bytes per slot of step k (`step`, where the caller has it)."""
        step = self.schedule.steps[k] if step is None else step
        amount = self._window_amount(step, k)
        if amount is None:
            amount = step.size * self.bytes_per_element
        shape = self.shapes[self.step_shape[k]]
        if shape.merged:  # (never a whole, whose steps move each of its pairs once)
            amount = np.bincount(shape.slot_of, weights=amount, minlength=shape.src.size)
        return amount

    def ring_views(self, gamma: float) -> "RingViews | None":
        """Where every step is one successor ring's and names its window of one base of
        period n (a single ring's segment sizes tiled three times), per step as views of
        arrays made once for every play of the plan: its bytes (`amount`'s); its bytes / rate, where the
        rates repeat every P slots (P | n: machines that copy one another), slot i's rate at
        window start `at` being rate[(at + i - r) mod P] with r = at mod P, so the base divided
        once per r holds every step's; and, where it reduces, the bytes each participant
        receives times gamma (participant i gets slot i - 1's: the base's element at + i - 1,
        for i = 0 at + n - 1's, the same by the period). The same divisions and products as a
        step's own `amount / rate` and bincount x gamma, so the same figures to the last digit.
        None for other schedules and for rates without such a period."""
        if gamma in self._ring_views:
            return self._ring_views[gamma]
        found = None
        shape = self.shapes[0] if len(self.shapes) == 1 and self.shapes[0].sender_slot is None else None
        sized = self.schedule.size_windows() if self.schedule.steps else None
        if shape is not None and shape.successor and not shape.merged and sized is not None:
            n = shape.src.size
            size_base, windows = sized
            if size_base.size == 3 * n and min(windows) >= 1:
                window_bytes = self._window_bytes.get(id(size_base))
                if window_bytes is None:
                    window_bytes = self._window_bytes[id(size_base)] = size_base.ravel() * self.bytes_per_element
                period = _rate_period(shape.rate, window_bytes.size)
                if period is not None:
                    divided: dict[int, np.ndarray] = {}
                    for offset in {w % period for w in windows}:
                        divided[offset] = window_bytes / shape.rate[(np.arange(window_bytes.size) - offset) % period]
                    found = RingViews(n, windows, window_bytes, [divided[w % period] for w in windows],
                                      window_bytes * gamma if gamma > 0 else None, self.schedule.reduces(),
                                      period, bool((window_bytes == window_bytes[0]).all()))
        self._ring_views[gamma] = found
        return found

    def periodic(self) -> "_Periodic | None":
        """The plan on one period of P participants (_Periodic), where it has one: every step
        has every participant send once and receive once, each transfer of a step moves the
        same bytes (a ring's equal shares: a hierarchical ring's phases too), and moving every
        participant P places on (P | n) moves each transfer onto one of the same step with
        the same latency and rate (machines that copy one another). Then participants P
        places apart that start alike stay alike, step after step. None for other plans."""
        if self._periodic:
            return self._periodic[0]
        found = None
        n = self.participants
        full = all(s.sender_slot is None and not s.merged and s.send_slot is not None for s in self.shapes)
        shares = self.schedule.equal_shares() if full and n == self.cluster.ranks and n > 1 else None
        if shares is not None:
            positions = np.arange(n)
            arrays = []
            for shape in self.shapes:  # by sender: where it sends (how far on), at what latency and rate
                sent = shape.send_slot
                arrays += [(shape.dst[sent] - positions) % n, shape.latency[sent], shape.rate[sent]]
            period = shortest_period(*arrays, longest=n // 2)
            if period is not None:
                found = _Periodic(period, [_PeriodicShape.of(shape, period) for shape in self.shapes],
                                  [share * self.bytes_per_element for share in shares], self.schedule.reduces())
        self._periodic.append(found)
        return found

    def ring_run(self) -> "_RingRun | None":
        """A single ring over a buffer of fewer elements than positions (_RingRun), where the
        plan is one: its one shape is the whole ring, slot j sent by participant j; else None."""
        if self._ring_run:
            return self._ring_run[0]
        found = None
        shape = self.shapes[0] if len(self.shapes) == 1 else None
        run = self.schedule.senders_in_a_run() if shape is not None and shape.sender_slot is not None else None
        if run is not None and bool((shape.sender_slot == np.arange(self.participants)).all()):
            c, firsts = run
            amount = 1.0 * self.bytes_per_element  # a segment of one element, as Step.size has it
            found = _RingRun(c, firsts, self.schedule.reduces(), amount, amount / shape.rate)
        self._ring_run.append(found)
        return found

    def _window_amount(self, step: Step, k: int) -> np.ndarray | None:
        """Bytes per transfer of `step` as a slice, where its sizes are a window of a base
        array (a ring's steps are windows of its segment sizes tiled three times): the base's
        bytes, worked out once, are the same floating-point products as the step's own."""
        window = self._windows.get(k)
        if window is not None:  # where an earlier play found step k's window: the same slice again
            window_bytes, at = window
            return window_bytes[at:at + step.size.size]
        base = step.size.base
        if step.window < 0 or not isinstance(base, np.ndarray):
            return None
        window_bytes = self._window_bytes.get(id(base))
        if window_bytes is None:
            window_bytes = self._window_bytes[id(base)] = base.ravel() * self.bytes_per_element
        self._windows[k] = (window_bytes, step.window)
        return window_bytes[step.window:step.window + step.size.size]


def ring_time_scale(steps: int, latency: np.ndarray, transfer_s: np.ndarray | float) -> float:
    """The scale of the times a play of a ring's `steps` works out: its steps one after
    another, each at its slowest slot's latency and transfer time."""
    return steps * float(np.max(np.asarray(latency, dtype=float) + transfer_s))


def joined_on_grid(joins: np.ndarray, scale: float) -> np.ndarray:
    """`joins` (seconds after the first) up to the next multiple of the power of 2 nearest
    below scale x 2^-_GRID_BITS (exact multiples: scaling by a power of 2 rounds nothing):
    never earlier, so that nothing a play works out starts before its rank joined."""
    if not scale > 0 or not np.isfinite(scale):
        return joins
    step = 2.0 ** (np.floor(np.log2(scale)) - _GRID_BITS)
    return np.ceil(joins / step) * step


def played_from_grid(joins: np.ndarray, scale: float, memo: dict, key: tuple,
                     play: Callable[[np.ndarray], tuple[np.ndarray, ...]],
                     fresh: bool = False) -> tuple[np.ndarray, ...]:
    """The times `play` works out from `joins` taken on their grid after the first of them
    (joined_on_grid, at the play's time `scale`), moved on by that first join: played once per
    `key` and grid of joins and kept in `memo`, so that the plays of a run which join as one
    before them did but for rounding (DDP's buckets, step after step) are one. `fresh`: play
    even where the memo holds it (a play that adds up what it carried)."""
    origin = float(joins.min())
    on_grid = joined_on_grid(joins - origin, scale)
    memo_key = (*key, on_grid.tobytes())
    played = None if fresh else memo.get(memo_key)
    if played is None:
        played = memo[memo_key] = play(on_grid)
    return tuple(times + origin for times in played)


@dataclass
class RingViews:
    """Per step of a single ring's schedule (PlayPlan.ring_views), views of a few arrays
    made when asked for (32,766 steps at 16,384 ranks, 3 views each, would be 15 MB a plan)."""

    n: int  # slots
    windows: list[int]  # per step, where its window starts
    window_bytes: np.ndarray  # the base's bytes
    divided: list[np.ndarray]  # per step, the base's bytes over the rates at its window's offset
    scaled: np.ndarray | None  # the base's bytes times gamma (None: gamma 0)
    reduce: list[bool]  # per step, whether it reduces
    period: int  # the slots after which the rates repeat
    equal_shares: bool  # every step moves the same bytes on every slot

    _runs: list[tuple[int, int]] | None = None
    # the loop's plays (UncontendedPlay._looped_ring), per first step and joins on the grid:
    # the times and the last step's finishes they end at, after the first join
    loop_plays: dict[tuple[int, bytes], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.windows)

    def time_scale(self, latency: np.ndarray, first: int) -> float:
        """ring_time_scale of steps `first`..., each at its longest transfer time."""
        return ring_time_scale(self.steps - first, latency, self._longest_transfer_s)

    @cached_property
    def _longest_transfer_s(self) -> float:
        """The longest time of any slot's transfer in any step (a ring's steps share a few
        divided arrays: each scanned once)."""
        return max(float(d.max()) for d in {id(d): d for d in self.divided}.values() if d.size)

    def runs(self) -> list[tuple[int, int]]:
        """The steps as runs [start, end) that all reduce what they receive or all do not."""
        if self._runs is None:
            reducing = np.array(self.reduce, dtype=bool) & (self.scaled is not None)
            cuts = [0, *(np.flatnonzero(reducing[1:] != reducing[:-1]) + 1).tolist(), reducing.size]
            self._runs = list(zip(cuts[:-1], cuts[1:]))
        return self._runs

    def amount(self, k: int) -> np.ndarray:
        at = self.windows[k]
        return self.window_bytes[at:at + self.n]

    def duration(self, k: int) -> np.ndarray:
        at = self.windows[k]
        return self.divided[k][at:at + self.n]

    def received(self, k: int) -> np.ndarray | None:
        """Per participant, the bytes it receives in step k times gamma (None: it reduces
        nothing): participant i gets slot i - 1's, the base's element at + i - 1."""
        if not self.reduce[k] or self.scaled is None:
            return None
        at = self.windows[k] - 1
        return self.scaled[at:at + self.n]


def _settled_margin(times: np.ndarray) -> float:
    """How far a growth may be from a regime's and still count as it: four units in the last
    place of the largest time (_RingRegime, _WindowRegime)."""
    return 4.0 * float(np.spacing(np.abs(times).max()))


class _RingRegime:
    """Where a single ring's loop may skip steps. Every step of a run of steps alike (all
    reducing what they receive or none: RingViews.runs) of a ring whose every step moves the
    same bytes on every slot is one max-plus linear map of the participants' times: each
    takes the latest of its own time and its two neighbours', each plus a fixed weight (a
    transfer's latency and time, its own or its predecessor's, and the reduction). Its own
    weight is never below its neighbours' (it sends and receives those transfers itself), so
    the map's largest cycle mean is the largest own weight, lambda. Once every participant's
    time has grown by lambda in a step, the map gives every later step of the run the same
    growth (it commutes with adding a constant to every time): the run's steps up to its
    last are skipped, every time moved on by lambda times their count. Steps are looked at
    every _REGIME_CHECK_EVERY; a growth counts as lambda within a few units in the last place
    of the largest time, which bounds what the skip can differ from the steps played by that
    margin times the steps skipped (the map never widens a difference between two states),
    and the steps played differ from the exact figures by their own rounding as much."""

    def __init__(self, views: RingViews, latency: np.ndarray):
        self.views, self.latency = views, latency
        self.run_of = np.zeros(views.steps, dtype=np.int64)
        self.ends: list[int] = []
        self.rates: list[float | None] = []
        for index, (run_start, run_end) in enumerate(views.runs()):
            self.run_of[run_start:run_end] = index
            self.ends.append(run_end)
            self.rates.append(None)
        self.before: np.ndarray | None = None
        self.before_step = -1

    def rate(self, k: int) -> float:
        """lambda of step k's run: every participant's largest own weight."""
        run = int(self.run_of[k])
        found = self.rates[run]
        if found is None:
            views = self.views
            n = self.latency.size
            weight = self.latency + views.duration(k)[:n]
            own = np.maximum(weight, np.roll(weight, 1))
            received = views.received(k)
            if received is not None:
                own = own + received[:n]
            found = self.rates[run] = float(own.max())
        return found

    def skip(self, k: int, t: np.ndarray) -> int:
        """After step k played (t: the times it ends at), how many steps to skip: the run's
        steps after k but its last where the ring is in its regime; else 0."""
        left = self.ends[int(self.run_of[k])] - 1 - (k + 1)
        if left < _REGIME_MIN_SKIP:
            return 0
        if self.before is not None and self.before_step == k - 1 and self.run_of[k - 1] == self.run_of[k]:
            rate = self.rate(k)
            margin = _settled_margin(t)
            grown = t - self.before
            if float(np.abs(grown - rate).max()) <= margin:
                self.before = None
                t += rate * left
                return left
        if (k + 1) % _REGIME_CHECK_EVERY == 0:
            self.before = t.copy()
            self.before_step = k
        return 0


@dataclass
class _RingRun:
    """A single ring over c elements, fewer than its n positions (PlayPlan.ring_run): in each
    step the c positions from the step's first on (mod n) send one element each to the next,
    so c + 1 participants in a row take part."""

    c: int
    firsts: list[int]  # per step, its first sender
    reduce: list[bool]  # per step, whether it reduces
    amount: float  # the bytes of each transfer
    duration: np.ndarray  # per slot (its sender), amount / rate


class _WindowRegime:
    """Where a ring over fewer elements than positions (_RingRun) may skip steps. Its window
    of c + 1 participants moves on by one position a step, so in the window's own frame a
    step maps the window's times, the one before shifted by one and the participant that
    enters after them, to its new times by max-plus arithmetic with the weights of its
    positions (latency and transfer time of each sender, the reduction). Where those weights
    repeat every P positions (machines that copy one another), the map of step k + P is that
    of step k; once the window's times are its times P steps before plus one constant Lambda,
    for P steps in a row, every later step's times are the step P before's plus Lambda, as
    long as what enters does the same: the entering participant counts only through the
    start of the last sender's transfer (the later of its own time and the entering one),
    which must then also be the one P steps before plus Lambda. The steps are skipped up to
    the first that breaks this (or the end of a run of steps alike, or before the window
    comes round to what left it during the skip); each participant that leaves the window
    takes the time it leaves with, each slot its first start and last end and the bytes it
    sent in the steps skipped. A time counts as Lambda more within four units in the last
    place of the largest time, which bounds what the skip can differ from the steps played
    by that margin times the steps skipped, as _RingRegime's."""

    def __init__(self, run: _RingRun, period: int, n: int):
        self.run, self.period = run, period
        self.frames: list[tuple[int, np.ndarray, float]] = []  # (step, times after it, last sender's start)
        # per step, the last step of its run of steps alike: each the next one's first sender
        # and reducing or not as it does
        firsts, reduce = np.asarray(run.firsts), np.asarray(run.reduce, dtype=bool)
        alike = (firsts[1:] == (firsts[:-1] + 1) % n) & (reduce[1:] == reduce[:-1])
        breaks = np.flatnonzero(~alike)  # step i + 1 is not alike step i
        self.run_last = np.append(breaks, firsts.size - 1)[np.searchsorted(breaks, np.arange(firsts.size))]
        self.check_every = period * -(-_REGIME_MIN_SKIP // period)

    @classmethod
    def of(cls, run: _RingRun, latency: np.ndarray) -> "_WindowRegime | None":
        period = shortest_period(latency, run.duration)
        if period is None or run.c < 2:
            return None
        return cls(run, period, latency.size)

    def skip(self, k: int, times: np.ndarray, last_start: float, t: np.ndarray, used_from: np.ndarray,
             used_until: np.ndarray, carried: np.ndarray | None) -> int:
        """After step k played (`times`: the window's times after it; `last_start`: its last
        sender's start), how many steps to skip, having moved everything on over them."""
        run, P = self.run, self.period
        firsts, c = run.firsts, run.c
        n = t.size
        frames = self.frames
        if frames and (frames[-1][0] != k - 1 or self.run_last[k - 1] != self.run_last[k]):
            frames.clear()  # (not the next step of the same kind)
        frames.append((k, times.copy(), last_start))
        if len(frames) > 2 * P:
            del frames[0]
        if len(frames) < 2 * P or (k + 1) % self.check_every:
            return 0
        # the most steps that can be skipped: within the run of steps alike, before its last
        # (and the run's), and before the window meets a participant that left it in the skip
        limit = min(int(self.run_last[k]) - 1 - k, len(firsts) - 2 - k, n - c - 1)
        if limit < _REGIME_MIN_SKIP:
            return 0
        latest = times
        grown = latest - frames[P - 1][1]
        growth = float(grown[c])
        margin = _settled_margin(latest)
        for (_, now, start_now), (_, before, start_before) in zip(frames[P:], frames[:P]):
            if float(np.abs(now - before - growth).max()) > margin or abs(start_now - start_before - growth) > margin:
                return 0
        # the window after each step m = 1..limit, from the last P (before: step k - P + 1 ...)
        base = np.stack([frame for _, frame, _ in frames[P:]])  # (P, c + 1)
        m = np.arange(1, limit + 1)
        which, times_over = (m - 1) % P, ((m - 1) // P + 1) * growth
        # the last sender's start at step k + m: the later of the window's last time after
        # step k + m - 1 and the participant entering then; it must grow as the window does
        last_before = base[(m - 2) % P, c] + ((m - 2) // P + 1) * growth
        last_before[0] = base[P - 1, c]  # (step k's own)
        entering = t[(firsts[k] + c + m) % n]
        starts = np.maximum(last_before, entering)
        earlier = np.concatenate([[s for _, _, s in frames[P:]], starts])  # steps k - P + 1 ... k + limit
        off = np.abs(starts - earlier[:limit] - growth) > margin
        if off.any():
            limit = int(np.flatnonzero(off)[0])  # the steps before the first that does not grow so
            if limit < _REGIME_MIN_SKIP:
                return 0
            m, which, times_over, starts = m[:limit], which[:limit], times_over[:limit], starts[:limit]
        first_sender = (firsts[k] + m) % n  # each skipped step's first sender (and participant)
        leaving = base[which, 0] + times_over  # its time after that step: what it leaves with
        t[first_sender[:-1]] = leaving[:-1]
        window = (first_sender[-1] + np.arange(c + 1)) % n
        t[window] = base[which[-1]] + times_over[-1]
        # each slot's first start: as the last sender, when it enters; its last end: as the
        # first, when it leaves (the per-slot arrays are laid out twice, as the loop's slices)
        entered = first_sender + c - 1
        np.minimum.at(used_from, entered, starts)
        np.maximum.at(used_until, first_sender, leaving)
        if carried is not None:
            sent = np.zeros(2 * n + 1)
            np.add.at(sent, first_sender, 1.0)
            np.add.at(sent, first_sender + c, -1.0)
            counts = np.cumsum(sent[:2 * n])
            carried += (counts[:n] + counts[n:]) * run.amount
        frames.clear()
        return limit


@dataclass
class _PeriodicShape:
    """A shape whose every participant sends once and receives once, on one period of P
    participants (PlayPlan.periodic): participant h < P stands for every participant
    h + jP, which sends to and receives from participants that the period's stand for."""

    to: np.ndarray  # per participant h of the period: the one of the period its transfer goes to
    back: np.ndarray  # and the one whose transfer it receives
    latency: np.ndarray  # of h's transfer
    rate: np.ndarray
    own: bool  # every h sends to and receives from itself (a ring across machines, one per place)
    stands_for: np.ndarray  # per slot of the shape: the participant of the period whose transfer it copies

    @classmethod
    def of(cls, shape: _Shape, period: int) -> "_PeriodicShape":
        assert shape.send_slot is not None and shape.recv_slot is not None
        sent, got = shape.send_slot[:period], shape.recv_slot[:period]
        to, back = shape.dst[sent] % period, shape.src[got] % period
        own = bool((to == np.arange(period)).all() and (back == to).all())
        return cls(to, back, shape.latency[sent], shape.rate[sent], own, shape.src % period)


@dataclass
class _Periodic:
    """A plan worked out on one period of its participants (PlayPlan.periodic)."""

    period: int
    shapes: list[_PeriodicShape]  # per shape of the plan
    amounts: list[float]  # per step, the bytes each of its transfers moves
    reduce: list[bool]  # per step, whether it reduces what it receives
    # the plays of the plan (UncontendedPlay._play_periodic), per first step, shapes whose
    # first starts they take and joins on the grid: what they end at, after the first join
    plays: dict[tuple, tuple[np.ndarray, ...]] = field(default_factory=dict, repr=False)

    def time_scale(self, first: int) -> float:
        """The scale of the times a play of steps `first`... works out: each step at the
        slowest latency and the most bytes at the slowest rate of any of its shapes."""
        latency = max(float(shape.latency.max()) for shape in self.shapes)
        rate = min(float(shape.rate.min()) for shape in self.shapes)
        return ring_time_scale(len(self.amounts) - first, latency, max(self.amounts[first:]) / rate)


@dataclass
class TransferBudget:
    """How many more transfers the plays of a run may keep for its details: the first
    ones are all a trace shows (a later play's are never in its window)."""

    left: int = 0


@dataclass
class UncontendedPlay:
    """One collective played by the recurrence (see the module's docstring)."""

    plan: PlayPlan
    gamma_s_per_byte: float
    entry: np.ndarray  # per rank: the task after which it joins (-1: from the start)
    budget: TransferBudget = field(default_factory=TransferBudget)  # transfers it may keep
    first_step: int = 0  # the schedule's first step is this step of the collective (a played tail)
    exit_times: np.ndarray | None = None
    early_exit: bool = False  # a rank would have left before the last one joined
    recorded: Recorded | None = None
    _spans: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    # -- the recurrence
    def solve(self, now: float, end: np.ndarray) -> np.ndarray:
        """Every rank's exit time, given the end times of the entry tasks (all ended by now)."""
        if self.exit_times is not None:
            return self.exit_times
        plan = self.plan
        p = plan.cluster.ranks
        n_part = plan.participants
        # Each participant's time, then the first's again: what a successor ring's senders
        # wait for (t[dst]) is a slice, not a gather. Likewise every finish, after the last
        # one's again: what each receives from its predecessor.
        t_ring = np.zeros(n_part + 1)
        t = t_ring[:n_part]
        t[:p] = np.where(self.entry >= 0, end[np.maximum(self.entry, 0)], 0.0)
        finish_ring = np.empty(n_part + 1)
        start_buffer = np.empty(n_part)
        shapes, step_shape, durations = plan.shapes, plan.step_shape, plan.durations
        last_step = plan.last_steps()
        fill = plan.carried is None
        if fill:
            carried = [np.zeros(shape.src.size) for shape in shapes]
            kept: list[np.ndarray] | None = [] if plan.schedule.transfers() <= _DURATIONS_MAX_TRANSFERS else None
        # per shape (per slot of a whole, over all its steps)
        first_start: list[np.ndarray | None] = [None if shape.sender_slot is None else np.full(shape.src.size, np.inf)
                                               for shape in shapes]
        last_end: list[np.ndarray | None] = [None if shape.sender_slot is None else np.full(shape.src.size, -np.inf)
                                             for shape in shapes]
        recording = _Recorder(self.budget.left)
        gamma = self.gamma_s_per_byte
        views = plan.ring_views(gamma)
        if fill and views is not None:
            kept = None  # (the views give every step's transfer times)
        # where a ring's own loop, or the plan's period, takes over (none: every step played here)
        rest = len(plan.schedule.steps)
        periodic = plan.periodic() if views is None else None
        run = plan.ring_run() if views is None and periodic is None else None
        if fill and run is not None:
            kept = None  # (the run's transfer times are its slots')
        for k, step in enumerate(plan.schedule.steps):
            if (views is not None or run is not None) and k > 0 and not recording.wanted:
                rest = k
                break
            if periodic is not None and k > 0 and not recording.wanted:
                if _repeats(t, (n_part // periodic.period, periodic.period)):
                    rest = k
                    if fill:
                        kept = None  # (the later steps' transfer times are the period's only)
                    break
                periodic = None  # the participants did not join alike: every step played
            index = step_shape[k]
            shape = shapes[index]
            slots = None
            if shape.sender_slot is not None:  # a whole: this step moves between some of its pairs
                slots = shape.sender_slot[step.src]
                shape = _part_of_whole(shape, slots, step, n_part)
            if durations is not None:
                duration = durations[k]
            else:
                amount = plan.amount(k, step)
                duration = views.duration(k) if views is not None else amount / shape.rate
                if fill:
                    if slots is not None:
                        carried[index][slots] += amount
                    else:
                        carried[index] += amount
                    if kept is not None:
                        kept.append(duration)
            if shape.successor:  # as the ring case below, in place
                t_ring[n_part] = t_ring[0]
                start = start_buffer
                np.maximum(t, t_ring[1:], out=start)
                finish = finish_ring[1:]
                np.add(start, shape.latency, out=finish)
                finish += duration
                finish_ring[0] = finish_ring[n_part]
                done = np.maximum(finish, finish_ring[:n_part], out=t)
            elif shape.ring:  # every participant sends to one and receives from one, src in order
                start = np.maximum(t, t[shape.dst])
                finish = (start + shape.latency) + duration
                done = np.maximum(finish, finish[shape.recv_slot])
            else:
                start = np.maximum(t[shape.src], t[shape.dst])
                finish = (start + shape.latency) + duration
                if shape.send_slot is not None:
                    done = np.maximum(finish[shape.send_slot], finish[shape.recv_slot])
                else:
                    done = np.full(n_part, -np.inf)
                    np.maximum.at(done, shape.src, finish)
                    np.maximum.at(done, shape.dst, finish)
            if step.reduce and gamma > 0:
                if views is not None:  # a single ring, whose step ended in t itself
                    t += views.received(k)
                else:
                    done = done + np.bincount(shape.dst, weights=plan.amount(k, step), minlength=n_part) * gamma
            if shape.send_slot is None:
                t[shape.takes_part] = done[shape.takes_part]
            elif done is not t:  # (a successor ring's step already ended in t itself)
                t[:] = done
            if slots is not None:
                first_start[index][slots] = np.minimum(first_start[index][slots], start)
                last_end[index][slots] = np.maximum(last_end[index][slots], finish)
            else:
                if first_start[index] is None:
                    first_start[index] = start.copy()
                if last_step[index] == k:
                    last_end[index] = finish.copy()
            if recording.wanted:
                recording.add(self.first_step + k, shape, step, start, finish, t)
        if rest < len(plan.schedule.steps) and run is not None:
            self._play_run(run, rest, t, first_start[0], last_end[0], carried[0] if fill else None)
        elif rest < len(plan.schedule.steps) and views is None:
            assert periodic is not None
            self._play_periodic(periodic, rest, t, first_start, last_end, carried if fill else None)
        elif rest < len(plan.schedule.steps):
            finish = self._periodic_ring(views, rest, t_ring, finish_ring)
            if finish is not None:
                if fill:  # every step moves the same bytes on every slot
                    carried[0] += views.amount(rest) * (views.steps - rest)
            else:
                finish = self._looped_ring(views, rest, t_ring, finish_ring, start_buffer,
                                           carried[0] if fill else None)
            last_end[0] = finish.copy()
        # kept per resource, not per slot of every shape: a halving-doubling's log2(p) shapes
        # of p slots, kept for every play of a run, were hundreds of MB at 16,384 GPUs
        self._spans = self._spans_of(first_start, last_end)
        if fill:
            plan.carried, plan.durations = carried, kept
        self.recorded = recording.result(self)
        self.budget.left = max(self.budget.left - recording.count, 0)
        self.exit_times = t[:p].copy()
        self.early_exit = bool((self.exit_times < now).any())
        return self.exit_times

    def _periodic_ring(self, views: RingViews, first: int, t_ring: np.ndarray,
                       finish_ring: np.ndarray) -> np.ndarray | None:
        """Steps `first`... of a single ring whose every slot repeats every `views.period`
        slots (its rates, latencies, transfer times and reductions, and the participants'
        times so far: machines that copy one another, equal segments, ranks that joined
        alike), worked out on one period of them: every participant's time stays the same as
        its copy's in each period, so the ring of n is the ring of P closed on itself, and
        each step of it one max-plus linear map of P times, the same for every step of a
        phase, whose powers (by squaring) give the phase's end without a pass per step. The
        figures are `_ring_loop`'s up to the order in which the same terms are added. None
        where something does not repeat: the loop then plays every step."""
        period = views.period
        n_part = t_ring.size - 1
        t = t_ring[:n_part]
        steps = views.steps
        if not views.equal_shares or n_part % period or n_part == period or steps - first < 2:
            return None
        latency = self.plan.shapes[0].latency
        by_period = (n_part // period, period)
        if not (_repeats(latency, by_period) and _repeats(t, by_period)):
            return None
        weight = latency[:period] + views.duration(first)[:period]
        last = steps - 1
        state = t[:period].copy()
        k = first
        for run_start, run_end in views.runs():  # runs of steps alike: reducing or not
            run_start, run_end = max(run_start, k), min(run_end, last)
            if run_start >= run_end:
                continue
            received = views.received(run_start)
            step_map = _ring_step_map(weight, received[:period] if received is not None else None)
            state = _maxplus_apply(_maxplus_power(step_map, run_end - run_start), state)
        # the last step, as the loop plays it, for its transfers' ends
        start = np.maximum(state, np.roll(state, -1))
        finish = (start + latency[:period]) + views.duration(last)[:period]
        done = np.maximum(finish, np.roll(finish, 1))
        received = views.received(last)
        if received is not None:
            done += received[:period]
        t[:] = np.tile(done, by_period[0])
        finish_ring[1:] = np.tile(finish, by_period[0])
        finish_ring[0] = finish_ring[n_part]
        return finish_ring[1:]

    def _play_periodic(self, form: "_Periodic", first: int, t: np.ndarray, first_start: list[np.ndarray | None],
                       last_end: list[np.ndarray | None], carried: list[np.ndarray] | None) -> None:
        """Steps `first`... of a plan with a period (PlayPlan.periodic) whose participants'
        times so far repeat with it (_periodic_steps), from _LOOP_REUSE_MIN_RANK_STEPS
        period-steps on from the first participant's time, the others' on a grid
        (joined_on_grid), as a ring's loop is (_looped_ring): a run's plays that start as one
        before them did but for rounding (DDP's buckets, step after step) are worked out once."""
        period = form.period
        seen = list(dict.fromkeys(self.plan.step_shape[first:]))  # the shapes of the steps, in order
        takes_start = tuple(index for index in seen if first_start[index] is None)

        def play(joins: np.ndarray) -> tuple[np.ndarray, ...]:
            return self._periodic_steps(form, first, joins, takes_start, seen, carried)

        joins = t[:period]
        if (len(form.amounts) - first) * period < _LOOP_REUSE_MIN_RANK_STEPS:
            played = play(joins.copy())
        else:
            played = played_from_grid(joins, form.time_scale(first), form.plays, (first, takes_start), play,
                                      fresh=carried is not None)
        t[:] = np.tile(played[0], t.size // period)
        for index, start in zip(takes_start, played[1:]):
            first_start[index] = start[form.shapes[index].stands_for]
        for index, finish in zip(seen, played[1 + len(takes_start):]):
            last_end[index] = finish[form.shapes[index].stands_for]

    def _periodic_steps(self, form: "_Periodic", first: int, state: np.ndarray, takes_start: tuple[int, ...],
                        seen: list[int], carried: list[np.ndarray] | None) -> tuple[np.ndarray, ...]:
        """Steps `first`... played on the period's participants from their times `state`,
        each transfer of a step standing for its copies P, 2P, ... places on, which start, end
        and reduce at the same times. The same terms in the same order as `solve`'s loop over
        every participant, so the same figures to the last digit. A step where each
        participant of the period sends to itself (its copy: one ring per place in the
        machine, across the machines) adds its latency, transfer time and reduction to each
        time: runs of such steps are sums along the steps, accumulated in the loop's order.
        Returns the times they end at, each of `takes_start`'s first starts and each of
        `seen`'s last finishes, on the period."""
        plan = self.plan
        gamma = self.gamma_s_per_byte
        step_shape, last_step = plan.step_shape, plan.last_steps()
        starts: dict[int, np.ndarray] = {}
        finishes: dict[int, np.ndarray] = {}
        steps = len(step_shape)
        k = first
        while k < steps:
            index = step_shape[k]
            shape = form.shapes[index]
            if shape.own:
                end = k + 1
                while end < steps and step_shape[end] == index:
                    end += 1
                amounts = np.array(form.amounts[k:end])
                received = np.where(np.array(form.reduce[k:end]) & (gamma > 0), amounts * gamma, 0.0)
                # per step: + latency, + bytes / rate, + what it reduces; after the times so far
                terms = np.empty((3 * (end - k) + 1, form.period))
                terms[0] = state
                terms[1::3] = shape.latency
                terms[2::3] = amounts[:, None] / shape.rate
                terms[3::3] = received[:, None]
                sums = np.add.accumulate(terms, axis=0)
                starts.setdefault(index, state)
                if last_step[index] < end:
                    finishes[index] = sums[-2]
                if carried is not None:
                    for amount in form.amounts[k:end]:
                        carried[index] += amount
                state = sums[-1].copy()
                k = end
                continue
            amount = form.amounts[k]
            start = np.maximum(state, state[shape.to])
            finish = (start + shape.latency) + amount / shape.rate
            done = np.maximum(finish, finish[shape.back])
            if form.reduce[k] and gamma > 0:
                done = done + amount * gamma
            starts.setdefault(index, start)
            if last_step[index] == k:
                finishes[index] = finish
            if carried is not None:
                carried[index] += amount
            state = done
            k += 1
        return (state, *(starts[index] for index in takes_start), *(finishes[index] for index in seen))

    def _play_run(self, run: _RingRun, first: int, t: np.ndarray, first_start: np.ndarray, last_end: np.ndarray,
                  carried: np.ndarray | None) -> None:
        """Steps `first`... of a ring over fewer elements than positions (PlayPlan.ring_run),
        each over its c + 1 participants in a row only (indices taken around the ring), not
        over all n: the same terms in the same order as `solve`'s loop, which gives each step
        a shape of its own (_part_of_whole), so the same figures to the last digit; steps
        after the window has settled into its regime are skipped (_WindowRegime). Slot j is
        participant j's, so participants index the slots too."""
        c, firsts, reduce = run.c, run.firsts, run.reduce
        n = t.size
        # a step's senders are c slots in a row from its first, around the ring: with the
        # per-slot arrays laid out twice, always a slice; what the slots used and carried is
        # kept so too, and folded back onto the n slots at the end
        latency, duration = np.tile(self.plan.shapes[0].latency, 2), np.tile(run.duration, 2)
        used_from, used_until = np.tile(first_start, 2), np.tile(last_end, 2)
        used_from[n:] = np.inf
        used_until[n:] = -np.inf
        received = run.amount * self.gamma_s_per_byte if self.gamma_s_per_byte > 0 else 0.0
        maximum, minimum = np.maximum, np.minimum
        regime = _WindowRegime.of(run, latency[:n])
        k = first
        while k < len(firsts):
            at = firsts[k]
            senders = slice(at, at + c)
            wraps = at + c >= n  # the last participant, or more, past the end of the ring
            times = np.concatenate((t[at:], t[:at + c + 1 - n])) if wraps else t[at:at + c + 1]
            start = maximum(times[:c], times[1:])
            finish = start + latency[senders]
            finish += duration[senders]
            times[:c] = finish  # each participant's end: its send's and its receive's
            maximum(times[1:c], finish[:c - 1], out=times[1:c])
            times[c] = finish[c - 1]
            if reduce[k] and received > 0:
                times[1:] += received
            if wraps:
                t[at:] = times[:n - at]
                t[:at + c + 1 - n] = times[n - at:]
            minimum(used_from[senders], start, out=used_from[senders])
            maximum(used_until[senders], finish, out=used_until[senders])
            if carried is not None:
                for part in ((slice(at, min(at + c, n)), slice(0, max(at + c - n, 0))) if wraps else (senders,)):
                    carried[part] += run.amount
            if regime is not None:
                k += regime.skip(k, times, float(start[c - 1]), t, used_from, used_until, carried)
            k += 1
        minimum(used_from[:n], used_from[n:], out=first_start)
        maximum(used_until[:n], used_until[n:], out=last_end)

    def _looped_ring(self, views: RingViews, first: int, t_ring: np.ndarray, finish_ring: np.ndarray,
                     start: np.ndarray, carried: np.ndarray | None) -> np.ndarray:
        """_ring_loop, from _LOOP_REUSE_MIN_RANK_STEPS rank-steps from the first
        participant's time, the others' on a grid (joined_on_grid): a run's rings that start
        as one before them did, but for rounding (DDP's buckets, step after step), are looped
        once. (The first play of a plan adds up the bytes each slot carried: it is looped.)"""
        n_part = t_ring.size - 1
        if (views.steps - first) * n_part < _LOOP_REUSE_MIN_RANK_STEPS:
            return self._ring_loop(views, first, t_ring, finish_ring, start, carried)
        t = t_ring[:n_part]

        def play(joins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            t[:] = joins
            finish = self._ring_loop(views, first, t_ring, finish_ring, start, carried).copy()
            return t.copy(), finish  # (the loop moves t on to the times it ends at)

        t[:], finish_ring[1:] = played_from_grid(t, views.time_scale(self.plan.shapes[0].latency, first),
                                                 views.loop_plays, (first,), play, fresh=carried is not None)
        finish_ring[0] = finish_ring[n_part]
        return finish_ring[1:]

    def _ring_loop(self, views: RingViews, first: int, t_ring: np.ndarray, finish_ring: np.ndarray,
                   start: np.ndarray, carried: np.ndarray | None) -> np.ndarray:
        """Steps `first`... of a single ring (`solve`'s successor case, whose figures it gives
        to the last digit), with nothing per step but the recurrence's array operations and
        the slices of its views. Where every step moves the same bytes on every slot and the
        latencies, the rates, the times so far (and the bytes carried so far) repeat every P
        slots, P < n (a rail fabric's ring repeats pod by pod), participants P apart do the
        same arithmetic on the same figures step after step: the loop runs on the ring of the
        first P closed on itself, which is that ring to the last digit, and its figures are
        laid out n / P times."""
        n_part = t_ring.size - 1
        latency = self.plan.shapes[0].latency
        period = None
        if views.equal_shares and n_part > _PERIODIC_LOOP_MIN_PARTICIPANTS:
            period = shortest_period(latency, self.plan.shapes[0].rate, t_ring[:n_part],
                                     *(() if carried is None else (carried,)), longest=n_part // 2)
        if period is None:
            return self._ring_steps(views, first, t_ring, finish_ring, start, carried, latency)
        copies = n_part // period
        t_small, finish_small = t_ring[:period + 1].copy(), np.empty(period + 1)
        carried_small = None if carried is None else carried[:period].copy()
        finish = self._ring_steps(views, first, t_small, finish_small, start[:period], carried_small,
                                  latency[:period])
        t_ring[:n_part] = np.tile(t_small[:period], copies)
        t_ring[n_part] = t_ring[0]
        finish_ring[1:] = np.tile(finish, copies)
        finish_ring[0] = finish_ring[n_part]
        if carried is not None:
            carried[:] = np.tile(carried_small, copies)
        return finish_ring[1:]

    def _ring_steps(self, views: RingViews, first: int, t_ring: np.ndarray, finish_ring: np.ndarray,
                    start: np.ndarray, carried: np.ndarray | None, latency: np.ndarray) -> np.ndarray:
        """_ring_loop's steps on the ring of t_ring.size - 1 participants (its first ones,
        the ring closed on itself), each with its `latency`; within a run of steps alike, the
        steps after the ring has settled into its regime are skipped (_RingRegime)."""
        n_part = t_ring.size - 1
        t, finish = t_ring[:n_part], finish_ring[1:]
        before, after = t_ring[1:], finish_ring[:n_part]
        windows, divided, window_bytes = views.windows, views.divided, views.window_bytes
        scaled = views.scaled
        reduce = views.reduce
        maximum, add = np.maximum, np.add
        regime = _RingRegime(views, latency) if views.equal_shares else None
        k = first
        while k < len(windows):
            at = windows[k]
            t_ring[n_part] = t_ring[0]
            maximum(t, before, out=start)
            add(start, latency, out=finish)
            finish += divided[k][at:at + n_part]
            finish_ring[0] = finish_ring[n_part]
            maximum(finish, after, out=t)
            if scaled is not None and reduce[k]:
                t += scaled[at - 1:at - 1 + n_part]
            if carried is not None:
                carried += window_bytes[at:at + n_part]
            skipped = regime.skip(k, t) if regime is not None else 0
            if skipped:
                if carried is not None:  # (every step moves the same bytes on every slot)
                    carried += window_bytes[at:at + n_part] * skipped
                k += skipped
            k += 1
        return finish

    # -- what the run's figures and checks need
    def carried(self) -> tuple[np.ndarray, np.ndarray]:
        """(route, bytes) of every pair of the play, summed over its steps."""
        plan = self.plan
        if self.exit_times is None or plan.carried is None:
            return np.zeros(0, np.int64), np.zeros(0)
        return np.concatenate([s.route for s in plan.shapes]), np.concatenate(plan.carried)

    def resource_spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(resource, first use, last use) of every resource the play used (none before it
        is solved)."""
        if self._spans is None:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        return self._spans

    def _spans_of(self, first_start: list[np.ndarray | None],
                  last_end: list[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """resource_spans from each shape's first start and last end per slot."""
        shapes = [k for k, (first, last) in enumerate(zip(first_start, last_end))
                  if first is not None and last is not None]
        if not shapes:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        flow, used, starts = self.plan.resources_of(tuple(shapes))
        if not used.size:
            return np.zeros(0, np.int64), np.zeros(0), np.zeros(0)
        # each resource's rows in a run: the least start and the last finish of each run
        first = np.minimum.reduceat(np.concatenate([first_start[k] for k in shapes])[flow], starts)
        last = np.maximum.reduceat(np.concatenate([last_end[k] for k in shapes])[flow], starts)
        kept = np.isfinite(first)  # not the resources of a whole's slots that no step used
        if not kept.all():
            used, first, last = used[kept], first[kept], last[kept]
        return used, first, last


def _pairs_key(schedule: Schedule, participants: tuple[str, ...]) -> tuple | None:
    """What a schedule's plan is made from: its participants and each part's steps' (src,
    dst) pairs, their sizes aside. None for a part whose steps are made as they are asked for
    (a ring's): its plan is one shape, made without looking at every step."""
    pieces = []
    for part in schedule.parts():
        if not isinstance(part.steps, (list, tuple)):
            return None
        pieces.append(np.array([len(part.steps)]))
        for step in part.steps:
            pieces += [step.src, step.dst]
    return participants, content_key(*pieces)


def _shape(cluster: Cluster, participants: tuple[str, ...], step_src: np.ndarray, step_dst: np.ndarray) -> _Shape:
    """The shape of a step's transfers from step_src[i] to step_dst[i]."""
    n_part = len(participants)
    # counts instead of sorts: a step of a ring over 16,384 ranks is 16,384 transfers
    sends = np.bincount(step_src, minlength=n_part)
    merged = False
    if sends.max(initial=0) > 1:  # a participant that sends twice may send twice to one peer
        distinct, slot_of = np.unique(step_src * n_part + step_dst, return_inverse=True)
        merged = distinct.size != step_src.size
    if merged:
        src, dst = np.divmod(distinct, n_part)
        sends = np.bincount(src, minlength=n_part)
    else:
        src, dst, slot_of = step_src, step_dst, np.arange(step_src.size)
    route = cluster.pair_routes(participants, src, dst)
    net = cluster.network
    rate = net.alone_rate(route)
    receives = np.bincount(dst, minlength=n_part)
    takes_part = np.flatnonzero(sends + receives)  # (sorted, as np.union1d(src, dst))
    full = bool((sends > 0).all() and (receives > 0).all())
    send_slot = recv_slot = None
    if full:
        send_slot = np.empty(n_part, np.int64)
        send_slot[src] = np.arange(src.size)
        recv_slot = np.empty(n_part, np.int64)
        recv_slot[dst] = np.arange(dst.size)
    ring = send_slot is not None and bool((src == np.arange(src.size)).all())
    successor = ring and bool((dst == (src + 1) % n_part).all())
    return _Shape(slot_of, src, dst, route, net.route_latency(route), rate, merged, send_slot, recv_slot, takes_part,
                  ring, successor)


def _successor_ring_around(cluster: Cluster, participants: tuple[str, ...], steps) -> _Shape | None:
    """The whole successor ring (participant i to i + 1, the last to the first) when every
    step's transfers are some of its pairs, each once (_whole); else None."""
    n_part = len(participants)
    if n_part < 2 or not steps:
        return None
    for step in steps:
        src = step.src
        if src.size >= n_part or not bool((step.dst == (src + 1) % n_part).all()):
            return None
        seen = np.zeros(n_part, dtype=bool)
        seen[src] = True
        if int(seen.sum()) != src.size:  # a pair twice in a step: its shape merges them
            return None
    positions = np.arange(n_part, dtype=np.int64)
    return _whole(cluster, participants, positions, (positions + 1) % n_part)


def _whole(cluster: Cluster, participants: tuple[str, ...], src: np.ndarray, dst: np.ndarray) -> _Shape | None:
    """The shape of the pairs (src[i], dst[i]) as a whole (_Shape.sender_slot): None where a
    participant sends on two of them, as a step's slots are then not its senders'."""
    sends = np.bincount(src, minlength=len(participants))
    if sends.size and int(sends.max()) > 1:
        return None
    shape = _shape(cluster, participants, src, dst)
    sender_slot = np.full(len(participants), -1, dtype=np.int64)
    sender_slot[shape.src] = np.arange(shape.src.size)
    return replace(shape, sender_slot=sender_slot)


def _part_of_whole(whole: _Shape, slots: np.ndarray, step: Step, n_part: int) -> _Shape:
    """The shape of a step whose transfers are the whole's pairs at `slots`, each once: the
    whole's routes, latencies and rates there, as _shape would find them pair by pair."""
    src, dst = step.src, step.dst
    taking = np.zeros(n_part, dtype=bool)
    taking[src] = True
    taking[dst] = True
    return _Shape(np.arange(src.size), src, dst, whole.route[slots], whole.latency[slots], whole.rate[slots], False,
                  None, None, np.flatnonzero(taking), False, False)


def _repeats(values: np.ndarray, by_period: tuple[int, int]) -> bool:
    """Whether `values` is its first period repeated."""
    rows = values.reshape(by_period)
    return bool((rows == rows[0]).all())


def _ring_step_map(weight: np.ndarray, received: np.ndarray | None) -> np.ndarray:
    """One step of a successor ring of P slots closed on itself as a max-plus matrix M
    (time'[i] = max_j M[i, j] + time[j]): slot i's transfer starts when participants i and
    i + 1 are ready and takes weight[i] (its latency and bytes / rate); participant i is done
    when its send (slot i) and its receive (slot i - 1) are, then reduces what it received."""
    period = weight.size
    i = np.arange(period)
    matrix = np.full((period, period), -np.inf)
    extra = received if received is not None else np.zeros(period)
    for source, through in ((i, i), ((i + 1) % period, i), ((i - 1) % period, (i - 1) % period),
                            (i, (i - 1) % period)):
        np.maximum.at(matrix, (i, source), weight[through] + extra)
    return matrix


def _maxplus_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a[:, :, None] + b[None, :, :]).max(axis=1)


def _maxplus_power(matrix: np.ndarray, power: int) -> np.ndarray:
    """matrix^power in the max-plus algebra (power >= 1), by squaring."""
    result = None
    square = matrix
    while power:
        if power & 1:
            result = square if result is None else _maxplus_product(square, result)
        power >>= 1
        if power:
            square = _maxplus_product(square, square)
    assert result is not None
    return result


def _maxplus_apply(matrix: np.ndarray, state: np.ndarray) -> np.ndarray:
    return (matrix + state[None, :]).max(axis=1)


def _rate_period(rate: np.ndarray, base_size: int) -> int | None:
    """The shortest period P with which `rate` repeats (shortest_period), where P arrays of
    `base_size` stay within _BASE_DURATIONS_MAX_ELEMENTS; else None."""
    return shortest_period(rate, longest=min(_RATE_PERIOD_MAX, _BASE_DURATIONS_MAX_ELEMENTS // max(base_size, 1)))


def shortest_period(*arrays: np.ndarray, longest: int = _RATE_PERIOD_MAX) -> int | None:
    """The shortest P (dividing their length, at most `longest`) with which every one of
    these arrays of one length repeats; None if none does."""
    n = arrays[0].size
    for period in range(1, min(n, longest) + 1):
        if n % period == 0 and all(_repeats(a, (n // period, period)) for a in arrays):
            return period
    return None


def _fits_in_a_step(net, res: np.ndarray, load: np.ndarray) -> bool:
    """Rule (1) of the module's docstring, for one step's slots (`res`: the binding resource
    of each of their rows, `load`: the slot's rate alone there times its weight on it): every
    resource is crossed by one slot, or by slots whose rates alone (each its route's slowest
    capacity) add up to no more than its capacity, so that it never binds: a CPU rank's core,
    which moves its send and its receive at once at its loopback's rate each
    (gansim/network/cluster.py), is such a resource."""
    crossings = np.bincount(res, minlength=net.capacity.size)  # (counted, not sorted: a step is 16,384 rows)
    if crossings.max(initial=0) <= 1:
        return True
    crossed = crossings > 0
    used = np.bincount(res, weights=load, minlength=net.capacity.size)
    return bool((used[crossed] <= net.capacity[crossed]).all())


def _distinct_users(pair_users: list[np.ndarray], pair_loads: list[np.ndarray],
                    n_part: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (resource, src, dst) columns of the (3, k) arrays `pair_users`, sorted by
    resource, then src, then dst (np.unique(..., axis=1)'s order), and each one's load there
    (the largest of its `pair_loads`), found as one int64 key per column: np.unique over
    columns sorts them as records, some hundred times slower, which a ring whose small buffer
    leaves segments empty (a step's transfers of its own) paid thousands of steps over."""
    if not pair_users:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    res, src, dst = np.concatenate(pair_users, axis=1)
    loads = np.concatenate(pair_loads)
    if res.size and int(res.max()) >= np.iinfo(np.int64).max // (n_part * n_part):
        found, which = np.unique(np.stack([res, src, dst]), axis=1, return_inverse=True)  # keys would overflow
        load = np.zeros(found.shape[1])
        np.maximum.at(load, which.ravel(), loads)
        return found[0], found[1], found[2], load
    key, which = np.unique((res * n_part + src) * n_part + dst, return_inverse=True)
    load = np.zeros(key.size)
    np.maximum.at(load, which.ravel(), loads)
    rest, dst = np.divmod(key, n_part)
    res, src = np.divmod(rest, n_part)
    return res, src, dst, load


def _never_bind(capacity: np.ndarray, res: np.ndarray, src: np.ndarray, dst: np.ndarray, load: np.ndarray) -> bool:
    """Rule (2) of the module's docstring: whether, on every resource, all the (src, dst)
    pairs that cross it have a participant in common, or their loads there (each its rate
    alone times its weight) add up to no more than its capacity (`res` sorted, as np.unique
    leaves it)."""
    if res.size == 0:
        return True
    first = np.ones(res.size, dtype=bool)
    first[1:] = res[1:] != res[:-1]
    group = np.cumsum(first) - 1
    ok_src = _groups_all(group, (src == src[first][group]) | (dst == src[first][group]))
    ok_dst = _groups_all(group, (src == dst[first][group]) | (dst == dst[first][group]))
    fits = np.bincount(group, weights=load) <= capacity[res[first]]
    return bool((ok_src | ok_dst | fits).all())


def _groups_all(group: np.ndarray, flags: np.ndarray) -> np.ndarray:
    return np.bincount(group, weights=~flags, minlength=int(group[-1]) + 1) == 0


class _Recorder:
    """Keeps the first transfers of a play (up to a budget), for the run's details."""

    def __init__(self, budget: int):
        self.budget = budget
        self.count = 0
        self.parts: list[tuple] = []
        self.until = np.inf  # every transfer that starts before this is kept

    @property
    def wanted(self) -> bool:
        return self.count < self.budget

    def add(self, k: int, shape: _Shape, step: Step, start: np.ndarray, finish: np.ndarray, t: np.ndarray) -> None:
        slot = shape.slot_of
        part = shape.takes_part
        self.parts.append((step.src, step.dst, shape.route[slot], step.size, start[slot], finish[slot],
                           np.full(slot.size, k), part, np.full(part.size, k), t[part]))
        self.count += slot.size
        if not self.wanted:
            # a later step's transfer starts when both its ends are done with this one
            self.until = float(t.min())

    def result(self, play: UncontendedPlay) -> Recorded | None:
        if not self.parts:
            return None
        cols = [np.concatenate([p[i] for p in self.parts]) for i in range(10)]
        if len(self.parts) == len(play.plan.schedule.steps):
            self.until = np.inf
        until = self.until
        return Recorded(cols[0], cols[1], cols[2], cols[3] * play.plan.bytes_per_element, cols[4], cols[5], cols[6],
                        cols[7], cols[8], cols[9], until)


def contended(plays: list[UncontendedPlay], flow_resources: np.ndarray, flow_start: np.ndarray,
              flow_end: np.ndarray, alone_resources: np.ndarray | None = None, alone_start: np.ndarray | None = None,
              alone_end: np.ndarray | None = None) -> bool:
    """Whether any play shared a resource, at the same time, with another play or with a
    flow of the flow network (given as one row per (flow, resource it crossed)); or left a
    rank before the last joined. Rows of `alone_*` (one per resource each crossed) are work
    timed as if alone on its resources, held to the same rule as plays."""
    if any(play.early_exit for play in plays):
        return True
    res_parts, lo_parts, hi_parts, owner_parts = [flow_resources], [flow_start], [flow_end], [
        np.full(flow_resources.size, -1)]
    if alone_resources is not None:
        res_parts.append(alone_resources)
        lo_parts.append(alone_start)
        hi_parts.append(alone_end)
        owner_parts.append(np.full(alone_resources.size, len(plays)))
    for i, play in enumerate(plays):
        res, lo, hi = play.resource_spans()
        res_parts.append(res)
        lo_parts.append(lo)
        hi_parts.append(hi)
        owner_parts.append(np.full(res.size, i))
    # A run's rows number millions (every compute phase timed alone, on every rank): each
    # array is made from the last and the last let go, one at a time.
    res, lo, hi, owner = (np.concatenate(x) for x in (res_parts, lo_parts, hi_parts, owner_parts))
    del res_parts, lo_parts, hi_parts, owner_parts
    played = np.zeros(int(res.max()) + 1 if res.size else 0, dtype=bool)
    played[res[owner >= 0]] = True
    keep = played[res]  # only resources something timed alone used matter
    res = res[keep]
    lo = lo[keep]
    hi = hi[keep]
    owner = owner[keep]
    del keep
    if res.size < 2:
        return False
    order = np.lexsort((hi, lo, res))
    res = res[order]
    lo = lo[order]
    hi = hi[order]
    is_play = owner[order] >= 0
    del order, owner
    # per resource, sweep in start order: an interval overlaps an earlier one when the
    # earlier ones reach past its start; overlaps among flows only are the flow network's own
    span = float(max(hi.max(), 0.0)) - float(min(lo.min(), 0.0)) + 1.0
    offset = res * span
    same = res[1:] == res[:-1]
    del res
    starts = np.add(lo, offset, out=lo)[1:]
    reach = np.maximum.accumulate(hi + offset)  # of anything
    if (same & (reach[:-1] > starts) & is_play[1:]).any():
        return True
    np.copyto(reach, np.where(is_play, hi, -np.inf))
    reach += offset
    np.maximum.accumulate(reach, out=reach)  # of plays
    return bool((same & (reach[:-1] > starts)).any())
