"""`--from-trace` on traces as users make them: a WGAN-GP script with its own labels
(critic_step, generator_step), stock DDP on gloo, profiled by torch.profiler in the test at
world sizes 1 and 2; phases from the trace's structure, several runs fitted together."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gansim.calibration.fit.measurements import compute_time
from gansim.calibration.profile.phases import COMPUTE_PHASES
from gansim.calibration.traces.importer import RankTrace, _end, _inside, _tensor_shapes, import_traces, read_trace
from gansim.cli.main import main
from tests.cli_checks import run_bad

SCRIPT = Path(__file__).parent / "data" / "wgan_gp_train.py"
LOOPS = Path(__file__).parent / "data" / "gan_loops.py"  # GANs told apart by their gradients' paths
CRITIC_STEPS = 5


def profile_script(out: Path, world: int) -> list[str]:
    """Run the user's script under torchrun's launcher at `world` ranks with its profiler on."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
                    str(SCRIPT), "--trace-dir", str(out), "--warmup", "2", "--profiled-steps", "3"],
                   check=True, env=env, capture_output=True, timeout=600)
    return [str(out / f"rank{r}.ws{world}.json.gz") for r in range(world)]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[int, list[str]]:
    out = tmp_path_factory.mktemp("wgan_gp_traces")
    return {world: profile_script(out, world) for world in (1, 2)}


def _labels(trace: RankTrace, name: str, lo: float, hi: float) -> list[dict]:
    return [e for e in trace.user_labels if e["name"] == name and _inside(e, lo, hi)]


def test_optimizer_steps_inside_user_labels_give_the_phases(traces):
    path = traces[2][0]
    trace = RankTrace(path, read_trace(path))
    for lo, hi in trace.step_windows():
        windows = trace.phase_windows(lo, hi)
        critics, generator = _labels(trace, "critic_step", lo, hi), _labels(trace, "generator_step", lo, hi)
        assert len(critics) == CRITIC_STEPS and len(generator) == 1
        names = [name for name, _, _ in windows]
        assert names == ["d_forward_s", "d_backward_s", "d_optimizer_s"] * CRITIC_STEPS + \
            ["g_forward_s", "g_backward_s", "g_optimizer_s"]
        for label, (fwd, bwd, opt) in zip(critics + generator, zip(*[iter(windows)] * 3)):
            # the optimizer step is the one inside the label; the backward starts at the
            # zero_grad the script calls just before loss.backward() (the gradient penalty's
            # autograd.grad before it stays in the forward)
            inside = [e for e in trace.host if _inside(e, label["ts"], _end(label))]
            step = [e for e in inside if e["name"].startswith("Optimizer.step#")]
            zero_grad = [e for e in inside if e["name"].startswith("Optimizer.zero_grad#")]
            assert (opt[1], opt[2]) == (step[0]["ts"], _end(step[0]))
            assert bwd[1] == zero_grad[0]["ts"] and bwd[2] == step[0]["ts"]
            assert label["ts"] <= fwd[2] == bwd[1]
    profile = import_traces(traces[2], overhead_s_per_event=0.0)
    assert profile.provenance.d_steps == CRITIC_STEPS
    # DDP's one bucket per network (the script's small MLPs), D's all-reduced in each critic step
    assert len(profile.fit.gradient_buckets.discriminator) == 1 and len(profile.fit.gradient_buckets.generator) == 1


def test_a_phase_map_names_the_networks_by_the_users_labels(traces):
    by_place = import_traces(traces[2], overhead_s_per_event=0.0).measured.profiler.raw_phases
    mapped = import_traces(traces[2], overhead_s_per_event=0.0,
                           phase_map={"critic_step": "d", "generator_step": "g"}).measured.profiler.raw_phases
    assert mapped == by_place
    swapped = import_traces(traces[2], overhead_s_per_event=0.0,
                            phase_map={"critic_step": "g", "generator_step": "d"}).measured.profiler.raw_phases
    assert swapped["d_optimizer_s"] == pytest.approx(by_place["g_optimizer_s"], abs=1e-9)


