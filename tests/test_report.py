"""report.html and topology.html: self-contained pages that render, without script
errors, plots that have data, in a real headless browser (Debian's chromium).

The browser check renders a local HTML page in Debian's headless chromium and return the DOM after its
scripts ran (`--dump-dom`, with a virtual time budget so timers and load handlers fire).

Why this way: no WebDriver or extra Python package is needed, and the page itself
reports what the tests need in attributes of <html> and of each plot: gansim/outputs/report.py puts
an error hook before plotly.js (data-gansim-errors: uncaught errors and rejected promises,
plotly's included) and a census after load (data-gansim-plots; per plot
data-gansim-traces / data-gansim-points, read from plotly's drawn state), while the
serialized DOM also holds the SVG plotly rendered (main-svg, trace groups), which the
tests count independently. Chromium's own console log (--enable-logging=stderr) is
scanned for "Uncaught" as a second witness of script errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from gansim.cli.main import main
from gansim.outputs.plot import Figure, scatter
from gansim.outputs.report import Section, html_page
from tests.test_predict import profile

# ----------------------------------------------------------------------------- the browser
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000", "--window-size=1400,1000"]


def chromium() -> str:
    """The browser binary; a skip on a developer's machine without it, a failure in CI."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    message = "Debian's chromium is not installed (apt-get install chromium); .ci/run installs it"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Rendered:
    dom: str
    console: str

    def html_attr(self, name: str) -> str | None:
        m = re.search(r"<html[^>]*\s" + re.escape(name) + r'="([^"]*)"', self.dom)
        return m.group(1) if m else None

    def plots(self) -> list[dict[str, object]]:
        """Per rendered plot div (in page order): its id, traces and points as the page
        counted them, and the SVG trace groups and main-svg layers found in its markup."""
        starts = [(m.start(), m.group(0)) for m in re.finditer(r"<div[^>]*js-plotly-plot[^>]*>", self.dom)]
        out = []
        for i, (pos, tag) in enumerate(starts):
            end = starts[i + 1][0] if i + 1 < len(starts) else len(self.dom)
            body = self.dom[pos:end]
            attr = dict(re.findall(r'([\w-]+)="([^"]*)"', tag))
            out.append({
                "id": attr.get("id"),
                "traces": int(attr.get("data-gansim-traces", -1)),
                "points": int(attr.get("data-gansim-points", -1)),
                "svg_traces": len(re.findall(r'<g class="(?:trace|hm|imagelayer)', body)),
                "main_svg": body.count('class="main-svg"'),
            })
        return out


def render(page: Path, timeout: float = 120.0) -> Rendered:
    binary = chromium()
    with tempfile.TemporaryDirectory(prefix="gansim-chromium-") as profile:
        proc = subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()],
                              capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}"
    assert "<html" in proc.stdout, f"chromium printed no DOM: {proc.stderr[-2000:]}"
    return Rendered(proc.stdout, proc.stderr)


def assert_clean(page: Rendered) -> None:
    assert page.html_attr("data-gansim-errors") == "0", page.html_attr("data-gansim-error-text")
    uncaught = [line for line in page.console.splitlines() if "Uncaught" in line or ":ERROR:CONSOLE" in line]
    assert not uncaught, uncaught


# ----------------------------------------------------------------------------- tests
def _sweep(write_yaml, **extra):
    body = {"name": "rep", "description": "report test", "topology": "paper-gtx1080ti-pcie",
            "workload": "paper-mlp-gan", "gpus": [1, 2, 4], "algorithms": ["ring", "reduce_to_one"], "steps": 3,
            "reference": {"speedup": {2: 1.322, 4: 1.7792}, "source": "seed 002 Table 3"}}
    body.update(extra)
    return write_yaml("rep.yaml", body)


@pytest.fixture(scope="module")
def table3(tmp_path_factory):
    out = tmp_path_factory.mktemp("table3")
    assert main(["simulate", "paper-table3", "--out", str(out), "--workers", "2"]) == 0
    return out


def test_report_is_self_contained_and_deterministic(table3, tmp_path):
    text = (table3 / "report.html").read_text()
    # plotly.js is inlined; nothing is fetched from anywhere
    assert "Plotly" in text and len(text) > 3_000_000
    assert not re.search(r"<script[^>]+src=", text)
    from gansim.outputs.report import plotly_js

    ours = text.replace(plotly_js(), "")  # plotly.js itself holds links it never loads
    assert not re.search(r"(href|src)=[\"']https?://", ours)
    assert main(["simulate", "paper-table3", "--out", str(tmp_path), "--workers", "1"]) == 0
    assert (tmp_path / "report.html").read_bytes() == (table3 / "report.html").read_bytes()
    assert (tmp_path / "details.json").read_bytes() == (table3 / "details.json").read_bytes()


