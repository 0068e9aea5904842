"""`--from-trace` on real CUDA traces from HolisticTraceAnalysis (tests/data/hta, MIT): GPU
stream time per phase, NCCL's kernels as the all-reduce buckets, the device from
deviceProperties. Every expected figure is worked out here from the trace's JSON."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from gansim.calibration.profile.schema import load_profile
from gansim.calibration.traces.importer import MATH_OPERATORS, import_traces
from gansim.cli.main import main
from tests.cli_checks import run_bad

HTA = Path(__file__).parent / "data" / "hta"
A100 = str(HTA / "nccl_data.json.gz")
V100 = str(HTA / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
# gansim's dcgan with DDP at world size 1 on an H200 (torch 2.11; tests/data/h200/record_trace.py)
H200 = str(Path(__file__).parent / "data" / "h200" / "dcgan_ddp_nccl_world1_rank0.json.gz")
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def trace_facts(path: str) -> dict:
    """Per profiled step, from the JSON alone: the GPU time of what the step launched (all
    of it, and what its optimizer step launched) and the NCCL all-reduce kernels' bytes."""
    data = json.loads(gzip.open(path).read())
    events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"}
    gpu = [(launch[e["args"]["correlation"]], e) for e in events
           if e.get("cat") in GPU_WORK and e["args"].get("correlation") in launch]
    facts = []
    for step in sorted((e for e in events if e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"]):
        lo, hi = step["ts"], step["ts"] + step["dur"]
        opt = next(e for e in events if e["name"].startswith("Optimizer.step#") and e.get("cat") == "user_annotation"
                   and lo <= e["ts"] < hi)
        compute = [(at, e) for at, e in gpu if not e["name"].startswith("nccl")]
        facts.append({
            "to_optimizer_end_s": sum(e["dur"] for at, e in compute if lo <= at < opt["ts"] + opt["dur"]) * 1e-6,
            "optimizer_s": sum(e["dur"] for at, e in compute if opt["ts"] <= at < opt["ts"] + opt["dur"]) * 1e-6,
            "allreduce_bytes": sorted(e["args"]["In msg nelems"] * 4 for at, e in gpu
                                      if e["name"].startswith("ncclKernel_AllReduce") and lo <= at < hi
                                      and e["args"]["dtype"] == "Float"),
        })
    return {"steps": facts, "device": data["deviceProperties"][0]["name"], "world_size":
            data["distributedInfo"]["world_size"]}


def test_the_a100_nccl_trace_gives_gpu_phase_times_and_nccl_buckets():
    facts = trace_facts(A100)
    profile = import_traces([A100], overhead_s_per_event=0.0)
    phases = profile.measured.phases[str(facts["world_size"])]
    steps = facts["steps"]
    # one SGD step per training step: a one-network training, its phases the g_* ones
    assert phases["d_forward_s"] == phases["d_backward_s"] == phases["d_optimizer_s"] == 0.0
    assert phases["g_optimizer_s"] == pytest.approx(statistics.fmean(s["optimizer_s"] for s in steps), rel=1e-9)
    assert phases["g_forward_s"] + phases["g_backward_s"] + phases["g_optimizer_s"] == pytest.approx(
        statistics.fmean(s["to_optimizer_end_s"] for s in steps), rel=1e-9)
    # every step all-reduces the same five buckets; the importer reads them from the host's
    # record_param_comms, the test from the NCCL kernels on the GPU
    assert all(s["allreduce_bytes"] == steps[0]["allreduce_bytes"] for s in steps) and len(steps[0]["allreduce_bytes"]) == 5
    assert sorted(profile.fit.gradient_buckets.generator) == steps[0]["allreduce_bytes"]
    # the all-reduce sizes and their kernels' times are the communication fit's points
    assert sorted(p.bytes for p in profile.measured.allreduce) == sorted(set(steps[0]["allreduce_bytes"]))
    assert profile.fit.beta_s_per_byte > 0
    assert profile.provenance.device == facts["device"] == "NVIDIA A100-PG509-200"
    assert (profile.provenance.device_tflops, profile.provenance.device_memory_bandwidth_GBps) == (19.5, 1555.0)


def test_the_v100_trace_imports_with_its_device(tmp_path, capsys):
    facts = trace_facts(V100)
    out = tmp_path / "v100.json"
    assert main(["calibrate", "--from-trace", V100, "--out", str(out)]) == 0
    # one rank's trace tells no all-reduce cost, and the log says why
    assert "warning: only traces of one rank" in capsys.readouterr().err
    profile = load_profile(out)
    assert profile.provenance.device == facts["device"] == "Tesla V100-SXM2-32GB"
    assert (profile.provenance.device_tflops, profile.provenance.device_memory_bandwidth_GBps) == (15.7, 900.0)
    phases = profile.measured.phases["1"]
    assert phases["g_optimizer_s"] == pytest.approx(statistics.fmean(s["optimizer_s"] for s in facts["steps"]),
                                                    rel=1e-9)
    # a device of its own: predict on one GPU of the same kind needs no roofline
    assert main(["predict", "--profile", str(out), "--world-sizes", "1,2", "--json"]) == 0


def test_a_gpu_profile_predicts_ranks_on_gpus_of_their_own_whatever_cores_the_importer_had():
    """Each rank of a GPU profile computes on its own GPU: the cores of the machine that
    imported the trace (provenance.cores) never slow its ranks, as they do a CPU profile's
    ranks that outnumber them."""
    from gansim.prediction.calibrated import predict

    profile = import_traces([A100], overhead_s_per_event=0.0)
    assert profile.provenance.device != "cpu"

    def steps(p, cores):
        changed = p.model_copy(update={"provenance": p.provenance.model_copy(update={"cores": cores})})
        return [x.step_time_s for x in predict(changed, [1, 4], with_bands=False)]
    one_core, many = steps(profile, 1), steps(profile, 64)
    assert one_core == many
    # the same profile taken as a CPU one: four ranks on one core take about four times as long
    cpu = profile.model_copy(update={"provenance": profile.provenance.model_copy(update={"device": "cpu"})})
    assert steps(cpu, 1)[1] > 3 * steps(cpu, 64)[1]


def test_a_gpu_profile_on_its_own_machine_has_gpu_ranks_whose_collectives_do_not_take_their_compute():
    """Without --topology a GPU profile's machine is GPUs of its device (not CPU processes
    whose core also moves their messages): DDP's all-reduces overlap the backward without
    slowing it, so two ranks take less than the same profile taken as CPU ranks on cores
    enough, one rank the same, and the bottleneck names a GPU."""
    from gansim.prediction.calibrated import default_topology, predict

    profile = import_traces([A100], overhead_s_per_event=0.0)
    ranks = [default_topology(profile, 4).nodes[f"gpu{i}"] for i in range(4)]
    assert {(n.kind, n.model, n.tflops) for n in ranks} == {("gpu", "NVIDIA A100-PG509-200", 19.5)}
    on_gpus = predict(profile, [1, 2])
    cpu = profile.model_copy(update={"provenance": profile.provenance.model_copy(update={"device": "cpu",
                                                                                         "cores": 64})})
    on_cores = predict(cpu, [1, 2])
    assert on_gpus[0].step_time_s == pytest.approx(on_cores[0].step_time_s, rel=1e-12)
    assert on_gpus[1].record.breakdown.communication_s > 0
    assert on_gpus[1].step_time_s < on_cores[1].step_time_s
    assert on_gpus[1].record.bottleneck.resource.startswith("gpu0:")


def test_the_math_operators_are_those_torchs_flop_counter_counts():
    """A kernel is the compute-bound part of a phase when an operator that torch's FLOP
    counter counts launched it: the importer's list is that registry, so a torch that adds
    one shows here."""
    from torch.utils.flop_counter import flop_registry

    registry = {str(op.name() if hasattr(op, "name") else op).replace(".", "::", 1) for op in flop_registry}
    assert {name for name in MATH_OPERATORS if name.startswith("aten::")} == {n for n in registry if n.startswith("aten::")}


def math_facts(path: str) -> dict:
    """Per phase of a one-network step (forward to the first backward event, backward to
    the optimizer step, the optimizer step), the share of its kernels' GPU time launched
    inside a math operator on the launching thread, from the JSON alone, by a scan over
    every operator (no interval union, no bisection)."""
    data = json.loads(gzip.open(path).read())
    events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    math_ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] in MATH_OPERATORS]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}

    def in_math(launch):
        return any(o["tid"] == launch["tid"] and o["ts"] <= launch["ts"] <= o["ts"] + o["dur"] for o in math_ops)
    kernels = [(launches[e["args"]["correlation"]], e) for e in events if e.get("cat") in GPU_WORK
               and e["args"].get("correlation") in launches and not e["name"].startswith("nccl")]
    opt = [e for e in events if e["name"].startswith("Optimizer.step#") and e.get("cat") == "user_annotation"]
    total = math = 0.0
    for launch, k in kernels:
        if any(o["ts"] <= launch["ts"] < o["ts"] + o["dur"] for o in opt):
            assert not in_math(launch)  # SGD's kernels are elementwise
            continue
        total += k["dur"]
        math += k["dur"] if in_math(launch) else 0.0
    return {"math_share": math / total}


