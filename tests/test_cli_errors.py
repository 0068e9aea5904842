"""Bad input: one line on stderr naming the file and the field, exit code 2, no traceback."""

from __future__ import annotations

import pytest

from gansim.cli.main import main
from tests.cli_checks import run_bad

BOX = {
    "name": "box",
    "nodes": [{"id": "host0", "kind": "host", "cores": 4}, {"id": "gpu0", "kind": "gpu", "tflops": 10},
              {"id": "gpu1", "kind": "gpu", "tflops": 10}],
    "links": [{"a": "host0", "b": "gpu0", "kind": "pcie", "bandwidth_GBps": 12, "latency_us": 1},
              {"a": "host0", "b": "gpu1", "kind": "pcie", "bandwidth_GBps": 12, "latency_us": 1}],
}


def scenario(topology: str, **fields) -> dict:
    base = {"name": "s", "topology": topology, "workload": "paper-mlp-gan", "gpus": [1, 2],
            "algorithms": ["ring"], "steps": 2}
    base.update(fields)
    return base




def test_missing_scenario_file(capsys, tmp_path):
    line = run_bad(capsys, ["simulate", str(tmp_path / "nothere.yaml")])
    assert "nothere.yaml" in line and "not found" in line


def test_malformed_yaml(capsys, write_yaml):
    path = write_yaml("bad.yaml", "name: x\ngpus: [1, 2\n")
    line = run_bad(capsys, ["simulate", str(path)])
    assert "bad.yaml" in line and "malformed YAML" in line and "line" in line


def test_unknown_topology_name(capsys, write_yaml):
    path = write_yaml("s.yaml", scenario("no-such-box"))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "s.yaml" in line and "topology" in line and "no-such-box" in line and "paper-gtx1080ti-pcie" in line


def test_unknown_algorithm(capsys, write_yaml):
    topo = write_yaml("box.yaml", BOX)
    path = write_yaml("s.yaml", scenario(str(topo), algorithms=["ring", "butterfly"]))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "s.yaml" in line and "algorithms[1]" in line and "butterfly" in line and "halving_doubling" in line


def test_unknown_generator(capsys, write_yaml):
    topo = write_yaml("gen.yaml", {"name": "g", "generator": "torus", "params": {}})
    path = write_yaml("s.yaml", scenario(str(topo)))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "gen.yaml" in line and "generator" in line and "torus" in line and "multi_node" in line


def test_unknown_scenario_field(capsys, write_yaml):
    topo = write_yaml("box.yaml", BOX)
    path = write_yaml("s.yaml", scenario(str(topo), gpu_count=3))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "s.yaml" in line and "gpu_count" in line and "unknown field" in line


def test_a_misspelt_field_of_an_inline_workload_is_named_rather_than_the_one_it_stands_for(capsys, write_yaml):
    """`allreduce_MiB` for `allreduce_bytes`: the workload is then neither form, and pydantic
    also reports a GAN workload's missing `networks`; the line names what the user wrote."""
    topo = write_yaml("box.yaml", BOX)
    path = write_yaml("s.yaml", scenario(str(topo), workload={"allreduce_MiB": 256}))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "s.yaml" in line and "workload.allreduce_MiB" in line and "unknown field" in line


def test_unknown_topology_field(capsys, write_yaml):
    bad = dict(BOX, links=BOX["links"] + [{"a": "gpu0", "b": "gpu1", "kind": "pcie", "bandwidth_GBps": 1,
                                            "latency_us": 1, "speed": 3}])
    topo = write_yaml("box.yaml", bad)
    line = run_bad(capsys, ["simulate", str(write_yaml("s.yaml", scenario(str(topo))))])
    assert "box.yaml" in line and "links[2].speed" in line


def test_disconnected_graph(capsys, write_yaml):
    bad = dict(BOX, nodes=BOX["nodes"] + [{"id": "gpu2", "kind": "gpu"}])
    topo = write_yaml("box.yaml", bad)
    line = run_bad(capsys, ["simulate", str(write_yaml("s.yaml", scenario(str(topo))))])
    assert "box.yaml" in line and "links" in line and "disconnected" in line


@pytest.mark.parametrize("value", [0, -5])
def test_non_positive_bandwidth(capsys, write_yaml, value):
    bad = dict(BOX, links=[dict(BOX["links"][0], bandwidth_GBps=value), BOX["links"][1]])
    topo = write_yaml("box.yaml", bad)
    line = run_bad(capsys, ["simulate", str(write_yaml("s.yaml", scenario(str(topo))))])
    assert "box.yaml" in line and "links[0].bandwidth_GBps" in line and "greater than 0" in line


def test_more_gpus_than_the_topology_has(capsys, write_yaml):
    topo = write_yaml("box.yaml", BOX)
    line = run_bad(capsys, ["simulate", str(write_yaml("s.yaml", scenario(str(topo), gpus=[1, 2, 8])))])
    assert "s.yaml" in line and "gpus" in line and "8 GPUs" in line and "has 2" in line


