"""Mechanisms beyond NCCL's additive tuning model, each checked against its source's
arithmetic worked out here by hand: the drain of NVLS-Tree's chunk pipeline across machines
(enqueue.cc computeCollChunkInfo, transport/nvls.cc)."""

from __future__ import annotations

import pytest
import simpy

from gansim.collectives.nccl import nccl_state, plan
from gansim.collectives.nccl_tuning import algo_latency_us, nvls_tree_chunk_bytes, pipeline_fill_us
from gansim.collectives.nccl_versions import era_for
from gansim.network.cluster import Cluster
from gansim.topology.graph import topology_from_dict

MiB, KiB, GiB = 1 << 20, 1 << 10, 1 << 30
H100 = {"gpu_model": "H100-SXM5-80GB", "gpu_tflops": 67.0, "gpu_memory_GB": 80, "nvlink_bandwidth_GBps": 450.0,
        "pcie_bandwidth_GBps": 63.0}


def h100_cluster(nodes: int) -> Cluster:
    topology = topology_from_dict({"name": "h100", "generator": "multi_node",
                                   "params": {"nodes": nodes, "gpus_per_node": 8, "intra": "nvswitch",
                                              "intra_params": H100, "nic_bandwidth_GBps": 50.0,
                                              "nic_pcie_bandwidth_GBps": 63.0}}, "test")
    return Cluster(topology, 8 * nodes, simpy.Environment())


@pytest.mark.parametrize("version,nodes,nbytes,chunk", [
    # 2.30: nvlsChunkSize 128 KiB; 16 NVLS channels x 8 heads = 128 operations. 16 MiB is below
    # 4 x 128 x 128 KiB (64 MiB): 64 KiB; not below 1 x 128 x 64 KiB (8 MiB): stays 64 KiB
    ("2.30.7", 2, 16 * MiB, 64 * KiB),
    # 4 MiB is below 1 x 128 x 64 KiB (8 MiB): 32 KiB
    ("2.30.7", 2, 4 * MiB, 32 * KiB),
    # 1 GiB is not below 16 x 128 x 128 KiB (256 MiB): 128 KiB
    ("2.30.7", 2, 1 * GiB, 128 * KiB),
    # from 4 nodes the chunk starts at 64 KiB (NCCL_NVLSTREE_MAX_CHUNKSIZE's default)
    ("2.30.7", 4, 1 * GiB, 64 * KiB),
    # 2.18 starts from the Simple stepSize, 4 MiB / 8 = 512 KiB: 1 GiB is below 32 x 128 x
    # 512 KiB (2 GiB) so 256 KiB, not below 16 x 128 x 256 KiB (512 MiB): stays 256 KiB
    ("2.18.3", 2, 1 * GiB, 256 * KiB),
])
def test_nvls_tree_chunk_follows_enqueue_cc(version, nodes, nbytes, chunk):
    cluster = h100_cluster(nodes)
    state = nccl_state(cluster, version)
    assert nvls_tree_chunk_bytes(era_for(version), state.machine, nbytes) == chunk


def test_nvls_tree_drain_is_one_chunk_time_more_on_two_nodes_three_on_four():
    for nodes, crossings in ((2, 2), (4, 4)):
        cluster = h100_cluster(nodes)
        state = nccl_state(cluster, "2.30.7")
        nbytes = 16 * MiB
        chosen = plan(cluster, state, "all_reduce", nbytes, algo="nvls_tree")
        algbw = state.tuning.entry("all_reduce", "nvls_tree", "Simple").bandwidth_GBps
        chunk = 64 * KiB  # as above: 16 MiB on 128 operations
        # 128 operations of 64 KiB each at 1/128 of the algorithm bandwidth: one chunk time is
        # 64 KiB x 128 / algbw; the last chunk crosses the network 2 log2(nodes) times
        expected_us = (crossings - 1) * chunk * 128 / (algbw * 1e3)
        nccl_us = algo_latency_us(state.tuning, "all_reduce", "nvls_tree", "Simple", nbytes)
        assert chosen.latency_s * 1e6 == pytest.approx(nccl_us + expected_us, rel=1e-9)


def test_a_small_message_drains_its_whole_share_not_a_full_chunk():
    cluster = h100_cluster(2)
    state = nccl_state(cluster, "2.30.7")
    algbw = state.tuning.entry("all_reduce", "nvls_tree", "Simple").bandwidth_GBps
    # 1 MiB on 128 operations: 8 KiB each, below the 32 KiB chunk: the drain is one 8 KiB
    # share, i.e. the whole 1 MiB at the algorithm bandwidth
    got = pipeline_fill_us(state.tuning, "all_reduce", "nvls_tree", 1 * MiB, algbw)
    assert got == pytest.approx(1 * MiB / (algbw * 1e3))


def test_no_drain_for_ring_tree_or_inside_one_machine():
    cluster = h100_cluster(2)
    state = nccl_state(cluster, "2.30.7")
    for algo in ("ring", "tree"):
        assert pipeline_fill_us(state.tuning, "all_reduce", algo, 16 * MiB, 100.0) == 0.0
    one = Cluster(topology_from_dict({"name": "one", "generator": "nvswitch", "params": {"gpus": 8, **H100}},
                                     "test"), 8, simpy.Environment())
    single = nccl_state(one, "2.30.7")
    assert pipeline_fill_us(single.tuning, "all_reduce", "nvls_tree", 16 * MiB, 100.0) == 0.0


def test_drain_fades_at_large_sizes():
    """The drain is a few chunks: its share of the time falls as the message grows."""
    cluster = h100_cluster(2)
    state = nccl_state(cluster, "2.30.7")
    algbw = state.tuning.entry("all_reduce", "nvls_tree", "Simple").bandwidth_GBps
    shares = [pipeline_fill_us(state.tuning, "all_reduce", "nvls_tree", n, algbw) / (n / (algbw * 1e3))
              for n in (16 * MiB, 256 * MiB, 4 * GiB)]
    assert shares[0] > shares[1] > shares[2] and shares[2] < 0.01
