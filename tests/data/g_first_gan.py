"""A GAN loop in StyleGAN2-ADA's order: the generator's phase first (the discriminator frozen
meanwhile), then the discriminator's. Without arguments it trains its two DDP modules on
gloo (as `gansim calibrate --script` runs it); with `--trace PATH` it trains them on their
own under torch.profiler (4 profiled steps, record_shapes) and writes the trace to PATH."""

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

traced = sys.argv[1:2] == ["--trace"]
if not traced:
    dist.init_process_group("gloo")
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
D = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 1))
if not traced:
    G, D = DDP(G), DDP(D)
opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())


def iteration():
    D.requires_grad_(False)
    opt_g.zero_grad()
    (-D(G(torch.randn(16, 8))).mean()).backward()
    opt_g.step()
    D.requires_grad_(True)
    opt_d.zero_grad()
    (D(G(torch.randn(16, 8)).detach()).mean() - D(torch.randn(16, 16)).mean()).backward()
    opt_d.step()


if traced:
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=2, active=4), record_shapes=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[2])) as prof:
        for _ in range(6):
            iteration()
            prof.step()
else:
    for _ in range(1000):
        iteration()
