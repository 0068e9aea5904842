"""`gansim simulate SCENARIO`: a scenario with its what-ifs, on a local process pool or a
Dask cluster, with progress on stderr; every output written into --out."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

from gansim.cli.args import EXIT_OK, positive_int
from gansim.core import limits
from gansim.core.files import check_output_dir, folder_name, replaced_dir
from gansim.core.version import __version__
from gansim.outputs.names import KNOWN_OUTPUTS, SIMULATE_OUTPUTS, SIMULATE_PARTIAL
from gansim.outputs.results import table, to_json, write_run_outputs
from gansim.outputs.trace import run_details
from gansim.runner.executors import make_executor
from gansim.runner.partial import PointStore
from gansim.runner.scenario import LoadedScenario, planned_baselines
from gansim.runner.sweep import TRACE_POLICIES, ScenarioResult
from gansim.whatif.study import count_runs, load_scenario, run_scenario


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
    if args.workers is not None:
        limits.WORKERS.check(args.workers, field="--workers")
    loaded = load_scenario(args.scenario)
    out_dir = Path(args.out) if args.out else Path("gansim-out") / folder_name(loaded.scenario.name)
    check_output_dir(out_dir, known=KNOWN_OUTPUTS)
    human = sys.stderr if args.json else sys.stdout
    store = PointStore(out_dir / SIMULATE_PARTIAL)
    if args.fresh:
        store.clear()
    result = run_on_executor(loaded, args.executor, args.workers, args.traces, store=store)
    summary = result.summary
    runs = result.simulated  # what was simulated, 1-GPU baselines included
    with replaced_dir(out_dir, SIMULATE_OUTPUTS + (SIMULATE_PARTIAL,)) as stage:
        written = [out_dir / path.relative_to(stage) for path in
                   write_run_outputs(stage, summary, result.details, result.featured, result.topologies,
                                     description=loaded.scenario.description)]
    print(table(summary), file=human)
    traced = sum(1 for d in result.details if "trace" in d)
    print(f"simulated {runs} runs in {result.wall_s:.2f} s wall ({runs / max(result.wall_s, 1e-9):.1f} runs/s), "
          f"{result.cpu_s:.2f} s CPU in the workers; traces for {traced} of {len(summary['runs'])} runs"
          + ("" if traced == len(summary["runs"]) else " (--traces all for every run)")
          + (f"; {result.resumed} runs resumed from an interrupted earlier run" if result.resumed else ""),
          file=sys.stderr)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        sys.stdout.write(to_json(summary))
    return EXIT_OK


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


def run_on_executor(loaded: LoadedScenario, executor_spec: str, workers: int | None,
                    traces: str | None, store: PointStore | None = None) -> ScenarioResult:
    """Run a scenario's points on the executor asked for, with progress on stderr; with
    `store`, each point is kept there as it finishes and the points kept there already are
    not simulated again."""
    runs = count_runs(loaded)
    kept = len(store) if store is not None else 0
    executor, close = make_executor(executor_spec, workers, runs, planned_baselines(loaded.scenario))
    where = "serially" if executor is None else (f"on {executor_spec}" if executor_spec != "local"
                                                 else "on a local process pool")
    print(f"gansim {__version__}: simulating {loaded.scenario.name} ({runs} runs, {where})", file=sys.stderr)
    if kept:
        print(f"resuming: {store.folder} holds {kept} finished runs of an interrupted earlier run (those of this "
              "scenario as it is now are not simulated again; --fresh to start over)", file=sys.stderr)
    progress, close_progress = make_progress(runs)
    try:
        return run_scenario(loaded, executor, progress, traces=traces, details=run_details, store=store)
    finally:
        close_progress()
        close()
