"""`gansim calibrate --from-trace` on the shipped torch.profiler trace (2 gloo ranks, CPU)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gansim.calibration.profile.schema import load_profile
from gansim.calibration.traces.importer import RankTrace, import_traces, read_trace
from gansim.cli.main import main
from gansim.prediction.calibrated import predict
from tests.cli_checks import run_bad

DATA = Path(__file__).parent / "data"
TRACES = [str(DATA / f"ddp_gan_trace_rank{r}.json.gz") for r in (0, 1)]
FACTS = json.loads((DATA / "ddp_gan_trace.json").read_text())


def test_phase_times_are_what_the_events_sum_to_and_buckets_are_ddps():
    profile = import_traces(TRACES, overhead_s_per_event=0.0)
    trace = RankTrace(TRACES[0], read_trace(TRACES[0]))
    events = [e for e in trace.on_main if e.get("cat") == "user_annotation"]
    steps = trace.step_windows()
    for name in ("d_forward", "d_backward", "g_backward", "g_optimizer"):
        total = sum(e["dur"] for e in events if e["name"] == name) * 1e-6 / len(steps)
        raw = profile.measured.profiler.raw_phases[name + "_s"]
        assert raw == pytest.approx(total, abs=len(steps) * 1e-9)  # the trace's resolution: 1 ns
    rank0 = profile.measured.samples["2"][0].phases
    step_s = [(hi - lo) * 1e-6 for lo, hi in steps]
    assert rank0["step_s"] == pytest.approx(step_s, abs=1e-9)
    assert profile.provenance.world_sizes == [2] and len(profile.measured.samples["2"]) == 2
    buckets = profile.fit.gradient_buckets
    assert buckets.discriminator == FACTS["ddp_bucket_bytes"]["discriminator"]
    assert buckets.generator == FACTS["ddp_bucket_bytes"]["generator"]
    # D's BatchNorm statistics, broadcast before each of its three forwards with grad a step
    assert profile.fit.buffer_bytes.discriminator == 3 * (2 * 128 * 4 + 8)
    assert profile.measured.phase_costs["d_forward_s"].flops > 0
    assert predict(profile, [1, 2, 4])[2].step_time_s > 0


def test_steps_that_differ_more_than_the_profiler_explains_are_reported():
    lines: list[str] = []
    import_traces(TRACES, overhead_s_per_event=0.0, log=lines.append)
    # the shipped trace's two profiled steps: 28.58 and 18.43 ms on rank 0
    assert any("rank 0's 2 profiled steps range from 18.43 to 28.58 ms" in line for line in lines), lines


def test_overhead_removal_subtracts_events_times_cost():
    raw = import_traces(TRACES, overhead_s_per_event=0.0)
    fixed = import_traces(TRACES, overhead_s_per_event=2e-6)
    n = fixed.measured.profiler.events_per_step["g_backward_s"]
    assert fixed.measured.phases["2"]["g_backward_s"] == pytest.approx(raw.measured.phases["2"]["g_backward_s"] - 2e-6 * n,
                                                                       rel=1e-6)


def test_without_labels_the_autograd_regions_give_the_phases(tmp_path):
    data = read_trace(TRACES[0])
    labels = {"data", "d_forward", "d_backward", "d_optimizer", "g_forward", "g_backward", "g_optimizer"}
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("name") not in labels]
    data["distributedInfo"]["world_size"] = 1
    path = tmp_path / "unlabelled.json"
    path.write_text(json.dumps(data))
    labelled = import_traces(TRACES[:1], overhead_s_per_event=0.0).measured.profiler.raw_phases
    found = import_traces([str(path)], overhead_s_per_event=0.0).measured.profiler.raw_phases
    # the optimizer steps are the same events; backward and forward within the gaps the labels add
    for name in ("d_optimizer_s", "g_optimizer_s"):
        assert found[name] == pytest.approx(labelled[name], rel=0.1)
    for name in ("d_backward_s", "g_backward_s", "d_forward_s", "g_forward_s"):
        assert found[name] == pytest.approx(labelled[name], rel=0.35), name


def test_bad_traces_are_one_line_and_leave_the_profile(tmp_path, capsys):
    out = tmp_path / "profile.json"
    out.write_text("{}")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"traceEvents": [{"name": "x", "ph": "X", "ts": 0, "dur": 1}]}))
    assert "not a torch.profiler (Kineto) Chrome trace" in run_bad(
        capsys, ["calibrate", "--from-trace", str(other), "--out", str(out)])
    data = read_trace(TRACES[0])
    data["traceEvents"] = [e for e in data["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    steps = tmp_path / "nosteps.json.gz"
    with gzip.open(steps, "wt") as fh:
        json.dump(data, fh)
    assert "no ProfilerStep#N events" in run_bad(capsys, ["calibrate", "--from-trace", str(steps), "--out", str(out)])
    notjson = tmp_path / "x.json"
    notjson.write_text("{")
    assert "not a JSON Chrome trace" in run_bad(capsys, ["calibrate", "--from-trace", str(notjson), "--out", str(out)])
    assert out.read_text() == "{}"


def test_cli_writes_a_profile_predict_reads(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["calibrate", "--from-trace", *TRACES, "--profiler-overhead-us", "1", "--out", str(out)]) == 0
    assert load_profile(out).provenance.source == "trace"
    assert main(["predict", "--profile", str(out), "--world-sizes", "1,2", "--json"]) == 0
