"""report.html: one self-contained page (plotly.js inlined, so it opens offline) that shows
what a scenario predicts and why:

* speed-up vs GPU count per algorithm (and per sweep combination), the ideal line, and
  the scenario's reference (measured) points;
* the time of a step split into compute, exposed communication, data and idle, per run;
* every link's utilisation per run (a heatmap per topology; on topologies of many links,
  links grouped in tiers, the busiest of each named), each run's bottleneck marked;
* a per-rank timeline (Gantt) of the first simulated steps of the featured runs;
* a drawing of each topology, link kinds and bandwidths, bottleneck links in red (machines
  collapsed to one marker each on clusters of many GPUs).

The same page builder (`html_page`) serves `gansim topology show --out` and `gansim validate`. If any script on a page fails, the page says so in
a red banner at its top (and records it in the `data-gansim-errors` attribute of <html>,
which the browser test reads)."""

from __future__ import annotations

import html
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np

from gansim.core.version import __version__
from gansim.outputs import plot
from gansim.outputs.drawing import topology_figures
from gansim.outputs.figures import figures_for
from gansim.outputs.plot import Figure, plotly_js
from gansim.runner.record import ResourceUse, RunRecord
from gansim.runner.sweep import ScenarioResult
from gansim.topology.graph import Topology

CATEGORY_COLOURS = {"compute": "#2ca02c", "communication": "#d62728", "data": "#1f77b4", "idle": "#c7c7c7",
                    "host overhead": "#8c564b", "all-reduce": "#d62728"}
ALGORITHM_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                     "#bcbd22", "#17becf"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
HEATMAP_ALL_LINKS_MAX = 128  # above this, links are grouped into tiers (see link_tiers)
TABLE_MAX_ROWS = 60

# Runs before plotly: any uncaught error or rejected promise on the page (plotly's included)
# becomes a visible banner and a count on <html data-gansim-errors>.
_ERROR_HOOK = """<script>
(function () {
  var errors = [];
  function report(message) {
    errors.push(String(message));
    document.documentElement.setAttribute('data-gansim-errors', String(errors.length));
    document.documentElement.setAttribute('data-gansim-error-text', errors.join(' | '));
    var show = function () {
      var banner = document.getElementById('gansim-error-banner');
      if (!banner) {
        banner = document.createElement('div');
        banner.id = 'gansim-error-banner';
        banner.className = 'error-banner';
        document.body.insertBefore(banner, document.body.firstChild);
      }
      banner.textContent = 'This page hit a script error, some plots may be missing: ' + errors.join(' | ');
    };
    if (document.body) { show(); } else { document.addEventListener('DOMContentLoaded', show); }
  }
  window.addEventListener('error', function (e) { report(e.message || e); });
  window.addEventListener('unhandledrejection', function (e) { report(e.reason || 'unhandled rejection'); });
  document.documentElement.setAttribute('data-gansim-errors', '0');
})();
</script>"""

# After load: each plot says how many traces and calculated points it drew (the browser
# test reads these; a user never sees them).
_PLOT_CENSUS = """<script>
window.addEventListener('load', function () {
  var plots = document.querySelectorAll('.js-plotly-plot');
  plots.forEach(function (gd) {
    var points = 0;
    (gd.calcdata || []).forEach(function (cd) { points += cd ? cd.length : 0; });
    gd.setAttribute('data-gansim-traces', String((gd._fullData || []).length));
    gd.setAttribute('data-gansim-points', String(points));
  });
  document.documentElement.setAttribute('data-gansim-plots', String(plots.length));
});
</script>"""

_STYLE = """<style>
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 0 auto;
       max-width: 1400px; padding: 1em 2em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
p.caption, p.sub { color: #555; font-size: 0.92em; max-width: 70em; }
table.runs { border-collapse: collapse; font-size: 0.85em; }
table.runs td, table.runs th { padding: 2px 8px; border-bottom: 1px solid #eee; text-align: right; }
table.runs th { background: #f5f5f5; } table.runs td.l, table.runs th.l { text-align: left; }
.error-banner { background: #d62728; color: white; padding: 0.6em 1em; font-weight: bold; }
nav a { margin-right: 1em; }
</style>"""


