"""A whole training run with checkpoints, failures and preemptions (seed 002's checkpointing
for fault tolerance, seed 003's spot instances).

The run is `total_steps` steps of `step_s` wall seconds each (the step simulation's step time,
plus any storage-bound input), cut into segments of `every_steps` steps; each segment ends with
a checkpoint write of `checkpoint_s` (the last one too: the trained model is saved). Failures
arrive per GPU at rate 1/MTBF (so at gpus/MTBF for the job) and preemptions at a rate per
instance per hour, both as Poisson processes drawn from a seeded numpy Generator. A fault
interrupts whatever is running (work, a checkpoint write, a restart): the work since the last
committed checkpoint is lost, and the job pays restart_s plus reading the checkpoint back.

The process is a SimPy simulation: same seed, same numbers. Next to it, the expected wall time
from Daly's model (J. T. Daly, "A higher order estimate of the optimum checkpoint interval for
restart dumps", FGCS 22, 2006): T = M e^(R/M) (e^((tau + C)/M) - 1) W / tau, and the first-order
optimum interval sqrt(2 C M) (J. W. Young, "A first order approximation to the optimum
checkpoint interval", CACM 17, 1974)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from gansim.core.units import HOUR


def young_daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """The Young/Daly optimal compute time between checkpoints: sqrt(2 C M)."""
    if checkpoint_s < 0 or mtbf_s <= 0:
        raise ValueError("checkpoint cost must be >= 0 and MTBF > 0")
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def job_mtbf_s(gpus: int, mtbf_hours_per_gpu: float | None = None, *, instances: int = 1,
               preemptions_per_hour: float | None = None) -> float:
    """The job's mean time between interruptions, seconds: per-GPU failures (a job of N GPUs
    fails N times as often as one GPU) plus preemptions per instance. inf when neither."""
    rate = 0.0
    if mtbf_hours_per_gpu is not None:
        rate += gpus / (mtbf_hours_per_gpu * HOUR)
    if preemptions_per_hour:
        rate += instances * preemptions_per_hour / HOUR
    return math.inf if rate <= 0 else 1.0 / rate


@dataclass(frozen=True)
class RunModel:
    step_s: float
    total_steps: int
    every_steps: int | None = None  # None: no checkpoints (a fault restarts from the start)
    checkpoint_s: float = 0.0  # one write
    restore_s: float = 0.0  # reading a checkpoint back after a restart
    startup_s: float = 0.0  # per process start (e.g. loading a packed dataset)
    failure_rate_per_s: float = 0.0
    failure_restart_s: float = 0.0
    preemption_rate_per_s: float = 0.0
    preemption_restart_s: float = 0.0

    @property
    def fault_rate_per_s(self) -> float:
        return self.failure_rate_per_s + self.preemption_rate_per_s

    @property
    def mean_restart_s(self) -> float:
        rate = self.fault_rate_per_s
        if rate <= 0:
            return 0.0
        return (self.failure_rate_per_s * self.failure_restart_s
                + self.preemption_rate_per_s * self.preemption_restart_s) / rate

    def fault_free_s(self) -> float:
        segments = math.ceil(self.total_steps / self.every_steps) if self.every_steps else 1
        writes = segments if self.every_steps else 0
        return self.startup_s + self.total_steps * self.step_s + writes * self.checkpoint_s


def simulate_run(model: RunModel, seed: int, *, max_wall_factor: float = 1000.0,
                 max_faults: int = 10_000) -> dict[str, Any]:
    """Play the run with seeded faults; returns time_to_train_s, goodput (useful step time /
    wall time), lost_work_s and the counts. A run that has not finished after
    `max_wall_factor` times its fault-free time, or after `max_faults` faults (so frequent
    that segments or restarts hardly ever complete), stops with finished=False."""
    env = simpy.Environment()
    failure_stream, preemption_stream = np.random.SeedSequence(seed).spawn(2)
    state = {"lost_work_s": 0.0, "restart_s": 0.0, "checkpoint_s": 0.0, "startup_s": 0.0, "useful_s": 0.0,
             "failures": 0, "preemptions": 0, "checkpoints": 0, "finished": True}
    cap = max_wall_factor * max(model.fault_free_s(), 1e-9)

    def given_up() -> bool:
        if env.now > cap or state["failures"] + state["preemptions"] > max_faults:
            state["finished"] = False
            return True
        return False

    def count(cause: str) -> None:
        state["failures" if cause == "failure" else "preemptions"] += 1

    def restart_cost(cause: str, committed: int) -> float:
        base = model.failure_restart_s if cause == "failure" else model.preemption_restart_s
        return base + (model.restore_s if committed > 0 else 0.0)

    def trainer():
        committed = 0
        startup = model.startup_s
        while committed < model.total_steps:
            if given_up():
                return
            seg = min(model.every_steps or model.total_steps, model.total_steps - committed)
            write = model.checkpoint_s if model.every_steps else 0.0
            start = env.now
            try:
                yield env.timeout(startup + seg * model.step_s + write)
            except simpy.Interrupt as fault:
                state["lost_work_s"] += env.now - start
                cause = fault.cause
                count(cause)
                while True:  # a fault during the restart starts the restart again
                    if given_up():
                        return
                    begun = env.now
                    try:
                        yield env.timeout(restart_cost(cause, committed))
                        state["restart_s"] += env.now - begun
                        break
                    except simpy.Interrupt as again:
                        state["restart_s"] += env.now - begun
                        cause = again.cause
                        count(cause)
                startup = model.startup_s
                continue
            committed += seg
            state["useful_s"] += seg * model.step_s
            state["checkpoint_s"] += write
            state["startup_s"] += startup
            if model.every_steps:
                state["checkpoints"] += 1
            startup = 0.0

    proc = env.process(trainer())

    def faults(rate: float, stream: np.random.SeedSequence, cause: str):
        rng = np.random.default_rng(stream)
        while True:
            yield env.timeout(float(rng.exponential(1.0 / rate)))
            if not proc.is_alive:
                return
            proc.interrupt(cause)

    if model.failure_rate_per_s > 0:
        env.process(faults(model.failure_rate_per_s, failure_stream, "failure"))
    if model.preemption_rate_per_s > 0:
        env.process(faults(model.preemption_rate_per_s, preemption_stream, "preemption"))
    env.run(until=proc)
    wall = float(env.now)
    state["time_to_train_s"] = wall
    state["goodput"] = state["useful_s"] / wall if wall > 0 else 0.0
    return state


def expected_wall_s(model: RunModel, every_steps: int | None = None) -> float:
    """Daly's expected wall time for the run at a checkpoint interval of `every_steps` steps
    (default: the model's). Restart R = mean restart plus the checkpoint read."""
    k = every_steps if every_steps is not None else model.every_steps
    rate = model.fault_rate_per_s
    work = model.total_steps * model.step_s
    if k is None:
        tau, c = work + model.startup_s, 0.0
    else:
        tau, c = k * model.step_s, model.checkpoint_s
    if rate <= 0:
        segments = math.ceil(model.total_steps / k) if k else 0
        return model.startup_s + work + segments * c
    m = 1.0 / rate
    r = model.mean_restart_s + model.restore_s + model.startup_s
    exponent = (tau + c) / m
    if exponent > 700 or r / m > 700:
        return math.inf
    if k is None:
        return m * math.exp(r / m) * math.expm1(exponent)
    return model.startup_s + m * math.exp(r / m) * math.expm1(exponent) * (work / tau)


def goodput_curve(model: RunModel, intervals: list[int]) -> list[dict[str, float]]:
    """Expected goodput (Daly) at each checkpoint interval, in steps."""
    work = model.total_steps * model.step_s
    rows = []
    for k in sorted(set(i for i in intervals if i >= 1)):
        wall = expected_wall_s(model, k)
        rows.append({"every_steps": k, "expected_goodput": (work / wall) if math.isfinite(wall) and wall > 0 else 0.0,
                     "expected_time_to_train_s": wall if math.isfinite(wall) else None})
    return rows


def curve_intervals(chosen: int | None, optimum: float | None, total_steps: int, points: int = 13) -> list[int]:
    """Log-spaced intervals spanning the chosen and the optimal one (a decade either side)."""
    anchors = [v for v in (chosen, optimum) if v]
    if not anchors:
        return []
    lo = max(1.0, min(anchors) / 10.0)
    hi = min(float(total_steps), max(anchors) * 10.0)
    if hi <= lo:
        hi = lo
    values = {int(round(v)) for v in np.geomspace(lo, hi, points)}
    values.update(int(round(a)) for a in anchors if a >= 1)
    return sorted(v for v in values if 1 <= v <= total_steps)
