"""Real ``torch.distributed`` data-parallel GAN training and the per-rank microbenchmarks.

Two ways to start ranks:

- :func:`run_local` spawns ``world_size`` ranks on this machine with
  ``torch.multiprocessing`` (start method ``spawn``). The parent hosts the rendezvous
  ``TCPStore`` on a free port (found by binding port 0; on ``EADDRINUSE`` another port is
  tried), watches every rank (phase, step and a heartbeat in shared memory, results and
  errors through a queue) and always cleans its children up.
- :func:`run_tasks_in_group` runs the same tasks inside an already initialised process
  group, e.g. one started by ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``MASTER_ADDR``, ``MASTER_PORT`` from the environment), which is how multi-node
  calibration works; see :func:`init_from_env`.

Tasks a rank can run (one spawn can run several, in order):

``train``
    The training step of DESIGN.md ("Training step"): load a batch, ``d_steps``
    discriminator steps, one generator step; Adam, BCE. ``mode="ddp"`` wraps both networks
    in ``DistributedDataParallel`` (bucketed all-reduce overlapped with backward);
    ``mode="flat"`` does one explicit all-reduce of the flattened gradients after each
    backward (TensorFlow MirroredStrategy's way, as in the paper).
``compute``
    The same step with no communication at all (no DDP, no all-reduce): at world size 1
    this is the per-phase compute; with w ranks it measures how much ranks slow each other
    down by sharing cores: each step of all w at once (lined up before every phase)
    follows one of rank 0 alone (``solo``).
``sweep``
    An all-reduce sweep (float32, sizes doubling), mean over iterations of the slowest
    rank's time, nccl-tests style.
``reduce``
    The local reduction ``a += b`` over sizes, for gamma (seconds per byte).

Phase names (seconds per step, at the per-rank batch), see :data:`PHASES`:
``data_s`` (produce a batch of synthetic MNIST-shaped images on the host, plus the
host-to-device copy on GPU), ``d_forward_s`` (G forward for the fakes without grad, D
forward on real and fake), ``d_backward_s`` (D backward; in ddp mode this includes DDP's
overlapped all-reduce), ``d_allreduce_s`` (flat mode only), ``d_optimizer_s``,
``g_forward_s`` (G forward, D forward on the fakes), ``g_backward_s``, ``g_allreduce_s``
(flat mode only), ``g_optimizer_s``; and ``step_s``, the whole step from its start to the
next one's (the training loop has no per-step barrier, as users train; the compute-only
loop at world size > 1 lines its ranks up before every phase, outside the phase timings,
so its ``step_s`` includes those waits). With ``d_steps > 1`` the ``d_*`` phases are per
discriminator step (the
mean of the step's ``d_steps`` repetitions). Warm-up steps are dropped; every other
per-step sample of every rank is kept.

GPU path (NCCL): each rank uses ``cuda:LOCAL_RANK``; batches are produced into a pinned
host buffer and copied to the device with ``non_blocking=True`` inside ``data_s``;
``torch.cuda.synchronize()`` closes every timed phase; barriers pass ``device_ids``.
**This path is untested here** (the development machine has no GPU): treat its first
results with care.

Faults: a rank that crashes, raises or hangs ends the whole run within a bounded time.
The process-group timeout is ``timeout_s``; the parent ends the run when no rank has made
progress for ``timeout_s`` or shortly after the first failure, and raises
:class:`CalibrationError` naming the rank, the task and the phase it was in. For tests a
fault can be injected with ``RunConfig.fault`` or the ``GANSIM_CALIBRATE_FAULT``
environment variable: ``RANK:PHASE[:ACTION[:STEP]]`` with ACTION ``exit`` (``os._exit(3)``,
the default), ``raise`` or ``hang``, and STEP the first step (0-based, warm-up included)
at which it fires.
"""

from __future__ import annotations

import ctypes
import math
import os
import queue as queue_mod
import signal
import socket
import sys
import time
import traceback
import statistics
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from .models import build_model
from .phases import COMPUTE_PHASES, PHASES, STEP

STATUS = (
    "spawning",
    "starting",
    "init_process_group",
    "build_model",
    "barrier",
    *PHASES,
    "step_barrier",
    "sweep",
    "reduce",
    "gather",
    "finished",
)
_STATUS_INDEX = {name: i for i, name in enumerate(STATUS)}

TASKS = ("train", "compute", "sweep", "reduce")

