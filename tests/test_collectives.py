"""All-reduce schedules: every rank ends with the element-wise sum, for any p and count."""

from __future__ import annotations

import numpy as np
import pytest

from gansim.collectives.schedules import (
    ALGORITHMS,
    Schedule,
    Step,
    broadcast,
    build_schedule,
    execute_on_arrays,
    segment_bounds,
)
from gansim.core.errors import SimulationError, UserInputError

EXPECTED = {
    "ring",
    "tree",
    "halving_doubling",
    "reduce_to_one",
    "hierarchical_copy",
    "parameter_server",
    "hierarchical_ring",
    "nccl",
}
PRIME = 101


def _counts(p: int) -> list[int]:
    return sorted({1, max(p - 1, 1), 1000, PRIME})


def _assert_allreduce(schedule: Schedule, seed: int) -> None:
    rng = np.random.default_rng(seed)
    buffers = rng.integers(-(2**40), 2**40, size=(schedule.ranks, schedule.count), dtype=np.int64)
    out = execute_on_arrays(schedule, buffers)
    assert out.shape == (schedule.participants(), schedule.count)
    total = buffers.sum(axis=0)
    for r in range(schedule.ranks):
        assert np.array_equal(out[r], total), f"{schedule.algorithm} p={schedule.ranks} rank {r}"


def _assert_well_formed(schedule: Schedule) -> None:
    """No empty steps, no zero-length or self transfers, and within a step no participant
    receives into elements it sends (so all-reads-first and concurrent execution agree)."""
    n = schedule.participants()
    for k, step in enumerate(schedule.steps):
        assert len(step) > 0, f"step {k} is empty"
        assert step.src.dtype == np.int64 and step.lo.dtype == np.int64
        assert np.all(step.hi > step.lo) and np.all(step.lo >= 0) and np.all(step.hi <= schedule.count)
        assert np.all(step.src != step.dst)
        assert np.all((0 <= step.src) & (step.src < n)) and np.all((0 <= step.dst) & (step.dst < n))
        reads = np.zeros((n, schedule.count), dtype=bool)
        writes = np.zeros((n, schedule.count), dtype=np.int64)
        for s, d, lo, hi in zip(step.src, step.dst, step.lo, step.hi):
            reads[s, lo:hi] = True
            writes[d, lo:hi] += 1
        assert not np.any(reads & (writes > 0)), f"step {k} reads and writes the same elements"
        if not step.reduce:
            assert writes.max() <= 1, f"copy step {k} writes an element twice"


def test_registered_names() -> None:
    assert set(ALGORITHMS.names()) == EXPECTED


@pytest.mark.parametrize("algorithm", sorted(EXPECTED))
@pytest.mark.parametrize("p", range(1, 18))
def test_every_rank_holds_the_sum(algorithm: str, p: int) -> None:
    for count in _counts(p):
        schedule = build_schedule(algorithm, p, count)
        assert schedule.algorithm == algorithm and schedule.ranks == p and schedule.count == count
        _assert_well_formed(schedule)
        _assert_allreduce(schedule, seed=1000 * p + count)


@pytest.mark.parametrize("algorithm", sorted(EXPECTED))
def test_one_rank_is_an_empty_schedule(algorithm: str) -> None:
    schedule = build_schedule(algorithm, 1, 10)
    assert schedule.steps == () and schedule.transfers() == 0
    buffers = np.arange(10, dtype=np.int64)[None, :]
    assert np.array_equal(execute_on_arrays(schedule, buffers)[:1], buffers)


def _blocks(n_groups: int, size: int) -> list[list[int]]:
    return [list(range(g * size, (g + 1) * size)) for g in range(n_groups)]


def _strided(n_groups: int, size: int) -> list[list[int]]:
    return [list(range(g, n_groups * size, n_groups)) for g in range(n_groups)]


