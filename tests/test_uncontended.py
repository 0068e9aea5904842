"""Collectives played without the flow network (gansim/collectives/uncontended.py) against
the same runs played transfer by transfer on it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gansim.collectives import uncontended
from gansim.core.config import Scenario, TrainingOptions
from gansim.network.engine import ran_alone
from gansim.runner.point import simulate_point
from gansim.topology.graph import topology_from_dict
from gansim.runner.record import RunRecord

TOPOLOGIES = {
    "switch": {"generator": "switch", "params": {"gpus": 12, "bandwidth_GBps": 25.0, "latency_us": 1.0}},
    "multi_node": {"generator": "multi_node", "params": {"nodes": 3, "gpus_per_node": 4}},
    "pcie_pairs": {"generator": "pcie_tree", "params": {"gpus": 8, "gpus_per_switch": 2}},
    # one GPU without peer-to-peer per host: its bytes to another GPU are staged in the
    # receiver's host memory, a resource the route weighs 2 (written, then read back), whose
    # 20 GB/s (10 GB/s of data) is the slowest part of every hop
    "staged": {"nodes": [{"id": "sw", "kind": "switch"}]
               + [{"id": f"h{i}", "kind": "host", "dram_bandwidth_GBps": 20.0} for i in range(6)]
               + [{"id": f"g{i}", "kind": "gpu", "p2p": False, "tflops": 10.0} for i in range(6)],
               "links": [{"a": f"g{i}", "b": f"h{i}", "kind": "pcie", "bandwidth_GBps": 15.75, "latency_us": 1.0}
                         for i in range(6)]
               + [{"a": f"h{i}", "b": "sw", "kind": "net", "bandwidth_GBps": 25.0, "latency_us": 2.0}
                  for i in range(6)]},
    # CPU ranks, whose cores move their messages: a core carries its rank's send and its
    # receive at the loopback's 5 GB/s each (gansim/network/cluster.py gives it twice the
    # rate); the host's cores are not counted (a pool of unlimited capacity). A loopback of
    # 500 us makes a ring long beside a GAN's backward, which meets only its first steps.
    "cpu_host": {"nodes": [{"id": "host", "kind": "host"}]
                 + [{"id": f"cpu{i}", "kind": "cpu", "host": "host", "threads": 1, "tflops": 0.2} for i in range(12)],
                 "links": [{"a": f"cpu{i}", "b": "host", "kind": "loopback", "bandwidth_GBps": 5.0, "latency_us": 500.0}
                           for i in range(12)]},
}
GAN = {"name": "small-gan", "bytes_per_param": 4, "networks": {
    "discriminator": {"params": 233985, "forward_s": 0.0004, "backward_s": 0.0008, "optimizer_s": 0.0001},
    "generator": {"params": 2051384, "forward_s": 0.0010, "backward_s": 0.0020, "optimizer_s": 0.0004}},
    "data": {"host_prep_s": 0.0002, "bytes_per_sample": 3136}}


def run(monkeypatch, topology: str, algorithm: str, workload, plays: bool, gpus: int = 12, kept=None, **options):
    """The run's record and how many plays it kept (`kept`, a list, gets the plays, then
    the work each resource carried)."""
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 0 if plays else 10**18)
    topo = topology_from_dict({"name": topology, **TOPOLOGIES[topology]}, "test")
    gpus = min(gpus, len(topo.ranks))
    scenario = Scenario(name="t", topology="t", workload=workload, gpus=[gpus], algorithms=[algorithm], steps=3,
                        options=TrainingOptions(**options))
    seen, carried = [], []
    record = simulate_point(scenario, topo, gpus, algorithm,
                            on_timeline=lambda tl: (seen.extend(s.play for s in tl.spans if s.play is not None),
                                                    carried.append(tl.carried_per_resource())))
    if kept is not None:
        kept.extend([*seen, *carried])
    return record, len(seen)


FIGURES = ("step_time_s", "allreduce_time_s", "busbw_GBps")


def assert_same(played: RunRecord, flowed: RunRecord) -> None:
    for key in FIGURES:
        assert getattr(played, key) == pytest.approx(getattr(flowed, key), rel=1e-9, abs=1e-15), key
    for key, value in flowed.breakdown.to_dict().items():
        assert played.breakdown.to_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert played.bottleneck.resource == flowed.bottleneck.resource
    assert played.bottleneck.utilization == pytest.approx(flowed.bottleneck.utilization, abs=1e-6)


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
@pytest.mark.parametrize("algorithm", ["ring", "hierarchical_ring", "halving_doubling", "tree"])
def test_an_allreduce_played_uncontended_times_like_the_flow_network(monkeypatch, topology, algorithm):
    workload = {"allreduce_bytes": 4 * 100_003}  # segments of unequal sizes
    played, plays = run(monkeypatch, topology, algorithm, workload, plays=True)
    flowed, none = run(monkeypatch, topology, algorithm, workload, plays=False)
    assert none == 0
    if algorithm in ("ring", "hierarchical_ring"):
        assert plays == 3  # one per step: nothing contends with a ring's transfers here
    assert_same(played, flowed)


@pytest.mark.parametrize("topology", ["switch", "multi_node"])
@pytest.mark.parametrize("options", [
    {"overlap": True},
    {"overlap": True, "compute_cv": 0.3, "broadcast_buffers": True},
    {"gamma_s_per_byte": 3e-11, "gradient_dtype": "fp16"},
])
def test_a_gan_step_with_played_allreduces_times_like_the_flow_network(monkeypatch, topology, options):
    played, plays = run(monkeypatch, topology, "ring", "paper-mlp-gan", plays=True, **options)
    flowed, _ = run(monkeypatch, topology, "ring", "paper-mlp-gan", plays=False, **options)
    assert plays > 0
    assert_same(played, flowed)


def has_whole(play) -> bool:
    """Whether a play made some steps' shapes from a whole's (PlayPlan.build)."""
    return any(shape.sender_slot is not None for shape in play.plan.shapes)


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
@pytest.mark.parametrize("algorithm", ["ring", "hierarchical_ring"])
def test_a_ring_of_fewer_elements_than_ranks_is_played_as_parts_of_the_whole_ring(monkeypatch, topology, algorithm):
    """5 elements over 6 to 12 ranks: each step moves only the segments that are not empty, a
    pairing of its own (a per-variable all-reduce of a bias), checked and kept on the whole
    ring's pairs (a hierarchical ring's: its rings across machines), with the same figures and
    link bytes as the flow network."""
    workload = {"allreduce_bytes": 4 * 5}
    played_kept: list = []
    flowed_kept: list = []
    played, plays = run(monkeypatch, topology, algorithm, workload, plays=True, kept=played_kept)
    flowed, _ = run(monkeypatch, topology, algorithm, workload, plays=False, kept=flowed_kept)
    assert plays == 3
    assert all(has_whole(play) for play in played_kept[:3])
    assert_same(played, flowed)
    assert played_kept[3] == pytest.approx(flowed_kept[0], rel=1e-12)
    assert played_kept[3].sum() > 0


@pytest.mark.parametrize("topology", ["switch", "cpu_host", "multi_node"])
@pytest.mark.parametrize("algorithm", ["ring", "hierarchical_ring"])
def test_what_parts_of_the_whole_ring_used_is_what_each_step_on_its_own_used(monkeypatch, topology, algorithm):
    """Per-variable all-reduces of variables of 3 and 5 elements over 12 ranks, compute
    varying by rank: each play's first and last use of every resource (what finds a play
    that met other work) and the bytes it carried, kept on the whole ring's slots, equal
    those kept step by step, and the run equals the flow network's."""
    workload = {**GAN, "networks": {name: {**net, "variables": [{"size": 5, "count": 2}, {"size": 3, "count": 4}],
                                           "params": 22} for name, net in GAN["networks"].items()}}
    options = {"gradient_sync": "per_variable", "compute_cv": 0.3}
    whole: list = []
    played, plays = run(monkeypatch, topology, algorithm, workload, plays=True, kept=whole, **options)
    monkeypatch.setattr(uncontended, "_whole", lambda *args: None)
    apart: list = []
    run(monkeypatch, topology, algorithm, workload, plays=True, kept=apart, **options)
    flowed, _ = run(monkeypatch, topology, algorithm, workload, plays=False, **options)
    assert plays > 0
    assert all(has_whole(play) for play in whole[:plays])
    assert not any(has_whole(play) for play in apart[:plays])
    for kept_whole, kept_apart in zip(whole[:plays], apart[:plays]):
        for a, b in zip(kept_whole.resource_spans(), kept_apart.resource_spans()):
            np.testing.assert_array_equal(a, b)
    assert whole[plays] == pytest.approx(apart[plays], rel=1e-12)
    assert_same(played, flowed)


