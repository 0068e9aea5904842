"""Makes tests/data/ddp_gan_trace_rank{0,1}.json.gz: a small GAN trained with DDP on 2 gloo ranks
on CPU, a few steps profiled by torch.profiler (record_shapes, with_flops), its phases
labelled with record_function; and ddp_gan_trace.json beside it, with the buckets DDP formed
(its own logging data) and each rank's mean step time without the profiler (the same steps
run before profiling), which the README compares the imported profile against.

    OMP_NUM_THREADS=1 torchrun --nproc-per-node 2 tests/data/make_trace.py [--out tests/data]
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

parser = argparse.ArgumentParser()
parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
parser.add_argument("--timed-steps", type=int, default=60)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(0)
G = DDP(nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 64), nn.Tanh()))
D = DDP(nn.Sequential(nn.Linear(64, 128), nn.LeakyReLU(0.2), nn.BatchNorm1d(128), nn.Linear(128, 1)))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-4)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-4)


def train_step():
    with record_function("data"):
        real = torch.rand(32, 64) * 2 - 1
    with record_function("d_forward"):
        with torch.no_grad():
            fake = G(torch.randn(32, 16))
        loss_d = torch.relu(1 - D(real)).mean() + torch.relu(1 + D(fake)).mean()
    with record_function("d_backward"):
        opt_d.zero_grad()
        loss_d.backward()
    with record_function("d_optimizer"):
        opt_d.step()
    for p in D.parameters():
        p.requires_grad_(False)
    with record_function("g_forward"):
        loss_g = -D(G(torch.randn(32, 16))).mean()
    with record_function("g_backward"):
        opt_g.zero_grad()
        loss_g.backward()
    with record_function("g_optimizer"):
        opt_g.step()
    for p in D.parameters():
        p.requires_grad_(True)


for _ in range(10):
    train_step()
t = time.perf_counter()
for _ in range(args.timed_steps):
    train_step()
unprofiled = (time.perf_counter() - t) / args.timed_steps
path = os.path.join(args.out, f"ddp_gan_trace_rank{rank}.json.gz")
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
             record_shapes=True, with_flops=True, on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
    for _ in range(3):
        train_step()
        prof.step()
steps = [None] * dist.get_world_size()
dist.all_gather_object(steps, unprofiled)
if rank == 0:
    info = {net: [int(x) for x in m._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(",")]
            for net, m in (("discriminator", D), ("generator", G))}
    with open(os.path.join(args.out, "ddp_gan_trace.json"), "w") as fh:
        json.dump({"ddp_bucket_bytes": info, "unprofiled_step_s_per_rank": steps,
                   "torch": torch.__version__}, fh, indent=1)
dist.destroy_process_group()
