"""Per-rank microbenchmarks: the all-reduce sweep (nccl-tests' statistic: the mean over
iterations of the slowest rank's time) and the local reduction ``a += b`` (gamma)."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
import torch.distributed as dist

from gansim.calibration.ranks.run_config import RunConfig
from gansim.calibration.ranks.timing import RankEnv
from gansim.core.units import MiB


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


def _timed(env: RankEnv, warm: int, iters: int, op: Callable[[], object], *, together: bool) -> list[float]:
    """Seconds of `op` in each of `iters` runs after `warm` untimed ones, the device synchronised
    around each; `together`: all ranks start each run at a barrier (a collective), with a
    heartbeat after it."""
    times = []
    for it in range(warm + iters):
        if together:
            env.barrier()
        env.sync()
        t = time.perf_counter()
        op()
        env.sync()
        dt = time.perf_counter() - t
        if together:
            env.reporter.beat()
        if it >= warm:
            times.append(dt)
    return times


def allreduce_sweep(env: RankEnv, cfg: RunConfig) -> list[dict]:
    rep = env.reporter
    rows = []
    for idx, nbytes in enumerate(cfg.sweep_sizes):
        rep.set_step(idx)
        rep.set("sweep")
        count = max(1, nbytes // 4)
        x = torch.zeros(count, dtype=torch.float32, device=env.device)
        warm, iters = _sweep_iters(nbytes, cfg.sweep_iters)
        times = _timed(env, warm, iters, lambda: dist.all_reduce(x, group=env.group), together=True)
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


def reduce_bench(env: RankEnv, cfg: RunConfig) -> list[dict]:
    rep = env.reporter
    rows = []
    for idx, nbytes in enumerate(cfg.reduce_sizes):
        rep.set_step(idx)
        rep.set("reduce")
        count = max(1, nbytes // 4)
        a = torch.zeros(count, dtype=torch.float32, device=env.device)
        b = torch.ones(count, dtype=torch.float32, device=env.device)
        warm, iters = _sweep_iters(nbytes, cfg.sweep_iters)
        times = _timed(env, warm, iters, lambda: a.add_(b), together=False)
        rows.append({"bytes": count * 4, "time_s": statistics.fmean(times), "iters": iters})
        del a, b
    return rows