def test_the_users_labels_are_reported_by_their_names(traces):
    lines: list[str] = []
    import_traces(traces[1], overhead_s_per_event=0.0, log=lines.append)
    assert any("your labels a step" in line and "critic_step 5 x" in line and "generator_step 1 x" in line
               for line in lines), lines


def test_runs_of_two_world_sizes_are_fitted_together(traces):
    profile = import_traces(traces[1] + traces[2], overhead_s_per_event=1e-6)
    measured, fit = profile.measured, profile.fit
    assert profile.provenance.world_sizes == [1, 2] and sorted(measured.samples) == ["1", "2"]
    # the script's batch of 64, from the input of its forwards' first layers (record_shapes)
    assert (profile.provenance.batch_size, profile.provenance.batch_known) == (64, True)
    # compute from the smallest run, core sharing from the larger (fit_from_measurements)
    assert {k: fit.compute[k] for k in COMPUTE_PHASES} == {k: measured.phases["1"][k] for k in COMPUTE_PHASES}
    assert fit.core_sharing["2"] == pytest.approx(compute_time(measured.compute_only["2"]) /
                                                  compute_time(measured.compute_only["1"]))
    # communication from the world-size-2 run's gloo all-reduces
    assert {p.world_size for p in measured.allreduce} == {2} and fit.beta_s_per_byte + fit.alpha_s > 0


def test_cli_takes_both_runs_and_a_phase_map(traces, tmp_path):
    out = tmp_path / "p.json"
    assert main(["calibrate", "--from-trace", *traces[1], *traces[2], "--phase-map", "critic_step=d,generator_step=g",
                 "--profiler-overhead-us", "1", "--out", str(out)]) == 0
    assert main(["predict", "--profile", str(out), "--world-sizes", "1,2,3", "--json"]) == 0


def test_one_optimizer_step_a_step_is_a_one_network_training(traces, tmp_path):
    data = read_trace(traces[1][0])
    trace = RankTrace(traces[1][0], data)
    critic_steps = {id(e) for e in trace.host if e["name"].startswith("Optimizer.step#") and any(
        _inside(e, c["ts"], _end(c)) for c in trace.user_labels if c["name"] == "critic_step")}
    kept = [e for e in data["traceEvents"] if not (isinstance(e, dict) and e.get("name", "").startswith(
        "Optimizer.step#") and any(e.get("ts") == c["ts"] and e.get("name") == c["name"] for c in trace.host
                                    if id(c) in critic_steps))]
    path = tmp_path / "one_network.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({**data, "traceEvents": kept}, fh)
    lines: list[str] = []
    profile = import_traces([str(path)], overhead_s_per_event=0.0, log=lines.append)
    assert any("one-network training" in line for line in lines)
    phases = profile.measured.phases["1"]
    assert phases["d_forward_s"] == phases["d_backward_s"] == phases["d_optimizer_s"] == 0.0
    assert phases["g_optimizer_s"] > 0 and profile.fit.gradient_bytes.discriminator == 4


def test_a_trace_without_optimizer_steps_is_one_line(traces, tmp_path, capsys):
    data = read_trace(traces[1][0])
    data["traceEvents"] = [e for e in data["traceEvents"] if not str(e.get("name", "")).startswith("Optimizer.step#")]
    path = tmp_path / "no_steps.json"
    path.write_text(json.dumps(data))
    message = run_bad(capsys, ["calibrate", "--from-trace", str(path), "--profiler-overhead-us", "0",
                               "--out", str(tmp_path / "p.json")])
    assert "has no optimizer step" in message


