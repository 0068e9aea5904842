#!/usr/bin/env python
"""An ordinary PyTorch DDP training script of the seed-002 MLP GAN, written the way a user
would write it, independent of gansim (it imports nothing from gansim).

It exists so that gansim's predictions can be compared with a script gansim did not write:
the same workload (seed 002, Table 2: G 50 -> 1200 BN -> 1000 BN -> 784 sigmoid; D 784 ->
256 -> dropout -> 128 -> dropout -> 1 sigmoid; Adam lr 1e-4, betas 0.9/0.999; BCE;
per-GPU batch 64, weak scaling), one discriminator step then one generator step per
iteration (the paper's Algorithm 1 with k = 1; fresh noise for each), synthetic
MNIST-shaped data from a seeded generator (no download), gloo on CPU with one thread per
rank, or NCCL on GPUs with ``--backend nccl``.

Usage::

    python bench/user_ddp_gan.py --world-sizes 1,2 --steps 60 --warmup 10 --batch-size 64
    torchrun --nproc-per-node 2 bench/user_ddp_gan.py --steps 60 --warmup 10

It prints the mean step time (s) per world size (wall time of the timed steps between two
barriers, divided by their number; with ``--repeats N``, N fresh runs per world size, run in
turn: their mean, their median and each run), and with ``--json`` one JSON object on stdout.
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

LATENT = 50


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(LATENT, 1200), nn.BatchNorm1d(1200), nn.LeakyReLU(0.2),
            nn.Linear(1200, 1000), nn.BatchNorm1d(1000), nn.LeakyReLU(0.2),
            nn.Linear(1000, 784), nn.Sigmoid(),
        )

    def forward(self, z):
        return self.model(z).view(-1, 1, 28, 28)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 256), nn.LeakyReLU(0.2), nn.Dropout(0.3),
            nn.Linear(256, 128), nn.LeakyReLU(0.2), nn.Dropout(0.3),
            nn.Linear(128, 1), nn.Sigmoid(),
        )

    def forward(self, x):
        return self.model(x)


def train(rank, world_size, args, results=None):
    torch.set_num_threads(args.threads)
    if args.backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, rank=rank, world_size=world_size)

    torch.manual_seed(args.seed)
    netG = Generator().to(device)
    netD = Discriminator().to(device)
    ids = [device.index] if device.type == "cuda" else None
    netG = DDP(netG, device_ids=ids)
    netD = DDP(netD, device_ids=ids)
    optG = torch.optim.Adam(netG.parameters(), lr=1e-4, betas=(0.9, 0.999))
    optD = torch.optim.Adam(netD.parameters(), lr=1e-4, betas=(0.9, 0.999))
    criterion = nn.BCELoss()

    B = args.batch_size
    data_gen = torch.Generator().manual_seed(args.seed + rank)  # each rank its own shard
    real_label = torch.ones(B, 1, device=device)
    fake_label = torch.zeros(B, 1, device=device)

    def get_batch():
        images = torch.randint(0, 256, (B, 1, 28, 28), generator=data_gen, dtype=torch.uint8)
        images = images.float() / 255.0
        return images.to(device, non_blocking=True)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            sync()
            dist.barrier()
            start = time.perf_counter()
        real = get_batch()

        # (1) update D: maximise log D(x) + log(1 - D(G(z)))
        with torch.no_grad():
            fake = netG(torch.randn(B, LATENT, device=device))
        lossD = criterion(netD(real), real_label) + criterion(netD(fake), fake_label)
        optD.zero_grad()
        lossD.backward()
        optD.step()

        # (2) update G: maximise log D(G(z)); D is frozen
        for p in netD.parameters():
            p.requires_grad = False
        output = netD(netG(torch.randn(B, LATENT, device=device)))
        lossG = criterion(output, real_label)
        optG.zero_grad()
        lossG.backward()
        optG.step()
        for p in netD.parameters():
            p.requires_grad = True
    sync()
    dist.barrier()
    mean_step = (time.perf_counter() - start) / args.steps
    if rank == 0:
        if results is not None:
            results.put((world_size, mean_step, lossD.item(), lossG.item()))
        else:
            report({world_size: [mean_step]}, args)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(runs, args):
    """Step time per world size (the mean over the runs, their median, each run's mean):
    lines on stdout, or one JSON object with --json."""
    mean = {ws: sum(t) / len(t) for ws, t in runs.items()}
    median = {ws: statistics.median(t) for ws, t in runs.items()}
    if not args.json:
        for ws in sorted(runs):
            each = " ".join(f"{t:.6f}" for t in runs[ws])
            print(f"world_size={ws} mean_step_s={mean[ws]:.6f} median_step_s={median[ws]:.6f} runs={each}")
    else:
        print(json.dumps({"model": "paper-mlp-gan", "batch_size": args.batch_size,
                          "steps": args.steps, "warmup": args.warmup, "backend": args.backend,
                          "mean_step_s": {str(k): v for k, v in sorted(mean.items())},
                          "median_step_s": {str(k): v for k, v in sorted(median.items())},
                          "runs_step_s": {str(k): v for k, v in sorted(runs.items())}}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-sizes", default="1,2")
    parser.add_argument("--steps", type=int, default=60, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    parser.add_argument("--batch-size", type=int, default=64, help="per-rank batch")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1,
                        help="fresh runs per world size, in turn; their mean, median and each are reported")
    parser.add_argument("--json", action="store_true", help="print a JSON object on stdout")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batch_size < 1 or args.repeats < 1:
        parser.error("need --steps >= 1, --warmup >= 0, --batch-size >= 1, --repeats >= 1")

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # inherited by the spawned ranks
    runs = {}
    for _ in range(args.repeats):
        for ws in [int(w) for w in args.world_sizes.split(",")]:
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(free_port())
            results = mp.get_context("spawn").SimpleQueue()
            mp.spawn(train, args=(ws, args, results), nprocs=ws, join=True)
            _, mean_step, _, _ = results.get()
            runs.setdefault(ws, []).append(mean_step)
            print(f"[world size {ws} done: {mean_step:.6f} s/step]", file=sys.stderr, flush=True)
    report(runs, args)


if __name__ == "__main__":
    main()
