"""Dynamic resource allocation (seed 001, "resource-aware GAN training") against a fixed
allocation.

A GPU's utilisation at N GPUs is the compute share of the step simulated at N GPUs
(breakdown compute_s / step_time_s): the rest of the step it waits on data or on the
all-reduce. The policy looks at it at every epoch boundary: above `scale_up_above` the GPUs
are busy, so it adds GPUs (doubling, or one); below `scale_down_below` they mostly wait, so it
removes some; each change costs `rescale_s` (stop, checkpoint, restart on the new allocation),
during which the new allocation is billed and idle. `cooldown_epochs` keeps a new allocation
for that many epochs before the next change. Each GPU count visited is simulated once (cached).

Both runs are SimPy processes of epochs; time, cost (GPU-hours at the platform's price per
GPU, per-GPU billing assumed for the dynamic run), and the time-weighted mean utilisation of
the allocated GPUs are reported."""

from __future__ import annotations

import math
from typing import Any, Callable

import simpy

from gansim.core.config import Scenario
from gansim.core.errors import UserInputError
from gansim.core.units import HOUR
from gansim.runner.point import simulate_point
from gansim.runner.record import RunRecord
from gansim.topology.graph import Topology
from gansim.training.memory import memory_report
from gansim.whatif.catalog import get_platform, price_per_hour
from gansim.whatif.datasets import dataset_for


def _next_gpus(g: int, util: float, spec: Any) -> int:
    if util > spec.scale_up_above:
        target = g * 2 if spec.step == "double" else g + 1
    elif util < spec.scale_down_below:
        target = max(1, g // 2) if spec.step == "double" else g - 1
    else:
        target = g
    return min(spec.max_gpus, max(spec.min_gpus, target))


def simulate_elastic(scenario: Scenario, topology: Topology, *, source: str | None = None,
                     simulate: Callable[..., RunRecord] = simulate_point) -> dict[str, Any]:
    spec = scenario.elastic
    run = scenario.run
    if spec is None or run is None:
        raise UserInputError("dynamic allocation needs 'elastic' and 'run'", source=source, field="elastic")
    if spec.max_gpus > len(topology.ranks):
        raise UserInputError(f"max_gpus {spec.max_gpus} but topology {topology.name!r} has {len(topology.ranks)}",
                             source=source, field="elastic.max_gpus")
    algorithm = spec.algorithm or scenario.algorithms[0]
    data = dataset_for(run)
    cache: dict[int, dict[str, Any]] = {}

    def point(g: int) -> dict[str, Any]:
        if g not in cache:
            mem = memory_report(scenario, topology, g)
            if mem["fits"] is False:
                cache[g] = {"gpus": g, "fits": False, "memory_peak_GB": mem["memory_peak_GB"]}
            else:
                rec = simulate(scenario, topology, g, algorithm, source=source)
                step = float(rec.step_time_s)
                util = float(rec.breakdown.compute_s) / step if step > 0 else 0.0
                steps = max(1, math.ceil(data.images / (scenario.batch_per_gpu(g) * g)))
                cache[g] = {"gpus": g, "fits": True, "step_time_s": step, "utilisation": min(util, 1.0),
                            "steps_per_epoch": steps, "epoch_time_s": steps * step}
        return cache[g]

    price_per_gpu_hour = None
    if scenario.platform is not None:
        platform = get_platform(scenario.platform, source=source)
        price = price_per_hour(platform, scenario.pricing)
        price_per_gpu_hour = None if price is None else price / platform.gpus

    def play(start: int, dynamic: bool) -> dict[str, Any]:
        env = simpy.Environment()
        trajectory: list[dict[str, Any]] = []
        totals = {"gpu_seconds": 0.0, "busy_gpu_seconds": 0.0, "rescales": 0, "rescale_s": 0.0}

        def proc():
            g = start
            if not point(g)["fits"]:
                raise UserInputError(f"{g} GPUs do not fit in memory", source=source, field="elastic")
            since_change = 0
            epochs_left = run.epochs
            epoch = 0
            while epochs_left > 1e-12:
                frac = min(1.0, epochs_left)
                p = point(g)
                duration = p["epoch_time_s"] * frac
                trajectory.append({"epoch": epoch, "start_s": env.now, "gpus": g, "utilisation": p["utilisation"],
                                   "epoch_time_s": duration})
                yield env.timeout(duration)
                totals["gpu_seconds"] += g * duration
                totals["busy_gpu_seconds"] += g * duration * p["utilisation"]
                epochs_left -= frac
                epoch += 1
                since_change += 1
                if not dynamic or epochs_left <= 1e-12 or since_change <= spec.cooldown_epochs:
                    continue
                target = _next_gpus(g, p["utilisation"], spec)
                if target != g and not point(target)["fits"]:
                    target = g
                if target != g:
                    g = target
                    since_change = 0
                    totals["rescales"] += 1
                    totals["rescale_s"] += spec.rescale_s
                    yield env.timeout(spec.rescale_s)
                    totals["gpu_seconds"] += g * spec.rescale_s

        env.run(until=env.process(proc()))
        seconds = float(env.now)
        gpu_hours = totals["gpu_seconds"] / HOUR
        return {
            "hours": seconds / HOUR,
            "time_to_train_s": seconds,
            "gpu_hours": gpu_hours,
            "cost_usd": None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour,
            "mean_utilisation": totals["busy_gpu_seconds"] / totals["gpu_seconds"] if totals["gpu_seconds"] else 0.0,
            "rescales": totals["rescales"],
            "rescale_s": totals["rescale_s"],
            "final_gpus": trajectory[-1]["gpus"] if trajectory else start,
            "trajectory": trajectory,
        }

    fixed_gpus = spec.fixed_gpus or spec.max_gpus
    start = spec.start_gpus or fixed_gpus
    fixed = play(fixed_gpus, dynamic=False)
    dynamic = play(start, dynamic=True)
    return {
        "algorithm": algorithm,
        "policy": spec.model_dump(),
        "dataset": data.name,
        "epochs": run.epochs,
        "price_usd_per_gpu_hour": price_per_gpu_hour,
        "fixed": fixed,
        "elastic": dynamic,
        "points": [cache[g] for g in sorted(cache)],
        "time_saving": 1.0 - dynamic["hours"] / fixed["hours"] if fixed["hours"] > 0 else 0.0,
    }
