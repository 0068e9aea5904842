"""The cheapest catalog configuration that trains a scenario's run before a deadline
(seeds 000 and 003). `plan(...)` is a pure function of a scenario and a list of catalog
platforms; it serves the scenario objective `plan:` (summary["plan"]) and the command
`gansim plan SCENARIO`."""

from __future__ import annotations

from typing import Any, Callable

from gansim.core.config import Scenario
from gansim.core.errors import UserInputError
from gansim.runner.point import simulate_point
from gansim.runner.record import RunRecord
from gansim.training.memory import memory_report
from gansim.training.workloads import scenario_workload
from gansim.whatif.catalog import get_platform, platform_topology, run_cost
from gansim.whatif.whole_run import whole_run


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """Which (time, cost) points no other point beats on both (ties kept)."""
    flags = []
    for i, (t, c) in enumerate(points):
        dominated = any((t2 <= t and c2 <= c) and (t2 < t or c2 < c) for j, (t2, c2) in enumerate(points) if j != i)
        flags.append(not dominated)
    return flags


def plan(scenario: Scenario, *, platforms: list[str], pricing: list[str] | None = None,
         deadline_hours: float | None = None, gpus: list[int] | None = None, algorithm: str | None = None,
         source: str | None = None, simulate: Callable[..., RunRecord] = simulate_point) -> dict[str, Any]:
    """Simulate the scenario's workload on each catalog platform (at each GPU count, each
    pricing) for the scenario's whole run, and pick the cheapest that meets the deadline.

    Returns {"deadline_hours", "rows": [...], "chosen": row or None, "reason"}. Each row:
    platform, gpus, pricing, fits, step_time_s, time_to_train_s, hours, cost_usd, energy_kWh,
    goodput, meets_deadline, pareto. Preemption (scenario.preemption) applies to spot rows only;
    failures (scenario.failures) to all."""
    if scenario.run is None:
        raise UserInputError("planning needs 'run' (dataset or images, and epochs)", source=source, field="run")
    if deadline_hours is not None and deadline_hours <= 0:
        raise UserInputError(f"the deadline must be in the future (got {deadline_hours:g} hours)", source=source,
                             field="plan.deadline_hours")
    pricing = pricing or ["on_demand"]
    algorithm = algorithm or scenario.algorithms[0]
    workload = scenario_workload(scenario, source=source)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for name in platforms:
        p = get_platform(name, source=source, field="plan.platforms")
        topo = platform_topology(name)
        counts = [g for g in (gpus or [p.gpus]) if g <= p.gpus]
        if gpus and len(counts) < len(gpus):
            notes.append(f"{name}: has {p.gpus} GPUs, skipped {[g for g in gpus if g > p.gpus]}")
        for g in counts:
            mem = memory_report(scenario, topo, g, workload)
            base = {"platform": name, "provider": p.provider, "kind": p.kind, "instance": p.instance,
                    "device_model": p.device_model, "gpus": g, "fits": mem["fits"],
                    "memory_peak_GB": mem["memory_peak_GB"]}
            if mem["fits"] is False:
                for price in pricing:
                    rows.append({**base, "pricing": price, "out_of_memory": True})
                continue
            try:
                record = simulate(scenario, topo, g, algorithm, source=source)
            except UserInputError as err:
                raise UserInputError(f"platform {name!r}: {err.message}", source=source,
                                     field="plan.platforms") from None
            for price in pricing:
                if price == "spot" and p.spot_usd_per_hour is None:
                    notes.append(f"{name}: no spot price in the catalog")
                    continue
                run = whole_run(scenario, topo, g, record, workload=workload, source=source,
                                with_preemption=(price == "spot"))
                cost = run_cost(p, g, run["time_to_train_s"], price)
                rows.append({**base, "pricing": price, "algorithm": algorithm, "step_time_s": record.step_time_s,
                             "time_to_train_s": run["time_to_train_s"], "goodput": run["goodput"],
                             "failures": run.get("failures", 0), "preemptions": run.get("preemptions", 0),
                             **cost})
    timed = [r for r in rows if r.get("time_to_train_s") is not None]
    for r in timed:
        r["meets_deadline"] = None if deadline_hours is None else bool(r["hours"] <= deadline_hours)
    priced = [r for r in timed if r.get("cost_usd") is not None]
    for r, flag in zip(priced, pareto_front([(r["hours"], r["cost_usd"]) for r in priced])):
        r["pareto"] = flag
    candidates = [r for r in priced if r.get("meets_deadline") in (True, None)]
    chosen = min(candidates, key=lambda r: (r["cost_usd"], r["hours"])) if candidates else None
    if chosen is not None:
        chosen["chosen"] = True
        reason = (f"cheapest of {len(candidates)} priced configurations"
                  + (f" that finish within {deadline_hours:g} h" if deadline_hours is not None else ""))
    elif not priced:
        reason = "no configuration has a price in the catalog"
    else:
        fastest = min(priced, key=lambda r: r["hours"])
        reason = (f"no priced configuration meets the deadline of {deadline_hours:g} h; the fastest is "
                  f"{fastest['platform']} ({fastest['pricing']}) at {fastest['hours']:.2f} h")
    return {"deadline_hours": deadline_hours, "algorithm": algorithm, "rows": rows, "chosen": chosen,
            "reason": reason, "notes": notes}


def format_plan(result: dict[str, Any]) -> str:
    header = f"{'platform':<22} {'gpus':>4} {'pricing':<9} {'hours':>9} {'$':>10} {'kWh':>8} {'goodput':>7}  note"
    lines = [header, "-" * len(header)]
    for r in result["rows"]:
        if r.get("out_of_memory"):
            lines.append(f"{r['platform']:<22} {r['gpus']:>4} {r['pricing']:<9} {'':>9} {'':>10} {'':>8} {'':>7}  "
                         f"out of memory ({r['memory_peak_GB']:.1f} GB)")
            continue
        cost = "n/a" if r.get("cost_usd") is None else f"{r['cost_usd']:.2f}"
        kwh = "n/a" if r.get("energy_kWh") is None else f"{r['energy_kWh']:.2f}"
        note = []
        if r.get("chosen"):
            note.append("CHOSEN")
        if r.get("meets_deadline") is False:
            note.append("misses deadline")
        if r.get("pareto"):
            note.append("pareto")
        lines.append(f"{r['platform']:<22} {r['gpus']:>4} {r['pricing']:<9} {r['hours']:>9.3f} {cost:>10} {kwh:>8} "
                     f"{r['goodput']:>7.3f}  {', '.join(note)}")
    dl = result.get("deadline_hours")
    lines.append(f"deadline: {'none' if dl is None else f'{dl:g} h'}; {result['reason']}")
    lines.extend(f"note: {n}" for n in result.get("notes", []))
    return "\n".join(lines)


