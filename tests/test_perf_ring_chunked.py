"""Chunked rings played per edge (gansim/collectives/chunked_ring.py) against the same runs
played transfer by transfer on the flow network: the same figures, to float precision."""

from __future__ import annotations

import numpy as np
import pytest

from gansim.collectives import chunked_ring, uncontended
from gansim.collectives.chunked_ring import ChunkedRingPlay
from gansim.core.config import Scenario, TrainingOptions
from gansim.runner.point import simulate_point
from gansim.topology.graph import topology_from_dict

from tests.test_uncontended import FIGURES, GAN, TOPOLOGIES

NVSWITCH = {"generator": "multi_node", "params": {"nodes": 3, "gpus_per_node": 8, "intra": "nvswitch",
                                                  "nic_bandwidth_GBps": 25}}


def assert_same(played, flowed) -> None:
    """tests/test_uncontended.py's check, but where several links are equally busy either may
    be named the bottleneck: the bytes each carried are added up per play, not over the run
    as the flow network adds them, and equal sums can differ in their last digit."""
    for key in FIGURES:
        assert getattr(played, key) == pytest.approx(getattr(flowed, key), rel=1e-9, abs=1e-15), key
    for key, value in flowed.breakdown.to_dict().items():
        assert played.breakdown.to_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert played.bottleneck.utilization == pytest.approx(flowed.bottleneck.utilization, abs=1e-6)
    busiest = {row.resource for row in flowed.top_resources
               if row.utilization == pytest.approx(flowed.bottleneck.utilization, abs=1e-6)}
    assert played.bottleneck.resource in busiest or played.bottleneck.resource == flowed.bottleneck.resource
    assert [r.utilization for r in played.top_resources] == pytest.approx(
        [r.utilization for r in flowed.top_resources], abs=1e-6)


def run(monkeypatch, topology: dict, workload, plays: bool, gpus: int, algorithm: str = "ring", steps: int = 2,
        chunked_min: int = 0, **options):
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 0 if plays else 10**18)
    monkeypatch.setattr(chunked_ring, "CHUNKED_MIN_TRANSFERS", chunked_min)
    topo = topology_from_dict({"name": "t", **topology}, "test")
    gpus = min(gpus, len(topo.ranks))
    scenario = Scenario(name="t", topology="t", workload=workload, gpus=[gpus], algorithms=[algorithm], steps=steps,
                        options=TrainingOptions(**options))
    seen = []
    record = simulate_point(scenario, topo, gpus, algorithm,
                            on_timeline=lambda tl: seen.extend(s.play for s in tl.spans if s.play is not None))
    return record, seen


@pytest.mark.parametrize("topology", ["switch", "multi_node", "staged", "nvswitch"])
@pytest.mark.parametrize("chunks", [2, 3, 4])
def test_a_chunked_ring_played_per_edge_times_like_the_flow_network(monkeypatch, topology, chunks):
    topo = NVSWITCH if topology == "nvswitch" else TOPOLOGIES[topology]
    workload = {"allreduce_bytes": 4 * 100_003}  # integer segments of unequal sizes, timed on equal shares
    played, plays = run(monkeypatch, topo, workload, True, 24, chunks=chunks)
    flowed, none = run(monkeypatch, topo, workload, False, 24, chunks=chunks)
    assert not none
    assert plays and all(isinstance(p, ChunkedRingPlay) for p in plays)
    assert_same(played, flowed)


@pytest.mark.parametrize("options", [
    {"overlap": True, "chunks": 4},
    {"overlap": True, "chunks": 3, "compute_cv": 0.3},
    {"chunks": 2, "gamma_s_per_byte": 3e-11, "gradient_dtype": "fp16"},
])
def test_a_gan_step_with_chunked_rings_times_like_the_flow_network(monkeypatch, options):
    played, plays = run(monkeypatch, TOPOLOGIES["multi_node"], GAN, True, 12, steps=3, **options)
    flowed, none = run(monkeypatch, TOPOLOGIES["multi_node"], GAN, False, 12, steps=3, **options)
    assert not none
    assert any(isinstance(p, ChunkedRingPlay) for p in plays)
    assert_same(played, flowed)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunks", [2, 3])
