"""Moving a profile's compute to another device by a roofline of the two."""

from __future__ import annotations

import pytest

from gansim.calibration.profile.schema import PhaseCost
from gansim.core.errors import UserInputError
from gansim.prediction.roofline import DeviceFigures, measured_device, phase_scaling, scale_phases
from gansim.training.workloads import StepPhases
from tests.cli_checks import run_bad

SLOW = DeviceFigures("slow", tflops=10.0, memory_bandwidth_GBps=500.0)   # ridge 20 FLOP/B
FAST = DeviceFigures("fast", tflops=40.0, memory_bandwidth_GBps=1000.0)


def test_compute_bound_scales_with_flops_memory_bound_with_bandwidth():
    assert phase_scaling(PhaseCost(flops=1e9, bytes=1e6), SLOW, FAST, "x") == ("compute", pytest.approx(0.25))
    assert phase_scaling(PhaseCost(flops=1e6, bytes=1e6), SLOW, FAST, "x") == ("memory", pytest.approx(0.5))
    # exactly at the measured device's ridge point: compute-bound
    assert phase_scaling(PhaseCost(flops=20e6, bytes=1e6), SLOW, FAST, "x")[0] == "compute"
    phases = StepPhases(64, 0.001, 0.0, d_forward_s=0.01, d_backward_s=0.02, d_optimizer_s=0.004,
                        g_forward_s=0.01, g_backward_s=0.02, g_optimizer_s=0.004)
    heavy, light = PhaseCost(flops=1e9, bytes=1e6), PhaseCost(flops=1e6, bytes=1e6)
    costs = {"d_forward_s": heavy, "d_backward_s": heavy, "g_forward_s": heavy, "g_backward_s": heavy,
             "d_optimizer_s": light, "g_optimizer_s": light}
    moved, report = scale_phases(phases, costs, SLOW, FAST)
    assert moved.d_backward_s == pytest.approx(0.005) and moved.g_optimizer_s == pytest.approx(0.002)
    assert moved.data_host_s == phases.data_host_s  # host work stays
    assert report["phases"]["d_optimizer_s"] == {"bound": "memory", "ratio": pytest.approx(0.5)}
    assert report["ratio"] == pytest.approx((0.06 * 0.25 + 0.008 * 0.5) / 0.068)


def test_a_gpu_traces_math_kernels_move_with_flops_and_the_rest_with_bandwidth():
    """A phase whose kernels were timed moves in two parts: its matrix products' and
    convolutions' share at the ratio of peak FLOP/s (0.25 here), the rest at the ratio of
    memory bandwidths (0.5), whatever its FLOPs and bytes (a trace without shapes has none)."""
    assert phase_scaling(PhaseCost(flops=0, bytes=0, math_share=1.0), SLOW, FAST, "x") == ("compute", 0.25)
    assert phase_scaling(PhaseCost(flops=0, bytes=0, math_share=0.0), SLOW, FAST, "x") == ("memory", 0.5)
    assert phase_scaling(PhaseCost(flops=0, bytes=0, math_share=0.6), SLOW, FAST, "x") == (
        "mixed", pytest.approx(0.6 * 0.25 + 0.4 * 0.5))
    # the measured kernels decide, not the phase's intensity (compute-bound by its FLOPs)
    assert phase_scaling(PhaseCost(flops=1e9, bytes=1e6, math_share=0.2), SLOW, FAST, "x") == (
        "mixed", pytest.approx(0.2 * 0.25 + 0.8 * 0.5))


def test_a_missing_device_figure_is_an_error_not_a_ratio_of_one():
    with pytest.raises(UserInputError, match="no FLOPs and bytes for phase d_forward_s"):
        phase_scaling(None, SLOW, FAST, "d_forward_s")


def test_predict_on_another_gpu_needs_the_measured_devices_figures(tmp_path, capsys):
    from tests.test_trace_import import TRACES

    from gansim.calibration.profile.schema import write_profile_atomic
    from gansim.calibration.traces.importer import import_traces

    profile = import_traces(TRACES, overhead_s_per_event=0.0)
    path = tmp_path / "p.json"
    write_profile_atomic(profile, path)
    line = run_bad(capsys, ["predict", "--profile", str(path), "--world-sizes", "1,2", "--topology", "dgx-a100"])
    assert "measured device 'cpu' has no peak FLOP/s" in line
    with pytest.raises(UserInputError):
        measured_device(profile)
    import json

    from gansim.cli.main import main
    assert main(["predict", "--profile", str(path), "--world-sizes", "1,2", "--topology", "dgx-a100",
                 "--measured-tflops", "1", "--measured-memory-bandwidth-GBps", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    scaled = out["predictions"][0]["compute_scaled_from"]
    assert scaled["device"] == "cpu" and scaled["to"] == "A100-SXM4-40GB" and 0 < scaled["ratio"] < 1
