"""The good files the hostile-input tests start from (a scenario with every what-if, a
topology, a calibration profile) and the helpers that take them apart."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterator

import yaml

BOX = {
    "name": "box",
    "nodes": [{"id": "host0", "kind": "host", "cores": 4, "dram_bandwidth_GBps": 50.0},
              {"id": "gpu0", "kind": "gpu", "tflops": 10.0, "memory_GB": 11.0, "memory_bandwidth_GBps": 484.0,
               "compute_capability": 6.1},
              {"id": "gpu1", "kind": "gpu", "tflops": 10.0, "memory_GB": 11.0, "threads": 2}],
    "links": [{"a": "host0", "b": "gpu0", "kind": "pcie", "bandwidth_GBps": 12.0, "latency_us": 1.0},
              {"a": "host0", "b": "gpu1", "kind": "pcie", "bandwidth_GBps": 12.0, "latency_us": 1.0}],
}

# A small scenario with every what-if that takes numbers (a second and a half to simulate)
GOOD = {
    "name": "good",
    "topology": "box.yaml",
    "workload": {
        "name": "g", "bytes_per_param": 4, "d_steps_per_g_step": 1,
        "networks": {
            "discriminator": {"params": 1000, "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.0001,
                              "buffer_bytes": 64, "variables": [600, {"size": 200, "count": 2}]},
            "generator": {"params": 2000, "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.0001,
                          "variable_count": 4},
        },
        "data": {"host_prep_s": 0.0001, "bytes_per_sample": 3136.0},
        "regularization": [{"name": "r1", "network": "discriminator", "every": 1, "compute_s": 0.0005}],
    },
    "gpus": [1, 2],
    "per_gpu_batch": 32,
    "steps": 2,
    "seed": 1,
    "link_bandwidth_scale": 1.0,
    "options": {"gradient_sync": "per_variable", "bucket_MiB": 25.0, "first_bucket_MiB": 1.0, "host_overhead_per_replica_s": 0.0001, "chunks": 2,
                "compute_efficiency": 0.5, "kernel_launch_us": 5.0, "gamma_s_per_byte": 1e-11, "compute_cv": 0.1},
    "memory": {"reserve_MiB": 100.0, "activation_bytes_per_sample": 1000.0},
    "run": {"images": 10000, "epochs": 2.0},
    "checkpoint": {"every_steps": 50, "storage_bandwidth_GBps": 1.0},
    "failures": {"mtbf_hours_per_gpu": 1000.0, "restart_s": 60.0},
    "preemption": {"rate_per_hour": 0.1, "restart_s": 30.0},
    "storage": {"bandwidth_MBps": 100.0, "iops": 1000.0, "latency_ms": 1.0, "queue_depth": 4},
    "elastic": {"min_gpus": 1, "max_gpus": 2, "rescale_s": 10.0, "cooldown_epochs": 0},
    "reference": {"speedup": {2: 1.5}, "step_time_s": {2: 0.01}},
}

# A calibration profile of the shape `gansim calibrate` writes, every section present
PHASE_NAMES = ("data_s", "d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s",
               "g_optimizer_s")
PROFILE = {
    "schema": 1,
    "provenance": {"host": "h", "device": "cpu", "backend": "gloo", "torch": "2.13.0", "date": "2026-01-01",
                   "model": "paper-mlp-gan", "batch_size": 64, "cores": 2, "mode": "flat", "threads": 1,
                   "steps": 30, "warmup": 5, "repeats": 2, "d_steps": 1, "world_sizes": [1, 2],
                   "load_average_start": 0.5, "load_average_end": 0.7, "device_tflops": 1.0,
                   "device_memory_bandwidth_GBps": 20.0},
    "measured": {
        "step_time_s": {"1": 0.07, "2": 0.09},
        "repeat_step_time_s": {"1": [0.07, 0.071], "2": [0.09, 0.091]},
        "samples": {"1": [{"rank": 0, "phases": {"step_s": [0.07, 0.07]}}]},
        "phases": {"1": {**{p: 0.01 for p in PHASE_NAMES}, "step_s": 0.07}},
        "allreduce": [{"world_size": 2, "bytes": 4096, "time_s": 0.0002, "iters": 40, "median_s": 0.0002,
                       "samples_s": [0.0002, 0.0002]}],
        "reduction": [{"bytes": 65536, "time_s": 0.00001, "iters": 20}],
        "compute_only": {"1": {p: 0.01 for p in PHASE_NAMES}},
        "steal_fraction": {"1": [0.01], "2": [0.02]},
        # what --script and --from-trace profiles add
        "collectives": {"2": [{"op": "allreduce", "phase": "d_backward_s", "occurrence": 1, "owner": "ddp0",
                               "bytes": 935940, "per_step": 1.0}]},
        "phase_costs": {"d_forward_s": {"flops": 1e8, "bytes": 1e6}},
        "profiler": {"overhead_s_per_event": 1e-6, "events_per_step": {"d_forward_s": 100.0},
                     "raw_phases": {"d_forward_s": 0.011}, "resolution_s": 1e-9},
    },
    "fit": {"alpha_s": 0.0002, "beta_s_per_byte": 1e-9, "gamma_s_per_byte": 1e-10,
            "compute": {**{p: 0.01 for p in PHASE_NAMES}, "step_s": 0.07}, "core_sharing": {"1": 1.0, "2": 1.1},
            "compute_cv": 0.05, "gradient_bytes": {"discriminator": 935940, "generator": 8205536},
            "buffer_bytes": {"discriminator": 0, "generator": 17616},
            "gradient_buckets": {"discriminator": [935940], "generator": [8205536]},
            "residuals": {"2": {"4096": 0.03}}, "rms_relative_residual": 0.03},
}

def leaves(doc: Any, path: tuple = (), *, every: bool = False) -> Iterator[tuple[tuple, Any]]:
    """Every number in a document, with its path (keys and list indices); of a list only its
    first element unless `every`."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from leaves(value, path + (key,), every=every)
    elif isinstance(doc, list):
        for i, value in enumerate(doc if every else doc[:1]):
            yield from leaves(value, path + (i,), every=every)
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path, doc


def replaced(doc: Any, path: tuple, value: Any) -> Any:
    out = copy.deepcopy(doc)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def without(doc: dict, *path: str) -> dict:
    out = copy.deepcopy(doc)
    target = out
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return out


def write_files(folder: Path, files: dict[str, Any]) -> None:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif name.endswith(".json"):
            path.write_text(json.dumps(content))
        else:
            path.write_text(yaml.safe_dump(content, sort_keys=False, allow_unicode=True))




def _trace_event(name: str, ts: float, dur: float, cat: str = "user_annotation", **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


# A torch.profiler (Kineto) trace of one rank: two steps, each phase labelled with
# record_function, one matrix product with its FLOPs (what `calibrate --from-trace` reads)
TRACE = {
    "schemaVersion": 1,
    "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
    "record_shapes": 1,
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        *(event for step in range(2) for event in (
            _trace_event(f"ProfilerStep#{step + 1}", 1000.0 + 1000 * step, 900.0),
            *(_trace_event(phase.removesuffix("_s"), 1010.0 + 1000 * step + 140 * k, 130.0)
              for k, phase in enumerate(PHASE_NAMES[1:])),
            _trace_event("aten::mm", 1020.0 + 1000 * step, 50.0, cat="cpu_op", flops=2_000_000,
                         **{"Input Dims": [[64, 100], [100, 10]], "Input type": ["float", "float"]}),
        )),
    ],
}
