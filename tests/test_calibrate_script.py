"""`gansim calibrate --script`: the shipped examples run at world sizes 1 and 2 (gloo), what
they all-reduce equals the buckets DDP itself formed, and broken scripts get one line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the calibrate extra; installed in CI

from gansim.calibration.fit.communication import buffer_bytes, gradient_buckets, summarize  # noqa: E402
from gansim.calibration.ranks.launch import run_local  # noqa: E402
from gansim.calibration.profile.phases import STEP  # noqa: E402
from gansim.calibration.ranks.run_config import RunConfig, ScriptSpec  # noqa: E402
from gansim.cli.main import main  # noqa: E402
from tests.cli_checks import calibrate_under_torchrun, run_bad  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SMALL = {"wgan_gp.py": ("--batch-size", "8", "--n-critic", "2"), "cdcgan_hinge.py": ("--batch-size", "4")}


@pytest.mark.parametrize("example", sorted(SMALL))
def test_examples_calibrate_at_world_sizes_1_and_2_and_all_reduce_ddps_buckets(example):
    cfg = RunConfig(steps=4, warmup=2, timeout_s=60)
    spec = ScriptSpec(str(EXAMPLES / example), SMALL[example])
    for world in (1, 2):
        result = run_local(cfg, world, (), script=spec)["script"]
        assert [r["rank"] for r in result["ranks"]] == list(range(world))
        for r in result["ranks"]:
            phases = r["phases"]
            assert len(phases[STEP]) == 2  # the kept steps
            for name in ("d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s", "g_optimizer_s"):
                assert all(t > 0 for t in phases[name]), name
        records = summarize(result["collectives"], 2)
        buckets = gradient_buckets(records)
        reducers = {c["phase"][0]: c["owner"] for c in result["collectives"] if c["op"] == "allreduce"}
        logged = result["ddp_buckets"]
        assert len(logged) == 2 and reducers["d"] != reducers["g"]
        # each network's all-reduces are the buckets its DDP logged (D is frozen in the G step)
        assert buckets["discriminator"] == logged[reducers["d"]]
        assert buckets["generator"] == logged[reducers["g"]]
        if example == "wgan_gp.py":
            assert result["d_steps"] == [2, 2]
            assert buffer_bytes(records) == {"discriminator": 0, "generator": 0}
        elif world == 2:  # the generator's BatchNorm statistics, once a step: 2 x (64 + 32) floats, 2 counters
            assert buffer_bytes(records) == {"discriminator": 0, "generator": 2 * 96 * 4 + 2 * 8}
        assert set(result["costs"]) >= {"d_forward_s", "g_backward_s"}
        assert all(c["flops"] > 0 and c["bytes"] > 0 for name, c in result["costs"].items() if name.endswith(("forward_s", "backward_s")))


def test_a_script_under_torchrun_runs_on_every_rank_and_world_size_1_on_its_own(tmp_path):
    """The multi-node path on one machine: 2 ranks started by torchrun each run the script
    (world size 1: rank 0 alone, in a world of its own), rank 0 writes the profile."""
    from gansim.calibration.profile.schema import load_profile

    out = tmp_path / "profile.json"
    res = calibrate_under_torchrun(tmp_path, [
        "--script", str(EXAMPLES / "wgan_gp.py"), "--world-sizes", "1,2", "--steps", "3", "--warmup", "1",
        "--sizes", "4K:64K", "--sweep-iters", "2", "--repeats", "1", "--timeout-s", "60", "--out", str(out),
        "--", *SMALL["wgan_gp.py"]])
    assert res.returncode == 0, res.stderr[-3000:]
    p = load_profile(out)
    assert p.provenance.launcher == "torchrun" and p.provenance.source == "script"
    assert p.provenance.batch_size == 8 and p.provenance.d_steps == 2
    assert [len(p.measured.samples[w]) for w in ("1", "2")] == [1, 2]  # ranks that ran the script
    assert len(p.measured.compute_samples["2"]) == 2  # the two one-rank copies at once
    # one bucket each (DDP's first bucket holds up to 1 MiB, then 25 MiB: D's 2.1 MB is one)
    d, g = p.fit.gradient_buckets.discriminator, p.fit.gradient_buckets.generator
    assert sum(d) == 4 * (784 * 512 + 512 + 512 * 256 + 256 + 256 + 1)
    assert sum(g) == 4 * (64 * 256 + 256 + 256 * 512 + 512 + 512 * 784 + 784)
    assert not (tmp_path / "profile.partial.json").exists()


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(
        "import torch, torch.distributed as dist\n"
        "from gansim.calibration import phase, step\n"
        "dist.init_process_group('gloo')\n"
        "for i in range(10):\n"
        "    step()\n" + body)
    return str(path)


def test_a_script_crashing_on_rank_1_names_the_rank_and_its_own_last_line(tmp_path, capsys):
    out = tmp_path / "profile.json"
    out.write_text("{}")
    script = _script(tmp_path, "    with phase('d_forward'):\n"
                               "        if dist.get_rank() == 1 and i == 2:\n"
                               "            raise ValueError('bad batch')\n")
    code = main(["calibrate", "--script", script, "--world-sizes", "2", "--repeats", "1", "--steps", "4",
                 "--warmup", "1", "--timeout-s", "30", "--out", str(out)])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 1
    assert "rank 1 failed in phase d_forward_s" in last and "train.py:8" in last and "ValueError: bad batch" in last
    assert out.read_text() == "{}"  # the earlier profile untouched


def test_a_script_whose_argument_parser_exits_says_it_exited_with_its_status(tmp_path, capsys):
    """argparse prints its own usage and exits with status 2: the last line says the script
    exited with that status, not a bare "SystemExit: 2"."""
    script = tmp_path / "needs_args.py"
    script.write_text("import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--data', "
                      "required=True)\nparser.parse_args()\n")
    code = main(["calibrate", "--script", str(script), "--world-sizes", "1,2", "--repeats", "1", "--steps", "2",
                 "--warmup", "1", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 1 and "needs_args.py:4: the script exited with status 2" in last, err


def test_a_phase_opened_and_never_closed_is_one_line(tmp_path, capsys):
    out = tmp_path / "profile.json"
    out.write_text("{}")
    script = _script(tmp_path, "    p = phase('d_forward'); p.__enter__()\n")
    code = main(["calibrate", "--script", script, "--world-sizes", "2", "--repeats", "1", "--steps", "4",
                 "--warmup", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = err.strip().splitlines()[-1]  # progress above it, the error on one line
    assert line.startswith("gansim: error:") and "'d_forward' was opened in step 0 and not closed" in line
    assert out.read_text() == "{}"


def test_a_script_that_cannot_be_confined_to_its_world_is_refused(tmp_path, capsys):
    path = tmp_path / "train.py"
    path.write_text("import torch.distributed as dist\n"
                    "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:1', world_size=8, rank=0)\n")
    out = tmp_path / "profile.json"
    code = main(["calibrate", "--script", str(path), "--world-sizes", "1,2", "--repeats", "1", "--steps", "3",
                 "--warmup", "1", "--out", str(out)])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and line.startswith("gansim: error:")
    assert "init_method='tcp://127.0.0.1:1', world_size=8 (gansim gives WORLD_SIZE=1)" in line
    assert "cannot be confined" in line and not out.exists()


def test_script_flags_are_checked(tmp_path, capsys):
    line = run_bad(capsys, ["calibrate", "--script", str(tmp_path / "missing.py")])
    assert "--script" in line and "does not exist" in line
    assert "unexpected arguments" in run_bad(capsys, ["calibrate", "--", "--lr", "1"])
    (tmp_path / "t.py").write_text("")
    assert "--device-tflops" in run_bad(capsys, ["calibrate", "--script", str(tmp_path / "t.py"),
                                                 "--device-tflops", "-1"])


def test_a_module_of_a_package_is_run_as_python_m_runs_it(tmp_path, monkeypatch, capsys):
    """A training script inside a package, importing its siblings relatively (what
    `torchrun -m gan.train` runs): --script gan.train runs it as a module from the working
    directory, and the profile says so. Names that are no module get one line each."""
    package = tmp_path / "gan"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(
        "from torch import nn\n"
        "def make():\n"
        "    return (nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)),\n"
        "            nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 1)))\n")
    (package / "train.py").write_text(UNMARKED_GAN.replace(
        "G = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)))\n"
        "D = DDP(nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 1)))\n",
        "from .nets import make\nG, D = (DDP(m) for m in make())\n"))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "p.json"
    code = main(["calibrate", "--script", "gan.train", "--world-sizes", "1,2", "--steps", "4", "--warmup", "1",
                 "--repeats", "1", "--sizes", "4K:8K", "--sweep-iters", "2", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    from gansim.calibration.profile.schema import load_profile

    profile = load_profile(out)
    assert profile.provenance.model == "script:-m gan.train" and profile.provenance.d_steps == 2
    assert profile.fit.gradient_buckets.generator == [4 * (8 * 32 + 32 + 32 * 16 + 16)]
    for name, why in (("gan.missing", "no file or module 'gan.missing'"), ("gan", "has no __main__ module"),
                      ("nopkg.train", "cannot be found")):
        line = run_bad(capsys, ["calibrate", "--script", name, "--out", str(out)])
        assert "--script" in line and why in line, line


def test_markers_are_no_ops_outside_gansim():
    from gansim.calibration import phase, step
    from gansim.calibration.ranks import instrument

    assert instrument._recorder is None
    with phase("not even a phase name"):
        step(batch_size=3)
    assert os.environ.get("TORCHELASTIC_USE_AGENT_STORE") is None


@pytest.mark.parametrize("ending", ["", "import sys\nsys.exit(0)\n", "raise SystemExit\n"])
def test_a_script_that_ends_without_marking_steps_is_told_to_mark_them(tmp_path, capsys, ending):
    """A script that never calls step() and ends (falling off its end, sys.exit(0), a bare
    SystemExit) gets the line that says how to mark it, not a failure of its own."""
    script = tmp_path / "unmarked.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\nx = sum(range(10))\n" + ending)
    code = main(["calibrate", "--script", str(script), "--world-sizes", "1,2", "--steps", "2", "--warmup", "1",
                 "--repeats", "1", "--out", str(tmp_path / "p.json")])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "the script ended after 0 step() call(s)" in line and "gansim.calibration.step()" in line


def test_a_script_that_starts_its_own_processes_is_told_to_run_one_rank(tmp_path, capsys):
    """The pre-torchrun pattern: the script's main starts its ranks with
    torch.multiprocessing.spawn, so nothing trains in the process gansim times; the line says
    why and what to give instead, not to add markers."""
    script = tmp_path / "spawner.py"
    script.write_text(
        "import torch.multiprocessing as mp\n"
        "def worker(rank, world):\n"
        "    pass\n"
        "if __name__ == '__main__':\n"
        "    mp.spawn(worker, args=(1,), nprocs=1)\n")
    code = main(["calibrate", "--script", str(script), "--world-sizes", "1,2", "--steps", "2", "--warmup", "1",
                 "--repeats", "1", "--out", str(tmp_path / "p.json")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "never called torch.distributed.init_process_group()" in lines[-1]
    assert "torch.multiprocessing.spawn" in lines[-1] and not (tmp_path / "p.json").exists()


UNMARKED_GAN = """
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(0)
G = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)))
D = DDP(nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 1)))
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
for i in range(1000):  # no gansim markers: a critic step a batch, the generator every 2nd
    opt_d.zero_grad()
    (D(G(torch.randn(16, 8)).detach()).mean() - D(torch.randn(16, 16)).mean()).backward()
    opt_d.step()
    if i % 2 == 1:
        for p in D.parameters():
            p.requires_grad_(False)
        opt_g.zero_grad()
        (-D(G(torch.randn(16, 8))).mean()).backward()
        opt_g.step()
        for p in D.parameters():
            p.requires_grad_(True)
