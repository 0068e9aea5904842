"""The seed papers' what-ifs wired onto the runner, one entry point per level:

- `evaluate_run_extensions(scenario, topology, gpus, algorithm, record)` after each point
  (the runner calls it through `PointHooks.extend`): memory, and when configured the whole
  run (time to train, goodput, lost work, Young/Daly), storage and cost/energy;
- `check_scenario(loaded)` before anything runs: what the config validators cannot check
  alone (catalog names, the topology's size against `elastic:`);
- `evaluate_scenario_extensions(loaded)` once per scenario: the plan (cheapest configuration
  under a deadline) and dynamic vs fixed allocation."""

from __future__ import annotations

import math
from typing import Any, Callable

from gansim.core import limits
from gansim.core.config import Scenario
from gansim.core.errors import UserInputError
from gansim.core.units import HOUR
from gansim.runner.point import simulate_point
from gansim.runner.record import RunRecord
from gansim.runner.scenario import LoadedScenario
from gansim.topology.graph import Topology
from gansim.training.memory import memory_report
from gansim.training.workloads import AllreduceWorkload, Workload, scenario_workload
from gansim.whatif.catalog import get_platform, run_cost
from gansim.whatif.elastic import simulate_elastic
from gansim.whatif.deadline_plan import plan
from gansim.whatif.storage import resolve_storage
from gansim.whatif.whole_run import run_segments, whole_run


# ----------------------------------------------------------------------------- per run
def evaluate_run_extensions(scenario: Scenario, topology: Topology, gpus: int, algorithm: str,
                            record: RunRecord | None, *, source: str | None = None,
                            workload: Workload | None = None) -> dict[str, Any]:
    """The extra fields of one run's record: memory_peak_GB, memory_capacity_GB, fits,
    memory_parts, and when configured: the whole run (time_to_train_s, goodput, lost_work_s,
    young_daly_interval_steps beside checkpoint_every_steps, goodput_curve, ...), and with a
    platform: cost_usd, energy_kWh, price_usd_per_hour. `record` is simulate_point's record
    (None for a run that did not fit: then only the memory fields)."""
    topo = topology.scaled(scenario.link_bandwidth_scale)
    workload = workload or scenario_workload(scenario, source=source)
    mem = memory_report(scenario, topo, gpus, workload)
    out: dict[str, Any] = {
        "memory_peak_GB": mem["memory_peak_GB"],
        "memory_capacity_GB": mem["memory_capacity_GB"],
        "fits": mem["fits"],
        "memory_parts": mem["parts"],
    }
    if not mem["activations_known"]:
        out["memory_note"] = "inline workload without memory.activation_bytes_per_sample: activations not counted"
    if record is None or mem["fits"] is False or isinstance(workload, AllreduceWorkload):
        return out
    if scenario.options.gradient_dtype != "fp32" or scenario.options.recompute:
        out["gradient_dtype"] = scenario.options.gradient_dtype
        out["recompute"] = scenario.options.recompute
    if scenario.run is not None:
        out.update(whole_run(scenario, topo, gpus, record, workload=workload, source=source))
    if scenario.platform is not None:
        platform = get_platform(scenario.platform, source=source)
        seconds = out.get("time_to_train_s")
        if seconds is not None:
            cost = run_cost(platform, gpus, seconds, scenario.pricing)
            out.update({k: v for k, v in cost.items() if k != "hours"})
        else:
            cost = run_cost(platform, gpus, HOUR, scenario.pricing)
            out.update({"platform": platform.name, "pricing": scenario.pricing,
                        "price_usd_per_hour": cost["price_usd_per_hour"]})
    return out


# ----------------------------------------------------------------------------- per scenario
def check_scenario(loaded: LoadedScenario) -> None:
    """Cross-checks the config validators cannot make alone: the catalog names (platform,
    storage class, plan platforms) of every sweep combination, the elastic GPU range against
    the topology, the pricing against the platform. UserInputError."""
    s, src = loaded.scenario, loaded.source
    for overrides, scenario in loaded.combinations():
        swept = lambda axis: f"sweep.{axis}" if axis in overrides else axis  # noqa: E731
        if scenario.platform is not None:
            platform = get_platform(scenario.platform, source=src, field=swept("platform"))
            if scenario.pricing == "spot" and platform.spot_usd_per_hour is None:
                raise UserInputError(f"platform {scenario.platform!r} has no spot price in the catalog; use "
                                     "pricing: on_demand", source=src, field=swept("pricing"))
        resolve_storage(scenario.storage, source=src, field=swept("storage"))
        if scenario.run is not None:  # the 1-GPU baseline takes the most steps
            limits.SEGMENTS.check(run_segments(scenario, 1), source=src,
                                  field="checkpoint.every_steps" if scenario.checkpoint else "run.epochs")
    if s.plan is not None:
        for name in s.plan.platforms:
            get_platform(name, source=src, field="plan.platforms")
        if s.plan.deadline is not None:
            hours = s.plan.deadline_in_hours()
            if hours is not None and hours <= 0:
                raise UserInputError("the deadline is in the past", source=src, field="plan.deadline")
    if s.elastic is not None:
        assert s.run is not None  # the config requires it
        limits.SEGMENTS.check(math.ceil(s.run.epochs), source=src, field="run.epochs")
        topo = loaded.topology()
        if s.elastic.max_gpus > len(topo.ranks):
            raise UserInputError(f"max_gpus {s.elastic.max_gpus} but topology {topo.name!r} has {len(topo.ranks)}",
                                 source=src, field="elastic.max_gpus")
        fixed = s.elastic.fixed_gpus or s.elastic.max_gpus
        for name, gpus in (("fixed_gpus", fixed), ("start_gpus", s.elastic.start_gpus or fixed)):
            memory = memory_report(s, topo, gpus)
            if memory["fits"] is False:
                raise UserInputError(f"{gpus} GPUs do not fit in memory ({memory['memory_peak_GB']:.2f} GB of "
                                     f"{memory['memory_capacity_GB']:.2f} GB per GPU)", source=src,
                                     field=f"elastic.{name}")


def evaluate_scenario_extensions(loaded: LoadedScenario, *,
                                 simulate: Callable[..., RunRecord] = simulate_point) -> dict[str, Any]:
    """Scenario-level results (JSON-able): {"plan": ...} when the scenario has `plan:`,
    {"elastic": ...} when it has `elastic:`; {} otherwise. Uses the scenario as written (not
    its sweep overrides)."""
    s, src = loaded.scenario, loaded.source
    out: dict[str, Any] = {}
    if s.plan is not None:
        out["plan"] = plan(s, platforms=s.plan.platforms, pricing=list(s.plan.pricing),
                           deadline_hours=s.plan.deadline_in_hours(), gpus=s.plan.gpus, algorithm=s.plan.algorithm,
                           source=src, simulate=simulate)
    if s.elastic is not None:
        check_scenario(loaded)
        out["elastic"] = simulate_elastic(s, loaded.topology(), source=src, simulate=simulate)
    return out
