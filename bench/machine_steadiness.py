#!/usr/bin/env python
"""How steady is this machine? One fixed single-thread workload (a float32 matrix product),
timed back to back in windows of a few seconds, with the CPU steal of each window.

A calibration can be no more accurate than the machine is steady: if the same fixed work
takes 20 % longer in one minute than in the next, a step time measured in one minute and
predicted from figures measured in another differ by that much whatever the model. Run it
alone (nothing else busy) before `gansim calibrate`, or beside a disputed validation.

Usage::

    python bench/machine_steadiness.py [--seconds 120] [--window 5] [--size 384] [--json]

It prints each window's mean time per product and its steal (the share of all CPU time a
virtual machine's hypervisor gave to other guests; /proc/stat, Linux only), then the
minimum, median and maximum, max/min, the coefficient of variation, and how many windows
lie more than 10 % from the median.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads its BLAS
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from gansim.calibration.ranks.machine import cpu_steal_ticks, steal_between  # noqa: E402

FAR_FROM_MEDIAN = 0.10


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to measure")
    parser.add_argument("--window", type=float, default=5.0, help="seconds per reported window")
    parser.add_argument("--size", type=int, default=384, help="matrix side (float32)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    if not (args.seconds > 0 and 0 < args.window <= args.seconds and args.size >= 16):
        parser.error("need --seconds > 0, 0 < --window <= --seconds and --size >= 16")

    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.size, args.size), dtype=np.float32)
    b = rng.standard_normal((args.size, args.size), dtype=np.float32)
    for _ in range(20):  # warm the caches and the BLAS
        a @ b
    windows = []
    for _ in range(int(args.seconds // args.window)):
        before, start, n = cpu_steal_ticks(), time.perf_counter(), 0
        while time.perf_counter() - start < args.window:
            for _ in range(10):
                a @ b
            n += 10
        elapsed = time.perf_counter() - start
        stolen = steal_between(before, cpu_steal_ticks())
        windows.append({"us_per_product": elapsed / n * 1e6, "steal": stolen})
        if not args.json:
            print(f"window {len(windows):>3}: {elapsed / n * 1e6:9.1f} us per {args.size}x{args.size} product"
                  + (f", steal {stolen:5.1%}" if stolen is not None else ""), flush=True)
    times = [w["us_per_product"] for w in windows]
    median = statistics.median(times)
    far = sum(abs(t / median - 1) > FAR_FROM_MEDIAN for t in times)
    summary = {"windows": len(times), "window_s": args.window, "size": args.size,
               "min_us": min(times), "median_us": median, "max_us": max(times),
               "max_over_min": max(times) / min(times),
               "cv": statistics.pstdev(times) / statistics.mean(times),
               "windows_beyond_10pct_of_median": far, "per_window": windows}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{len(times)} windows of {args.window:g} s: min {min(times):.1f} us, median {median:.1f} us, "
              f"max {max(times):.1f} us (max/min {summary['max_over_min']:.2f}), cv {summary['cv']:.1%}; "
              f"{far} of {len(times)} windows more than 10 % from the median")
    return 0


if __name__ == "__main__":
    sys.exit(main())