LAYOUTS = [(3, 4), (4, 3), (2, 6), (6, 2), (12, 1), (1, 12), (4, 4), (2, 8), (16, 1), (1, 16), (1, 1), (5, 3)]


@pytest.mark.parametrize("n_groups,size", LAYOUTS)
@pytest.mark.parametrize("layout", [_blocks, _strided])
def test_hierarchical_ring_groups(n_groups: int, size: int, layout) -> None:
    groups = layout(n_groups, size)
    p = n_groups * size
    for count in sorted({1, max(size - 1, 1), p - 1 or 1, p + 1, 1000, PRIME}):
        schedule = build_schedule("hierarchical_ring", p, count, groups)
        _assert_well_formed(schedule)
        _assert_allreduce(schedule, seed=p * 7 + count)


def test_hierarchical_ring_step_counts() -> None:
    # (L-1) + 2(G-1) + (L-1) steps for G groups of L ranks, when count >= p
    for n_groups, size in LAYOUTS:
        schedule = build_schedule("hierarchical_ring", n_groups * size, 720720, _blocks(n_groups, size))
        assert len(schedule.steps) == 2 * (size - 1) + 2 * (n_groups - 1)


def test_hierarchical_ring_of_fewer_elements_than_ranks_keeps_its_phases_as_made() -> None:
    # 5 elements, 4 groups of 4: the phase across groups has empty segments, made when asked for
    schedule = build_schedule("hierarchical_ring", 16, 5, _blocks(4, 4))
    steps = list(schedule.steps)
    assert [len(part.steps) for part in schedule.parts()] == [3, 6, 3]
    assert schedule.transfers() == sum(len(s) for s in steps)
    for k in (0, 4, -1, len(steps) - 1):
        got = schedule.steps[k]
        assert np.array_equal(got.src, steps[k].src) and np.array_equal(got.lo, steps[k].lo)
    assert [s.reduce for s in schedule.steps[2:5]] == [s.reduce for s in steps[2:5]]
    _assert_allreduce(schedule, seed=7)


def test_hierarchical_ring_default_is_ring() -> None:
    a = build_schedule("hierarchical_ring", 7, 100)
    b = build_schedule("ring", 7, 100)
    assert len(a.steps) == len(b.steps)
    for x, y in zip(a.steps, b.steps):
        assert x.reduce == y.reduce
        for f in ("src", "dst", "lo", "hi"):
            assert np.array_equal(getattr(x, f), getattr(y, f))


