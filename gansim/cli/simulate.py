"""`gansim simulate SCENARIO`: a scenario with its what-ifs, on a local process pool or a
Dask cluster, with progress on stderr; every output written into --out (gansim.api.simulate
does the work; this module parses the flags and prints)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

from gansim import api
from gansim.cli.args import EXIT_OK, positive_int
from gansim.core.files import folder_name
from gansim.outputs.results import table, to_json
from gansim.runner.sweep import TRACE_POLICIES
from gansim.whatif.study import count_runs, load_scenario


def register(sub: Any) -> None:
    sim = sub.add_parser("simulate", help="simulate a scenario and write summary.json / summary.csv")
    sim.add_argument("scenario", metavar="SCENARIO", help="a shipped scenario name or a scenario YAML file")
    sim.add_argument("--out", metavar="DIR", help="output directory (default gansim-out/<scenario>)")
    sim.add_argument("--json", action="store_true", help="print summary.json on stdout (tables go to stderr)")
    sim.add_argument("--executor", default="local", metavar="local|dask://HOST:PORT",
                     help="where runs execute (default local: a process pool)")
    sim.add_argument("--workers", type=positive_int("--workers"), metavar="N",
                     help="local worker processes (default: one per core)")
    sim.add_argument("--traces", default="auto", choices=TRACE_POLICIES,
                     help="which runs get a Chrome trace in traces/ (default auto: every run up to 100 runs, "
                          "else per algorithm its largest GPU count in the first sweep combinations)")
    sim.add_argument("--fresh", action="store_true",
                     help="simulate every run again, forgetting the runs an interrupted earlier run of this "
                          "command kept in --out (by default the same command resumes from them)")
    sim.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    loaded = load_scenario(args.scenario)
    # api.simulate checks the folder and the workers before any work
    out_dir = Path(args.out) if args.out else Path("gansim-out") / folder_name(loaded.scenario.name)
    human = sys.stderr if args.json else sys.stdout
    progress, close_progress = make_progress(count_runs(loaded))
    try:
        result = api.simulate(loaded, out=out_dir, executor=args.executor, workers=args.workers, traces=args.traces,
                              fresh=args.fresh, progress=progress, log=_say)
    finally:
        close_progress()
    print(table(result.scenario, result.runs, result.reference), file=human)
    banded = [(r, r.band) for r in result.runs if r.band]
    if banded:
        print("step-time bands (run-to-run spread and communication model error; ms): " + ", ".join(
            f"{r.gpus} x {r.algorithm} {band['low_s'] * 1e3:.3f}-{band['high_s'] * 1e3:.3f}"
            for r, band in banded), file=human)
    traced = result.traced
    print(f"simulated {result.simulated} runs in {result.wall_s:.2f} s wall "
          f"({result.simulated / max(result.wall_s, 1e-9):.1f} runs/s), {result.cpu_s:.2f} s CPU in the workers; "
          f"traces for {traced} of {len(result.runs)} runs"
          + ("" if traced == len(result.runs) else " (--traces all for every run)")
          + (f"; {result.resumed} runs resumed from an interrupted earlier run" if result.resumed else ""),
          file=sys.stderr)
    for path in result.written:
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        sys.stdout.write(to_json(result.to_dict()))
    return EXIT_OK


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _progress(done: int, total: int) -> None:
    """Progress without a terminal (a log, a pipe): a line every tenth of the runs."""
    if done == total or done % max(1, total // 10) == 0:
        print(f"  {done}/{total} runs", file=sys.stderr, flush=True)


def make_progress(total: int) -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A progress bar on stderr (tqdm on a terminal, a line per tenth otherwise); never
    on stdout, which --json keeps for the result."""
    if total <= 1:
        return None, lambda: None
    if not sys.stderr.isatty():
        return _progress, lambda: None
    import shutil

    from tqdm import tqdm

    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        columns = 0
    columns = columns if columns > 0 else shutil.get_terminal_size((100, 24)).columns
    bar = tqdm(total=total, unit="run", file=sys.stderr, ncols=min(max(columns, 40), 120), smoothing=0.1,
               leave=True)

    def update(done: int, total_now: int) -> None:
        if bar.total != total_now:  # fewer: the runs an interrupted earlier run kept are not simulated again
            bar.total = total_now
        bar.update(done - bar.n)

    return update, bar.close
