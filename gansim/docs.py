"""Every generated table and figure of the documentation, written from gansim's own results.

`python -m gansim.docs` rewrites, in the checkout it runs from (or `--root`), each block of
the docs pages that sits between `<!-- NAME:start -->` and `<!-- NAME:end -->`, and the
figures under docs/img/. `--check` writes nothing and exits 1 naming every block or figure
that differs from what the code gives now, so a page never disagrees with the code.

Every block here is deterministic: simulations are seeded and the published measurements
are shipped files, so the output depends on the code and the shipped YAML only. A block of
timings would carry its date and machine inside its own text; there is none yet.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
SPEEDUP_FIGURE = "docs/img/speedup-paper-table3.svg"
GENERATED_BY = "<!-- written by `python -m gansim.docs`; edit the generator, not this block -->"


@dataclass(frozen=True)
class Block:
    """A generated part of a docs page: its marker name, the page it sits in and its text."""

    name: str
    page: str
    render: Callable[[], str]


def _summary(scenario: str) -> dict[str, Any]:
    """summary.json's object for a shipped scenario, as `gansim simulate` writes it."""
    return _cached_summary(scenario)


@lru_cache(maxsize=None)
def _cached_summary(scenario: str) -> dict[str, Any]:
    import gansim

    result = gansim.simulate(gansim.load_scenario(scenario))
    return result if isinstance(result, dict) else result.to_dict()


def _command_output(argv: list[str]) -> str:
    """What `gansim ARGV` prints (stdout, then stderr), as a user sees it in a terminal."""
    from gansim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    if code != 0:
        raise RuntimeError(f"gansim {' '.join(argv)} exited {code}: {err.getvalue()}")
    return (out.getvalue() + err.getvalue()).rstrip("\n")


def _text_block(command: str, text: str) -> str:
    return f"```text\n$ {command}\n{text}\n```"


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _number(value: float | None, digits: int = 3) -> str:
    if value is None:
        return ""
    return f"{value:.{digits}f}"


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1e3:.3f}"


def _percent(value: float) -> str:
    return f"{value * 100:+.1f} %"


# ---------------------------------------------------------------------------------------------
# the blocks


@lru_cache(maxsize=None)
def published_error_table() -> tuple[str, str]:
    """`gansim validate --published`'s two tables: the summary per system and every point."""
    from gansim.prediction.published import error_table, shipped_comparisons

    files, rows = shipped_comparisons()
    summary, points = error_table(files, list(rows)).split("\n\n")
    return summary, points


def _published_summary() -> str:
    return f"```text\n{published_error_table()[0]}\n```"


def _published_points() -> str:
    return f"```text\n{published_error_table()[1]}\n```"


def speedup_table(scenario: str) -> str:
    """Speed-up per GPU count and algorithm of a shipped scenario, beside its reference
    (the published figure the scenario cites), with the first algorithm's step time and
    bottleneck."""
    summary = _summary(scenario)
    runs = summary["runs"]
    algorithms = list(dict.fromkeys(run["algorithm"] for run in runs))
    gpus = sorted({run["gpus"] for run in runs})
    by_point = {(run["gpus"], run["algorithm"]): run for run in runs}
    reference = (summary.get("reference") or {}).get("speedup") or {}
    first = algorithms[0]
    header = ["GPUs"]
    if reference:
        header.append("reference speed-up")
    header += [f"`{name}`" for name in algorithms]
    header += [f"`{first}` step (ms)", f"`{first}` bottleneck (utilisation)"]
    rows = []
    for n in gpus:
        row = [str(n)]
        measured = reference.get(str(n), reference.get(n))
        if reference:
            row.append("1 (by definition)" if n == 1 else _number(measured))
        for name in algorithms:
            run = by_point.get((n, name))
            cell = _number(run["speedup"]) if run else ""
            if run and measured is not None and name == first and n > 1:
                cell += f" ({_percent((run['speedup'] - measured) / measured)})"
            row.append(cell)
        run = by_point[(n, first)]
        bottleneck = run.get("bottleneck") or {}
        row += [_ms(run["step_time_s"]),
                f"{bottleneck.get('resource', '')} ({bottleneck.get('utilization', 0) * 100:.0f} %)"]
        rows.append(row)
    source = (summary.get("reference") or {}).get("source", "")
    note = f"\n\nReference: {source}." if source else ""
    return f"{GENERATED_BY}\n`gansim simulate {scenario}`:\n\n{_markdown_table(header, rows)}{note}"


