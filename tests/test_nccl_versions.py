"""NCCL version awareness: each release's tuning model (gansim/collectives/nccl_versions.py),
read from NVIDIA/nccl's release tags. Algorithms a release does not have are never chosen,
figures that changed follow the release, and a bad version is one line naming the field."""

from __future__ import annotations

import pytest

from gansim.cli.main import main
from gansim.collectives.nccl_topology import NcclMachine
from gansim.collectives.nccl_tuning import PROTOCOLS, choose, tune
from gansim.collectives.nccl_versions import ERAS, NEWEST, era_for
from gansim.core.config import TrainingOptions
from gansim.core.errors import UserInputError
from gansim.prediction.nccl_tests_table import nccl_tests_table
from gansim.runner.collective import collective_times
from gansim.topology.graph import load_topology, topology_from_dict
from tests.cli_checks import run_bad

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
H100 = {"gpu_model": "H100-SXM5-80GB", "gpu_tflops": 67.0, "gpu_memory_GB": 80, "nvlink_bandwidth_GBps": 450.0,
        "pcie_bandwidth_GBps": 63.0}
SIZES = [64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB, 4 * GiB]


def h100_box(**extra):
    return topology_from_dict({"name": "h100", "generator": "nvswitch", "params": {"gpus": 8, **H100}, **extra},
                              "test")


def chosen(topology, version: str | None, sizes=SIZES, gpus: int = 8):
    tuning = tune(NcclMachine.build(topology, gpus), era_for(version))
    return [choose(tuning, "all_reduce", n).algorithm for n in sizes]


@pytest.mark.parametrize("version", ["2.12", "2.14.3", "2.15.5", "2.16.2", "2.16.5"])
def test_nvls_is_never_chosen_before_2_17(version):
    assert "nvls" not in chosen(h100_box(), version)


@pytest.mark.parametrize("version", ["2.18.3", "2.19.4", "2.21.5", "2.23.4", "2.27.5", "2.30.7", None])
def test_nvls_is_chosen_at_1_gib_on_h100_from_2_18(version):
    assert chosen(h100_box(), version, [1 * GiB]) == ["nvls"]


def test_nvls_tree_is_never_chosen_before_2_18():
    cluster = topology_from_dict({"name": "two", "generator": "multi_node", "params": {
        "nodes": 2, "gpus_per_node": 8, "intra": "nvswitch", "intra_params": H100, "nic_bandwidth_GBps": 50.0}},
        "test")
    assert "nvls_tree" not in chosen(cluster, "2.17.1", gpus=16)
    machine = NcclMachine.build(cluster, 16)
    assert tune(machine, era_for("2.17.1")).entry("all_reduce", "nvls_tree", "Simple").bandwidth_GBps == 0
    # from 2.18 NCCL rates it; on this cluster 2.18's model still prefers the tree (its bwIntra
    # raised towards twice bwInter), later releases' figures prefer NVLS-Tree
    assert tune(machine, era_for("2.18.3")).entry("all_reduce", "nvls_tree", "Simple").bandwidth_GBps > 0
    assert "nvls_tree" in chosen(cluster, "2.30.7", gpus=16)


def test_the_ll_ring_factor_follows_the_release():
    """tuning.cc: ring LL bus bandwidth x 1/4 up to 2.20, x .5 from 2.21 (v2.20.5-1, v2.21.5-1),
    on a PCIe box where llMaxBw does not bind."""
    box = load_topology("paper-gtx1080ti-pcie")
    old, new = (tune(NcclMachine.build(box, 4), era_for(v)).entry("all_reduce", "ring", "LL") for v in ("2.20.5",
                                                                                                        "2.21.5"))
    assert old.bandwidth_GBps == pytest.approx(new.bandwidth_GBps / 2)
    assert old.latency_us == new.latency_us


def test_every_era_tunes_every_protocol_of_ring_on_each_shipped_box():
    for name, gpus in (("dgx-a100", 8), ("dgx1-v100", 8), ("paper-gtx1080ti-pcie", 4)):
        machine = NcclMachine.build(load_topology(name), gpus)
        for era in ERAS:
            tuning = tune(machine, era)
            for proto in PROTOCOLS:
                entry = tuning.entry("all_reduce", "ring", proto)
                assert entry.latency_us > 0, (name, era.name, proto)
            assert tuning.entry("all_reduce", "ring", "Simple").bandwidth_GBps > 0


