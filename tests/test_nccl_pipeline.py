"""Mechanisms beyond NCCL's additive tuning model, each checked against its source's
arithmetic worked out here by hand: the drain of NVLS-Tree's chunk pipeline across machines
(enqueue.cc computeCollChunkInfo, transport/nvls.cc), what a net plugin reports and what its
fabric's hop costs (tuning.cc latencyInter, aws-ofi-nccl), NCCL_P2P_LEVEL (paths.cc)."""

from __future__ import annotations

import pytest
import simpy

from gansim.collectives.nccl import dtree_parent, nccl_state, plan
from gansim.collectives.nccl_tuning import algo_latency_us, nvls_tree_chunk_bytes, pipeline_fill_us, proxy_serial_us
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
        # the proxy's posts (tests/test_nccl_proxy.py)
        proxy_us = proxy_serial_us(state.tuning, "all_reduce", "nvls_tree", chosen.choice.channels, dtree_parent)
        assert chosen.latency_s * 1e6 == pytest.approx(nccl_us + expected_us + proxy_us, rel=1e-9)


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


def h100_box() -> Cluster:
    return Cluster(topology_from_dict({"name": "one", "generator": "nvswitch", "params": {"gpus": 8, **H100}},
                                      "test"), 8, simpy.Environment())


@pytest.mark.parametrize("nbytes,chunk", [
    # enqueue.cc for NVLS: nvlsChunkSize 128 KiB; 16 NVLS channels x 8 heads = 128 operations.
    # 16 MiB: below 64 x 128 x 128 KiB -> 64 KiB; below 8 x 128 x 64 KiB (64 MiB) -> 32 KiB;
    # not below 2 x 128 x 32 KiB (8 MiB): 32 KiB, four chunks an operation
    (16 * MiB, 32 * KiB),
    # 4 MiB: below 8 MiB too -> 16 KiB, two chunks an operation
    (4 * MiB, 16 * KiB),
    # 1 GiB: not below 64 x 128 x 128 KiB (1 GiB): 128 KiB
    (1 * GiB, 128 * KiB),
])
def test_nvls_inside_one_machine_drains_two_more_chunks_through_its_three_warp_groups(nbytes, chunk):
    """device/all_reduce.h, NVLS oneNode: scatter, reduce-and-broadcast and gather warps pass
    every chunk on, so the last chunk of each operation leaves two chunk times after the
    steady state would have it leave."""
    from gansim.collectives.nccl_tuning import nvls_chunk_bytes
    cluster = h100_box()
    state = nccl_state(cluster, "2.30.7")
    assert nvls_chunk_bytes(state.tuning.era, state.machine, nbytes) == chunk
    algbw = state.tuning.entry("all_reduce", "nvls", "Simple").bandwidth_GBps
    expected_us = 2 * chunk * 128 / (algbw * 1e3)
    assert pipeline_fill_us(state.tuning, "all_reduce", "nvls", nbytes, algbw) == pytest.approx(expected_us)
    chosen = plan(cluster, state, "all_reduce", nbytes, algo="nvls")
    nccl_us = algo_latency_us(state.tuning, "all_reduce", "nvls", "Simple", nbytes)
    assert chosen.latency_s * 1e6 == pytest.approx(nccl_us + expected_us, rel=1e-9)


def test_nvls_inside_one_machine_below_one_chunk_an_operation_takes_its_share_three_times():
    cluster = h100_box()
    state = nccl_state(cluster, "2.30.7")
    algbw = state.tuning.entry("all_reduce", "nvls", "Simple").bandwidth_GBps
    # 1 MiB on 128 operations: 8 KiB each, below the 16 KiB chunk: two more passes of the share
    got = pipeline_fill_us(state.tuning, "all_reduce", "nvls", 1 * MiB, algbw)
    assert got == pytest.approx(2 * MiB / (algbw * 1e3))
    # and none for NVLS outside all-reduce, or for the ring
    assert pipeline_fill_us(state.tuning, "all_gather", "nvls", 16 * MiB, algbw) == 0.0
    assert pipeline_fill_us(state.tuning, "all_reduce", "ring", 16 * MiB, algbw) == 0.0


