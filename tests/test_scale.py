"""The batched paths of large runs give the figures of the unbatched ones: input pipelines
that share their host's cores, timed per pool without events (gansim/network/pools.py),
against the same run on the flow network."""

from __future__ import annotations

import numpy as np
import pytest

from gansim.collectives import uncontended
from gansim.core.config import Scenario, TrainingOptions
from gansim.network.pools import PooledGroup, groups_overlap, shared_pool_ends
from gansim.runner.point import simulate_point
from gansim.topology.graph import topology_from_dict


def test_flows_that_start_together_share_the_pool_equally():
    # 8 loaders on 4 cores: each at half a core, so 1 s of work takes 2 s
    ends = shared_pool_ends(np.zeros(8), np.ones(8), np.ones(8), np.zeros(8, np.int64), np.array([4.0]))
    assert ends.tolist() == [2.0] * 8


def test_a_later_flow_slows_the_earlier_one_down_from_its_arrival():
    # one core: A alone for 0.5 s (half its work), then A and B at half a core each until A
    # ends at 1.5 s, then B alone for its last 0.5
    ends = shared_pool_ends(np.array([0.0, 0.5]), np.array([1.0, 1.0]), np.ones(2), np.array([0, 0]),
                            np.array([1.0]))
    assert ends.tolist() == [1.5, 2.0]


def test_pools_do_not_share_and_a_flow_never_beats_its_own_thread():
    # pool 0 has more cores than flows (each at its own thread's 1 core); pool 1 has one
    ends = shared_pool_ends(np.zeros(4), np.array([1.0, 2.0, 1.0, 1.0]), np.ones(4), np.array([0, 0, 1, 1]),
                            np.array([8.0, 1.0]))
    assert ends.tolist() == [1.0, 2.0, 2.0, 2.0]


def test_work_of_nothing_ends_as_it_starts():
    ends = shared_pool_ends(np.array([3.0, 1.0]), np.array([0.0, 1.0]), np.ones(2), np.array([0, 0]),
                            np.array([1.0]))
    assert ends.tolist() == [3.0, 2.0]


def test_groups_that_use_one_pool_at_once_are_found():
    def group(pool, start, end):
        g = PooledGroup(entry=np.full(len(pool), -1), amount=np.ones(len(pool)), own_capacity=np.ones(len(pool)),
                        pool=np.array(pool), pool_capacity=np.ones(4))
        g.starts, g.ends = np.array(start, float), np.array(end, float)
        return g

    assert not groups_overlap([group([1, 2], [0, 0], [1, 1]), group([1, 2], [1, 1], [2, 2])])
    assert not groups_overlap([group([1], [0], [1]), group([2], [0.5], [2])])  # other pools
    assert groups_overlap([group([1, 2], [0, 0], [1, 1]), group([2], [0.9], [2])])


# Machines whose hosts have fewer cores than GPUs: their input pipelines share the cores.
FEW_CORES = {"generator": "multi_node", "params": {"nodes": 3, "gpus_per_node": 4, "intra": "nvswitch",
                                                   "intra_params": {"host_cores": 2}}}
GAN = {"name": "small-gan", "bytes_per_param": 4, "networks": {
    "discriminator": {"params": 233985, "forward_s": 0.0004, "backward_s": 0.0008, "optimizer_s": 0.0001},
    "generator": {"params": 2051384, "forward_s": 0.0010, "backward_s": 0.0020, "optimizer_s": 0.0004}},
    "data": {"host_prep_s": 0.0002, "bytes_per_sample": 3136}}


def run(monkeypatch, batched: bool, algorithm: str = "ring", **options):
    """The run and, of the timeline that counted, how many input phases were pooled and
    how many batches of tasks the engine processed."""
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 0 if batched else 10**18)
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_RANKS", 0 if batched else 10**18)
    topo = topology_from_dict({"name": "few-cores", **FEW_CORES}, "test")
    scenario = Scenario(name="t", topology="t", workload=GAN, gpus=[12], algorithms=[algorithm], steps=3,
                        options=TrainingOptions(**options))
    seen = []
    record = simulate_point(scenario, topo, 12, algorithm, on_timeline=lambda tl: seen.append(
        (len(tl.pooled), tl.execution.events)))
    return record, seen[-1]