def test_a_ring_staged_through_host_memory_is_played_at_its_weighted_rate(monkeypatch):
    workload = {"allreduce_bytes": 4 * 100_003}
    played, plays = run(monkeypatch, "staged", "ring", workload, plays=True)
    flowed, _ = run(monkeypatch, "staged", "ring", workload, plays=False)
    assert plays == 3
    assert flowed.bottleneck.kind == "memory"
    assert_same(played, flowed)
    # each hop moves its bytes at 10 GB/s, half the memory's 20 GB/s
    p, n = 6, workload["allreduce_bytes"]
    assert flowed.allreduce_time_s > 2 * (p - 1) / p * n / 10e9


def test_channels_of_one_pair_in_one_step_move_as_one_transfer(monkeypatch):
    """Two transfers of one pair in one step share its route: the pair is done when both
    are, at (a + b) / bandwidth, as max-min sharing gives them."""
    from gansim.collectives import schedules

    def two_channel_ring(ranks: int, count: int, groups=None):
        one = schedules.ring(ranks, count)
        steps = []
        for step in one.steps:
            half = (step.lo + step.hi) // 2
            steps.append(schedules.Step(np.concatenate([step.src, step.src]), np.concatenate([step.dst, step.dst]),
                                        np.concatenate([step.lo, half]), np.concatenate([half, step.hi]),
                                        step.reduce))
        return schedules.Schedule("two_channel_ring", ranks, count, tuple(steps))

    monkeypatch.setitem(schedules.ALGORITHMS._items, "two_channel_ring", two_channel_ring)
    workload = {"allreduce_bytes": 4 * 100_003}
    played, plays = run(monkeypatch, "switch", "two_channel_ring", workload, plays=True)
    flowed, _ = run(monkeypatch, "switch", "two_channel_ring", workload, plays=False)
    assert plays == 3
    assert_same(played, flowed)


def test_a_schedule_whose_pairs_share_a_link_in_one_step_is_not_played(monkeypatch):
    # reduce_to_one: every rank sends to rank 0 at once, over rank 0's one link
    workload = {"allreduce_bytes": 4 * 100_003}
    _, plays = run(monkeypatch, "switch", "reduce_to_one", workload, plays=True)
    assert plays == 0


def test_a_cpu_core_that_cannot_move_a_send_and_a_receive_at_once_is_contention(monkeypatch):
    """A CPU rank's core is rated at twice its slowest link; with a second, slower link (1 GB/s,
    to a NIC the ring does not use: routes take the loopback's lower latency) it carries 2 GB/s, less than the send and the receive of a
    ring step want over the 5 GB/s loopback: the ring is not played, and on the flow network
    each transfer gets half of each core, 1 GB/s."""
    topology = TOPOLOGIES["cpu_host"]
    monkeypatch.setitem(TOPOLOGIES, "cpu_nic", {
        "nodes": topology["nodes"] + [{"id": "nic", "kind": "switch"}],
        "links": topology["links"] + [{"a": f"cpu{i}", "b": "nic", "kind": "net", "bandwidth_GBps": 1.0,
                                       "latency_us": 5000.0} for i in range(12)]})
    workload = {"allreduce_bytes": 4 * 100_003}
    played, plays = run(monkeypatch, "cpu_nic", "ring", workload, plays=True)
    flowed, _ = run(monkeypatch, "cpu_nic", "ring", workload, plays=False)
    assert plays == 0
    assert played == flowed
    p, n = 12, workload["allreduce_bytes"]
    assert flowed.allreduce_time_s > 2 * (p - 1) / p * n / 1e9
    _, fits = run(monkeypatch, "cpu_host", "ring", workload, plays=True)
    assert fits == 3


@pytest.mark.parametrize("options", [{"overlap": True}, {"overlap": True, "compute_cv": 0.1}])
def test_a_ring_whose_first_steps_meet_the_backward_on_cpu_cores_plays_the_rest(monkeypatch, options):
    """With DDP on CPU ranks, the generator's first bucket is all-reduced while the rest of
    its backward runs on the cores that move the bucket's messages: the run is played again
    with the ring's first steps on the flow network and the rest played, which gives the
    figures, and the trace, of the run played wholly on the flow network."""
    import json

    from gansim.outputs.trace import chrome_trace

    def simulate(plays: bool) -> tuple[RunRecord, list[int], dict]:
        monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 0 if plays else 10**18)
        topo = topology_from_dict({"name": "cpu_host", **TOPOLOGIES["cpu_host"]}, "test")
        scenario = Scenario(name="t", topology="t", workload="paper-mlp-gan", gpus=[12], algorithms=["ring"], steps=3,
                            options=TrainingOptions(**options))
        box: dict = {"heads": []}

        def look(timeline) -> None:
            box["heads"] = [span.play.first_step for span in timeline.spans if span.play is not None]
            box["trace"] = json.loads(chrome_trace(timeline, "t"))

        record = simulate_point(scenario, topo, 12, "ring", on_timeline=look, keep_transfers=10**6)
        return record, box["heads"], box["trace"]

    played, heads, played_trace = simulate(True)
    flowed, none, flowed_trace = simulate(False)
    assert none == [] and heads and any(first > 0 for first in heads), heads
    assert_same(played, flowed)
    for cat in ("send", "all-reduce steps"):
        def events(doc):
            return sorted((e["ts"], e["dur"], e["pid"], e["name"], json.dumps(e.get("args"), sort_keys=True))
                          for e in doc["traceEvents"] if e.get("cat") == cat)
        assert events(played_trace) and events(played_trace) == events(flowed_trace), cat


class _Spans:
    def __init__(self, res, lo, hi):
        self.spans = (np.array(res), np.array(lo, dtype=float), np.array(hi, dtype=float))
        self.early_exit = False

    def resource_spans(self):
        return self.spans


def test_overlap_with_an_outside_flow_or_another_play_is_found():
    play = _Spans([3, 4], [1.0, 1.0], [2.0, 2.0])
    no_flows = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    assert not uncontended.contended([play], *no_flows)
    # a flow on another resource, or on the same one before or after (touching), is fine
    assert not uncontended.contended([play], np.array([5, 3, 3]), np.array([1.5, 0.0, 2.0]),
                                     np.array([1.8, 1.0, 3.0]))
    assert uncontended.contended([play], np.array([4]), np.array([1.9]), np.array([2.5]))
    assert uncontended.contended([play], np.array([4]), np.array([0.5]), np.array([1.1]))
    # two flows overlapping each other are the flow network's business
    assert not uncontended.contended([play], np.array([7, 7]), np.array([0.0, 0.5]), np.array([1.0, 1.5]))
    assert uncontended.contended([play, _Spans([4], [1.5], [3.0])], *no_flows)
    assert not uncontended.contended([play, _Spans([4], [2.0], [3.0])], *no_flows)