def test_report_has_every_section_and_the_reference(table3):
    text = (table3 / "report.html").read_text()
    for anchor in ("speedup", "breakdown", "links", "gantt", "topology", "traces"):
        assert f'id="{anchor}"' in text
    assert "1.7792" in text and "reference: seed 002 Table 3" in text  # the paper's points are drawn
    details = json.loads((table3 / "details.json").read_text())
    topo = details["topologies"]["paper-gtx1080ti-pcie"]
    assert len(topo["links"]) == 8  # every directed link, used or not
    for run in details["runs"]:
        assert len(run["link_utilization"]) == 8
        assert all(0.0 <= u <= 1.0 + 1e-9 for u in run["link_utilization"])
        assert run["trace"].startswith("traces/")


def test_report_renders_in_chromium_with_data_in_every_plot(table3):
    page = render(table3 / "report.html")
    assert_clean(page)
    plots = page.plots()
    # speed-up, breakdown, one heatmap, the Gantt, one topology drawing, memory per run
    assert page.html_attr("data-gansim-plots") == "6" and len(plots) == 6
    for plot in plots:
        assert plot["main_svg"] >= 2, plot  # plotly drew its SVG layers
        assert plot["traces"] > 0 and plot["points"] > 0, plot
        assert plot["svg_traces"] > 0, plot
    speedup, breakdown, heatmap, gantt, topology, memory = plots
    assert speedup["traces"] == 1 + 4 + 1  # ideal, four algorithms, the paper's points
    assert speedup["points"] == 4 + 4 * 4 + 3
    assert breakdown["traces"] == 4 and breakdown["points"] == 4 * 16  # four categories x 16 runs
    assert heatmap["traces"] >= 2  # the heatmap and the bottleneck marks
    assert gantt["points"] > 4  # bars of the first steps
    assert topology["traces"] >= 3  # links, bandwidth labels, nodes
    assert memory["points"] >= 16  # every run's memory parts against the GPU's capacity


def test_sweep_report_renders(write_yaml, tmp_path):
    path = _sweep(write_yaml, sweep={"link_bandwidth_scale": [0.5, 2.0], "topology": [
        "paper-gtx1080ti-pcie", "dgx-a100"]})
    assert main(["simulate", str(path), "--out", str(tmp_path), "--workers", "2"]) == 0
    page = render(tmp_path / "report.html")
    assert_clean(page)
    plots = page.plots()
    # speed-up, breakdown, a heatmap per topology, the Gantt, a drawing per topology, memory
    assert len(plots) == 8
    assert all(p["points"] > 0 and p["main_svg"] >= 2 for p in plots), plots
    assert plots[0]["traces"] == 1 + 2 * 4 + 1  # ideal, 2 algorithms x 4 combinations, reference


def test_topology_show_writes_a_drawing_that_renders(tmp_path, capsys):
    assert main(["topology", "show", "dgx1-v100", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert "bisection bandwidth" in out.out and "rank devices: 8" in out.out
    assert "topology.html" in out.err
    page = render(tmp_path / "topology.html")
    assert_clean(page)
    (plot,) = page.plots()
    assert plot["points"] >= 8 + 4 + 2  # GPUs, PCIe switches, hosts (plus link midpoints)
    text = (tmp_path / "topology.html").read_text()
    assert "nvlink link" in text and "pcie link" in text and "50 GB/s" in text  # kinds and bandwidths


def test_validate_report_renders(tmp_path):
    """`gansim validate --profile`'s report.html: the ideal line, measured and predicted."""
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile().model_dump(mode="json", by_alias=True)))
    assert main(["validate", "--profile", str(path), "--out", str(tmp_path / "v")]) == 0
    page = render(tmp_path / "v" / "report.html")
    assert_clean(page)
    (drawn,) = page.plots()
    assert drawn["traces"] == 3 and drawn["points"] == 3 * 2  # world sizes 1 and 2


def test_the_browser_check_catches_a_broken_page(tmp_path):
    path = tmp_path / "broken.html"
    good = html_page("x", [Section("a plot", [Figure(scatter(x=[1, 2], y=[1.0, 2.0]))])])
    path.write_text(good.replace("</body>", "<script>undefinedFunction()</script></body>"))
    page = render(path)
    assert page.html_attr("data-gansim-errors") == "1"
    with pytest.raises(AssertionError):
        assert_clean(page)


def test_topology_show_bad_out_is_one_line(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["topology", "show", "dgx-a100", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0] and "not a directory" in err[0]