def test_negative_step_count(capsys, write_yaml):
    topo = write_yaml("box.yaml", BOX)
    line = run_bad(capsys, ["simulate", str(write_yaml("s.yaml", scenario(str(topo), steps=-3)))])
    assert "s.yaml" in line and "steps" in line and "greater than or equal to 1" in line


def test_bad_generator_parameter(capsys, write_yaml):
    topo = write_yaml("gen.yaml", {"name": "g", "generator": "multi_node", "params": {"nodes": -1}})
    line = run_bad(capsys, ["simulate", str(write_yaml("s.yaml", scenario(str(topo))))])
    assert "gen.yaml" in line and "params.nodes" in line


def test_bad_inline_workload_field(capsys, write_yaml):
    topo = write_yaml("box.yaml", BOX)
    path = write_yaml("s.yaml", scenario(str(topo), workload={"allreduce_bytes": -1}))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "s.yaml" in line and "workload.allreduce_bytes" in line


def test_unknown_sweep_axis(capsys, write_yaml):
    topo = write_yaml("box.yaml", BOX)
    path = write_yaml("s.yaml", scenario(str(topo), sweep={"colour": [1]}))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "sweep" in line and "colour" in line and "per_gpu_batch" in line


def test_bad_flag(capsys):
    line = run_bad(capsys, ["simulate", "paper-table3", "--workers", "0"])
    assert "--workers" in line


def test_unknown_executor(capsys, tmp_path):
    line = run_bad(capsys, ["simulate", "paper-table3", "--executor", "mpi", "--out", str(tmp_path)])
    assert "--executor" in line and "dask://" in line


def test_failed_run_keeps_good_results(capsys, tmp_path, write_yaml):
    out = tmp_path / "out"
    assert main(["simulate", "paper-table3", "--out", str(out)]) == 0
    good = (out / "summary.json").read_bytes()
    capsys.readouterr()
    bad = write_yaml("s.yaml", scenario("paper-gtx1080ti-pcie", gpus=[1, 64]))
    run_bad(capsys, ["simulate", str(bad), "--out", str(out)])
    assert (out / "summary.json").read_bytes() == good


def test_hierarchical_ring_on_machines_left_part_full_is_refused_before_any_run(capsys, tmp_path, write_yaml):
    """12 GPUs on machines of 8 sit 8 and 4: a hierarchical ring (a ring inside each machine,
    as many GPUs in each) cannot be built; one line before the 1- and 8-GPU runs are simulated."""
    topo = write_yaml("mn.yaml", {"name": "mn", "generator": "multi_node", "params": {"nodes": 2}})
    path = write_yaml("s.yaml", scenario(str(topo), gpus=[1, 8, 12], algorithms=["ring", "hierarchical_ring"]))
    line = run_bad(capsys, ["simulate", str(path), "--out", str(tmp_path / "out")])
    assert "s.yaml" in line and ": gpus:" in line and "12 GPUs" in line and "8 and 4" in line
    assert "a multiple of 8" in line
    assert not (tmp_path / "out" / "summary.json").exists()
    # the same GPU counts on machines filled alike run
    assert main(["simulate", str(write_yaml("ok.yaml", scenario(str(topo), gpus=[1, 8, 16],
                                                                 algorithms=["hierarchical_ring"]))),
                 "--out", str(tmp_path / "ok")]) == 0


def test_nccl_tests_of_a_hierarchical_ring_over_machines_left_part_full_is_one_line(capsys, write_yaml):
    topo = write_yaml("mn.yaml", {"name": "mn", "generator": "multi_node", "params": {"nodes": 2, "gpus_per_node": 4}})
    line = run_bad(capsys, ["nccl-tests", str(topo), "-g", "6", "-b", "1M", "-e", "1M",
                            "--algorithm", "hierarchical_ring"])
    assert "mn.yaml" in line and "6 GPUs" in line and "4 and 2" in line and "a multiple of 4" in line


def test_a_global_batch_smaller_than_the_gpus_is_refused(capsys, write_yaml):
    """Strong scaling splits the global batch over the GPUs; 4 samples over 8 GPUs would
    leave each half a sample (it was simulated as such)."""
    path = write_yaml("s.yaml", scenario("dgx-a100", gpus=[1, 2, 8], scaling="strong", global_batch=4))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "s.yaml" in line and ": global_batch:" in line and "8 GPUs" in line and "8 or more" in line
    swept = write_yaml("w.yaml", scenario("dgx-a100", gpus=[1, 8], scaling="strong", global_batch=64,
                                          sweep={"global_batch": [64, 6]}))
    line = run_bad(capsys, ["simulate", str(swept)])
    assert "w.yaml" in line and "sweep.global_batch" in line and "6 samples" in line


def test_a_topology_written_beside_a_sweep_of_topologies_is_checked_too(capsys, write_yaml):
    broken = write_yaml("broken.yaml", {**BOX, "links": [{**BOX["links"][0], "bandwidth_GBps": "fast"},
                                                         BOX["links"][1]]})
    path = write_yaml("s.yaml", scenario(str(broken), sweep={"topology": ["paper-gtx1080ti-pcie"]}))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "broken.yaml" in line and "links[0].bandwidth_GBps" in line
