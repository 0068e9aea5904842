"""`gansim validate`'s files: validation.json and a self-contained report.html of predicted
vs measured speed-up (`--profile`), or of busbw against message size, one panel per published
system, measured points over the predicted curve (`--published`)."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gansim.core.files import atomic_write
from gansim.outputs import plot
from gansim.outputs.plot import Figure
from gansim.outputs.report import Section, html_page
from gansim.outputs.results import to_json

if TYPE_CHECKING:  # the profile's models cost a fifth of a second that `gansim simulate` need not pay
    from gansim.prediction.profile_validation import ValidationReport


def write_validation(out_dir: Path, report: ValidationReport, *, source: str) -> list[Path]:
    sizes = [r.world_size for r in report.rows]
    fig = Figure()
    fig.add_trace(plot.scatter(x=sizes, y=sizes, mode="lines", name="ideal", line={"dash": "dot", "color": "grey"}))
    # a run of one world size (one trace) has no measured speed-up: its step times are compared only
    with_speedup = [r for r in report.rows if r.measured_speedup is not None]
    if with_speedup:
        # the bars span the speed-ups of the fastest and the slowest repeat at that size
        high = [r.speedup_at(min(r.measured_repeats_s)) - r.measured_speedup if r.measured_repeats_s else 0.0
                for r in with_speedup]
        low = [r.measured_speedup - r.speedup_at(max(r.measured_repeats_s)) if r.measured_repeats_s else 0.0
               for r in with_speedup]
        fig.add_trace(plot.scatter(x=[r.world_size for r in with_speedup], y=[r.measured_speedup for r in with_speedup],
                                   mode="lines+markers", name="measured (bars: range over repeats)",
                                   error_y={"type": "data", "symmetric": False, "array": high, "arrayminus": low}))
    fig.add_trace(plot.scatter(x=sizes, y=[r.predicted_speedup for r in report.rows], mode="lines+markers",
                               name="predicted (from the fit only)"))
    prov = report.profile.provenance
    title = f"Predicted vs measured speed-up: {prov.model}, {prov.device}, {prov.backend} ({source})"
    fig.update_layout(title=title, xaxis={"title": "ranks"}, yaxis={"title": "speed-up (weak scaling: N T1 / TN)"},
                      height=520)
    page = html_page(title, [Section("Speed-up", [fig], anchor="speedup")])  # self-contained: works offline
    json_path, html_path = out_dir / "validation.json", out_dir / "report.html"
    atomic_write(json_path, to_json(report.as_dict()))
    atomic_write(html_path, page)
    return [json_path, html_path]


OP_COLOURS = {"all_reduce": "#1f77b4", "all_gather": "#2ca02c", "reduce_scatter": "#9467bd", "broadcast": "#d62728"}


def write_published_validation(out_dir: Path, record: dict[str, Any],
                               curves: dict[str, dict[str, list[tuple[int, float]]]], table: str) -> list[Path]:
    """validation.json (the comparison) and report.html: per system, busbw against message size,
    the measured points over the predicted curve, each collective in its colour; then the
    error table as the command prints it."""
    systems = record["systems"]
    cols = 2
    rows = max(1, math.ceil(len(systems) / cols))
    titles = [f"{s['name']} (NCCL {s['nccl_version']}): median |err| {s['median_abs_error']:.1%}" for s in systems]
    fig = plot.grid(rows, cols, titles, vertical_spacing=0.35 / rows + 0.02)
    in_legend: set[str] = set()
    for i, s in enumerate(systems):
        panel = i + 1
        for op, curve in curves.get(s["name"], {}).items():
            colour = OP_COLOURS.get(op, "#7f7f7f")
            first = op not in in_legend
            in_legend.add(op)
            fig.add_trace(plot.in_panel(plot.scatter(
                x=[x for x, _ in curve], y=[y for _, y in curve], mode="lines", line={"color": colour},
                name=f"{op} predicted", legendgroup=op, showlegend=first), panel))
            measured = [p for p in record["points"] if p["system"] == s["name"] and p["op"] == op]
            fig.add_trace(plot.in_panel(plot.scatter(
                x=[p["size_B"] for p in measured], y=[p["measured_busbw_GBps"] for p in measured], mode="markers",
                marker={"color": colour, "size": 7, "symbol": "circle-open"}, name=f"{op} measured",
                legendgroup=op, showlegend=first,
                text=[f"error {p['error']:+.1%}, {p['algorithm']}/{p['protocol']}" for p in measured]), panel))
        suffix = "" if panel == 1 else str(panel)
        fig.update_layout(**{f"xaxis{suffix}": {"type": "log", "title": "message size (B)"},
                             f"yaxis{suffix}": {"title": "busbw (GB/s)"}})
    total = record["summary"]
    fig.update_layout(height=320 * rows + 120)  # the plotly_white template, as every figure has
    page = html_page("Published nccl-tests measurements vs gansim's prediction from the topology alone", [
        Section("busbw against message size", [fig], anchor="curves", caption=(
            "Lines: the nccl algorithm's prediction on the flow model; open circles: the published measurements. "
            "Hover over a point for its error and what the model says NCCL chose.")),
        Section("Error table", html=f"<pre>{html.escape(table)}</pre>", anchor="table"),
    ], subtitle=html.escape(f"median |error| {total['median_abs_error']:.1%}, worst {total['worst_abs_error']:.1%} "
                            f"over {total['points']} points of 1 MiB and more"))
    json_path, html_path = out_dir / "validation.json", out_dir / "report.html"
    atomic_write(json_path, to_json(record))
    atomic_write(html_path, page)
    return [json_path, html_path]