"""


def test_a_script_that_sets_more_torch_threads_than_cores_is_told_so(tmp_path, capsys):
    """torch.set_num_threads in the script wins over --threads: with more threads than the
    machine has cores, its ranks slow one another, and the calibration says so once."""
    script = tmp_path / "threads.py"
    script.write_text("import os, torch\ntorch.set_num_threads(os.cpu_count() + 1)\n" + UNMARKED_GAN)
    code = main(["calibrate", "--script", str(script), "--world-sizes", "1,2", "--steps", "3", "--warmup", "1",
                 "--repeats", "1", "--sizes", "4K:8K", "--sweep-iters", "2", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "torch.set_num_threads" in line]
    assert len(said) == 1 and f"sets torch to {os.cpu_count() + 1} threads per rank" in said[0], err[-2000:]
    assert code in (0, 1)  # a machine this oversubscribed may fit figures out of range: that is said too


def test_a_script_without_markers_is_timed_from_its_backward_and_optimizer_calls(tmp_path):
    """No step() or phase(): each optimizer step closes its network's step (its backward the
    backward() call, its optimizer phase the step), the optimizer that steps last before the
    first steps again is G, and a training step ends with G's step: 2 critic steps, each
    network's all-reduces its own DDP's buckets."""
    script = tmp_path / "unmarked.py"
    script.write_text(UNMARKED_GAN)
    cfg = RunConfig(steps=4, warmup=1, timeout_s=60)
    for world in (1, 2):
        result = run_local(cfg, world, (), script=ScriptSpec(str(script), ()))["script"]
        assert result["d_steps"] == [2, 2, 2] and result["batch_size"] == 16  # what G and D take
        for r in result["ranks"]:
            for name in ("d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s", "g_optimizer_s"):
                assert len(r["phases"][name]) == 3 and all(t > 0 for t in r["phases"][name]), name
            steps, phases = r["phases"][STEP], r["phases"]
            for k in range(3):  # the phases fill the step but for the hooks' own time (d_* are per D step)
                inside = sum(phases[n][k] * (2 if n.startswith("d_") else 1) for n in phases if n.endswith(
                    ("forward_s", "backward_s", "optimizer_s")))
                assert 0.9 * steps[k] < inside <= steps[k]
        if world == 2:
            buckets = gradient_buckets(summarize(result["collectives"], 3))
            reducers = {c["phase"][0]: c["owner"] for c in result["collectives"] if c["op"] == "allreduce"}
            assert buckets["discriminator"] == result["ddp_buckets"][reducers["d"]]
            assert buckets["generator"] == result["ddp_buckets"][reducers["g"]]


def test_a_loop_that_steps_the_generator_first_names_its_networks_by_their_graphs(tmp_path):
    """G steps first in each iteration, with D's parameters frozen meanwhile: the generator is
    still the network whose backward ran through the other's layers (their saved weights), so
    G's phases and its DDP's bucket (816 float32 parameters) are named g, D's (433) d."""
    script = Path(__file__).parent / "data" / "gan_loops.py"
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 2, (),
                       script=ScriptSpec(str(script), ("g_first",)))["script"]
    assert result["d_steps"] == [1, 1, 1]
    buckets = gradient_buckets(summarize(result["collectives"], 3))
    assert buckets["generator"] == [4 * (8 * 32 + 32 + 32 * 16 + 16)]
    assert buckets["discriminator"] == [4 * (16 * 24 + 24 + 24 + 1)]


