"""Closed forms: the published formulas, and agreement with the schedules they describe."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gansim.collectives.closed_forms import (
    CLOSED_FORMS,
    algbw,
    binomial_tree_time,
    busbw,
    closed_form_time,
    halving_doubling_time,
    hierarchical_copy_time,
    hierarchical_ring_time,
    paper_allreduce_time,
    paper_t1,
    paper_t2,
    parameter_server_time,
    reduce_to_one_time,
    ring_time,
)
from gansim.collectives.schedules import ALGORITHMS, Schedule, build_schedule
from gansim.core.errors import UserInputError

ALPHA, BETA, GAMMA = Fraction(3), Fraction(5, 7), Fraction(11, 13)


@pytest.mark.parametrize(
    "N,g,B",
    [
        (1, Fraction(1), Fraction(1)),
        (2, Fraction(4 * 2_285_369), Fraction(12 * 10**9)),  # the paper's GAN, fp32, 12 GB/s
        (3, Fraction(9_141_476), Fraction(11_000_000_000)),
        (4, Fraction(7, 3), Fraction(5, 11)),
        (1024, Fraction(3, 2), Fraction(1, 4)),
    ],
)
def test_paper_equations_exact(N: int, g: Fraction, B: Fraction) -> None:
    assert paper_t1(N, g, B) == N * g / B
    assert paper_t2(N, g, B) == (N - 1) * g / B
    assert paper_allreduce_time(N, g, B) == (2 * N - 1) * g / B


@pytest.mark.parametrize("N,g,B", [(1, 1.0, 1.0), (4, 2.0**20, 2.0**30), (8, 1.5, 0.25), (3, 6.0, 2.0)])
def test_paper_equations_floats(N: int, g: float, B: float) -> None:
    # values whose quotients are exact in binary floating point: equality holds bit for bit
    assert paper_allreduce_time(N, g, B) == (2 * N - 1) * g / B


def test_paper_is_not_zero_at_one_gpu() -> None:
    assert paper_allreduce_time(1, 100, 10) == 10  # as printed: t1 = g/B, t2 = 0


def test_closed_forms_cover_every_algorithm() -> None:
    assert CLOSED_FORMS.names() == ALGORITHMS.names()


@pytest.mark.parametrize("name", sorted(ALGORITHMS.names()))
def test_one_rank_costs_nothing(name: str) -> None:
    assert CLOSED_FORMS.get(name)(1, 1e9, 1e-5, 1e-9, 1e-10) == 0.0
    assert closed_form_time(name, 1, 1e9, 1e-5, 1e-9, 1e-10) == 0.0


def test_textbook_values() -> None:
    # p=4, n=8: ring 6a + 12b + 6g; halving-doubling 4a + 12b + 6g; tree 4(a + 8b) + 16g
    assert ring_time(4, 8, ALPHA, BETA, GAMMA) == 6 * ALPHA + 12 * BETA + 6 * GAMMA
    assert halving_doubling_time(4, 8, ALPHA, BETA, GAMMA) == 4 * ALPHA + 12 * BETA + 6 * GAMMA
    assert binomial_tree_time(4, 8, ALPHA, BETA, GAMMA) == 4 * (ALPHA + 8 * BETA) + 16 * GAMMA
    # tree uses ceil(lg p): p=5 has 3 levels
    assert binomial_tree_time(5, 8, ALPHA, BETA, GAMMA) == 6 * (ALPHA + 8 * BETA) + 24 * GAMMA
    assert reduce_to_one_time(4, 8, ALPHA, BETA, GAMMA) == 2 * ALPHA + 48 * BETA + 24 * GAMMA
    assert parameter_server_time(4, 8, ALPHA, BETA, GAMMA) == 2 * ALPHA + 64 * BETA + 32 * GAMMA
    # p=4 default groups [0,1], [2,3]: inner and outer each 2a + 2nb + ng
    assert hierarchical_copy_time(4, 8, ALPHA, BETA, GAMMA) == 4 * ALPHA + 32 * BETA + 16 * GAMMA


@pytest.mark.parametrize("p", [2, 4, 8, 16, 64, 1024])
def test_halving_doubling_has_ring_bandwidth_and_log_latency(p: int) -> None:
    n = Fraction(10**6)
    assert halving_doubling_time(p, n, 0, BETA, GAMMA) == ring_time(p, n, 0, BETA, GAMMA)
    assert halving_doubling_time(p, n, 1, 0, 0) == 2 * (p.bit_length() - 1)


def test_halving_doubling_non_power_of_two() -> None:
    # p=6: core m=4 plus one whole-buffer reduce step and one whole-buffer copy step
    n = Fraction(96)
    expected = halving_doubling_time(4, n, ALPHA, BETA, GAMMA) + 2 * ALPHA + 2 * n * BETA + n * GAMMA
    assert halving_doubling_time(6, n, ALPHA, BETA, GAMMA) == expected


def test_hierarchical_ring_matches_ring_bandwidth() -> None:
    n = Fraction(720720)
    assert hierarchical_ring_time(12, n, ALPHA, BETA, GAMMA) == ring_time(12, n, ALPHA, BETA, GAMMA)
    groups = [list(range(g * 4, g * 4 + 4)) for g in range(3)]
    t = hierarchical_ring_time(12, n, ALPHA, BETA, GAMMA, groups)
    assert t - ring_time(12, n, ALPHA, BETA, GAMMA) == (2 * (3 + 2) - 2 * 11) * ALPHA
    with pytest.raises(ValueError):
        hierarchical_ring_time(5, n, ALPHA, BETA, GAMMA, [[0, 1, 2], [3, 4]])


def test_bandwidth_conventions() -> None:
    assert algbw(2e9, 0.5) == 4e9
    for n in (1, 2, 3, 8, 1024):
        assert busbw(2e9, 0.5, n) == pytest.approx(algbw(2e9, 0.5) * 2 * (n - 1) / n)
    assert busbw(1e9, 1.0, 1) == 0.0
    assert busbw(1e9, 1.0, 2) == 1e9  # two ranks: busbw equals algbw
    # a ring all-reduce at link speed B reports busbw == B (bandwidth term only)
    p, nbytes, link = 8, 1 << 30, 25e9
    assert busbw(nbytes, ring_time(p, nbytes, 0, 1 / link, 0), p) == pytest.approx(link)
    with pytest.raises(ValueError):
        algbw(1, 0)


def test_unknown_algorithm_is_a_user_error() -> None:
    with pytest.raises(UserInputError):
        closed_form_time("butterfly", 4, 1, 1, 1, 1)


def _lockstep_time(schedule: Schedule, bytes_per_element: int, alpha, beta, gamma):
    """Single-port alpha-beta cost of a schedule, step by step: alpha per step, the busiest
    node's bytes sent or received times beta, the busiest node's reduced bytes times gamma."""
    total = Fraction(0)
    n = schedule.participants()
    for step in schedule.steps:
        size = (step.hi - step.lo) * bytes_per_element
        sent = np.zeros(n, dtype=np.int64)
        received = np.zeros(n, dtype=np.int64)
        np.add.at(sent, step.src, size)
        np.add.at(received, step.dst, size)
        total += alpha + int(max(sent.max(), received.max())) * beta
        if step.reduce:
            total += int(received.max()) * gamma
    return total


def _layouts(p: int) -> list[list[list[int]] | None]:
    out: list[list[list[int]] | None] = [None]
    for size in range(1, p + 1):
        if p % size == 0:
            out.append([list(range(g * size, (g + 1) * size)) for g in range(p // size)])
    return out


@pytest.mark.parametrize("name", sorted(ALGORITHMS.names()))
@pytest.mark.parametrize("p", range(1, 17))
def test_closed_forms_agree_with_schedules(name: str, p: int) -> None:
    count, elem = 720720, 4  # 720720 is divisible by 1..16: segments are exactly equal
    layouts = _layouts(p) if name in ("hierarchical_ring", "hierarchical_copy") else [None]
    for groups in layouts:
        schedule = build_schedule(name, p, count, groups)
        expected = CLOSED_FORMS.get(name)(p, count * elem, ALPHA, BETA, GAMMA, groups)
        assert _lockstep_time(schedule, elem, ALPHA, BETA, GAMMA) == expected, (name, p, groups)
