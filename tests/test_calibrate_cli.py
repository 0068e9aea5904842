"""gansim calibrate: flag validation (gansim.api.calibration, which the command passes its flags
to), no torch at import time, an end-to-end tiny calibration."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from gansim.api.calibration import INSTALL_HINT, CalibrateRequest, parse_sizes, validate_request
from gansim.cli.calibrate import register, request_arguments
from gansim.cli.main import main
from gansim.core.errors import UserInputError
from gansim.training.workloads import ARCHITECTURES
from tests.cli_checks import calibrate_under_torchrun

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(*argv):
    parser = argparse.ArgumentParser(prog="gansim")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    return parser.parse_args(["calibrate", *argv])


def validate_args(args):
    """What the command checks of its flags: the API's arguments from them, checked."""
    return validate_request(CalibrateRequest(**request_arguments(args)))


def test_defaults_validate(tmp_path):
    v = validate_args(parse("--out", str(tmp_path / "p.json")))
    assert v["world_sizes"] == (1, 2)
    assert v["backend"] == "gloo" and v["model"] == "paper-mlp-gan" and v["mode"] == "ddp"
    assert v["batch_size"] == 64 and v["steps"] == 30 and v["warmup"] == 5
    assert v["sweep_sizes"][0] == 4096 and v["sweep_sizes"][-1] == 64 * 1024 * 1024
    assert len(v["sweep_sizes"]) == 15
    assert v["threads"] == 1 and v["timeout_s"] == 120.0


@pytest.mark.parametrize("argv,field", [
    (["--world-sizes", "1,x"], "--world-sizes"),
    (["--world-sizes", "0,2"], "--world-sizes"),
    (["--world-sizes", "1"], "--world-sizes"),
    (["--world-sizes", "2,2"], "--world-sizes"),
    (["--world-sizes", ""], "--world-sizes"),
    (["--batch-size", "0"], "--batch-size"),
    (["--batch-size", "many"], "--batch-size"),
    (["--steps", "5", "--warmup", "5"], "--steps"),
    (["--warmup", "-1"], "--warmup"),
    (["--repeats", "0"], "--repeats"),
    (["--backend", "mpi"], "--backend"),
    (["--mode", "async"], "--mode"),
    (["--threads", "-2"], "--threads"),
    (["--timeout-s", "0"], "--timeout-s"),
    (["--timeout-s", "nan"], "--timeout-s"),
    (["--sizes", "64M:4K"], "--sizes"),
    (["--sizes", "4K"], "--sizes"),
    (["--sizes", "3:64"], "--sizes"),
    (["--sizes", "4K:4K"], "--sizes"),
    (["--out", "/no/such/dir/p.json"], "--out"),
])
def test_bad_flags_name_the_flag(argv, field):
    with pytest.raises(UserInputError) as err:
        validate_args(parse(*argv))
    assert err.value.field == field
    assert str(err.value).startswith(field)
    assert "\n" not in str(err.value)


def test_out_is_a_directory(tmp_path):
    with pytest.raises(UserInputError) as err:
        validate_args(parse("--out", str(tmp_path)))
    assert err.value.field == "--out"


def test_parse_sizes_units():
    assert parse_sizes("4K:16K") == (4096, 8192, 16384)
    assert parse_sizes("1M:4MiB")[-1] == 4 * 1024 * 1024


