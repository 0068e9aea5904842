"""GAN training loops whose networks are told apart by their gradients' paths, not by the
order they step in:

- `g_first`: StyleGAN2-ADA's order, the generator's phase first (the discriminator frozen
  meanwhile), then the discriminator's;
- `two_discriminators`: CycleGAN's three optimizers, one for both generators (A -> B and
  B -> A), one for each discriminator, stepped in that order;
- `loader_workers`: `g_first` fed by a DataLoader with two worker processes (children of the
  rank, started the platform's way, as under torchrun);
- `zero`: D then G, each stepped by a ZeroRedundancyOptimizer, which steps an Adam of its own
  on its shard inside its step.

`python gan_loops.py LOOP` trains the loop's DDP modules on gloo (as `gansim calibrate
--script gan_loops.py -- LOOP` runs it); `python gan_loops.py LOOP --trace PATH` trains them
on their own under torch.profiler (4 profiled steps, record_shapes) and writes the trace to
PATH."""

import itertools
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

loop = sys.argv[1]
traced = sys.argv[2:3] == ["--trace"]
if not traced:
    dist.init_process_group("gloo")
torch.manual_seed(0)
wrap = (lambda module: module) if traced else DDP


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Module:
    return wrap(nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, outputs)))


def network_step(optimizer, loss) -> None:
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


if loop == "g_first":
    G, D = mlp(8, 32, 16), mlp(16, 24, 1)
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
elif loop == "two_discriminators":
    G_AB, G_BA, D_A, D_B = mlp(16, 32, 16), mlp(16, 32, 16), mlp(16, 24, 1), mlp(16, 20, 1)
    opt_g = torch.optim.Adam(itertools.chain(G_AB.parameters(), G_BA.parameters()))
    opt_da, opt_db = torch.optim.Adam(D_A.parameters()), torch.optim.Adam(D_B.parameters())

    def iteration():
        real_a, real_b = torch.randn(16, 16), torch.randn(16, 16)
        opt_g.zero_grad()
        fake_b, fake_a = G_AB(real_a), G_BA(real_b)
        (-D_B(fake_b).mean() - D_A(fake_a).mean()).backward()
        opt_g.step()
        for D, opt, fake, real in ((D_A, opt_da, fake_a, real_a), (D_B, opt_db, fake_b, real_b)):
            opt.zero_grad()
            (D(fake.detach()).mean() - D(real).mean()).backward()
            opt.step()
elif loop == "loader_workers":
    from torch.utils.data import DataLoader, TensorDataset

    G, D = mlp(8, 32, 16), mlp(16, 24, 1)
    opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
    batches = itertools.cycle(DataLoader(TensorDataset(torch.randn(256, 16)), batch_size=16, num_workers=2,
                                         persistent_workers=True))

    def iteration():
        (real,) = next(batches)
        network_step(opt_g, -D(G(torch.randn(16, 8))).mean())
        network_step(opt_d, D(G(torch.randn(16, 8)).detach()).mean() - D(real).mean())
elif loop == "zero":
    from torch.distributed.optim import ZeroRedundancyOptimizer

    G, D = mlp(8, 32, 16), mlp(16, 24, 1)
    opt_g = ZeroRedundancyOptimizer(G.parameters(), optimizer_class=torch.optim.Adam)
    opt_d = ZeroRedundancyOptimizer(D.parameters(), optimizer_class=torch.optim.Adam)

    def iteration():
        network_step(opt_d, D(G(torch.randn(16, 8)).detach()).mean() - D(torch.randn(16, 16)).mean())
        network_step(opt_g, -D(G(torch.randn(16, 8))).mean())
else:
    raise SystemExit(f"unknown loop {loop!r}; allowed: g_first, two_discriminators, loader_workers, zero")

if traced:
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=2, active=4), record_shapes=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[3])) as prof:
        for _ in range(6):
            iteration()
            prof.step()
else:
    for _ in range(1000):
        iteration()