def test_drain_fades_at_large_sizes():
    """The drain is a few chunks: its share of the time falls as the message grows."""
    cluster = h100_cluster(2)
    state = nccl_state(cluster, "2.30.7")
    algbw = state.tuning.entry("all_reduce", "nvls_tree", "Simple").bandwidth_GBps
    shares = [pipeline_fill_us(state.tuning, "all_reduce", "nvls_tree", n, algbw) / (n / (algbw * 1e3))
              for n in (16 * MiB, 256 * MiB, 4 * GiB)]
    assert shares[0] > shares[1] > shares[2] and shares[2] < 0.01


# ---------------------------------------------------------------- net plugins (NIC_MODELS)

def efa_machine(model: str | None, nics_per_node: int = 32):
    from gansim.collectives.nccl_topology import NcclMachine
    params = {"nodes": 2, "gpus_per_node": 8, "intra": "nvswitch", "intra_params": H100,
              "nics_per_node": nics_per_node, "nic_bandwidth_GBps": 12.5, "nic_pcie_bandwidth_GBps": 63.0}
    if model is not None:
        params["nic_model"] = model
    topology = topology_from_dict({"name": "p5", "generator": "multi_node", "params": params}, "test")
    return NcclMachine.build(topology, 16)


def test_plugin_latency_enters_nccls_choice_and_its_hop_is_played_as_nccl_composes_it():
    from gansim.collectives.nccl_tuning import tune
    tuning = tune(efa_machine("AWS EFA (p5)"), era_for("2.30.7"))
    entry = tuning.entry("all_reduce", "tree", "LL128")
    # tuning.cc tree: baseLat 14 + 2 ((ppn - 1) intraLat + log2(nNodes) interLat), NVLink
    # LL128 hop 1.25 us; interLat = hwLat[NET][TREE][LL128] 8.5 + the plugin's 75 us
    assert entry.latency_us == pytest.approx(14.0 + 2 * (7 * 1.25 + 1 * (8.5 + 75.0)))
    assert entry.played_latency_us == entry.latency_us
    # Simple: the plugin's figure twice ("flush extra latency"), chosen by and played
    simple = tuning.entry("all_reduce", "tree", "Simple")
    assert simple.latency_us == pytest.approx(8.4 + 2 * (7 * 4.0 + 1 * (14.0 + 2 * 75.0)))
    assert simple.played_latency_us == simple.latency_us


def test_a_release_that_read_the_plugin_latency_otherwise_plays_its_hop_as_nccl_composes_it_today():
    from gansim.collectives.nccl_tuning import tune
    tuning = tune(efa_machine("AWS EFA (p4d)"), era_for("2.16.5"))
    # 2.16 tuning.cc: tree Simple baseLat 0, NVLink tree Simple hop 28 us, and it chooses with
    # interLat = latencyInter ? latencyInter : hwLat (75 us for every protocol); the hop is
    # played as 2.18 on compose it: its own hwLat[NET][TREE][Simple] 28 + 2 x 75
    simple = tuning.entry("all_reduce", "tree", "Simple")
    assert simple.latency_us == pytest.approx(0.0 + 2 * (7 * 28.0 + 1 * 75.0))
    assert simple.played_latency_us == pytest.approx(0.0 + 2 * (7 * 28.0 + 1 * (28.0 + 2 * 75.0)))


def test_before_2_18_the_plugin_latency_replaces_nccls_network_hop():
    from gansim.collectives.nccl_tuning import tune
    tuning = tune(efa_machine("AWS EFA (p4d)"), era_for("2.16.5"))
    # 2.16 tuning.cc: interLat = latencyInter ? latencyInter : hwLat; tree LL128 baseLat 4.4,
    # NVLink LL128 hop 1.25 us
    entry = tuning.entry("all_reduce", "tree", "LL128")
    assert entry.latency_us == pytest.approx(4.4 + 2 * (7 * 1.25 + 1 * 75.0))


