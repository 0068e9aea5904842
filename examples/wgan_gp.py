"""WGAN-GP (Gulrajani et al. 2017): a critic without sigmoid, the Wasserstein loss, a
gradient penalty on interpolates, n_critic critic steps per generator step; data-parallel
with DistributedDataParallel. Synthetic 28x28 images (timing does not depend on pixels).

    torchrun --nproc-per-node 2 examples/wgan_gp.py --steps 60        # prints its mean step
    gansim calibrate --script examples/wgan_gp.py --world-sizes 1,2     # gansim times its phases

The three lines marked `# gansim` are all gansim needs; without gansim installed they fall
back to no-ops and the script runs the same.
"""

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from example_support import StepTimer, frozen, start

try:  # gansim
    from gansim.calibration import phase, step
except ImportError:  # gansim
    from contextlib import nullcontext as phase; step = lambda **_: None  # noqa: E702,E731

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--warmup", type=int, default=10)
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--n-critic", type=int, default=2)
parser.add_argument("--gp-weight", type=float, default=10.0)
args = parser.parse_args()

_, world, device = start()
torch.manual_seed(0)
latent, pixels = 64, 28 * 28
G = DDP(nn.Sequential(nn.Linear(latent, 256), nn.ReLU(), nn.Linear(256, 512), nn.ReLU(),
                      nn.Linear(512, pixels), nn.Tanh()).to(device))
D = DDP(nn.Sequential(nn.Linear(pixels, 512), nn.LeakyReLU(0.2), nn.Linear(512, 256), nn.LeakyReLU(0.2),
                      nn.Linear(256, 1)).to(device))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.9))
opt_d = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.0, 0.9))
b = args.batch_size


def gradient_penalty(real, fake):
    mix = torch.rand(b, 1, device=device)
    x = (mix * real + (1 - mix) * fake).requires_grad_(True)
    grad, = torch.autograd.grad(D(x).sum(), x, create_graph=True)
    return ((grad.norm(2, dim=1) - 1) ** 2).mean()


timer = StepTimer(device, args.warmup)
for i in range(args.steps):
    step(batch_size=b)  # gansim
    with timer.step():
        with phase("data"):
            real = torch.rand(b, pixels, device=device) * 2 - 1
        for _ in range(args.n_critic):
            with phase("d_forward"):
                with torch.no_grad():
                    fake = G(torch.randn(b, latent, device=device))
                loss_d = D(fake).mean() - D(real).mean() + args.gp_weight * gradient_penalty(real, fake)
            with phase("d_backward"):
                opt_d.zero_grad()
                loss_d.backward()
            with phase("d_optimizer"):
                opt_d.step()
        with frozen(D):
            with phase("g_forward"):
                loss_g = -D(G(torch.randn(b, latent, device=device))).mean()
            with phase("g_backward"):
                opt_g.zero_grad()
                loss_g.backward()
            with phase("g_optimizer"):
                opt_g.step()

timer.report(f"wgan_gp: world size {world}, batch {b}/rank, n_critic {args.n_critic}")
dist.destroy_process_group()