def test_a_topology_or_scenario_names_its_version_and_the_options_win():
    old_box = h100_box(nccl_version="2.16.2")
    assert old_box.nccl_version == "2.16.2"
    (t_old,) = collective_times(old_box, 8, "all_reduce", [1 * GiB])
    (t_new,) = collective_times(old_box, 8, "all_reduce", [1 * GiB], options=TrainingOptions(nccl_version="2.30.7"))
    assert t_old.algorithm == "ring" and t_new.algorithm == "nvls"
    assert era_for(None) is NEWEST


@pytest.mark.parametrize("bad", ["2.3.7", "3.0", "2.31.1", "latest", "2..1"])
def test_a_version_the_model_does_not_follow_is_one_line(bad, tmp_path, capsys):
    with pytest.raises(ValueError):
        TrainingOptions(nccl_version=bad)
    with pytest.raises(UserInputError):
        h100_box(nccl_version=bad)
    assert main(["nccl-tests", "dgx-a100", "-g", "8", "-b", "1M", "-e", "1M", "--nccl-version", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nccl-version" in err[0] and "allowed: 2.4 to 2.30.7" in err[0]


def test_nccl_tests_prints_the_release_it_models(capsys):
    assert main(["nccl-tests", "dgx-a100", "-g", "8", "-b", "1M", "-e", "1M", "--nccl-version", "2.18.3"]) == 0
    assert "NCCL 2.18 tuning model (v2.18.3-1)" in capsys.readouterr().out


def test_a_version_written_as_a_yaml_number_is_refused_with_the_way_out(tmp_path, capsys):
    """YAML reads `nccl_version: 2.10` as the number 2.1: refused, saying to quote it."""
    (tmp_path / "box.yaml").write_text("name: box\nnccl_version: 2.10\ngenerator: nvswitch\nparams: {gpus: 8}\n")
    assert main(["nccl-tests", str(tmp_path / "box.yaml"), "-g", "8", "-b", "1M", "-e", "1M"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nccl_version" in err[0] and "in quotes" in err[0]


def _ring_ll128(version: str, box: str = "dgx1-v100", gpus: int = 8):
    machine = NcclMachine.build(load_topology(box), gpus)
    return machine, tune(machine, era_for(version)).entry("all_reduce", "ring", "LL128")


def test_ll128_before_2_10_is_capped_per_collective_as_each_release_wrote_it():
    """tuning.cc v2.6.4-1: "busBw = std::min(busBw*120.0/128.0, ll128MaxBw[coll])" with
    ll128MaxBw[AllReduce] = 100 GB/s for all channels, baseLat ring LL128 3.6 us and hwLat
    NVLink ring LL128 2.5 us; v2.7.8-1: "busBw * 0.92" under ll128MaxBwPerCh[AllReduce] = 16.7
    per channel, baseLat 10.0 and hwLat 1.9 us. Bus to algorithm bandwidth: nRanks / nsteps."""
    machine, entry = _ring_ll128("2.6.4")
    graph_bus, ratio, nsteps = machine.ring.channels * machine.ring.bw_intra, 8 / 14, 14
    assert entry.bandwidth_GBps == pytest.approx(min(graph_bus * 120 / 128, 100.0) * ratio)
    assert entry.latency_us == pytest.approx(3.6 + nsteps * 2.5)
    _, entry = _ring_ll128("2.7.8")
    assert entry.bandwidth_GBps == pytest.approx(min(graph_bus * 0.92, 16.7 * machine.ring.channels) * ratio)
    assert entry.latency_us == pytest.approx(10.0 + nsteps * 1.9)
    _, entry = _ring_ll128("2.9.9")
    assert entry.bandwidth_GBps == pytest.approx(min(graph_bus * 0.92, 16.9 * machine.ring.channels) * ratio)


@pytest.mark.parametrize("version", ["2.5.7", "2.6.4"])
def test_ll128_is_never_chosen_on_ampere_before_2_7(version):
    """v2.6.4-1 enables LL128 by default "only on Volta+NVLink" (minCompCap == maxCompCap == 70);
    v2.7.3-1 adds Ampere (80)."""
    box = load_topology("dgx-a100")
    assert "LL128" not in [choose(tune(NcclMachine.build(box, 8), era_for(version)), "all_reduce", n).protocol
                           for n in (64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 1 * GiB)]
    _, entry = _ring_ll128("2.7.8", "dgx-a100")
    assert entry.bandwidth_GBps > 0


def test_a_ring_across_nodes_before_2_7_counts_every_step_at_the_network_hop():
    """v2.6.4-1: "comm->latencies[coll][a][p] += nsteps*lat" with lat = hwLat[NET][RING][p]
    (Simple 6.6 us, baseLat 8.4) on more than one node; no "plateau effect" yet. v2.7.8-1
    splits the steps: 2 (nNodes - 1) at hwLat[NET] (9.6), the rest at the intra hop."""
    two = topology_from_dict({"name": "two", "generator": "multi_node", "params": {
        "nodes": 2, "gpus_per_node": 8, "intra": "nvswitch", "nic_bandwidth_GBps": 25.0}},
        "test")
    machine = NcclMachine.build(two, 16)
    old, new = (tune(machine, era_for(v)) for v in ("2.6.4", "2.7.8"))
    nsteps = 2 * 15
    assert old.entry("all_reduce", "ring", "Simple").latency_us == pytest.approx(8.4 + nsteps * 6.6)
    intra = 3.4 if machine.ring.type_intra <= 1 else 5.7
    assert new.entry("all_reduce", "ring", "Simple").latency_us == pytest.approx(8.4 + 2 * 9.6 + (nsteps - 2) * intra)
    from gansim.collectives.nccl_tuning import algo_latency_us
    assert algo_latency_us(old, "all_reduce", "ring", "Simple", 1 * GiB) == old.entry(
        "all_reduce", "ring", "Simple").latency_us
    assert algo_latency_us(new, "all_reduce", "ring", "Simple", 1 * GiB) == pytest.approx(
        1.9 * new.entry("all_reduce", "ring", "Simple").latency_us)


def test_a_fabric_hop_stands_for_the_network_only_on_the_steps_that_cross_machines():
    """2.6's model counts all 30 steps of a 16-rank ring at hwLat[NET]; what is played puts
    the network hop (an EFA hop for Simple: hwLat[NET] 6.6 + the plugin's 75 us twice, as
    NCCL composes it from 2.18) only on the 2 (nNodes - 1) steps that leave a machine, not on
    the 28 that stay on NVLink."""
    efa = topology_from_dict({"name": "two", "generator": "multi_node", "params": {
        "nodes": 2, "gpus_per_node": 8, "intra": "nvswitch", "nic_bandwidth_GBps": 12.5,
        "nic_model": "AWS EFA (p4d)"}}, "test")
    entry = tune(NcclMachine.build(efa, 16), era_for("2.6.4")).entry("all_reduce", "ring", "Simple")
    assert entry.latency_us == pytest.approx(8.4 + 30 * 6.6)
    assert entry.played_latency_us == pytest.approx(8.4 + 28 * 6.6 + 2 * (6.6 + 2 * 75.0))


def test_nccl_2_4_chooses_by_its_thresholds_and_never_ll128():
    """NCCL 2.4 had no tuning model (v2.4.8-1). init.cc ncclTreeThreshold: over NVLink a tree on
    two nodes is rated 2 x 3/4 of the ring's bandwidth, faster, so every all-reduce runs on
    the tree. enqueue.cc getKernelInfo: LL up to nChannels x nThreads x nRanks (chunks per
    loop of a ring) x threadThreshold, with nThreads grown from 64 by doubling (to 256) while
    a thread has more than 8 bytes a chunk, nChannels up to DIVUP(bytes, nThreads x nRanks x
    8), threadThreshold 64 x 2 on Volta (ncclThreadThreshold doubles it for communicators made
    one per process, as these MPI ranks' were: ncclCommInitRank counts their nodes)."""
    from gansim.collectives.nccl_tuning import tree_threshold_2_4
    from gansim.prediction.published import load_published

    (p3dn,) = load_published("aws-p3dn-v100-2node-efa")
    machine = NcclMachine.build(p3dn.topology(), 16)
    tuning = tune(machine, era_for("2.4.6"))
    assert tree_threshold_2_4(machine) == float("inf")
    sizes = [64 * KiB, 1 * MiB, 16 * MiB, 1 * GiB]
    assert {choose(tuning, "all_reduce", n).algorithm for n in sizes} == {"tree"}
    channels = machine.comm_channels
    ll_limit = min(channels, -(-(1 * MiB) // (256 * 16 * 8))) * 256 * 16 * 128  # nThreads 256 from 8 KiB
    ring = [choose(tuning, "all_reduce", n, algo="ring") for n in (ll_limit, ll_limit + 4096)]
    assert [c.protocol for c in ring] == ["LL", "Simple"]
    assert ring[1].channels == channels
    assert all(choose(tuning, c, n).protocol != "LL128" for c in ("all_reduce", "all_gather") for n in sizes)


def test_nccl_2_4_leaves_ll_sooner_when_one_process_made_every_communicator():
    """init.cc v2.4.8-1: ncclCommInitRank passes ncclThreadThreshold the nodes its rings count
    ("nnodes += treeIn[r]", one even on one machine), which doubles the 64 bytes of Volta;
    ncclCommInitAll (one process for all its GPUs: nccl-tests without MPI) passes 0. So on
    one 8-GPU V100 machine the ring's LL limit, nChannels x 256 threads x 8 chunks x
    threadThreshold, halves: its sizes between the two limits go to Simple."""
    dgx1 = topology_from_dict({"name": "v100-box", "generator": "dgx1"}, "test")
    machine = NcclMachine.build(dgx1, 8, **era_for("2.4.8").search_rules())
    one_each = tune(machine, era_for("2.4.8"))
    one_for_all = tune(machine, era_for("2.4.8"), single_process=True)
    # at these sizes every thread has more than 8 bytes a chunk (nThreads 256 from 8 KiB) and
    # DIVUP(bytes, 256 x 8 x 8) reaches the machine's rings, so nChannels is all of them
    limit_all = machine.comm_channels * 256 * 8 * 64
    for nbytes, each, alone in ((limit_all, "LL", "LL"), (limit_all + 4096, "LL", "Simple"),
                                (2 * limit_all, "LL", "Simple"), (2 * limit_all + 4096, "Simple", "Simple")):
        assert choose(one_each, "all_reduce", nbytes).protocol == each, nbytes
        assert choose(one_for_all, "all_reduce", nbytes).protocol == alone, nbytes
    # nccl-tests run by one thread on every GPU is that one process
    for per_thread, protocol in ((8, "Simple"), (4, "LL")):
        rows = nccl_tests_table(dgx1, 8, "all_reduce", [limit_all + 4096], gpus_per_thread=per_thread,
                                options=TrainingOptions(nccl_version="2.4.8"))
        assert rows[0].protocol == protocol, per_thread
    # later releases choose by tuning.cc's model, whoever made the communicators
    for version in ("2.5.7", "2.12.12", "2.30.7"):
        for nbytes in (limit_all + 4096, 2 * limit_all):
            assert (choose(tune(machine, era_for(version)), "all_reduce", nbytes)
                    == choose(tune(machine, era_for(version), single_process=True), "all_reduce", nbytes))


def test_nccl_2_4_keeps_short_all_reduces_on_the_ring_across_four_nodes():
    """ncclTreeThreshold on 4 NVLink nodes of 8: the tree is rated 3/4 of the ring, so it takes
    sizes up to ringBw x treeBw / (ringBw - treeBw) x (ringLat - treeLat), with the ring's
    latency 6 us x 31 steps and the tree's 15 us x log2(4) + 4 us x 7."""
    from gansim.collectives.nccl_tuning import tree_threshold_2_4

    four = topology_from_dict({"name": "four", "generator": "multi_node", "params": {
        "nodes": 4, "gpus_per_node": 8, "intra": "dgx1", "nic_bandwidth_GBps": 12.5}}, "test")
    machine = NcclMachine.build(four, 32)
    ring_bw = 5000.0 * machine.comm_channels
    assert tree_threshold_2_4(machine) == pytest.approx(ring_bw * 0.75 / 0.25 * (6 * 31 - (15 * 2 + 4 * 7)))


def test_ll_rings_of_one_node_other_than_all_reduce_get_a_third_from_2_7_to_2_20():
    """tuning.cc v2.7.8-1 ... v2.20.5-1: "busBw * ((nNodes > 1 || coll == AllReduce || coll ==
    Reduce) ? 1.0/4.0 : 1.0/3.0)"; v2.6.4-1: 1/4 for every collective; v2.21.5-1: .5."""
    machine = NcclMachine.build(load_topology("paper-gtx1080ti-pcie"), 4)

    def bus(version: str, coll: str) -> float:
        entry = tune(machine, era_for(version)).entry(coll, "ring", "LL")
        nsteps = 2 * 3 if coll == "all_reduce" else 3
        return entry.bandwidth_GBps * nsteps / 4  # algorithm to bus bandwidth

    for version, share in (("2.6.4", 1 / 4), ("2.7.8", 1 / 3), ("2.20.5", 1 / 3), ("2.21.5", 1 / 2)):
        assert bus(version, "all_gather") / bus(version, "all_reduce") == pytest.approx(
            share / (1 / 2 if version == "2.21.5" else 1 / 4)), version


def test_2_12_to_2_22_count_two_network_steps_per_node_only_for_all_reduce():
    """tuning.cc v2.12.12-1 ... v2.22.3-1: "nInterSteps = coll == AllReduce ? (nNodes > 1 ?
    2*nNodes : 0) : coll == ReduceScatter || coll == AllGather ? nNodes-1 : nNodes"; v2.23.4-1:
    2 (nNodes - 1) for an all-reduce. Two nodes of 8, ring Simple: hwLat NVLink 3.4 us, NET 9.6."""
    two = topology_from_dict({"name": "two", "generator": "multi_node", "params": {
        "nodes": 2, "gpus_per_node": 8, "intra": "nvswitch", "nic_bandwidth_GBps": 25.0}}, "test")
    machine = NcclMachine.build(two, 16)
    old, new = (tune(machine, era_for(v)) for v in ("2.16.5", "2.23.4"))
    # NCCL's latency counts each intra step at least at the network post overhead from 2.18 (x3 for Simple)
    intra_new = max(3.4, 3 * (1.0 if machine.cpu_vendor != "amd" else 2.0))
    assert old.entry("all_reduce", "ring", "Simple").latency_us == pytest.approx(8.4 + 26 * 3.4 + 4 * 9.6)
    assert old.entry("all_gather", "ring", "Simple").latency_us == pytest.approx(8.4 + 14 * 3.4 + 1 * 9.6)
    assert new.entry("all_reduce", "ring", "Simple").latency_us == pytest.approx(8.4 + 28 * intra_new + 2 * 14.0)


def _one_gpu_machines(nodes: int, gpus_per_node: int = 1):
    return topology_from_dict({"name": "one-gpu", "generator": "multi_node", "params": {
        "nodes": nodes, "gpus_per_node": gpus_per_node, "intra": "nvswitch", "nic_bandwidth_GBps": 50.0}}, "test")


@pytest.mark.parametrize("version,factor", [("2.23.4", 0.85), ("2.24.3", 0.75), ("2.30.7", 0.75)])
def test_pat_entry_is_tuning_cc_s(version, factor):
    """tuning.cc v2.23.4-1 on: PAT, for all-gather and reduce-scatter at one GPU per node,
    Simple only, on the tree graph (init.cc graphs[NCCL_ALGO_PAT] = treeGraph), its bus
    bandwidth x .85 (2.23) / .75 (2.24 on) and no bus-to-algorithm ratio; its latency "8 //
    Base time + log2i(nNodes) * (interLat/3.5) + nRanks * 2.8", interLat the tree's network
    Simple hop (14 us: "With ppn=1 latencies are fully exposed, use the Tree network latency")."""
    machine = NcclMachine.build(_one_gpu_machines(16), 16)
    tuning = tune(machine, era_for(version))
    graph = machine.tree
    for coll in ("all_gather", "reduce_scatter"):
        entry = tuning.entry(coll, "pat", "Simple")
        assert entry.bandwidth_GBps == pytest.approx(graph.channels * graph.bw_inter * factor)
        assert entry.latency_us == pytest.approx(8.0 + 4 * 14.0 / 3.5 + 16 * 2.8)
        assert tuning.entry(coll, "pat", "LL").bandwidth_GBps == 0
    assert tuning.entry("all_reduce", "pat", "Simple").bandwidth_GBps == 0


def test_pat_is_chosen_only_where_its_release_and_one_gpu_per_node_allow():
    sizes = [64 * KiB, 256 * KiB, 1 * MiB, 64 * MiB]

    def chosen_for(topology, gpus, version, coll="all_gather"):
        tuning = tune(NcclMachine.build(topology, gpus), era_for(version))
        return {choose(tuning, coll, n).algorithm for n in sizes}

    one = _one_gpu_machines(16)
    assert "pat" not in chosen_for(one, 16, "2.22.3")
    assert "pat" in chosen_for(one, 16, "2.23.4") and "pat" in chosen_for(one, 16, "2.30.7", "reduce_scatter")
    assert "pat" not in chosen_for(one, 16, "2.30.7", "all_reduce")
    assert "pat" not in chosen_for(_one_gpu_machines(8, 2), 16, "2.30.7")  # two GPUs a node


def test_pat_moves_as_many_blocks_as_a_ring():
    """Every rank sends each of the other ranks' blocks once over the power-of-two distances."""
    from gansim.collectives.nccl import pat_exchanges

    for ranks in (2, 3, 5, 8, 13, 16, 100):
        exchanges = pat_exchanges(ranks)
        assert [d for d, _ in exchanges] == [1 << k for k in range(len(exchanges))]
        assert sum(blocks for _, blocks in exchanges) == ranks - 1


def test_a_pat_all_gather_is_played_on_the_fabric():
    """The played time of a large PAT all-gather grows with the bytes each NIC sends (n-1 of n
    blocks), so forcing PAT at 16 MiB takes at least that over the NIC's line rate."""
    one = _one_gpu_machines(16)
    (small, large) = collective_times(one, 16, "all_gather", [1 * MiB, 16 * MiB],
                                      options=TrainingOptions(nccl_algo="pat"))
    assert small.algorithm == large.algorithm == "pat"
    assert large.seconds > 15 / 16 * 16 * MiB / 50e9
    assert large.seconds > small.seconds * 4


def test_a_one_gpu_tree_takes_the_tree_pattern_factor_from_2_18():
    """tuning.cc v2.18.3-1 on: "if (a == TREE && graphs[a]->pattern == NCCL_TOPO_PATTERN_TREE)
    busBw *= .85", and search.cc gives a machine of one GPU that pattern; a tree all-reduce's
    bus bandwidth is min(busBw x .92, channels x perChMaxTreeBw), its algorithm bandwidth half."""
    machine = NcclMachine.build(_one_gpu_machines(4), 4)
    graph = machine.tree
    bus = graph.channels * graph.bw_inter  # more than two nodes: the inter bandwidth
    for version, factor in (("2.17.1", 1.0), ("2.18.3", 0.85), ("2.30.7", 0.85)):
        tuning = tune(machine, era_for(version))
        expected = min(bus * 0.92, graph.channels * tuning.per_channel_max_tree_bw) * factor * 0.5
        assert tuning.entry("all_reduce", "tree", "Simple").bandwidth_GBps == pytest.approx(expected), version
    two = NcclMachine.build(_one_gpu_machines(4, 2), 8)  # two GPUs a node: a balanced tree
    tuning = tune(two, era_for("2.30.7"))
    bus = two.tree.channels * two.tree.bw_inter
    assert tuning.entry("all_reduce", "tree", "Simple").bandwidth_GBps == pytest.approx(
        min(bus * 0.92, two.tree.channels * tuning.per_channel_max_tree_bw) * 0.5)


def _machine_for(name: str, version: str):
    from gansim.prediction.published import load_published

    (published,) = load_published(name)
    era = era_for(version)
    return NcclMachine.build(published.topology(), published.spec.gpus, **era.search_rules())


def test_the_ring_search_steps_and_duplicates_as_each_release_does():
    """search.cc on an NVLink-bridged pair of A40s (compute capability 8.6): the search finds one
    channel at the fastest speed step the bridge carries, 44 GB/s in v2.15-2.17's intra-node
    steps (44, 30, 22, ...) and 40 in v2.18's (40, 30, 20, ...). ncclTopoDupChannels then
    duplicates it in v2.15.5-1 (from 25 GB/s on any GPU), not in v2.16.5-1 ("(ccMin <= 80 &&
    bwIntra >= 25.0) || (ccMin <= 90 && bwIntra >= 50.0)"), and again in v2.18.3-1 (skipped
    only below 25 GB/s or "ccMin > 80 && bwIntra < 50.0 && nChannels > 4")."""
    old, new, older = (_machine_for("a40-nvlink-pair", v) for v in ("2.16.5", "2.18.3", "2.15.5"))
    assert (old.ring.channels, old.ring.bw_intra) == (1, 44.0)
    assert (new.ring.channels, new.ring.bw_intra) == (2, 20.0)
    assert (older.ring.channels, older.ring.bw_intra) == (2, 22.0)
    assert (old.comm_channels, new.comm_channels) == (2, 4)


@pytest.mark.parametrize("version,most", [("2.4.8", 16), ("2.5.7", 32), ("2.18.3", 32), ("2.24.3", 32),
                                          ("2.25.1", 64), ("2.30.7", 64)])
def test_a_communicator_has_at_most_the_release_s_maxchannels(version, most):
    """device.h MAXCHANNELS is 16 in v2.4.8-1, 32 from v2.5.6-1 to v2.24.3-1 and 64 from
    v2.25.1-1; init.cc lets the ring search find MAXCHANNELS / 2 ("ringGraph.maxChannels =
    MAXCHANNELS/2") and connect.cc caps the doubled channels at MAXCHANNELS. Two H100
    machines with 32 EFA NICs each (100 Gb/s: one channel a NIC at the 12 GB/s step) have
    NICs for more ring channels than any release searches for up to 2.24."""
    machine = _machine_for("aws-p5-h100-2node-efa", version)
    assert len(machine.nics[0]) == 32
    assert machine.ring.channels <= most // 2
    assert machine.comm_channels <= most
    if most == 32:  # the search stops at its bound: 16 channels, doubled to 32
        assert (machine.ring.channels, machine.comm_channels) == (16, 32)
    if most == 64:  # more channels than 2.24 could have
        assert machine.ring.channels > 16


@pytest.mark.parametrize("version,capability,expected", [
    ("2.17.1", 90, 16),  # not before 2.18
    ("2.18.3", 90, 32),  # "minCompCap == 90 ... && 2*nChannels <= MAXCHANNELS": 16 channels double
    ("2.20.5", 90, 16),  # "nChannels < 16"
    ("2.24.3", 100, 16),  # Blackwell: only from 2.25 ("minCompCap >= 90")
    ("2.30.7", 100, 16),  # ... and only below 16 channels
])
def test_connect_cc_doubles_fast_rings_across_machines_as_each_release_does(version, capability, expected):
    """connect.cc ncclTopoPostset: "Use 4 compute channels per search channel to reach peak BW
    on <8 PPN" for rings faster than 45 GB/s across machines; a ring graph of 8 channels at
    48 GB/s is 16 communicator channels before it."""
    from dataclasses import replace

    from gansim.collectives.nccl_topology import Graph

    era = era_for(version)
    machine = replace(_machine_for("lambda-b200-2node-ib", version), capability=capability,
                      max_capability=capability, hopper_doubling=era.hopper_doubling)
    machine.__dict__["ring"] = Graph("ring", 8, 48.0, 48.0, 1, 4)  # the search's result, as given
    assert machine.comm_channels == expected
    machine.__dict__["ring"] = Graph("ring", 7, 48.0, 48.0, 1, 4)  # 14 channels: below 16 in every release
    assert machine.comm_channels == (14 if era.hopper_doubling is None or not (
        era.hopper_doubling[0] <= capability <= era.hopper_doubling[1]) else 28)


def _box_file(tmp_path, generator: str, gpus: int):
    """A topology file of one machine of `gpus` GPUs made by `generator` (for the command line too)."""
    path = tmp_path / f"{generator}{gpus}.yaml"
    path.write_text(f"name: box\ngenerator: {generator}\nparams: {{gpus: {gpus}}}\n")
    return path


def _crowded_box(tmp_path, gpus: int):
    """One PCIe machine of `gpus` GPUs."""
    return _box_file(tmp_path, "pcie_tree", gpus)


@pytest.mark.parametrize("version, most", [("2.5.7", 256), ("2.26.2", 256), ("2.27.3", 576), ("2.28.9", 576),
                                           ("2.29.7", 640), (None, 640)])
def test_a_machine_holds_as_many_gpus_as_the_releases_topology_does(tmp_path, version, most):
    """include/graph.h NCCL_TOPO_MAX_NODES at each tag (256 from v2.5.7-1 to v2.26.2-1, 576 in
    v2.27.3-1 and v2.28, 640 from v2.29.7-1): ncclTopoCreateNode fails on the one GPU more, so
    NCCL does not start; the largest machine it holds builds."""
    topology = load_topology(str(_crowded_box(tmp_path, most + 1)))
    rules = era_for(version).search_rules()
    assert len(NcclMachine.build(topology, most, **rules).nodes[0]) == most
    with pytest.raises(UserInputError, match=f"cannot run {most + 1} ranks on one machine .* at most {most} GPUs"):
        NcclMachine.build(topology, most + 1, **rules)


def test_nccl_2_4_had_no_topology_to_fill(tmp_path):
    """v2.4.8-1 has no NCCL_TOPO_MAX_NODES (its rings came before the topology search)."""
    topology = load_topology(str(_crowded_box(tmp_path, 257)))
    assert len(NcclMachine.build(topology, 257, **era_for("2.4.8").search_rules()).nodes[0]) == 257


def _box(tmp_path, generator: str, gpus: int):
    return load_topology(str(_box_file(tmp_path, generator, gpus)))


@pytest.mark.parametrize("version, most", [("2.5.7", 32), ("2.20.5", 32), ("2.21.5", 128), ("2.24.3", 128)])
def test_a_gpu_has_as_many_topology_links_as_the_release_allows(tmp_path, version, most):
    """graph/topo.h NCCL_TOPO_MAX_LINKS at each tag (32 to v2.20.5-1, 128 from v2.21.5-1 to
    v2.24.3-1, 576 from v2.25.1-1): ncclTopoConnectNodes fails on one link more ("too many Topo
    links"). In a full NVLink mesh a GPU links to every other GPU of the communicator
    (ncclTopoAddNvLinks skips GPUs outside it) and to its PCI parent: `most` GPUs fit, one
    more does not, and the same box with fewer ranks builds."""
    rules = era_for(version).search_rules()
    mesh = _box(tmp_path, "fully_connected", most + 1)
    with pytest.raises(UserInputError, match=f"GPU 'gpu0' would have {most + 1} links .* at most {most} "):
        NcclMachine.build(mesh, most + 1, **rules)
    assert NcclMachine.build(mesh, most, **rules).ranks == most


@pytest.mark.parametrize("version, most", [("2.20.5", 32), ("2.21.5", 128)])
def test_nccl_s_one_nvswitch_node_links_to_every_gpu_on_it(tmp_path, version, most):
    """topo.cc: every NVSwitch is NCCL's NVS node 0, linked to each GPU on it, so a switched
    NVLink domain of more GPUs than NCCL_TOPO_MAX_LINKS does not start (a 72-GPU domain needs
    2.21, whose limit went from 32 to 128)."""
    rules = era_for(version).search_rules()
    domain = _box(tmp_path, "nvswitch", most + 1)
    with pytest.raises(UserInputError, match=f"NVSwitch node of a machine would link to {most + 1} GPUs"):
        NcclMachine.build(domain, most + 1, **rules)
    assert NcclMachine.build(domain, most, **rules).ranks == most


def test_nccl_2_4_had_no_topology_links_to_count(tmp_path):
    assert NcclMachine.build(_box(tmp_path, "fully_connected", 40), 40, **era_for("2.4.8").search_rules()).ranks == 40


def test_too_many_topology_links_is_one_line_naming_the_limit(tmp_path, capsys):
    path = _box_file(tmp_path, "fully_connected", 40)
    err = run_bad(capsys, ["nccl-tests", str(path), "-g", "40", "-b", "1M", "-e", "1M", "--nccl-version", "2.20"])
    assert err == (f"gansim: error: {path}: algorithms: the nccl algorithm cannot run here: in NCCL v2.20.5-1's "
                   "topology GPU 'gpu0' would have 40 links (NVLinks to 39 GPUs, its PCI parent), and a node may have "
                   "at most 32 (NCCL_TOPO_MAX_LINKS, src/graph/topo.h; ncclTopoConnectNodes fails with \"too many "
                   "Topo links\"); allowed: at most 32 links a node, a release that allows more (128 from 2.21, 576 "
                   "from 2.25), or another algorithm")


def test_too_many_gpus_in_a_machine_is_one_line_naming_the_limit(tmp_path, capsys):
    path = _crowded_box(tmp_path, 300)
    err = run_bad(capsys, ["nccl-tests", str(path), "-g", "300", "-b", "1M", "-e", "1M", "--nccl-version", "2.21.5"])
    assert err == (f"gansim: error: {path}: algorithms: the nccl algorithm cannot run 300 ranks on one machine (that "
                   "of 'gpu0'): NCCL v2.21.5-1 keeps at most 256 GPUs of a machine in its topology (NCCL_TOPO_MAX_NODES, "
                   "src/include/graph.h) and fails to start past it; allowed: at most 256 ranks a machine, or another "
                   "algorithm")
