"""The calibration pipeline behind ``gansim calibrate``: real runs, microbenchmarks, fit,
profile. Imports torch (through launch); the CLI imports this module lazily."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import statistics
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

import torch
from pydantic import ValidationError

from gansim.calibration.ranks import launch
from gansim.calibration.fit.communication import buffer_bytes as script_buffer_bytes
from gansim.calibration.fit.communication import gradient_buckets, summarize, unframed
from gansim.calibration.fit.measurements import (
    fit_from_measurements,
    median_of_means,
    phase_means,
    repeat_phase_means,
)
from gansim.calibration.ranks.machine import (
    cores,
    cpu_name,
    cpu_steal_ticks,
    load_average,
    steal_between,
)
from gansim.calibration.ranks.models import buffer_bytes, build_model, gradient_bytes
from gansim.calibration.profile.phases import STEP
from gansim.calibration.profile.schema import (
    NOTABLE_STEAL,
    UNSTEADY_SPREAD,
    AllreducePoint,
    Measured,
    PartialProfile,
    PhaseCost,
    Profile,
    Provenance,
    RankSamples,
    ReductionPoint,
    partial_path,
    write_profile_atomic,
)
from gansim.calibration.ranks.run_config import CalibrationError, RunConfig, ScriptSpec
from gansim.core.config import validation_error
from gansim.core.errors import UserInputError
from gansim.core.version import __version__

Log = Callable[[str], None]


@dataclass(frozen=True)
class CalibrationOptions:
    world_sizes: tuple[int, ...] = (1, 2)
    out: str = "profile.json"
    repeats: int = 4  # spawns per world size, interleaved; figures are medians over them
    run: RunConfig = RunConfig()
    script: Optional[ScriptSpec] = None  # a user's training script instead of run.model
    # the measured device's datasheet figures, for moving the profile to another device
    device_tflops: Optional[float] = None
    device_memory_bandwidth_GBps: Optional[float] = None


def _device_name(backend: str) -> str:
    if backend == "nccl" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu"


def make_provenance(opts: CalibrationOptions, launcher: str) -> Provenance:
    cfg = opts.run
    return Provenance(
        host=socket.gethostname(),
        device=_device_name(cfg.backend),
        backend=cfg.backend,
        torch=torch.__version__,
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        model=(f"script:-m {opts.script.module}" if opts.script.module else f"script:{opts.script.path}")
        if opts.script else cfg.model,
        batch_size=cfg.batch_size,
        cores=cores(),
        mode=cfg.mode,
        threads=cfg.threads,
        gansim_version=__version__,
        python=platform.python_version(),
        steps=cfg.steps,
        warmup=cfg.warmup,
        repeats=opts.repeats,
        d_steps=cfg.d_steps,
        world_sizes=list(opts.world_sizes),
        launcher=launcher,
        platform=f"{platform.system()} {platform.release()} {platform.machine()}; {cpu_name()}",
        load_average_start=load_average(),
        source="script" if opts.script else "model",
        device_tflops=opts.device_tflops,
        device_memory_bandwidth_GBps=opts.device_memory_bandwidth_GBps,
    )


def format_sweep_table(rows: Sequence[dict], world_size: int, backend: str) -> str:
    """The sweep the way nccl-tests prints it (algbw = bytes / time,
    busbw = algbw * 2 (n - 1) / n)."""
    lines = [
        f"# all_reduce sum, float32, world size {world_size}, backend {backend}; "
        "time = mean over iterations of the slowest rank (median over repeats)",
        f"#{'size':>11} {'count':>12} {'type':>7} {'time':>11} {'algbw':>8} {'busbw':>8}",
        f"#{'(B)':>11} {'(elements)':>12} {'':>7} {'(us)':>11} {'(GB/s)':>8} {'(GB/s)':>8}",
    ]
    for r in rows:
        n, t = r["bytes"], r["time_s"]
        algbw = n / t / 1e9
        busbw = algbw * 2 * (world_size - 1) / world_size
        count = r.get("count", n // 4)
        lines.append(f" {n:>11} {count:>12} {'float':>7} {t * 1e6:>11.1f} {algbw:>8.3f} "
                     f"{busbw:>8.3f}")
    return "\n".join(lines)


def _fmt_phases(means: dict[str, float]) -> str:
    return ", ".join(f"{k} {v * 1e3:.2f}" for k, v in means.items()) + " (ms)"


class _Recorder:
    """Accumulates measurements and keeps ``<out>.partial.json`` up to date."""

    def __init__(self, opts: CalibrationOptions, provenance: Provenance, log: Log,
                 write: bool):
        self.opts = opts
        self.provenance = provenance
        self.measured = Measured()
        self.stages: list[str] = []
        self.log = log
        self.write = write
        self.partial = partial_path(opts.out)
        self.script_batch: Optional[int] = None
        self.script_d_steps: list[int] = []
        self.script_threads = 0  # the most torch threads a rank of the script set for itself
        self.said_oversubscribed = False

    def save_partial(self, error: Optional[str] = None) -> None:
        if not self.write:
            return
        doc = PartialProfile(provenance=self.provenance, measured=self.measured,
                             stages_done=list(self.stages), error=error)
        write_profile_atomic(doc, self.partial)

    def on_task(self, world_size: int, repeat: int = 0) -> Callable[[str, Any], None]:
        def handle(task: str, result: Any) -> None:
            self.record(world_size, task, result)
            self.stages.append(f"{task}@{world_size}" + (f"#{repeat + 1}" if self.opts.repeats > 1 else ""))
            self.save_partial()

        return handle

    def on_script(self, world_size: int, repeat: int, solo: bool) -> Callable[[str, Any], None]:
        def handle(task: str, result: Any) -> None:
            self.record_script(world_size, result, solo)
            what = "solo" if solo else "script"
            self.stages.append(f"{what}@{world_size}" + (f"#{repeat + 1}" if self.opts.repeats > 1 else ""))
            self.save_partial()

        return handle

    def record_script(self, ws: int, result: Any, solo: bool) -> None:
        """A user's script: at world size w its training run; `solo`, w one-rank copies at
        once (the compute-only run: its phases, slowed by sharing the cores). At world size
        1 the training run is the compute run (there is nobody to talk to)."""
        threads, cores, asked = result.get("torch_threads") or 0, self.provenance.cores, self.opts.run.threads
        if not asked or threads == asked:
            threads = 0  # what --threads set (0: torch's default, the user's own choice)
        if threads * ws > cores and not self.said_oversubscribed:
            self.said_oversubscribed = True
            self.log(f"warning: the script sets torch to {threads} threads per rank (torch.set_num_threads "
                     f"overrides --threads), so {ws} ranks at once run {threads * ws} threads on {cores} cores "
                     "and slow one another: every figure carries that oversubscription; let --threads set it")
        self.script_threads = max(self.script_threads, threads)
        if solo:
            self.record(ws, "compute", result)
            return
        self.record(ws, "train", result)
        m, key = self.measured, str(ws)
        if ws == 1:
            m.compute_only[key] = m.phases[key]
            m.compute_samples[key] = m.samples[key]
        kept = len(result["ranks"][0]["phases"][STEP])
        m.collectives[key] = summarize(result["collectives"], kept)
        self.script_batch = result.get("batch_size") or self.script_batch
        self.script_d_steps.extend(result.get("d_steps") or [])

    def record_steal(self, ws: int, stolen: Optional[float]) -> None:
        if stolen is None:
            return
        self.measured.steal_fraction.setdefault(str(ws), []).append(stolen)
        if stolen > NOTABLE_STEAL:
            self.log(f"  the hypervisor gave {stolen:.0%} of this machine's CPU time to other guests "
                     "during that run (steal)")
        self.save_partial()

    def record(self, ws: int, task: str, result: Any) -> None:
        """Add one spawn's results. The samples of the repeats are kept one after another;
        every figure is the median over the repeats so far of each one's mean (a process's
        speed on a shared VM is a lottery from one start to the next)."""
        key = str(ws)
        m = self.measured
        cfg = self.opts.run
        if task in ("train", "compute") and result.get("costs") and not m.phase_costs:
            m.phase_costs = {name: PhaseCost(**cost) for name, cost in result["costs"].items()}
        if task in ("train", "compute"):
            pooled = _pool(m.samples if task == "train" else m.compute_samples, key, result["ranks"])
            per_repeat = cfg.steps - cfg.warmup
            means = repeat_phase_means(pooled, per_repeat)
            this = phase_means(result["ranks"])
            kept = len(pooled[0].phases[STEP])
            if task == "train":
                m.phases[key] = means
                m.step_time_s[key] = means[STEP]
                m.repeat_step_time_s.setdefault(key, []).append(this[STEP])
                self.log(f"  train ({cfg.mode}) world size {ws}: {len(pooled)} ranks x {kept} kept steps; "
                         f"step {this[STEP] * 1e3:.2f} ms this run, {means[STEP] * 1e3:.2f} ms over all "
                         "(median of the repeats' means)")
                self.log(f"    {_fmt_phases(means)}")
            else:
                m.compute_only[key] = means
                if result.get("solo"):
                    m.compute_solo[key] = repeat_phase_means(_pool(m.compute_solo_samples, key, result["solo"]),
                                                             per_repeat)
                self.log(f"  compute only, {ws} rank(s) at once: step {this[STEP] * 1e3:.2f} ms this run, "
                         f"{means[STEP] * 1e3:.2f} ms over all")
                if key in m.compute_solo:
                    self.log(f"  compute only, rank 0 alone a step before each of those: step "
                             f"{m.compute_solo[key][STEP] * 1e3:.2f} ms over all")
                self.log(f"    {_fmt_phases(means)}")
        elif task == "sweep":
            rows = result["rows"]
            before = {p.bytes: p.samples_s for p in m.allreduce if p.world_size == ws}
            points = []
            for r in rows:
                samples = before.get(r["bytes"], []) + list(r["samples_s"])
                points.append(AllreducePoint(
                    world_size=r["world_size"], bytes=r["bytes"], time_s=median_of_means(samples, r["iters"]),
                    iters=len(samples), median_s=statistics.median(samples), samples_s=samples))
            m.allreduce = [p for p in m.allreduce if p.world_size != ws] + points
            self.log(format_sweep_table([p.model_dump() for p in points], ws, cfg.backend))
        elif task == "reduce":
            m.reduction = [ReductionPoint(bytes=r["bytes"], time_s=r["time_s"],
                                          iters=r["iters"]) for r in result["rows"]]
            big = result["rows"][-1]
            self.log(f"  local reduction a += b: {big['bytes']} B in {big['time_s'] * 1e6:.1f} us "
                     f"({big['bytes'] / big['time_s'] / 1e9:.2f} GB/s)")


def _pool(store: dict[str, list[RankSamples]], key: str, ranks: Sequence[dict]) -> list[RankSamples]:
    """Append one spawn's per-rank samples to `store[key]` (rank by rank) and return it."""
    pooled = {r.rank: r for r in store.get(key, [])}
    for r in ranks:
        old = pooled.get(r["rank"])
        phases = {k: list(v) for k, v in r["phases"].items()}
        if old is not None:
            phases = {k: old.phases.get(k, []) + v for k, v in phases.items()}
        pooled[r["rank"]] = RankSamples(rank=r["rank"], phases=phases)
    store[key] = [pooled[r] for r in sorted(pooled)]
    return store[key]


