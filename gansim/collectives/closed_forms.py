"""Closed-form all-reduce costs: the `alpha_beta` and `paper` cost models, and nccl-tests' bandwidths.

p ranks, n bytes per rank, alpha seconds per message, beta seconds per byte, gamma seconds
per byte reduced. Ring, halving-doubling and binomial tree are Thakur, Rabenseifner &
Gropp (2005), "Optimization of Collective Communication Operations in MPICH".

The other algorithms use a single-port alpha-beta model (our assumption, stated once
here): every node has one link; a node that receives (or sends) k messages of n bytes in
one step pays k n beta, plus k n gamma when it reduces them; the k messages travel
concurrently, so the step pays alpha once. Steps are summed (lock-step), and a step costs
what its busiest node pays. This is what the `flow` model gives on a contention-free
topology where every node hangs off its own link. Applied to the Thakur formulas it gives
them back exactly, which the tests check against the schedules in `gansim.collectives.schedules`.

Every function here accepts exact numbers (int, fractions.Fraction) as well as floats, and
divides last, so exact inputs give exact results.
"""

from __future__ import annotations

from typing import Callable, Sequence

from gansim.core.registry import Registry

Groups = Sequence[Sequence[int]]
ClosedForm = Callable[..., float]

__all__ = [
    "CLOSED_FORMS",
    "algbw",
    "binomial_tree_time",
    "bus_factor",
    "busbw",
    "closed_form_time",
    "halving_doubling_time",
    "hierarchical_copy_time",
    "hierarchical_ring_time",
    "nccl_shape_time",
    "paper_allreduce_time",
    "paper_t1",
    "paper_t2",
    "binomial_broadcast_time",
    "parameter_server_time",
    "reduce_to_one_time",
    "ring_time",
]

CLOSED_FORMS: Registry[ClosedForm] = Registry("closed-form all-reduce cost")


def _check(p: int, n: float) -> None:
    if int(p) != p or p < 1:
        raise ValueError(f"p must be an integer >= 1, got {p!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0 bytes, got {n!r}")


def _ceil_lg(p: int) -> int:
    return (int(p) - 1).bit_length()


def _floor_lg(p: int) -> int:
    return int(p).bit_length() - 1


@CLOSED_FORMS.register("ring")
def ring_time(
    p: int, n: float, alpha: float, beta: float, gamma: float, groups: Groups | None = None
) -> float:
    """2(p-1) alpha + 2((p-1)/p) n beta + ((p-1)/p) n gamma: reduce-scatter + all-gather ring."""
    _check(p, n)
    if p == 1:
        return 0.0
    return 2 * (p - 1) * alpha + (p - 1) * n * (2 * beta + gamma) / p


@CLOSED_FORMS.register("nccl")
def nccl_shape_time(
    p: int, n: float, alpha: float, beta: float, gamma: float, groups: Groups | None = None
) -> float:
    """NCCL's shape without a machine is its ring (gansim.collectives.schedules.nccl), so the
    ring's formula; on a machine the `alpha_beta` cost model charges NCCL's own tuning model
    instead (gansim/collectives/nccl.py model_seconds)."""
    return ring_time(p, n, alpha, beta, gamma)


@CLOSED_FORMS.register("halving_doubling")
def halving_doubling_time(
    p: int, n: float, alpha: float, beta: float, gamma: float, groups: Groups | None = None
) -> float:
    """Rabenseifner: 2 lg p alpha + 2((p-1)/p) n beta + ((p-1)/p) n gamma for p a power of two.

    Other p (the MPICH fix built by `gansim.collectives.schedules.halving_doubling`): with m = 2^floor(lg p)
    the extras' whole-buffer send costs alpha + n beta + n gamma (the partner reduces it),
    the m core ranks pay the power-of-two formula for m, and the copy back costs
    alpha + n beta:
        (2 lg m + 2) alpha + (2 + 2(m-1)/m) n beta + (1 + (m-1)/m) n gamma.
    """
    _check(p, n)
    if p == 1:
        return 0.0
    m = 1 << _floor_lg(p)
    t = 2 * _floor_lg(p) * alpha + (m - 1) * n * (2 * beta + gamma) / m
    if m != p:
        t += (alpha + n * beta + n * gamma) + (alpha + n * beta)
    return t


@CLOSED_FORMS.register("tree")
def binomial_tree_time(
    p: int, n: float, alpha: float, beta: float, gamma: float, groups: Groups | None = None
) -> float:
    """Binomial reduce + broadcast: 2 ceil(lg p)(alpha + n beta) + ceil(lg p) n gamma."""
    _check(p, n)
    if p == 1:
        return 0.0
    return 2 * binomial_broadcast_time(p, n, alpha, beta) + _ceil_lg(p) * n * gamma


def binomial_broadcast_time(p: int, n: float, alpha: float, beta: float) -> float:
    """Binomial-tree broadcast of n bytes from one root: ceil(lg p)(alpha + n beta)."""
    _check(p, n)
    return _ceil_lg(p) * (alpha + n * beta)


@CLOSED_FORMS.register("reduce_to_one")
def reduce_to_one_time(
    p: int, n: float, alpha: float, beta: float, gamma: float, groups: Groups | None = None
) -> float:
    """Single port: rank 0 receives and reduces p-1 buffers, then sends p-1 copies.

    2 alpha + 2(p-1) n beta + (p-1) n gamma.
    """
    _check(p, n)
    if p == 1:
        return 0.0
    return 2 * alpha + 2 * (p - 1) * n * beta + (p - 1) * n * gamma