KiB = 1024
MiB = 1024 * 1024


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
    """A real run failed (a rank crashed, raised or hung). Not a user's input mistake."""

    def __init__(self, message: str, *, rank: int | None = None, phase: str | None = None,
                 task: str | None = None):
        super().__init__(message)
        self.rank = rank
        self.phase = phase
        self.task = task


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

    @property
    def device_kind(self) -> str:
        return "cuda" if self.backend == "nccl" else "cpu"


# --------------------------------------------------------------------------- ports / store
def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to port 0 and let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _is_addr_in_use(exc: BaseException) -> bool:
    text = str(exc)
    return "EADDRINUSE" in text or "address already in use" in text.lower()


def create_store(host: str = "127.0.0.1", port: int | None = None, *, world_size: int = 1,
                 timeout_s: float = 120.0, attempts: int = 8,
                 port_picker: Callable[[str], int] = find_free_port) -> tuple[Any, int]:
    """Start the rendezvous ``TCPStore`` server in this process and return ``(store, port)``.

    ``port`` is tried first when given; otherwise (and whenever a port turns out to be
    taken, ``EADDRINUSE``) a free one is picked with ``port_picker`` and tried, up to
    ``attempts`` times.
    """
    last: BaseException | None = None
    candidate = port
    for _ in range(max(1, attempts)):
        if candidate is None:
            candidate = port_picker(host)
        try:
            store = dist.TCPStore(host, candidate, world_size + 1, True,
                                  timedelta(seconds=timeout_s), wait_for_workers=False)
            return store, store.port
        except (RuntimeError, OSError) as exc:  # DistNetworkError is a RuntimeError
            if not _is_addr_in_use(exc):
                raise
            last = exc
            candidate = None
    raise CalibrationError(f"could not find a free port for the rendezvous on {host}: {last}")


# --------------------------------------------------------------------------- status / faults
@dataclass(frozen=True)
class FaultSpec:
    rank: int
    phase: str
    action: str = "exit"
    step: int = 0

    @staticmethod
    def parse(text: str) -> "FaultSpec":
        parts = text.split(":")
        if len(parts) < 2:
            raise ValueError(f"fault spec {text!r}: expected RANK:PHASE[:ACTION[:STEP]]")
        rank = int(parts[0])
        phase = parts[1]
        if phase not in _STATUS_INDEX:
            raise ValueError(f"fault spec {text!r}: unknown phase {phase!r}")
        action = parts[2] if len(parts) > 2 and parts[2] else "exit"
        if action not in ("exit", "raise", "hang"):
            raise ValueError(f"fault spec {text!r}: action must be exit, raise or hang")
        step = int(parts[3]) if len(parts) > 3 and parts[3] else 0
        return FaultSpec(rank, phase, action, step)


class InjectedFault(RuntimeError):
    """Raised by an injected ``raise`` fault."""


class Reporter:
    """What a rank is doing, for the parent's watchdog and for error messages.

    In a spawned rank the state lives in shared arrays the parent reads; under torchrun
    it is only kept locally (for the message of an exception).
    """

    def __init__(self, rank: int, arrays: Optional[dict] = None, fault: Optional[FaultSpec] = None):
        self.rank = rank
        self.arrays = arrays
        self.fault = fault if fault is not None and fault.rank == rank else None
        self.task = ""
        self.current = "starting"
        self.step = -1
        self.set("starting")

    def set_task(self, index: int, name: str) -> None:
        self.task = name
        self.step = -1
        if self.arrays is not None:
            self.arrays["task"][self.rank] = index
            self.arrays["step"][self.rank] = -1

    def set_step(self, step: int) -> None:
        self.step = step
        if self.arrays is not None:
            self.arrays["step"][self.rank] = step

    def set(self, phase: str) -> None:
        self.current = phase
        if self.arrays is not None:
            self.arrays["phase"][self.rank] = _STATUS_INDEX[phase]
            self.arrays["beat"][self.rank] = time.monotonic()
        f = self.fault
        if f is not None and f.phase == phase and self.step >= f.step:
            if f.action == "exit":
                os._exit(3)
            if f.action == "raise":
                raise InjectedFault(f"injected fault in rank {self.rank} at phase {phase}")
            if f.action == "hang":
                while True:
                    time.sleep(3600)

    def beat(self) -> None:
        if self.arrays is not None:
            self.arrays["beat"][self.rank] = time.monotonic()


# --------------------------------------------------------------------------- rank context
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


