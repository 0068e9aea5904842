"""Memory model (seed 002, on-device memory): parts, OOM detection, recomputation, and the
step-model helpers for quantization and recomputation."""

from __future__ import annotations

import pytest

from gansim.core.config import Scenario
from gansim.outputs.figures import figures_for
from gansim.runner.point import oom_record
from gansim.runner.record import Memory, RunRecord
from gansim.topology.graph import load_topology
from gansim.training.memory import (
    bytes_per_gradient_element,
    gan_activation_bytes,
    layer_outputs,
    memory_report,
    quantize_seconds,
    recompute_extra_forward,
)
from gansim.training.workloads import ARCHITECTURES, StepPhases
from gansim.whatif.extensions import evaluate_run_extensions
from tests.cli_checks import run_bad

PAPER_BOX = "paper-gtx1080ti-pcie"


def scenario(**fields) -> Scenario:
    base = {"name": "m", "topology": PAPER_BOX, "workload": "paper-mlp-gan", "gpus": [1, 2], "steps": 2}
    base.update(fields)
    return Scenario.model_validate(base)




# ----------------------------------------------------------------------------- helpers
def test_bytes_per_gradient_element():
    assert [bytes_per_gradient_element(d) for d in ("fp32", "fp16", "int8")] == [4, 2, 1]
    with pytest.raises(ValueError, match="int8"):
        bytes_per_gradient_element("int4")


def test_quantize_seconds_is_memory_bound_traffic_plus_launches():
    assert quantize_seconds(1e6, "fp32", 100.0) == 0.0
    fp16 = quantize_seconds(1e6, "fp16", 100.0, launch_s=1e-6)
    assert fp16 == pytest.approx(1e6 * 6 * 2 / 100e9 + 2e-6)
    int8 = quantize_seconds(1e6, "int8", 100.0, launch_s=1e-6)
    assert int8 == pytest.approx((1e6 * 5 * 2 + 4e6) / 100e9 + 3e-6)
    assert quantize_seconds(2e6, "fp16", 100.0) > fp16  # grows with the gradient


def test_shipped_gpus_carry_their_datasheet_memory_bandwidth():
    expected = {"paper-gtx1080ti-pcie": 484.0, "dgx1-v100": 900.0, "dgx-a100": 1555.0, "multi-node": 1555.0}
    for name, bandwidth in expected.items():
        topo = load_topology(name)
        assert {topo.nodes[n].memory_bandwidth_GBps for n in topo.ranks} == {bandwidth}, name


def test_recompute_costs_one_more_forward_pass():
    phases = StepPhases(64, 0.0, 0.0, d_forward_s=1.0, d_backward_s=2.0, d_optimizer_s=0.1,
                        g_forward_s=0.5, g_backward_s=1.5, g_optimizer_s=0.1)
    assert recompute_extra_forward(phases) == (1.0, 0.5)


# ----------------------------------------------------------------------------- activations
def test_layer_outputs_follow_the_architecture():
    dcgan = ARCHITECTURES.get("dcgan")()
    outs = [e for e, _ in layer_outputs(dcgan.generator.layers)]
    # convT 100 -> 7x7x256, BN, ReLU, convT -> 14x14x128, BN, ReLU, convT -> 28x28x1, tanh
    assert outs[0] == 7 * 7 * 256 and outs[3] == 14 * 14 * 128 and outs[6] == 28 * 28
    d = layer_outputs(dcgan.discriminator.layers)
    assert d[0] == (14 * 14 * 64, 0) and d[2] == (7 * 7 * 128, 0)
    mlp = ARCHITECTURES.get("paper-mlp-gan")()
    assert [e for e, _ in layer_outputs(mlp.generator.layers)][-1] == 784
    assert layer_outputs(mlp.discriminator.layers)[1] == (256, 256)  # dropout keeps a one-byte mask per element


def test_recomputation_keeps_less_activation_memory():
    for name in ("paper-mlp-gan", "dcgan", "dcgan-32"):
        arch = ARCHITECTURES.get(name)()
        plain = gan_activation_bytes(arch)
        recomputed = gan_activation_bytes(arch, recompute=True)
        assert plain["peak"] == plain["generator"] + 2 * plain["discriminator"]
        assert 0 < recomputed["peak"] < plain["peak"]