def test_work_timed_as_alone_must_not_meet_anything_on_its_resources():
    no_flows = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0))

    def alone(res, lo, hi):
        return np.array(res), np.array(lo, dtype=float), np.array(hi, dtype=float)

    # one after another on a resource (touching), or at once on different ones: fine
    assert not uncontended.contended([], *no_flows, *alone([3, 3, 4], [0.0, 1.0, 0.5], [1.0, 2.0, 1.5]))
    # two at once on one resource, or one beside a flow or a play: they would have shared it
    assert uncontended.contended([], *no_flows, *alone([3, 3], [0.0, 0.9], [1.0, 2.0]))
    assert uncontended.contended([], np.array([3]), np.array([0.5]), np.array([0.6]), *alone([3], [0.0], [1.0]))
    assert uncontended.contended([_Spans([3], [1.5], [3.0])], *no_flows, *alone([3], [1.0], [2.0]))
    assert not uncontended.contended([_Spans([3], [2.0], [3.0])], *no_flows, *alone([3], [1.0], [2.0]))


def test_input_pipelines_are_private_only_where_their_host_has_a_core_for_each():
    import simpy

    from gansim.network.cluster import Cluster

    def cluster(cores: int) -> Cluster:
        topo = topology_from_dict({"name": "m", "generator": "multi_node", "params": {
            "nodes": 2, "gpus_per_node": 4, "intra": "nvswitch", "intra_params": {"host_cores": cores}}}, "test")
        return Cluster(topo, 8, simpy.Environment())

    assert cluster(4).private_loader and len(cluster(4).idle_pools) == 2
    assert not cluster(3).private_loader and not cluster(3).idle_pools


class _Found:
    """`contended`, keeping what it answered."""

    def __init__(self, contended):
        self.contended, self.answers = contended, []

    def __call__(self, *args, **kwargs):
        self.answers.append(self.contended(*args, **kwargs))
        return self.answers[-1]


def test_a_run_whose_played_links_something_else_used_is_played_again_on_the_flow_network(monkeypatch):
    """On PCIe switches of two GPUs, a ring's hop between switches crosses the host's link
    to the next switch, which that switch's GPUs' host-to-device copies also use; with no
    compute between one step's all-reduce and the next step's copy, and ranks that compute
    at different speeds (so that they do not all end the all-reduce at one instant), they meet."""
    gan = {**GAN, "networks": {name: {**net, "optimizer_s": 0.0, "forward_s": 0.0}
                               for name, net in GAN["networks"].items()}, "data": {"host_prep_s": 0.0,
                                                                                   "bytes_per_sample": 3136}}
    monkeypatch.setattr(uncontended, "contended", found := _Found(uncontended.contended))
    played, plays = run(monkeypatch, "pcie_pairs", "ring", gan, plays=True, gpus=8, compute_cv=0.1)
    flowed, _ = run(monkeypatch, "pcie_pairs", "ring", gan, plays=False, gpus=8, compute_cv=0.1)
    assert found.answers[0] is True
    assert plays == 0  # found contended, played again without plays
    assert played == flowed


def test_the_trace_of_a_played_allreduce_shows_what_the_flow_network_would(monkeypatch):
    """The first transfers a play keeps give the same send and step events as the flow
    network's own trace, up to where the play stopped keeping them."""
    import json

    from gansim.outputs.trace import chrome_trace

    def trace(plays: bool) -> dict:
        monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 0 if plays else 10**18)
        topo = topology_from_dict({"name": "multi_node", **TOPOLOGIES["multi_node"]}, "test")
        scenario = Scenario(name="t", topology="t", workload={"allreduce_bytes": 4 * 100_003}, gpus=[12],
                            algorithms=["ring"], steps=2)
        box = {}
        simulate_point(scenario, topo, 12, "ring", on_timeline=lambda tl: box.setdefault("doc", json.loads(
            chrome_trace(tl, "t"))), keep_transfers=100)
        return box["doc"]

    played, flowed = trace(True), trace(False)
    assert played["otherData"]["truncated"] and not flowed["otherData"]["truncated"]
    until = played["otherData"]["window_us"]
    assert 0 < until < flowed["otherData"]["window_us"]

    def events(doc, cat):
        return sorted((e["ts"], e["dur"], e["pid"], e["name"], json.dumps(e.get("args"), sort_keys=True))
                      for e in doc["traceEvents"] if e.get("cat") == cat and e["ts"] < until)

    for cat in ("send", "all-reduce steps"):
        assert events(played, cat) and events(played, cat) == events(flowed, cat)


def run_private(monkeypatch, topology: str, delays: bool, workload=GAN, algorithm: str = "ring", **options):
    """A GAN run whose GPU compute phases are timed as delays (or all kept on the flow
    network); returns its record and how many phases were delays in the run that counted."""
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_RANKS", 0 if delays else 10**18)
    topo = topology_from_dict({"name": topology, **TOPOLOGIES[topology]}, "test")
    gpus = len(topo.ranks)
    scenario = Scenario(name="t", topology="t", workload=workload, gpus=[gpus], algorithms=[algorithm], steps=3,
                        options=TrainingOptions(**options))
    timed = []
    record = simulate_point(scenario, topo, gpus, algorithm, on_timeline=lambda tl: timed.append(
        int(ran_alone(tl.graph.kind, tl.graph.route).sum())))
    return record, timed[0]


def test_compression_beside_the_next_buckets_backward_is_built_as_flows_at_once(monkeypatch):
    """fp16 gradients with DDP buckets: each bucket's compression runs on the GPU as the next
    piece of the backward starts there, so compute timed as delays is sure to meet other
    compute. The run is not played that way first: its graph is built again with compute as
    flows before it is executed (one execution, not two), with the figures of compute as
    flows from the start."""
    from gansim.training import step as step_module

    executed = []
    execute = step_module.execute
    monkeypatch.setattr(step_module, "execute", lambda *args: (executed.append(1), execute(*args))[1])
    # GPUs whose memory bandwidth is known, so that compressing costs time (StepBuilder.quantize_s)
    monkeypatch.setitem(TOPOLOGIES, "hbm", {"generator": "multi_node", "params": {
        "nodes": 3, "gpus_per_node": 4, "intra_params": {"gpu_memory_bandwidth_GBps": 2039.0}}})
    options = {"overlap": True, "gradient_dtype": "fp16"}
    as_delays, _ = run_private(monkeypatch, "hbm", delays=True, workload="dcgan", **options)
    assert len(executed) == 1
    as_flows, _ = run_private(monkeypatch, "hbm", delays=False, workload="dcgan", **options)
    # (its events are those of a run played again, as before: counted apart)
    assert replace(as_delays, simulated_events=0) == replace(as_flows, simulated_events=0)
    # where nothing compresses, compute is timed as delays and the run executed once
    executed.clear()
    plain, timed = run_private(monkeypatch, "hbm", delays=True, workload="dcgan", overlap=True)
    assert len(executed) == 1 and timed > 0


@pytest.mark.parametrize("topology", ["switch", "multi_node"])
@pytest.mark.parametrize("options", [{"overlap": True}, {"overlap": True, "compute_cv": 0.3},
                                     {"overlap": False, "broadcast_buffers": True}])