def scaling_gap_table(scenario: str) -> str:
    """Where a strong-scaling scenario's time goes beyond the one-GPU step over N: the
    published step (its reference's), the model's, and the model's all-reduces, each less
    T(1) / N, for the first algorithm. A gap that follows the all-reduces is communication; one
    that does not is work the model leaves out."""
    summary = _summary(scenario)
    runs = summary["runs"]
    first = runs[0]["algorithm"]
    by_gpus = {run["gpus"]: run for run in runs if run["algorithm"] == first}
    published = {int(k): v for k, v in ((summary.get("reference") or {}).get("step_time_s") or {}).items()}
    one = by_gpus[1]["step_time_s"]
    header = ["GPUs", "published step (ms)", "model step (ms)", "T(1) / N (ms)", "published - T(1) / N (ms)",
              f"`{first}` - T(1) / N (ms)", "of it all-reduces (ms)", "published - model (ms)"]
    rows = []
    for n in sorted(g for g in by_gpus if g > 1 and g in published):
        run, ideal = by_gpus[n], one / n
        rows.append([str(n), _ms(published[n]), _ms(run["step_time_s"]), _ms(ideal), _ms(published[n] - ideal),
                     _ms(run["step_time_s"] - ideal), _ms(run["allreduce_time_s"]),
                     _ms(published[n] - run["step_time_s"])])
    return f"{GENERATED_BY}\n`gansim simulate {scenario}`, per step:\n\n{_markdown_table(header, rows)}"


# summary.json fields of a whole run, in the order a what-if table shows them
WHOLE_RUN_COLUMNS = (
    ("step_time_s", "step (ms)", _ms),
    ("speedup", "speed-up", _number),
    ("time_to_train_s", "time to train (h)", lambda s: "" if s is None else f"{s / 3600:.3f}"),
    ("goodput", "goodput", _number),
    ("cost_usd", "cost ($)", lambda v: "" if v is None else f"{v:.2f}"),
    ("energy_kWh", "energy (kWh)", lambda v: "" if v is None else f"{v:.2f}"),
    ("memory_peak_GB", "memory peak (GB)", lambda v: "" if v is None else f"{v:.2f}"),
)


def whatif_table(scenario: str) -> str:
    """A shipped what-if scenario's runs: what differs between them, then the whole-run
    figures summary.json gives (time to train, goodput, cost, energy, memory)."""
    summary = _summary(scenario)
    runs = summary["runs"]
    varying = [key for key in ("topology", "algorithm", "storage", "platform", "pricing", "gradient_dtype")
               if len({str(run.get(key)) for run in runs}) > 1]
    columns = [c for c in WHOLE_RUN_COLUMNS if any(run.get(c[0]) is not None for run in runs)]
    header = ["GPUs", *[f"`{key}`" for key in varying], *[title for _, title, _ in columns]]
    rows = [[str(run["gpus"]), *[str(run.get(key)) for key in varying],
             *[fmt(run.get(key)) for key, _, fmt in columns]] for run in runs]
    text = f"{GENERATED_BY}\n`gansim simulate {scenario}`:\n\n{_markdown_table(header, rows)}"
    elastic = summary.get("elastic")
    if elastic:
        text += "\n\n" + _elastic_table(elastic)
    return text


def _elastic_table(elastic: dict[str, Any]) -> str:
    header = ["allocation", "final GPUs", "re-scalings", "time to train (s)", "GPU-hours", "mean utilisation"]
    rows = []
    for name in ("fixed", "elastic"):
        side = elastic[name]
        rows.append([name, str(side["final_gpus"]), str(side["rescales"]), f"{side['time_to_train_s']:.0f}",
                     f"{side['gpu_hours']:.3f}", f"{side['mean_utilisation'] * 100:.0f} %"])
    return "The dynamic allocation (`elastic` in summary.json):\n\n" + _markdown_table(header, rows)


def _plan(scenario: str) -> str:
    return GENERATED_BY + "\n" + _text_block(f"gansim plan {scenario}", _command_output(["plan", scenario]))


NCCL_TESTS_EXAMPLE = ["nccl-tests", "dgx-a100", "-g", "8", "-b", "1M", "-e", "256M", "-f", "4"]
TOPOLOGY_EXAMPLE = ["topology", "show", "dgx1-v100"]


