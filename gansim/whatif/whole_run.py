"""A whole training run on one point (seeds 002-004): the simulated step time, plus
storage-bound input, checkpoints, failures and preemptions, played by the SimPy run model
of reliability.py; Young/Daly's optimum beside the chosen checkpoint interval."""

from __future__ import annotations

import math
from typing import Any

from gansim.core.config import Scenario
from gansim.core.units import HOUR
from gansim.topology.graph import Topology
from gansim.runner.record import RunRecord
from gansim.training.memory import checkpoint_bytes
from gansim.training.workloads import GanWorkload, Workload, scenario_workload
from gansim.whatif.datasets import dataset_for
from gansim.whatif.reliability import (
    RunModel,
    curve_intervals,
    goodput_curve,
    job_mtbf_s,
    simulate_run,
    young_daly_interval_s,
)
from gansim.whatif.storage import (
    checkpoint_write_seconds,
    dataset_load_seconds,
    epoch_input_seconds,
    resolve_storage,
    step_with_input,
)


def instances_of(topology: Topology, gpus: int) -> int:
    """Machines the run's ranks sit in (ranks that reach each other without a `net` link)."""
    machine = topology.machine_of
    return len({machine[n] for n in topology.ranks[:gpus]})


def run_steps(scenario: Scenario, gpus: int) -> tuple[int, int]:
    """(steps per epoch, steps of the whole run) of the scenario's run at this GPU count."""
    run = scenario.run
    assert run is not None
    steps_per_epoch = max(1, math.ceil(dataset_for(run).images / (scenario.batch_per_gpu(gpus) * gpus)))
    return steps_per_epoch, max(1, math.ceil(run.epochs * steps_per_epoch))


def run_segments(scenario: Scenario, gpus: int) -> int:
    """How many segments (checkpoint intervals) the whole run is cut into at this GPU count."""
    total = run_steps(scenario, gpus)[1]
    return math.ceil(total / scenario.checkpoint.every_steps) if scenario.checkpoint else 1


def whole_run(scenario: Scenario, topology: Topology, gpus: int, record: RunRecord, *,
              workload: Workload | None = None, source: str | None = None, with_preemption: bool = True,
              seed: int | None = None) -> dict[str, Any]:
    """The scenario's whole training run on this point (scenario.run must be set): the step
    time from the record, plus storage-bound input, checkpoints, failures and preemptions."""
    run = scenario.run
    assert run is not None
    workload = workload or scenario_workload(scenario, source=source)
    data = dataset_for(run)
    batch = scenario.batch_per_gpu(gpus) * gpus
    steps_per_epoch, total_steps = run_steps(scenario, gpus)
    storage = resolve_storage(scenario.storage, source=source)
    file_bytes = data.file_bytes or (workload.architecture.sample_bytes if isinstance(workload, GanWorkload)
                                     and workload.architecture is not None else 0.0)
    input_epoch_s = epoch_input_seconds(storage, data.images, file_bytes, run.data_format)
    input_step_s = input_epoch_s / steps_per_epoch
    step_s = step_with_input(float(record.step_time_s), input_step_s, bool(storage and storage.overlap_input))
    startup_s = dataset_load_seconds(storage, data.packed_bytes, run.data_format)

    ckpt = scenario.checkpoint
    c_bytes = checkpoint_bytes(workload, include_optimizer=ckpt.include_optimizer if ckpt else True,
                               optimizer=scenario.memory.optimizer)
    c_s = checkpoint_write_seconds(scenario, c_bytes, source=source) if ckpt else 0.0
    fail = scenario.failures
    pre = scenario.preemption if with_preemption else None
    instances = instances_of(topology, gpus)
    model = RunModel(
        step_s=step_s, total_steps=total_steps, every_steps=ckpt.every_steps if ckpt else None,
        checkpoint_s=c_s, restore_s=c_s, startup_s=startup_s,
        failure_rate_per_s=(gpus / (fail.mtbf_hours_per_gpu * HOUR)) if fail else 0.0,
        failure_restart_s=fail.restart_s if fail else 0.0,
        preemption_rate_per_s=(instances * pre.rate_per_hour / HOUR) if pre else 0.0,
        preemption_restart_s=pre.restart_s if pre else 0.0,
    )
    outcome = simulate_run(model, scenario.seed if seed is None else seed)
    mtbf = job_mtbf_s(gpus, fail.mtbf_hours_per_gpu if fail else None, instances=instances,
                      preemptions_per_hour=pre.rate_per_hour if pre else None)
    yd_s = young_daly_interval_s(c_s, mtbf) if (ckpt and math.isfinite(mtbf)) else None
    yd_steps = (yd_s / step_s) if yd_s is not None and step_s > 0 else None
    out: dict[str, Any] = {
        "dataset": data.name,
        "images": data.images,
        "epochs": run.epochs,
        "global_batch": batch,
        "steps_per_epoch": steps_per_epoch,
        "steps_total": total_steps,
        "step_time_with_input_s": step_s,
        "input_s_per_epoch": input_epoch_s,
        "epoch_time_s": steps_per_epoch * step_s,
        "dataset_load_s": startup_s,
        "storage": storage.name if storage else None,
        "time_to_train_s": outcome["time_to_train_s"],
        "hours": outcome["time_to_train_s"] / HOUR,
        "goodput": outcome["goodput"],
        "lost_work_s": outcome["lost_work_s"],
        "restart_s_total": outcome["restart_s"],
        "checkpoint_s_total": outcome["checkpoint_s"],
        "failures": outcome["failures"],
        "preemptions": outcome["preemptions"],
        "finished": outcome["finished"],
        "instances": instances,
        "checkpoint_bytes": c_bytes if ckpt else None,
        "checkpoint_cost_s": c_s if ckpt else None,
        "checkpoint_every_steps": ckpt.every_steps if ckpt else None,
        "job_mtbf_s": mtbf if math.isfinite(mtbf) else None,
        "young_daly_interval_s": yd_s,
        "young_daly_interval_steps": yd_steps,
    }
    if ckpt and math.isfinite(mtbf):
        out["goodput_curve"] = goodput_curve(model, curve_intervals(ckpt.every_steps, yd_steps, total_steps))
    return out