@CLOSED_FORMS.register("parameter_server")
def parameter_server_time(
    p: int, n: float, alpha: float, beta: float, gamma: float, groups: Groups | None = None
) -> float:
    """Single port: the server receives and adds p buffers (it starts at zero), then sends p.

    2 alpha + 2 p n beta + p n gamma.
    """
    _check(p, n)
    if p == 1:
        return 0.0
    return 2 * alpha + 2 * p * n * beta + p * n * gamma


def _default_halves(p: int) -> list[list[int]]:
    half = (p + 1) // 2
    return [list(range(half)), list(range(half, p))]


@CLOSED_FORMS.register("hierarchical_copy")
def hierarchical_copy_time(
    p: int, n: float, alpha: float, beta: float, gamma: float, groups: Groups | None = None
) -> float:
    """Single port, with s = largest group size and G groups (default: ceil(p/2) and the rest):

    (1) leaders receive and reduce s-1 buffers: alpha + (s-1) n (beta + gamma)
    (2) leader 0 receives and reduces G-1 leader sums: alpha + (G-1) n (beta + gamma)
    (3) leader 0 sends G-1 copies: alpha + (G-1) n beta
    (4) leaders send s-1 copies: alpha + (s-1) n beta
    A step with nothing to move (s = 1, or G = 1) costs nothing, as the schedule omits it.
    """
    _check(p, n)
    if p == 1:
        return 0.0
    gs = _default_halves(p) if groups is None else [list(g) for g in groups]
    if sum(len(g) for g in gs) != p:
        raise ValueError(f"hierarchical_copy: groups must hold {p} ranks in total, got {groups!r}")
    inner = max(len(g) for g in gs) - 1
    outer = len(gs) - 1
    t: float = 0
    for k in (inner, outer):
        if k:
            t += 2 * alpha + 2 * k * n * beta + k * n * gamma
    return t


@CLOSED_FORMS.register("hierarchical_ring")
def hierarchical_ring_time(
    p: int, n: float, alpha: float, beta: float, gamma: float, groups: Groups | None = None
) -> float:
    """G groups of L ranks (default one group: the ring formula).

    Ring reduce-scatter inside each group on n/L-byte shards, a ring all-reduce of each
    shard across groups (n/(L G) per message), ring all-gather inside each group:
        2(L-1+G-1) alpha + 2((p-1)/p) n beta + ((p-1)/p) n gamma,
    since (L-1)/L + (G-1)/(G L) = (p-1)/p: same bytes per rank as the flat ring, fewer
    latency terms. One beta for all links; a real 2-D cluster has a slower inter-group
    link, which the `flow` model captures and this formula does not.
    """
    _check(p, n)
    if p == 1:
        return 0.0
    if groups is None:
        size, n_groups = p, 1
    else:
        sizes = {len(g) for g in groups}
        if len(sizes) != 1 or sum(len(g) for g in groups) != p:
            raise ValueError(
                f"hierarchical_ring: groups must be equal-sized and hold {p} ranks, got {groups!r}"
            )
        size, n_groups = sizes.pop(), len(groups)
    return 2 * (size - 1 + n_groups - 1) * alpha + (p - 1) * n * (2 * beta + gamma) / p


def closed_form_time(
    algorithm: str,
    p: int,
    n: float,
    alpha: float,
    beta: float,
    gamma: float,
    groups: Groups | None = None,
) -> float:
    """Look up `algorithm` in CLOSED_FORMS (UserInputError if unknown) and evaluate it."""
    return CLOSED_FORMS.get(algorithm, field="algorithm")(p, n, alpha, beta, gamma, groups)


# ---------------------------------------------------------------------------------------------
# the source paper (seed 002, Ravikumar & Sriraman 2023), eqs. (5)-(7)


def paper_t1(N: int, g: float, B: float) -> float:
    """Eq. (5), aggregation time: t1 = N g / B (N GPUs, g gradient bytes, B bytes/s per GPU)."""
    return N * g / B


def paper_t2(N: int, g: float, B: float) -> float:
    """Eq. (6), update (broadcast) time: t2 = (N - 1) g / B."""
    return (N - 1) * g / B


def paper_allreduce_time(N: int, g: float, B: float) -> float:
    """Eq. (7): t = t1 + t2 = (2N - 1) g / B.

    As printed in the paper: it is not zero at N = 1 (t = g / B), unlike the algorithms'
    closed forms, and has no latency term.
    """
    return paper_t1(N, g, B) + paper_t2(N, g, B)


# ---------------------------------------------------------------------------------------------
# nccl-tests conventions


def algbw(nbytes: float, time: float) -> float:
    """Algorithm bandwidth, bytes/s: buffer size over time."""
    if time <= 0:
        raise ValueError(f"time must be > 0 s, got {time!r}")
    return nbytes / time


def busbw(nbytes: float, time: float, n: int, op: str = "all_reduce") -> float:
    """Bus bandwidth of a collective over n ranks: algbw x bus_factor(op, n) (an all-reduce's
    2(n-1)/n by default).

    nccl-tests' factor makes busbw comparable to the link bandwidth: a ring all-reduce moves
    2(n-1)/n bytes per byte of buffer through every rank's link.
    """
    return algbw(nbytes, time) * bus_factor(op, n)


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw (doc/PERFORMANCE.md; src/*.cu GetBw): all-reduce 2(n-1)/n,
    all-gather and reduce-scatter (n-1)/n of their total size, broadcast 1. It is also what each
    link of a ring carries per byte of that size."""
    if int(n) != n or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}")
