"""What users run, timed as they run it: `gansim simulate SCENARIO` as a whole process
(start-up, simulation and every output it writes by default), on several topology kinds
and sizes. Each command runs --repeats times; the table gives the median wall time, the
median CPU time (user + system, the command and its worker processes) and the median peak
resident memory of the largest of those processes, then the growth per doubling of the
GPU count. CPU time stays meaningful when other work shares the machine; wall time does not.

    python bench/command_scale.py [--kinds switch,nvswitch,dgx1] [--sizes 128,256,...,16384]
                                  [--algorithms ring,hierarchical_ring,nccl] [--bytes 268435456]
                                  [--gan paper-mlp-gan,dcgan] [--gan-gpus 1024] [--repeats 3]

Topology kinds (generators, 8 GPUs a machine where there are machines):
  switch    every GPU on one network switch, 25 GB/s ports
  nvswitch  multi_node: NVSwitch machines, one 25 GB/s NIC per GPU on one switch
  dgx1      multi_node: DGX-1 machines (NVLink hybrid cube mesh), one NIC per GPU
  pcie      multi_node: machines of two PCIe switches of four GPUs, one NIC per GPU
Workloads: one all-reduce of --bytes per algorithm; the GAN scenarios (--gan) train 10
steps with DDP buckets on (options.overlap) at --gan-gpus on nvswitch machines."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

KINDS = {
    "switch": lambda gpus: {"generator": "switch", "params": {"gpus": gpus, "bandwidth_GBps": 25.0}},
    "nvswitch": lambda gpus: {"generator": "multi_node", "params": {"nodes": gpus // 8, "gpus_per_node": 8,
                                                                    "intra": "nvswitch", "nic_bandwidth_GBps": 25}},
    "dgx1": lambda gpus: {"generator": "multi_node", "params": {"nodes": gpus // 8, "intra": "dgx1"}},
    "pcie": lambda gpus: {"generator": "multi_node", "params": {
        "nodes": gpus // 8, "gpus_per_node": 8, "intra": "pcie_tree", "intra_params": {"gpus_per_switch": 4}}},
}


# As installed: pip compiles the package's bytecode when it installs it, so the commands
# may write (and then read) theirs even where the environment says not to; an untimed run
# of each command first writes it.
AS_INSTALLED = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def measure(command: list[str], repeats: int, timeout_s: float | None = None, warm_up: bool = True,
            env: dict[str, str] | None = None, cpu_limit_s: float | None = None) -> dict[str, float]:
    """Median wall s, CPU s and peak RSS (MB) of `command` over `repeats` runs (after one
    untimed run, with `warm_up`), each run's figures from wait4: the process and every child
    it waited for. A run past `timeout_s` is stopped and its figures are marked with
    "timed_out" (lower bounds); so is one stopped by the kernel past `cpu_limit_s` seconds
    of CPU time (RLIMIT_CPU: a bound that other work on the machine does not move). `env`:
    variables set for the command beside the bench's."""
    run_env = {**AS_INSTALLED, **(env or {})}
    if warm_up:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=run_env,
                       timeout=timeout_s)
    walls, cpus, peaks = [], [], []
    timed_out = False
    for _ in range(repeats):
        with tempfile.TemporaryFile() as log:
            start = time.perf_counter()
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
                                    env=run_env, preexec_fn=None if cpu_limit_s is None else _cpu_limit(cpu_limit_s))
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if timeout_s is not None and time.perf_counter() - start > timeout_s:
                    os.killpg(proc.pid, 9)  # the command and its worker processes
                    _, status, usage = os.wait4(proc.pid, 0)
                    timed_out = True
                    break
                time.sleep(0.02)
            walls.append(time.perf_counter() - start)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if cpu_limit_s is not None and proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
                timed_out = True
            if timed_out:
                cpus.append(usage.ru_utime + usage.ru_stime)
                peaks.append(usage.ru_maxrss / 1024)
                break
            if proc.returncode != 0:
                log.seek(0)
                raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{log.read().decode()[-2000:]}")
        cpus.append(usage.ru_utime + usage.ru_stime)
        peaks.append(usage.ru_maxrss / 1024)  # kB on Linux
    return {"wall": statistics.median(walls), "wall_min": min(walls), "wall_max": max(walls),
            "cpu": statistics.median(cpus), "rss": statistics.median(peaks), "timed_out": timed_out}


