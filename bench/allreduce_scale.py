"""The simulator's inner loop alone (topology, routes and simulation of one point, in this
process; no start-up, no outputs): one 256 MiB all-reduce on the multi_node generator (8 GPUs
a node, NVSwitch inside, one NIC per GPU) with the flow model, at 128 and 1024 GPUs, with the
textbook `ring` and with `nccl` (what NCCL would run: its channels as lock-step flows) side
by side. Prints wall time, the ratio and the number of SimPy events. What users run, the
command as a whole, is timed by bench/command_scale.py."""

from __future__ import annotations

import argparse
import time

from gansim.core.config import Scenario
from gansim.runner.point import simulate_point
from gansim.topology.graph import topology_from_dict


def measure(gpus: int, algorithm: str, nbytes: int) -> tuple[float, dict]:
    scenario = Scenario(name=f"bench-{gpus}", topology="multi-node-bench", workload={"allreduce_bytes": nbytes},
                        gpus=[gpus], algorithms=[algorithm], steps=1)
    start = time.perf_counter()
    # building the topology (and its routes) is part of the measured time
    topology = topology_from_dict({"name": "multi-node-bench", "generator": "multi_node",
                                   "params": {"nodes": gpus // 8, "gpus_per_node": 8}}, "bench")
    record = simulate_point(scenario, topology, gpus, algorithm)
    return time.perf_counter() - start, record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algorithms", default="ring,nccl", help="comma-separated (default ring,nccl)")
    parser.add_argument("--bytes", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--gpus", default="128,1024")
    args = parser.parse_args()
    for algorithm in args.algorithms.split(","):
        results = {}
        for gpus in [int(g) for g in args.gpus.split(",")]:
            elapsed, record = measure(gpus, algorithm, args.bytes)
            results[gpus] = elapsed
            print(f"{gpus:>5} GPUs  {algorithm:<10} wall {elapsed:7.3f} s   simulated all-reduce "
                  f"{record.allreduce_time_s * 1e3:9.3f} ms   busbw {record.busbw_GBps:7.2f} GB/s   "
                  f"events {record.simulated_events:>7}   tasks {record.simulated_tasks:>8}")
        sizes = sorted(results)
        if len(sizes) >= 2:
            print(f"{algorithm}: ratio {sizes[-1]}/{sizes[0]} GPUs: {results[sizes[-1]] / results[sizes[0]]:.2f}x")


if __name__ == "__main__":
    main()