def _nccl_tests_example() -> str:
    return GENERATED_BY + "\n" + _text_block("gansim " + " ".join(NCCL_TESTS_EXAMPLE),
                                             _command_output(NCCL_TESTS_EXAMPLE))


def _nccl_tests_explain_example() -> str:
    argv = ["nccl-tests", "dgx1-v100", "-g", "8", "-b", "64K", "-e", "64M", "-f", "32", "--explain"]
    return GENERATED_BY + "\n" + _text_block("gansim " + " ".join(argv), _command_output(argv))


def _topology_example() -> str:
    return GENERATED_BY + "\n" + _text_block("gansim " + " ".join(TOPOLOGY_EXAMPLE),
                                             _command_output(TOPOLOGY_EXAMPLE))


def _limits_table() -> str:
    from gansim.core import limits

    rows = [[f"`{limit.variable}`", f"{limit.default:,}", limit.what] for limit in limits.ALL]
    return GENERATED_BY + "\n" + _markdown_table(["limit", "default", "what it counts"], rows)


BLOCKS = (
    Block("validate-published-summary", "docs/validation.md", _published_summary),
    Block("validate-published-points", "docs/validation.md", _published_points),
    Block("paper-table3", "docs/validation.md", lambda: speedup_table("paper-table3")),
    Block("stylegan2-dgx1", "docs/validation.md", lambda: speedup_table("stylegan2-dgx1")),
    Block("stylegan2-dgx1-gap", "docs/validation.md", lambda: scaling_gap_table("stylegan2-dgx1")),
    Block("seed000-dcgan-clouds", "docs/whatifs.md", lambda: whatif_table("seed000-dcgan-clouds")),
    Block("seed000-plan", "docs/whatifs.md", lambda: _plan("seed000-dcgan-clouds")),
    Block("seed001-resource-aware", "docs/whatifs.md", lambda: whatif_table("seed001-resource-aware")),
    Block("seed001-resource-aware-pcie", "docs/whatifs.md", lambda: whatif_table("seed001-resource-aware-pcie")),
    Block("seed003-spot-checkpoints", "docs/whatifs.md", lambda: whatif_table("seed003-spot-checkpoints")),
    Block("seed003-plan", "docs/whatifs.md", lambda: _plan("seed003-spot-checkpoints")),
    Block("seed004-k8s-storage", "docs/whatifs.md", lambda: whatif_table("seed004-k8s-storage")),
    Block("nccl-tests-example", "docs/guide/nccl-tests.md", _nccl_tests_example),
    Block("nccl-tests-explain-example", "docs/guide/nccl-tests.md", _nccl_tests_explain_example),
    Block("topology-show-example", "docs/guide/topology.md", _topology_example),
    Block("limits", "docs/limits.md", _limits_table),
)


# ---------------------------------------------------------------------------------------------
# the speed-up figure (README's): a plain SVG, so that it needs no browser or image library


SVG_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