def test_bad_phase_maps_are_one_line(traces, tmp_path, capsys):
    out = str(tmp_path / "p.json")
    for phase_map, says in (("critic_step=x", "allowed: LABEL=d or LABEL=g"), ("critic_step", "allowed: LABEL=d"),
                            ("a=d,a=g", "given twice"), ("nosuchlabel=d", "no record_function label 'nosuchlabel'")):
        assert says in run_bad(capsys, ["calibrate", "--from-trace", *traces[1], "--phase-map", phase_map,
                                        "--profiler-overhead-us", "0", "--out", out])
    assert "only with --from-trace" in run_bad(capsys, ["calibrate", "--phase-map", "a=d", "--out", out])
    assert "two traces of rank 0 of world size 1" in run_bad(
        capsys, ["calibrate", "--from-trace", traces[1][0], traces[1][0], "--profiler-overhead-us", "0", "--out", out])


def test_a_sweep_of_one_size_is_bandwidth_alone_and_none_is_free():
    from gansim.calibration.fit.measurements import fit_sweep
    from gansim.collectives.closed_forms import ring_time

    alpha, beta, residuals = fit_sweep([(2, 4096, 1e-3)], 0.0)
    assert alpha == 0 and ring_time(2, 4096, 0.0, beta, 0.0) == pytest.approx(1e-3) and residuals == [pytest.approx(0)]
    assert fit_sweep([], 0.0) == (0.0, 0.0, [])


def test_traces_and_script_give_the_same_profile(traces, tmp_path):
    """The same script's profile by both ways: the same shape (D steps, DDP's buckets and mode,
    world sizes, buffers) and a time for every forward, backward and optimizer phase. How
    close their times come is bench/trace_calibration.py's to print (docs/calibrate-from-
    traces.md, "How close it gets"): they are real timings of two runs taken minutes apart,
    which a stall or another process moves, so no test holds them to each other (it would
    fail on a busier machine)."""
    from gansim.calibration.profile.schema import load_profile

    trace = import_traces(traces[1] + traces[2])
    out = tmp_path / "script.json"
    assert main(["calibrate", "--script", str(SCRIPT), "--world-sizes", "1,2", "--repeats", "1", "--steps", "10",
                 "--warmup", "3", "--out", str(out)]) == 0
    script = load_profile(out)
    for profile in (script, trace):
        assert (profile.provenance.d_steps, profile.provenance.mode,
                profile.provenance.world_sizes) == (5, "ddp", [1, 2])
        # (data_s, the time between the phases, may round to nothing)
        assert all(profile.fit.compute[phase] > 0 for phase in COMPUTE_PHASES if phase != "data_s")
    assert trace.fit.gradient_buckets == script.fit.gradient_buckets
    assert trace.fit.buffer_bytes == script.fit.buffer_bytes


COMPILED_GAN = """
import sys
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
torch.manual_seed(0)
G = torch.compile(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)), backend="aot_eager")
D = torch.compile(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)), backend="aot_eager")
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=2, active=2),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(4):
        opt_d.zero_grad()
        (D(G(torch.randn(16, 8)).detach()).mean() - D(torch.randn(16, 16)).mean()).backward()
        opt_d.step()
        opt_g.zero_grad()
        (-D(G(torch.randn(16, 8))).mean()).backward()
        opt_g.step()
        prof.step()
"""


SCALED_GAN = """
import sys
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
D = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
scaler = torch.amp.GradScaler("cpu")
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=2, active=2),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(4):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss_d = D(G(torch.randn(16, 8)).detach()).mean() - D(torch.randn(16, 16)).mean()
        opt_d.zero_grad()
        scaler.scale(loss_d).backward()
        scaler.unscale_(opt_d)
        torch.nn.utils.clip_grad_norm_(D.parameters(), 1.0)
        scaler.step(opt_d)
        scaler.update()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss_g = -D(G(torch.randn(16, 8))).mean()
        opt_g.zero_grad()
        scaler.scale(loss_g).backward()
        scaler.step(opt_g)
        scaler.update()
        prof.step()
"""


