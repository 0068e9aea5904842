"""Every shape of scenario a user may write, timed as the user runs it: the whole command
(`gansim simulate SCENARIO` with its default outputs, or `gansim predict`), its wall time
and the peak resident memory of its largest process, beside the bound it is held to.

    python bench/shapes.py [--sizes 1024,16384] [--shapes chunked_ring,nccl,...] [--repeats 1]
                           [--huge] [--profile PROFILE.json] [--stop-at 3] [--env NAME=VALUE ...]
                           [--markdown docs/performance.md [--block shapes]]

Bounds: 2 s and 500 MB at 1,024 GPUs, 5 s and 1 GB at 16,384, 60 s and 8 GB at 100,000
(--huge, within the default limits). A
command is stopped at three times its bound in CPU seconds (--stop-at; its figures are then
lower bounds, marked >), which other work on the machine does not move; with a larger
--stop-at and --block shapes-past-bound, what the shapes past their bound cost in full (--env
raises a limit for every command, e.g. GANSIM_MAX_TASKS for `predict`, and the table says so). Machines are 8 GPUs each; an all-reduce moves 256 MiB; a GAN trains `dcgan`
for 10 steps with DDP buckets. `predict` (at 1,024 ranks, on the calibrated host) and `predict_topology`
(the same profile on NVSwitch machines) need a calibration profile: --profile, else a tiny one is
calibrated first (torch, a minute)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from command_scale import AS_INSTALLED, measure  # noqa: E402  (a script beside this one)

from gansim.calibration.ranks.machine import cpu_name  # noqa: E402
from gansim.core.files import atomic_write  # noqa: E402
from gansim.docs import marker_pattern, write_block  # noqa: E402

GAN = "dcgan"
ALLREDUCE = {"allreduce_bytes": 256 * 1024 * 1024}
BOUNDS = {1024: (2.0, 500.0), 16384: (5.0, 1000.0), 100_000: (60.0, 8000.0)}


def nvswitch_machines(gpus: int, **intra: object) -> dict:
    return {"generator": "multi_node", "params": {"nodes": gpus // 8, "gpus_per_node": 8, "intra": "nvswitch",
                                                  "intra_params": dict(intra), "nic_bandwidth_GBps": 25}}


def rail_machines(gpus: int) -> dict:
    """NVSwitch machines on a rail-optimised leaf-spine fabric: 32 machines a leaf group, 512
    (16 groups) a pod, pods joined by a core (MultiNodeParams.fabric)."""
    body = nvswitch_machines(gpus)
    body["params"].update(fabric="rail", machines_per_leaf=32, machines_per_pod=512)
    return body


def dgx1_machines(gpus: int) -> dict:
    return {"generator": "multi_node", "params": {"nodes": gpus // 8, "intra": "dgx1"}}


@dataclass(frozen=True)
class Shape:
    name: str
    what: str
    topology: object  # gpus -> topology body
    workload: object
    algorithm: str
    steps: int = 1
    options: dict | None = None


SHAPES = {s.name: s for s in (
    Shape("chunked_ring", "ring all-reduce in 4 chunks (`chunks: 4`), NVSwitch machines", nvswitch_machines,
          ALLREDUCE, "ring", options={"chunks": 4}),
    Shape("nccl", "`nccl` all-reduce, NVSwitch machines", nvswitch_machines, ALLREDUCE, "nccl"),
    Shape("hierarchical_ring", "`hierarchical_ring` all-reduce, NVSwitch machines", nvswitch_machines, ALLREDUCE,
          "hierarchical_ring"),
    Shape("dgx1", "ring all-reduce, DGX-1 machines", dgx1_machines, ALLREDUCE, "ring"),
    Shape("gan_ddp_ring", f"`{GAN}` with DDP buckets, ring, NVSwitch machines", nvswitch_machines, GAN, "ring",
          10, {"overlap": True}),
    Shape("gan_ddp_nccl", f"`{GAN}` with DDP buckets, nccl, NVSwitch machines", nvswitch_machines, GAN, "nccl",
          10, {"overlap": True}),
    Shape("gan_ddp_hierarchical_ring", f"`{GAN}` with DDP buckets, `hierarchical_ring`, NVSwitch machines",
          nvswitch_machines, GAN, "hierarchical_ring", 10, {"overlap": True}),
    Shape("few_host_cores", f"`{GAN}` with DDP buckets, ring, 4 host cores for 8 GPUs",
          lambda gpus: nvswitch_machines(gpus, host_cores=4), GAN, "ring", 10, {"overlap": True}),
    Shape("rail_nccl", "`nccl` all-reduce, NVSwitch machines on a rail-optimised leaf-spine fabric", rail_machines,
          ALLREDUCE, "nccl"),
    Shape("rail_gan_ddp_nccl", f"`{GAN}` with DDP buckets, nccl, rail-optimised leaf-spine fabric", rail_machines,
          GAN, "nccl", 10, {"overlap": True}),
    Shape("dgx1_gan_ddp_nccl", f"`{GAN}` with DDP buckets, nccl, DGX-1 machines", dgx1_machines, GAN, "nccl", 10,
          {"overlap": True}),
)}
# Shapes beyond the ones the bounds are set for, run only when --shapes names them: what
# a ring costs whose ranks do not repeat from machine to machine, and shapes whose routes are
# searched one by one (docs/performance.md)
EXTRA = {s.name: s for s in (
    Shape("gan_ddp_ring_stragglers", f"`{GAN}` with DDP buckets, ring, ranks' compute varying "
          "(`compute_cv: 0.1`)", nvswitch_machines, GAN, "ring", 10, {"overlap": True, "compute_cv": 0.1}),
    Shape("gan_ddp_nccl_stragglers", f"`{GAN}` with DDP buckets, nccl, ranks' compute varying "
          "(`compute_cv: 0.1`)", nvswitch_machines, GAN, "nccl", 10, {"overlap": True, "compute_cv": 0.1}),
    Shape("gan_per_variable_ring", f"`{GAN}`, one ring all-reduce per variable (`gradient_sync: per_variable`)",
          nvswitch_machines, GAN, "ring", 10, {"gradient_sync": "per_variable"}),
    Shape("gan_per_variable_hierarchical_ring", f"`{GAN}`, one `hierarchical_ring` all-reduce per variable",
          nvswitch_machines, GAN, "hierarchical_ring", 10, {"gradient_sync": "per_variable"}),
    Shape("rail_gan_ddp_hierarchical_ring", f"`{GAN}` with DDP buckets, `hierarchical_ring`, rail-optimised "
          "leaf-spine fabric", rail_machines, GAN, "hierarchical_ring", 10, {"overlap": True}),
    Shape("gan_ddp_nccl_pcie", f"`{GAN}` with DDP buckets, nccl, PCIe machines (`intra: pcie_tree`)",
          lambda gpus: {**nvswitch_machines(gpus), "params": {**nvswitch_machines(gpus)["params"],
                                                              "intra": "pcie_tree"}}, GAN, "nccl", 10,
          {"overlap": True}),
    Shape("gan_ddp_halving_doubling", f"`{GAN}` with DDP buckets, `halving_doubling`, NVSwitch machines",
          nvswitch_machines, GAN, "halving_doubling", 10, {"overlap": True}),
    Shape("gan_ddp_chunked_ring", f"`{GAN}` with DDP buckets, ring in 2 chunks, NVSwitch machines",
          nvswitch_machines, GAN, "ring", 10, {"overlap": True, "chunks": 2}),
    Shape("rail_chunked_ring", "ring all-reduce in 4 chunks, rail-optimised leaf-spine fabric", rail_machines,
          ALLREDUCE, "ring", options={"chunks": 4}),
    Shape("rail_gan_ddp_ring", f"`{GAN}` with DDP buckets, ring, rail-optimised leaf-spine fabric", rail_machines,
          GAN, "ring", 10, {"overlap": True}),
    Shape("rail_gan_ddp_halving_doubling", f"`{GAN}` with DDP buckets, `halving_doubling`, rail-optimised leaf-spine "
          "fabric", rail_machines, GAN, "halving_doubling", 10, {"overlap": True}),
    Shape("few_host_cores_stragglers", f"`{GAN}` with DDP buckets, nccl, 4 host cores for 8 GPUs, ranks' compute "
          "varying (`compute_cv: 0.1`)", lambda gpus: nvswitch_machines(gpus, host_cores=4), GAN, "nccl", 10,
          {"overlap": True, "compute_cv": 0.1}),
    Shape("gan_ddp_ring_fp16", f"`{GAN}` with DDP buckets, ring, gradients all-reduced in fp16 "
          "(`gradient_dtype: fp16`), NVSwitch machines", nvswitch_machines, GAN, "ring", 10,
          {"overlap": True, "gradient_dtype": "fp16"}),
)}
PREDICT = "predict"  # `gansim predict --world-sizes N` on a calibrated CPU host
# the same profile predicted on NVSwitch machines (its compute moved there by the roofline,
# from the host figures below: the command's cost, not its prediction, is what is measured)
PREDICT_TOPOLOGY = "predict_topology"
HOST_FIGURES = ["--measured-tflops", "1", "--measured-memory-bandwidth-GBps", "50"]
PREDICT_RANKS = 1024  # the size it is held to
HUGE = ("nccl", "gan_ddp_nccl", "rail_nccl", "rail_gan_ddp_nccl")  # the shapes run at 100,000 GPUs with --huge
# The pace of the machine when a table was made: the same fixed work every time (Python
# dictionaries and lists, then numpy sorts and gathers, as gansim spends its time), timed
# as a command before and after the shapes. A shared VM's pace moves by a third from hour to
# hour; two tables are comparable where their references are.
REFERENCE = ("import numpy as np\n"
             "d = {}\n"
             "for i in range(600_000):\n"
             "    d[i % 9973] = d.get(i % 9973, 0) + i\n"
             "x = np.random.default_rng(0).random(2_000_000)\n"
             "for _ in range(2):\n"
             "    x = x[np.argsort(x + 0.5, kind='stable')]\n")


def scenario_file(folder: Path, shape: Shape, gpus: int) -> Path:
    name = f"{shape.name}-{gpus}"
    topology = folder / f"{name}-topology.yaml"
    topology.write_text(yaml.safe_dump({"name": f"{name}-topology", **shape.topology(gpus)}, sort_keys=False))
    body = {"name": name, "topology": topology.name, "workload": shape.workload, "gpus": [gpus],
            "algorithms": [shape.algorithm], "steps": shape.steps}
    if shape.options:
        body["options"] = shape.options
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def calibrated_profile(folder: Path) -> Path:
    """A tiny calibration of this machine's CPU host (2 gloo ranks, a few steps)."""
    out = folder / "profile.json"
    subprocess.run([sys.executable, "-m", "gansim", "calibrate", "--world-sizes", "1,2", "--steps", "3", "--warmup",
                    "1", "--batch-size", "8", "--sizes", "4K:1M", "--sweep-iters", "3", "--repeats", "1",
                    "--out", str(out)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=AS_INSTALLED)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024,16384", help="GPU counts (each with its bound: 1024, 16384)")
    parser.add_argument("--shapes", default=",".join([*SHAPES, PREDICT, PREDICT_TOPOLOGY]),
                        help=f"default: every shape held to a bound; also {', '.join(EXTRA)}")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--huge", action="store_true", help=f"also {', '.join(HUGE)} at 100,000 GPUs")
    parser.add_argument("--profile", type=Path, help="calibration profile for `predict` (default: calibrate one)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this Markdown file")
    parser.add_argument("--block", default="shapes", help="the file's block to write (default: shapes)")
    parser.add_argument("--stop-at", type=float, default=3.0,
                        help="stop a command at this many times its bound in CPU seconds (default 3)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for every command (a raised limit), shown in the table")
    args = parser.parse_args()
    bad_env = [e for e in args.env if "=" not in e or not e.split("=", 1)[0]]
    if bad_env:
        parser.error(f"--env: expected NAME=VALUE, got {bad_env}")
    extra_env = dict(e.split("=", 1) for e in args.env)
    sizes = [int(s) for s in args.sizes.split(",")]
    unknown = [s for s in sizes if s not in BOUNDS]
    if unknown:
        parser.error(f"--sizes: no bound for {unknown}; one of {sorted(BOUNDS)}")
    names = [n for n in args.shapes.split(",") if n]
    bad = [n for n in names if n not in SHAPES and n not in EXTRA and n not in (PREDICT, PREDICT_TOPOLOGY)]
    if bad:
        parser.error(f"--shapes: unknown {bad}; one of {[*SHAPES, PREDICT, PREDICT_TOPOLOGY, *EXTRA]}")
    gansim = [sys.executable, "-m", "gansim"]
    load = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gansim-shapes-") as tmp:
        folder = Path(tmp)
        cases: list[tuple[str, str, int, list[str], dict]] = []
        for gpus in sizes:
            for name in names:
                if name in (PREDICT, PREDICT_TOPOLOGY):
                    if gpus != PREDICT_RANKS:
                        continue
                    profile = args.profile or folder / "profile.json"
                    command = gansim + ["predict", "--profile", str(profile), "--world-sizes", str(gpus)]
                    what = "`gansim predict --world-sizes N`, calibrated CPU host"
                    if name == PREDICT_TOPOLOGY:
                        topology = folder / f"{name}-{gpus}.yaml"
                        topology.write_text(yaml.safe_dump({"name": f"{name}-{gpus}", **nvswitch_machines(gpus)},
                                                           sort_keys=False))
                        command += ["--topology", str(topology), *HOST_FIGURES]
                        what = (f"the same profile, `--topology` NVSwitch machines (`{' '.join(HOST_FIGURES)}`: "
                                f"the host's figures for the roofline)")
                    cases.append((name, what, gpus, command, dict(extra_env)))
                    continue
                shape = SHAPES.get(name) or EXTRA[name]
                path = scenario_file(folder, shape, gpus)
                cases.append((name, shape.what, gpus, gansim + ["simulate", str(path), "--out",
                                                                  str(folder / "out" / path.stem)], dict(extra_env)))
        if args.huge:
            for name in HUGE:
                shape = SHAPES[name]
                path = scenario_file(folder, shape, 100_000)
                cases.append((name, shape.what, 100_000, gansim + ["simulate", str(path), "--out",
                                                                     str(folder / "out" / path.stem)], dict(extra_env)))
        if any(name in (PREDICT, PREDICT_TOPOLOGY) for name, *_ in cases) and args.profile is None:
            calibrated_profile(folder)
        # bytecode written once, as a pip install leaves it
        subprocess.run(gansim + ["--help"], stdout=subprocess.DEVNULL, env=AS_INSTALLED, check=True)
        reference = [sys.executable, "-c", REFERENCE]
        pace_before = measure(reference, 3, warm_up=False)["cpu"]
        for name, what, gpus, command, env in cases:
            wall_bound, memory_bound = BOUNDS[gpus]
            try:
                figures = measure(command, args.repeats, timeout_s=10 * args.stop_at * wall_bound, warm_up=False,
                                  env=env, cpu_limit_s=args.stop_at * wall_bound)
                failure = ""
            except SystemExit as failed:  # the command exited non-zero: its one-line reason
                figures, failure = None, str(failed).strip().splitlines()[-1]
            rows.append((name, what, gpus, env, figures, failure))
            shown = failure or (f"wall {figures['wall']:6.2f} s  CPU {figures['cpu']:6.2f} s  peak {figures['rss']:6.0f} MB"
                                + ("  (stopped)" if figures["timed_out"] else ""))
            print(f"  {name:<18} {gpus:>7} GPUs  {shown}  (bound {wall_bound:g} s, {memory_bound:g} MB)",
                  file=sys.stderr, flush=True)
        pace_after = measure(reference, 3, warm_up=False)["cpu"]
    lines = [f"Whole commands, default outputs, bytecode cached as a pip install leaves it; median of "
             f"{args.repeats} run(s); a command is stopped at {args.stop_at:g}x its bound in CPU seconds (figures marked > are "
             f"lower bounds). Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {cpu_name()}, "
             f"{os.cpu_count()} cores, load average {load[0]:.2f} at the start; the machine's pace, a fixed piece of "
             f"work (`REFERENCE` in bench/shapes.py, median CPU s of 3): {pace_before:.2f} s before the shapes, "
             f"{pace_after:.2f} s after. Each command is one process on one core, so on an idle machine "
             f"its wall time is its CPU time; where other work shares the cores the wall time grows and the CPU "
             f"time does not, so `within` compares the CPU time (user + system) and the peak memory with the "
             f"bound.", "",
             "| shape | what | GPUs | wall s | CPU s | peak MB | bound | within |",
             "|---|---|---|---|---|---|---|---|"]
    for name, what, gpus, env, f, failure in rows:
        wall_bound, memory_bound = BOUNDS[gpus]
        where = f" ({', '.join(f'{k}={v}' for k, v in env.items())})" if env else ""
        if f is None:
            lines.append(f"| {name} | {what}{where} | {gpus:,} | failed: {failure} | | | {wall_bound:g} s, "
                         f"{memory_bound:g} MB | no |")
            continue
        more = ">" if f["timed_out"] else ""
        within = not f["timed_out"] and f["cpu"] <= wall_bound and f["rss"] <= memory_bound
        lines.append(f"| {name} | {what}{where} | {gpus:,} | {more}{f['wall']:.2f} | {more}{f['cpu']:.2f} | "
                     f"{more}{f['rss']:.0f} | "
                     f"{wall_bound:g} s, {memory_bound:g} MB | {'yes' if within else 'no'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        write_markdown(args.markdown, text, args.block)
    return 0


def write_markdown(path: Path, table: str, block: str = "shapes") -> None:
    """The table in the file's `block` (docs/performance.md has shapes and
    shapes-past-bound), or as the whole file where it has none; written whole or not at all."""
    if path.exists() and marker_pattern(block).search(path.read_text(encoding="utf-8")):
        write_block(path, block, table)
    else:
        atomic_write(path, table)


if __name__ == "__main__":
    sys.exit(main())
