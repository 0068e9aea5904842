"""Plotly figures as plain data, handed to plotly.js (`Plotly.newPlot`) by the pages.

Figures are dicts of traces and a layout in plotly.js's own schema, built without
plotly's Python objects: those validate and copy every value, which took seconds for the
figures of a thousand GPUs, and importing them takes half a second more. plotly.js and
its templates are read from the plotly package's files (found without importing it)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

TEMPLATE = "plotly_white"
# ColorBrewer's YlOrRd, light to dark, as plotly's Python package spells it out (plotly.js's
# own "YlOrRd" runs the other way)
YL_OR_RD = [[i / 8, c] for i, c in enumerate([
    "rgb(255,255,204)", "rgb(255,237,160)", "rgb(254,217,118)", "rgb(254,178,76)", "rgb(253,141,60)",
    "rgb(252,78,42)", "rgb(227,26,28)", "rgb(189,0,38)", "rgb(128,0,38)"])]


def _package_file(*parts: str) -> Path:
    spec = find_spec("plotly")
    if spec is None or spec.origin is None:
        raise RuntimeError("the plotly package is not installed (pip install plotly)")
    return Path(spec.origin).parent.joinpath(*parts)


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.js itself, minified, to inline into a page (it then opens offline)."""
    return _package_file("package_data", "plotly.min.js").read_text(encoding="utf-8")


@lru_cache(maxsize=4)
def template(name: str = TEMPLATE) -> dict[str, Any]:
    return json.loads(_package_file("package_data", "templates", f"{name}.json").read_text(encoding="utf-8"))


def _titles(value: Any) -> Any:
    """Without None values; every `title` given as text in the {"text": ...} form that
    plotly.js 3 requires."""
    if isinstance(value, dict):
        return {k: ({"text": v} if k == "title" and isinstance(v, str) else _titles(v))
                for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_titles(v) for v in value]
    return value


def scatter(**props: Any) -> dict[str, Any]:
    return {"type": "scatter", **_titles(props)}


def bar(**props: Any) -> dict[str, Any]:
    return {"type": "bar", **_titles(props)}


def heatmap(**props: Any) -> dict[str, Any]:
    return {"type": "heatmap", **_titles(props)}


def _merge(into: dict[str, Any], props: dict[str, Any]) -> None:
    for key, value in props.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def grid(rows: int, cols: int, titles: list[str], vertical_spacing: float,
         horizontal_spacing: float | None = None) -> "Figure":
    """An empty figure of rows x cols panels, row 1 at the top, each titled, laid out as
    plotly's make_subplots does (panel k = (row - 1) * cols + col has axes xk/yk; a trace
    goes into it with `in_panel`)."""
    gap_x = 0.2 / cols if horizontal_spacing is None else horizontal_spacing
    width = (1 - gap_x * (cols - 1)) / cols
    height = (1 - vertical_spacing * (rows - 1)) / rows
    layout: dict[str, Any] = {"annotations": []}
    for r in range(rows):
        for c in range(cols):
            k = r * cols + c + 1
            x0 = c * (width + gap_x)
            y1 = 1 - r * (height + vertical_spacing)
            suffix = "" if k == 1 else str(k)
            layout[f"xaxis{suffix}"] = {"domain": [x0, x0 + width], "anchor": f"y{suffix}"}
            layout[f"yaxis{suffix}"] = {"domain": [y1 - height, y1], "anchor": f"x{suffix}"}
            if k <= len(titles):
                layout["annotations"].append({
                    "text": titles[k - 1], "x": x0 + width / 2, "y": y1, "xref": "paper", "yref": "paper",
                    "xanchor": "center", "yanchor": "bottom", "showarrow": False, "font": {"size": 16}})
    fig = Figure()
    fig.update_layout(**layout)
    return fig


def in_panel(trace: dict[str, Any], panel: int) -> dict[str, Any]:
    """The trace drawn in panel `panel` (1-based) of a `grid` figure."""
    suffix = "" if panel == 1 else str(panel)
    return {**trace, "xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}


class Figure:
    """Traces and a layout; `to_html` gives the div and the script that draws it."""

    def __init__(self, *traces: dict[str, Any]):
        self.data: list[dict[str, Any]] = list(traces)
        self.layout: dict[str, Any] = {"template": template()}

    def add_trace(self, trace: dict[str, Any]) -> "Figure":
        self.data.append(trace)
        return self

    def update_layout(self, **props: Any) -> "Figure":
        _merge(self.layout, _titles(props))
        return self

    def to_html(self, div_id: str, config: dict[str, Any] | None = None) -> str:
        height = self.layout.get("height")
        style = f"height:{height}px; width:100%;" if height else "height:100%; width:100%;"
        args = ",".join(json.dumps(x, separators=(",", ":")).replace("</", "<\\/")
                        for x in (self.data, self.layout, config or {}))
        return (f'<div id="{div_id}" class="plotly-graph-div" style="{style}"></div>\n'
                f'<script type="text/javascript">Plotly.newPlot("{div_id}",{args});</script>')