def plan(world_sizes: Sequence[int], repeats: int = 1) -> list[tuple[int, int, tuple[str, ...]]]:
    """(repeat, world size, tasks) per spawn: world size 1 always runs (compute; gamma in
    the first repeat only); a world size > 1 runs the sweep, the concurrent compute and the
    real training. Repeats interleave the world sizes, so that a slow spell of the machine
    falls on all of them rather than on one."""
    sizes = sorted(set(world_sizes))
    out: list[tuple[int, int, tuple[str, ...]]] = []
    for rep in range(repeats):
        first = ("compute",) + (("reduce",) if rep == 0 else ()) + (("train",) if 1 in sizes else ())
        out.append((rep, 1, first))
        for w in sizes:
            if w > 1:
                out.append((rep, w, ("sweep", "compute", "train")))
    return out


def plan_script(world_sizes: Sequence[int], repeats: int = 1) -> list[tuple[int, int, tuple[str, ...]]]:
    """(repeat, world size, tasks) per spawn of a user's script: per repeat the script alone
    (world size 1, its compute figures) and, per world size w > 1, the script's training at
    w, the all-reduce sweep and w one-rank copies of the script at once ("solo": core
    sharing); gamma once. Interleaved as plan() does."""
    out: list[tuple[int, int, tuple[str, ...]]] = []
    for rep in range(repeats):
        out.append((rep, 1, ("script",)))
        for w in sorted(set(world_sizes)):
            if w > 1:  # the script first: a script that fails at w fails fast
                out += [(rep, w, ("script",)), (rep, w, ("sweep",)), (rep, w, ("solo",))]
        if rep == 0:
            out.append((rep, 1, ("reduce",)))
    return out