def _cpu_limit(seconds: float):
    """A preexec_fn that holds the command (and each process it starts) to `seconds` of CPU."""
    limit = max(1, math.ceil(seconds))

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))

    return apply


def scenario_file(folder: Path, name: str, topology: dict, workload, algorithm: str, gpus: int, steps: int,
                  options: dict | None = None) -> Path:
    topo_path = folder / f"{name}-topology.yaml"
    topo_path.write_text(yaml.safe_dump({"name": f"{name}-topology", **topology}, sort_keys=False))
    body = {"name": name, "topology": topo_path.name, "workload": workload, "gpus": [gpus],
            "algorithms": [algorithm], "steps": steps}
    if options:
        body["options"] = options
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="switch,nvswitch,dgx1")
    parser.add_argument("--sizes", default="128,256,512,1024,2048,4096,8192,16384")
    parser.add_argument("--algorithms", default="ring,hierarchical_ring,nccl")
    parser.add_argument("--bytes", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--gan", default="paper-mlp-gan,dcgan", help="GAN workloads ('' for none)")
    parser.add_argument("--gan-gpus", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=None,
                        help="stop a command that runs longer (its figures are then lower bounds, marked >)")
    args = parser.parse_args()
    gansim = [sys.executable, "-m", "gansim"]
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    load = os.getloadavg()
    started = dt.datetime.now(dt.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="gansim-bench-") as tmp:
        folder = Path(tmp)
        cases = []
        for kind in args.kinds.split(","):
            for algorithm in args.algorithms.split(","):
                for gpus in sizes:
                    cases.append((kind, algorithm, f"all-reduce {args.bytes / 2**20:g} MiB", gpus,
                                  scenario_file(folder, f"{kind}-{algorithm}-{gpus}", KINDS[kind](gpus),
                                                {"allreduce_bytes": args.bytes}, algorithm, gpus, 1)))
        for workload in filter(None, args.gan.split(",")):
            cases.append(("nvswitch", "ring", f"{workload}, 10 steps, DDP buckets", args.gan_gpus,
                          scenario_file(folder, f"gan-{workload}-{args.gan_gpus}", KINDS["nvswitch"](args.gan_gpus),
                                        workload, "ring", args.gan_gpus, 10, {"overlap": True})))
        for kind, algorithm, workload, gpus, path in cases:
            out = folder / "out" / path.stem
            figures = measure(gansim + ["simulate", str(path), "--out", str(out)], args.repeats, args.timeout_s)
            rows.append((kind, algorithm, workload, gpus, figures))
            print(f"  {kind:<9} {algorithm:<18} {gpus:>6} GPUs {workload:<34} wall {figures['wall']:6.2f} s  "
                  f"CPU {figures['cpu']:6.2f} s  peak {figures['rss']:7.0f} MB", file=sys.stderr, flush=True)
    print(f"`gansim simulate` as a whole process, every default output written, bytecode cached as a pip install "
          f"leaves it; median of {args.repeats} runs (wall min-max); {started:%Y-%m-%d %H:%M} UTC, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"at the start, {os.cpu_count()} cores")
    print()
    print("| topology | algorithm | workload | GPUs | wall s | CPU s | peak MB | wall x per doubling | "
          "memory x per doubling |")
    print("|---|---|---|---|---|---|---|---|---|")
    previous: dict[tuple, tuple[int, dict[str, float]]] = {}
    for kind, algorithm, workload, gpus, f in rows:
        key = (kind, algorithm, workload)
        growth_t = growth_m = ""
        if key in previous:  # the geometric mean over the doublings since the previous size
            before_gpus, before = previous[key]
            doublings = math.log2(gpus / before_gpus)
            growth_t = f"{(f['wall'] / before['wall']) ** (1 / doublings):.2f}"
            growth_m = f"{(f['rss'] / before['rss']) ** (1 / doublings):.2f}"
        previous[key] = (gpus, f)
        more = ">" if f["timed_out"] else ""
        print(f"| {kind} | {algorithm} | {workload} | {gpus} | {more}{f['wall']:.2f} ({f['wall_min']:.2f}-"
              f"{f['wall_max']:.2f}) | {more}{f['cpu']:.2f} | {more}{f['rss']:.0f} | {growth_t} | {growth_m} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
