"""`gansim calibrate --script`: the shipped examples run at world sizes 1 and 2 (gloo), what
they all-reduce equals the buckets DDP itself formed, and broken scripts get one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the calibrate extra; installed in CI

from gansim.calibration.communication import buffer_bytes, gradient_buckets, summarize  # noqa: E402
from gansim.calibration.launch import run_local  # noqa: E402
from gansim.calibration.phases import STEP  # noqa: E402
from gansim.calibration.run_config import RunConfig, ScriptSpec  # noqa: E402
from gansim.cli.main import main  # noqa: E402
from tests.cli_checks import run_bad  # noqa: E402

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


def test_script_flags_are_checked(tmp_path, capsys):
    line = run_bad(capsys, ["calibrate", "--script", str(tmp_path / "missing.py")])
    assert "--script" in line and "does not exist" in line
    assert "unexpected arguments" in run_bad(capsys, ["calibrate", "--", "--lr", "1"])
    (tmp_path / "t.py").write_text("")
    assert "--device-tflops" in run_bad(capsys, ["calibrate", "--script", str(tmp_path / "t.py"),
                                                 "--device-tflops", "-1"])


def test_markers_are_no_ops_outside_gansim():
    from gansim.calibration import instrument, phase, step

    assert instrument._recorder is None
    with phase("not even a phase name"):
        step(batch_size=3)
    assert os.environ.get("TORCHELASTIC_USE_AGENT_STORE") is None