def test_without_a_plugin_nothing_changes():
    from gansim.collectives.nccl_tuning import tune
    tuning = tune(efa_machine(None), era_for("2.30.7"))
    entry = tuning.entry("all_reduce", "tree", "LL128")
    assert entry.latency_us == entry.played_latency_us == pytest.approx(14.0 + 2 * (7 * 1.25 + 8.5))


def test_grouped_rails_give_nvls_tree_each_gpus_four_nics():
    # aws-ofi-nccl's RDMA protocol: one device per GPU at 4 x 12.5 GB/s; NVLS-Tree's graph
    # then finds more than one NIC's 12.5 GB/s between machines (SM90 inter speeds: 48 fits 50)
    grouped = efa_machine("AWS EFA (p5)").nvls
    apart = efa_machine("AWS EFA (p4d)").nvls
    assert apart.bw_inter <= 12.5
    assert grouped.bw_inter == 48.0


def p4d_topology(model: str | None):
    """Two 8 x A100 machines with four 100 Gb/s NICs each (a p4d pair), the NICs of `model`."""
    params = {"nodes": 2, "gpus_per_node": 8, "intra": "nvswitch", "nics_per_node": 4, "nic_bandwidth_GBps": 12.5,
              "intra_params": {"gpu_model": "A100-SXM4-80GB", "nvlink_bandwidth_GBps": 300.0,
                               "pcie_bandwidth_GBps": 31.5}, "nic_pcie_bandwidth_GBps": 31.5}
    if model is not None:
        params["nic_model"] = model
    return topology_from_dict({"name": "p4d", "generator": "multi_node", "params": params}, "test")


def p4d_machine(model: str | None):
    from gansim.collectives.nccl_topology import NcclMachine
    return NcclMachine.build(p4d_topology(model), 16)


@pytest.mark.parametrize("model,forced,expected", [
    # aws-ofi-nccl sets NCCL_PROTO=simple on p4d (no 128-byte in-order delivery on its EFA)
    ("AWS EFA (p4d)", None, "Simple"),
    ("AWS EFA (p3dn)", None, "Simple"),
    # the same machine on NCCL's own transport, or on P5's EFA (ordering reported): LL128
    (None, None, "LL128"),
    ("AWS EFA (p5)", None, "LL128"),
    # a user's NCCL_PROTO stands: the plugin's setenv does not overwrite it
    ("AWS EFA (p4d)", "LL128", "LL128"),
])
def test_a_net_plugin_that_sets_nccl_proto_leaves_nccl_that_protocol(model, forced, expected):
    from gansim.collectives.nccl_tuning import choose, tune
    tuning = tune(p4d_machine(model), era_for("2.30.7"))
    assert choose(tuning, "all_reduce", 1 * MiB, proto=forced).protocol == expected


def test_nccl_2_4_reads_no_nccl_proto_so_the_plugin_changes_nothing():
    from gansim.collectives.nccl_tuning import choose, tune
    era = era_for("2.4.8")
    with_plugin = choose(tune(p4d_machine("AWS EFA (p4d)"), era), "all_reduce", 64 * KiB)
    assert with_plugin.protocol == choose(tune(p4d_machine(None), era), "all_reduce", 64 * KiB).protocol == "LL"


def test_explain_names_the_plugins_protocol_and_the_runner_up_obeys_it():
    from gansim.collectives.nccl_explain import explain

    cluster = Cluster(p4d_topology("AWS EFA (p4d)"), 16, simpy.Environment())
    state = nccl_state(cluster, "2.30.7")
    told = explain(cluster, state, "all_reduce", 1 * MiB, 1e-3)
    assert told.chosen.protocol == "Simple" and told.runner_up is not None and told.runner_up.protocol == "Simple"
    assert told.plugin_protocol == "Simple" and "NCCL_PROTO=Simple set by the net plugin" in told.sentence()
    forced = explain(cluster, state, "all_reduce", 1 * MiB, 1e-3, proto="LL")
    assert forced.chosen.protocol == "LL" and forced.plugin_protocol is None