def test_gpu_compute_timed_as_delays_times_like_the_flow_network(monkeypatch, topology, options):
    as_delays, timed = run_private(monkeypatch, topology, delays=True, **options)
    as_flows, none = run_private(monkeypatch, topology, delays=False, **options)
    assert timed > 0 and none == 0
    assert_same(as_delays, as_flows)
    assert as_delays.breakdown.to_dict() == pytest.approx(as_flows.breakdown.to_dict(), rel=1e-9)


def test_cpu_compute_timed_as_delays_times_like_the_flow_network(monkeypatch):
    """A CPU rank's core computes and moves its messages: without overlap its phases never
    meet them and stay delays, with the figures of the flow network."""
    as_delays, timed = run_private(monkeypatch, "cpu_host", delays=True, overlap=False)
    as_flows, none = run_private(monkeypatch, "cpu_host", delays=False, overlap=False)
    assert timed > 0 and none == 0
    assert_same(as_delays, as_flows)


@pytest.mark.parametrize("options", [{"overlap": True}, {"overlap": True, "compute_cv": 0.1}])
def test_cpu_compute_that_meets_a_play_is_played_again_with_the_rings_first_steps(monkeypatch, options):
    """With DDP, a CPU core's backward timed as a delay meets the first bucket's played ring:
    the run is played again with the ring's first steps taken out of the play and that
    backward phase as a flow; the other phases stay delays, and so do the first steps'
    transfers that meet nothing (those that do go on the flow network in one more run). The
    figures are the flow network's."""
    from gansim.network.engine import COMPUTE, moved_alone
    from gansim.training import step

    runs, compute_delays, apart = [], [], []
    real = step._simulate

    def spy(*args, **kwargs):
        runs.append(kwargs.get("flow_phases", frozenset()))
        timeline = real(*args, **kwargs)
        g = timeline.graph
        compute_delays.append(int((ran_alone(g.kind, g.route) & (g.category == COMPUTE)).sum()))
        apart.append(int(moved_alone(g.kind, g.route, g.category).sum()))
        return timeline

    monkeypatch.setattr(step, "_simulate", spy)
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 0)
    fast, _ = run_private(monkeypatch, "cpu_host", delays=True, workload="paper-mlp-gan", **options)
    assert len(runs) == 3 and runs[-1] == {"G backward (bucket 1)"}, runs
    # the other phases stay delays; the first steps' transfers that met the backward went on
    # the flow network in the last run, the others stay timed alone
    assert compute_delays[-1] > 0 and apart[0] == 0 and apart[1] > apart[2] > 0, (compute_delays, apart)
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 10**18)
    flowed, _ = run_private(monkeypatch, "cpu_host", delays=False, workload="paper-mlp-gan", **options)
    assert_same(fast, flowed)


def test_compute_phases_that_meet_keep_the_plays_when_only_they_met(monkeypatch):
    """fp16 compression beside the next bucket's backward: the run is played again with the
    compute phases as flows, but its all-reduces, which met nothing, stay played."""
    def run(fast: bool):
        monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 0 if fast else 10**18)
        monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_RANKS", 0 if fast else 10**18)
        topo = topology_from_dict({"name": "switch", **TOPOLOGIES["switch"]}, "test")
        scenario = Scenario(name="t", topology="t", workload="paper-mlp-gan", gpus=[12], algorithms=["ring"],
                            steps=3, options=TrainingOptions(overlap=True, gradient_dtype="fp16"))
        seen = []
        record = simulate_point(scenario, topo, 12, "ring", on_timeline=lambda tl: seen.append(
            (sum(s.play is not None for s in tl.spans), int(ran_alone(tl.graph.kind, tl.graph.route).sum()))))
        return record, seen[0]

    fast, (plays, delays) = run(True)
    flowed, (none, _) = run(False)
    assert plays > 0 and delays == 0 and none == 0
    assert_same(fast, flowed)


def test_compute_phases_that_meet_on_one_gpu_are_played_again_on_the_flow_network(monkeypatch):
    """fp16 gradients are compressed by the GPU while, with overlap, its backward of the next
    bucket runs: two phases on one compute resource, which share it on the flow network."""
    options = {"overlap": True, "gradient_dtype": "fp16"}
    as_delays, timed = run_private(monkeypatch, "switch", True, "paper-mlp-gan", **options)
    as_flows, _ = run_private(monkeypatch, "switch", False, "paper-mlp-gan", **options)
    assert timed == 0  # found overlapping, played again with every phase a flow
    assert as_delays == as_flows


def test_a_run_played_again_works_out_nccls_view_of_the_machine_once(monkeypatch):
    """The fp16 run above with `nccl`: played again on a cluster built afresh, it reuses NCCL's
    tuning and plans (their routes are added to each cluster), with the same figures as the
    run kept on the flow network from the start."""
    from gansim.collectives import nccl

    built = []
    real = nccl.nccl_state
    monkeypatch.setattr(nccl, "nccl_state", lambda *a, **k: built.append(1) or real(*a, **k))
    options = {"overlap": True, "gradient_dtype": "fp16"}
    as_delays, timed = run_private(monkeypatch, "multi_node", True, "paper-mlp-gan", algorithm="nccl", **options)
    assert timed == 0 and len(built) == 1  # played again, with NCCL's view of the first play
    as_flows, _ = run_private(monkeypatch, "multi_node", False, "paper-mlp-gan", algorithm="nccl", **options)
    assert as_delays == as_flows


@pytest.mark.parametrize("topology", ["switch", "multi_node"])
def test_a_ring_played_from_its_base_arrays_gives_the_same_figures_to_the_last_digit(monkeypatch, topology):
    """Plays of a single ring take each step's bytes / rate and its received bytes x gamma as
    views of arrays divided once per offset of the rates' period, in a loop of nothing but the
    recurrence (PlayPlan.ring_views): the multi_node machines' rates repeat every 4 ranks, the
    switch's every rank. The figures are those of the step-by-step play, which divides per
    step, exactly, and the flow network's."""
    monkeypatch.setattr(uncontended, "_DURATIONS_MAX_TRANSFERS", 0)
    # each step played by the loop (a ring alike in every period is worked out on one,
    # test_a_ring_alike_in_every_machine_is_worked_out_on_one_period_of_them)
    monkeypatch.setattr(uncontended.UncontendedPlay, "_periodic_ring", lambda *args: None)
    workload = {"allreduce_bytes": 4 * 100_003}  # integer segments of unequal sizes
    options = {"gamma_s_per_byte": 3e-11}
    found = []
    views = uncontended.PlayPlan.ring_views

    def counted(plan, gamma):
        made = views(plan, gamma)
        found.append(made)
        return made

    monkeypatch.setattr(uncontended.PlayPlan, "ring_views", counted)
    fast, plays = run(monkeypatch, topology, "ring", workload, plays=True, **options)
    assert plays == 3 and len(found) == 3 and all(v is not None for v in found)
    # 2 x 11 steps, 11 of them reducing
    assert found[0].steps == 22 and sum(found[0].received(k) is not None for k in range(22)) == 11
    monkeypatch.setattr(uncontended.PlayPlan, "ring_views", lambda plan, gamma: None)
    divided, _ = run(monkeypatch, topology, "ring", workload, plays=True, **options)
    flowed, _ = run(monkeypatch, topology, "ring", workload, plays=False, **options)
    for key in FIGURES:
        assert getattr(fast, key) == getattr(divided, key), key
    assert fast.breakdown.to_dict() == divided.breakdown.to_dict()
    assert fast.bottleneck == divided.bottleneck
    assert_same(fast, flowed)


