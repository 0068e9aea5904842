"""NCCL_ALGO / NCCL_PROTO settings that leave a collective nothing, release by release, as
NCCL's own source has it (NVIDIA/nccl, src/graph/tuning.cc ncclTopoTuneModel and src/enqueue.cc
topoGetAlgoInfo at each tag named below). Each expectation is worked out here from that code,
not from the model:

- v2.6.4-1: `if (pEnable == 0 || algoEnable[a] == 0) bandwidths = 0` for every collective, no
  fallback: "Error : no algorithm/protocol available" (NVIDIA/nccl#317: NCCL_ALGO=Tree and a
  broadcast).
- v2.7.8-1: "Only disable algo for Allreduce since others only have one"; no fallback.
- v2.8.3-1 to v2.16.5-1: the same, and "If user has hard set NCCL_ALGO=COLLNET, ignore it":
  ring and tree off -> both on again.
- v2.17.1-1, v2.18.x: every collective, but "Never disable ring for non-allreduce operations";
  from 2.18 the turn-on-again check also needs NVLS and NVLS-Tree off (NVLS off across
  machines, NVLS-Tree on one machine, before it).
- v2.19.3-1 to v2.21.5-1: every collective; a collective left with nothing runs the ring from
  comm->ringbdw, which kept every protocol ("the fallback-to-ring code was re-enabling all
  protocols", NVIDIA/nccl#1304: NCCL_ALGO=Tree,NCCL_PROTO=Simple ran a 24-byte broadcast as
  "Algo 1 proto 0", ring/LL, on 2.21).
- v2.22.3-1, v2.23.4-1: "if (a == NCCL_ALGO_RING && pEnable == 0) comm->ringbdw[c][p] = 0":
  the fallback keeps the allowed protocols only.
- v2.24.3-1 on: no fallback at all; NCCL returns ncclInvalidUsage.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gansim.cli.main import main
from gansim.collectives.nccl_topology import NcclMachine
from gansim.collectives.nccl_tuning import NcclSettingError, NoNcclChoice, candidates, choose, tune
from gansim.collectives.nccl_versions import era_for
from gansim.topology.graph import load_topology, topology_from_dict
from tests.cli_checks import run_bad

H100 = {"gpu_model": "H100-SXM5-80GB", "gpu_tflops": 67.0, "gpu_memory_GB": 80, "nvlink_bandwidth_GBps": 450.0,
        "pcie_bandwidth_GBps": 63.0}


def a100_box(version: str):
    """One DGX A100: NVSwitch, no NVLS (A100), so NCCL_ALGO=nvls asks for what is not there."""
    return tune(NcclMachine.build(load_topology("dgx-a100"), 8), era_for(version))


def h100_pair(version: str):
    topology = topology_from_dict({"name": "h100x2", "generator": "multi_node", "params": {
        "nodes": 2, "gpus_per_node": 8, "intra": "nvswitch", "intra_params": H100, "nic_bandwidth_GBps": 50.0}},
        "test")
    return tune(NcclMachine.build(topology, 16), era_for(version))


def pick(tuning, coll, nbytes, algo=None, proto=None):
    c = choose(tuning, coll, nbytes, algo, proto)
    return c.algorithm, c.protocol


@pytest.mark.parametrize("version", ["2.24", "2.26", "2.30"])
def test_from_2_24_settings_that_leave_nothing_stop_nccl(version):
    tuning = a100_box(version)
    for coll, algo, proto in (("all_reduce", "nvls", None), ("broadcast", "tree", None),
                              ("all_gather", "tree", "Simple"), ("all_reduce", None, "^LL,LL128,Simple")):
        with pytest.raises(NoNcclChoice, match="no algorithm/protocol available"):
            choose(tuning, coll, 1 << 20, algo, proto)
    # a per-collective entry keeps the others on all of theirs
    assert pick(tuning, "broadcast", 1 << 20, "^nvls;allreduce:tree")[0] == "ring"
    assert pick(tuning, "all_reduce", 1 << 20, "^nvls;allreduce:tree")[0] == "tree"


@pytest.mark.parametrize("version", ["2.19", "2.20", "2.21"])
def test_2_19_to_2_21_fall_back_to_the_ring_with_every_protocol(version):
    tuning = a100_box(version)
    # NVIDIA/nccl#1304's trace: NCCL_ALGO=Tree, NCCL_PROTO=Simple, a 24-byte broadcast ran ring/LL
    assert pick(tuning, "broadcast", 24, "tree", "Simple") == ("ring", "LL")
    assert candidates(tuning, "broadcast", "tree", "Simple").fell_back
    # nothing allowed by the protocols either: still the ring, on any of them
    assert pick(tuning, "all_reduce", 24, None, "^LL,LL128,Simple")[0] == "ring"
    # NVLS where there is none: NVLS stays on (one machine), so no turning on again, then the ring
    assert pick(tuning, "all_reduce", 1 << 30, "nvls") == pick(tuning, "all_reduce", 1 << 30, "ring")


@pytest.mark.parametrize("version", ["2.22", "2.23"])
def test_2_22_and_2_23_fall_back_to_the_ring_with_the_allowed_protocols(version):
    tuning = a100_box(version)
    assert pick(tuning, "broadcast", 24, "tree", "Simple") == ("ring", "Simple")
    with pytest.raises(NoNcclChoice):
        choose(tuning, "all_reduce", 24, None, "^LL,LL128,Simple")


@pytest.mark.parametrize("version", ["2.17", "2.18"])
def test_2_17_and_2_18_never_take_the_ring_from_other_collectives(version):
    tuning = a100_box(version)
    allowed = candidates(tuning, "all_gather", "tree", "Simple")
    assert "ring" in allowed.algorithms and not allowed.fell_back and "never takes the ring" in allowed.overruled
    assert pick(tuning, "all_gather", 24, "tree", "Simple") == ("ring", "Simple")
    # from all-reduce it does. NVLS where there is none: 2.17 turns ring and tree on again as
    # neither is on; 2.18 also needs NVLS off, which it is not on one machine: nothing, no fallback
    if version == "2.17":
        assert candidates(tuning, "all_reduce", "nvls", None).algorithms >= {"ring", "tree"}
    else:
        with pytest.raises(NoNcclChoice):
            choose(tuning, "all_reduce", 1 << 20, "nvls")


def test_2_18_turns_ring_and_tree_on_again_when_nvls_is_all_that_is_asked_across_machines():
    # across machines NVLS is off before the check, so NCCL_ALGO=nvls leaves none of the four
    for version in ("2.18", "2.21", "2.23"):
        allowed = candidates(h100_pair(version), "all_reduce", "nvls", None)
        assert {"ring", "tree"} <= allowed.algorithms and "on again" in allowed.overruled
        assert pick(h100_pair(version), "all_reduce", 1 << 30, "nvls")[0] in ("ring", "tree")
    with pytest.raises(NoNcclChoice):
        choose(h100_pair("2.24"), "all_reduce", 1 << 30, "nvls")


@pytest.mark.parametrize("version", ["2.8", "2.12", "2.16"])
def test_2_8_to_2_16_restrict_all_reduce_only_and_turn_ring_and_tree_on_again(version):
    tuning = a100_box(version)
    allowed = candidates(tuning, "all_gather", "tree", None)
    assert allowed.overruled.endswith("applies NCCL_ALGO to all-reduce only")
    assert pick(tuning, "all_gather", 1 << 20, "tree", "Simple") == ("ring", "Simple")
    # NCCL_ALGO=CollNetDirect without CollNet: ring and tree on again, NCCL's choice among them
    assert pick(tuning, "all_reduce", 1 << 20, "collnet_direct") == pick(tuning, "all_reduce", 1 << 20, "ring,tree")


def test_2_7_and_2_6_have_no_fallback():
    with pytest.raises(NoNcclChoice):
        choose(a100_box("2.7"), "all_reduce", 1 << 20, "collnet_direct")
    assert pick(a100_box("2.7"), "broadcast", 1 << 20, "tree")[0] == "ring"  # all-reduce only
    # NVIDIA/nccl#317 (2.6): NCCL_ALGO=Tree and a broadcast
    with pytest.raises(NoNcclChoice, match="broadcast"):
        choose(a100_box("2.6"), "broadcast", 1 << 20, "tree")


def test_nccl_tests_names_the_flag_and_what_is_allowed(capsys):
    err = run_bad(capsys, ["nccl-tests", "dgx-a100", "-g", "8", "-b", "1M", "-e", "1M", "--op", "broadcast",
                           "--nccl-algo", "tree"])
    assert err.startswith("gansim: error: --nccl-algo: NCCL_ALGO=tree leaves broadcast no algorithm")
    assert "allowed: settings that keep one of ring/LL, ring/LL128, ring/Simple" in err
    err = run_bad(capsys, ["nccl-tests", "dgx-a100", "-g", "8", "--nccl-proto", "^ll,ll128,simple"])
    assert err.startswith("gansim: error: --nccl-proto: NCCL_PROTO=^LL,LL128,Simple leaves all_reduce")


SCENARIO = """\
name: buffers-on-the-tree
topology: dgx-a100
workload: dcgan-32
gpus: [8]
algorithms: [nccl]
scaling: strong
global_batch: 128
steps: 2
options: {{overlap: true, broadcast_buffers: true, nccl_algo: tree, nccl_version: "{version}"}}
"""


def test_a_scenario_whose_settings_nccl_refuses_names_its_file_and_option(tmp_path: Path, capsys):
    """DDP broadcasts BatchNorm buffers: NCCL_ALGO=tree leaves the broadcast nothing from 2.24 on;
    2.21 runs it on the ring. A run that meets such a collective anyway (the check before the
    runs covers the collectives a step issues) names the same option (runner/point.py)."""
    path = tmp_path / "tree.yaml"
    path.write_text(SCENARIO.format(version="2.30"))
    # found before simulating: one line
    err = run_bad(capsys, ["simulate", str(path), "--out", str(tmp_path / "out")])
    assert err.startswith(f"gansim: error: {path}: options.nccl_algo: NCCL_ALGO=tree leaves broadcast no algorithm")
    assert err.endswith("(at 8 GPUs)")
    assert not (tmp_path / "out" / "summary.json").exists()
    path.write_text(SCENARIO.format(version="2.21"))
    assert main(["simulate", str(path), "--out", str(tmp_path / "out")]) == 0


def test_entries_per_collective_need_2_24(capsys):
    """v2.23.4-1 parseList splits on commas and skips unknown tokens: `^nvls;allreduce:tree`
    would exclude nothing. gansim says so rather than run what the user did not mean."""
    with pytest.raises(NcclSettingError, match="entries per collective came in 2.24"):
        choose(a100_box("2.23"), "all_reduce", 1 << 20, "^nvls;allreduce:tree")
    with pytest.raises(NcclSettingError, match="NCCL_PROTO=allreduce:simple names a collective"):
        choose(a100_box("2.18"), "all_gather", 1 << 20, None, "allreduce:simple")
    err = run_bad(capsys, ["nccl-tests", "dgx-a100", "-g", "8", "--nccl-version", "2.21",
                           "--nccl-algo", "^nvls;allreduce:tree"])
    assert err.startswith("gansim: error: --nccl-algo: NCCL_ALGO=^nvls;all_reduce:tree names a collective")


def test_a_sweep_checks_each_machine_and_setting_once(tmp_path: Path, monkeypatch):
    """Each check builds NCCL's view of a machine: sweep combinations that change nothing NCCL
    sees share it."""
    import gansim.runner.scenario as scenario_module
    from gansim.runner.scenario import read_scenario

    calls = []
    real = scenario_module.check_settings
    monkeypatch.setattr(scenario_module, "check_settings", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    path = tmp_path / "sweep.yaml"
    path.write_text(SCENARIO.format(version="2.21").replace("gpus: [8]", "gpus: [1, 4, 8]")
                    + "sweep:\n  steps: [2, 4, 6]\n")
    read_scenario(str(path))
    assert calls == [4, 8]  # not for 1 GPU, and once for the three combinations