def _pin_threads(threads: int) -> None:
    if threads > 0:
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set or parallel work started
            pass


def _thread_env(threads: int) -> dict[str, str]:
    if threads <= 0:
        return {}
    v = str(threads)
    return {"OMP_NUM_THREADS": v, "MKL_NUM_THREADS": v, "OPENBLAS_NUM_THREADS": v}


# --------------------------------------------------------------------------- training step
def _bce() -> nn.Module:
    return nn.BCELoss()


class _FlatAllReduce:
    """One all-reduce of all gradients of a module, flattened into one buffer."""

    def __init__(self, module: nn.Module, env: RankEnv):
        self.params = [p for p in module.parameters() if p.requires_grad]
        n = sum(p.numel() for p in self.params)
        self.buffer = torch.empty(n, dtype=torch.float32, device=env.device)
        self.env = env

    def __call__(self) -> None:
        grads = [p.grad for p in self.params]
        off = 0
        for p, g in zip(self.params, grads):
            k = p.numel()
            if g is None:
                self.buffer[off:off + k].zero_()
            else:
                self.buffer[off:off + k].copy_(g.reshape(-1))
            off += k
        dist.all_reduce(self.buffer, group=self.env.group)
        self.buffer.div_(self.env.world_size)
        off = 0
        for p in self.params:
            k = p.numel()
            view = self.buffer[off:off + k].view_as(p)
            if p.grad is None:
                p.grad = view.clone()
            else:
                p.grad.copy_(view)
            off += k


class _Batches:
    """Synthetic MNIST-shaped data: uint8 images from a seeded generator, converted to
    float in [0, 1] on the host (the 'preprocessing'), copied to the device on GPU."""

    def __init__(self, env: RankEnv, batch: int, shape: tuple[int, ...], seed: int):
        self.env = env
        self.shape = (batch, *shape)
        self.gen = torch.Generator().manual_seed(seed)
        if env.cuda:
            self.host = torch.empty(self.shape, dtype=torch.float32).pin_memory()
            self.dev = torch.empty(self.shape, dtype=torch.float32, device=env.device)

    def next(self) -> torch.Tensor:
        raw = torch.randint(0, 256, self.shape, generator=self.gen, dtype=torch.uint8)
        if self.env.cuda:
            self.host.copy_(raw)
            self.host.div_(255.0)
            self.dev.copy_(self.host, non_blocking=True)
            return self.dev
        return raw.to(torch.float32).div_(255.0)


