"""What a `gansim` command pays before it does anything: importing the modules its
subcommand needs and building its parser, timed in fresh processes (a warm file cache,
as when a user runs the command twice). Prints the median wall and CPU time of a bare
interpreter, of the command's imports, and their difference; then, from `python -X
importtime`, the median self time of the costliest modules (gansim's one by one, other
packages by their top-level name).

    python bench/startup.py [--command simulate] [--repeats 7] [--top 20] [--against CHECKOUT]

`--command` is a subcommand as typed (simulate, predict, validate, topology, calibrate,
plan, nccl-tests) or `all` (every subcommand's parser, what `gansim --help` builds).
`--against` times another checkout of gansim (its folder, put first on PYTHONPATH) in turn
with this one, process by process, and prints both medians and the median of the paired
ratios: the machine's speed drifts, pairs keep the comparison fair."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)


def timed(code: str, checkout: str | None = None) -> tuple[float, float]:
    """Wall s and CPU s (user + system, from wait4) of `python -c code` in a fresh process
    that imports gansim from `checkout` (default: this one): `python -c` looks in its
    working directory first, then PYTHONPATH."""
    # bytecode written and read, as a pip install leaves the package (see command_scale.py)
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
           "PYTHONPATH": os.pathsep.join(filter(None, [checkout or ROOT, os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, env=env, cwd=checkout or ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"python -c {code!r} failed (status {status})")
    return wall, usage.ru_utime + usage.ru_stime


def self_times(code: str) -> dict[str, float]:
    """Self time in ms per module group from one `python -X importtime -c code`."""
    run = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    groups: dict[str, float] = defaultdict(float)
    for line in run.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|")
        name = name.strip()
        group = name if name.startswith("gansim") else name.split(".")[0]
        groups[group] += int(own) / 1000
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--command", default="simulate", help="subcommand whose imports are timed, or 'all'")
    parser.add_argument("--repeats", type=int, default=7, help="fresh processes per figure (median)")
    parser.add_argument("--top", type=int, default=20, help="module groups listed by self time")
    parser.add_argument("--against", metavar="CHECKOUT", help="another checkout's folder, timed in turn with this one")
    args = parser.parse_args()
    argv = [] if args.command == "all" else [args.command]
    code = f"from gansim.cli.main import build_parser; build_parser({argv!r})"

    bare = [timed("pass") for _ in range(args.repeats)]
    command = [timed(code) for _ in range(args.repeats)]
    bare_wall, bare_cpu = (statistics.median(x) for x in zip(*bare))
    wall, cpu = (statistics.median(x) for x in zip(*command))
    print(f"gansim {args.command}: start-up, median of {args.repeats} fresh processes")
    print(f"  bare interpreter     {bare_wall * 1000:7.0f} ms wall {bare_cpu * 1000:7.0f} ms CPU")
    print(f"  imports + parser     {wall * 1000:7.0f} ms wall {cpu * 1000:7.0f} ms CPU")
    print(f"  difference           {(wall - bare_wall) * 1000:7.0f} ms wall {(cpu - bare_cpu) * 1000:7.0f} ms CPU")
    if args.against:
        pairs = [(timed(code), timed(code, args.against)) for _ in range(args.repeats)]
        for label, index in (("this checkout", 0), (args.against, 1)):
            w, c = (statistics.median(p[index][k] for p in pairs) for k in (0, 1))
            print(f"  {label}: imports + parser {w * 1000:.0f} ms wall {c * 1000:.0f} ms CPU (median of {args.repeats})")
        ratio_wall = statistics.median(a[0] / b[0] for a, b in pairs)
        ratio_cpu = statistics.median(a[1] / b[1] for a, b in pairs)
        print(f"  this / {args.against}: {ratio_wall:.3f} wall, {ratio_cpu:.3f} CPU (median of paired ratios)")

    runs = [self_times(code) for _ in range(args.repeats)]
    names = set().union(*runs)
    medians = {name: statistics.median(run.get(name, 0.0) for run in runs) for name in names}
    gansim_total = sum(v for k, v in medians.items() if k.startswith("gansim"))
    print(f"\nself time under -X importtime (its own overhead included), median ms; gansim's modules "
          f"together: {gansim_total:.0f} ms, everything: {sum(medians.values()):.0f} ms")
    for name, ms in sorted(medians.items(), key=lambda item: -item[1])[:args.top]:
        print(f"  {ms:7.1f}  {name}")


if __name__ == "__main__":
    main()