def test_two_discriminators_are_d_steps_of_one_gan_step_without_markers():
    """CycleGAN's three optimizers (both generators in one, a discriminator each): the
    generators' is the one whose backward graph holds another's parameters, so each
    training step is its G step and two D steps; the G step all-reduces both generators'
    buckets (and the discriminators', which it leaves trainable), a D step D_A's."""
    script = Path(__file__).parent / "data" / "gan_loops.py"
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 2, (),
                       script=ScriptSpec(str(script), ("two_discriminators",)))["script"]
    assert result["d_steps"] == [2, 2, 2] and result["batch_size"] == 16
    buckets = gradient_buckets(summarize(result["collectives"], 3))
    generator, d_a, d_b = 16 * 32 + 32 + 32 * 16 + 16, 16 * 24 + 24 + 24 + 1, 16 * 20 + 20 + 20 + 1
    assert sorted(buckets["generator"]) == sorted([4 * generator, 4 * generator, 4 * d_a, 4 * d_b])
    assert buckets["discriminator"] == [4 * d_a]


def test_a_script_whose_data_loader_starts_worker_processes_runs_as_under_torchrun():
    """A DataLoader's workers are children of the rank (which a daemonic process may not
    have), started the platform's way as under torchrun: a spawned worker would run the
    whole unguarded script again and die."""
    script = Path(__file__).parent / "data" / "gan_loops.py"
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 1, (),
                       script=ScriptSpec(str(script), ("loader_workers",)))["script"]
    assert result["d_steps"] == [1, 1, 1] and result["batch_size"] == 16
    buckets = gradient_buckets(summarize(result["collectives"], 3))
    assert buckets["discriminator"] == [4 * (16 * 24 + 24 + 24 + 1)]


