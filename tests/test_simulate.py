"""`gansim simulate` end to end, and the training-step model's behaviour."""

from __future__ import annotations

import json

import pytest

from gansim.cli.main import main
from gansim.core.config import Scenario, TrainingOptions
from gansim.runner.point import simulate_point
from gansim.topology.graph import load_topology, topology_from_dict
from gansim.training.step import ddp_buckets
from gansim.whatif.study import load_scenario, simulate_scenario

FIELDS = {"gpus", "algorithm", "cost_model", "topology", "scaling", "step_time_s", "speedup", "efficiency",
          "allreduce_time_s", "algbw_GBps", "busbw_GBps", "breakdown", "bottleneck"}


def test_paper_table3_writes_every_interface_field(tmp_path, capsys):
    assert main(["simulate", "paper-table3", "--out", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr()
    summary = json.loads(out.out)  # stdout holds the JSON and nothing else
    assert summary == json.loads((tmp_path / "summary.json").read_text())
    assert summary["scenario"] == "paper-table3" and summary["gansim_version"]
    assert len(summary["runs"]) == 16  # 1-4 GPUs x 4 algorithms
    for run in summary["runs"]:
        assert FIELDS <= run.keys()
        assert set(run["breakdown"]) == {"compute_s", "communication_s", "data_s", "idle_s"}
        assert set(run["bottleneck"]) == {"resource", "kind", "utilization"}
        assert sum(run["breakdown"].values()) == pytest.approx(run["step_time_s"], rel=1e-9)
    csv_lines = (tmp_path / "summary.csv").read_text().splitlines()
    assert len(csv_lines) == 17 and csv_lines[0].startswith("gpus,algorithm,cost_model")
    assert "speedup" in out.err  # the human table went to stderr


def test_same_scenario_twice_gives_byte_identical_summary(tmp_path):
    assert main(["simulate", "paper-table3", "--out", str(tmp_path / "a"), "--workers", "1"]) == 0
    assert main(["simulate", "paper-table3", "--out", str(tmp_path / "b"), "--workers", "2"]) == 0
    assert (tmp_path / "a" / "summary.json").read_bytes() == (tmp_path / "b" / "summary.json").read_bytes()


def gan(gpus, **options):
    s = Scenario(name="t", topology="paper-gtx1080ti-pcie", workload="paper-mlp-gan", gpus=[gpus], steps=3,
                 options=TrainingOptions(**options))
    return simulate_point(s, load_topology("paper-gtx1080ti-pcie"), gpus, "ring")


def test_fp16_gradients_halve_the_allreduce_bytes_and_time():
    fp32, fp16 = gan(4), gan(4, gradient_dtype="fp16")
    assert fp16.algbw_GBps * fp16.allreduce_time_s == pytest.approx(
        0.5 * fp32.algbw_GBps * fp32.allreduce_time_s)
    assert fp16.allreduce_time_s < 0.6 * fp32.allreduce_time_s


def test_overlap_hides_communication_behind_backward():
    plain, overlapped = gan(4), gan(4, overlap=True)
    assert overlapped.step_time_s < plain.step_time_s
    assert overlapped.breakdown.communication_s < plain.breakdown.communication_s


def test_host_overhead_per_replica_grows_with_the_gpu_count():
    base2, base4 = gan(2), gan(4)
    slow2, slow4 = gan(2, host_overhead_per_replica_s=1e-3), gan(4, host_overhead_per_replica_s=1e-3)
    assert slow2.step_time_s - base2.step_time_s == pytest.approx(2e-3, rel=1e-6)
    assert slow4.step_time_s - base4.step_time_s == pytest.approx(4e-3, rel=1e-6)


def test_host_overhead_per_replica_grows_with_the_gpus_of_a_machine_not_of_the_run():
    """One process drives a machine's GPUs (TF's MultiWorkerMirroredStrategy: one worker a
    machine, MirroredStrategy in it): 8 GPUs on two machines of 4 wait for 4 replicas' host
    work a step, on one machine of 8 for 8."""
    def step(topology, overhead):
        s = Scenario(name="t", topology="t", workload="paper-mlp-gan", gpus=[8], steps=3,
                     options=TrainingOptions(host_overhead_per_replica_s=overhead))
        return simulate_point(s, topology, 8, "ring").step_time_s

    two = topology_from_dict({"name": "t", "generator": "multi_node", "params": {
        "nodes": 2, "gpus_per_node": 4, "intra": "nvswitch"}}, "test")
    one = topology_from_dict({"name": "t", "generator": "nvswitch", "params": {"gpus": 8}}, "test")
    assert list(two.machine_ranks(8)) == [4] * 8 and list(two.machine_ranks(6)) == [4] * 4 + [2] * 2
    assert step(two, 1e-3) - step(two, 0.0) == pytest.approx(4e-3, rel=1e-6)
    assert step(one, 1e-3) - step(one, 0.0) == pytest.approx(8e-3, rel=1e-6)


def test_ddp_bucket_assignment_follows_pytorch():
    MiB = 1024 * 1024
    # gradient-ready order; first bucket closes at 1 MiB, later ones at 25 MiB
    assert ddp_buckets([0.5 * MiB, 0.6 * MiB, 10 * MiB, 20 * MiB, 1 * MiB], MiB, 25 * MiB) == [
        1.1 * MiB, 30 * MiB, 1 * MiB]


def test_weak_and_strong_scaling_speedups(write_yaml):
    common = {"name": "s", "topology": "paper-gtx1080ti-pcie", "gpus": [1, 2], "steps": 2, "algorithms": ["ring"],
              "workload": {"name": "w", "networks": {
                  "discriminator": {"params": 1000, "forward_s": 0.01, "backward_s": 0.02, "optimizer_s": 0.0},
                  "generator": {"params": 1000, "forward_s": 0.01, "backward_s": 0.02, "optimizer_s": 0.0}}}}
    weak = simulate_scenario(load_scenario(str(write_yaml("w.yaml", dict(common, per_gpu_batch=64)))))
    strong = simulate_scenario(load_scenario(str(write_yaml("s.yaml", dict(
        common, scaling="strong", per_gpu_batch=None, global_batch=128)))))
    w1, w2 = weak["runs"]
    s1, s2 = strong["runs"]
    assert w2["speedup"] == pytest.approx(2 * w1["step_time_s"] / w2["step_time_s"])
    assert s2["speedup"] == pytest.approx(s1["step_time_s"] / s2["step_time_s"])
    # strong scaling halves each GPU's compute, weak keeps it: compute-bound work scales near 2x either way
    assert s2["per_gpu_batch"] == 64 and s1["per_gpu_batch"] == 128
    assert 1.8 < s2["speedup"] <= 2.0 and 1.8 < w2["speedup"] <= 2.0


def test_allreduce_workload_step_time_equals_allreduce_time(write_yaml):
    path = write_yaml("a.yaml", {"name": "a", "topology": "dgx-a100", "workload": {"allreduce_bytes": 1 << 26},
                                 "gpus": [8], "algorithms": ["ring", "tree"], "steps": 1})
    summary = simulate_scenario(load_scenario(str(path)))
    for run in summary["runs"]:
        assert run["step_time_s"] == run["allreduce_time_s"]
        assert run["busbw_GBps"] == pytest.approx(run["algbw_GBps"] * 2 * 7 / 8)
        assert run["bottleneck"]["kind"] == "nvlink"


def test_sweep_axes_multiply_and_are_recorded(write_yaml):
    path = write_yaml("s.yaml", {"name": "s", "topology": "paper-gtx1080ti-pcie", "workload": "paper-mlp-gan",
                                 "gpus": [2, 4], "algorithms": ["ring", "tree"], "steps": 2,
                                 "sweep": {"link_bandwidth_scale": [0.25, 1.0], "per_gpu_batch": [32, 64]}})
    summary = simulate_scenario(load_scenario(str(path)))
    assert len(summary["runs"]) == 2 * 2 * 2 * 2
    # (above 1.0 the box's host memory, which bytes without peer-to-peer are staged in, binds)
    slow = [r for r in summary["runs"] if r["sweep"] == {"link_bandwidth_scale": 0.25, "per_gpu_batch": 64}]
    fast = [r for r in summary["runs"] if r["sweep"] == {"link_bandwidth_scale": 1.0, "per_gpu_batch": 64}]
    for a, b in zip(slow, fast):
        assert a["allreduce_time_s"] > 3 * b["allreduce_time_s"]  # 4x the bandwidth, latency aside


def test_int8_gradients_quarter_the_bytes_and_pay_a_quantize_cost():
    fp32, int8 = gan(4), gan(4, gradient_dtype="int8")
    bytes32 = fp32.algbw_GBps * fp32.allreduce_time_s
    assert int8.algbw_GBps * int8.allreduce_time_s == pytest.approx(bytes32 / 4)
    # the 1080 Ti's memory bandwidth is known, so compress/expand kernels add compute time
    assert int8.breakdown.compute_s > fp32.breakdown.compute_s


def test_recompute_adds_one_forward_pass_per_network_step():
    plain, again = gan(1), gan(1, recompute=True)
    extra = again.breakdown.compute_s - plain.breakdown.compute_s
    assert extra > 0
    assert again.step_time_s - plain.step_time_s == pytest.approx(extra, rel=1e-6)


def test_a_run_that_does_not_fit_is_reported_out_of_memory_not_simulated(write_yaml, tmp_path, capsys):
    # strong scaling: 30,000 samples do not fit one or two 11 GB GPUs, but do fit four
    path = write_yaml("oom.yaml", {"name": "oom", "topology": "paper-gtx1080ti-pcie", "workload": "dcgan-32",
                                   "gpus": [1, 2, 4], "algorithms": ["ring"], "scaling": "strong",
                                   "per_gpu_batch": None, "global_batch": 30000, "steps": 1})
    assert main(["simulate", str(path), "--out", str(tmp_path)]) == 0
    runs = {r["gpus"]: r for r in json.loads((tmp_path / "summary.json").read_text())["runs"]}
    for gpus in (1, 2):
        assert runs[gpus]["fits"] is False and runs[gpus]["step_time_s"] is None
        assert runs[gpus]["memory_peak_GB"] > runs[gpus]["memory_capacity_GB"] == 11.0
    assert runs[4]["fits"] is True and runs[4]["step_time_s"] > 0
    assert runs[4]["speedup"] is None  # its 1-GPU baseline never ran
    assert "out of memory" in capsys.readouterr().out
    assert "out of memory" in (tmp_path / "report.html").read_text()
