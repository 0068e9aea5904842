"""All-reduce algorithms as data: a schedule is a list of steps of point-to-point transfers.

A schedule is independent of bytes and topology: it moves *elements* of each rank's buffer,
so it can be checked by running it on real numpy arrays (`execute_on_arrays`) and then be
timed by any cost model (flow simulation, alpha-beta, ...).

Step semantics (shared with the simulator): every transfer of a step reads its source
segment before any write of that step lands; reduces into the same elements add up; a
transfer of step k starts once its src and dst have finished their transfers of earlier
steps (per-rank rendezvous, not a global barrier). Every builder here also keeps, within
a step, the elements a participant sends disjoint from those it receives, so the two
readings (all reads first / fully concurrent) give the same result.

Builders are vectorised over ranks with numpy: a 1024-rank ring is 2046 steps of 1024
transfers and is built in a few tens of milliseconds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence, overload

import numpy as np

from gansim.core.errors import SimulationError
from gansim.core.registry import Registry

Groups = Sequence[Sequence[int]]
Builder = Callable[[int, int, "Groups | None"], "Schedule"]

__all__ = [
    "ALGORITHMS",
    "Schedule",
    "Step",
    "broadcast",
    "build_schedule",
    "execute_on_arrays",
    "segment_bounds",
]


def _frozen_int64(x: object) -> np.ndarray:
    """A read-only int64 array of x, without copying when x already is a read-only int64 array."""
    a = np.asarray(x, dtype=np.int64)
    if a.flags.writeable:
        a = a.copy()
        a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False, slots=True)
class Step:
    """One round of concurrent transfers; transfer i moves elements [lo[i], hi[i]) of src[i] to dst[i].

    `eq=False`: arrays have no single truth value, so steps compare (and hash) by identity.
    The arrays are stored read-only (writable inputs are copied): schedules may be cached and
    shared, and steps of one schedule may share one array (e.g. a ring's src).
    """

    src: np.ndarray
    dst: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    reduce: bool
    # where lo, hi and size start in the arrays they are windows of (their bases, of one
    # shape, flattened), for a schedule that made every step so (a ring's); -1: not so made
    window: int = -1
    # per transfer, the elements its time is reckoned on (float): hi - lo, or for a ring's
    # segments their equal share of the buffer (`_ring_steps`), from which the integer split
    # differs by less than one element. Timing only: the data a step moves is [lo, hi).
    size: np.ndarray | None = None

    def __post_init__(self) -> None:
        arrays = {name: _frozen_int64(getattr(self, name)) for name in ("src", "dst", "lo", "hi")}
        for name, a in arrays.items():
            if a.ndim != 1:
                raise ValueError(f"Step.{name} must be 1-D, got shape {a.shape}")
        n = arrays["src"].size
        if any(a.size != n for a in arrays.values()):
            raise ValueError("Step.src, dst, lo and hi must have the same length")
        for name, a in arrays.items():
            object.__setattr__(self, name, a)
        object.__setattr__(self, "reduce", bool(self.reduce))
        size = self.size
        if size is None:
            size = (arrays["hi"] - arrays["lo"]).astype(np.float64)
            size.flags.writeable = False
        elif not isinstance(size, np.ndarray) or size.dtype != np.float64 or size.shape != (n,):
            raise ValueError(f"Step.size must be a float64 array of {n} elements")
        object.__setattr__(self, "size", size)

    def __len__(self) -> int:
        return int(self.src.size)

    @classmethod
    def _of_read_only(cls, src: np.ndarray, dst: np.ndarray, lo: np.ndarray, hi: np.ndarray, reduce: bool,
                      window: int, size: np.ndarray) -> "Step":
        """A step of arrays that already are what __post_init__ makes of them (views of a
        ring's read-only arrays, checked where they were made): a ring has 2(p - 1) steps,
        32,766 at 16,384 ranks, each made without the checks."""
        step = object.__new__(cls)
        for put, value in zip(_STEP_SLOTS, (src, dst, lo, hi, bool(reduce), window, size)):
            put(step, value)
        return step


# the slots' own setters, which a frozen dataclass's __setattr__ does not go through
_STEP_SLOTS = tuple(getattr(Step, name).__set__ for name in ("src", "dst", "lo", "hi", "reduce", "window", "size"))


@dataclass(frozen=True)
class Schedule:
    """An all-reduce of `count` elements over `ranks` ranks (plus any extra participants)."""

    algorithm: str
    ranks: int
    count: int
    # a tuple; a ring's steps made when asked for (_RingSteps, _SparseRingSteps); or parts of
    # these one after another (_ChainedSteps: a hierarchical ring's phases)
    steps: Sequence[Step]
    extra_participants: tuple[str, ...] = field(default=())

    def participants(self) -> int:
        """Ranks plus extra participants (ids ranks, ranks+1, ...), e.g. a parameter server."""
        return self.ranks + len(self.extra_participants)

    @functools.cached_property
    def _transfers(self) -> int:
        return _transfers(self.steps)

    def transfers(self) -> int:
        """Total number of point-to-point transfers over all steps."""
        return self._transfers

    def one_pairing(self) -> bool:
        """Whether every step moves between the same pairs, in one order (its src and dst
        arrays are the same: a ring's), told without looking at every step where it can be."""
        if isinstance(self.steps, _RingSteps):
            return True
        if isinstance(self.steps, _ChainedSteps):  # each part's arrays are its own
            return len(self.steps.parts) == 1 and replace(self, steps=self.steps.parts[0]).one_pairing()
        first = self.steps[0] if self.steps else None
        return first is not None and all(s.src is first.src and s.dst is first.dst for s in self.steps)

    def size_windows(self) -> tuple[np.ndarray, list[int]] | None:
        """Where every step's sizes are a window of one base array, from where each starts
        (a ring's: its segment sizes tiled three times): the base and the windows' starts."""
        steps = self.steps
        if isinstance(steps, _RingSteps):
            return steps.size_windows()
        if isinstance(steps, _ChainedSteps):  # each part's windows are of its own base
            return None
        base = steps[0].size.base if steps else None
        if not isinstance(base, np.ndarray) or not all(s.window >= 0 and s.size.base is base for s in steps):
            return None
        return base, [s.window for s in steps]

    def equal_shares(self) -> list[float] | None:
        """Per step, the elements each of its transfers is reckoned on, where every transfer
        of each step moves the same (a ring's equal shares, `_ring_steps`); else None."""
        steps = self.steps
        if isinstance(steps, _RingSteps):
            return steps.equal_shares()
        if isinstance(steps, _ChainedSteps):
            shares: list[float] = []
            for part in self.parts():
                found = part.equal_shares()
                if found is None:
                    return None
                shares += found
            return shares
        if isinstance(steps, _SparseRingSteps):
            return None
        shares = []
        for step in steps:
            size = step.size
            first = float(size[0])
            if not bool((size == first).all()):
                return None
            shares.append(first)
        return shares

    def senders_in_a_run(self) -> tuple[int, list[int]] | None:
        """Where every step's senders are c positions in a row around one ring, each sending
        one element to the next (_SparseRingSteps.senders_in_a_run): c and per step the
        first of them; else None."""
        steps = self.steps
        return steps.senders_in_a_run() if isinstance(steps, _SparseRingSteps) else None

    def reduces(self) -> list[bool]:
        """Per step, whether its receivers reduce what they receive."""
        if isinstance(self.steps, _LazyRingSteps):
            return self.steps.reduces()
        return [s.reduce for s in self.steps]

    def parts(self) -> list["Schedule"]:
        """The schedule as the parts its steps were made in, one after another (a hierarchical
        ring's phases; else itself), each a schedule of its own steps."""
        if isinstance(self.steps, _ChainedSteps):
            return [replace(self, steps=part) for part in self.steps.parts]
        return [self]

    def split(self, k: int) -> tuple["Schedule", "Schedule"]:
        """Its first k steps and the rest, each a schedule of the same all-reduce: played one
        after the other, with each participant's end of the first as its start of the second,
        they are this schedule (every step waits only for its participants' earlier steps)."""
        return replace(self, steps=tuple(self.steps[:k])), replace(self, steps=tuple(self.steps[k:]))


ALGORITHMS: Registry[Builder] = Registry("all-reduce algorithm")


def build_schedule(algorithm: str, ranks: int, count: int, groups: Groups | None = None) -> Schedule:
    """Build the schedule of `algorithm`; unknown names raise UserInputError (from the registry)."""
    builder = ALGORITHMS.get(algorithm, field="algorithm")
    if int(ranks) != ranks or ranks < 1:
        raise ValueError(f"ranks must be an integer >= 1, got {ranks!r}")
    if int(count) != count or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    return builder(int(ranks), int(count), groups)


# ---------------------------------------------------------------------------------------------
# helpers


def segment_bounds(count: int, parts: int) -> np.ndarray:
    """Bounds of `parts` nearly equal segments of `count` elements (np.array_split layout).

    The first count % parts segments get one extra element; with count < parts the last
    segments are empty. Returns int64 array of length parts + 1.
    """
    i = np.arange(parts + 1, dtype=np.int64)
    q, r = divmod(count, parts)
    return i * q + np.minimum(i, r)


def _step(
    src: np.ndarray, dst: np.ndarray, lo: np.ndarray | int, hi: np.ndarray | int, reduce: bool
) -> Step | None:
    """A step without its zero-length transfers, or None when nothing is left to move.

    lo / hi may be scalars (whole-buffer transfers).
    """
    n = src.shape[0]
    lo = np.full(n, lo, dtype=np.int64) if np.ndim(lo) == 0 else lo
    hi = np.full(n, hi, dtype=np.int64) if np.ndim(hi) == 0 else hi
    keep = hi > lo
    if not keep.all():
        src, dst, lo, hi = src[keep], dst[keep], lo[keep], hi[keep]
    if src.size == 0:
        return None
    return Step(src=src, dst=dst, lo=lo, hi=hi, reduce=reduce)


def _schedule(
    name: str, ranks: int, count: int, steps: "Sequence[Step | None]", extra: tuple[str, ...] = ()
) -> Schedule:
    return Schedule(
        algorithm=name,
        ranks=ranks,
        count=count,
        steps=steps if isinstance(steps, (_LazyRingSteps, _ChainedSteps)) else tuple(s for s in steps if s is not None),
        extra_participants=extra,
    )


def _check_partition(groups: Groups, ranks: int, name: str) -> list[list[int]]:
    """Groups must be non-empty and partition 0..ranks-1 (each rank exactly once)."""
    out = [[int(r) for r in g] for g in groups]
    if not out or any(len(g) == 0 for g in out):
        raise ValueError(
            f"{name}: groups must be a non-empty list of non-empty rank lists, got {groups!r}"
        )
    flat = sorted(r for g in out for r in g)
    if flat != list(range(ranks)):
        raise ValueError(
            f"{name}: groups must contain every rank 0..{ranks - 1} exactly once, got {groups!r}"
        )
    return out


def _ring_steps(
    members: np.ndarray, bounds: np.ndarray, share: float, *, reduce_scatter: bool, all_gather: bool
) -> "Sequence[Step | None]":
    """Rings run side by side: `members` is (rings, n) participant ids, `bounds` is (rings, n+1).

    Position j sends to j+1 (mod n). Reduce-scatter step s: j sends segment (j - s) mod n, so
    after n-1 steps position j holds the full sum of segment (j + 1) mod n. All-gather step s:
    j sends segment (j + 1 - s) mod n. The steps share one read-only src and dst array.

    Every segment's time is reckoned on `share` elements, its equal share of the buffer
    (Step.size): a ring is then alike on every machine of a cluster whose machines copy one
    another, and a play of it can be worked out on one period of them
    (gansim/collectives/uncontended.py). Where some segment is empty (fewer elements than
    positions), on its integer size instead: no transfer moves nothing.
    """
    rings, n = members.shape
    if n < 2:
        return []
    # Segment (j + c) mod n of every position j is the window [n + c, 2n + c) of the per-ring
    # lo / hi tiled three times, so each step is a slice. With more positions than rings
    # (2-D ring across 2,048 machines: 8 rings of 2,048) transfers are listed position by
    # position, so that the slice is a view rather than a copy per step.
    by_position = n > rings
    order = (lambda a: a.T) if by_position else (lambda a: a)
    src = _frozen_int64(order(members).ravel())
    dst = _frozen_int64(order(np.roll(members, -1, axis=1)).ravel())
    lo3 = _frozen_int64(np.ascontiguousarray(order(np.tile(bounds[:, :-1], 3))))
    hi3 = _frozen_int64(np.ascontiguousarray(order(np.tile(bounds[:, 1:], 3))))
    # with no empty segment no transfer is ever dropped: steps are made without checking
    whole = bool((bounds[:, 1:] > bounds[:, :-1]).all())
    size3 = np.full(lo3.shape, float(share)) if whole else None
    if size3 is not None:
        size3.flags.writeable = False
    phases = ([True] if reduce_scatter else []) + ([False] if all_gather else [])
    if size3 is not None and by_position:
        return _RingSteps(src, dst, lo3, hi3, size3, n, rings, tuple(phases))
    if size3 is None:
        return _SparseRingSteps(src, dst, lo3, hi3, n, rings, tuple(phases), by_position,
                                int((bounds[:, 1:] > bounds[:, :-1]).sum()))
    steps: list[Step | None] = []
    for reduce in phases:
        for s in range(n - 1):
            start = _window_start(n, s, reduce)
            window = slice(start, start + n)
            lo = (lo3[window] if by_position else lo3[:, window]).reshape(-1)
            hi = (hi3[window] if by_position else hi3[:, window]).reshape(-1)
            size = (size3[window] if by_position else size3[:, window]).reshape(-1)
            if not by_position:  # copies of the columns: made read-only as the views are
                for a in (lo, hi, size):
                    a.flags.writeable = False
            at = start * rings if by_position else -1  # lo3 / hi3 / size3 rows: a view from there
            steps.append(Step._of_read_only(src, dst, lo, hi, reduce, at, size))
    return steps


def _window_start(n: int, s: int, reduce: bool) -> int:
    """Where step s of a ring phase of n positions starts in the tiled segments: position j
    sends segment (j - s) mod n in the reduce-scatter, (j + 1 - s) mod n in the all-gather."""
    return n - s + (0 if reduce else 1)


class _StepsMadeWhenAsked(Sequence[Step]):
    """Steps made when asked for (`_step`, of 0 <= k < len). A step asked for twice is two
    equal objects, not one."""

    def __len__(self) -> int:
        raise NotImplementedError

    def _step(self, k: int) -> Step:
        raise NotImplementedError

    @overload
    def __getitem__(self, k: int) -> Step: ...

    @overload
    def __getitem__(self, k: slice) -> list[Step]: ...

    def __getitem__(self, k: int | slice) -> Step | list[Step]:
        if isinstance(k, slice):
            return [self._step(i) for i in range(*k.indices(len(self)))]
        if not -len(self) <= k < len(self):
            raise IndexError(k)
        return self._step(k % len(self))

    def __iter__(self) -> Iterator[Step]:
        return (self._step(k) for k in range(len(self)))


class _LazyRingSteps(_StepsMadeWhenAsked):
    """The steps of rings run side by side (_ring_steps), each made from the windows of its
    tiled arrays."""

    _n: int
    _rings: int
    _phases: tuple[bool, ...]

    def __len__(self) -> int:
        return len(self._phases) * (self._n - 1)

    def _start(self, k: int) -> tuple[int, bool]:
        """Where step k's window starts in the tiled arrays' positions, and whether it reduces."""
        phase, s = divmod(k, self._n - 1)
        reduce = self._phases[phase]
        return _window_start(self._n, s, reduce), reduce

    @property
    def transfers_per_step(self) -> int:
        raise NotImplementedError

    def reduces(self) -> list[bool]:
        return [reduce for reduce in self._phases for _ in range(self._n - 1)]


class _RingSteps(_LazyRingSteps):
    """Steps of rings with no empty segment, listed position by position: a 16,384-rank ring
    has 32,766 steps, whose objects and views would take some 15 MB that a play never looks at."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, lo3: np.ndarray, hi3: np.ndarray, size3: np.ndarray,
                 n: int, rings: int, phases: tuple[bool, ...]):
        self._arrays = (src, dst, lo3, hi3, size3)
        self._n, self._rings, self._phases = n, rings, phases
        self._window_starts: list[int] | None = None  # size_windows', once asked for

    @property
    def transfers_per_step(self) -> int:
        return int(self._arrays[0].size)

    def size_windows(self) -> tuple[np.ndarray, list[int]]:
        if self._window_starts is None:  # (a chunked ring's plays read them for every bucket)
            self._window_starts = [self._start(k)[0] * self._rings for k in range(len(self))]
        return self._arrays[4], self._window_starts

    def equal_shares(self) -> list[float] | None:
        size3 = self._arrays[4]
        share = float(size3.flat[0])
        return [share] * len(self) if bool((size3 == share).all()) else None

    def _step(self, k: int) -> Step:
        src, dst, lo3, hi3, size3 = self._arrays
        n = self._n
        start, reduce = self._start(k)
        window = slice(start, start + n)
        return Step._of_read_only(src, dst, lo3[window].reshape(-1), hi3[window].reshape(-1), reduce,
                                  start * self._rings, size3[window].reshape(-1))


class _SparseRingSteps(_LazyRingSteps):
    """Steps of rings some of whose segments are empty (fewer elements than positions: a
    per-variable all-reduce of a bias): each moves only the segments that are not empty, so
    its transfers are arrays of their own. A 16,384-rank ring over a variable of a few
    thousand elements has 32,766 such steps of that many transfers each, gigabytes if kept
    at once; made when asked for, a play holds one at a time."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, lo3: np.ndarray, hi3: np.ndarray, n: int, rings: int,
                 phases: tuple[bool, ...], by_position: bool, segments: int):
        self._arrays = (src, dst, lo3, hi3)
        self._n, self._rings, self._phases = n, rings, phases
        self._by_position = by_position
        self._segments = segments  # not empty, over all rings: the transfers of every step

    @property
    def transfers_per_step(self) -> int:
        return self._segments

    @property
    def whole_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of the rings' every position: each step moves between some of these
        pairs, each once (those whose segment is not empty)."""
        return self._arrays[0], self._arrays[1]

    def senders_in_a_run(self) -> tuple[int, list[int]] | None:
        """For a single ring whose non-empty segments are its first c (a buffer of c < n
        elements, one each), the positions that send in each step are c in a row around the
        ring, from a step's first: (c, per step the first position). None for other rings."""
        src, dst, lo3, hi3 = self._arrays
        n = self._n
        filled = hi3[:n] > lo3[:n]
        c = int(filled.sum())
        if self._rings != 1 or not bool(filled[:c].all()) or not (src == np.arange(n)).all():
            return None
        # position j sends segment (start + j) mod n, not empty for (start + j) mod n < c
        return c, [(-self._start(k)[0]) % n for k in range(len(self))]

    def _step(self, k: int) -> Step:
        src, dst, lo3, hi3 = self._arrays
        start, reduce = self._start(k)
        window = slice(start, start + self._n)
        lo = (lo3[window] if self._by_position else lo3[:, window]).reshape(-1)
        hi = (hi3[window] if self._by_position else hi3[:, window]).reshape(-1)
        keep = hi > lo  # every step sends each segment that is not empty once
        arrays = (src[keep], dst[keep], lo[keep], hi[keep])
        size = (arrays[3] - arrays[2]).astype(np.float64)  # what Step makes of them, without its checks
        for a in (*arrays, size):
            a.flags.writeable = False
        return Step._of_read_only(*arrays, reduce, -1, size)


class _ChainedSteps(_StepsMadeWhenAsked):
    """The steps of several parts one after another (a hierarchical ring's three phases), each
    part kept as it was made, so that steps made when asked for stay so."""

    def __init__(self, parts: Sequence[Sequence[Step]]):
        self.parts = tuple(part for part in parts if len(part))
        self._ends = np.cumsum([len(part) for part in self.parts], dtype=np.int64)

    def __len__(self) -> int:
        return int(self._ends[-1]) if self.parts else 0

    def _step(self, k: int) -> Step:
        part = int(np.searchsorted(self._ends, k, side="right"))
        return self.parts[part][k - (int(self._ends[part - 1]) if part else 0)]

    def __iter__(self) -> Iterator[Step]:
        return (step for part in self.parts for step in part)


def _transfers(steps: Sequence[Step]) -> int:
    """Point-to-point transfers over all `steps`, without making the steps made when asked for."""
    if isinstance(steps, _LazyRingSteps):
        return len(steps) * steps.transfers_per_step
    if isinstance(steps, _ChainedSteps):
        return sum(_transfers(part) for part in steps.parts)
    return sum(len(s) for s in steps)


# ---------------------------------------------------------------------------------------------
# algorithms


@ALGORITHMS.register("ring")
def ring(ranks: int, count: int, groups: Groups | None = None) -> Schedule:
    """NCCL-style ring: reduce-scatter (p-1 steps) then all-gather (p-1 steps); r sends to r+1."""
    if ranks == 1:
        return _schedule("ring", ranks, count, [])
    members = np.arange(ranks, dtype=np.int64)[None, :]
    bounds = segment_bounds(count, ranks)[None, :]
    return _schedule("ring", ranks, count,
                     _ring_steps(members, bounds, count / ranks, reduce_scatter=True, all_gather=True))


@ALGORITHMS.register("nccl")
def nccl(ranks: int, count: int, groups: Groups | None = None) -> Schedule:
    """NCCL's shape when no machine is given: one channel of its ring, through the ranks
    machine by machine (`groups`, in order). On a machine the cost models play what NCCL itself
    would run there (gansim/collectives/nccl.py: its algorithm, protocol and channels)."""
    order = [r for g in _check_partition(groups, ranks, "nccl") for r in g] if groups else list(range(ranks))
    if ranks == 1:
        return _schedule("nccl", ranks, count, [])
    members = np.array(order, dtype=np.int64)[None, :]
    bounds = segment_bounds(count, ranks)[None, :]
    return _schedule("nccl", ranks, count,
                     _ring_steps(members, bounds, count / ranks, reduce_scatter=True, all_gather=True))


@ALGORITHMS.register("tree")
def tree(ranks: int, count: int, groups: Groups | None = None) -> Schedule:
    """Binomial-tree reduce to rank 0 then binomial broadcast, whole buffer per transfer.

    ceil(lg p) steps each way, for any p: in reduce step k the ranks whose lowest set bit is
    k send to r - 2^k; the broadcast replays the tree in reverse.
    """
    levels = (ranks - 1).bit_length()  # ceil(lg p)
    steps: list[Step | None] = []
    for k in range(levels):
        d = 1 << k
        src = np.arange(d, ranks, 2 * d, dtype=np.int64)
        steps.append(_step(src, src - d, 0, count, True))
    return _schedule("tree", ranks, count, steps + _binomial_broadcast_steps(ranks, count))


def _binomial_broadcast_steps(ranks: int, count: int) -> list[Step | None]:
    """Rank 0's whole buffer to every rank in ceil(lg p) steps: in step k (counting down)
    the ranks that are multiples of 2^(k+1) send to r + 2^k."""
    steps: list[Step | None] = []
    for k in reversed(range((ranks - 1).bit_length())):
        d = 1 << k
        dst = np.arange(d, ranks, 2 * d, dtype=np.int64)
        steps.append(_step(dst - d, dst, 0, count, False))
    return steps


def broadcast(ranks: int, count: int) -> Schedule:
    """A binomial-tree broadcast from rank 0 (gloo's and MPI's for small messages; what
    DDP's broadcast_buffers issues). Not an all-reduce, so not in ALGORITHMS."""
    if int(ranks) != ranks or ranks < 1 or int(count) != count or count < 1:
        raise ValueError(f"broadcast needs ranks >= 1 and count >= 1, got {ranks!r}, {count!r}")
    return _schedule("broadcast", int(ranks), int(count), _binomial_broadcast_steps(int(ranks), int(count)))


@ALGORITHMS.register("halving_doubling")
def halving_doubling(ranks: int, count: int, groups: Groups | None = None) -> Schedule:
    """Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather.

    Non-powers of two use MPICH's fix (MPIR_Allreduce_intra_reduce_scatter_allgather): with
    m = 2^floor(lg p) and rem = p - m, the even ranks among the first 2*rem ranks are the
    extras; each sends its whole buffer to its odd neighbour (one reduce step), the m core
    ranks (odd ranks below 2*rem, then every rank >= 2*rem) run halving-doubling on m
    segments, and each odd neighbour copies the result back (one copy step). Pairing
    neighbours (0->1, 2->3, ...) rather than "ranks 0..rem-1" is what MPICH does and keeps
    each pair on one node when ranks are numbered node by node.
    Halving starts at distance 1 (MPICH's order): the largest exchanges are between neighbours.
    """
    m = 1 << (ranks.bit_length() - 1)
    rem = ranks - m
    extras = np.arange(0, 2 * rem, 2, dtype=np.int64)
    core = np.concatenate([extras + 1, np.arange(2 * rem, ranks, dtype=np.int64)])  # new rank -> rank
    steps: list[Step | None] = [_step(extras, extras + 1, 0, count, True)] if rem else []

    bounds = segment_bounds(count, m)
    nr = np.arange(m, dtype=np.int64)
    a = np.zeros(m, dtype=np.int64)  # each core rank owns segments [a, e)
    e = np.full(m, m, dtype=np.int64)
    mask = 1
    while mask < m:  # reduce-scatter: keep one half, send the other to the partner
        partner = nr ^ mask
        mid = a + (e - a) // 2
        low = (nr & mask) == 0
        send_lo, send_hi = np.where(low, mid, a), np.where(low, e, mid)
        steps.append(_step(core, core[partner], bounds[send_lo], bounds[send_hi], True))
        a, e = np.where(low, a, mid), np.where(low, mid, e)
        mask <<= 1
    mask = m >> 1
    while mask >= 1:  # all-gather: swap owned ranges with the partner, ranges merge
        partner = nr ^ mask
        steps.append(_step(core, core[partner], bounds[a], bounds[e], False))
        a, e = np.minimum(a, a[partner]), np.maximum(e, e[partner])
        mask >>= 1

    if rem:
        steps.append(_step(extras + 1, extras, 0, count, False))
    return _schedule("halving_doubling", ranks, count, steps)


@ALGORITHMS.register("reduce_to_one")
def reduce_to_one(ranks: int, count: int, groups: Groups | None = None) -> Schedule:
    """TF ReductionToOneDevice: everyone sends to rank 0 (reduce), rank 0 sends the sum back."""
    others = np.arange(1, ranks, dtype=np.int64)
    zero = np.zeros_like(others)
    steps = [_step(others, zero, 0, count, True), _step(zero, others, 0, count, False)]
    return _schedule("reduce_to_one", ranks, count, steps)


@ALGORITHMS.register("hierarchical_copy")
def hierarchical_copy(ranks: int, count: int, groups: Groups | None = None) -> Schedule:
    """TF HierarchicalCopyAllReduce: reduce in each group to its leader, leaders combine, broadcast.

    Steps: (1) members -> own leader (reduce, all groups at once); (2) leaders of groups
    1.. -> leader of group 0 (reduce); (3) leader 0 -> other leaders (copy); (4) leaders ->
    members (copy). Leaders are the first member of each group; default groups are the first
    ceil(p/2) ranks and the rest.

    Where this differs from TF (cross_device_utils.aggregate_gradients_using_hierarchical_copy):
    - TF rotates the main device per gradient tensor (group_0_main = i % N for tensor i) to
      spread the aggregation; we treat the buffer as one pack (num_packs=1, tensor 0), so the
      leaders are always the first member of each group.
    - TF uses group_size = N // 2 and slices groups [0, N//2) and [N//2, 2*(N//2)); with an
      odd device count the last device's gradient is left out of the sum (it still receives
      the broadcast result). We put the odd rank in group 0 (ceil(p/2)) so every rank's
      buffer is summed; this predicts TF's traffic for even p only.
    - `groups` may hold any number of groups (TF: always two); with more than two, step 2
      and 3 are a star around leader 0.
    """
    if groups is None:
        half = (ranks + 1) // 2
        groups = [list(range(half)), list(range(half, ranks))] if ranks > 1 else [[0]]
    gs = _check_partition(groups, ranks, "hierarchical_copy")
    leaders = np.array([g[0] for g in gs], dtype=np.int64)
    members = np.array([r for g in gs for r in g[1:]], dtype=np.int64)
    member_leader = np.array([g[0] for g in gs for _ in g[1:]], dtype=np.int64)
    zero = np.full(leaders.size - 1, leaders[0], dtype=np.int64)
    steps = [
        _step(members, member_leader, 0, count, True),
        _step(leaders[1:], zero, 0, count, True),
        _step(zero, leaders[1:], 0, count, False),
        _step(member_leader, members, 0, count, False),
    ]
    return _schedule("hierarchical_copy", ranks, count, steps)


@ALGORITHMS.register("parameter_server")
def parameter_server(ranks: int, count: int, groups: Groups | None = None) -> Schedule:
    """One server (participant id p, starts at zero): all ranks push (reduce), then pull (copy)."""
    if ranks == 1:
        return _schedule("parameter_server", ranks, count, [])
    r = np.arange(ranks, dtype=np.int64)
    server = np.full(ranks, ranks, dtype=np.int64)
    steps = [_step(r, server, 0, count, True), _step(server, r, 0, count, False)]
    return _schedule("parameter_server", ranks, count, steps, extra=("server",))


@ALGORITHMS.register("hierarchical_ring")
def hierarchical_ring(ranks: int, count: int, groups: Groups | None = None) -> Schedule:
    """2-D ring: reduce-scatter in each group, all-reduce each shard across groups, all-gather in each group.

    `groups` (e.g. the GPUs of each node) must have equal sizes L; default is one group of
    all ranks, which is exactly `ring`. With G groups: (1) L-1 reduce-scatter steps inside
    every group at once on L shards; (2) for every shard, the G members holding it (one per
    group) run a ring all-reduce on it (G-1 reduce-scatter + G-1 all-gather steps, all shards
    at once); (3) L-1 all-gather steps inside every group.
    """
    if groups is None:
        groups = [list(range(ranks))]
    gs = _check_partition(groups, ranks, "hierarchical_ring")
    sizes = sorted({len(g) for g in gs})
    if len(sizes) > 1:
        raise ValueError(
            f"hierarchical_ring: groups must all have the same size, got sizes {[len(g) for g in gs]}"
        )
    members = np.array(gs, dtype=np.int64)  # (G, L)
    n_groups, size = members.shape
    shard_bounds = segment_bounds(count, size)
    intra_bounds = np.broadcast_to(shard_bounds, (n_groups, size + 1))
    parts = [_ring_steps(members, intra_bounds, count / size, reduce_scatter=True, all_gather=False)]

    if n_groups > 1:
        # after step (1), position j of each group holds shard (j + 1) mod L
        shard = np.arange(size)
        holders = members[:, (shard - 1) % size].T  # (L shards, G groups)
        lengths = shard_bounds[1:] - shard_bounds[:-1]
        i = np.arange(n_groups + 1)
        sub_bounds = shard_bounds[:-1, None] + i * (lengths[:, None] // n_groups) + np.minimum(
            i, lengths[:, None] % n_groups
        )
        parts.append(_ring_steps(holders, sub_bounds, count / size / n_groups, reduce_scatter=True,
                                 all_gather=True))
    parts.append(_ring_steps(members, intra_bounds, count / size, reduce_scatter=False, all_gather=True))
    if not any(isinstance(part, _LazyRingSteps) for part in parts):
        return _schedule("hierarchical_ring", ranks, count, [step for part in parts for step in part])
    # the phases as they were made, so that those made when asked for stay so
    return _schedule("hierarchical_ring", ranks, count,
                     _ChainedSteps([part if isinstance(part, _LazyRingSteps) else [s for s in part if s is not None]
                                    for part in parts]))


# ---------------------------------------------------------------------------------------------
# execution on arrays


def execute_on_arrays(schedule: Schedule, buffers: np.ndarray) -> np.ndarray:
    """Run `schedule` on real data: `buffers` is (ranks, count); returns (participants, count).

    Extra participants start with zeros. Each step reads all its source segments before any
    write; reduces add with np.add.at (several into the same elements all count); two copies
    into the same element in one step, out-of-range ids or bounds, zero-length or
    self-transfers are schedule bugs and raise SimulationError.
    """
    buffers = np.asarray(buffers)
    p, count = schedule.ranks, schedule.count
    if buffers.shape != (p, count):
        raise ValueError(f"buffers must have shape ({p}, {count}), got {buffers.shape}")
    n_part = schedule.participants()
    out = np.zeros((n_part, count), dtype=buffers.dtype)
    out[:p] = buffers
    flat = out.reshape(-1)
    for k, step in enumerate(schedule.steps):
        src, dst, lo, hi = step.src, step.dst, step.lo, step.hi
        where = f"{schedule.algorithm} step {k}"
        if src.size == 0:
            raise SimulationError(f"{where}: empty step")
        if (src < 0).any() or (src >= n_part).any() or (dst < 0).any() or (dst >= n_part).any():
            raise SimulationError(f"{where}: participant id out of range 0..{n_part - 1}")
        if (src == dst).any():
            raise SimulationError(f"{where}: a participant sends to itself")
        if (lo < 0).any() or (hi > count).any() or (hi <= lo).any():
            raise SimulationError(f"{where}: segment bounds must satisfy 0 <= lo < hi <= {count}")
        lengths = hi - lo
        rep = np.repeat(np.arange(src.size), lengths)
        starts = np.cumsum(lengths) - lengths
        elem = np.arange(int(lengths.sum()), dtype=np.int64) - starts[rep] + lo[rep]
        values = flat[src[rep] * count + elem]  # fancy indexing copies: every read before any write
        target = dst[rep] * count + elem
        if step.reduce:
            np.add.at(flat, target, values)
        else:
            if np.unique(target).size != target.size:
                raise SimulationError(f"{where}: two copies write the same elements in one step")
            flat[target] = values
    return out