@dataclass
class Section:
    """One part of a page: a heading, then figures and/or HTML, then a caption."""

    title: str
    figures: Sequence[Any] = ()
    caption: str = ""
    html: str = ""
    anchor: str = ""


def html_page(title: str, sections: Sequence[Section], *, subtitle: str = "") -> str:
    """A complete, self-contained HTML page. Figures get stable div ids, so the same
    input gives the same bytes."""
    parts = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>", f'<meta name="generator" content="gansim {__version__}">',
        _ERROR_HOOK, _STYLE,
        f'<script type="text/javascript">{plotly_js()}</script>',
        "</head>", "<body>", f"<h1>{html.escape(title)}</h1>",
    ]
    if subtitle:
        parts.append(f'<p class="sub">{subtitle}</p>')
    anchors = [(s.anchor or f"section-{i}", s.title) for i, s in enumerate(sections)]
    if len(sections) > 2:
        parts.append("<nav>" + "".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t in anchors) + "</nav>")
    plot_index = 0
    for (anchor, _), section in zip(anchors, sections):
        parts.append(f'<section id="{anchor}"><h2>{html.escape(section.title)}</h2>')
        if section.html:
            parts.append(section.html)
        for fig in section.figures:
            parts.append(fig.to_html(f"plot-{plot_index}", {"displaylogo": False, "responsive": True}))
            plot_index += 1
        if section.caption:
            parts.append(f'<p class="caption">{section.caption}</p>')
        parts.append("</section>")
    parts += [f'<p class="sub">gansim {__version__}</p>', _PLOT_CENSUS, "</body>", "</html>", ""]
    return "\n".join(parts)


# ----------------------------------------------------------------------------- run labels
def combo_label(run: RunRecord) -> str:
    return ", ".join(f"{k}={v}" for k, v in run.sweep.items())


def run_label(run: RunRecord) -> str:
    combo = combo_label(run)
    return f"{run.gpus} x {run.algorithm}" + (f" [{combo}]" if combo else "")


def _combos(runs: Sequence[RunRecord]) -> list[str]:
    return list(dict.fromkeys(combo_label(r) for r in runs))


def _algorithms(runs: Sequence[RunRecord]) -> list[str]:
    return list(dict.fromkeys(r.algorithm for r in runs))


def _bottleneck(run: RunRecord) -> ResourceUse:
    assert run.bottleneck is not None  # every simulated run has one (the plots show only those)
    return run.bottleneck