@pytest.mark.parametrize("options", [{"gamma_s_per_byte": 3e-11}, {}])
def test_a_looped_ring_that_repeats_is_looped_on_its_period_to_the_last_digit(monkeypatch, options):
    """A ring looped step by step (here with no floor of participants, and no max-plus map)
    whose bytes are equal on every slot and whose latencies, rates and joins repeat every P
    ranks is looped on the ring of its first P closed on itself: a machine's 4 of the 12.
    The figures, what each resource carried and when it was used are those of the loop over
    every rank, to the last digit, and the flow network's."""
    monkeypatch.setattr(uncontended.UncontendedPlay, "_periodic_ring", lambda *args: None)
    workload = {"allreduce_bytes": 4 * 120_000}  # 10,000 elements a segment on each of the 12 ranks
    looped: list[int] = []
    steps = uncontended.UncontendedPlay._ring_steps

    def counted(play, views, first, t_ring, *args):
        looped.append(t_ring.size - 1)
        return steps(play, views, first, t_ring, *args)

    monkeypatch.setattr(uncontended.UncontendedPlay, "_ring_steps", counted)
    monkeypatch.setattr(uncontended, "_PERIODIC_LOOP_MIN_PARTICIPANTS", 0)
    kept: list = []
    fast, plays = run(monkeypatch, "multi_node", "ring", workload, plays=True, kept=kept, **options)
    assert plays == 3 and looped == [4] * 3
    monkeypatch.setattr(uncontended, "_PERIODIC_LOOP_MIN_PARTICIPANTS", 10**9)
    every_kept: list = []
    every, _ = run(monkeypatch, "multi_node", "ring", workload, plays=True, kept=every_kept, **options)
    assert looped[3:] == [12] * 3
    flowed, _ = run(monkeypatch, "multi_node", "ring", workload, plays=False, **options)
    for key in FIGURES:
        assert getattr(fast, key) == getattr(every, key), key
    assert fast.breakdown.to_dict() == every.breakdown.to_dict()
    assert fast.bottleneck == every.bottleneck
    for fast_play, every_play in zip(kept[:plays], every_kept[:plays]):
        for mine, theirs in zip((*fast_play.resource_spans(), *fast_play.carried()),
                                (*every_play.resource_spans(), *every_play.carried())):
            np.testing.assert_array_equal(mine, theirs)
    assert_same(fast, flowed)