def test_an_optimizer_stepped_inside_another_optimizers_step_is_part_of_that_step():
    """ZeroRedundancyOptimizer steps an Adam of its own on its shard inside its step: that
    inner Adam is not a third network, so each training step is still one D and one G step,
    each all-reducing its own network's bucket."""
    script = Path(__file__).parent / "data" / "gan_loops.py"
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 2, (),
                       script=ScriptSpec(str(script), ("zero",)))["script"]
    assert result["d_steps"] == [1, 1, 1]
    buckets = gradient_buckets(summarize(result["collectives"], 3))
    assert buckets["discriminator"] == [4 * (16 * 24 + 24 + 24 + 1)]
    assert 4 * (8 * 32 + 32 + 32 * 16 + 16) in buckets["generator"]


def test_a_rank_whose_libraries_abort_in_the_interpreters_teardown_keeps_its_results(tmp_path):
    """A library object that aborts the process when the interpreter is torn down (as a C++
    thread left joinable does: `terminate called without an active exception`, SIGABRT),
    after the rank delivered its results: each rank leaves without that teardown, its exit
    handlers run, and the run is whole."""
    script = tmp_path / "aborts_at_teardown.py"
    marker = tmp_path / "exit-handlers-ran"
    script.write_text(
        "import atexit, builtins, os, pathlib, torch.distributed\n"
        "class AbortsAtTeardown:\n"
        "    def __del__(self):\n"
        "        os.abort()\n"
        "builtins._aborts_at_teardown = AbortsAtTeardown()\n"
        f"atexit.register(lambda: pathlib.Path({str(marker)!r} + os.environ['RANK']).write_text('ran'))\n"
        + UNMARKED_GAN)
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 2, (), script=ScriptSpec(str(script), ()))["script"]
    assert result["d_steps"] == [2, 2, 2]  # UNMARKED_GAN's, as when nothing aborts
    assert [(tmp_path / f"exit-handlers-ran{rank}").read_text() for rank in (0, 1)] == ["ran", "ran"]


