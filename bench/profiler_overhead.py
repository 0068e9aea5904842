#!/usr/bin/env python
"""Where a torch.profiler-profiled CPU step spends its extra time: per Python call, per
record_function label, per operator event (forward, backward, optimizer). Each case runs in
rounds, unprofiled then profiled (``record_shapes``, ``with_flops``, as make_trace records),
and prints the median extra per event by the wall clock and by the thread's CPU time
(``time.thread_time``), which is what ``gansim calibrate --from-trace`` removes
(:func:`gansim.calibration.traces.importer.measure_profiler_overhead`).

Usage::

    python bench/profiler_overhead.py [--rounds 15] [--reps 20]
"""

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=15)
parser.add_argument("--reps", type=int, default=20, help="iterations of a case in one round")
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.LeakyReLU(0.2), torch.nn.Linear(128, 1))
opt = torch.optim.Adam(model.parameters())
x = torch.randn(32, 64)


def timed(fn):
    """(wall, thread CPU) seconds of fn() alone."""
    wall, cpu = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - wall, time.thread_time() - cpu


def python_calls():
    f = lambda v: v + 1  # noqa: E731
    s = 0
    for _ in range(args.reps * 100):
        s = f(s)


def labels():
    for _ in range(args.reps):
        with record_function("d_forward"):
            pass


def forward():
    for _ in range(args.reps):
        model(x).sum()


def backward():
    losses = [model(x).sum() for _ in range(args.reps)]
    opt.zero_grad()
    return lambda: [loss.backward() for loss in losses]


def optimizer():
    model(x).sum().backward()
    return lambda: [opt.step() for _ in range(args.reps)]


# a case is what is timed; backward and optimizer build their inputs untimed first
CASES = {"python call": (python_calls, False), "record_function": (labels, False), "forward op": (forward, False),
         "backward op": (backward, True), "optimizer op": (optimizer, True)}


def one_round(name):
    make, prepared = CASES[name]
    plain = timed(make() if prepared else make)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        body = make() if prepared else make
        profiled = timed(body)
    events = prof.events()
    if prepared:  # only the events of the timed part: those after the preparation's last one
        names = {"backward op": "autograd::engine", "optimizer op": "Optimizer.step"}
        spans = [(e.time_range.start, e.time_range.end) for e in events if e.name.startswith(names[name])]
        events = [e for e in events if any(lo <= e.time_range.start and e.time_range.end <= hi for lo, hi in spans)]
    return plain, profiled, len(events)


print(f"torch {torch.__version__}, {args.rounds} rounds of {args.reps} iterations, record_shapes and with_flops")
print(f"{'case':16} {'events':>7} {'wall extra':>12} {'CPU extra':>12}  (median per event; per call for python)")
for name in CASES:
    one_round(name)
    rounds = [one_round(name) for _ in range(args.rounds)]
    n = statistics.median(r[2] for r in rounds) or args.reps * 100
    wall = statistics.median((r[1][0] - r[0][0]) / n for r in rounds)
    cpu = statistics.median((r[1][1] - r[0][1]) / n for r in rounds)
    print(f"{name:16} {n:>7.0f} {wall * 1e6:>9.2f} us {cpu * 1e6:>9.2f} us")
