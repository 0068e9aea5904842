"""What one real calibration run is asked to do (no torch import: the CLI builds it before
torch is checked), the tasks a rank can run, and the error a failed run raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from gansim.core.units import KiB, MiB

TASKS = ("train", "compute", "sweep", "reduce", "script")



def default_sweep_sizes(lo: int = 4 * KiB, hi: int = 64 * MiB) -> tuple[int, ...]:
    """Sizes in bytes doubling from ``lo`` to ``hi`` (both included when ``hi/lo`` is a
    power of two)."""
    sizes = []
    n = lo
    while n <= hi:
        sizes.append(n)
        n *= 2
    return tuple(sizes)


DEFAULT_REDUCE_SIZES = default_sweep_sizes(64 * KiB, 64 * MiB)


class CalibrationError(RuntimeError):
    """A real run failed (a rank crashed, raised or hung). `user_input` marks a mistake in
    how a calibrated script is marked up (ScriptMarkupError in a rank): exit 2, not 1."""

    def __init__(self, message: str, *, rank: int | None = None, phase: str | None = None,
                 task: str | None = None, user_input: bool = False):
        super().__init__(message)
        self.rank = rank
        self.phase = phase
        self.task = task
        self.user_input = user_input


class ScriptMarkupError(RuntimeError):
    """A calibrated script's phase markers are wrong (unclosed, nested, unknown) or it ran
    fewer steps than asked: the user's input, not a failed run."""


@dataclass(frozen=True)
class ScriptSpec:
    """A user's training script run by `gansim calibrate --script`: its path and arguments;
    `solo`: each process runs it as a world of one (the communication-free compute run);
    `module`: the module it is, run as `python -m module` (torchrun -m), its file at `path`."""

    path: str
    args: tuple[str, ...] = ()
    solo: bool = False
    module: str | None = None


@dataclass(frozen=True)
class RankPlace:
    """Where one rank of a user's script runs, as torchrun would describe it to the script:
    its rank in a world of `world_size`, its rank on its node (its GPU), how many of the
    world's ranks share that node, and the node's index."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node: int = 0

    @staticmethod
    def one_node(rank: int, world_size: int) -> "RankPlace":
        return RankPlace(rank, world_size, rank, world_size, 0)


@dataclass(frozen=True)
class RunConfig:
    """Options of one real run (all ranks get the same)."""

    model: str = "paper-mlp-gan"
    backend: str = "gloo"
    mode: str = "ddp"  # ddp | flat
    batch_size: int = 64  # per rank
    steps: int = 30  # per task, warm-up included
    warmup: int = 5
    d_steps: int = 1
    threads: int = 1  # torch threads per rank; 0 = leave torch's default
    timeout_s: float = 120.0
    seed: int = 0
    lr: float = 1e-4  # seed 002, Table 1
    betas: tuple[float, float] = (0.9, 0.999)  # seed 002, Table 1
    sweep_sizes: tuple[int, ...] = field(default_factory=default_sweep_sizes)
    sweep_iters: int = 0  # 0 = by size (20 / 10 / 5 iterations)
    reduce_sizes: tuple[int, ...] = DEFAULT_REDUCE_SIZES
    fault: Optional[str] = None
    host: str = "127.0.0.1"  # rendezvous address for run_local
