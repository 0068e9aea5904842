"""`gansim validate`'s files: validation.json and a self-contained report.html of predicted
vs measured speed-up."""

from __future__ import annotations

from pathlib import Path

from gansim.core.files import atomic_write
from gansim.outputs import plot
from gansim.outputs.plot import Figure
from gansim.outputs.report import Section, html_page
from gansim.outputs.results import to_json
from gansim.prediction.validation import ValidationReport


def write_validation(out_dir: Path, report: ValidationReport, *, source: str) -> list[Path]:
    sizes = [r.world_size for r in report.rows]
    fig = Figure()
    fig.add_trace(plot.scatter(x=sizes, y=sizes, mode="lines", name="ideal", line={"dash": "dot", "color": "grey"}))
    # the bars span the speed-ups of the fastest and the slowest repeat at that size
    high = [r.speedup_at(min(r.measured_repeats_s)) - r.measured_speedup if r.measured_repeats_s else 0.0
            for r in report.rows]
    low = [r.measured_speedup - r.speedup_at(max(r.measured_repeats_s)) if r.measured_repeats_s else 0.0
           for r in report.rows]
    fig.add_trace(plot.scatter(x=sizes, y=[r.measured_speedup for r in report.rows], mode="lines+markers",
                             name="measured (bars: range over repeats)",
                             error_y={"type": "data", "symmetric": False, "array": high, "arrayminus": low}))
    fig.add_trace(plot.scatter(x=sizes, y=[r.predicted_speedup for r in report.rows], mode="lines+markers",
                             name="predicted (from the fit only)"))
    prov = report.profile.provenance
    title = f"Predicted vs measured speed-up: {prov.model}, {prov.device}, {prov.backend} ({source})"
    fig.update_layout(title=title, xaxis={"title": "ranks"}, yaxis={"title": "speed-up (weak scaling: N T1 / TN)"},
                      height=520)
    html = html_page(title, [Section("Speed-up", [fig], anchor="speedup")])  # self-contained: works offline
    json_path, html_path = out_dir / "validation.json", out_dir / "report.html"
    atomic_write(json_path, to_json(report.as_dict()))
    atomic_write(html_path, html)
    return [json_path, html_path]
