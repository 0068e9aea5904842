"""`gansim validate`'s files: validation.json and a self-contained report.html of predicted
vs measured speed-up."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gansim.core.files import atomic_write
from gansim.outputs.results import to_json

if TYPE_CHECKING:  # the profile's models cost a fifth of a second that `gansim simulate` need not pay
    from gansim.prediction.validation import ValidationReport


# everything write_validation writes into its folder
VALIDATION_OUTPUTS = ("validation.json", "report.html")


def write_validation(out_dir: Path, report: ValidationReport, *, source: str) -> list[Path]:
    import plotly.graph_objects as go

    sizes = [r.world_size for r in report.rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=sizes, y=sizes, mode="lines", name="ideal", line={"dash": "dot", "color": "grey"}))
    # the bars span the speed-ups of the fastest and the slowest repeat at that size
    high = [r.speedup_at(min(r.measured_repeats_s)) - r.measured_speedup if r.measured_repeats_s else 0.0
            for r in report.rows]
    low = [r.measured_speedup - r.speedup_at(max(r.measured_repeats_s)) if r.measured_repeats_s else 0.0
           for r in report.rows]
    fig.add_trace(go.Scatter(x=sizes, y=[r.measured_speedup for r in report.rows], mode="lines+markers",
                             name="measured (bars: range over repeats)",
                             error_y={"type": "data", "symmetric": False, "array": high, "arrayminus": low}))
    fig.add_trace(go.Scatter(x=sizes, y=[r.predicted_speedup for r in report.rows], mode="lines+markers",
                             name="predicted (from the fit only)"))
    prov = report.profile.provenance
    fig.update_layout(title=f"Predicted vs measured speed-up: {prov.model}, {prov.device}, {prov.backend} ({source})",
                      xaxis_title="ranks", yaxis_title="speed-up (weak scaling: N T1 / TN)", template="plotly_white")
    html = fig.to_html(include_plotlyjs=True, full_html=True)  # self-contained: works offline
    json_path, html_path = out_dir / "validation.json", out_dir / "report.html"
    atomic_write(json_path, to_json(report.as_dict()))
    atomic_write(html_path, html)
    return [json_path, html_path]
