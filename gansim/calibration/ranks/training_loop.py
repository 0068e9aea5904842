"""The timed GAN training step of a real run (docs/model.md, "The training step"): a batch, k
discriminator steps, one generator step, Adam and BCE, under DistributedDataParallel, one
flat all-reduce (``mode="flat"``) or no communication at all (the compute-only run); every
phase timed on every rank, every kept per-step sample returned."""

from __future__ import annotations

import contextlib
import math
import time
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn

from gansim.calibration.ranks.costs import PhaseCosts
from gansim.calibration.ranks.models import build_model
from gansim.calibration.profile.phases import PHASES, STEP
from gansim.calibration.ranks.run_config import RunConfig
from gansim.calibration.ranks.timing import RankEnv


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


def train_loop(env: RankEnv, cfg: RunConfig, communicate: bool, solo_steps: bool = False,
                ) -> tuple[dict[str, list[float]], Optional[dict[str, list[float]]], dict[str, dict[str, float]]]:
    """Run ``cfg.steps`` training steps; return the kept per-step samples per phase; with
    ``solo_steps`` (compute only, several ranks) rank 0's samples of a step run alone before
    each step run together (None on the other ranks); and each phase's FLOPs and bytes per
    run of it (:mod:`gansim.calibration.ranks.costs`; empty without warm-up steps)."""
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

    # the last warm-up step counts each phase's FLOPs and bytes (never a kept step: counting
    # slows it down); with no warm-up there is none, and the profile carries no costs
    costs: dict[str, dict[str, float]] = {}
    counter: Optional[PhaseCosts] = None

    def phase(lined_up: bool, name: str) -> None:
        if lined_up:
            rep.set("step_barrier")
            env.barrier()
        rep.set(name)
        if counter is not None:
            counter.start(name)

    def one_step(step: int, lined_up: bool) -> dict[str, float]:
        nonlocal counter
        counter = PhaseCosts() if step == cfg.warmup - 1 and not costs else None
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
            # D's forward on the real batch has its backward before the forward on the fake
            # one, as PyTorch's DCGAN example trains: DDP writes the buffers it broadcasts
            # (batch norm's running statistics) in place at every forward, and CUDA's batch
            # norm keeps them for its backward, so two forwards before one backward fail there
            # ("modified by an inplace operation"). The first backward only accumulates
            # (no_sync): D's gradients are all-reduced once a D step, after the second.
            loss_d = torch.zeros((), device=env.device)
            for inputs, target, first in ((real, ones, True), (fake, zeros, False)):
                if not first:
                    phase(lined_up, "d_forward_s")
                    t = clock()
                with D.no_sync() if first and ddp else contextlib.nullcontext():
                    loss = bce(D(inputs), target)
                    env.sync()
                    rec["d_forward_s"] += clock() - t

                    phase(lined_up, "d_backward_s")
                    t = clock()
                    if first:
                        opt_d.zero_grad()  # set_to_none, PyTorch's default, as users train
                    loss.backward()
                    env.sync()
                    rec["d_backward_s"] += clock() - t
                loss_d = loss_d + loss.detach()

            if reduce_d is not None:
                phase(False, "d_allreduce_s")
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
            phase(False, "g_allreduce_s")
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
        if counter is not None:
            costs.update(counter.per_occurrence({n: k for n in names if n.startswith("d_")}))
            counter = None
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
    return kept, (solo if env.rank == 0 else None), costs