@pytest.mark.parametrize("topology", ["switch", "multi_node"])
@pytest.mark.parametrize("options", [{"gamma_s_per_byte": 3e-11}, {}, {"overlap": True}])
def test_a_ring_alike_in_every_machine_is_worked_out_on_one_period_of_them(monkeypatch, topology, options):
    """Where the rates, latencies and segments of a ring repeat every P ranks and the ranks
    join it alike, its steps after the first are worked out on P slots by max-plus matrix
    powers: the figures of playing every step to 1e-12, and the flow network's."""
    workload = {"allreduce_bytes": 4 * 100_003} if not options.get("overlap") else GAN
    used = []
    periodic = uncontended.UncontendedPlay._periodic_ring

    def counted(play, *args):
        finish = periodic(play, *args)
        used.append(finish is not None)
        return finish

    monkeypatch.setattr(uncontended.UncontendedPlay, "_periodic_ring", counted)
    fast, plays = run(monkeypatch, topology, "ring", workload, plays=True, **options)
    assert plays > 0 and used and all(used)
    monkeypatch.setattr(uncontended.UncontendedPlay, "_periodic_ring", lambda *args: None)
    stepped, _ = run(monkeypatch, topology, "ring", workload, plays=True, **options)
    flowed, _ = run(monkeypatch, topology, "ring", workload, plays=False, **options)
    for key in FIGURES:
        assert getattr(fast, key) == pytest.approx(getattr(stepped, key), rel=1e-12), key
    for key, value in stepped.breakdown.to_dict().items():
        assert fast.breakdown.to_dict()[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert_same(fast, flowed)


@pytest.mark.parametrize("algorithm", ["hierarchical_ring", "halving_doubling"])
@pytest.mark.parametrize("options", [{"gamma_s_per_byte": 3e-11}, {"overlap": True}, {"overlap": True, "compute_cv": 0.3}])
def test_a_plan_alike_in_every_machine_is_played_on_one_machine_to_the_last_digit(monkeypatch, algorithm, options):
    """A hierarchical ring on machines that copy one another, its ranks joining alike, is
    played on one machine's ranks (PlayPlan.periodic): each standing for its copies, its rings
    across the machines rings of each rank with itself. The figures, what each resource
    carried and the trace are those of playing every rank, to the last digit, and the flow
    network's. Where the ranks join apart (compute_cv), or a step's pairs do not repeat
    machine by machine (halving-doubling pairs rank 0 with 4, 8 with 0 across 3 machines),
    every rank is played."""
    workload = GAN if options.get("overlap") else {"allreduce_bytes": 4 * 100_003}
    used: list[int] = []
    play_periodic = uncontended.UncontendedPlay._play_periodic

    def counted(play, form, *args):
        used.append(form.period)
        return play_periodic(play, form, *args)

    monkeypatch.setattr(uncontended.UncontendedPlay, "_play_periodic", counted)
    fast_kept: list = []
    fast, plays = run(monkeypatch, "multi_node", algorithm, workload, plays=True, kept=fast_kept, **options)
    assert plays > 0
    alike = algorithm == "hierarchical_ring" and not options.get("compute_cv")
    assert used == ([4] * len(used) if alike else []) and bool(used) == alike
    monkeypatch.setattr(uncontended.PlayPlan, "periodic", lambda plan: None)
    every_kept: list = []
    every, _ = run(monkeypatch, "multi_node", algorithm, workload, plays=True, kept=every_kept, **options)
    flowed, _ = run(monkeypatch, "multi_node", algorithm, workload, plays=False, **options)
    for key in FIGURES:
        assert getattr(fast, key) == getattr(every, key), key
    assert fast.breakdown.to_dict() == every.breakdown.to_dict()
    assert fast.bottleneck == every.bottleneck
    for fast_play, every_play in zip(fast_kept[:plays], every_kept[:plays]):
        for mine, theirs in zip(fast_play.resource_spans(), every_play.resource_spans()):
            np.testing.assert_array_equal(mine, theirs)
        for mine, theirs in zip(fast_play.carried(), every_play.carried()):
            np.testing.assert_array_equal(mine, theirs)
    assert_same(fast, flowed)


@pytest.mark.parametrize("options", [{"overlap": True}, {"overlap": True, "gamma_s_per_byte": 3e-11}])
def test_a_long_periodic_play_is_reused_by_the_buckets_that_join_as_before(monkeypatch, options):
    """A plan played on one machine's ranks (PlayPlan.periodic) over many period-steps starts
    from joins on a grid of its time scale, as a ring's loop does: DDP's buckets, which join
    each training step as they did the step before but for rounding, are worked out once a
    run each: fewer than the plays, and the flow network's figures. (Here with no floor of
    period-steps.)"""
    monkeypatch.setattr(uncontended, "_LOOP_REUSE_MIN_RANK_STEPS", 0)
    worked: list = []
    steps = uncontended.UncontendedPlay._periodic_steps

    def counted(self, *args):
        worked.append(self)
        return steps(self, *args)

    monkeypatch.setattr(uncontended.UncontendedPlay, "_periodic_steps", counted)
    periodic = []
    play_periodic = uncontended.UncontendedPlay._play_periodic
    monkeypatch.setattr(uncontended.UncontendedPlay, "_play_periodic",
                        lambda self, *args: (periodic.append(self), play_periodic(self, *args))[1])
    played, plays = run(monkeypatch, "multi_node", "hierarchical_ring", GAN, plays=True, **options)
    assert len(periodic) >= 6 and 0 < len(worked) <= len(periodic) // 2
    flowed, _ = run(monkeypatch, "multi_node", "hierarchical_ring", GAN, plays=False, **options)
    assert_same(played, flowed)


def test_a_plan_is_worked_out_on_one_machine_only_where_its_machines_repeat():
    """PlayPlan.periodic's period: a machine's ranks where every machine is the same; none
    where one machine's links are slower than the others', or where a step's pairs do not
    move along with the machines."""
    from gansim.collectives.schedules import build_schedule
    from gansim.network.cluster import Cluster
    import simpy

    def plan(topology: dict, algorithm: str, groups=None):
        topo = topology_from_dict({"name": "t", **topology}, "test")
        cluster = Cluster(topo, 12, simpy.Environment())
        schedule = build_schedule(algorithm, 12, 4 * 1000, groups)
        return uncontended.PlayPlan.build(cluster, schedule, tuple(topo.ranks[:12]), 4 * 4000.0)

    machines = [[4 * m + i for i in range(4)] for m in range(3)]
    alike = TOPOLOGIES["multi_node"]
    assert plan(alike, "hierarchical_ring", machines).periodic().period == 4
    assert plan(alike, "halving_doubling").periodic() is None
    generated = topology_from_dict({"name": "t", **alike}, "test")
    spec = {"nodes": [n.model_dump(exclude_none=True) for n in generated.nodes.values()],
            "links": [link._asdict() for link in generated.links]}
    last_nic = next(link for link in reversed(spec["links"]) if link["kind"] == "net")
    last_nic["bandwidth_GBps"] /= 2  # the last machine's last NIC is slower
    found = plan(spec, "hierarchical_ring", machines)
    assert found is not None and found.periodic() is None


def test_rings_whose_pairs_all_fit_on_a_shared_uplink_at_once_are_played(monkeypatch):
    """A hierarchical ring's rings across machines, one per place in the machine, each cross
    a pod's uplink where they leave the pod: pairs without a participant in common, at
    different steps. The uplink carries what the links below it do, so all of them fit on it
    at once and it never binds: the all-reduce is played (rule (2)), to the flow network's
    figures. With the uplink cut to less than their sum it is not."""
    TOPOLOGIES["rail_pods"] = {"generator": "multi_node", "params": {
        "nodes": 8, "gpus_per_node": 2, "fabric": "rail", "machines_per_leaf": 2, "machines_per_pod": 4}}
    generated = topology_from_dict({"name": "t", **TOPOLOGIES["rail_pods"]}, "test")
    links = [link._asdict() for link in generated.links]
    for link in links:
        if {link["a"], link["b"]} == {"spine0", "core"}:
            link["bandwidth_GBps"] = 30.0  # less than the two rings' 25 GB/s each
    TOPOLOGIES["rail_pods_oversubscribed"] = {
        "nodes": [n.model_dump(exclude_none=True) for n in generated.nodes.values()], "links": links}
    try:
        workload = {"allreduce_bytes": 4 * 100_003}
        played, plays = run(monkeypatch, "rail_pods", "hierarchical_ring", workload, plays=True, gpus=16)
        flowed, _ = run(monkeypatch, "rail_pods", "hierarchical_ring", workload, plays=False, gpus=16)
        assert plays == 3
        assert_same(played, flowed)
        _, plays = run(monkeypatch, "rail_pods_oversubscribed", "hierarchical_ring", workload, plays=True, gpus=16)
        assert plays == 0
    finally:
        del TOPOLOGIES["rail_pods"], TOPOLOGIES["rail_pods_oversubscribed"]


def test_a_step_of_a_ring_of_one_period_as_a_matrix_is_the_step_itself():
    """The max-plus matrix of one step (and its powers) against the recurrence on numpy
    arrays, for rings closed on themselves of 1, 2, 3 and 5 slots."""
    rng = np.random.default_rng(7)
    for period in (1, 2, 3, 5):
        weight, received, time = rng.random(period), rng.random(period), rng.random(period) * 3
        expected = time.copy()
        for _ in range(6):
            finish = np.maximum(expected, np.roll(expected, -1)) + weight
            expected = np.maximum(finish, np.roll(finish, 1)) + received
        step = uncontended._ring_step_map(weight, received)
        got = uncontended._maxplus_apply(uncontended._maxplus_power(step, 6), time)
        np.testing.assert_allclose(got, expected, rtol=1e-14)
        once = uncontended._maxplus_apply(step, time)
        finish = np.maximum(time, np.roll(time, -1)) + weight
        np.testing.assert_allclose(once, np.maximum(finish, np.roll(finish, 1)) + received, rtol=1e-15)


@pytest.mark.parametrize("topology", ["switch", "multi_node", "staged"])
def test_a_ring_over_fewer_elements_than_ranks_is_played_on_its_senders_in_a_row(monkeypatch, topology):
    """Per-variable all-reduces of variables of 1, 3 and 11 elements over 12 ranks (11: every
    step but the first wraps around the ring), reducing: each step after the first is played
    on its c senders and their receivers only (PlayPlan.ring_run), with the figures of the
    loop that gives every step a shape of its own, to the last digit: exit times, each
    resource's first and last use, the bytes carried, the run's record."""
    workload = {**GAN, "networks": {name: {**net, "variables": [{"size": 11, "count": 1}, {"size": 3, "count": 2},
                                                                {"size": 1, "count": 1}], "params": 18}
                                    for name, net in GAN["networks"].items()}}
    options = {"gradient_sync": "per_variable", "compute_cv": 0.3, "gamma_s_per_byte": 1e-9}
    runs = []
    real = uncontended.UncontendedPlay._play_run
    monkeypatch.setattr(uncontended.UncontendedPlay, "_play_run", lambda *a: runs.append(1) or real(*a))
    in_a_row: list = []
    played, plays = run(monkeypatch, topology, "ring", workload, plays=True, kept=in_a_row, **options)
    # (the first plays of a run keep their transfers for the trace, step by step)
    assert plays > 0 and 0 < len(runs) <= plays
    monkeypatch.setattr(uncontended.PlayPlan, "ring_run", lambda self: None)
    step_by_step: list = []
    ran = len(runs)
    again, _ = run(monkeypatch, topology, "ring", workload, plays=True, kept=step_by_step, **options)
    assert len(runs) == ran
    for a, b in zip(in_a_row[:plays], step_by_step[:plays]):
        np.testing.assert_array_equal(a.exit_times, b.exit_times)
        for x, y in zip(a.resource_spans(), b.resource_spans()):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(in_a_row[plays], step_by_step[plays])
    assert played == again


def test_rates_without_a_short_period_are_divided_step_by_step():
    rates = np.tile([1.0, 2.0], 50)
    rates[-1] = 3.0  # 100 slots: no period up to 64 slots divides them
    assert uncontended._rate_period(rates, 300) is None
    assert uncontended._rate_period(rates[-60:], 180) == 60  # a ring of 60: its own length
    assert uncontended._rate_period(np.tile([1.0, 2.0], 50), 300) == 2
    assert uncontended._rate_period(np.tile([1.0, 2.0, 4.0], 4), 36) == 3
    assert uncontended._rate_period(np.full(8, 5.0), 24) == 1


def test_nccl_tests_of_a_textbook_ring_plays_each_size_as_the_flow_network_times_it(monkeypatch):
    """`gansim nccl-tests --algorithm ring`: the sizes run one after another with nothing
    else, so each is played, with the flow network's times (one of fewer elements than
    ranks among them); at 1,024 GPUs a sweep then needs a few tasks a size, not one per
    transfer (2 x 1,024 x 1,023 a size)."""
    from gansim.collectives import communicator
    from gansim.runner.collective import collective_times

    topo = topology_from_dict({"name": "multi_node", **TOPOLOGIES["multi_node"]}, "test")
    sizes = [4 * 5, 4 * 100_003, 1 << 24]
    plays = []
    real = communicator.play_uncontended
    monkeypatch.setattr(communicator, "play_uncontended", lambda *a: plays.append(a[2]) or real(*a))
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 0)
    played = collective_times(topo, 12, "all_reduce", sizes, "ring")
    assert len(plays) == len(sizes)
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 10**18)
    flowed = collective_times(topo, 12, "all_reduce", sizes, "ring")
    assert [p.seconds for p in played] == pytest.approx([f.seconds for f in flowed], rel=1e-9)

    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 1 << 10)
    monkeypatch.setenv("GANSIM_MAX_TASKS", "100000")
    big = topology_from_dict({"name": "big", "generator": "multi_node", "params": {"nodes": 128, "gpus_per_node": 8}},
                             "test")
    times = collective_times(big, 1024, "all_reduce", [1 << 10, 1 << 20, 1 << 28], "ring")
    assert all(t.seconds > 0 for t in times) and times[-1].seconds > times[0].seconds