def test_the_gradients_unscaling_and_clipping_are_the_optimizers_not_the_forwards(tmp_path):
    """GradScaler's unscale and inf check and clip_grad_norm_ run between the backward and
    the optimizer step: the backward is still found, and they count as the optimizer's."""
    path = tmp_path / "scaled.json"
    subprocess.run([sys.executable, "-c", SCALED_GAN, str(path)], check=True, capture_output=True, timeout=600,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    trace = RankTrace(str(path), read_trace(str(path)))
    for lo, hi in trace.step_windows():
        windows = trace.phase_windows(lo, hi)
        assert [name for name, _, _ in windows] == ["d_forward_s", "d_backward_s", "d_optimizer_s",
                                                    "g_forward_s", "g_backward_s", "g_optimizer_s"]
        for fwd, bwd, opt in zip(*[iter(windows)] * 3):
            def names(window):
                return [e["name"] for e in trace.host if _inside(e, window[1], window[2])]
            autograd = [e for e in trace.host if e["name"].startswith("autograd::engine::evaluate_function")
                        and fwd[1] <= e["ts"] < opt[2]]
            # every autograd function of the backward is in it, and it ends where the first
            # operator after the last one starts
            assert autograd and all(_inside(e, bwd[1], bwd[2]) for e in autograd)
            last = max(_end(e) for e in autograd)
            assert bwd[2] == min(e["ts"] for e in trace.host if e["ts"] >= last and e["ts"] < opt[2])
            assert not any(n.startswith("autograd::") for n in names(fwd))
            assert "aten::_amp_foreach_non_finite_check_and_unscale_" in names(opt)
            assert "aten::_amp_foreach_non_finite_check_and_unscale_" not in names(bwd)
        # D's clipping (a norm of its gradients) is in D's optimizer phase
        assert any("norm" in e["name"] for e in trace.host if _inside(e, windows[2][1], windows[2][2]))


def test_optimizer_steps_after_compiled_regions_close_the_networks_steps(tmp_path):
    path = tmp_path / "compiled.json"
    subprocess.run([sys.executable, "-c", COMPILED_GAN, str(path)], check=True, capture_output=True, timeout=600,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    trace = RankTrace(str(path), read_trace(str(path)))
    assert any(e["name"].startswith("Torch-Compiled Region") for e in trace.host)
    for lo, hi in trace.step_windows():
        windows = trace.phase_windows(lo, hi)
        assert [name for name, _, _ in windows] == ["d_forward_s", "d_backward_s", "d_optimizer_s",
                                                    "g_forward_s", "g_backward_s", "g_optimizer_s"]
        # each backward is the compiled graph's backward and what follows it
        for name, a, b in windows:
            backward = [e for e in trace.host if e["name"].startswith("autograd::engine::evaluate_function: Compiled")
                        and _inside(e, a, b)]
            assert bool(backward) == name.endswith("backward_s"), name
    assert not trace.user_labels  # the compiled regions are torch's labels, not the user's


def test_a_wait_for_an_all_reduce_inside_a_users_label_is_not_compute():
    """The backward's tail where the thread runs nothing while gloo's all-reduce is in flight
    is communication, also when the user's own label encloses the whole phase (and when
    gansim's own phase label is the window): the compute-only figures leave it out."""
    main, gloo = {"pid": 1, "tid": 1}, {"pid": 1, "tid": 2}

    def event(name, ts, dur, cat="cpu_op", where=main, **args):
        return {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat, **where, "args": args}
    events = [
        event("ProfilerStep#1", 0, 1000, "user_annotation"),
        event("critic_step", 10, 980, "user_annotation"),
        event("aten::addmm", 20, 100),                                          # forward
        event("Optimizer.zero_grad#Adam.zero_grad", 200, 10, "user_annotation"),
        event("autograd::engine::evaluate_function: AddmmBackward0", 220, 180),  # backward compute
        event("gloo:all_reduce", 300, 500, where=gloo, **{"Input Dims": [[1000]], "Input type": ["float"]}),
        event("Optimizer.step#Adam.step", 900, 50, "user_annotation"),           # after 500 us of waiting
        event("aten::add_", 905, 40),
    ]
    trace = RankTrace("synthetic.json", {"distributedInfo": {"rank": 0, "world_size": 2, "backend": "gloo"},
                                         "traceEvents": events})
    windows = {name: (a, b) for name, a, b in trace.phase_windows(0, 1000)}
    assert windows["g_backward_s"] == (200, 900)
    # the thread ran nothing from the backward's last function (400) until gloo's end (800)
    assert trace.waiting(*windows["g_backward_s"]) == pytest.approx(400)
    labelled = RankTrace("labelled.json", {"distributedInfo": {"rank": 0, "world_size": 2, "backend": "gloo"},
                                           "traceEvents": events + [event("d_backward", 200, 700, "user_annotation")]})
    assert labelled.waiting(200, 900) == pytest.approx(400)
    # with_stack: loss.backward()'s Python frame spans the wait, and the thread still ran nothing
    framed = RankTrace("framed.json", {"distributedInfo": {"rank": 0, "world_size": 2, "backend": "gloo"},
                                       "traceEvents": events + [event("torch/_tensor.py(570): backward", 215, 600,
                                                                      "python_function")]})
    assert framed.waiting(200, 900) == pytest.approx(400)


MANUAL_SYNC_GAN = """
import os, sys
import torch, torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
dist.init_process_group("gloo")
torch.set_num_threads(1)
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
D = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
def sync(module):  # StyleGAN2-ADA's training_loop: one all-reduce of the flattened gradients
    params = [p for p in module.parameters() if p.grad is not None]
    flat = torch.cat([p.grad.flatten() for p in params])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad.copy_(g.view_as(p))
path = os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json")
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=2, active=3), record_shapes=True,
             on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
    for _ in range(5):
        opt_d.zero_grad()
        (D(G(torch.randn(16, 8)).detach()).mean() - D(torch.randn(16, 16)).mean()).backward()
        sync(D)
        opt_d.step()
        opt_g.zero_grad()
        (-D(G(torch.randn(16, 8))).mean()).backward()
        sync(G)
        opt_g.step()
        prof.step()
dist.destroy_process_group()
"""


def test_gradients_all_reduced_after_the_backward_are_a_flat_sync(tmp_path):
    """A script that all-reduces its flattened gradients itself between the backward and the
    optimizer step (StyleGAN2-ADA's loop, no DDP): the backward is found, each all-reduce is
    its network's whole gradient, issued in the optimizer's phase, and the profile's mode is
    flat (nothing overlaps the backward)."""
    script = tmp_path / "manual_sync.py"
    script.write_text(MANUAL_SYNC_GAN)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script),
                    str(tmp_path)], check=True, capture_output=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    paths = [str(tmp_path / f"rank{r}.json") for r in range(2)]
    trace = RankTrace(paths[0], read_trace(paths[0]))
    for lo, hi in trace.step_windows():
        windows = trace.phase_windows(lo, hi)
        reduces = [e for e in trace.on_main if e["name"] == "c10d::allreduce_" and _inside(e, lo, hi)]
        assert len(reduces) == 2
        for (fwd, bwd, opt), reduce in zip(zip(*[iter(windows)] * 3), reduces):
            assert bwd[2] - bwd[1] > 0 and opt[1] <= reduce["ts"] < opt[2]
    profile = import_traces(paths, overhead_s_per_event=0.0)
    d_params, g_params = 16 * 32 + 32 + 32 + 1, 8 * 32 + 32 + 32 * 16 + 16
    assert profile.fit.gradient_buckets.discriminator == [4 * d_params]
    assert profile.fit.gradient_buckets.generator == [4 * g_params]
    assert profile.provenance.mode == "flat"
    assert all(r.phase.endswith("_optimizer_s") for r in profile.measured.collectives["2"])