def script_communication(measured: Measured, log: Log) -> tuple[dict, dict, dict[str, list[int]], str]:
    """Gradient bytes, buffer bytes, buckets and mode from what the script issued at its
    largest world size (DDP all-reduces at world size 1 too)."""
    sizes = sorted(measured.collectives, key=int)
    records = measured.collectives[sizes[-1]] if sizes else []
    buckets = gradient_buckets(records)
    if not buckets["discriminator"] or not buckets["generator"]:
        raise UserInputError(
            f"the script issued no gradient all-reduce in its d_* and g_* phases at world size {sizes[-1] if sizes else '?'} "
            f"(found: D {len(buckets['discriminator'])}, G {len(buckets['generator'])}); wrap both networks in "
            "DistributedDataParallel, and mark d_backward and g_backward with phase()", field="--script")
    for r in unframed(records):
        log(f"warning: the script all-reduced {r.bytes} B outside every marked phase ({r.per_step:g} a step): "
            "not attributed to a network, and not predicted")
    mode = "ddp" if any(r.owner.startswith("ddp") for r in records if r.op == "allreduce") else "flat"
    grad = {net: sum(b) for net, b in buckets.items()}
    return grad, script_buffer_bytes(records), buckets, mode


def run_calibration(opts: CalibrationOptions, log: Log = lambda s: print(s, file=sys.stderr),
                    ) -> Optional[Profile]:
    """Run the whole calibration and write ``opts.out`` (atomically, only on success).

    Progress goes to ``log``. Everything measured so far is kept in
    ``<out>.partial.json`` after each stage; on success the partial file is removed; on
    failure or interruption it stays (with the error) and ``opts.out`` is left untouched.
    Under torchrun every rank must call this; rank 0 writes and returns the profile, the
    other ranks return None.
    """
    cfg = opts.run
    torchrun = launch.launched_by_torchrun()
    if opts.script is None:
        g, d, _, _ = build_model(cfg.model)
        grad_bytes = {"discriminator": gradient_bytes(d), "generator": gradient_bytes(g)}
        buf_bytes = {"discriminator": buffer_bytes(d), "generator": buffer_bytes(g)}
        del g, d
    else:  # what the script's DDP really issues is measured
        grad_bytes = buf_bytes = {"discriminator": 0, "generator": 0}
    rank = 0
    device = local = None
    if torchrun:
        rank, launched, local, device = launch.init_from_env(cfg)
        too_big = [w for w in opts.world_sizes if w > launched]
        if too_big:
            raise CalibrationError(
                f"world sizes {too_big} exceed the {launched} ranks torchrun started")
    provenance = make_provenance(opts, "torchrun" if torchrun else "spawn")
    rec = _Recorder(opts, provenance, log if rank == 0 else (lambda s: None), write=rank == 0)
    what = (f"script {opts.script.path}" + (f" (python -m {opts.script.module})" if opts.script.module else "")
            if opts.script else f"model {cfg.model}, mode {cfg.mode}")
    batch = "the script's batch" if opts.script else f"batch {cfg.batch_size}/rank"
    rec.log(f"gansim calibrate: {what}, backend {cfg.backend}, {batch}, {cfg.steps} steps ({cfg.warmup} warm-up), "
            f"world sizes {','.join(map(str, opts.world_sizes))}, {provenance.cores} cores, "
            f"threads/rank {cfg.threads or 'default'}" + ("" if opts.script else
            f"; gradients D {grad_bytes['discriminator']} B, G {grad_bytes['generator']} B; buffers D "
            f"{buf_bytes['discriminator']} B, G {buf_bytes['generator']} B"))
    load = provenance.load_average_start
    if load is not None and not torchrun and load > 0.5:
        rec.log(f"warning: load average {load:.2f} on {provenance.cores} cores before starting: "
                "other work on this machine makes the timings noisy")
    rec.save_partial()
    spawns = plan_script(opts.world_sizes, opts.repeats) if opts.script else plan(opts.world_sizes, opts.repeats)
    try:
        for rep, ws, tasks in spawns:
            again = f" (repeat {rep + 1}/{opts.repeats})" if opts.repeats > 1 else ""
            rec.log(f"[world size {ws}]{again} {', '.join(tasks)}")
            before = cpu_steal_ticks()
            if tasks in (("script",), ("solo",)):
                spec = replace(opts.script, solo=tasks == ("solo",))
                if torchrun:  # each launched rank < ws runs the script in a child of its own
                    launch.run_tasks_in_group(cfg, ws, (), device=device, local_rank=local, script=spec,
                                              on_task=rec.on_script(ws, rep, spec.solo))
                else:
                    launch.run_local(cfg, ws, (), script=spec, on_task=rec.on_script(ws, rep, spec.solo),
                                     log=rec.log)
            elif torchrun:
                launch.run_tasks_in_group(cfg, ws, tasks, device=device, local_rank=local,
                                          on_task=rec.on_task(ws, rep))
            else:
                launch.run_local(cfg, ws, tasks, on_task=rec.on_task(ws, rep), log=rec.log)
            if opts.script is None or tasks == ("script",):  # one steal figure per training run
                rec.record_steal(ws, steal_between(before, cpu_steal_ticks()))
        if torchrun:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()
        if rank != 0:
            return None
        update: dict[str, Any] = {"load_average_end": load_average()}
        buckets = None
        if opts.script is not None:
            grad_bytes, buf_bytes, buckets, mode = script_communication(rec.measured, rec.log)
            d_steps = statistics.mode(rec.script_d_steps) if rec.script_d_steps else 1
            if len(set(rec.script_d_steps)) > 1:
                rec.log(f"warning: the steps had {sorted(set(rec.script_d_steps))} D steps each; the profile "
                        f"says {d_steps}")
            update.update(mode=mode, d_steps=d_steps, batch_size=rec.script_batch or cfg.batch_size)
        fit = fit_from_measurements(rec.measured, grad_bytes, buf_bytes)
        if buckets is not None:
            fit["gradient_buckets"] = buckets
        provenance = provenance.model_copy(update=update)
        oversubscribed = rec.script_threads * max(opts.world_sizes) > provenance.cores
        profile = assemble_profile(provenance, rec.measured, fit, rec.partial,
                                   cause=f"the script's {rec.script_threads} torch threads per rank on "
                                         f"{provenance.cores} cores" if oversubscribed else "")
    except BaseException as exc:
        if rank == 0:
            what = "interrupted" if isinstance(exc, KeyboardInterrupt) else (
                f"{type(exc).__name__}: {exc}")
            try:
                rec.save_partial(error=what)
            except Exception:
                pass
        raise
    write_profile_atomic(profile, opts.out)
    try:
        os.unlink(rec.partial)
    except FileNotFoundError:
        pass
    f = profile.fit
    rec.log(f"fit (ring): alpha {f.alpha_s * 1e6:.2f} us, beta {f.beta_s_per_byte * 1e9:.4f} ns/B "
            f"({1 / f.beta_s_per_byte / 1e9 if f.beta_s_per_byte else float('inf'):.2f} GB/s), "
            f"gamma {f.gamma_s_per_byte * 1e9:.4f} ns/B; rms relative residual "
            f"{(f.rms_relative_residual or 0) * 100:.1f} %")
    if f.beta_s_per_byte == 0 or (f.rms_relative_residual or 0) > 0.25:
        rec.log("warning: the all-reduce sweep fits the ring closed form poorly (see "
                "fit.residuals); a busy machine or a too small --sizes range gives noisy "
                "points: rerun on a quiet machine or widen --sizes")
    largest_swept = max((pt.bytes for pt in profile.measured.allreduce), default=0)
    largest_gradient = max(grad_bytes.values())
    if largest_swept < largest_gradient:
        rec.log(f"warning: the sweep's largest all-reduce ({largest_swept} B) is smaller than the "
                f"largest gradient the predictions all-reduce ({largest_gradient} B): beta is "
                f"extrapolated beyond what was measured; widen --sizes to at least {largest_gradient} B")
    rec.log("core sharing: " + ", ".join(f"{w} ranks x{v:.3f}" for w, v in f.core_sharing.items()))
    for ws, runs in profile.measured.repeat_step_time_s.items():
        spread = profile.measured.repeat_spread(ws)
        if spread is not None and spread > UNSTEADY_SPREAD:
            rec.log(f"warning: world size {ws}: the training step took "
                    f"{' / '.join(f'{t * 1e3:.1f}' for t in runs)} ms in the {len(runs)} repeats "
                    f"({spread:.0%} apart): the machine was not steady, and every figure of this "
                    "profile carries that noise; rerun when it is quieter, or with more --repeats")
    steal = profile.measured.notable_steal()
    if steal is not None:
        rec.log(f"warning: the hypervisor took {steal[0]:.0%}-{steal[1]:.0%} of this machine's "
                "CPU time during the runs (steal in /proc/stat): this VM shares its physical cores "
                "with other guests, and its timings move with their load, from one minute to the next")
    rec.log(f"wrote {opts.out}")
    return profile


def assemble_profile(provenance: Provenance, measured: Measured, fit: dict[str, Any], partial: str,
                     cause: str = "") -> Profile:
    """The profile of a finished calibration. A figure fitted beyond what a profile holds (a
    compute spread between ranks of several times their mean) comes from a machine too
    unsteady to calibrate: one line naming the figure, not pydantic's report."""
    try:
        return Profile.model_validate({"schema": 1, "provenance": provenance.model_dump(),
                                       "measured": measured.model_dump(), "fit": fit})
    except ValidationError as err:
        problem = validation_error(err, "the fit")
        why = cause or "other load, CPU steal"
        raise CalibrationError(f"the fitted {problem.field} is out of range ({problem.message}): the machine was "
                               f"too unsteady while calibrating ({why}); what was measured is kept "
                               f"in {partial}; run again on a quieter machine") from None