def test_a_gpu_trace_without_shapes_splits_its_phases_into_math_and_memory_kernels(tmp_path, capsys):
    """The HTA A100 trace records no shapes, so no FLOPs: the roofline to a V100 moves each
    phase by its kernels, the math operators' share at the FP32 FLOP/s ratio (19.5 / 15.7)
    and the rest at the bandwidth ratio (1555 / 900); the trace's TF32 convolutions are
    named in a warning."""
    profile = import_traces([A100], overhead_s_per_event=0.0)
    costs = profile.measured.phase_costs
    assert costs["g_optimizer_s"].math_share == 0.0
    forward, backward = costs["g_forward_s"].math_share, costs["g_backward_s"].math_share
    assert 0.1 < forward < 0.9 and 0.1 < backward < 0.9
    phases = profile.measured.phases["2"]
    both = (forward * phases["g_forward_s"] + backward * phases["g_backward_s"]) / (
        phases["g_forward_s"] + phases["g_backward_s"])
    # the shares of the phases' time before the optimizer step, averaged over its steps
    assert both == pytest.approx(math_facts(A100)["math_share"], rel=1e-6)

    out = tmp_path / "a100.json"
    assert main(["calibrate", "--from-trace", A100, "--out", str(out)]) == 0
    assert "of the math kernels' time ran on tensor cores" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["predict", "--profile", str(out), "--world-sizes", "1", "--topology",
                 "topologies/dgx1-v100.yaml", "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)["predictions"][0]["compute_scaled_from"]
    compute, memory = 19.5 / 15.7, 1555.0 / 900.0
    assert moved["phases"]["g_optimizer_s"] == {"bound": "memory", "ratio": pytest.approx(memory), "math_share": 0.0}
    assert moved["phases"]["g_backward_s"]["bound"] == "mixed"
    assert moved["phases"]["g_backward_s"]["ratio"] == pytest.approx(backward * compute + (1 - backward) * memory)


def test_a_trace_without_shapes_does_not_know_its_batch_until_told(tmp_path, capsys):
    """The HTA trace records no input shapes, so nothing tells its per-rank batch: the profile
    says so, predictions at its own batch stand, and moving it to another batch (predict's
    --per-gpu-batch, a scenario's per_gpu_batch) is one line saying what to do, until the
    import is given --batch-size."""
    out = tmp_path / "a100.json"
    assert main(["calibrate", "--from-trace", A100, "--out", str(out)]) == 0
    assert "do not tell the per-rank batch" in capsys.readouterr().err
    assert not load_profile(out).provenance.batch_known
    assert main(["predict", "--profile", str(out), "--world-sizes", "1,2"]) == 0
    assert "batch unknown per rank" in capsys.readouterr().out
    assert main(["predict", "--profile", str(out), "--world-sizes", "1,2", "--json"]) == 0
    assert [p["per_gpu_batch"] for p in json.loads(capsys.readouterr().out)["predictions"]] == [None, None]
    line = run_bad(capsys, ["predict", "--profile", str(out), "--world-sizes", "1,2", "--per-gpu-batch", "64"])
    assert "--per-gpu-batch" in line and "--batch-size" in line
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\ntopology: calibrated\nworkload: dcgan\ngpus: [1, 2]\nalgorithms: [ring]\n"
                        f"per_gpu_batch: 64\nsteps: 3\nprofile: {out}\n")
    line = run_bad(capsys, ["simulate", str(scenario), "--out", str(tmp_path / "run")])
    assert "per_gpu_batch" in line and "--batch-size" in line
    told = tmp_path / "told.json"
    assert main(["calibrate", "--from-trace", A100, "--batch-size", "32", "--out", str(told)]) == 0
    assert (load_profile(told).provenance.batch_size, load_profile(told).provenance.batch_known) == (32, True)
    capsys.readouterr()
    assert main(["predict", "--profile", str(told), "--world-sizes", "1,2", "--per-gpu-batch", "64", "--json"]) == 0
    assert [p["per_gpu_batch"] for p in json.loads(capsys.readouterr().out)["predictions"]] == [64, 64]