def test_gradients_all_reduced_one_by_one_right_after_the_backward_are_the_optimizers(tmp_path):
    """The seed paper's way without DDP: each parameter's gradient all-reduced by itself, the
    first all-reduce the very first operator after the backward. It starts where the backward
    window ends, and is the optimizer's like the others: the profile is flat, its buckets the
    parameters in issue order."""
    script = tmp_path / "per_parameter.py"
    script.write_text(MANUAL_SYNC_GAN.replace(
        "    params = [p for p in module.parameters() if p.grad is not None]\n",
        "    for p in module.parameters():\n        dist.all_reduce(p.grad)\n    return\n"))
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script),
                    str(tmp_path)], check=True, capture_output=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    profile = import_traces([str(tmp_path / f"rank{r}.json") for r in range(2)], overhead_s_per_event=0.0)
    assert profile.provenance.mode == "flat"
    assert all(r.phase.endswith("_optimizer_s") for r in profile.measured.collectives["2"])
    assert profile.fit.gradient_buckets.discriminator == [4 * n for n in (16 * 32, 32, 32, 1)]
    assert profile.fit.gradient_buckets.generator == [4 * n for n in (8 * 32, 32, 32 * 16, 16)]


N_CRITIC_GAN = """
import sys
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
D = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 1))
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=2, active=11),
             record_shapes=sys.argv[2] == "shapes", on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for i in range(13):  # the usual WGAN loop: a critic step per batch, the generator every 3rd
        opt_d.zero_grad()
        (D(G(torch.randn(16, 8)).detach()).mean() - D(torch.randn(16, 16)).mean()).backward()
        opt_d.step()
        if i % 3 == 2:
            opt_g.zero_grad()
            (-D(G(torch.randn(16, 8))).mean()).backward()
            opt_g.step()
        prof.step()
"""