def test_explain_counts_the_network_hops_and_what_the_plugin_puts_in_each():
    """--explain names the hops across machines in NCCL's latency and what one of them is
    played at: 2.30's tree over 2 machines crosses the network 2 log2(nNodes) = 2 times; a
    p4d hop for Simple is hwLat[NET][TREE][Simple] 14 us + the plugin's 75 us twice; on NCCL's
    own transport only the 14 us; inside one machine there is none."""
    from gansim.collectives.nccl_explain import explain

    for model, hop, plugin in (("AWS EFA (p4d)", 14.0 + 2 * 75.0, 75.0), (None, 14.0, None)):
        cluster = Cluster(p4d_topology(model), 16, simpy.Environment())
        told = explain(cluster, nccl_state(cluster, "2.30.7"), "all_reduce", 1 * MiB, 1e-3, "tree", "Simple")
        assert told.network_hops == 2 and told.network_hop_us == pytest.approx(hop)
        assert told.plugin_latency_us == plugin
        assert f"2 network hops of {hop:.0f} us" in told.sentence()
        assert ("the net plugin's 75 us in it twice" in told.sentence()) == (model is not None)
        assert told.to_json()["network_hops"] == 2
    one = Cluster(p4d_topology("AWS EFA (p4d)"), 8, simpy.Environment())
    inside = explain(one, nccl_state(one, "2.30.7"), "all_reduce", 1 * MiB, 1e-3)
    assert inside.network_hops == 0 and inside.plugin_latency_us is None and "network hop" not in inside.sentence()


def test_unknown_nic_model_is_a_one_line_error():
    from gansim.core.errors import UserInputError
    with pytest.raises(UserInputError, match="unknown NIC model 'Infiniband'.*AWS EFA"):
        efa_machine("Infiniband")


# ---------------------------------------------------------------- NCCL_P2P_LEVEL

def pcie_machine(**extra):
    from gansim.collectives.nccl_topology import NcclMachine
    data = {"name": "pcie", "generator": "pcie_tree",
            "params": {"gpus": 4, "gpus_per_switch": 0, "pcie_bandwidth_GBps": 63.0, "host_model": "AMD EPYC 9575F"},
            **extra}
    return NcclMachine.build(topology_from_dict(data, "test"), 4)


def test_p2p_level_decides_p2p_or_host_memory_on_paths_through_the_cpu():
    from gansim.collectives.nccl_topology import PATH_PHB
    # four GPUs each on its own root port: GPU to GPU crosses the CPU (PHB)
    default = pcie_machine().hop(0, 1)
    assert default.path_type == PATH_PHB and default.transport == "shm"  # ncclTopoCheckP2p: PXB, > 2 GPUs
    assert pcie_machine(nccl_p2p_level="SYS").hop(0, 1).transport == "p2p"
    assert pcie_machine(nccl_p2p_level="PHB").hop(0, 1).transport == "p2p"
    assert pcie_machine(nccl_p2p_level="PXB").hop(0, 1).transport == "shm"


def test_p2p_level_outside_ncclS_names_is_a_one_line_error():
    from gansim.core.errors import UserInputError
    with pytest.raises(UserInputError, match="nccl_p2p_level"):
        pcie_machine(nccl_p2p_level="ANY")


def test_a_published_runs_p2p_level_reaches_its_topology():
    from pathlib import Path

    from gansim.prediction.published import load_published
    (rtx,) = load_published("rtx5090-8x-epyc9575f-p2p")
    assert rtx.spec.env["NCCL_P2P_LEVEL"] == "SYS" and rtx.topology().nccl_p2p_level == "SYS"
    assert Path(rtx.path).exists()