# ----------------------------------------------------------------------------- figures
def _translucent(colour: str, alpha: float = 0.2) -> str:
    """'#rrggbb' as an rgba() colour of that opacity (a band under its curve)."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def speedup_figure(runs: Sequence[RunRecord], reference: Mapping[str, Any] | None = None) -> Figure:
    algorithms, combos = _algorithms(runs), _combos(runs)
    fig = Figure()
    gpus = sorted({r.gpus for r in runs})
    fig.add_trace(plot.scatter(x=gpus, y=gpus, mode="lines", name="ideal (linear)",
                               line={"dash": "dot", "color": "#888"}))
    for ci, combo in enumerate(combos):
        for ai, algorithm in enumerate(algorithms):
            sel = sorted((r for r in runs if r.algorithm == algorithm and combo_label(r) == combo
                          and r.speedup is not None), key=lambda r: r.gpus)
            if not sel:
                continue
            name = algorithm + (f" [{combo}]" if combo else "")
            colour = ALGORITHM_COLOURS[ai % len(ALGORITHM_COLOURS)]
            banded = [(r, r.band) for r in sel if r.band]
            if banded:  # a run from a profile: the range its known errors give (prediction/bands.py)
                xs = [r.gpus for r, _ in banded]
                fig.add_trace(plot.scatter(x=xs, y=[band["speedup_high"] for _, band in banded], mode="lines",
                                           line={"width": 0, "color": colour}, legendgroup=combo or algorithm,
                                           showlegend=False, hoverinfo="skip"))
                fig.add_trace(plot.scatter(
                    x=xs, y=[band["speedup_low"] for _, band in banded], mode="lines", fill="tonexty",
                    fillcolor=_translucent(colour), line={"width": 0, "color": colour},
                    name=f"{name}: band (run-to-run spread, communication model error)",
                    legendgroup=combo or algorithm,
                    hovertext=[f"{r.gpus} GPUs: speed-up {band['speedup_low']:.3f} - "
                               f"{band['speedup_high']:.3f}" for r, band in banded], hoverinfo="text"))
            fig.add_trace(plot.scatter(
                x=[r.gpus for r in sel], y=[r.speedup for r in sel], mode="lines+markers", name=name,
                legendgroup=combo or algorithm,
                line={"color": ALGORITHM_COLOURS[ai % len(ALGORITHM_COLOURS)], "dash": DASHES[ci % len(DASHES)]},
                hovertext=[f"{run_label(r)}<br>step {r.step_time_s * 1e3:.3f} ms, speed-up {r.speedup:.3f}, "
                           f"efficiency {r.efficiency:.0%}<br>bottleneck {_bottleneck(r).resource} "
                           f"({_bottleneck(r).utilization:.0%})" for r in sel],
                hoverinfo="text"))
    reference = reference or {}
    ref = {int(k): float(v) for k, v in (reference.get("speedup") or {}).items()}
    if ref:
        xs = sorted(ref)
        fig.add_trace(plot.scatter(x=xs, y=[ref[x] for x in xs], mode="markers",
                                   name=f"reference: {reference.get('source') or 'measured'}",
                                   marker={"symbol": "star", "size": 15, "color": "black"},
                                   hovertext=[f"reference, {x} GPUs: speed-up {ref[x]:g}" for x in xs],
                                   hoverinfo="text"))
    scaling = {r.scaling for r in runs}
    ylabel = "speed-up (weak scaling: N x T1 / TN)" if scaling == {"weak"} else (
        "speed-up (strong scaling: T1 / TN)" if scaling == {"strong"} else "speed-up")
    fig.update_layout(title="Speed-up vs GPU count", xaxis={"title": "GPUs", "tickvals": gpus if len(gpus) <= 20
                                                            else None},
                      yaxis={"title": ylabel}, height=520, hovermode="closest")
    return fig


def breakdown_figure(runs: Sequence[RunRecord]) -> Figure:
    swept = any(r.sweep for r in runs)
    short = [f"{r.gpus} x {r.algorithm}" for r in runs]
    # a sweep groups its bars by combination (a second row of axis labels)
    x: Any = [[", ".join(str(v) for v in r.sweep.values()) for r in runs], short] if swept else short
    hover = [run_label(r) for r in runs]
    fig = Figure()
    for key, name in (("compute_s", "compute"), ("communication_s", "communication"), ("data_s", "data"),
                      ("idle_s", "idle")):
        fig.add_trace(plot.bar(x=x, y=[getattr(r.breakdown, key) * 1e3 for r in runs], name=name,
                               marker={"color": CATEGORY_COLOURS[name]}, hovertext=hover,
                               hovertemplate="%{hovertext}<br>" + name + ": %{y:.4f} ms<extra></extra>"))
    fig.update_layout(barmode="stack", title="Where a step's time goes (per rank, averaged over ranks)",
                      yaxis={"title": "ms per step"}, height=560 if swept else 520,
                      xaxis={"tickangle": -90 if swept else -45, "automargin": True,
                             "type": "multicategory" if swept else "category"})
    return fig


def link_tiers(topo: Topology) -> tuple[list[str], np.ndarray]:
    """Directed links grouped by what they join: (tier names, tier of each link), a tier
    being the kinds of the two ends and the link's kind ("gpu->nic (pcie)")."""
    if topo.num_links == 0:
        return [], np.empty(0, dtype=np.int64)
    # each link's (tail kind, head kind, link kind) as one number, tiers in order of first use
    kind_names, link_kind_names = topo.node_kind_codes.names, topo.link_kind_codes.names
    node_code = topo.node_kind_codes.codes.astype(np.int64)
    link_code = topo.link_kind_codes.codes.astype(np.int64)
    code = (node_code[topo.ends[:, 0]] * len(kind_names) + node_code[topo.ends[:, 1]]) * len(link_kind_names) \
        + link_code
    found, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    by_use = np.argsort(first, kind="stable")
    rank = np.empty(found.size, dtype=np.int64)
    rank[by_use] = np.arange(found.size)
    names = []
    for c in found[by_use].tolist():
        ends, link = divmod(c, len(link_kind_names))
        u, v = divmod(ends, len(kind_names))
        names.append(f"{kind_names[u]}->{kind_names[v]} ({link_kind_names[link]})")
    return names, rank[inverse.ravel()]