def test_hierarchical_ring_rejects_bad_groups() -> None:
    with pytest.raises(ValueError, match="same size"):
        build_schedule("hierarchical_ring", 5, 10, [[0, 1, 2], [3, 4]])
    with pytest.raises(ValueError, match="exactly once"):
        build_schedule("hierarchical_ring", 4, 10, [[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="exactly once"):
        build_schedule("hierarchical_ring", 4, 10, [[0, 1]])


@pytest.mark.parametrize(
    "groups",
    [
        [[0, 1, 2], [3, 4]],
        [[0, 1], [2, 3], [4]],
        [[0], [1], [2], [3], [4]],
        [[0, 1, 2, 3, 4]],
        [[4, 0], [3, 1, 2]],
    ],
)
def test_hierarchical_copy_groups(groups: list[list[int]]) -> None:
    for count in (1, 4, 1000):
        schedule = build_schedule("hierarchical_copy", 5, count, groups)
        _assert_well_formed(schedule)
        _assert_allreduce(schedule, seed=count)


def test_hierarchical_copy_default_structure() -> None:
    # p=4: groups [0,1], [2,3]; members -> leaders, leader 2 -> 0, 0 -> 2, leaders -> members
    s = build_schedule("hierarchical_copy", 4, 8)
    assert [(st.src.tolist(), st.dst.tolist(), st.reduce) for st in s.steps] == [
        ([1, 3], [0, 2], True),
        ([2], [0], True),
        ([0], [2], False),
        ([0, 2], [1, 3], False),
    ]
    # odd p: the extra rank goes to group 0, so every buffer is summed (TF would drop it)
    s = build_schedule("hierarchical_copy", 3, 8)
    assert s.steps[0].src.tolist() == [1] and s.steps[0].dst.tolist() == [0]
    assert s.steps[1].src.tolist() == [2] and s.steps[1].dst.tolist() == [0]


@pytest.mark.parametrize("p", [2, 3, 5, 8, 16, 17, 1024])
def test_ring_structure(p: int) -> None:
    count = 10 * p + 3
    s = build_schedule("ring", p, count)
    assert len(s.steps) == 2 * (p - 1)
    assert all(len(st) == p for st in s.steps)
    assert s.transfers() == 2 * (p - 1) * p
    assert [st.reduce for st in s.steps] == [True] * (p - 1) + [False] * (p - 1)
    assert all(np.array_equal(st.dst, (st.src + 1) % p) for st in s.steps)
    sent = np.zeros(p, dtype=np.int64)
    received = np.zeros(p, dtype=np.int64)
    for st in s.steps:
        np.add.at(sent, st.src, st.hi - st.lo)
        np.add.at(received, st.dst, st.hi - st.lo)
    ideal = 2 * (p - 1) / p * count
    # segments differ by at most one element, and each rank sends 2(p-1) segments
    assert np.all(np.abs(sent - ideal) <= 2 * (p - 1))
    assert np.all(np.abs(received - ideal) <= 2 * (p - 1))
    assert sent.sum() == 2 * (p - 1) * count


def test_ring_with_fewer_elements_than_ranks_skips_empty_segments() -> None:
    p, count = 9, 4
    s = build_schedule("ring", p, count)
    assert len(s.steps) == 2 * (p - 1)
    assert all(len(st) == count for st in s.steps)  # one transfer per non-empty segment
    assert s.transfers() == 2 * (p - 1) * count
    bounds = segment_bounds(count, p)
    for k, step in enumerate(s.steps):  # position j sends segment (j - k) mod p, then (j + 1 - k) mod p
        segment = (step.src - k) % p if k < p - 1 else (step.src + 1 - (k - (p - 1))) % p
        assert np.array_equal(step.dst, (step.src + 1) % p)
        assert np.array_equal(step.lo, bounds[segment]) and np.array_equal(step.hi, bounds[segment + 1])
        assert np.array_equal(step.size, step.hi - step.lo) and step.reduce == (k < p - 1)
        assert not step.src.flags.writeable and not step.size.flags.writeable


@pytest.mark.parametrize("p", range(1, 18))
def test_tree_and_halving_doubling_step_counts(p: int) -> None:
    lg_ceil = (p - 1).bit_length()
    lg_floor = p.bit_length() - 1
    assert len(build_schedule("tree", p, 1000).steps) == 2 * lg_ceil
    hd = build_schedule("halving_doubling", p, 1000).steps
    power_of_two = p & (p - 1) == 0
    assert len(hd) == 2 * lg_floor + (0 if power_of_two else 2)
    assert all(np.all(st.hi - st.lo == 1000) for st in build_schedule("tree", p, 1000).steps)


def test_halving_doubling_pairs_neighbours_for_non_powers_of_two() -> None:
    s = build_schedule("halving_doubling", 6, 64)  # rem = 2: 0 -> 1, 2 -> 3
    first, last = s.steps[0], s.steps[-1]
    assert (first.src.tolist(), first.dst.tolist(), first.reduce) == ([0, 2], [1, 3], True)
    assert (last.src.tolist(), last.dst.tolist(), last.reduce) == ([1, 3], [0, 2], False)
    # core ranks 1, 3, 4, 5 exchange halves of 64 elements, then quarters
    assert np.all(s.steps[1].hi - s.steps[1].lo == 32) and np.all(s.steps[2].hi - s.steps[2].lo == 16)


def test_reduce_to_one_and_parameter_server_structure() -> None:
    r = build_schedule("reduce_to_one", 4, 10)
    assert [(st.src.tolist(), st.dst.tolist(), st.reduce) for st in r.steps] == [
        ([1, 2, 3], [0, 0, 0], True),
        ([0, 0, 0], [1, 2, 3], False),
    ]
    ps = build_schedule("parameter_server", 4, 10)
    assert ps.extra_participants == ("server",) and ps.participants() == 5
    assert [(st.src.tolist(), st.dst.tolist(), st.reduce) for st in ps.steps] == [
        ([0, 1, 2, 3], [4, 4, 4, 4], True),
        ([4, 4, 4, 4], [0, 1, 2, 3], False),
    ]
    buffers = np.arange(40, dtype=np.int64).reshape(4, 10)
    out = execute_on_arrays(ps, buffers)
    assert np.array_equal(out[4], buffers.sum(axis=0))  # the server holds the sum too


def test_segment_bounds_match_array_split() -> None:
    for count in (1, 3, 10, 101):
        for parts in (1, 2, 3, 7, 16):
            bounds = segment_bounds(count, parts)
            sizes = [len(a) for a in np.array_split(np.arange(count), parts)]
            assert np.diff(bounds).tolist() == sizes and bounds[0] == 0 and bounds[-1] == count


def _schedule(*steps: Step, ranks: int = 3, count: int = 4) -> Schedule:
    return Schedule(algorithm="hand-made", ranks=ranks, count=count, steps=steps)


def test_two_copies_into_one_segment_is_caught() -> None:
    bad = Step(src=[0, 1], dst=[2, 2], lo=[0, 1], hi=[2, 3], reduce=False)  # overlap on element 1
    with pytest.raises(SimulationError, match="two copies"):
        execute_on_arrays(_schedule(bad), np.ones((3, 4), dtype=np.int64))


def test_reduces_into_one_segment_all_add() -> None:
    step = Step(src=[0, 1], dst=[2, 2], lo=[0, 0], hi=[4, 4], reduce=True)
    buffers = np.array([[1, 2, 3, 4], [10, 20, 30, 40], [100, 100, 100, 100]], dtype=np.int64)
    out = execute_on_arrays(_schedule(step), buffers)
    assert out[2].tolist() == [111, 122, 133, 144]


def test_step_reads_before_writes() -> None:
    swap = Step(src=[0, 1], dst=[1, 0], lo=[0, 0], hi=[4, 4], reduce=False)
    buffers = np.array([[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]], dtype=np.int64)
    out = execute_on_arrays(_schedule(swap), buffers)
    assert out[0].tolist() == [2] * 4 and out[1].tolist() == [1] * 4


@pytest.mark.parametrize(
    "step",
    [
        Step(src=[0], dst=[0], lo=[0], hi=[1], reduce=True),  # self transfer
        Step(src=[0], dst=[5], lo=[0], hi=[1], reduce=True),  # unknown participant
        Step(src=[0], dst=[1], lo=[2], hi=[2], reduce=True),  # zero length
        Step(src=[0], dst=[1], lo=[0], hi=[9], reduce=False),  # past the buffer
    ],
)
def test_malformed_steps_are_caught(step: Step) -> None:
    with pytest.raises(SimulationError):
        execute_on_arrays(_schedule(step), np.zeros((3, 4), dtype=np.int64))


def test_wrong_buffer_shape() -> None:
    with pytest.raises(ValueError, match="shape"):
        execute_on_arrays(build_schedule("ring", 3, 4), np.zeros((3, 5), dtype=np.int64))


def test_unknown_algorithm_is_a_user_error() -> None:
    with pytest.raises(UserInputError, match="allowed: .*ring"):
        build_schedule("butterfly", 4, 10)


def test_bad_sizes() -> None:
    with pytest.raises(ValueError):
        build_schedule("ring", 0, 10)
    with pytest.raises(ValueError):
        build_schedule("ring", 4, 0)


def test_step_arrays_are_read_only_int64() -> None:
    src = np.array([0, 1])
    step = Step(src=src, dst=[1, 0], lo=[0, 0], hi=[1, 1], reduce=1)
    assert step.src.dtype == np.int64 and step.reduce is True
    assert src.flags.writeable  # the caller's array is not frozen behind its back
    with pytest.raises(ValueError):
        step.lo[0] = 5
    with pytest.raises(ValueError, match="same length"):
        Step(src=[0, 1], dst=[1], lo=[0, 0], hi=[1, 1], reduce=True)


@pytest.mark.parametrize("p", range(1, 18))
def test_broadcast_gives_every_rank_rank_zeros_buffer(p: int) -> None:
    schedule = broadcast(p, 7)
    _assert_well_formed(schedule)
    assert len(schedule.steps) == (p - 1).bit_length()  # ceil(lg p) rounds
    data = np.random.default_rng(p).normal(size=(p, 7))
    out = execute_on_arrays(schedule, data)
    assert np.array_equal(out, np.repeat(data[:1], p, axis=0))


@pytest.mark.parametrize("algorithm", ALGORITHMS.names())
def test_a_step_that_names_its_window_is_that_window_of_its_arrays(algorithm):
    """Plays read a ring step's bytes as a slice of one array for all its steps (from
    Step.window, without working out where the step's arrays start): the slice must be the
    step's own lo and hi."""
    named = 0
    for ranks in (2, 5, 16, 64):
        for groups in (None, [list(range(i, min(i + 4, ranks))) for i in range(0, ranks, 4)]):
            try:
                schedule = build_schedule(algorithm, ranks, 100_003, groups)
            except ValueError:
                continue  # an algorithm that needs other ranks or groups
            for step in schedule.steps:
                if step.window >= 0:
                    named += 1
                    for mine in (step.lo, step.hi):
                        assert np.array_equal(mine.base.ravel()[step.window:step.window + mine.size], mine)
    if algorithm in ("ring", "nccl"):
        assert named > 0


def test_a_rings_steps_made_when_asked_for_are_the_steps_a_list_would_hold():
    """A ring's steps are made on demand (32,766 at 16,384 ranks): every way of asking
    (index, negative index, slice, iteration) gives the same transfers, and what the schedule
    tells of all of them at once (windows, reductions, count) is what each step says."""
    from gansim.collectives.schedules import _RingSteps

    schedule = build_schedule("ring", 6, 1003)
    steps = schedule.steps
    assert isinstance(steps, _RingSteps) and len(steps) == 10
    listed = list(steps)
    for k in range(-10, 10):
        a, b = steps[k], listed[k]
        assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("src", "dst", "lo", "hi", "size"))
        assert (a.reduce, a.window) == (b.reduce, b.window)
    assert [s.window for s in steps[2:7]] == [s.window for s in listed[2:7]]
    bounds = segment_bounds(1003, 6)
    j = np.arange(6)
    for s in range(5):  # reduce-scatter step s: position j sends segment (j - s) mod n; all-gather (j + 1 - s)
        assert np.array_equal(steps[s].lo, bounds[(j - s) % 6]) and np.array_equal(steps[s].hi, bounds[(j - s) % 6 + 1])
        assert np.array_equal(steps[5 + s].lo, bounds[(j + 1 - s) % 6])
    with pytest.raises(IndexError):
        steps[10]
    base, windows = schedule.size_windows()
    assert windows == [s.window for s in listed] and all(s.size.base is base for s in listed)
    assert schedule.reduces() == [s.reduce for s in listed] == [True] * 5 + [False] * 5
    assert schedule.transfers() == sum(len(s) for s in listed) == 60
    assert schedule.one_pairing()
    # the integer segments differ by one element; every transfer is timed on the equal share
    assert {int(h - lo) for s in listed for h, lo in zip(s.hi, s.lo)} == {167, 168}
    assert all((s.size == 1003 / 6).all() for s in listed)