def test_a_chunked_ring_of_fewer_elements_than_ranks_is_not_played_in_chunks(monkeypatch):
    """With `chunks`, a ring whose steps move only some of its pairs is no ring of every
    participant in every step (chunked_ring_plan): it stays on the flow network, with the
    same figures as when nothing is played."""
    from gansim.collectives import chunked_ring

    monkeypatch.setattr(chunked_ring, "CHUNKED_MIN_TRANSFERS", 0)
    workload = {"allreduce_bytes": 4 * 5}
    played, plays = run(monkeypatch, "switch", "ring", workload, plays=True, chunks=2)
    flowed, _ = run(monkeypatch, "switch", "ring", workload, plays=False, chunks=2)
    assert plays == 0
    assert_same(played, flowed)


def test_schedules_between_the_same_pairs_share_one_plan_of_their_shapes(monkeypatch):
    """DDP's buckets of every size all-reduced by halving-doubling move between the same pairs
    step by step: their plans share the shapes worked out (and checked) once per machine,
    and play as the flow network times them."""
    import simpy

    from gansim.collectives import schedules
    from gansim.network.cluster import Cluster

    topo = topology_from_dict({"name": "multi_node", **TOPOLOGIES["multi_node"]}, "test")
    cluster = Cluster(topo, 12, simpy.Environment())
    participants = tuple(cluster.rank_nodes)
    halving = schedules.ALGORITHMS.get("halving_doubling")
    structures: dict = {}
    small, large = (uncontended.PlayPlan.build(cluster, halving(12, count), participants, 4.0 * count, structures)
                    for count in (1_000, 100_003))
    assert small is not None and large is not None
    assert small.shapes is large.shapes and small.step_shape is large.step_shape
    assert small.bytes_per_element == large.bytes_per_element == 4.0
    alone = uncontended.PlayPlan.build(cluster, halving(12, 100_003), participants, 4.0 * 100_003, {})
    assert alone.shapes is not large.shapes and alone.step_shape == large.step_shape
    for own, shared in zip(alone.shapes, large.shapes):
        for name in ("src", "dst", "route", "latency", "rate"):
            assert np.array_equal(getattr(own, name), getattr(shared, name)), name
    tree = uncontended.PlayPlan.build(cluster, schedules.ALGORITHMS.get("tree")(12, 1_000), participants, 4e3,
                                      structures)
    assert tree is None or tree.shapes is not large.shapes
    # and a GAN's buckets so played time as on the flow network
    played, plays = run(monkeypatch, "multi_node", "halving_doubling", GAN, plays=True, overlap=True)
    flowed, none = run(monkeypatch, "multi_node", "halving_doubling", GAN, plays=False, overlap=True)
    assert plays > 1 and none == 0
    assert_same(played, flowed)


@pytest.mark.parametrize("options", [{"overlap": True}, {"overlap": True, "gamma_s_per_byte": 3e-11}])
def test_a_long_rings_loop_is_reused_by_the_buckets_that_join_as_before(monkeypatch, options):
    """A ring looped step by step over many rank-steps starts from joins on a grid of its
    time scale (joined_on_grid), so that DDP's buckets, which join each training step as
    they did the step before but for rounding, are looped once a run each: fewer loops than
    plays, and the flow network's figures. (Here with no floor of rank-steps, and every
    ring looped: the machines' rings are otherwise worked out on one period.)"""
    monkeypatch.setattr(uncontended, "_LOOP_REUSE_MIN_RANK_STEPS", 0)
    monkeypatch.setattr(uncontended.UncontendedPlay, "_periodic_ring", lambda *args: None)
    loops = []
    loop = uncontended.UncontendedPlay._ring_loop

    def counted(self, *args):
        loops.append(self)
        return loop(self, *args)

    monkeypatch.setattr(uncontended.UncontendedPlay, "_ring_loop", counted)
    played, plays = run(monkeypatch, "multi_node", "ring", GAN, plays=True, **options)
    assert plays >= 6 and 0 < len(loops) <= plays // 2
    flowed, _ = run(monkeypatch, "multi_node", "ring", GAN, plays=False, **options)
    assert_same(played, flowed)


def test_joins_that_differ_by_rounding_are_on_one_point_of_the_grid():
    """The grid is a power of 2 at most 2^-36 of the scale: joins a rounding apart land on
    one point, each point at its join or less than a grid step later."""
    scale = 3e-3
    joins = np.array([0.0, 1.0549e-5, 7.04e-6, 3.52e-6])
    noisy = joins + np.array([0.0, 6.9e-18, -3.5e-18, 1.4e-17])
    on_grid = uncontended.joined_on_grid(joins, scale)
    assert np.array_equal(uncontended.joined_on_grid(noisy, scale), on_grid)
    step = 2.0 ** (np.floor(np.log2(scale)) - 36)
    assert step <= scale * 2.0 ** -36
    assert np.array_equal(on_grid / step, np.round(on_grid / step))
    assert (on_grid >= joins).all() and (on_grid - joins).max() < step
    assert uncontended.joined_on_grid(joins, 0.0) is joins


@pytest.mark.parametrize("options", [{"allreduce": True}, {"allreduce": True, "gamma_s_per_byte": 3e-11},
                                     {"overlap": True, "compute_cv": 0.3}, {"overlap": True}])