def speedup_svg(scenario: str = "paper-table3") -> str:
    """Speed-up against GPU count, one line per algorithm, the scenario's reference points
    and the ideal line, as a small standalone SVG."""
    summary = _summary(scenario)
    runs = summary["runs"]
    algorithms = list(dict.fromkeys(run["algorithm"] for run in runs))
    gpus = sorted({run["gpus"] for run in runs})
    reference = {int(k): v for k, v in ((summary.get("reference") or {}).get("speedup") or {}).items()}
    width, height, left, right, top, bottom = 520, 300, 48, 150, 30, 40
    top_value = max([max(gpus), *(run["speedup"] for run in runs), *reference.values()])
    x_span, y_span = max(gpus) - min(gpus) or 1, top_value or 1

    def x(n: float) -> float:
        return left + (n - min(gpus)) / x_span * (width - left - right)

    def y(v: float) -> float:
        return height - bottom - v / y_span * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="18" font-size="13">gansim simulate {scenario}: speed-up</text>']
    for n in gpus:
        parts.append(f'<line x1="{x(n):.1f}" y1="{y(0):.1f}" x2="{x(n):.1f}" y2="{y(0) + 4:.1f}" stroke="black"/>')
        parts.append(f'<text x="{x(n):.1f}" y="{y(0) + 16:.1f}" text-anchor="middle">{n}</text>')
    for v in range(0, int(top_value) + 1):
        parts.append(f'<line x1="{left - 4}" y1="{y(v):.1f}" x2="{width - right}" y2="{y(v):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 8}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    parts.append(f'<text x="{(left + width - right) / 2:.1f}" y="{height - 6}" text-anchor="middle">GPUs</text>')
    parts.append(f'<line x1="{x(min(gpus)):.1f}" y1="{y(min(gpus)):.1f}" x2="{x(max(gpus)):.1f}" '
                 f'y2="{y(max(gpus)):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
    legend = [("ideal", "#999", "dash")]
    for colour, name in zip(SVG_COLOURS * 4, algorithms):
        points = " ".join(f"{x(run['gpus']):.1f},{y(run['speedup']):.1f}"
                          for run in sorted((r for r in runs if r["algorithm"] == name), key=lambda r: r["gpus"]))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        legend.append((name, colour, "line"))
    if reference:
        for n, v in sorted(reference.items()):
            parts.append(f'<circle cx="{x(n):.1f}" cy="{y(v):.1f}" r="4" fill="black"/>')
        legend.append(("reference (measured)", "black", "dot"))
    for i, (name, colour, style) in enumerate(legend):
        ly = top + 10 + 18 * i
        lx = width - right + 12
        if style == "dot":
            parts.append(f'<circle cx="{lx + 10}" cy="{ly - 4}" r="4" fill="{colour}"/>')
        else:
            dash = ' stroke-dasharray="4 3"' if style == "dash" else ""
            parts.append(f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 20}" y2="{ly - 4}" stroke="{colour}" '
                         f'stroke-width="2"{dash}/>')
        parts.append(f'<text x="{lx + 26}" y="{ly}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _band_errors() -> str:
    from gansim.prediction.bands import band_errors_json

    return band_errors_json()


FIGURES = {SPEEDUP_FIGURE: speedup_svg, "gansim/prediction/band_errors.json": _band_errors}


# ---------------------------------------------------------------------------------------------
# writing and checking


def marker_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {re.escape(name)}:start -->\n)(.*?)(<!-- {re.escape(name)}:end -->)", re.S)


def block_in_page(root: Path, block: Block) -> str:
    """The text that a page holds between a block's markers now, without its last newline."""
    page = root / block.page
    match = marker_pattern(block.name).search(page.read_text(encoding="utf-8"))
    if match is None:
        raise LookupError(f"{block.page} has no <!-- {block.name}:start --> ... <!-- {block.name}:end --> block")
    return match.group(2).removesuffix("\n")


def differences(root: Path) -> list[str]:
    """Every block and figure whose text in the checkout differs from what the code gives now."""
    stale = [f"{b.page}: {b.name}" for b in BLOCKS if block_in_page(root, b) != b.render()]
    for path, render in FIGURES.items():
        target = root / path
        if not target.is_file() or target.read_text(encoding="utf-8") != render():
            stale.append(path)
    return stale


def write_block(page: Path, name: str, body: str) -> bool:
    """Puts `body` between the page's `<!-- name:start -->` and `<!-- name:end -->` markers,
    atomically; False when it was there already. A page without them is an error (the
    benches that write the docs' figures call this too)."""
    from gansim.core.files import atomic_write

    text = page.read_text(encoding="utf-8")
    if marker_pattern(name).search(text) is None:
        raise LookupError(f"{page} has no <!-- {name}:start --> ... <!-- {name}:end --> block")
    new = marker_pattern(name).sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(3), text, count=1)
    if new == text:
        return False
    atomic_write(page, new)
    return True


def write_all(root: Path) -> list[str]:
    """Rewrites every block and figure; returns what changed."""
    from gansim.core.files import atomic_write

    changed = []
    for block in BLOCKS:
        if write_block(root / block.page, block.name, block.render()):
            changed.append(f"{block.page}: {block.name}")
    for path, render in FIGURES.items():
        target = root / path
        figure = render()
        if not target.is_file() or target.read_text(encoding="utf-8") != figure:
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, figure)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gansim.docs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose docs to write (default: this one)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block or figure is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = differences(args.root)
        for name in stale:
            print(f"stale: {name}", file=sys.stderr)
        return 1 if stale else 0
    for name in write_all(args.root):
        print(f"wrote {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