def test_edges_of_unlike_speeds_handle_their_events_only_when_no_neighbour_can_come_first(monkeypatch, seed,
                                                                                         chunks):
    """Every GPU on its own link to a switch, of its own bandwidth (3 to 60 GB/s) and latency
    (0.5 to 20 us), ranks computing at their own speeds: a fast edge's end starts a chunk on a
    slow neighbour while that one's chunks still move, and the neighbour's next end must wait
    for it (an edge handles its next event only when no neighbour's can bring an arrival
    before it). The flow network's figures."""
    rng = np.random.default_rng(seed)
    gpus = 10
    unlike = {"nodes": [{"id": "sw", "kind": "switch"}] + [{"id": f"g{i}", "kind": "gpu"} for i in range(gpus)],
              "links": [{"a": f"g{i}", "b": "sw", "kind": "nvlink", "bandwidth_GBps": float(bw),
                         "latency_us": float(lat)}
                        for i, (bw, lat) in enumerate(zip(rng.uniform(3.0, 60.0, gpus), rng.uniform(0.5, 20.0, gpus)))]}
    played, plays = run(monkeypatch, unlike, GAN, True, gpus, steps=2, overlap=True, chunks=chunks,
                        compute_cv=0.2)
    flowed, none = run(monkeypatch, unlike, GAN, False, gpus, steps=2, overlap=True, chunks=chunks,
                       compute_cv=0.2)
    assert not none
    assert any(isinstance(p, ChunkedRingPlay) for p in plays)
    assert_same(played, flowed)


def test_a_chunked_ring_whose_links_something_else_used_is_played_again_on_the_flow_network(monkeypatch):
    """tests/test_uncontended.py's case (a ring's hop between PCIe switches meets the next
    step's host-to-device copies of ranks that computed at other speeds) with chunks: found
    contended after the run, run again."""
    gan = {**GAN, "networks": {name: {**net, "optimizer_s": 0.0, "forward_s": 0.0}
                               for name, net in GAN["networks"].items()}, "data": {"host_prep_s": 0.0,
                                                                                   "bytes_per_sample": 3136}}
    played, plays = run(monkeypatch, TOPOLOGIES["pcie_pairs"], gan, True, 8, chunks=3, compute_cv=0.1)
    flowed, _ = run(monkeypatch, TOPOLOGIES["pcie_pairs"], gan, False, 8, chunks=3, compute_cv=0.1)
    assert not plays  # found contended, played again without plays
    assert played == flowed


def test_a_ring_whose_edges_share_a_link_is_not_played_in_chunks(monkeypatch):
    """Ranks alternate between two switches, so every other ring edge crosses the same
    inter-switch link: chunks of different edges would share it, which the per-edge play
    does not model; the ring stays on the flow network."""
    interleaved = {"nodes": [{"id": "a", "kind": "switch"}, {"id": "b", "kind": "switch"}]
                   + [{"id": f"g{i}", "kind": "gpu"} for i in range(6)],
                   "links": [{"a": f"g{i}", "b": "ab"[i % 2], "kind": "nvlink", "bandwidth_GBps": 50.0,
                              "latency_us": 1.0} for i in range(6)]
                   + [{"a": "a", "b": "b", "kind": "net", "bandwidth_GBps": 25.0, "latency_us": 2.0}]}
    workload = {"allreduce_bytes": 4 * 100_003}
    played, plays = run(monkeypatch, interleaved, workload, True, 6, chunks=2)
    flowed, _ = run(monkeypatch, interleaved, workload, False, 6, chunks=2)
    assert not any(isinstance(p, ChunkedRingPlay) for p in plays)
    assert played == flowed


def test_the_history_of_chunk_ends_grows_when_a_chunk_runs_ahead(monkeypatch):
    """Ring buffers of two steps' counts and latest ends, checked every round, force growth
    (also while chunks are ahead of the next); the figures stay the flow network's."""
    monkeypatch.setattr(chunked_ring, "_HISTORY", 2)
    monkeypatch.setattr(chunked_ring, "_CHECK_EVERY", 0)
    workload = {"allreduce_bytes": 4 * 100_003}
    played, plays = run(monkeypatch, NVSWITCH, workload, True, 24, chunks=4)
    flowed, _ = run(monkeypatch, NVSWITCH, workload, False, 24, chunks=4)
    assert plays
    assert_same(played, flowed)


