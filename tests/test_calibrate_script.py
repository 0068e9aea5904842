"""`gansim calibrate --script`: the shipped examples run at world sizes 1 and 2 (gloo), what
they all-reduce equals the buckets DDP itself formed, and broken scripts get one line."""

from __future__ import annotations

import os
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
    script.write_text("x = sum(range(10))\n" + ending)
    code = main(["calibrate", "--script", str(script), "--world-sizes", "1,2", "--steps", "2", "--warmup", "1",
                 "--repeats", "1", "--out", str(tmp_path / "p.json")])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "the script ended after 0 step() call(s)" in line and "gansim.calibration.step()" in line