def test_a_ddp_hook_that_compresses_records_what_it_puts_on_the_wire(tmp_path):
    """fp16_compress_hook all-reduces each bucket cast to half precision: the recorded
    all-reduce is that half-size tensor, not the float32 bucket DDP hands the hook."""
    script = tmp_path / "fp16.py"
    script.write_text(UNMARKED_GAN.replace(
        "opt_g, opt_d =",
        "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
        "G.register_comm_hook(None, default_hooks.fp16_compress_hook)\n"
        "D.register_comm_hook(None, default_hooks.fp16_compress_hook)\n"
        "opt_g, opt_d ="))
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 2, (), script=ScriptSpec(str(script), ()))["script"]
    buckets = gradient_buckets(summarize(result["collectives"], 3))
    assert buckets["discriminator"] == [2 * (16 * 24 + 24 + 24 + 1)]
    assert buckets["generator"] == [2 * (8 * 32 + 32 + 32 * 16 + 16)]
    assert all(c["owner"].startswith("ddp") for c in result["collectives"])


COUNTED_GAN = """
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
MARKERS
dist.init_process_group("gloo")
torch.manual_seed(0)
G = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)))
D = DDP(nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 1)))
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
for i in range(1000):
    STEP
    real, z = torch.randn(16, 16), torch.randn(16, 8)
    with phase("d_forward"):
        loss = D(G(z).detach()).mean() - D(real).mean()
    with phase("d_backward"):
        opt_d.zero_grad(); loss.backward()
    with phase("d_optimizer"):
        opt_d.step()
    with phase("g_forward"):
        loss = -D(G(z)).mean()
    with phase("g_backward"):
        opt_g.zero_grad(); loss.backward()
    with phase("g_optimizer"):
        opt_g.step()
"""


