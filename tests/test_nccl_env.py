"""NCCL_ALGO / NCCL_PROTO lists as NCCL reads them (src/graph/tuning.cc parseList), and what
they leave NCCL's choice: the fastest by its model among the algorithms and protocols they
allow."""

from __future__ import annotations

import pytest

from gansim.cli.main import main
from gansim.collectives.nccl_topology import NcclMachine
from gansim.collectives.nccl_tuning import choose, tune
from gansim.collectives.nccl_versions import era_for
from gansim.core.config import TrainingOptions
from gansim.core.nccl_env import ALGORITHM, PROTOCOL, canonical, enabled, without
from gansim.topology.graph import topology_from_dict

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = [64 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB, 4 * GiB]
H100 = {"gpu_model": "H100-SXM5-80GB", "gpu_tflops": 67.0, "gpu_memory_GB": 80, "nvlink_bandwidth_GBps": 450.0,
        "pcie_bandwidth_GBps": 63.0}


def two_h100_nodes():
    return topology_from_dict({"name": "two", "generator": "multi_node", "params": {
        "nodes": 2, "gpus_per_node": 8, "intra": "nvswitch", "intra_params": H100, "nic_bandwidth_GBps": 50.0}},
        "test")


@pytest.fixture(scope="module")
def tuning():
    return tune(NcclMachine.build(two_h100_nodes(), 16), era_for("2.21.5"))


@pytest.mark.parametrize("text,expected", [
    ("Ring,Tree", "ring,tree"), ("ring", "ring"), ("^NVLS,NVLSTree", "^nvls,nvls_tree"),
    ("^nvls;AllReduce:Tree,ring", "^nvls;all_reduce:tree,ring"), ("tree,TREE", "tree"), (" Ring , Tree ", "ring,tree"),
])
def test_a_setting_is_held_in_gansim_s_names(text, expected):
    assert canonical(ALGORITHM, text) == expected


@pytest.mark.parametrize("text", ["ring,butterfly", "", "^", "ring,", "tree;ring", "alltoall:ring", "collnet",
                                  "allreduce:", "ring," * 100])
def test_a_setting_nccl_would_refuse_is_a_one_line_error_naming_what_is_allowed(text):
    with pytest.raises(ValueError) as err:
        canonical(ALGORITHM, text)
    message = str(err.value)
    assert "NCCL_ALGO" in message and "allowed" in message and "\n" not in message


def test_each_entry_that_names_a_collective_replaces_its_list():
    text = "^nvls;allreduce:tree;allgather:^ring"
    assert enabled(ALGORITHM, text, "all_reduce") == {"tree"}
    assert enabled(ALGORITHM, text, "all_gather") == {"tree", "collnet_direct", "collnet_chain", "nvls", "nvls_tree",
                                                      "pat"}
    assert "nvls" not in enabled(ALGORITHM, text, "broadcast") and "ring" in enabled(ALGORITHM, text, "broadcast")
    assert enabled(PROTOCOL, "^LL", "all_reduce") == {"LL128", "Simple"}
    assert enabled(PROTOCOL, None, "all_reduce") == {"LL", "LL128", "Simple"}