def utilisation_figures(runs: Sequence[RunRecord], details: list[dict[str, Any]],
                        topologies: dict[str, Topology]) -> list[Figure]:
    """One heatmap per topology: runs x directed links, colour = average utilisation over
    the run; an x marks each run's bottleneck link (a ring: its busiest link, when the
    bottleneck is a compute resource). Topologies of more than HEATMAP_ALL_LINKS_MAX links
    get runs x tiers of links instead (link_tiers): the busiest link of the tier, named."""
    figures = []
    for name, topo in topologies.items():
        rows = [i for i, r in enumerate(runs) if r.topology == name and "link_utilization" in details[i]]
        if not rows:
            continue
        if topo.num_links > HEATMAP_ALL_LINKS_MAX:
            figures.append(_tier_figure(name, topo, [runs[i] for i in rows], [details[i] for i in rows]))
            continue
        z = [details[i]["link_utilization"] for i in rows]
        names = list(topo.link_names)
        y = [run_label(runs[i]) for i in rows]
        hover = [[f"{y[a]}<br>{names[b]} ({topo.link_kinds[b]}, "
                  f"{topo.capacity_Bps[b] / 1e9:g} GB/s): {z[a][b]:.1%}" for b in range(len(names))]
                 for a in range(len(rows))]
        fig = Figure(plot.heatmap(z=z, x=names, y=y, colorscale=plot.YL_OR_RD, zmin=0, zmax=1,
                                  colorbar={"title": "utilisation", "tickformat": ".0%"},
                                  hovertext=hover, hoverinfo="text", xgap=1, ygap=1))
        mark_x, mark_y, mark_text, ring_x, ring_y, ring_text = [], [], [], [], [], []
        for a, i in enumerate(rows):
            run = runs[i]
            b = _bottleneck(run)
            if b.resource in names:
                mark_x.append(b.resource)
                mark_y.append(y[a])
                mark_text.append(f"bottleneck of {y[a]}: {b.resource} ({b.utilization:.0%})")
            else:
                link = run.busiest_link
                if link is not None and link.resource in names:
                    ring_x.append(link.resource)
                    ring_y.append(y[a])
                    ring_text.append(f"{y[a]}: bottleneck {b.resource} ({b.kind}, {b.utilization:.0%}); "
                                     f"busiest link {link.resource} ({link.utilization:.0%})")
        if mark_x:
            fig.add_trace(plot.scatter(x=mark_x, y=mark_y, mode="markers", name="bottleneck (a link)",
                                       marker={"symbol": "x", "size": 10, "color": "black"}, hovertext=mark_text,
                                       hoverinfo="text"))
        if ring_x:
            fig.add_trace(plot.scatter(x=ring_x, y=ring_y, mode="markers",
                                       name="busiest link (bottleneck is compute)",
                                       marker={"symbol": "circle-open", "size": 10, "color": "black"},
                                       hovertext=ring_text, hoverinfo="text"))
        fig.update_layout(title=f"Link utilisation on {name}, per run",
                          height=min(2400, max(360, 160 + 18 * len(rows))),
                          xaxis={"tickangle": -60, "automargin": True, "type": "category"},
                          yaxis={"automargin": True, "type": "category", "autorange": "reversed"},
                          legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"})
        figures.append(fig)
    return figures


def _tier_figure(name: str, topo: Topology, runs: list[RunRecord], details: list[dict[str, Any]]) -> Figure:
    """Runs x tiers of links: colour the busiest link of the tier, hover its name, the
    tier's mean and how many of its links carried anything."""
    tiers, tier = link_tiers(topo)
    size = np.bincount(tier, minlength=len(tiers))
    y = [run_label(r) for r in runs]
    z, text, hover = [], [], []
    for label, detail in zip(y, details):
        util = np.asarray(detail["link_utilization"], dtype=float)
        peak = np.zeros(len(tiers))
        np.maximum.at(peak, tier, util)
        mean = np.bincount(tier, weights=util, minlength=len(tiers)) / np.maximum(size, 1)
        used = np.bincount(tier, weights=util > 0, minlength=len(tiers))
        # the busiest link of each tier: the first, in link order, at the tier's peak
        order = np.lexsort((np.arange(util.size), -util, tier))
        first = order[np.searchsorted(tier[order], np.arange(len(tiers)))]
        z.append(peak.tolist())
        text.append([topo.link_names[j] if peak[t] > 0 else "" for t, j in enumerate(first)])
        hover.append([f"{label}<br>{tiers[t]}: {size[t]} links, {int(used[t])} used<br>busiest "
                      f"{topo.link_names[j]} ({topo.capacity_Bps[j] / 1e9:g} GB/s): {peak[t]:.1%}, "
                      f"mean {mean[t]:.1%}" for t, j in enumerate(first)])
    fig = Figure(plot.heatmap(z=z, x=tiers, y=y, colorscale=plot.YL_OR_RD, zmin=0, zmax=1, text=text,
                              texttemplate="%{text}", textfont={"size": 9},
                              colorbar={"title": "busiest link", "tickformat": ".0%"},
                              hovertext=hover, hoverinfo="text", xgap=1, ygap=1))
    fig.update_layout(title=f"Link utilisation on {name}, per run: {topo.num_links} directed links in "
                            f"{len(tiers)} tiers, the busiest of each named",
                      height=min(2400, max(360, 180 + 24 * len(runs))),
                      xaxis={"tickangle": -30, "automargin": True, "type": "category"},
                      yaxis={"automargin": True, "type": "category", "autorange": "reversed"})
    return fig


def gantt_figure(runs: Sequence[RunRecord], details: list[dict[str, Any]], featured: list[int]) -> Figure | None:
    """Per-rank timeline of the first steps; a menu switches between the featured runs."""
    shown = [i for i in featured if "gantt" in details[i]]
    if not shown:
        return None
    fig = Figure()
    categories = ("compute", "data", "host overhead", "all-reduce")
    owners: list[int] = []
    titles = []
    for n, i in enumerate(shown):
        g = details[i]["gantt"]
        labels = [f"rank {r} ({g['rank_nodes'][r]})" for r in range(g["ranks_shown"])]
        for category in categories:
            bars = [b for b in g["bars"] if b[1] == category]
            fig.add_trace(plot.bar(
                orientation="h", base=[b[2] * 1e3 for b in bars], x=[(b[3] - b[2]) * 1e3 for b in bars],
                y=[labels[b[0]] for b in bars], name=category, legendgroup=category, showlegend=True,
                marker={"color": CATEGORY_COLOURS[category], "line": {"width": 0.5, "color": "white"}},
                hovertext=[f"{labels[b[0]]}: {b[4]}<br>{b[2] * 1e3:.4f} - {b[3] * 1e3:.4f} ms "
                           f"({(b[3] - b[2]) * 1e6:.1f} us)" for b in bars],
                hoverinfo="text", visible=n == 0))
            owners.append(n)
        more = f", first {g['ranks_shown']} of {g['ranks']} ranks" if g["ranks_shown"] < g["ranks"] else ""
        cut = ", bars cut" if g.get("truncated") else ""
        titles.append(f"First {g['steps_shown']} step(s) of {run_label(runs[i])}{more}{cut}")
    buttons = [{"label": run_label(runs[i]), "method": "update",
                "args": [{"visible": [o == n for o in owners]}, {"title": {"text": titles[n]}}]}
               for n, i in enumerate(shown)]
    fig.update_layout(
        title=titles[0], barmode="overlay", xaxis={"title": "ms since the start"},
        yaxis={"autorange": "reversed", "type": "category", "automargin": True},
        height=min(1400, max(360, 140 + 26 * max(details[i]["gantt"]["ranks_shown"] for i in shown))),
        updatemenus=[{"buttons": buttons, "direction": "down", "x": 1.0, "xanchor": "right", "y": 1.15,
                      "yanchor": "top", "showactive": True}] if len(buttons) > 1 else [],
    )
    return fig


def bottleneck_links(runs: Sequence[RunRecord], topo: Topology) -> dict[tuple[str, str], str]:
    """Undirected links that are some run's bottleneck, with the runs that say so."""
    notes: dict[tuple[str, str], list[str]] = {}
    for run in runs:
        if run.topology != topo.name:
            continue
        name = _bottleneck(run).resource or ""
        if "->" not in name:
            continue
        u, v = name.split("->", 1)
        key = (u, v) if topo.has_link(u, v) else (v, u)
        notes.setdefault(tuple(sorted(key)), []).append(
            f"{run_label(run)} ({name}, {_bottleneck(run).utilization:.0%})")
    return {k: "bottleneck of " + "; ".join(v[:6]) + (f" and {len(v) - 6} more" if len(v) > 6 else "")
            for k, v in notes.items()}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _band_text(run: RunRecord) -> str:
    band = run.band
    return f" ({band['low_s'] * 1e3:.3f}-{band['high_s'] * 1e3:.3f})" if band else ""


def runs_table(runs: Sequence[RunRecord], reference: Mapping[str, Any] | None = None) -> str:
    ref = {int(k): float(v) for k, v in ((reference or {}).get("speedup") or {}).items()}
    sweep = any(r.sweep for r in runs)
    head = ("<tr><th>GPUs</th><th class='l'>algorithm</th>" + ("<th class='l'>sweep</th>" if sweep else "") +
            "<th>step ms</th>"
            "<th>speed-up</th>" + ("<th>reference</th>" if ref else "") +
            "<th>efficiency</th><th>all-reduce ms</th><th>busbw GB/s</th><th class='l'>bottleneck</th></tr>")
    rows = []
    for r in runs[:TABLE_MAX_ROWS]:
        if r.step_time_s is None:
            peak = (r.memory.peak_GB if r.memory else None) or 0
            capacity = (r.memory.capacity_GB if r.memory else None) or 0
            rows.append(
                f"<tr><td>{r.gpus}</td><td class='l'>{html.escape(r.algorithm)}</td>"
                + (f"<td class='l'>{html.escape(combo_label(r))}</td>" if sweep else "") +
                f"<td class='l' colspan='{7 if ref else 6}'>out of memory: needs {peak:.2f} GB "
                f"of {capacity:.2f} GB per GPU (not simulated)</td></tr>")
            continue
        b = _bottleneck(r)
        assert r.allreduce_time_s is not None and r.busbw_GBps is not None  # simulated
        rows.append(
            f"<tr><td>{r.gpus}</td><td class='l'>{html.escape(r.algorithm)}</td>"
            + (f"<td class='l'>{html.escape(combo_label(r))}</td>" if sweep else "") +
            f"<td>{r.step_time_s * 1e3:.3f}{_band_text(r)}</td>"
            f"<td>{_fmt(r.speedup, '.3f')}</td>" + (f"<td>{ref[r.gpus]:.3f}</td>" if r.gpus in ref else
                                                     ("<td></td>" if ref else "")) +
            f"<td>{_fmt(r.efficiency, '.0%')}</td><td>{r.allreduce_time_s * 1e3:.3f}</td>"
            f"<td>{r.busbw_GBps:.2f}</td><td class='l'>{html.escape(str(b.resource))} ({b.kind}, "
            f"{b.utilization:.0%})</td></tr>")
    more = f"<p class='caption'>First {TABLE_MAX_ROWS} of {len(runs)} runs; all are in summary.csv.</p>" \
        if len(runs) > TABLE_MAX_ROWS else ""
    return f"<table class='runs'>{head}{''.join(rows)}</table>{more}"


def scenario_report(result: ScenarioResult, *, description: str = "",
                    traces: dict[int, str] | None = None) -> str:
    """The whole report.html for one simulated scenario. `traces` maps run index -> trace path."""
    header, topologies = result.header, result.topologies
    reference = header.get("reference")
    table_html = runs_table(result.runs, reference)
    # out-of-memory runs have no timeline: the runs table names them, the plots leave them out
    timed = [i for i, r in enumerate(result.runs) if r.step_time_s is not None]
    position = {i: k for k, i in enumerate(timed)}
    runs = [result.runs[i] for i in timed]
    details = [result.details[i] for i in timed]
    featured = [position[i] for i in result.featured if i in position]
    traces = {position[i]: path for i, path in (traces or {}).items() if i in position}
    axes = header.get("sweep_axes") or []
    subtitle = html.escape(description) + "<br>" if description else ""
    subtitle += (f"{len(runs)} runs: {len(_algorithms(runs))} algorithm(s) x GPU counts "
                 f"{sorted({r.gpus for r in runs})}" + (f" x sweep over {', '.join(axes)}" if axes else "") +
                 f"; source {html.escape(str(header.get('source', '')))}.")
    sections = [Section("Runs", html=table_html, anchor="runs"),
                Section("Speed-up", [speedup_figure(runs, reference)], anchor="speedup", caption=(
                    "Speed-up of each algorithm over one GPU of the same sweep combination; the dotted line is "
                    "linear scaling; stars are the scenario's reference (measured) figures when it gives some.")),
                Section("Time breakdown", [breakdown_figure(runs)], anchor="breakdown", caption=(
                    "Per step and per rank, averaged over ranks. Where activities overlap, compute wins over "
                    "data and data over communication, so 'communication' is the exposed part only; idle is "
                    "waiting (for peers, a slower rank, a barrier)."))]
    heatmaps = utilisation_figures(runs, details, topologies)
    if heatmaps:
        sections.append(Section("Link utilisation", heatmaps, anchor="links", caption=(
            "Bytes each directed link carried over the run divided by what it could carry (bandwidth x run "
            "time). x: the run's bottleneck; open circle: the busiest link where the bottleneck is a compute "
            "resource. Per-run figures for every link are in details.json.")))
    gantt = gantt_figure(runs, details, featured)
    if gantt is not None:
        sections.append(Section("Timeline of the first steps", [gantt], anchor="gantt", caption=(
            "Each rank's compute, data loading, host overhead and all-reduce (from the moment the rank joins the "
            "collective to the moment it holds the sum) during the first simulated steps. The menu switches "
            "between the featured runs (per algorithm, its largest GPU count). Every transfer is in the runs' "
            "Chrome traces (traces/*.json: open them in ui.perfetto.dev).")))
    drawings = [fig for topo in topologies.values()
                for fig in topology_figures(topo, highlight=bottleneck_links(runs, topo))]
    if drawings:
        sections.append(Section("Topology", drawings, anchor="topology", caption=(
            "Colour: link kind; width: bandwidth (log scale); labels: bandwidth per direction (every link is "
            "full duplex). Red: links that are some run's bottleneck. Hover for figures. A cluster of many "
            "machines is drawn one marker per machine, with its first machine drawn in full beside it.")))
    whatif = figures_for(runs, result.extensions)
    if whatif:
        sections.append(Section("What-ifs: memory, cost, checkpoints, allocation", whatif, anchor="whatif", caption=(
            "Memory per run against the device's capacity (out-of-memory runs are never simulated); cost vs "
            "time-to-train with the Pareto front; goodput vs checkpoint interval with the Young/Daly optimum; "
            "fixed vs dynamic GPU allocation. Each appears when the scenario configures it.")))
    if traces:
        items = "".join(f"<li><a href='{html.escape(path)}'>{html.escape(path)}</a>: "
                        f"{html.escape(run_label(runs[i]))}</li>" for i, path in sorted(traces.items())[:200])
        more = f"<p class='caption'>{len(traces) - 200} more in traces/.</p>" if len(traces) > 200 else ""
        sections.append(Section("Traces", html=f"<ul>{items}</ul>{more}", anchor="traces", caption=(
            "Chrome trace event files of the first steps of each run: one process per topology node, one "
            "thread per activity of a rank and per directed link. Load them in ui.perfetto.dev.")))
    return html_page(f"gansim: {header['scenario']}", sections, subtitle=subtitle)


def topology_page(topo: Topology, info: dict[str, Any], summary_text: str) -> str:
    """topology.html for `gansim topology show --out`."""
    return html_page(f"gansim topology: {topo.name}", [
        Section("Drawing", topology_figures(topo), anchor="drawing", caption=(
            "Colour: link kind; width: bandwidth (log scale); labels: bandwidth per direction (every link is "
            "full duplex). Hover over a node or a link's midpoint for its figures.")),
        Section("Summary", html=f"<pre>{html.escape(summary_text)}</pre>", anchor="summary"),
    ], subtitle=html.escape(info.get("description", "")))