def test_an_unmarked_script_counts_each_phases_flops_as_marking_it_would(tmp_path):
    """The roofline to another GPU needs each phase's FLOPs: a script that marks nothing has
    them counted in a warm-up step from its own calls, the same as the same loop marked."""
    marked = COUNTED_GAN.replace("MARKERS", "from gansim.calibration import phase, step").replace("STEP", "step()")
    unmarked = re.sub(r'with phase\("\w+"\):', "if True:", COUNTED_GAN).replace("MARKERS\n", "").replace("STEP", "pass")
    costs = {}
    for name, text in (("marked", marked), ("unmarked", unmarked)):
        script = tmp_path / f"{name}.py"
        script.write_text(text)
        result = run_local(RunConfig(steps=5, warmup=3, timeout_s=60), 1, (), script=ScriptSpec(str(script), ()))["script"]
        costs[name] = {phase: c["flops"] for phase, c in result["costs"].items()}
    phases = {f"{net}_{part}_s" for net in "dg" for part in ("forward", "backward", "optimizer")}
    assert set(costs["unmarked"]) == phases and costs["unmarked"]["g_backward_s"] > 0
    assert costs["unmarked"] == {phase: costs["marked"][phase] for phase in phases}


def test_the_graph_of_a_generators_loss_holds_the_discriminators_weights():
    """What tells the networks apart without markers: a backward graph's saved tensors and
    leaves. D's loss on a detached fake holds none of G's parameters; G's loss holds D's
    weights even with D frozen, and none of them when D is not in its graph at all."""
    import torch
    from torch import nn

    from gansim.calibration.ranks.script import graph_storage

    G, D = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)), nn.Sequential(nn.Linear(16, 1))
    g_params, d_params = ({p.data_ptr() for p in m.parameters()} for m in (G, D))
    fake = G(torch.randn(4, 8))
    assert not graph_storage(D(fake.detach()).mean()) & g_params
    D.requires_grad_(False)
    held = graph_storage(-D(fake).mean())
    assert D[0].weight.data_ptr() in held and held & g_params
    assert not graph_storage(fake.mean()) & d_params


def test_markers_after_optimizer_steps_of_the_scripts_own_set_up_win(tmp_path):
    """A script that steps its optimizer before its marked loop (a warm-up of its own, longer
    than the run): it imports gansim's markers, so only its marks count."""
    script = tmp_path / "late.py"
    script.write_text(
        "import torch\n"
        "from gansim.calibration import phase, step\n"
        "m = torch.nn.Linear(4, 1); opt = torch.optim.SGD(m.parameters(), 0.1)\n"
        "for _ in range(5):\n"
        "    opt.zero_grad(); m(torch.randn(2, 4)).sum().backward(); opt.step()\n"
        "for _ in range(10):\n"
        "    step(batch_size=2)\n"
        "    with phase('g_forward'):\n"
        "        loss = m(torch.randn(2, 4)).sum()\n"
        "    with phase('g_backward'):\n"
        "        opt.zero_grad(); loss.backward()\n"
        "    with phase('g_optimizer'):\n"
        "        opt.step()\n")
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 1, (), script=ScriptSpec(str(script), ()))["script"]
    phases = result["ranks"][0]["phases"]
    assert result["batch_size"] == 2 and len(phases[STEP]) == 3
    assert all(t > 0 for t in phases["g_forward_s"]) and "d_forward_s" not in phases