@pytest.mark.parametrize("options", [{"overlap": True}, {"overlap": True, "compute_cv": 0.3},
                                     {"overlap": False, "broadcast_buffers": True}])
def test_input_pipelines_on_shared_cores_time_as_on_the_flow_network(monkeypatch, options):
    batched, (pooled, _) = run(monkeypatch, True, **options)
    flowed, (none, _) = run(monkeypatch, False, **options)
    assert pooled == 3 and none == 0  # one group per step
    assert batched.step_time_s == pytest.approx(flowed.step_time_s, rel=1e-12)
    assert batched.allreduce_time_s == pytest.approx(flowed.allreduce_time_s, rel=1e-9)
    assert batched.breakdown.to_dict() == pytest.approx(flowed.breakdown.to_dict(), rel=1e-9, abs=1e-15)
    assert batched.bottleneck.resource == flowed.bottleneck.resource


@pytest.mark.parametrize("options", [{"overlap": True}, {"overlap": True, "compute_cv": 0.3}])
def test_input_pipelines_on_shared_cores_are_pooled_in_a_run_timed_by_events(monkeypatch, options):
    # nccl plays its channels as flows: the run is timed by events, and each phase's input
    # pipelines are solved once every rank's previous task has ended
    batched, (pooled, events) = run(monkeypatch, True, algorithm="nccl", **options)
    flowed, (none, flowed_events) = run(monkeypatch, False, algorithm="nccl", **options)
    assert pooled == 3 and none == 0 and events < flowed_events
    assert batched.step_time_s == pytest.approx(flowed.step_time_s, rel=1e-9)
    assert batched.allreduce_time_s == pytest.approx(flowed.allreduce_time_s, rel=1e-9)
    assert batched.breakdown.to_dict() == pytest.approx(flowed.breakdown.to_dict(), rel=1e-9, abs=1e-15)
    assert batched.bottleneck.resource == flowed.bottleneck.resource


def test_flow_routes_kept_only_on_wanted_resources_batch_by_batch():
    import simpy

    from gansim.network.cluster import Cluster

    topo = topology_from_dict({"name": "few-cores", **FEW_CORES}, "test")
    network = Cluster(topo, 12, simpy.Environment()).network
    routes = np.array([network.add_route(np.array(r), 0.0) for r in ([0, 1, 2], [3], [2, 4, 5, 6], [1, 6])])
    wanted = np.zeros(network.capacity.size, dtype=bool)
    wanted[[1, 2, 6]] = True
    flow, res = network.route_pairs(routes)
    keep = wanted[res]
    for batch in (1, 2, 3, 1 << 20):  # routes split across batches, or all in one
        got_flow, got_res = network.route_pairs_on(routes, wanted, rows_per_batch=batch)
        assert got_flow.tolist() == flow[keep].tolist() and got_res.tolist() == res[keep].tolist()


def test_nccl_plans_of_several_sizes_sharing_hops_equal_plans_made_alone():
    import simpy

    from gansim.collectives.nccl import nccl_state, plan
    from gansim.network.cluster import Cluster

    topo = topology_from_dict({"name": "m", "generator": "multi_node", "params": {"nodes": 4, "gpus_per_node": 4}},
                              "test")
    sizes = [1 << 20, 3 << 20, 64 << 20, (64 << 20) + 4]
    cluster = Cluster(topo, 16, simpy.Environment())
    shared = nccl_state(cluster)
    together = [plan(cluster, shared, "all_reduce", float(n)) for n in sizes]
    assert len(shared.machine.channel_hops) < len(sizes)  # some sizes did share their hops
    for n, got in zip(sizes, together):
        alone_cluster = Cluster(topo, 16, simpy.Environment())
        alone = plan(alone_cluster, nccl_state(alone_cluster), "all_reduce", float(n))
        assert got.choice == alone.choice
        assert [(f.amount, f.resources.tolist(), f.weights.tolist(), f.channels) for f in got.flows] == \
            [(f.amount, f.resources.tolist(), f.weights.tolist(), f.channels) for f in alone.flows]
