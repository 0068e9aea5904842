"""The what-if figures of report.html, from a scenario's runs and its scenario-level what-ifs: cost vs time to train (Pareto front
marked), goodput vs checkpoint interval, memory per run against the device's capacity, and
dynamic vs fixed allocation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gansim.core.units import HOUR
from gansim.outputs import plot
from gansim.outputs.plot import Figure
from gansim.runner.record import RunRecord
from gansim.whatif.deadline_plan import pareto_front


def figures_for(runs: Sequence[RunRecord], scenario_whatifs: Mapping[str, Any] | None = None) -> list[Any]:
    """Plotly figures from a scenario's runs and its scenario-level what-ifs (summary.json's
    `plan` and `elastic`): cost vs time to train (Pareto front marked), goodput vs checkpoint
    interval, memory per run against the device's capacity, and dynamic vs fixed allocation.
    Only the figures there are data for."""
    figures: list[Any] = []
    scenario_whatifs = scenario_whatifs or {}
    plan_result = scenario_whatifs.get("plan")

    # cost vs time to train
    points = []
    if plan_result:
        for r in plan_result.get("rows", []):
            if r.get("cost_usd") is not None and r.get("hours") is not None:
                points.append((f"{r['platform']} x{r['gpus']} {r['pricing']}", r["hours"], r["cost_usd"],
                               bool(r.get("pareto")), bool(r.get("chosen"))))
    else:
        for run in runs:
            whatifs = run.extensions
            if whatifs.get("cost_usd") is not None and whatifs.get("hours") is not None:
                points.append((f"{run.gpus} GPUs {run.algorithm}", whatifs["hours"], whatifs["cost_usd"], False,
                               False))
        if points:
            flags = pareto_front([(p[1], p[2]) for p in points])
            points = [(p[0], p[1], p[2], f, False) for p, f in zip(points, flags)]
    if points:
        fig = Figure()
        fig.add_trace(plot.scatter(x=[p[1] for p in points], y=[p[2] for p in points], mode="markers+text",
                                 text=[p[0] for p in points], textposition="top center", name="configurations",
                                 marker={"size": 9, "color": ["#d62728" if p[4] else "#1f77b4" for p in points]}))
        front = sorted((p for p in points if p[3]), key=lambda p: p[1])
        if front:
            fig.add_trace(plot.scatter(x=[p[1] for p in front], y=[p[2] for p in front], mode="lines",
                                     name="Pareto front", line={"dash": "dash", "color": "#2ca02c"}))
        deadline = (plan_result or {}).get("deadline_hours")
        if deadline:  # a trace, not a shape: shapes on a log axis take log10 coordinates
            costs = [p[2] for p in points]
            fig.add_trace(plot.scatter(x=[deadline, deadline], y=[0, max(costs) * 1.1], mode="lines",
                                     name=f"deadline {deadline:g} h", line={"dash": "dot", "color": "gray"}))
        fig.update_layout(title="Cost vs time to train (chosen in red)", xaxis={"title": "time to train (hours)",
                                                                                     "type": "log"},
                          yaxis={"title": "cost (USD)"})
        figures.append(fig)

    # goodput vs checkpoint interval
    curves = [(run, run.extensions) for run in runs if run.extensions.get("goodput_curve")]
    if curves:
        fig = Figure()
        for run, r in curves:
            label = f"{run.gpus} GPUs {run.algorithm}".strip()
            curve = r["goodput_curve"]
            fig.add_trace(plot.scatter(x=[c["every_steps"] for c in curve], y=[c["expected_goodput"] for c in curve],
                                     mode="lines", name=f"{label}: expected (Daly)"))
            fig.add_trace(plot.scatter(x=[r["checkpoint_every_steps"]], y=[r["goodput"]], mode="markers",
                                     name=f"{label}: simulated, chosen interval", marker={"size": 10}))
            if r.get("young_daly_interval_steps"):
                yd = r["young_daly_interval_steps"]
                fig.add_trace(plot.scatter(x=[yd, yd], y=[0, 1], mode="lines", line={"dash": "dot"},
                                         name=f"{label}: Young/Daly optimum ({yd:.0f} steps)"))
        fig.update_layout(title="Goodput vs checkpoint interval", xaxis={"title": "checkpoint every N steps",
                                                                             "type": "log"},
                          yaxis={"title": "goodput (useful step time / wall time)"})
        figures.append(fig)

    # memory per run against capacity
    memories = [(run, run.memory) for run in runs if run.memory is not None and run.memory.peak_GB is not None]
    if memories:
        fig = Figure()
        labels = [f"{run.gpus} GPUs {run.algorithm}" + (
            " " + " ".join(f"{k}={v}" for k, v in run.sweep.items()) if run.sweep else "")
            for run, _ in memories]
        part_names: list[str] = []
        for _, memory in memories:
            for k in memory.parts:
                if k not in part_names:
                    part_names.append(k)
        for part in part_names:
            fig.add_trace(plot.bar(x=labels, y=[memory.parts.get(part, 0.0) for _, memory in memories], name=part))
        caps = [memory.capacity_GB for _, memory in memories]
        if any(c is not None for c in caps):
            fig.add_trace(plot.scatter(x=labels, y=caps, mode="markers", name="device capacity",
                                     marker={"symbol": "line-ew-open", "size": 30, "color": "black"}))
        fig.update_layout(barmode="stack", title="Peak memory per rank vs the device's capacity",
                          yaxis={"title": "GB"})
        figures.append(fig)

    # dynamic vs fixed allocation
    elastic = scenario_whatifs.get("elastic")
    if elastic:
        fig = Figure()
        for key in ("fixed", "elastic"):
            traj = elastic[key]["trajectory"]
            fig.add_trace(plot.scatter(x=[t["start_s"] / HOUR for t in traj], y=[t["gpus"] for t in traj],
                                     mode="lines+markers", line={"shape": "hv"}, name=f"{key} allocation"))
        fig.update_layout(title=(f"GPUs per epoch: fixed {elastic['fixed']['hours']:.2f} h vs dynamic "
                                 f"{elastic['elastic']['hours']:.2f} h"), xaxis={"title": "hours"}, yaxis={"title": "GPUs"})
        figures.append(fig)
    return figures
