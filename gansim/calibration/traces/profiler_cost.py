"""What torch.profiler's CPU recording costs the traced thread, per recorded event, for the
trace at hand: the figure `--from-trace` removes from every phase (events x cost).

Why a probe of the trace's own layers, in a fresh process. A trace is the first profiling
session of its process (``torch.profiler.profile(schedule=...)`` around a few steps), and
what the profiler costs there depends on the size of the tensors the program works on, not
only on the number of events: in a fresh process's first session an event of a 256-wide MLP
costs two to three times what one of a 16-wide MLP does, and several times what the same
event costs once the process has profiled a few sessions (`python bench/profiler_overhead.py`
prints the first-session cost by width on the machine at hand). So a probe of small layers,
or one timed over many sessions, misses most of a real trace's cost.
The probe here trains layers of the trace's own shapes (the matrix products and convolutions
of its first profiled step, read from record_shapes' Input Dims), with and without the
profiler, in the first session of a fresh interpreter, a few times, with the trace's own
profiler options; the cost is the median, per event counted as the importer counts a trace's
(the training thread's complete events: operators, labels, and Python's frames with
``with_stack``). A trace without shapes gets the small default layers, and the log says so.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
from typing import Any, Iterable, Optional

from gansim.core.errors import UserInputError

# the layers of a trace whose shapes are unknown (no record_shapes): a small MLP, batch 8
DEFAULT_LAYERS: tuple[tuple[Any, ...], ...] = (("linear", 8, 16, 16), ("linear", 8, 16, 1))
# at most this many distinct layers, the largest first (a probe step stays short)
MAX_LAYERS = 24
# fresh processes measured; their median is the cost
PROCESSES = 3
# profiled iterations of the probe in its one session (the per-event cost does not depend on it)
ITERATIONS = 20

PROBE_SCRIPT = r"""
import json, sys, time
import torch
from torch.profiler import ProfilerActivity, profile
spec = json.loads(sys.argv[1])
torch.set_num_threads(1)
torch.manual_seed(0)
modules, inputs = [], []
for layer in spec["layers"]:
    if layer[0] == "linear":
        _, batch, fan_in, fan_out = layer
        modules.append(torch.nn.Linear(fan_in, fan_out))
        inputs.append(torch.randn(batch, fan_in))
    else:
        kind, n, c, h, w, out, kh, kw = layer
        if kind == "conv_transpose":  # no padding: a 1 x 1 input (a DCGAN's latent) stays valid
            modules.append(torch.nn.ConvTranspose2d(c, out, (kh, kw)))
        else:
            modules.append(torch.nn.Conv2d(c, out, (kh, kw), padding=(kh // 2, kw // 2)))
        inputs.append(torch.randn(n, c, h, w))
opt = torch.optim.Adam([p for m in modules for p in m.parameters()])
def step():
    opt.zero_grad()
    sum(torch.relu(m(x)).sum() for m, x in zip(modules, inputs)).backward()
    opt.step()
def loop(n):
    start = time.thread_time()
    for _ in range(n):
        step()
    return time.thread_time() - start
loop(3)
plain = min(loop(spec["iterations"]) for _ in range(3))
with profile(activities=[ProfilerActivity.CPU], record_shapes=spec["record_shapes"], with_flops=spec["with_flops"],
             with_stack=spec["with_stack"], profile_memory=spec["profile_memory"]) as prof:
    profiled = loop(spec["iterations"])
# the events counted as the importer counts a trace's: complete events on the training thread
# (operators, labels, and Python's frames with with_stack)
import collections, os, tempfile
fd, path = tempfile.mkstemp(suffix=".json")
os.close(fd)
prof.export_chrome_trace(path)
with open(path) as f:
    trace = json.load(f)
os.unlink(path)
threads = collections.Counter((e.get("pid"), e.get("tid")) for e in trace["traceEvents"]
                              if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "python_function"))
print(json.dumps({"cost_s": (profiled - plain) / max(1, max(threads.values(), default=1))}))
"""


class ProbeError(RuntimeError):
    """The probe's interpreter failed: the command says so in one line (exit code 1)."""


def _ints(dims: Any) -> Optional[list[int]]:
    if isinstance(dims, list) and dims and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
        return list(dims)
    return None


def layer_of(event: dict) -> Optional[tuple[Any, ...]]:
    """The layer an operator event is the forward of, from its Input Dims: a matrix product
    with bias (``aten::addmm``: [b, in] x [in, out]) or a convolution (``aten::convolution``:
    input [n, c, h, w], weight [out, c, kh, kw], or [c, out, kh, kw] when transposed)."""
    dims = event.get("args", {}).get("Input Dims")
    if not isinstance(dims, list):
        return None
    if event.get("name") == "aten::addmm" and len(dims) >= 3:
        x, w = _ints(dims[1]), _ints(dims[2])
        if x and w and len(x) == 2 and len(w) == 2 and x[1] == w[0]:
            return ("linear", x[0], w[0], w[1])
    if event.get("name") == "aten::convolution" and len(dims) >= 2:
        x, w = _ints(dims[0]), _ints(dims[1])
        if x and w and len(x) == 4 and len(w) == 4:
            if w[1] == x[1]:
                return ("conv", *x, w[0], w[2], w[3])
            if w[0] == x[1]:
                return ("conv_transpose", *x, w[1], w[2], w[3])
    return None


def _size(layer: tuple[Any, ...]) -> int:
    if layer[0] == "linear":
        return layer[2] * layer[3] + layer[1] * layer[2]
    _, n, c, h, w, out, kh, kw = layer
    return out * c * kh * kw + n * c * h * w


def probe_layers(events: Iterable[dict]) -> tuple[tuple[Any, ...], ...]:
    """The distinct layers of these operator events (one profiled step), the largest first,
    at most MAX_LAYERS; DEFAULT_LAYERS when none has its shapes."""
    found = {layer for layer in map(layer_of, events) if layer is not None}
    return tuple(sorted(found, key=_size, reverse=True)[:MAX_LAYERS]) or DEFAULT_LAYERS


def measure_profiler_overhead(record_shapes: bool, with_flops: bool, with_stack: bool = False,
                              profile_memory: bool = False, layers: tuple[tuple[Any, ...], ...] = DEFAULT_LAYERS,
                              processes: int = PROCESSES, iterations: int = ITERATIONS) -> float:
    """Seconds of the training thread's CPU time (``time.thread_time``) the CPU profiler adds
    per recorded event to training steps of `layers` (forward, backward, Adam), in the first
    profiling session of each of `processes` fresh interpreters; the median. Thread CPU time,
    not wall time: the cost is work the profiler's callbacks do on the thread that runs the
    operators, and wall time would add whatever else the machine runs."""
    if importlib.util.find_spec("torch") is None:
        raise UserInputError("measuring the profiler's cost per event needs PyTorch, which is not installed; give "
                             "it with --profiler-overhead-us, or install the calibrator's extra (pip install "
                             "torch==2.13.0 'gansim[calibrate]')", field="--profiler-overhead-us")
    spec = json.dumps({"layers": [list(layer) for layer in layers], "record_shapes": record_shapes,
                       "with_flops": with_flops, "with_stack": with_stack, "profile_memory": profile_memory,
                       "iterations": iterations})
    costs = []
    for _ in range(processes):
        done = subprocess.run([sys.executable, "-c", PROBE_SCRIPT, spec], capture_output=True, text=True, timeout=600)
        printed = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not printed:
            why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
            raise ProbeError(f"the probe that measures the profiler's cost failed ({why}); give the cost with "
                             "--profiler-overhead-us")
        costs.append(float(json.loads(printed[-1])["cost_s"]))
    return max(0.0, statistics.median(costs))
