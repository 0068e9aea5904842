"""What both examples need besides their training step: the process group torchrun set up,
the rank's device, a frozen network, and each step's own wall time (what `gansim validate`
compares with). Plain PyTorch: the examples run the same without gansim."""

import os
import time
from contextlib import contextmanager

import torch
import torch.distributed as dist


def start():
    """Join the process group torchrun describes; (rank, world size, this rank's device)."""
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    return dist.get_rank(), dist.get_world_size(), device


@contextmanager
def frozen(module):
    """No gradients for `module` inside (D while G trains: DDP then all-reduces only G's)."""
    for p in module.parameters():
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in module.parameters():
            p.requires_grad_(True)


class StepTimer:
    """Each training step's wall time (the GPU synchronised at its end); `report` prints the
    mean after the warm-up steps, averaged over the ranks, on rank 0."""

    def __init__(self, device, warmup):
        self.device, self.warmup, self.times = device, warmup, []

    @contextmanager
    def step(self):
        start = time.perf_counter()
        yield
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - start)

    def report(self, what):
        kept = self.times[self.warmup:]
        mean = torch.tensor(sum(kept) / len(kept), device=self.device)
        dist.all_reduce(mean)
        if dist.get_rank() == 0:
            print(f"{what}: mean step {mean.item() / dist.get_world_size() * 1e3:.2f} ms over {len(kept)} steps "
                  "(mean of the ranks)")
