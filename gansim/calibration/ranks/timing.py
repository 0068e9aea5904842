"""Where a rank runs and how its phases are timed: its device and group, the
synchronisation that closes a timed phase (``torch.cuda.synchronize`` on GPU), barriers,
and the CPU threads a rank may use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from gansim.calibration.ranks.faults import Reporter


@dataclass
class RankEnv:
    """Where a rank runs: its rank inside ``group``, the group size, its device."""

    rank: int
    world_size: int
    group: Any  # a ProcessGroup or None (the default group)
    device: torch.device
    backend: str
    reporter: Reporter
    local_rank: int = 0
    # global rank of the group's rank 0 (for gather under torchrun subgroups)
    leader: int = 0

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.world_size <= 1:
            return
        if self.backend == "nccl":
            dist.barrier(group=self.group, device_ids=[self.device.index])
        else:
            dist.barrier(group=self.group)


def pin_threads(threads: int) -> None:
    if threads > 0:
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set or parallel work started
            pass


def thread_env(threads: int) -> dict[str, str]:
    if threads <= 0:
        return {}
    v = str(threads)
    return {"OMP_NUM_THREADS": v, "MKL_NUM_THREADS": v, "OPENBLAS_NUM_THREADS": v}
