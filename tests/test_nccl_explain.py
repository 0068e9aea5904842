"""`gansim nccl-tests --explain`: what bounds each row, derived from the run's machine and
NCCL's tuning model, and checked against the topology and the predicted bandwidth."""

from __future__ import annotations

import json

import pytest
import simpy

from gansim.cli.main import main
from gansim.collectives.nccl_tuning import ALGORITHMS, PROTOCOLS, algo_time_us
from gansim.topology.graph import load_topology
from tests.cli_checks import run_bad

FIELDS = {"chosen", "runner_up", "runner_up_loss", "chosen_by", "plugin_protocol", "settings", "fell_back",
          "overruled", "ll128_by_listing", "staged_in_host", "channels", "comm_channels",
          "nvls_heads", "network_hops", "network_hop_us", "plugin_latency_us", "threads", "latency_us",
          "latency_share", "proxy_us", "drain_us", "bandwidth_share", "bound_by", "sentence"}


def explained(capsys, argv):
    assert main(["nccl-tests", *argv, "--explain", "--json"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out)["rows"], out.err


def link_kind(topology, name: str) -> str:
    return topology.link_kinds[topology.link_names.index(name)]


def link_rate_GBps(topology, name: str) -> float:
    return float(topology.capacity_Bps[topology.link_names.index(name)]) / 1e9


def test_pcie_box_is_bound_by_pcie_or_host_memory(capsys):
    topology = load_topology("paper-gtx1080ti-pcie")
    assert "nvlink" not in topology.link_kinds  # nothing but PCIe between its GPUs
    assert not any(spec.p2p for spec in topology.nodes.values() if spec.kind == "gpu")  # staged in host memory
    rows, _ = explained(capsys, ["paper-gtx1080ti-pcie", "-g", "4", "-b", "64M", "-e", "256M", "-f", "4"])
    for row in rows:
        bound = row["explain"]["bound_by"]
        if bound["kind"] == "memory":
            host = bound["name"].rsplit(":", 1)[0]
            assert topology.nodes[host].kind == "host"
            assert bound["line_rate_GBps"] == pytest.approx(topology.nodes[host].dram_bandwidth_GBps)
        else:
            assert bound["kind"] == link_kind(topology, bound["name"]) == "pcie"
            assert bound["line_rate_GBps"] == pytest.approx(link_rate_GBps(topology, bound["name"]))
            assert "SHM" in bound["resource"]  # NCCL's SHM transport: part of the PCI bandwidth
        # a row bound by staging in host memory says the host's CPU decides its rate
        assert row["explain"]["staged_in_host"] is True
        assert "SHM through the CPU: the host decides its rate" in row["explain"]["sentence"]
        # a ring's bus bandwidth is what the bound link carries of data, for the bandwidth part of the time
        if row["algorithm"] == "ring":
            expected = bound["line_rate_GBps"] * bound["efficiency"] * row["explain"]["bandwidth_share"]
            assert row["busbw_GBps"] == pytest.approx(expected, rel=0.02)


def test_dgx_a100_is_bound_by_nvlink(capsys):
    topology = load_topology("dgx-a100")
    rows, _ = explained(capsys, ["dgx-a100", "-g", "8", "-b", "256M", "-e", "1G", "-f", "4"])
    nvlinks = [n for n, k in zip(topology.link_names, topology.link_kinds) if k == "nvlink"]
    for row in rows:
        bound = row["explain"]["bound_by"]
        assert bound["name"] in nvlinks and bound["kind"] == "nvlink"
        assert bound["resource"] == f"NVLink {bound['name']}"
        assert row["explain"]["staged_in_host"] is False and "SHM" not in row["explain"]["sentence"]
        assert bound["line_rate_GBps"] == pytest.approx(link_rate_GBps(topology, bound["name"]))
        assert bound["efficiency"] == pytest.approx(bound["link_efficiency"] / bound["wire_bytes_per_data_byte"])
        assert row["algorithm"] == "ring"
        expected = bound["line_rate_GBps"] * bound["efficiency"] * row["explain"]["bandwidth_share"]
        assert row["busbw_GBps"] == pytest.approx(expected, rel=0.02)


def test_runner_up_is_slower_and_respects_forced_algorithm(capsys):
    rows, _ = explained(capsys, ["dgx-a100", "-g", "8", "-b", "8", "-e", "1G", "-f", "8"])
    for row in rows:
        e = row["explain"]
        assert (e["chosen"]["algorithm"], e["chosen"]["protocol"]) == (row["algorithm"], row["protocol"])
        assert e["runner_up"] is not None
        assert e["runner_up"]["model_time_us"] >= e["chosen"]["model_time_us"]
        assert (e["runner_up"]["algorithm"], e["runner_up"]["protocol"]) != (row["algorithm"], row["protocol"])
        assert e["runner_up_loss"] == pytest.approx(e["runner_up"]["model_time_us"] / e["chosen"]["model_time_us"] - 1)
        assert e["channels"] == row["channels"] and e["channels"] <= e["comm_channels"]
    rows, _ = explained(capsys, ["dgx-a100", "-g", "8", "-b", "8", "-e", "1G", "-f", "8", "--nccl-algo", "tree"])
    for row in rows:
        e = row["explain"]
        assert row["algorithm"] == "tree"
        assert e["runner_up"] is None or e["runner_up"]["algorithm"] == "tree"
        assert e["runner_up"] is None or e["runner_up"]["model_time_us"] >= e["chosen"]["model_time_us"]
    # NVLS asked for where there is none (A100): NCCL 2.19-2.23 fall back to the ring
    # (tests/test_nccl_settings.py: later releases stop)
    rows, _ = explained(capsys, ["dgx-a100", "-g", "8", "-b", "1G", "-e", "1G", "--nccl-algo", "nvls",
                                 "--nccl-version", "2.23"])
    e = rows[0]["explain"]
    assert rows[0]["algorithm"] == "ring" and e["runner_up"]["algorithm"] == "ring"
    assert e["channels"] == e["comm_channels"] == rows[0]["channels"]
    assert e["fell_back"] and e["settings"] == "NCCL_ALGO=nvls" and "NCCL's fallback, the ring" in e["sentence"]
    rows, _ = explained(capsys, ["dgx-a100", "-g", "8", "-b", "1M", "-e", "1M", "--nccl-algo", "ring",
                                 "--nccl-proto", "Simple"])
    assert rows[0]["explain"]["runner_up"] is None  # nothing else allowed
    assert "chosen among what NCCL_ALGO=ring and NCCL_PROTO=Simple allow" in rows[0]["explain"]["sentence"]
    assert not rows[0]["explain"]["fell_back"]


def test_ll128_that_only_nccl_proto_turns_on_is_said_so(capsys):
    rows, _ = explained(capsys, ["paper-gtx1080ti-pcie", "-g", "4", "-b", "1M", "-e", "1M", "--nccl-proto", "LL128"])
    e = rows[0]["explain"]
    assert rows[0]["protocol"] == "LL128" and e["ll128_by_listing"] and not e["fell_back"]
    assert "NCCL leaves it off on this machine by default" in e["sentence"]
    rows, _ = explained(capsys, ["dgx-a100", "-g", "8", "-b", "1M", "-e", "1M", "--nccl-proto", "LL128"])
    assert rows[0]["protocol"] == "LL128" and not rows[0]["explain"]["ll128_by_listing"]


def test_runner_up_is_the_next_best_by_nccls_model(capsys):
    """The runner-up is the fastest pair other than the chosen one by algo_time_us."""
    import simpy

    from gansim.collectives.nccl import nccl_state
    from gansim.network.cluster import Cluster

    rows, _ = explained(capsys, ["multi-node", "-g", "16", "-b", "8", "-e", "256M", "-f", "32"])
    cluster = Cluster(load_topology("multi-node"), 16, simpy.Environment())
    tuning = nccl_state(cluster).tuning
    for row in rows:
        times = sorted((t, a, p) for a in ALGORITHMS for p in PROTOCOLS
                       if (t := algo_time_us(tuning, "all_reduce", a, p, row["nbytes"])) is not None)
        (t0, a0, p0), (t1, a1, p1) = times[:2]
        e = row["explain"]
        assert (e["chosen"]["algorithm"], e["chosen"]["protocol"]) == (a0, p0)
        assert (e["runner_up"]["algorithm"], e["runner_up"]["protocol"], e["runner_up"]["model_time_us"]) == \
            (a1, p1, pytest.approx(t1))


def test_latency_share_falls_as_size_grows(capsys):
    # one algorithm and protocol: the latency stays, the bandwidth part grows
    rows, _ = explained(capsys, ["dgx-a100", "-g", "8", "-b", "8", "-e", "1G", "-f", "4",
                                 "--nccl-algo", "ring", "--nccl-proto", "Simple"])
    shares = [r["explain"]["latency_share"] for r in rows]
    assert all(b <= a + 1e-12 for a, b in zip(shares, shares[1:]))
    assert shares[0] > 0.99 and shares[-1] < 0.05
    # NCCL's own choice: it may switch to a protocol with more latency and more bandwidth, so the
    # share falls within each protocol, and overall
    rows, _ = explained(capsys, ["paper-gtx1080ti-pcie", "-g", "4", "-b", "8", "-e", "1G", "-f", "4"])
    for a, b in zip(rows, rows[1:]):
        if (a["algorithm"], a["protocol"]) == (b["algorithm"], b["protocol"]):
            assert b["explain"]["latency_share"] <= a["explain"]["latency_share"] + 1e-12
    assert rows[-1]["explain"]["latency_share"] < 0.01 < 0.9 < rows[0]["explain"]["latency_share"]
    for r in rows:
        e = r["explain"]
        assert e["latency_share"] + e["bandwidth_share"] == pytest.approx(1.0)
        assert e["latency_share"] == pytest.approx(e["latency_us"] / r["time_us"])


def test_json_fields_and_human_lines(capsys):
    rows, table = explained(capsys, ["dgx-a100", "-g", "8", "-b", "8", "-e", "64M", "-f", "64"])
    for row in rows:
        e = row["explain"]
        assert set(e) == FIELDS
        assert set(e["bound_by"]) >= {"resource", "kind", "line_rate_GBps", "efficiency"}
        assert set(e["chosen"]) == set(e["runner_up"]) == {"algorithm", "protocol", "model_time_us"}
        assert e["threads"] > 0 and 0 < e["bound_by"]["efficiency"] <= 1
    # small sizes: held by NCCL's figure for the kernels on few channels, not by a link
    assert rows[0]["explain"]["bound_by"]["kind"] == "kernels"
    # the nccl-tests columns are those printed without --explain; each row gets one comment line
    assert main(["nccl-tests", "dgx-a100", "-g", "8", "-b", "8", "-e", "64M", "-f", "64"]) == 0
    plain = capsys.readouterr().out.splitlines()
    lines = table.splitlines()
    assert [line for line in lines if not line.startswith("#" + " " * 11)] == plain
    notes = [line for line in lines if line.startswith("#" + " " * 11)]
    assert [n.strip("# ") for n in notes] == [r["explain"]["sentence"] for r in rows]
    assert notes[-1].strip("# ").startswith(f"{rows[-1]['algorithm']}/{rows[-1]['protocol']} x")


def test_json_without_explain_is_unchanged(capsys):
    assert main(["nccl-tests", "dgx-a100", "-g", "2", "-b", "1M", "-e", "1M", "--json"]) == 0
    assert "explain" not in json.loads(capsys.readouterr().out)["rows"][0]


def test_explain_needs_the_nccl_algorithm(capsys):
    line = run_bad(capsys, ["nccl-tests", "dgx-a100", "-g", "8", "--algorithm", "ring", "--explain"])
    assert "--explain" in line and "--algorithm nccl" in line


def test_nccl_2_4_says_it_chose_by_thresholds(capsys):
    """NCCL 2.4 had no tuning model: the explanation says the choice came from its thresholds
    (and that the runner-up's figure is 2.5's), where later releases compare by time."""
    (old,), _ = explained(capsys, ["dgx1-v100", "-g", "8", "-b", "64K", "-e", "64K", "--nccl-version", "2.4.6"])
    (new,), _ = explained(capsys, ["dgx1-v100", "-g", "8", "-b", "64K", "-e", "64K", "--nccl-version", "2.5.7"])
    assert old["explain"]["chosen_by"] == "thresholds" and new["explain"]["chosen_by"] == "model"
    assert "NCCL 2.4's size thresholds" in old["explain"]["sentence"]
    assert "thresholds" not in new["explain"]["sentence"]


def test_ll128_before_2_7_is_said_to_be_capped_for_all_channels(capsys):
    """v2.6.4-1 caps LL128 at ll128MaxBw[coll] for all channels together (100 GB/s for an
    all-reduce), not per channel: the bound says which cap held."""
    (row,), _ = explained(capsys, ["dgx1-v100", "-g", "8", "-b", "1M", "-e", "1M", "--nccl-version", "2.6.4"])
    assert row["protocol"] == "LL128" and row["explain"]["bound_by"]["kind"] == "kernels"
    assert "ll128MaxBw" in row["explain"]["sentence"]


def test_nvls_drain_is_named_in_the_latency(capsys, tmp_path):
    """An NVLS all-reduce inside one H100 machine: the drain of its chunk pipeline is part of
    the played latency, and --explain says how much (nccl_tuning.pipeline_fill_us)."""
    from gansim.collectives.nccl import nccl_state
    from gansim.collectives.nccl_tuning import pipeline_fill_us
    from gansim.network.cluster import Cluster

    box = tmp_path / "h100.yaml"
    box.write_text("name: h100\ngenerator: nvswitch\nparams: {gpus: 8, gpu_model: H100-SXM5-80GB, "
                   "nvlink_bandwidth_GBps: 450.0}\n")
    rows, _ = explained(capsys, [str(box), "-g", "8", "-b", "16M", "-e", "16M", "--nccl-algo", "nvls",
                                 "--nccl-version", "2.30.7"])
    e = rows[0]["explain"]
    state = nccl_state(Cluster(load_topology(str(box)), 8, simpy.Environment()), "2.30.7")
    algbw = state.tuning.entry("all_reduce", "nvls", "Simple").bandwidth_GBps
    assert e["drain_us"] == pytest.approx(pipeline_fill_us(state.tuning, "all_reduce", "nvls", 16 << 20, algbw))
    assert 0 < e["drain_us"] < e["latency_us"]
    assert f"{e['drain_us']:.0f} us the drain of its chunk pipeline" in e["sentence"]
    # the ring drains nothing
    rows, _ = explained(capsys, [str(box), "-g", "8", "-b", "16M", "-e", "16M", "--nccl-algo", "ring"])
    assert rows[0]["explain"]["drain_us"] == 0.0 and "drain" not in rows[0]["explain"]["sentence"]


def test_nvls_runs_on_all_of_nccls_nvls_channels_each_on_every_head(capsys, tmp_path):
    """enqueue.cc topoGetAlgoInfo runs NVLS on all of comm->nvlsChannels at every size ("nc =
    comm->nvlsChannels"), 16 on Hopper (transport/nvls.cc NVLS_NCHANNELS_SM90); each channel
    works on every head of the NVLS graph. Rows and --explain show those channels, and the
    heads beside them; the other algorithms have no heads."""
    box = tmp_path / "h100.yaml"
    box.write_text("name: h100\ngenerator: nvswitch\nparams: {gpus: 8, gpu_model: H100-SXM5-80GB, "
                   "nvlink_bandwidth_GBps: 450.0}\n")
    for size in ("64K", "1G"):
        rows, _ = explained(capsys, [str(box), "-g", "8", "-b", size, "-e", size, "--nccl-algo", "nvls",
                                     "--nccl-version", "2.30.7"])
        e = rows[0]["explain"]
        assert rows[0]["algorithm"] == "nvls"
        assert rows[0]["channels"] == e["channels"] == e["comm_channels"] == 16
        assert e["nvls_heads"] >= 2 and f"x16/16 ch on {e['nvls_heads']} heads" in e["sentence"]
    rows, _ = explained(capsys, [str(box), "-g", "8", "-b", "1G", "-e", "1G", "--nccl-algo", "ring"])
    assert rows[0]["explain"]["nvls_heads"] is None and "heads" not in rows[0]["explain"]["sentence"]