def test_cli_does_not_import_torch_and_explains_how_to_install():
    code = (
        "import sys; sys.modules['torch'] = None\n"  # makes `import torch` fail
        "import gansim.calibration, gansim.cli.calibrate, gansim.calibration.fit.measurements, gansim.calibration.profile.schema\n"
        "import gansim.calibration.ranks.run_config\n"
        "from gansim.core.errors import UserInputError\n"
        "import argparse\n"
        "p = argparse.ArgumentParser(); s = p.add_subparsers()\n"
        "gansim.cli.calibrate.register(s)\n"
        "a = p.parse_args(['calibrate', '--out', 'x.json'])\n"
        "try:\n"
        "    gansim.cli.calibrate.run_calibrate(a)\n"
        "except UserInputError as e:\n"
        "    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ERR" in out.stdout and INSTALL_HINT in out.stdout
    code2 = ("import sys, gansim.cli.calibrate, gansim.calibration.profile.schema, gansim.calibration.fit.measurements, "
             "gansim.calibration.ranks.run_config; print('torch' in sys.modules)")
    out2 = subprocess.run([sys.executable, "-c", code2], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert out2.stdout.strip() == "False", out2.stderr


def test_nccl_without_cuda_is_a_clear_user_error(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")  # never on the CPU-only CI machine
    from gansim.cli.calibrate import run_calibrate

    with pytest.raises(UserInputError) as err:
        run_calibrate(parse("--backend", "nccl", "--out", str(tmp_path / "p.json")))
    assert err.value.field == "--backend" and "CUDA" in str(err.value)


def test_end_to_end_tiny_calibration(tmp_path, capsys):
    pytest.importorskip("torch")
    from gansim.calibration.profile.schema import load_profile

    out = tmp_path / "profile.json"
    rc = main(["calibrate", "--world-sizes", "1,2", "--steps", "3", "--warmup", "1",
               "--batch-size", "8", "--sizes", "4K:1M", "--sweep-iters", "3", "--repeats", "2",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "busbw" in err and "algbw" in err and "[world size 2] (repeat 2/2)" in err
    # a 1 MiB sweep does not reach G's 8.2 MB of gradients
    assert "the sweep's largest all-reduce (1048576 B) is smaller than the largest gradient" in err
    assert "(8205536 B): beta is extrapolated" in err
    assert not (tmp_path / "profile.partial.json").exists()
    p = load_profile(out)
    assert p.provenance.backend == "gloo" and p.provenance.batch_size == 8
    assert p.provenance.world_sizes == [1, 2]
    assert set(p.measured.step_time_s) == {"1", "2"}
    assert [pt.bytes for pt in p.measured.allreduce] == [4096 * 2 ** k for k in range(9)]
    # three iterations of a 4 KiB-1 MiB sweep on a busy 2-core machine can make the
    # least-squares beta (or gamma) come out at its clamp of 0; recovering known values is
    # tested on synthetic timings in test_calibrate_fit.py
    assert p.fit.alpha_s >= 0 and p.fit.beta_s_per_byte >= 0 and p.fit.gamma_s_per_byte >= 0
    assert p.fit.alpha_s + p.fit.beta_s_per_byte > 0
    assert set(p.fit.core_sharing) == {"1", "2"}
    assert p.fit.gradient_bytes.generator == 4 * 2_051_384
    assert set(p.fit.residuals["2"]) == {str(4096 * 2 ** k) for k in range(9)}
    # two spawns per world size, pooled: 2 kept steps each, 3 sweep iterations each
    assert p.provenance.repeats == 2
    if os.path.exists("/proc/stat"):  # the CPU steal of each spawn, in repeat order
        assert {ws: len(v) for ws, v in p.measured.steal_fraction.items()} == {"1": 2, "2": 2}
    for ws in ("1", "2"):
        ranks = p.measured.samples[ws]
        assert len(ranks) == int(ws)
        assert all(len(r.phases["step_s"]) == 4 for r in ranks)
        assert p.measured.step_time_s[ws] == pytest.approx(
            sum(sum(r.phases["step_s"]) for r in ranks) / (4 * len(ranks)))
        assert all(len(r.phases["step_s"]) == 4 for r in p.measured.compute_samples[ws])
    assert len(p.measured.compute_solo_samples["2"][0].phases["step_s"]) == 4
    for pt in p.measured.allreduce:
        assert pt.iters == 6 and len(pt.samples_s) == 6
        assert pt.time_s == pytest.approx(sum(pt.samples_s) / 6)
    json.loads(out.read_text())
    # the phases' FLOPs, as the script path counts them: D's step forwards G once and D on the
    # real and the fake batch; torch's flop counter counts the matrix products (2 per MAC)
    arch = ARCHITECTURES.get("paper-mlp-gan")()
    matmul = {net: sum(la.macs_per_sample for la in n.layers if la.name.startswith("dense"))
              for net, n in (("g", arch.generator), ("d", arch.discriminator))}
    costs = p.measured.phase_costs
    assert costs["d_forward_s"].flops == 2 * 8 * (matmul["g"] + 2 * matmul["d"])
    assert costs["g_forward_s"].flops == 2 * 8 * (matmul["g"] + matmul["d"])
    assert all(costs[n].bytes > 0 for n in ("d_backward_s", "g_backward_s", "d_optimizer_s", "g_optimizer_s"))
    # so the built-in model's profile moves to a GPU by the roofline
    assert main(["predict", "--profile", str(out), "--world-sizes", "1,2", "--topology", "dgx-a100",
                 "--measured-tflops", "0.1", "--measured-memory-bandwidth-GBps", "20", "--json"]) == 0
    scaled = json.loads(capsys.readouterr().out)["predictions"][0]["compute_scaled_from"]
    assert scaled["to"] == "A100-SXM4-40GB" and set(scaled["phases"]) >= {"d_forward_s", "g_backward_s"}


def test_under_torchrun(tmp_path):
    """The multi-node path: ranks started by torchrun (here 2 on this machine), world size
    1 on a subgroup, rank 0 writes the profile."""
    pytest.importorskip("torch")
    from gansim.calibration.profile.schema import load_profile

    out = tmp_path / "profile.json"
    res = calibrate_under_torchrun(tmp_path, ["--world-sizes", "1,2", "--steps", "3", "--warmup", "1",
                                              "--batch-size", "8", "--sizes", "4K:1M", "--sweep-iters", "3",
                                              "--repeats", "1", "--timeout-s", "60", "--out", str(out)])
    assert res.returncode == 0, res.stderr[-3000:]
    p = load_profile(out)
    assert p.provenance.launcher == "torchrun"
    assert set(p.measured.step_time_s) == {"1", "2"}
    assert len(p.measured.samples["2"]) == 2
    assert not (tmp_path / "profile.partial.json").exists()