def test_taking_algorithms_away_keeps_the_rest_of_the_setting():
    assert without(ALGORITHM, None, ("nvls", "nvls_tree")) == "^nvls,nvls_tree"
    assert without(ALGORITHM, "ring,nvls", ("nvls", "nvls_tree")) == "ring"
    assert without(ALGORITHM, "^pat;allreduce:nvls", ("nvls",)) == "^pat,nvls;all_reduce:^" + ",".join(
        ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"))
    assert enabled(ALGORITHM, without(ALGORITHM, "nvls", ("nvls",)), "all_reduce") == frozenset()


def test_a_list_leaves_nccl_the_fastest_of_its_algorithms_by_nccl_s_model(tuning):
    """tuning.cc zeroes the bandwidth of what NCCL_ALGO leaves out, so topoGetAlgoInfo takes
    the least model time among the others: the least of each one forced alone."""
    default = [choose(tuning, "all_reduce", n).algorithm for n in SIZES]
    assert {"nvls", "nvls_tree"} & set(default)  # what the lists below take away matters here
    for n in SIZES:
        alone = {a: choose(tuning, "all_reduce", n, a) for a in ("ring", "tree")}
        alone = {a: c for a, c in alone.items() if c.algorithm == a}  # available
        listed = choose(tuning, "all_reduce", n, "ring,tree")
        fastest = min(alone.values(), key=lambda c: c.model_time_us)
        assert (listed.algorithm, listed.protocol, listed.model_time_us) == (
            fastest.algorithm, fastest.protocol, fastest.model_time_us)
        assert choose(tuning, "all_reduce", n, "^nvls,nvls_tree") == listed
        simple = choose(tuning, "all_reduce", n, "ring,tree", "Simple")
        assert simple.protocol == "Simple" and simple.model_time_us >= listed.model_time_us


def test_a_collective_s_own_entry_decides_for_it_only():
    # entries per collective are NCCL 2.24's (tests/test_nccl_settings.py: earlier ones refuse them)
    tuning = tune(NcclMachine.build(two_h100_nodes(), 16), era_for("2.26.2"))
    forced = [choose(tuning, "all_reduce", n, "^nvls_tree;allreduce:ring") for n in SIZES]
    assert {c.algorithm for c in forced} == {"ring"}
    gathers = {choose(tuning, "all_gather", n, "^nvls_tree;allreduce:ring").algorithm for n in SIZES}
    assert gathers == {choose(tuning, "all_gather", n).algorithm for n in SIZES}


def test_nccl_2_4_keeps_its_thresholds_among_what_a_list_allows():
    """2.4 decides tree or ring by its threshold and LL or Simple by another: a list that
    allows both leaves the threshold to decide; one that allows one of them forces it."""
    from gansim.prediction.published import load_published

    (p3dn,) = load_published("aws-p3dn-v100-2node-efa")
    tuning = tune(NcclMachine.build(p3dn.topology(), 16), era_for("2.4.6"))
    for n in SIZES:
        assert choose(tuning, "all_reduce", n, "ring,tree") == choose(tuning, "all_reduce", n)
        assert choose(tuning, "all_reduce", n, "^tree").algorithm == "ring"
        assert choose(tuning, "all_reduce", n, "ring", "^LL").protocol == "Simple"
        assert choose(tuning, "all_reduce", n, "ring", "LL,Simple") == choose(tuning, "all_reduce", n, "ring")


def test_nvls_enable_0_in_a_published_run_takes_nvls_and_nvls_tree_away(tmp_path):
    """transport/nvls.cc: NCCL_NVLS_ENABLE=0 leaves comm->nvlsSupport 0, so neither NVLS nor
    NVLS-Tree has channels."""
    import yaml

    from gansim.core.files import shipped_dir
    from gansim.prediction.published import compare, load_published

    (shipped,) = load_published("xe9680-h100-2node-ib")
    assert {r.algorithm for r in compare(shipped)} & {"nvls", "nvls_tree"}
    data = yaml.safe_load((shipped_dir("validation") / "xe9680-h100-2node-ib.yaml").read_text())
    data["env"] = {**data.get("env", {}), "NCCL_NVLS_ENABLE": "0"}
    (tmp_path / "xe9680-h100-2node-ib.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    (disabled,) = load_published("xe9680-h100-2node-ib", tmp_path)
    assert disabled.options().nccl_algo == "^nvls,nvls_tree"
    assert not {r.algorithm for r in compare(disabled)} & {"nvls", "nvls_tree"}


def test_a_scenario_s_options_take_a_list_and_hold_it_in_gansim_s_names():
    assert TrainingOptions(nccl_algo="Ring,Tree", nccl_proto="^LL").nccl_algo == "ring,tree"
    assert TrainingOptions(nccl_proto="^ll").nccl_proto == "^LL"


def test_nccl_tests_takes_a_list_and_refuses_a_bad_one_in_one_line(capsys):
    assert main(["nccl-tests", "dgx-a100", "-g", "8", "-b", "1M", "-e", "1G", "-f", "32", "--nccl-algo",
                 "Ring,Tree", "--nccl-proto", "^LL128"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    assert rows and {(r[-3], r[-2]) for r in rows} <= {("ring", "LL"), ("ring", "Simple"), ("tree", "LL"),
                                                        ("tree", "Simple")}
    assert main(["nccl-tests", "dgx-a100", "-g", "8", "--nccl-algo", "ring,butterfly"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--nccl-algo" in err and "butterfly" in err and "allowed" in err


def test_nccl_proto_decides_ll128_by_its_list_where_the_hardware_rule_leaves_it_off():
    """tuning.cc applies its LL128 hardware rule only to a protocol row NCCL_PROTO left alone
    (protoEnable 2): on the Pascal PCIe box the rule keeps LL128 off, a list that names it (or
    does not exclude it) turns it on, one that covers another collective only changes nothing."""
    from gansim.collectives.nccl_tuning import algo_time_us
    from gansim.topology.graph import load_topology

    tuning = tune(NcclMachine.build(load_topology("paper-gtx1080ti-pcie"), 4))
    assert {choose(tuning, "all_reduce", n).protocol for n in SIZES} <= {"LL", "Simple"}
    assert tuning.entry("all_reduce", "ring", "LL128").bandwidth_GBps == 0
    assert tuning.entry("all_reduce", "ring", "LL128", listed=True).bandwidth_GBps > 0
    for n in SIZES:
        forced = choose(tuning, "all_reduce", n, None, "LL128")
        assert (forced.protocol, forced.listed) == ("LL128", True)
        assert forced.model_time_us == algo_time_us(tuning, "all_reduce", forced.algorithm, "LL128", n, listed=True)
        open_list = choose(tuning, "all_reduce", n, None, "^LL")
        assert open_list.model_time_us == min(
            t for p in ("LL128", "Simple") for a in ("ring", "tree")
            if (t := algo_time_us(tuning, "all_reduce", a, p, n, listed=True)) is not None)
        assert choose(tuning, "all_reduce", n, None, "allgather:LL128") == choose(tuning, "all_reduce", n)


def test_validation_json_says_what_each_run_s_environment_let_nccl_choose_from(tmp_path, capsys):
    """The A3 Mega run's profile (Ring,Tree, Simple, NVLS off) and a run that set nothing."""
    import json

    for name, expected in (("gcp-a3mega-h100-2node", ("ring,tree", "Simple")), ("dgx-a100-4gpu", (None, None))):
        assert main(["validate", "--published", name, "--json", "--out", str(tmp_path / name)]) == 0
        (system,) = json.loads(capsys.readouterr().out)["systems"]
        assert (system["nccl_algo"], system["nccl_proto"]) == expected