def test_a_gan_trace_from_an_h200_gives_each_network_s_optimizer_time_and_the_device():
    """A GAN's trace recorded with torch 2.11 on an H200: two Adam steps a training step, the
    first D's and the last G's; each optimizer phase is the GPU time of the kernels its
    Optimizer.step launched, over the profiled steps after the first (as the importer keeps
    them), and the device's datasheet figures come from its deviceProperties."""
    data = json.loads(gzip.open(H200).read())
    events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    launch = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"}
    gpu = [(launch[e["args"]["correlation"]], e) for e in events
           if e.get("cat") in GPU_WORK and e["args"].get("correlation") in launch and not e["name"].startswith("nccl")]
    steps = sorted((e for e in events if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])
    per_step = []
    for step in steps[1:]:
        lo, hi = step["ts"], step["ts"] + step["dur"]
        optimizers = sorted((e for e in events if e["name"].startswith("Optimizer.step#")
                             and e.get("cat") == "user_annotation" and lo <= e["ts"] < hi), key=lambda e: e["ts"])
        assert len(optimizers) == 2
        per_step.append([sum(e["dur"] for at, e in gpu if o["ts"] <= at < o["ts"] + o["dur"]) * 1e-6
                         for o in optimizers])
    profile = import_traces([H200], overhead_s_per_event=0.0)
    phases = profile.measured.phases["1"]
    assert phases["d_optimizer_s"] == pytest.approx(statistics.fmean(d for d, _ in per_step), rel=1e-9)
    assert phases["g_optimizer_s"] == pytest.approx(statistics.fmean(g for _, g in per_step), rel=1e-9)
    assert min(phases[p] for p in ("d_forward_s", "d_backward_s", "g_forward_s", "g_backward_s")) > 0
    assert profile.provenance.device == "NVIDIA H200" and profile.provenance.backend == "nccl"
    assert (profile.provenance.device_tflops, profile.provenance.device_memory_bandwidth_GBps) == (67.0, 4800.0)
    assert profile.provenance.batch_size == 64 and profile.provenance.world_sizes == [1]
