"""How fast a sweep runs: 1,008 small points (56 GPU counts from 1 to 64 x 6 all-reduce
algorithms x 3 topologies of 64 GPUs: one network switch, a PCIe tree with 4 GPUs per
switch, one NVSwitch), each one all-reduce step of a small buffer, through the local
process pool (or any executor gansim accepts). Prints points per second, wall time and
the CPU seconds the workers spent (time.process_time() in each worker, summed), which
stays meaningful when other work shares the machine.

    python bench/sweep_speed.py [--workers N] [--bytes 1048576] [--executor local|dask://HOST:PORT]
                                [--traces featured|none|all] [--out DIR]

--out also writes what `gansim simulate` writes (summary, report.html, details, traces)
and times that too. --resume-at F (0 < F < 1) also measures a resumed sweep: the sweep is
stopped once F of its points are finished (each kept in a partial state as it finishes, as
`gansim simulate` keeps them in its --out; a SIGKILL at that moment leaves the same), then
run again; it prints what the second run costs as a share of a whole run's wall time and
of its CPU seconds in the workers."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

# parameter_server is left out: the one-switch topology has no host to put its server on
ALGORITHMS = ["ring", "tree", "halving_doubling", "reduce_to_one", "hierarchical_copy", "hierarchical_ring"]
GPUS = list(range(1, 49)) + list(range(50, 65, 2))  # 56 counts
TOPOLOGIES = {
    "bench-switch64": {"generator": "switch", "params": {"gpus": 64, "bandwidth_GBps": 25.0, "latency_us": 1.0}},
    "bench-pcie64": {"generator": "pcie_tree", "params": {"gpus": 64, "gpus_per_switch": 4}},
    "bench-nvswitch64": {"generator": "nvswitch", "params": {"gpus": 64}},
}


def write_inputs(folder: Path, nbytes: int) -> Path:
    for name, body in TOPOLOGIES.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, **body}, sort_keys=False))
    scenario = {
        "name": "bench-sweep-speed",
        "description": f"{len(GPUS)} GPU counts x {len(ALGORITHMS)} algorithms x {len(TOPOLOGIES)} topologies, "
                       f"one all-reduce of {nbytes} bytes",
        "topology": f"{next(iter(TOPOLOGIES))}.yaml",
        "workload": {"allreduce_bytes": nbytes},
        "gpus": GPUS,
        "algorithms": ALGORITHMS,
        "steps": 1,
        "sweep": {"topology": [f"{name}.yaml" for name in TOPOLOGIES]},
    }
    path = folder / "bench-sweep-speed.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=None, help="local worker processes (default: one per core)")
    parser.add_argument("--bytes", type=int, default=1 << 20, help="all-reduce size per point")
    parser.add_argument("--executor", default="local", help="local or dask://HOST:PORT")
    parser.add_argument("--traces", default="featured", choices=("auto", "all", "featured", "none"))
    parser.add_argument("--out", help="also write the outputs gansim simulate writes, here")
    parser.add_argument("--resume-at", type=float, metavar="F",
                        help="also stop a sweep after this share of its points and time the run that resumes it")
    args = parser.parse_args()
    if args.resume_at is not None and not 0 < args.resume_at < 1:
        parser.error("--resume-at: a share between 0 and 1 (exclusive)")

    from gansim.outputs.results import write_run_outputs
    from gansim.outputs.trace import run_details
    from gansim.runner.sweep import run_requests
    from gansim.whatif.study import load_scenario, run_scenario

    def run_on_executor(loaded, progress=None, store=None):
        return run_scenario(loaded, args.executor, progress, workers=args.workers, traces=args.traces,
                            details=run_details, store=store)

    with tempfile.TemporaryDirectory() as tmp:
        loaded = load_scenario(str(write_inputs(Path(tmp), args.bytes)))
        points = len(run_requests(loaded))
        t0 = time.perf_counter()
        result = run_on_executor(loaded)
        wall = time.perf_counter() - t0
        if args.resume_at is not None:
            resumed = resume_figures(loaded, run_on_executor, points, args.resume_at, wall, result.cpu_s, Path(tmp))
        written = ""
        if args.out:
            t1 = time.perf_counter()
            write_run_outputs(Path(args.out), result)
            written = f", writing outputs {time.perf_counter() - t1:.2f} s"
    per_topology = {}
    for run, detail in zip(result.runs, result.details):
        per_topology.setdefault(run.topology, 0.0)
        per_topology[run.topology] += detail.get("cpu_s", 0.0)
    workers = args.workers or os.cpu_count()
    print(f"sweep: {points} points ({len(GPUS)} GPU counts 1-64 x {len(ALGORITHMS)} algorithms x "
          f"{len(TOPOLOGIES)} topologies, all-reduce of {args.bytes} B, 1 step), executor {args.executor}, "
          f"{workers} workers, traces {args.traces}")
    print(f"wall {wall:.2f} s (pool start-up included{written}), {points / wall:.1f} points/s; "
          f"CPU in workers {result.cpu_s:.2f} s, {points / max(result.cpu_s, 1e-9):.1f} points per CPU-second")
    if args.resume_at is not None:
        print(resumed)
    for name, cpu in sorted(per_topology.items()):
        print(f"  {name}: {cpu:.2f} CPU s")
    slowest = sorted(zip((d.get("cpu_s", 0.0) for d in result.details), result.runs),
                     key=lambda x: -x[0])[:5]
    print("  slowest points: " + "; ".join(f"{r.gpus} x {r.algorithm} on {r.topology} {c * 1e3:.0f} ms"
                                          for c, r in slowest))
    return 0


class _Stopped(Exception):
    """Raised by the progress report once the share of points asked for is finished."""


def resume_figures(loaded, run_on_executor, points: int, share: float, whole_wall: float, whole_cpu: float,
                   tmp: Path) -> str:
    """Stop the sweep once `share` of its points are kept (by its progress report: each
    point is kept before it is reported), run it again, and say what the second run cost."""
    from gansim.runner.partial import PointStore

    t0 = time.perf_counter()
    run_on_executor(loaded, store=PointStore(tmp / "whole"))
    whole_kept_wall = time.perf_counter() - t0
    store = PointStore(tmp / "partial")
    stop_at = max(1, int(points * share))

    def stop(done: int, total: int) -> None:
        if done >= stop_at:
            raise _Stopped

    try:
        run_on_executor(loaded, progress=stop, store=store)
    except _Stopped:
        pass
    kept = len(store)
    t0 = time.perf_counter()
    resumed = run_on_executor(loaded, store=store)
    wall = time.perf_counter() - t0
    return (f"resume: a whole run keeping every point as it finishes took {whole_kept_wall:.2f} s wall "
            f"({whole_kept_wall / whole_wall:.0%} of one keeping none); stopped after {kept} of {points} points "
            f"({kept / points:.0%}) and run again, it simulated {resumed.simulated} and took {resumed.resumed} from "
            f"the partial state in {wall:.2f} s wall: {wall / whole_kept_wall:.0%} of the whole run keeping points, "
            f"{wall / whole_wall:.0%} of the one keeping none; CPU in workers {resumed.cpu_s:.2f} s, "
            f"{resumed.cpu_s / max(whole_cpu, 1e-9):.0%} of the whole run's {whole_cpu:.2f} s (CPU seconds stay "
            f"meaningful when other work shares the machine)")


if __name__ == "__main__":
    sys.exit(main())
