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
    data = read_trace(TRACES[0])
    op = next(i for i, e in enumerate(data["traceEvents"]) if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    data["traceEvents"][op]["tid"] = {"thread": 1}  # ids are numbers or names; this one was a TypeError
    odd_tid = tmp_path / "oddtid.json"
    odd_tid.write_text(json.dumps(data))
    line = run_bad(capsys, ["calibrate", "--from-trace", str(odd_tid), "--out", str(out)])
    assert f"traceEvents[{op}]" in line and "tid that is neither a number nor a string" in line
    notjson = tmp_path / "x.json"
    notjson.write_text("{")
    assert "not a JSON Chrome trace" in run_bad(capsys, ["calibrate", "--from-trace", str(notjson), "--out", str(out)])
    assert out.read_text() == "{}"


def test_cli_writes_a_profile_predict_reads(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["calibrate", "--from-trace", *TRACES, "--profiler-overhead-us", "1", "--out", str(out)]) == 0
    assert load_profile(out).provenance.source == "trace"
    assert main(["predict", "--profile", str(out), "--world-sizes", "1,2", "--json"]) == 0


def test_the_profilers_cost_is_measured_on_the_traces_own_layers(monkeypatch):
    """Without --profiler-overhead-us the cost is measured on a probe of the trace's layer
    shapes (the first profiled step's matrix products), not on a fixed small model: a
    profiler's first session costs more per event the larger the tensors it works on."""
    from gansim.calibration.traces import importer

    asked = []

    def measured(record_shapes, with_flops, with_stack, profile_memory, layers):
        asked.append(layers)
        return 1e-6
    monkeypatch.setattr(importer, "measure_profiler_overhead", measured)
    lines: list[str] = []
    import_traces(TRACES, log=lines.append)
    first = RankTrace(TRACES[0], read_trace(TRACES[0]))
    lo, hi = first.step_windows()[0]
    products = {(tuple(e["args"]["Input Dims"][1]), tuple(e["args"]["Input Dims"][2])) for e in first.on_main
                if e["name"] == "aten::addmm" and lo <= e["ts"] <= hi}
    assert products and {(("linear", x[0], x[1], w[1])) for x, w in products} == set(asked[0])
    assert any("1.00 us per recorded event (measured here on a probe of the trace's" in line for line in lines), lines


def test_probe_layers_read_matrix_products_and_convolutions():
    from gansim.calibration.traces.profiler_cost import DEFAULT_LAYERS, layer_of, probe_layers

    def op(name, *dims):
        return {"name": name, "args": {"Input Dims": list(dims)}}
    assert layer_of(op("aten::addmm", [256], [64, 128], [128, 256])) == ("linear", 64, 128, 256)
    assert layer_of(op("aten::convolution", [16, 3, 64, 64], [32, 3, 4, 4], [32])) == ("conv", 16, 3, 64, 64, 32, 4, 4)
    # a transposed convolution's weight is [in, out, kh, kw]
    assert layer_of(op("aten::convolution", [16, 100, 4, 4], [100, 512, 4, 4], [])) == \
        ("conv_transpose", 16, 100, 4, 4, 512, 4, 4)
    assert layer_of(op("aten::addmm", [256], [64, 127], [128, 256])) is None  # shapes that do not chain
    assert layer_of(op("aten::mul", [64, 128], [64, 128])) is None
    big, small = op("aten::addmm", [512], [64, 512], [512, 512]), op("aten::addmm", [8], [64, 16], [16, 8])
    assert probe_layers([small, big, small]) == (("linear", 64, 512, 512), ("linear", 64, 16, 8))
    assert probe_layers([op("aten::relu", [4])]) == DEFAULT_LAYERS


def test_the_probe_trains_every_kind_of_layer_in_a_fresh_process():
    pytest.importorskip("torch")
    from gansim.calibration.traces.profiler_cost import measure_profiler_overhead

    layers = (("linear", 8, 16, 4), ("conv", 2, 3, 8, 8, 4, 3, 3), ("conv_transpose", 2, 4, 4, 4, 3, 4, 4),
              ("conv_transpose", 2, 100, 1, 1, 8, 4, 4))  # a DCGAN generator's first layer
    cost = measure_profiler_overhead(True, False, layers=layers, processes=1, iterations=2)
    assert isinstance(cost, float) and 0.0 <= cost < 1e-3  # seconds per event: a crash or garbage fails
    # with Python's frames and the allocator's events recorded too
    cost = measure_profiler_overhead(True, False, with_stack=True, profile_memory=True, layers=layers[:1],
                                     processes=1, iterations=2)
    assert isinstance(cost, float) and 0.0 <= cost < 1e-3


def test_the_probe_profiles_with_the_traces_own_options(monkeypatch, tmp_path):
    """A trace recorded with_stack has Python's frames as events of the training thread, which
    cost the thread too: the probe runs with the trace's options, and the frames count."""
    from gansim.calibration.traces import importer

    asked = []

    def measured(**options):
        asked.append(options)
        return 1e-6
    monkeypatch.setattr(importer, "measure_profiler_overhead", measured)
    data = read_trace(TRACES[0])
    first = RankTrace(TRACES[0], data)
    lo, hi = first.step_windows()[0]
    ops = [e for e in first.on_main if e["ts"] >= lo and e["ts"] + e["dur"] <= hi]
    frames = [{**e, "name": f"train.py({k}): frame", "cat": "python_function", "args": {}} for k, e in enumerate(ops)]
    data["traceEvents"] = data["traceEvents"] + frames
    data["with_stack"] = 1
    path = tmp_path / "stack.json"
    path.write_text(json.dumps(data))
    assert RankTrace(str(path), data).events_in(lo, hi) == 2 * first.events_in(lo, hi)
    import_traces([str(path)])
    assert asked[0]["with_stack"] is True and asked[0]["profile_memory"] is False


def test_without_torch_the_profilers_cost_is_asked_for_in_one_line(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    line = run_bad(capsys, ["calibrate", "--from-trace", *TRACES, "--out", "unused.json"])
    assert "--profiler-overhead-us" in line and "PyTorch" in line


def test_a_failed_probe_is_one_line_and_leaves_the_profile(monkeypatch, tmp_path, capsys):
    from gansim.calibration.traces import profiler_cost

    monkeypatch.setattr(profiler_cost, "PROBE_SCRIPT", "import sys; print('no room', file=sys.stderr); sys.exit(3)")
    out = tmp_path / "p.json"
    assert main(["calibrate", "--from-trace", *TRACES, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no room" in err[0] and "--profiler-overhead-us" in err[0] and not out.exists()


def test_the_operators_whose_bytes_count_are_those_with_none_inside():
    """_leaves finds, by a sweep over start times, exactly the operators no other operator
    lies inside (nested, overlapping, zero-length and duplicated events), as the definition
    does by looking at every pair."""
    import random

    from gansim.calibration.traces.importer import _end, _inside, _leaves

    rng = random.Random(1)
    for _ in range(300):
        ops = [{"ts": rng.choice([rng.uniform(0, 100), float(rng.randint(0, 20))]),
                "dur": rng.choice([0.0, rng.uniform(0, 30), float(rng.randint(0, 5))])} for _ in range(rng.randint(0, 60))]
        ops += [dict(o) for o in rng.sample(ops, min(3, len(ops)))]
        by_pairs = [e for e in ops if not any(o is not e and _inside(o, e["ts"], _end(e)) for o in ops)]
        assert sorted(map(id, _leaves(ops))) == sorted(map(id, by_pairs))
