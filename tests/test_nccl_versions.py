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
from gansim.runner.collective import collective_times
from gansim.topology.graph import load_topology, topology_from_dict

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
    assert "nvls_tree" in chosen(cluster, "2.18.3", gpus=16)


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


@pytest.mark.parametrize("bad", ["2.6.4", "3.0", "2.31.1", "latest", "2..1"])
def test_a_version_the_model_does_not_follow_is_one_line(bad, tmp_path, capsys):
    with pytest.raises(ValueError):
        TrainingOptions(nccl_version=bad)
    with pytest.raises(UserInputError):
        h100_box(nccl_version=bad)
    assert main(["nccl-tests", "dgx-a100", "-g", "8", "-b", "1M", "-e", "1M", "--nccl-version", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nccl-version" in err[0] and "allowed: 2.12 to 2.30.7" in err[0]


def test_nccl_tests_prints_the_release_it_models(capsys):
    assert main(["nccl-tests", "dgx-a100", "-g", "8", "-b", "1M", "-e", "1M", "--nccl-version", "2.18.3"]) == 0
    assert "NCCL 2.18 tuning model (v2.18.3-1)" in capsys.readouterr().out


def test_a_version_written_as_a_yaml_number_is_refused_with_the_way_out(tmp_path, capsys):
    """YAML reads `nccl_version: 2.10` as the number 2.1: refused, saying to quote it."""
    (tmp_path / "box.yaml").write_text("name: box\nnccl_version: 2.10\ngenerator: nvswitch\nparams: {gpus: 8}\n")
    assert main(["nccl-tests", str(tmp_path / "box.yaml"), "-g", "8", "-b", "1M", "-e", "1M"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nccl_version" in err[0] and "in quotes" in err[0]
