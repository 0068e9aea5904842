"""Shared assertions for the CLI tests."""

from __future__ import annotations

import os
import subprocess
import sys

from gansim.cli.main import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_bad(capsys, argv) -> str:
    """Run the CLI on bad input: it must exit 2 with exactly one line on stderr, no traceback."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def calibrate_under_torchrun(tmp_path, args, nproc: int = 2, timeout_s: float = 180):
    """`gansim calibrate ARGS` with `nproc` ranks started by torchrun on this machine (the
    multi-node path, on one node), run in tmp_path; returns the finished process."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                          "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "-m", "gansim", "calibrate", *args]
    return subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=timeout_s)