def _train_loop(env: RankEnv, cfg: RunConfig, communicate: bool, solo_steps: bool = False,
                ) -> tuple[dict[str, list[float]], Optional[dict[str, list[float]]]]:
    """Run ``cfg.steps`` training steps; return the kept per-step samples per phase, and
    with ``solo_steps`` (compute only, several ranks) rank 0's samples of a step run alone
    before each step run together (None on the other ranks)."""
    rep = env.reporter
    rep.set("build_model")
    torch.manual_seed(cfg.seed)  # same initial weights on every rank
    g, d, latent, shape = build_model(cfg.model)
    g.to(env.device).train()
    d.to(env.device).train()
    ddp = communicate and cfg.mode == "ddp"
    flat = communicate and cfg.mode == "flat"
    if ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [env.device.index] if env.cuda else None
        G = DDP(g, device_ids=ids, process_group=env.group)
        D = DDP(d, device_ids=ids, process_group=env.group)
    else:
        G, D = g, d
    opt_g = torch.optim.Adam(g.parameters(), lr=cfg.lr, betas=cfg.betas)
    opt_d = torch.optim.Adam(d.parameters(), lr=cfg.lr, betas=cfg.betas)
    reduce_d = _FlatAllReduce(d, env) if flat else None
    reduce_g = _FlatAllReduce(g, env) if flat else None
    bce = _bce()
    batch = cfg.batch_size
    ones = torch.ones(batch, 1, device=env.device)
    zeros = torch.zeros(batch, 1, device=env.device)
    data = _Batches(env, batch, shape, cfg.seed * 1000 + 17 + env.rank)
    noise_gen = torch.Generator(device=env.device).manual_seed(cfg.seed * 1000 + 7919 + env.rank)
    d_params = [p for p in d.parameters() if p.requires_grad]

    def noise() -> torch.Tensor:
        return torch.randn(batch, latent, device=env.device, generator=noise_gen)

    names = [p for p in PHASES if (flat or "allreduce" not in p)] + [STEP]
    kept: dict[str, list[float]] = {n: [] for n in names}
    clock = time.perf_counter
    k = max(1, cfg.d_steps)

    # Compute-only ranks are lined up before every phase: the core-sharing benchmark must
    # see them run the same phase at the same time, as training's collectives (buffer
    # broadcast, gradient all-reduces) make them do; drifting ranks would interleave heavy
    # and light phases and hide the contention. The barriers are outside the phase timings,
    # so compare their sum, not step_s. Training has no barrier within the loop, as users
    # train: its step is timed from start to start.
    align = not communicate and env.world_size > 1

    solo: dict[str, list[float]] | None = {n: [] for n in names} if solo_steps and align else None

    def phase(lined_up: bool, name: str) -> None:
        if lined_up:
            rep.set("step_barrier")
            env.barrier()
        rep.set(name)

    def one_step(step: int, lined_up: bool) -> dict[str, float]:
        rec = dict.fromkeys(names, 0.0)
        env.sync()
        t_step = clock()

        phase(lined_up, "data_s")
        t = clock()
        real = data.next()
        env.sync()
        rec["data_s"] = clock() - t

        for _ in range(k):
            phase(lined_up, "d_forward_s")
            t = clock()
            with torch.no_grad():
                fake = G(noise())
            loss_d = bce(D(real), ones) + bce(D(fake), zeros)
            env.sync()
            rec["d_forward_s"] += clock() - t

            phase(lined_up, "d_backward_s")
            t = clock()
            opt_d.zero_grad()  # set_to_none, PyTorch's default, as users train
            loss_d.backward()
            env.sync()
            rec["d_backward_s"] += clock() - t

            if reduce_d is not None:
                rep.set("d_allreduce_s")
                t = clock()
                reduce_d()
                env.sync()
                rec["d_allreduce_s"] += clock() - t

            phase(lined_up, "d_optimizer_s")
            t = clock()
            opt_d.step()
            env.sync()
            rec["d_optimizer_s"] += clock() - t

        # generator step: D frozen (only G's gradients are computed and all-reduced)
        for p in d_params:
            p.requires_grad_(False)
        phase(lined_up, "g_forward_s")
        t = clock()
        loss_g = bce(d(G(noise())), ones)
        env.sync()
        rec["g_forward_s"] = clock() - t

        phase(lined_up, "g_backward_s")
        t = clock()
        opt_g.zero_grad()
        loss_g.backward()
        env.sync()
        rec["g_backward_s"] = clock() - t

        if reduce_g is not None:
            rep.set("g_allreduce_s")
            t = clock()
            reduce_g()
            env.sync()
            rec["g_allreduce_s"] = clock() - t

        phase(lined_up, "g_optimizer_s")
        t = clock()
        opt_g.step()
        env.sync()
        rec["g_optimizer_s"] = clock() - t
        for p in d_params:
            p.requires_grad_(True)
        if not (math.isfinite(loss_d.item()) and math.isfinite(loss_g.item())):
            raise FloatingPointError(f"non-finite loss at step {step}")
        env.sync()
        rec[STEP] = clock() - t_step

        for name in ("d_forward_s", "d_backward_s", "d_allreduce_s", "d_optimizer_s"):
            if name in rec:
                rec[name] /= k
        return rec

    def keep(into: dict[str, list[float]], rec: dict[str, float], step: int) -> None:
        if step >= cfg.warmup:
            for name in names:
                into[name].append(rec[name])

    rep.set("barrier")
    env.barrier()
    for step in range(cfg.steps):
        rep.set_step(step)
        if solo is not None:
            # rank 0 alone (the others wait) just before the ranks compute together: the
            # pair of steps sees the same state of the machine, wherever it drifts
            rep.set("step_barrier")
            env.barrier()
            if env.rank == 0:
                keep(solo, one_step(step, False), step)
            rep.set("step_barrier")
            env.barrier()
        keep(kept, one_step(step, align), step)
    rep.set_step(cfg.steps)
    return kept, (solo if env.rank == 0 else None)


