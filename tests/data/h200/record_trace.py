"""How dcgan_ddp_nccl_world1_rank0.json.gz beside this file was recorded: gansim's `dcgan`
trained with DDP (NCCL, world size 1) on one NVIDIA H200 (torch 2.11.0+cu130, NCCL 2.28.9),
2026-11-29, through the project's device tool; 3 steps unprofiled, then a profiler schedule
of 1 wait, 2 warm-up and 6 active steps with record_shapes. Run as
`python record_trace.py OUT.json` with gansim importable; gzip the output. With
`--unprofiled N` (bench/gpu_paths.py) it first times N steps more without the profiler and
prints their mean."""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from gansim.calibration.ranks.models import build_model

out = sys.argv[1]
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29531")
torch.cuda.set_device(0)
device = torch.device("cuda", 0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=device)
G, D, latent, shape = build_model("dcgan")
# (buffers not broadcast: D runs twice before its backward, which DDP's in-place broadcast
# breaks on a GPU; see docs/calibration.md)
G = DDP(G.to(device), device_ids=[0], broadcast_buffers=False)
D = DDP(D.to(device), device_ids=[0], broadcast_buffers=False)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-4)
opt_g = torch.optim.Adam(G.parameters(), lr=1e-4)
loss = torch.nn.BCEWithLogitsLoss()
batch = 64


def step():
    real = torch.randn(batch, *shape, device=device)
    z = torch.randn(batch, latent, device=device)
    opt_d.zero_grad(set_to_none=True)
    fake = G(z).detach()
    out_real, out_fake = D(real), D(fake)
    d_loss = loss(out_real, torch.ones_like(out_real)) + loss(out_fake, torch.zeros_like(out_fake))
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad(set_to_none=True)
    out_g = D(G(z))
    g_loss = loss(out_g, torch.ones_like(out_g))
    g_loss.backward()
    opt_g.step()


for _ in range(3):
    step()
torch.cuda.synchronize()
if "--unprofiled" in sys.argv:
    timed = int(sys.argv[sys.argv.index("--unprofiled") + 1])
    for _ in range(7):  # (10 steps before the timed ones)
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(timed):
        step()
    torch.cuda.synchronize()
    print(f"unprofiled {(time.perf_counter() - start) / timed:.9f} s a step over {timed} steps")
sched = torch.profiler.schedule(wait=1, warmup=2, active=6)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                            schedule=sched, record_shapes=True,
                            on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
    for _ in range(9):
        step()
        prof.step()
torch.cuda.synchronize()
dist.destroy_process_group()
print("trace", out, os.path.getsize(out), "bytes")