# ----------------------------------------------------------------------------- the report
def test_report_parts_add_up_and_fit_the_paper_box():
    topo = load_topology(PAPER_BOX)
    s = scenario()
    one = memory_report(s, topo, 1)
    two = memory_report(s, topo, 2)
    assert one["fits"] is True and one["memory_capacity_GB"] == 11.0
    assert sum(one["parts"].values()) == pytest.approx(one["memory_peak_GB"])
    params = 2_051_384 + 233_985
    assert one["parts"]["parameters"] == pytest.approx(params * 4 / 1e9)
    assert one["parts"]["optimizer_state"] == pytest.approx(2 * params * 4 / 1e9)  # Adam's two moments
    assert "ddp_buckets" not in one["parts"] and two["parts"]["ddp_buckets"] == pytest.approx(params * 4 / 1e9)
    assert one["parts"]["framework_reserve"] == pytest.approx(780 * 1024 * 1024 / 1e9)
    sgd = memory_report(scenario(memory={"optimizer": "sgd"}), topo, 1)
    assert "optimizer_state" in sgd["parts"] and sgd["parts"]["optimizer_state"] == 0.0


def test_out_of_memory_is_detected_and_not_simulated():
    topo = load_topology(PAPER_BOX)
    huge = scenario(workload="dcgan", per_gpu_batch=40_000)
    report = memory_report(huge, topo, 1)
    assert report["fits"] is False and report["memory_peak_GB"] > 11.0
    ext = evaluate_run_extensions(huge, topo, 1, "ring", None)
    assert ext["fits"] is False and "time_to_train_s" not in ext
    record = oom_record(huge, topo, 1, "ring", report)
    assert record.out_of_memory is True and record.step_time_s is None
    # recomputation brings the same batch under the capacity
    assert memory_report(scenario(workload="dcgan", per_gpu_batch=15_000), topo, 1)["fits"] is False
    fits = memory_report(scenario(workload="dcgan", per_gpu_batch=15_000, options={"recompute": True}), topo, 1)
    assert fits["fits"] is True


def test_inline_workload_activations_only_when_given():
    topo = load_topology(PAPER_BOX)
    inline = {"name": "x", "networks": {
        "discriminator": {"params": 1000, "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.0001},
        "generator": {"params": 2000, "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.0001}},
        "data": {"bytes_per_sample": 100}}
    without = memory_report(scenario(workload=inline), topo, 1)
    assert without["activations_known"] is False and without["parts"]["activations"] == 0.0
    given = memory_report(scenario(workload=inline, memory={"activation_bytes_per_sample": 1e6}), topo, 1)
    assert given["parts"]["activations"] == pytest.approx(64 * 1e6 / 1e9)
    assert given["parts"]["input_batch"] == pytest.approx(64 * 100 / 1e9)


def test_cpu_ranks_have_no_capacity_and_no_cuda_reserve():
    report = memory_report(scenario(topology="cpu-host"), load_topology("cpu-host"), 1)
    assert report["fits"] is None and report["memory_capacity_GB"] is None
    assert "framework_reserve" not in report["parts"]


def test_memory_figure_draws_runs_against_capacity():
    runs = [RunRecord(gpus=g, algorithm="ring", cost_model="flow", topology="t", scaling="weak",
                      memory=Memory(1.0 + g, 11.0, True, {"parameters": 0.5, "activations": 0.5 + g}))
            for g in (1, 2)]
    figures = figures_for(runs)
    assert len(figures) == 1
    names = [t["name"] for t in figures[0].data]
    assert "parameters" in names and "activations" in names and "device capacity" in names


# ----------------------------------------------------------------------------- config
def test_int8_gradients_and_recompute_are_accepted():
    s = scenario(options={"gradient_dtype": "int8", "recompute": True})
    assert s.options.gradient_dtype == "int8" and s.options.recompute is True


def test_bad_gradient_dtype_is_one_line(capsys, write_yaml):
    path = write_yaml("s.yaml", {"name": "s", "topology": PAPER_BOX, "workload": "paper-mlp-gan", "gpus": [1],
                                 "options": {"gradient_dtype": "int4"}})
    line = run_bad(capsys, ["simulate", str(path)])
    assert "s.yaml" in line and "options.gradient_dtype" in line and "'int8'" in line and "'fp16'" in line


def test_bad_memory_fields_are_one_line(capsys, write_yaml):
    path = write_yaml("s.yaml", {"name": "s", "topology": PAPER_BOX, "workload": "paper-mlp-gan", "gpus": [1],
                                 "memory": {"reserve_MiB": -1}})
    line = run_bad(capsys, ["simulate", str(path)])
    assert "memory.reserve_MiB" in line and "greater than or equal to 0" in line
    path = write_yaml("t.yaml", {"name": "s", "topology": PAPER_BOX, "workload": "paper-mlp-gan", "gpus": [1],
                                 "memory": {"optimizer": "lamb"}})
    line = run_bad(capsys, ["simulate", str(path)])
    assert "memory.optimizer" in line and "'adam'" in line