def test_marks_that_come_after_found_steps_replace_them():
    """Markers that gansim cannot see in the script's own text (imported by a helper module)
    and that start only after AutoPhases found steps: what it found is dropped, and the
    marked steps count from the first. Steps marked without phases keep AutoPhases finding
    the phases, inside the script's steps; a phase label then turns it off."""
    from gansim.calibration.ranks.script import AutoPhases, StepRecorder

    rec = StepRecorder(steps=10, warmup=0)
    auto, optimizer = AutoPhases(rec), object()
    auto.made(optimizer)
    for _ in range(3):
        auto.step_started(optimizer)
        auto.step_ended(optimizer)
    assert rec.index == 2 and rec.samples["g_optimizer_s"] and rec.auto_steps == 3
    rec.step(batch_size=2)  # the script's own first step()
    assert rec.index == 0 and rec.samples == {} and rec.marked and rec.batch_size == 2
    auto.step_started(optimizer)
    auto.step_ended(optimizer)  # a phase of the script's step 0, which only the script ends
    assert rec.index == 0 and set(rec.current) == {"g_forward_s", "g_backward_s", "g_optimizer_s"}
    rec.step()
    rec.open("g_forward")  # the script labels a phase: what AutoPhases found is dropped
    assert rec.phases_marked and rec.index == -1 and rec.samples == {}
    rec.close("g_forward")
    rec.step()
    auto.step_started(optimizer)
    auto.step_ended(optimizer)  # AutoPhases stands aside from now on
    assert rec.index == 0 and rec.current == {}


LABELLED_GAN = """
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function
dist.init_process_group("gloo")
G = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)))
D = DDP(nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 1)))
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
for i in range(100000):  # phases labelled, no step() call
    for _ in range(2):
        with record_function("data"):
            real = torch.randn(12, 16)
        with record_function("d_forward"):
            loss = D(G(torch.randn(12, 8)).detach()).mean() - D(real).mean()
        with record_function("d_backward"):
            opt_d.zero_grad(); loss.backward()
        with record_function("d_optimizer"):
            opt_d.step()
    with record_function("g_forward"):
        loss = -D(G(torch.randn(12, 8))).mean()
    with record_function("g_backward"):
        opt_g.zero_grad(); loss.backward()
    with record_function("g_optimizer"):
        opt_g.step()
"""


def test_a_script_that_labels_its_phases_and_calls_no_step_has_steps_from_its_labels(tmp_path):
    """A step begins at the first labelled phase, and again where data or a d_* phase opens
    after a g_* phase: two D steps (with their data) and one G step a training step, the
    batch the first tensor a DDP module took. Without this the script never starts a step
    and runs until the hang timeout."""
    script = tmp_path / "labelled.py"
    script.write_text(LABELLED_GAN)
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 1, (), script=ScriptSpec(str(script), ()))["script"]
    assert result["d_steps"] == [2, 2, 2] and result["batch_size"] == 12
    for name in ("data_s", "d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s", "g_optimizer_s"):
        assert len(result["ranks"][0]["phases"][name]) == 3
        assert all(t > 0 for t in result["ranks"][0]["phases"][name]), name


STEPS_MARKED_GAN = """
import contextlib, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from gansim.calibration import step
dist.init_process_group("gloo")
G = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16)))
D = DDP(nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 1)))
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
for i in range(100000):  # 3 micro-batches of 4 a step, accumulated under no_sync()
    step(batch_size=12)
    opt_d.zero_grad()
    for k in range(3):
        with D.no_sync() if k < 2 else contextlib.nullcontext():
            (D(G(torch.randn(4, 8)).detach()).mean() - D(torch.randn(4, 16)).mean()).backward()
    opt_d.step()
    D.requires_grad_(False)
    opt_g.zero_grad()
    for k in range(3):
        with G.no_sync() if k < 2 else contextlib.nullcontext():
            (-D(G(torch.randn(4, 8))).mean()).backward()
    opt_g.step()
    D.requires_grad_(True)
"""


def test_a_script_that_marks_only_its_steps_has_its_phases_found_within_them(tmp_path):
    """The way docs/calibration.md tells a loop that accumulates micro-batches to give its
    batch: step(batch_size=N) and no phase(). The steps are the script's (its batch, not a
    micro-batch's), the phases found from its backward() and optimizer calls, and each
    network's all-reduces its DDP's whole bucket (as many as DDP issues around no_sync())."""
    script = tmp_path / "accumulating.py"
    script.write_text(STEPS_MARKED_GAN)
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 2, (), script=ScriptSpec(str(script), ()))["script"]
    assert result["d_steps"] == [1, 1, 1] and result["batch_size"] == 12
    for r in result["ranks"]:
        phases = r["phases"]
        for name in ("d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s", "g_optimizer_s"):
            assert len(phases[name]) == 3 and all(t > 0 for t in phases[name]), name
        for k in range(3):
            inside = sum(phases[n][k] for n in phases if n.endswith(("forward_s", "backward_s", "optimizer_s")))
            assert inside <= phases[STEP][k]
    buckets = gradient_buckets(summarize(result["collectives"], 3))
    assert set(buckets["discriminator"]) == {4 * (16 * 24 + 24 + 24 + 1)}
    assert set(buckets["generator"]) == {4 * (8 * 32 + 32 + 32 * 16 + 16)}