def test_a_generator_step_every_nth_profiled_step_makes_whole_gan_steps(tmp_path):
    """prof.step() once per critic step, the generator every 3rd (iterations 2, 5, 8, 11;
    profiled 2-12): the networks are told apart by the parameters their optimizers update,
    and a training step runs from the end of one generator step to the end of the next
    (iterations 3-5, 6-8 and 9-11; 2 and 12 belong to steps the profiler did not see whole)."""
    path = tmp_path / "n_critic.json"
    subprocess.run([sys.executable, "-c", N_CRITIC_GAN, str(path), "shapes"], check=True, capture_output=True,
                   timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    trace = RankTrace(str(path), read_trace(str(path)))
    assert len(trace.steps) == 11
    g_ends = [_end(o) for o in trace.host if o["name"].startswith("Optimizer.step#")
              and _inside(o, trace.steps[0]["ts"], _end(trace.steps[-1]))][1::4]  # D G, then D D D G ...
    windows = trace.step_windows()
    assert windows == list(zip(g_ends[:-1], g_ends[1:])) and len(windows) == 3
    for lo, hi in windows:
        names = [name for name, _, _ in trace.phase_windows(lo, hi)]
        assert names == ["d_forward_s", "d_backward_s", "d_optimizer_s"] * 3 + ["g_forward_s", "g_backward_s",
                                                                                "g_optimizer_s"]
    profile = import_traces([str(path)], overhead_s_per_event=0.0)
    assert profile.provenance.d_steps == 3 and profile.provenance.steps == 3
    assert profile.measured.step_time_s["1"] == pytest.approx(sum(hi - lo for lo, hi in windows) / 3 * 1e-6, rel=1e-9)
    # without shapes the networks cannot be told apart: the old rule, and a warning that says so
    bare = tmp_path / "bare.json"
    subprocess.run([sys.executable, "-c", N_CRITIC_GAN, str(bare), "none"], check=True, capture_output=True,
                   timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines: list[str] = []
    import_traces([str(bare)], overhead_s_per_event=0.0, log=lines.append)
    assert any("cannot tell its networks apart (record_shapes=True" in line for line in lines), lines


def test_several_gan_steps_in_one_profiled_step_are_split_at_the_generators_steps(tmp_path):
    """prof.step() once per three iterations (D then G each): every generator step ends a
    training step, so 4 profiled steps of 3 iterations make 11 whole GAN steps of one D and
    one G step each (the first iteration's D step belongs to a step begun before)."""
    script = N_CRITIC_GAN.replace("for i in range(13):", "for i in range(15):").replace(
        "if i % 3 == 2:", "if True:").replace("        prof.step()", "        if i % 3 == 2:\n            prof.step()")
    script = script.replace("warmup=2, active=11", "warmup=1, active=4")
    path = tmp_path / "epochs.json"
    subprocess.run([sys.executable, "-c", script, str(path), "shapes"], check=True, capture_output=True,
                   timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    trace = RankTrace(str(path), read_trace(str(path)))
    assert len(trace.steps) == 4
    windows = trace.step_windows()
    assert len(windows) == 11
    for lo, hi in windows:
        assert [name for name, _, _ in trace.phase_windows(lo, hi)] == [
            "d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s", "g_optimizer_s"]
    assert import_traces([str(path)], overhead_s_per_event=0.0).provenance.d_steps == 1


def test_a_trace_profiled_without_a_schedule_is_cut_at_the_generators_steps(tmp_path, capsys):
    """`with profile(...) as prof:` around the loop, no schedule and no prof.step(): with
    record_shapes the networks are told apart and every generator step ends a training step;
    without shapes nothing tells where the steps end, and the error says what to do."""
    script = N_CRITIC_GAN.replace("schedule=schedule(wait=0, warmup=2, active=11),", "").replace(
        "        prof.step()\n", "").replace("on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:",
                                         ") as prof:") + "prof.export_chrome_trace(sys.argv[1])\n"
    assert "schedule(" not in script and "prof.step()" not in script
    path, bare = tmp_path / "whole.json", tmp_path / "bare.json"
    for out, shapes in ((path, "shapes"), (bare, "none")):
        subprocess.run([sys.executable, "-c", script, str(out), shapes], check=True, capture_output=True,
                       timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    trace = RankTrace(str(path), read_trace(str(path)))
    assert not trace.steps
    # 13 iterations, the generator in 2, 5, 8 and 11: three whole steps of three critic steps
    windows = trace.step_windows()
    assert len(windows) == 3
    profile = import_traces([str(path)], overhead_s_per_event=0.0)
    assert profile.provenance.d_steps == 3 and profile.provenance.steps == 3
    assert "no ProfilerStep#N events" in run_bad(capsys, ["calibrate", "--from-trace", str(bare),
                                                          "--profiler-overhead-us", "1", "--out",
                                                          str(tmp_path / "p.json")])


def test_a_phase_map_tells_where_the_generator_steps_without_shapes(tmp_path):
    """prof.step() once per critic step, no record_shapes, but the user's labels around the
    critic and generator steps and a --phase-map: the map says which optimizer steps are G's,
    and training steps run from one generator step's end to the next's."""
    script = N_CRITIC_GAN.replace(
        "        opt_d.zero_grad()\n", "        critic = torch.profiler.record_function('critic')\n        critic.__enter__()\n"
        "        opt_d.zero_grad()\n").replace(
        "        opt_d.step()\n", "        opt_d.step()\n        critic.__exit__(None, None, None)\n").replace(
        "            opt_g.zero_grad()\n", "            gen = torch.profiler.record_function('gen')\n            gen.__enter__()\n"
        "            opt_g.zero_grad()\n").replace(
        "            opt_g.step()\n", "            opt_g.step()\n            gen.__exit__(None, None, None)\n")
    path = tmp_path / "mapped.json"
    subprocess.run([sys.executable, "-c", script, str(path), "none"], check=True, capture_output=True,
                   timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    bare = RankTrace(str(path), read_trace(str(path)))
    assert len(bare.step_windows()) == 11  # nothing tells the networks apart: the profiled steps
    mapped = RankTrace(str(path), read_trace(str(path)), {"critic": "d", "gen": "g"})
    windows = mapped.step_windows()
    assert len(windows) == 3
    for lo, hi in windows:
        assert [name for name, _, _ in mapped.phase_windows(lo, hi)] == \
            ["d_forward_s", "d_backward_s", "d_optimizer_s"] * 3 + ["g_forward_s", "g_backward_s", "g_optimizer_s"]


def test_generator_steps_in_a_row_stay_in_their_profiled_step(tmp_path):
    """A generator's own regularisation step right after its main one (every 2nd iteration,
    as StyleGAN2's path-length step): two G steps in a row are one GAN step's, so the
    ProfilerSteps stay the training steps."""
    script = N_CRITIC_GAN.replace("if i % 3 == 2:", "for _ in range(1 + i % 2):")
    path = tmp_path / "greg.json"
    subprocess.run([sys.executable, "-c", script, str(path), "shapes"], check=True, capture_output=True,
                   timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    trace = RankTrace(str(path), read_trace(str(path)))
    assert trace.step_windows() == [(s["ts"], _end(s)) for s in trace.steps]
    counts = {len(trace.phase_windows(lo, hi)) for lo, hi in trace.step_windows()}
    assert counts == {6, 9}  # D and G, or D, G and G again
    # the steps hold 2 or 3 optimizer steps, and the shapes tell which network each is: no warning
    lines: list[str] = []
    import_traces([str(path)], overhead_s_per_event=0.0, log=lines.append)
    assert not any("cannot tell its networks apart" in line for line in lines), lines


def test_a_loop_that_steps_the_generator_first_names_its_networks_by_their_backward(tmp_path):
    """StyleGAN2-ADA's order (G's phase, then D's, D frozen during G's): the generator is the
    network whose backward read the other's weights (G's loss runs through D's layers), not
    the one that steps last; each ProfilerStep is one GAN step, G's phases first."""
    path = tmp_path / "g_first.json"
    subprocess.run([sys.executable, str(LOOPS), "g_first", "--trace", str(path)], check=True, capture_output=True,
                   timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    trace = RankTrace(str(path), read_trace(str(path)))
    assert trace.step_windows() == [(s["ts"], _end(s)) for s in trace.steps] and len(trace.steps) == 4
    for lo, hi in trace.step_windows():
        assert [name for name, _, _ in trace.phase_windows(lo, hi)] == [
            "g_forward_s", "g_backward_s", "g_optimizer_s", "d_forward_s", "d_backward_s", "d_optimizer_s"]
        # the first optimizer step of each is G's: its operators read G's first weight (32 x 8)
        first = trace.optimizer_steps(lo, hi)[0]
        read: set = set()
        for e in trace.host:
            if e is not first and _inside(e, first["ts"], _end(first)):
                _tensor_shapes(e.get("args", {}).get("Input Dims"), read)
        assert (32, 8) in read and (24, 16) not in read
    assert import_traces([str(path)], overhead_s_per_event=0.0).provenance.d_steps == 1


def test_two_discriminators_are_d_steps_of_the_generators_gan_step(tmp_path):
    """CycleGAN's three optimizers (both generators, then a discriminator each): the backward
    passes tell the generators' apart (they read both discriminators' weights), so each
    ProfilerStep is one G step and two D steps, not a G step named after the last
    discriminator."""
    path = tmp_path / "two_d.json"
    subprocess.run([sys.executable, str(LOOPS), "two_discriminators", "--trace", str(path)], check=True,
                   capture_output=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    trace = RankTrace(str(path), read_trace(str(path)))
    assert trace.step_windows() == [(s["ts"], _end(s)) for s in trace.steps] and len(trace.steps) == 4
    for lo, hi in trace.step_windows():
        assert [name for name, _, _ in trace.phase_windows(lo, hi)] == [
            "g_forward_s", "g_backward_s", "g_optimizer_s"] + ["d_forward_s", "d_backward_s", "d_optimizer_s"] * 2
    profile = import_traces([str(path)], overhead_s_per_event=0.0)
    assert (profile.provenance.d_steps, profile.provenance.batch_size) == (2, 16)
