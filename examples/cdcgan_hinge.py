"""Conditional DCGAN with the hinge loss (Miyato et al. 2018's form): class labels embedded
into the generator's input and projected into the discriminator; BatchNorm in the generator
(whose statistics DistributedDataParallel broadcasts); data-parallel with DDP. Synthetic
16x16 images and labels.

    torchrun --nproc-per-node 2 examples/cdcgan_hinge.py --steps 60   # prints its mean step
    gansim calibrate --script examples/cdcgan_hinge.py --world-sizes 1,2

Phases are marked with torch.profiler.record_function, which gansim times too; only
step() comes from gansim (a no-op without it).
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function

from example_support import StepTimer, frozen, start

try:  # gansim
    from gansim.calibration import step
except ImportError:  # gansim
    step = lambda **_: None  # noqa: E731

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--warmup", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=32)
args = parser.parse_args()
CLASSES, LATENT, CH = 10, 32, 32


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(CLASSES, LATENT)
        self.net = nn.Sequential(
            nn.ConvTranspose2d(LATENT, 2 * CH, 4, 1, 0, bias=False), nn.BatchNorm2d(2 * CH), nn.ReLU(),   # 4x4
            nn.ConvTranspose2d(2 * CH, CH, 4, 2, 1, bias=False), nn.BatchNorm2d(CH), nn.ReLU(),           # 8x8
            nn.ConvTranspose2d(CH, 3, 4, 2, 1), nn.Tanh())                                                # 16x16

    def forward(self, z, y):
        return self.net((z * self.embed(y))[:, :, None, None])


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, CH, 4, 2, 1), nn.LeakyReLU(0.2),          # 8x8
                                 nn.Conv2d(CH, 2 * CH, 4, 2, 1), nn.LeakyReLU(0.2),     # 4x4
                                 nn.Flatten())
        self.out = nn.Linear(2 * CH * 16, 1)
        self.project = nn.Embedding(CLASSES, 2 * CH * 16)  # projection discriminator

    def forward(self, x, y):
        h = self.net(x)
        return self.out(h).squeeze(1) + (self.project(y) * h).sum(1)


_, world, device = start()
torch.manual_seed(0)
G, D = DDP(Generator().to(device)), DDP(Discriminator().to(device))
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
b = args.batch_size

timer = StepTimer(device, args.warmup)
for i in range(args.steps):
    step(batch_size=b)  # gansim
    with timer.step():
        with record_function("data"):
            real = torch.rand(b, 3, 16, 16, device=device) * 2 - 1
            labels = torch.randint(0, CLASSES, (b,), device=device)
        with record_function("d_forward"):
            with torch.no_grad():
                fake = G(torch.randn(b, LATENT, device=device), labels)
            loss_d = F.relu(1 - D(real, labels)).mean() + F.relu(1 + D(fake, labels)).mean()
        with record_function("d_backward"):
            opt_d.zero_grad()
            loss_d.backward()
        with record_function("d_optimizer"):
            opt_d.step()
        with frozen(D):
            with record_function("g_forward"):
                loss_g = -D(G(torch.randn(b, LATENT, device=device), labels), labels).mean()
            with record_function("g_backward"):
                opt_g.zero_grad()
                loss_g.backward()
            with record_function("g_optimizer"):
                opt_g.step()

timer.report(f"cdcgan_hinge: world size {world}, batch {b}/rank")
dist.destroy_process_group()