def test_generator_steps_in_a_row_are_one_gan_step_without_markers():
    """D then G, and every 2nd iteration G again (its own regularisation step): the two G
    steps in a row belong to one training step, which closes when D steps next."""
    from gansim.calibration.ranks.script import AutoPhases, StepRecorder

    rec = StepRecorder(steps=100, warmup=0)
    auto, d, g = AutoPhases(rec), object(), object()
    auto.made(d)
    auto.made(g)

    def opt_step(optimizer):
        auto.step_started(optimizer)
        auto.step_ended(optimizer)
    for i in range(9):
        opt_step(d)
        for _ in range(1 + i % 2):
            opt_step(g)
    # G is known at iteration 1's D step; the steps close at iterations 2-8's D steps, the
    # first of them at iteration 1's last G step: six whole training steps, the 7th under way
    assert rec.auto_steps == 7 and rec.d_steps == [1] * 6
    assert [len(rec.samples["g_optimizer_s"]), len(rec.samples["d_optimizer_s"])] == [6, 6]
    # iteration 8 (one G step) under way: each phase once
    assert rec.occurrence == dict.fromkeys(("d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s",
                                            "g_backward_s", "g_optimizer_s"), 1)


MANUAL_ALLREDUCE_GAN = """
import torch, torch.distributed as dist
from torch import nn
dist.init_process_group("gloo")
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
D = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 1))
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())

def average(net):  # no DDP: each gradient all-reduced by hand after the backward
    for p in net.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()

for i in range(1000):
    for _ in range(2):
        opt_d.zero_grad()
        (D(G(torch.randn(16, 8)).detach()).mean() - D(torch.randn(16, 16)).mean()).backward()
        average(D)
        opt_d.step()
    opt_g.zero_grad()
    (-D(G(torch.randn(16, 8))).mean()).backward()
    average(G)
    opt_g.step()
"""


def test_all_reduces_issued_by_hand_between_backward_and_step_are_each_steps_own(tmp_path):
    """Without markers a GAN step ends when the next one's first D step has stepped, so the
    all-reduces of that D step come before the step is known to have begun: they are the new
    step's, each network's once per D or G step (the first D step's were kept in the step
    before, and the last, never-ended step's were left to no network: 0.67 and 0.33 a step).
    Issued after the backward, they are in the optimizer phase, whose time they take."""
    script = tmp_path / "manual.py"
    script.write_text(MANUAL_ALLREDUCE_GAN)
    result = run_local(RunConfig(steps=4, warmup=1, timeout_s=60), 2, (), script=ScriptSpec(str(script), ()))["script"]
    assert result["d_steps"] == [2, 2, 2]
    assert result["batch_size"] == 16  # no DDP: what the first trained network took
    summary = summarize(result["collectives"], 3)
    d_bytes, g_bytes = 4 * (16 * 24 + 24 + 24 + 1), 4 * (8 * 32 + 32 + 32 * 16 + 16)
    per_step = {}
    for c in summary:
        per_step[(c.phase, c.occurrence)] = per_step.get((c.phase, c.occurrence), 0) + c.bytes * c.per_step
    assert per_step == {("d_optimizer_s", 1): d_bytes, ("d_optimizer_s", 2): d_bytes, ("g_optimizer_s", 1): g_bytes}
    buckets = gradient_buckets(summary)
    assert sorted(buckets["discriminator"]) == sorted(4 * n for n in (16 * 24, 24, 24, 1))
    assert sorted(buckets["generator"]) == sorted(4 * n for n in (8 * 32, 32, 32 * 16, 16))
