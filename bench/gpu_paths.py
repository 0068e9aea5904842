#!/usr/bin/env python
"""The calibrator's GPU paths on this machine's first GPU, at world size 1 (all one GPU
allows): what docs/calibration.md reports of them. Needs CUDA, NCCL and gansim importable.

1. the rank path (`run_local` with train, compute, sweep and reduce, `backend: nccl`), DCGAN,
   in `ddp` and `flat` modes: the wall time and the mean step;
2. `--script`'s rank path on a DCGAN script with stock DDP and gansim's markers: the steps
   kept and each phase's mean;
3. a torch.profiler trace of a DCGAN DDP loop recorded by tests/data/h200/record_trace.py,
   imported as `--from-trace` does, beside the same loop's mean step unprofiled.

    python bench/gpu_paths.py [--steps 40]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

SCRIPT = '''
import os, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from gansim.calibration import phase, step
from gansim.calibration.ranks.models import build_model

local = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
dist.init_process_group("nccl", device_id=dev)
g, d, latent, shape = build_model("dcgan")
G = DDP(g.to(dev), device_ids=[local], broadcast_buffers=False)
D = DDP(d.to(dev), device_ids=[local], broadcast_buffers=False)
opt_d, opt_g = torch.optim.Adam(D.parameters(), lr=1e-4), torch.optim.Adam(G.parameters(), lr=1e-4)
bce, B = torch.nn.BCELoss(), 64
for _ in range(int(sys.argv[1])):
    step(batch_size=B)
    with phase("data"):
        real = torch.rand(B, *shape, device=dev) * 2 - 1
    with phase("d_forward"):
        with torch.no_grad():
            fake = G(torch.randn(B, latent, device=dev))
        out_real, out_fake = D(real), D(fake)
        loss_d = bce(out_real, torch.ones_like(out_real)) + bce(out_fake, torch.zeros_like(out_fake))
    with phase("d_backward"):
        opt_d.zero_grad()
        loss_d.backward()
    with phase("d_optimizer"):
        opt_d.step()
    for p in D.parameters():
        p.requires_grad_(False)
    with phase("g_forward"):
        out = D(G(torch.randn(B, latent, device=dev)))
        loss_g = bce(out, torch.ones_like(out))
    with phase("g_backward"):
        opt_g.zero_grad()
        loss_g.backward()
    with phase("g_optimizer"):
        opt_g.step()
    for p in D.parameters():
        p.requires_grad_(True)
dist.destroy_process_group()
'''


def mean_ms(values: list[float]) -> str:
    return f"{statistics.fmean(values) * 1e3:.2f} ms"


def rank_path(steps: int) -> None:
    from gansim.calibration.ranks.launch import run_local
    from gansim.calibration.ranks.run_config import RunConfig

    for mode in ("ddp", "flat"):
        cfg = RunConfig(model="dcgan", backend="nccl", mode=mode, batch_size=64, steps=steps, warmup=4,
                        sweep_sizes=(4096, 1 << 20, 64 << 20), sweep_iters=10, timeout_s=120.0)
        start = time.perf_counter()
        result = run_local(cfg, 1, ("train", "compute", "sweep", "reduce"))
        phases = result["train"]["ranks"][0]["phases"]
        print(f"rank path, {mode}: train, compute, sweep and reduce ran in {time.perf_counter() - start:.1f} s; "
              f"step {mean_ms(phases['step_s'])} over {len(phases['step_s'])} steps")


def script_path(steps: int, folder: Path) -> None:
    from gansim.calibration.ranks.launch import run_local
    from gansim.calibration.ranks.run_config import RunConfig, ScriptSpec

    script = folder / "dcgan_script.py"
    script.write_text(SCRIPT)
    cfg = RunConfig(backend="nccl", steps=steps, warmup=5, timeout_s=120.0)
    # the script runs one step() more than the calibrator keeps: the last closes the one before
    result = run_local(cfg, 1, ("script",), script=ScriptSpec(path=str(script), args=(str(steps + 10),)))
    phases = result["script"]["ranks"][0]["phases"]
    kept = len(next(iter(phases.values())))
    print(f"--script path: {kept} steps kept; " + ", ".join(f"{name} {mean_ms(v)}" for name, v in phases.items()))


def trace_and_unprofiled(folder: Path) -> None:
    from gansim.calibration.traces.importer import import_traces

    path = folder / "trace.json"
    recorder = Path(__file__).resolve().parent.parent / "tests" / "data" / "h200" / "record_trace.py"
    done = subprocess.run([sys.executable, str(recorder), str(path), "--unprofiled", "50"], check=True,
                          capture_output=True, text=True)
    unprofiled = float(next(line for line in done.stdout.splitlines() if line.startswith("unprofiled")).split()[1])
    profile = import_traces([str(path)])
    phases = profile.measured.phases["1"]
    print(f"--from-trace: device {profile.provenance.device}, batch {profile.provenance.batch_size}; "
          f"profiled step {phases['step_s'] * 1e3:.2f} ms (host time with no GPU phase {phases['data_s'] * 1e3:.2f} ms); "
          f"the same loop unprofiled: {unprofiled * 1e3:.2f} ms a step (50 steps after 10)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=14, help="training steps of the rank path (default 14)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device here: the GPU paths need one", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    with tempfile.TemporaryDirectory(prefix="gansim-gpu-") as tmp:
        rank_path(args.steps)
        script_path(30, Path(tmp))
        trace_and_unprofiled(Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