# --------------------------------------------------------------------------- microbenchmarks
def _sweep_iters(nbytes: int, override: int) -> tuple[int, int]:
    """(warm-up, timed) iterations for one sweep size. Small sizes get many: their time is
    latency, whose distribution is heavy-tailed on a shared machine (on the 2-vCPU
    development VM a 4 KiB gloo all-reduce takes 0.3 ms or 4 ms), and the mean needs it."""
    if override > 0:
        return max(1, override // 5), override
    if nbytes <= 1 * MiB:
        return 5, 40
    if nbytes <= 16 * MiB:
        return 2, 15
    return 1, 6


def _allreduce_sweep(env: RankEnv, cfg: RunConfig) -> list[dict]:
    rep = env.reporter
    rows = []
    for idx, nbytes in enumerate(cfg.sweep_sizes):
        rep.set_step(idx)
        rep.set("sweep")
        count = max(1, nbytes // 4)
        x = torch.zeros(count, dtype=torch.float32, device=env.device)
        warm, iters = _sweep_iters(nbytes, cfg.sweep_iters)
        times = []
        for it in range(warm + iters):
            env.barrier()
            env.sync()
            t = time.perf_counter()
            dist.all_reduce(x, group=env.group)
            env.sync()
            dt = time.perf_counter() - t
            rep.beat()
            if it >= warm:
                times.append(dt)
        tt = torch.tensor(times, dtype=torch.float64, device=env.device)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX, group=env.group)  # the slowest rank
        slowest = tt.cpu().tolist()
        # the mean, as nccl-tests reports: a training step pays every all-reduce's expected
        # time, tail included (the median of a two-mode latency flips between the modes)
        rows.append({"world_size": env.world_size, "bytes": count * 4, "count": count,
                     "time_s": statistics.fmean(slowest), "median_s": statistics.median(slowest),
                     "samples_s": slowest, "iters": iters})
        del x
    return rows


def _reduce_bench(env: RankEnv, cfg: RunConfig) -> list[dict]:
    rep = env.reporter
    rows = []
    for idx, nbytes in enumerate(cfg.reduce_sizes):
        rep.set_step(idx)
        rep.set("reduce")
        count = max(1, nbytes // 4)
        a = torch.zeros(count, dtype=torch.float32, device=env.device)
        b = torch.ones(count, dtype=torch.float32, device=env.device)
        warm, iters = _sweep_iters(nbytes, cfg.sweep_iters)
        times = []
        for it in range(warm + iters):
            env.sync()
            t = time.perf_counter()
            a += b
            env.sync()
            dt = time.perf_counter() - t
            if it >= warm:
                times.append(dt)
        rows.append({"bytes": count * 4, "time_s": statistics.fmean(times), "iters": iters})
        del a, b
    return rows


def execute_task(env: RankEnv, cfg: RunConfig, task: str) -> Any:
    """Run one task on this rank and return its per-rank payload."""
    if task == "train":
        return {"samples": _train_loop(env, cfg, communicate=True)[0]}
    if task == "compute":
        # at world size > 1, each step together follows one of rank 0 alone, so that the
        # core-sharing factor compares like with like (this machine's speed drifts)
        samples, solo = _train_loop(env, cfg, communicate=False, solo_steps=True)
        return {"samples": samples, "solo": solo}
    if task == "sweep":
        return {"rows": _allreduce_sweep(env, cfg) if env.world_size > 1 else []}
    if task == "reduce":
        return {"rows": _reduce_bench(env, cfg) if env.rank == 0 else []}
    raise ValueError(f"unknown task {task!r}")


def combine_task(task: str, payloads: Sequence[Any]) -> Any:
    """Merge the per-rank payloads of one task (index = rank in the group)."""
    if task in ("train", "compute"):
        merged: dict[str, Any] = {"ranks": [{"rank": r, "phases": p["samples"]} for r, p in enumerate(payloads)]}
        if payloads and payloads[0].get("solo"):
            merged["solo"] = [{"rank": 0, "phases": payloads[0]["solo"]}]
        return merged
    # sweep rows are identical on every rank (MAX-reduced); reduce rows come from rank 0
    return {"rows": payloads[0]["rows"]}


# --------------------------------------------------------------------------- spawned ranks
def _set_parent_death_signal(parent_pid: int) -> None:
    """Linux: get SIGKILL if the parent dies, so a killed parent leaves no orphan ranks;
    if it died already (while this rank was starting), leave at once."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent_pid:
        os._exit(1)


def _is_comm_error(exc: BaseException) -> bool:
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc).lower()
    return any(s in text for s in ("gloo", "nccl", "connection closed", "connection reset",
                                   "timed out", "timeout", "broken pipe", "socket"))


def _rank_main(rank: int, world_size: int, cfg: RunConfig, tasks: tuple[str, ...], port: int,
               q: Any, arrays: dict, parent_pid: int) -> None:
    """Entry point of a spawned rank."""
    _set_parent_death_signal(parent_pid)
    _pin_threads(cfg.threads)
    fault = None
    text = cfg.fault or os.environ.get("GANSIM_CALIBRATE_FAULT")
    if text:
        fault = FaultSpec.parse(text)
    rep = Reporter(rank, arrays, fault)
    try:
        rep.set("init_process_group")
        if cfg.backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
        store = dist.TCPStore(cfg.host, port, world_size + 1, False,
                              timedelta(seconds=cfg.timeout_s))
        kwargs = {}
        if cfg.backend == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(cfg.backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=cfg.timeout_s), **kwargs)
        env = RankEnv(rank, world_size, None, device, cfg.backend, rep, local_rank=rank)
        for index, task in enumerate(tasks):
            rep.set_task(index, task)
            payload = execute_task(env, cfg, task)
            q.put(("result", rank, index, payload))
        rep.set("finished")
        env.barrier()
        dist.destroy_process_group()
        q.put(("done", rank))
        q.close()
        q.join_thread()
    except BaseException as exc:  # report, then leave at once (peers may be gone)
        info = {
            "phase": rep.current,
            "task": rep.task,
            "step": rep.step,
            "type": type(exc).__name__,
            "message": " ".join(str(exc).split())[:500],
            "comm": _is_comm_error(exc),
            "traceback": traceback.format_exc(),
        }
        try:
            q.put(("error", rank, info))
            q.close()
            q.join_thread()
        finally:
            os._exit(1)


@dataclass
class _RankState:
    exitcode: Optional[int] = None
    error: Optional[dict] = None
    done: bool = False


def _format_where(task: str, phase: str, step: int, world_size: int) -> str:
    bits = [f"phase {phase}"]
    extra = []
    if task:
        extra.append(f"task {task}")
    extra.append(f"world size {world_size}")
    if step >= 0:
        extra.append(f"step {step}")
    return f"{bits[0]} ({', '.join(extra)})"


def run_local(cfg: RunConfig, world_size: int, tasks: Sequence[str], *,
              on_task: Optional[Callable[[str, Any], None]] = None,
              log: Optional[Callable[[str], None]] = None,
              progress_every_s: float = 10.0,
              port_picker: Callable[[str], int] = find_free_port) -> dict[str, Any]:
    """Spawn ``world_size`` ranks here, run ``tasks`` in order on each, return
    ``{task: combined result}``. ``on_task(task, result)`` is called as each task completes
    on every rank (e.g. to save partial results). Raises :class:`CalibrationError` when a
    rank crashes, raises or hangs; the children are always terminated before returning.
    """
    tasks = tuple(tasks)
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"unknown task {t!r}")
    if cfg.backend == "nccl":
        if not torch.cuda.is_available() or torch.cuda.device_count() < world_size:
            raise CalibrationError(
                f"world size {world_size} needs {world_size} CUDA devices for nccl, "
                f"found {torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    arrays = {
        "phase": ctx.RawArray("i", world_size),
        "step": ctx.RawArray("i", world_size),
        "task": ctx.RawArray("i", world_size),
        "beat": ctx.RawArray("d", world_size),
    }
    now = time.monotonic()
    for r in range(world_size):
        arrays["phase"][r] = _STATUS_INDEX["spawning"]
        arrays["step"][r] = -1
        arrays["beat"][r] = now
    store, port = create_store(cfg.host, world_size=world_size, timeout_s=cfg.timeout_s,
                               port_picker=port_picker)
    procs = []
    saved_env = {k: os.environ.get(k) for k in _thread_env(cfg.threads)}
    try:
        os.environ.update(_thread_env(cfg.threads))
        for r in range(world_size):
            p = ctx.Process(target=_rank_main, name=f"gansim-rank{r}",
                            args=(r, world_size, cfg, tasks, port, q, arrays, os.getpid()),
                            daemon=True)
            p.start()
            procs.append(p)
    except BaseException:
        _cleanup(procs, q)
        raise
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        return _monitor(cfg, world_size, tasks, procs, q, arrays, on_task, log,
                        progress_every_s)
    finally:
        _cleanup(procs, q)
        del store


def _cleanup(procs: list, q: Any) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)
    try:
        q.close()
        q.cancel_join_thread()
    except (OSError, ValueError):
        pass


def _monitor(cfg: RunConfig, world_size: int, tasks: tuple[str, ...], procs: list, q: Any,
             arrays: dict, on_task, log, progress_every_s: float) -> dict[str, Any]:
    states = [_RankState() for _ in range(world_size)]
    partial: dict[int, dict[int, Any]] = {i: {} for i in range(len(tasks))}
    results: dict[str, Any] = {}
    first_failure: Optional[float] = None
    grace_s = 3.0
    last_progress_log = time.monotonic()

    def status(r: int) -> tuple[str, str, int]:
        ti = arrays["task"][r]
        task = tasks[ti] if 0 <= ti < len(tasks) else ""
        return task, STATUS[arrays["phase"][r]], arrays["step"][r]

    while True:
        try:
            msg = q.get(timeout=0.05)
        except queue_mod.Empty:
            msg = None
        except (EOFError, OSError):
            msg = None
        if msg is not None:
            kind, rank = msg[0], msg[1]
            if kind == "result":
                index, payload = msg[2], msg[3]
                partial[index][rank] = payload
                if len(partial[index]) == world_size:
                    task = tasks[index]
                    combined = combine_task(task, [partial[index][r] for r in range(world_size)])
                    results[task] = combined
                    if on_task is not None:
                        on_task(task, combined)
            elif kind == "error":
                states[rank].error = msg[2]
                if first_failure is None:
                    first_failure = time.monotonic()
            elif kind == "done":
                states[rank].done = True
            continue  # drain the queue before checking processes

        now = time.monotonic()
        for r, p in enumerate(procs):
            if states[r].exitcode is None and p.exitcode is not None:
                states[r].exitcode = p.exitcode
                if p.exitcode != 0 and first_failure is None:
                    first_failure = now
        if all(s.done for s in states) and all(p.exitcode is not None for p in procs):
            if all(p.exitcode == 0 for p in procs) and len(results) == len(tasks):
                return results
        if first_failure is not None:
            all_exited = all(p.exitcode is not None for p in procs)
            if all_exited or now - first_failure > grace_s:
                raise _compose_failure(states, procs, world_size, status, now, arrays)
        stale = now - max(arrays["beat"][r] for r in range(world_size))
        if stale > cfg.timeout_s + 5.0:
            raise _compose_failure(states, procs, world_size, status, now, arrays,
                                   hang_s=stale)
        if log is not None and now - last_progress_log >= progress_every_s:
            last_progress_log = now
            bits = []
            for r in range(world_size):
                task, phase, step = status(r)
                if task in ("train", "compute"):
                    where = f"step {max(step, 0)}/{cfg.steps}"
                elif task == "sweep":
                    where = f"size {max(step, 0) + 1}/{len(cfg.sweep_sizes)}"
                elif task == "reduce":
                    where = f"size {max(step, 0) + 1}/{len(cfg.reduce_sizes)}"
                else:
                    where = ""
                bits.append(f"rank {r}: {task or 'starting'} {where} {phase}".replace("  ", " "))
            log(f"  ... world size {world_size}: " + "; ".join(bits))


def _compose_failure(states, procs, world_size, status, now, arrays, hang_s=None) -> CalibrationError:
    crashed, raised, silent, comm = [], [], [], []
    for r, s in enumerate(states):
        task, phase, step = status(r)
        if s.error is not None:
            e = s.error
            where = _format_where(e["task"], e["phase"], e["step"], world_size)
            text = f"rank {r} failed in {where}: {e['type']}: {e['message']}"
            (comm if e["comm"] else raised).append((r, e["phase"], e["task"], text))
        elif s.exitcode not in (None, 0) or (procs[r].exitcode not in (None, 0)):
            code = s.exitcode if s.exitcode is not None else procs[r].exitcode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            where = _format_where(task, phase, step, world_size)
            crashed.append((r, phase, task, f"rank {r} {how} during {where}"))
        elif procs[r].is_alive() and not s.done:
            idle = now - arrays["beat"][r]
            where = _format_where(task, phase, step, world_size)
            silent.append((r, phase, task,
                           f"rank {r} made no progress for {idle:.0f} s in {where}"))
    # root causes first: a dead rank, a rank's own error, a rank stuck without error;
    # the peers' communication errors are usually consequences
    ordered = crashed + raised + silent + comm
    if not ordered:
        return CalibrationError(f"world size {world_size}: ranks ended without results")
    head = ordered[0]
    prefix = f"no rank made progress for {hang_s:.0f} s: " if hang_s is not None else ""
    message = prefix + "; ".join(item[3] for item in ordered)
    return CalibrationError(message, rank=head[0], phase=head[1], task=head[2])


def run_training(cfg: RunConfig, world_size: int, **kwargs: Any) -> dict:
    """Convenience: spawn ``world_size`` ranks and run only the training task; returns
    ``{"ranks": [{"rank": r, "phases": {phase: [seconds per kept step]}}]}``."""
    return run_local(cfg, world_size, ("train",), **kwargs)["train"]


# --------------------------------------------------------------------------- torchrun
def launched_by_torchrun(environ: Optional[dict] = None) -> bool:
    """True when RANK and WORLD_SIZE are set (torchrun / torch.distributed.launch)."""
    e = os.environ if environ is None else environ
    return "RANK" in e and "WORLD_SIZE" in e


def init_from_env(cfg: RunConfig) -> tuple[int, int, int, torch.device]:
    """Initialise the default process group from torchrun's environment
    (``env://``: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
    Returns ``(rank, world_size, local_rank, device)``."""
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    _pin_threads(cfg.threads)
    kwargs = {}
    if cfg.backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        kwargs["device_id"] = device
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(cfg.backend, init_method="env://", rank=rank, world_size=world,
                                timeout=timedelta(seconds=cfg.timeout_s), **kwargs)
    return rank, world, local, device


def run_tasks_in_group(cfg: RunConfig, world_size: int, tasks: Sequence[str], *,
                       device: torch.device, local_rank: int, wait_timeout_s: float = 86400.0,
                       on_task: Optional[Callable[[str, Any], None]] = None) -> dict[str, Any]:
    """Inside an initialised default group (e.g. under torchrun): run ``tasks`` on global
    ranks ``0..world_size-1`` (a subgroup when ``world_size`` is smaller than the launched
    world); the other ranks wait. Every launched rank must call this with the same
    arguments. Rank 0 returns the combined results (``on_task`` is called there); other
    ranks return ``{}``. A failing rank raises :class:`CalibrationError` naming its phase;
    torchrun then ends the other ranks."""
    rank = dist.get_rank()
    launched = dist.get_world_size()
    if world_size > launched:
        raise CalibrationError(f"world size {world_size} > launched world size {launched}")
    group = None if world_size == launched else dist.new_group(ranks=list(range(world_size)))
    fault = None
    text = cfg.fault or os.environ.get("GANSIM_CALIBRATE_FAULT")
    if text:
        fault = FaultSpec.parse(text)
    rep = Reporter(rank, None, fault)
    results: dict[str, Any] = {}
    if rank < world_size:
        env = RankEnv(rank, world_size, group, device, cfg.backend, rep, local_rank=local_rank)
        for index, task in enumerate(tasks):
            rep.set_task(index, task)
            try:
                payload = execute_task(env, cfg, task)
                rep.set("gather")
                gathered = [None] * world_size if rank == 0 else None
                if world_size > 1:
                    dist.gather_object(payload, gathered, dst=0, group=group)
                else:
                    gathered = [payload]
            except CalibrationError:
                raise
            except Exception as exc:
                where = _format_where(rep.task, rep.current, rep.step, world_size)
                raise CalibrationError(f"rank {rank} failed in {where}: {type(exc).__name__}: "
                                       f"{exc}", rank=rank, phase=rep.current,
                                       task=rep.task) from exc
            if rank == 0:
                combined = combine_task(task, gathered)
                results[task] = combined
                if on_task is not None:
                    on_task(task, combined)
    # the ranks outside the subgroup wait for it without a collective (which would time
    # out on a long task): through the rendezvous store
    if world_size < launched:
        store = dist.distributed_c10d._get_default_store()
        done_key = f"gansim_calibrate_ws{world_size}_done"
        if rank == 0:
            store.set(done_key, b"1")
        elif rank >= world_size:
            store.wait([done_key], timedelta(seconds=wait_timeout_s))
    dist.barrier()
    return results


__all__ = [
    "PHASES",
    "COMPUTE_PHASES",
    "STEP",
    "TASKS",
    "CalibrationError",
    "RunConfig",
    "FaultSpec",
    "find_free_port",
    "create_store",
    "run_local",
    "run_training",
    "run_tasks_in_group",
    "init_from_env",
    "launched_by_torchrun",
    "execute_task",
    "combine_task",
    "default_sweep_sizes",
]
