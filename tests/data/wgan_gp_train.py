"""A WGAN-GP training script of the usual shape, as a user writes it: its own
``record_function`` labels (``critic_step``, ``generator_step``), 5 critic steps per generator
step, a gradient penalty (Gulrajani et al. 2017, "Improved Training of Wasserstein GANs"),
stock DistributedDataParallel on gloo (CPU), one thread per rank.

Run it as torchrun does (``torchrun --nproc-per-node 2 wgan_gp_train.py``); with
``--trace-dir DIR`` it profiles ``--profiled-steps`` steps with torch.profiler (after
``--warmup`` steps) and writes ``DIR/rank<R>.ws<W>.json.gz``; without it, it trains
``--steps`` steps and prints the mean step time of the steps after the warm-up (rank 0).

gansim's ``step()`` and ``phase()`` markers are in it so that ``gansim calibrate --script``
can time the same script; run on its own, they do nothing.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from gansim.calibration import phase, step

parser = argparse.ArgumentParser()
parser.add_argument("--trace-dir", default=None)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--profiled-steps", type=int, default=4)
parser.add_argument("--steps", type=int, default=10**6)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--width", type=int, default=256)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)
torch.manual_seed(rank)
LATENT, DATA, W, B, CRITIC_STEPS, GP_WEIGHT = 32, 128, args.width, args.batch_size, 5, 10.0
G = DDP(nn.Sequential(nn.Linear(LATENT, W), nn.ReLU(), nn.Linear(W, W), nn.ReLU(), nn.Linear(W, DATA), nn.Tanh()))
D = DDP(nn.Sequential(nn.Linear(DATA, W), nn.LeakyReLU(0.2), nn.Linear(W, W), nn.LeakyReLU(0.2), nn.Linear(W, 1)))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.5, 0.9))
opt_d = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.5, 0.9))


def critic_step():
    with phase("data"):
        real = torch.rand(B, DATA) * 2 - 1
    with phase("d_forward"):
        with torch.no_grad():
            fake = G(torch.randn(B, LATENT))
        eps = torch.rand(B, 1)
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        grad, = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)
        penalty = GP_WEIGHT * ((grad.norm(2, dim=1) - 1) ** 2).mean()
        loss_d = D(fake).mean() - D(real).mean() + penalty
    with phase("d_backward"):
        opt_d.zero_grad()
        loss_d.backward()
    with phase("d_optimizer"):
        opt_d.step()


def generator_step():
    for p in D.parameters():
        p.requires_grad_(False)
    with phase("g_forward"):
        loss_g = -D(G(torch.randn(B, LATENT))).mean()
    with phase("g_backward"):
        opt_g.zero_grad()
        loss_g.backward()
    with phase("g_optimizer"):
        opt_g.step()
    for p in D.parameters():
        p.requires_grad_(True)


def train_step():
    step(batch_size=B)
    for _ in range(CRITIC_STEPS):
        with record_function("critic_step"):
            critic_step()
    with record_function("generator_step"):
        generator_step()


if args.trace_dir is None:
    for i in range(args.steps):
        if i == args.warmup:
            dist.barrier()
            start = time.perf_counter()
        train_step()
    dist.barrier()
    if rank == 0 and args.steps > args.warmup:
        print(f"world size {world}: {(time.perf_counter() - start) / (args.steps - args.warmup) * 1e3:.3f} ms a step")
else:
    path = os.path.join(args.trace_dir, f"rank{rank}.ws{world}.json.gz")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=args.warmup,
                                                                      active=args.profiled_steps),
                 record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(args.warmup + args.profiled_steps):
            train_step()
            prof.step()
dist.destroy_process_group()
