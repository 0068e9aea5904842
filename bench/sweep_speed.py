"""How fast a sweep runs: 1,008 small points (56 GPU counts from 1 to 64 x 6 all-reduce
algorithms x 3 topologies of 64 GPUs: one network switch, a PCIe tree with 4 GPUs per
switch, one NVSwitch), each one all-reduce step of a small buffer, through the local
process pool (or any executor gansim accepts). Prints points per second, wall time and
the CPU seconds the workers spent (time.process_time() in each worker, summed), which
stays meaningful when other work shares the machine.

    python bench/sweep_speed.py [--workers N] [--bytes 1048576] [--executor local|dask://HOST:PORT]
                                [--traces featured|none|all] [--out DIR]

--out also writes what `gansim simulate` writes (summary, report.html, details, traces)
and times that too."""

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
    args = parser.parse_args()

    from gansim.cli.simulate import run_on_executor
    from gansim.outputs.results import write_run_outputs
    from gansim.runner.sweep import run_requests
    from gansim.whatif.study import load_scenario

    with tempfile.TemporaryDirectory() as tmp:
        loaded = load_scenario(str(write_inputs(Path(tmp), args.bytes)))
        points = len(run_requests(loaded))
        t0 = time.perf_counter()
        result = run_on_executor(loaded, args.executor, args.workers, args.traces)
        wall = time.perf_counter() - t0
        written = ""
        if args.out:
            t1 = time.perf_counter()
            write_run_outputs(Path(args.out), result.summary, result.details, result.featured, result.topologies)
            written = f", writing outputs {time.perf_counter() - t1:.2f} s"
    per_topology = {}
    for run, detail in zip(result.summary["runs"], result.details):
        per_topology.setdefault(run["topology"], 0.0)
        per_topology[run["topology"]] += detail.get("cpu_s", 0.0)
    workers = args.workers or os.cpu_count()
    print(f"sweep: {points} points ({len(GPUS)} GPU counts 1-64 x {len(ALGORITHMS)} algorithms x "
          f"{len(TOPOLOGIES)} topologies, all-reduce of {args.bytes} B, 1 step), executor {args.executor}, "
          f"{workers} workers, traces {args.traces}")
    print(f"wall {wall:.2f} s (pool start-up included{written}), {points / wall:.1f} points/s; "
          f"CPU in workers {result.cpu_s:.2f} s, {points / max(result.cpu_s, 1e-9):.1f} points per CPU-second")
    for name, cpu in sorted(per_topology.items()):
        print(f"  {name}: {cpu:.2f} CPU s")
    slowest = sorted(zip((d.get("cpu_s", 0.0) for d in result.details), result.summary["runs"]),
                     key=lambda x: -x[0])[:5]
    print("  slowest points: " + "; ".join(f"{r['gpus']} x {r['algorithm']} on {r['topology']} {c * 1e3:.0f} ms"
                                          for c, r in slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