def test_a_ring_in_its_regime_skips_its_steps_to_the_figures_of_playing_them(monkeypatch, options):
    """A single ring over 64 ranks whose every step moves the same bytes on every slot: once
    every rank's time grows by the ring's rate in a step, the rest of the run of steps alike
    is skipped (_RingRegime). The figures are those of playing every step to 1e-12, with
    ranks joining apart (`compute_cv`) or alike, reducing what they receive or not; and,
    for the all-reduces alone, the flow network's."""
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_RANKS", 0)
    monkeypatch.setattr(uncontended, "_PERIODIC_LOOP_MIN_PARTICIPANTS", 10**9)  # (every rank looped)
    monkeypatch.setattr(uncontended.UncontendedPlay, "_periodic_ring", lambda *args: None)
    monkeypatch.setitem(TOPOLOGIES, "wide", {"generator": "multi_node", "params": {"nodes": 16, "gpus_per_node": 4}})
    options = dict(options)
    workload = {"allreduce_bytes": 4 * 64 * 1000} if options.pop("allreduce", False) else GAN
    skipped = []
    skip = uncontended._RingRegime.skip

    def counted(regime, k, t):
        steps = skip(regime, k, t)
        skipped.append(steps)
        return steps

    monkeypatch.setattr(uncontended._RingRegime, "skip", counted)
    fast, plays = run(monkeypatch, "wide", "ring", workload, plays=True, gpus=64, **options)
    assert plays > 0 and sum(skipped) > 0
    monkeypatch.setattr(uncontended, "_REGIME_MIN_SKIP", 10**9)
    skipped.clear()
    stepped, _ = run(monkeypatch, "wide", "ring", workload, plays=True, gpus=64, **options)
    assert sum(skipped) == 0
    for key in FIGURES:
        assert getattr(fast, key) == pytest.approx(getattr(stepped, key), rel=1e-12), key
    for key, value in stepped.breakdown.to_dict().items():
        assert fast.breakdown.to_dict()[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
    assert fast.bottleneck == stepped.bottleneck
    if workload is not GAN:  # and the flow network's, transfer by transfer
        flowed, _ = run(monkeypatch, "wide", "ring", workload, plays=False, gpus=64, **options)
        assert_same(fast, flowed)


def test_a_ring_regime_skip_is_the_max_plus_map_played_step_by_step():
    """_RingRegime on a ring of random weights and random joins: the times after the run are
    those of every step played, within the rounding of the steps played."""
    rng = np.random.default_rng(3)
    n, steps = 40, 400  # (random weights settle after a hundred steps or so)
    latency = rng.uniform(1e-6, 5e-6, n)
    duration = rng.uniform(1e-7, 3e-6, n)
    received = rng.uniform(0.0, 1e-7, n)

    class Views:  # what _RingRegime reads of RingViews: one run of reducing steps
        equal_shares = True

        def runs(self):
            return [(0, steps)]

        def duration(self, k):
            return duration

        def received(self, k):
            return received

    views = Views()
    views.steps = steps

    def play(regime):
        t = rng_joins.copy()
        k, skipped = 0, 0
        while k < steps:
            start = np.maximum(t, np.roll(t, -1))
            finish = (start + latency) + duration
            t = np.maximum(finish, np.roll(finish, 1)) + received
            more = regime.skip(k, t) if regime is not None else 0
            skipped += more
            k += more + 1
        return t, skipped

    for spread in (0.0, 1e-6, 1e-4):
        rng_joins = rng.uniform(0.0, spread, n) + 1.0
        stepped, _ = play(None)
        fast, skipped = play(uncontended._RingRegime(views, latency))
        assert skipped > steps // 2
        assert fast == pytest.approx(stepped, rel=1e-12)


@pytest.mark.parametrize("options", [{}, {"compute_cv": 0.3}, {"gamma_s_per_byte": 1e-9}])
def test_a_ring_over_fewer_elements_than_ranks_skips_its_window_s_regime(monkeypatch, options):
    """Per-variable all-reduces of variables of 9, 20 and 40 elements over 64 ranks of
    machines that copy one another: once the window of each ring is its times of one
    machine's steps before plus a constant, and so is the start of its last transfer, the
    steps are skipped (_WindowRegime). Exit times, each resource's first and last use, the
    bytes carried and the run's record are those of playing every step to 1e-12."""
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_RANKS", 0)
    monkeypatch.setitem(TOPOLOGIES, "wide", {"generator": "multi_node", "params": {"nodes": 16, "gpus_per_node": 4}})
    workload = {**GAN, "networks": {name: {**net, "variables": [{"size": 40, "count": 1}, {"size": 20, "count": 2},
                                                                {"size": 9, "count": 1}], "params": 89}
                                    for name, net in GAN["networks"].items()}}
    options = {"gradient_sync": "per_variable", **options}
    skipped = []
    skip = uncontended._WindowRegime.skip
    monkeypatch.setattr(uncontended._WindowRegime, "skip", lambda *a: skipped.append(skip(*a)) or skipped[-1])
    fast_kept: list = []
    fast, plays = run(monkeypatch, "wide", "ring", workload, plays=True, gpus=64, kept=fast_kept, **options)
    assert plays > 0 and sum(skipped) > 0
    monkeypatch.setattr(uncontended._WindowRegime, "of", classmethod(lambda cls, *a: None))
    stepped_kept: list = []
    stepped, _ = run(monkeypatch, "wide", "ring", workload, plays=True, gpus=64, kept=stepped_kept, **options)
    for a, b in zip(fast_kept[:plays], stepped_kept[:plays]):
        np.testing.assert_allclose(a.exit_times, b.exit_times, rtol=1e-12)
        for x, y in zip(a.resource_spans(), b.resource_spans()):
            np.testing.assert_allclose(x, y, rtol=1e-12)
    np.testing.assert_allclose(fast_kept[plays], stepped_kept[plays], rtol=1e-12)
    for key in FIGURES:
        assert getattr(fast, key) == pytest.approx(getattr(stepped, key), rel=1e-12), key
    for key, value in stepped.breakdown.to_dict().items():
        assert fast.breakdown.to_dict()[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key


def test_transfers_timed_alone_fit_beside_what_else_moves_until_a_resource_is_overloaded():
    """_overloaded: where the loads moving on a resource at once exceed its capacity (an end
    and a start at one instant do not overlap); _meets: which rows fall in those intervals."""
    from gansim.training.step import _meets, _overloaded

    capacity = np.array([2.0, 1.0])
    res = np.array([0, 0, 1, 1])
    lo = np.array([0.0, 1.0, 0.0, 1.0])
    hi = np.array([2.0, 3.0, 1.0, 2.0])  # (on resource 1 one ends as the other starts)
    load = np.array([1.0, 1.0, 1.0, 1.0])
    assert all(x.size == 0 for x in _overloaded(res, lo, hi, load, capacity))  # two halves fill resource 0
    over = _overloaded(np.r_[res, 0], np.r_[lo, 1.5], np.r_[hi, 2.5], np.r_[load, 1.0], capacity)
    assert [a.tolist() for a in over] == [[0], [1.5], [2.0]]
    rows = (np.array([0, 0, 0, 0, 1]), np.array([0.0, 1.9, 2.0, 0.5, 1.5]), np.array([1.5, 2.5, 3.0, 1.6, 1.8]))
    assert _meets(*rows, *over).tolist() == [False, True, False, True, False]


def test_the_trace_shows_copies_that_ran_alone_on_their_links(monkeypatch):
    """Host-to-device copies timed as alone work (delays with their route) cross the PCIe
    links as the flows they stand for do: the trace's link view is the same either way."""
    import json

    from gansim.network.engine import DATA
    from gansim.outputs.trace import chrome_trace

    def links(delays: bool) -> tuple[list, int]:
        monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_RANKS", 0 if delays else 10**18)
        topo = topology_from_dict({"name": "multi_node", **TOPOLOGIES["multi_node"]}, "test")
        scenario = Scenario(name="t", topology="t", workload=GAN, gpus=[12], algorithms=["ring"], steps=2)
        box = {}

        def look(timeline) -> None:
            g = timeline.graph
            box["alone copies"] = int((ran_alone(g.kind, g.route) & (g.category == DATA)).sum())
            box["doc"] = json.loads(chrome_trace(timeline, "t"))

        simulate_point(scenario, topo, 12, "ring", on_timeline=look)
        events = sorted((e["ts"], e["dur"], e["pid"], e["name"]) for e in box["doc"]["traceEvents"]
                        if e.get("cat") == "link")
        return events, box["alone copies"]

    (as_delays, copies), (as_flows, none) = links(True), links(False)
    assert copies > 0 and none == 0
    assert as_delays and as_delays == as_flows