def test_a_rings_bytes_per_step_are_read_from_its_windows_without_a_dense_table():
    """The play reads each step's bytes from the ring's tiled segment sizes (a 16,384-rank
    ring's table of bytes per step and edge would be 4 GB): the same figures as each step's own."""
    from types import SimpleNamespace

    from gansim.collectives.chunked_ring import _Amounts
    from gansim.collectives.schedules import build_schedule

    schedule = build_schedule("ring", 16, 1003)
    plan = SimpleNamespace(schedule=schedule, participants=16, bytes_per_element=4.0)
    amounts = _Amounts.of(plan, 4)
    assert amounts.dense is None
    for k, step in enumerate(schedule.steps):
        assert np.array_equal(amounts.at(np.full(16, k), np.arange(16)), step.size * (4.0 / 4))


def _machine_ring(p: int, slow_every: int = 8) -> tuple[np.ndarray, np.ndarray, "chunked_ring._Amounts"]:
    """A ring of p ranks in machines of 8 GPUs (7 NVSwitch edges and a NIC edge each, equal
    shares of 64 KiB), the NIC edge of every `slow_every` ranks one hop longer."""
    latency = np.tile([3e-6] * 7 + [10e-6], p // 8)
    latency[slow_every - 1::slow_every] += 1e-6 if slow_every > 8 else 0.0
    rate = np.tile([300e9] * 7 + [25e9], p // 8)
    amounts = chunked_ring._Amounts(np.full(3 * p, 65536.0), np.full(2 * (p - 1), p, dtype=np.int64), None)
    return latency, rate, amounts


def _counting_plays(monkeypatch) -> list[tuple[int, int]]:
    """(ranks, steps) of every play_chunked_ring call from here on."""
    played: list[tuple[int, int]] = []
    whole = chunked_ring.play_chunked_ring

    def counted(entry, *args, **rings):
        played.append((entry.size, args[3].size))
        return whole(entry, *args, **rings)

    monkeypatch.setattr(chunked_ring, "play_chunked_ring", counted)
    return played


@pytest.mark.parametrize("p, chunks, gamma, entry, settles", [
    (512, 4, 0.0, "alike", True), (512, 2, 0.0, "alike", True), (512, 4, 0.0, "staggered", True),
    (512, 3, 3e-11, "alike", False), (2048, 2, 3e-11, "alike", True), (2048, 3, 3e-11, "alike", False)])
def test_a_ring_alike_in_every_machine_is_played_on_one_and_its_regime_extrapolated(monkeypatch, p, chunks, gamma,
                                                                                     entry, settles):
    """A ring of 8-GPU machines: played on the ring of 8 closed on itself, from plays of a
    few hundred steps where it settles into a regime, the same figures as the whole ring
    played step by step. Without a reduction cost its two phases are alike: three plays of
    190, 254 and 318 steps. With one, the reduce-scatter and the all-gather each settle on
    their own: six plays of 382 to 510 steps, which only a ring of more steps than that
    is worth (2,048 ranks: 4,094 steps; at 512 ranks the ring of 8 is played whole); with 3
    chunks the all-gather does not settle into a period of 64 steps (its steps vary, by a
    few us) and the ring of 8 is played step by step. Ranks that join at other times in
    each machine repeat too; ranks that do not repeat are not played so."""
    latency, rate, amounts = _machine_ring(p)
    steps = 2 * (p - 1)
    reduce = np.arange(steps) < p - 1
    joins = np.full(p, 0.5) if entry == "alike" else 0.5 + np.tile(np.arange(8) * 1e-5, p // 8)
    whole = chunked_ring.play_chunked_ring
    played = _counting_plays(monkeypatch)
    fast = chunked_ring.play_periodic_chunked_ring(joins, latency, rate, amounts, reduce, gamma, chunks)
    monkeypatch.undo()
    assert fast is not None and played and all(ranks in (8, 24) for ranks, _ in played)
    assert all(length < 600 for _, length in played) == settles
    if gamma == 0:  # (the three plays as rings side by side, one play)
        assert played == [(24, 318)]
    if p <= 512:
        slow = whole(joins, latency, rate, amounts, reduce, gamma, chunks)
    else:  # (the ring of 8 played whole stands for the whole ring: the cases above check that)
        small = chunked_ring._Amounts(np.full(24, 65536.0), np.full(steps, 8, dtype=np.int64), None)
        slow = tuple(np.tile(a, p // 8) for a in whole(joins[:8], latency[:8], rate[:8], small, reduce, gamma, chunks))
    for got, want in zip(fast, slow):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    different = joins.copy()
    different[100] += 1e-6
    assert chunked_ring.play_periodic_chunked_ring(different, latency, rate, amounts, reduce, gamma, chunks) is None


@pytest.mark.parametrize("chunks", [2, 3, 4])
def test_rings_played_side_by_side_are_each_its_own_play_to_the_last_digit(chunks):
    """The three plays of a regime (rings of 8 ranks of 190, 254 and 318 steps) made as one
    play of rings side by side: each ring's ends those of its play alone, bit for bit."""
    latency, rate, _ = _machine_ring(8)
    joins = np.array([1.05e-5, 7e-6, 3.5e-6, 0.0, 0.0, 3.5e-6, 7e-6, 1.05e-5])
    lengths = [190, 254, 318]
    wide = chunked_ring._Amounts(np.full(32, 65536.0), np.full(318, 8, dtype=np.int64), None)
    together = chunked_ring.play_chunked_ring(np.tile(joins, 3), np.tile(latency, 3), np.tile(rate, 3), wide,
                                              np.ones(318, dtype=bool), 0.0, chunks, ring=8,
                                              ring_steps=np.array(lengths))
    for r, n in enumerate(lengths):
        alone = chunked_ring.play_chunked_ring(joins, latency, rate, chunked_ring._Amounts(
            np.full(24, 65536.0), np.full(n, 8, dtype=np.int64), None), np.ones(n, dtype=bool), 0.0, chunks)
        for got, want in zip(together, alone):
            assert np.array_equal(got[8 * r:8 * (r + 1)], want)


def test_a_ring_that_repeats_only_over_many_machines_is_played_on_one_period(monkeypatch):
    """A rail fabric's ring repeats leaf group by leaf group (its crossings between groups are
    one link longer), not machine by machine: played whole on one period, here 128 of 512
    ranks, the same figures as the whole ring."""
    p = 512
    latency, rate, amounts = _machine_ring(p, slow_every=128)
    reduce = np.arange(2 * (p - 1)) < p - 1
    joins = np.full(p, 0.25)
    whole = chunked_ring.play_chunked_ring
    played = _counting_plays(monkeypatch)
    fast = chunked_ring.play_periodic_chunked_ring(joins, latency, rate, amounts, reduce, 0.0, 2)
    monkeypatch.undo()
    assert played == [(128, 2 * (p - 1))]
    for got, want in zip(fast, whole(joins, latency, rate, amounts, reduce, 0.0, 2)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_a_gans_buckets_that_join_alike_each_step_are_played_once(monkeypatch):
    """DDP's buckets join each training step as they did the step before (but for rounding):
    each bucket's chunked ring is played once a run, the same figures as the flow network's
    (test_a_gan_step_with_chunked_rings_times_like_the_flow_network)."""
    played = _counting_plays(monkeypatch)
    _, plays = run(monkeypatch, TOPOLOGIES["multi_node"], GAN, True, 12, steps=4, overlap=True, chunks=4)
    solved = [p for p in plays if isinstance(p, ChunkedRingPlay)]
    assert len(solved) >= 8 and len(played) <= len(solved) // 2


def test_a_small_chunked_ring_stays_on_the_flow_network(monkeypatch):
    """Below CHUNKED_MIN_TRANSFERS a chunked ring keeps the flow network (and every transfer
    for its trace), even where unchunked rings of that size are played."""
    workload = {"allreduce_bytes": 4 * 100_003}
    record, plays = run(monkeypatch, NVSWITCH, workload, True, 24, chunked_min=chunked_ring.CHUNKED_MIN_TRANSFERS,
                        chunks=4)
    assert not any(isinstance(p, ChunkedRingPlay) for p in plays)
