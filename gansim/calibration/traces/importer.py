"""``gansim calibrate --from-trace``: a profile from torch.profiler Chrome traces (Kineto's
JSON, one file per rank of one run, ``.json`` or ``.json.gz``). No torch import, except to
measure the profiler's own cost when the caller does not give it.

What is read (names as PyTorch 2.x's Kineto exporter writes them):

- ``distributedInfo.world_size`` (absent: a run of one rank) and ``.rank``;
- steps: ``ProfilerStep#N`` events (a profiler ``schedule`` and ``prof.step()``); the thread
  that has them is the training thread (without them, the thread that steps the optimizers);
  where they do not each hold one generator step, a training step runs from the end of one
  generator step to the end of the next;
- phases: ``record_function`` labels named like the calibrator's phases (``d_forward``,
  ``d_backward``, ... with or without ``_s``), summed per step; without them, the autograd
  regions: each ``Optimizer.step#...`` closes a network step, whose backward is the trailing
  run of ``autograd::engine::evaluate_function`` events (with ``Optimizer.zero_grad``, the
  gradient seed and DDP's bucket copies) before it, whose optimizer work starts where the
  backward ends (GradScaler's unscale and a gradient clipping are the optimizer's), and whose
  forward is the rest since the previous network step; which network an optimizer step is
  comes from the tensor shapes its operators read (its parameters, with ``record_shapes``):
  of two, G is the one whose backward passes read the other's weights (its loss runs through
  the discriminator); where they do not tell, the one that steps in only some ProfilerSteps,
  else the one that steps last in most of them; without shapes, the last network step of a
  ProfilerStep is G's, the ones before it D's;
- communication: ``c10d::allreduce_`` / ``c10d::broadcast_`` operators (the phase they were
  issued in, their element count from ``Input Dims``, which needs ``record_shapes=True``),
  their dtype from the backend's own ``gloo:*`` / ``nccl:*`` events, and
  ``record_param_comms`` events (``In msg nelems``, ``dtype``: NCCL's, on GPU); the backend
  events' durations give the all-reduce time per size (the fit's alpha and beta);
- per-phase FLOPs (``flops``, with ``with_flops=True``) and bytes (``Input Dims`` and types)
  for the roofline.

The profiler's overhead: every recorded event costs the traced program's thread time (the
RecordFunction callbacks run on it). Each phase loses (events recorded in it) x (the cost of
one event), the thread CPU time the profiler adds to training steps of the trace's own layer
shapes in a fresh process's first profiling session, with the trace's own options
(``record_shapes``, ``with_flops``, ``with_stack``, ``profile_memory``; see
:mod:`gansim.calibration.traces.profiler_cost`; with ``with_stack`` Python's frames are events
of the thread too), or
given with ``--profiler-overhead-us``. A trace whose
profiled steps differ by more than that can explain is reported.

With several ranks, a phase's time waiting for a collective (the training thread idle
while a backend collective is in flight) is not compute: the profile's compute figures
(``fit.compute``) leave it out, and the simulator adds the communication back.
"""

from __future__ import annotations

import bisect
import collections
import datetime as _dt
import gzip
import json
import math
import os
import platform
import statistics
import zlib
from functools import cached_property
from typing import Any, Callable, Optional, Sequence

from pydantic import ValidationError

from gansim.calibration.fit.communication import buffer_bytes, gradient_buckets, summarize
from gansim.calibration.traces.devices import Datasheet, datasheet
from gansim.calibration.traces.profiler_cost import DEFAULT_LAYERS, measure_profiler_overhead, probe_layers
from gansim.calibration.fit.measurements import fit_from_measurements, phase_means
from gansim.calibration.profile.phases import COMPUTE_PHASES, PHASES, STEP, phase_name
from gansim.calibration.profile.schema import (
    AllreducePoint,
    CollectiveRecord,
    Measured,
    PhaseCost,
    Profile,
    ProfilerCorrection,
    Provenance,
    RankSamples,
)
from gansim.core import limits
from gansim.core.config import MAX_BYTES, MAX_SECONDS, validation_error
from gansim.core.errors import UserInputError
from gansim.core.version import __version__

UNLABELLED = "unlabelled_s"
_DTYPE_BYTES = {"float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "half": 2, "bfloat16": 2,
                "long int": 8, "long": 8, "int": 4, "short int": 2, "signed char": 1, "unsigned char": 1,
                "bool": 1, "int64": 8, "int32": 4, "float32": 4, "float16": 2, "float64": 8}
_COLLECTIVE_OPS = {"c10d::allreduce_": "allreduce", "c10d::broadcast_": "broadcast"}
# what a backward pass records at the training thread's top level: the autograd engine's
# functions, the gradient seed, DDP's copies of its buckets back into the gradients, and
# the zero_grad just before it
_BACKWARD_TAIL = ("autograd::engine::evaluate_function", "Optimizer.zero_grad", "torch.distributed.ddp",
                  "aten::as_strided", "aten::ones_like")
# what only a backward pass records: the autograd engine's functions and DDP's bucket copies
_BACKWARD_END = ("autograd::engine::evaluate_function", "torch.distributed.ddp")
# what a host thread records (GPU work, CUDA runtime calls and flows are read apart)
_HOST_CATEGORIES = ("cpu_op", "user_annotation")
_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# the operators torch.utils.flop_counter counts FLOPs of (its flop_registry in torch 2.13):
# a kernel launched inside one of them is the compute-bound part of a phase for the roofline
MATH_OPERATORS = frozenset(f"aten::{name}" for name in (
    "mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "convolution", "_convolution", "convolution_backward",
    "convolution_overrideable", "cudnn_convolution", "_slow_conv2d_forward", "_flash_attention_forward",
    "_flash_attention_backward", "_efficient_attention_forward", "_efficient_attention_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward")) | {
    "flex_attention", "flex_attention_backward"}
# the operators a layer's forward records first, whose first input is the layer's input,
# batch first
_BATCH_OPERATORS = frozenset(f"aten::{name}" for name in (
    "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "_convolution"))
# how cuBLAS, cuDNN and CUTLASS name the kernels that run on tensor cores (TF32, FP16, BF16)
_TENSOR_CORE_KERNELS = ("tensorop", "xmma", "hmma", "h884", "s884", "h1688", "s1688", "16816", "tf32", "nvjet")
# labels the framework writes, not the user
_FRAMEWORK_LABELS = ("Optimizer.", "DistributedDataParallel.", "ProfilerStep#", "gloo:", "nccl:", "Torch-Compiled Region",
                     "CompiledFunction")
_KINETO_KEYS = ("schemaVersion", "traceName", "baseTimeNanoseconds", "deviceProperties", "distributedInfo")
# an event's start may be any microsecond timestamp (Kineto's count from the epoch, ~1.7e15);
# its duration at most MAX_SECONDS, as every duration gansim takes
MAX_TS_US, MAX_DUR_US = 1e18, MAX_SECONDS * 1e6


# ---------------------------------------------------------------------------- reading
def read_trace(path: str) -> dict:
    """The trace's JSON, checked to be a torch.profiler (Kineto) Chrome trace whose complete
    events (the ones read) have a name, finite times and mapping args."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as fh:
            raw = fh.read(limits.TRACE_BYTES.value + 1)  # decompressed: a gzip bomb stops here
    except (OSError, EOFError, zlib.error) as exc:
        raise UserInputError(f"cannot read the trace ({type(exc).__name__}: {exc}); allowed: a torch.profiler trace "
                             "(export_chrome_trace), .json or .json.gz", source=path, field="--from-trace") from None
    limits.TRACE_BYTES.check(len(raw), source=path, field="--from-trace")
    try:
        # NaN and Infinity are not JSON: refuse them here rather than as a time later
        data = json.loads(raw.decode("utf-8-sig"), parse_constant=_not_json)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = ("not UTF-8 text" if isinstance(exc, UnicodeDecodeError)
               else f"{exc.msg} at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError)
               else "nested too deeply" if isinstance(exc, RecursionError) else str(exc))
        raise UserInputError(f"not a JSON Chrome trace ({why}); allowed: a torch.profiler trace "
                             "(export_chrome_trace)", source=path, field="(json)") from None
    events = data.get("traceEvents") if isinstance(data, dict) else None
    if not isinstance(events, list) or not any(k in data for k in _KINETO_KEYS):
        raise UserInputError("not a torch.profiler (Kineto) Chrome trace: no traceEvents with Kineto's "
                             "schemaVersion/distributedInfo; allowed: a trace written by "
                             "torch.profiler.profile(...).export_chrome_trace()", source=path, field="traceEvents")
    for i, e in enumerate(events):
        problem = _complete_event_problem(e) if isinstance(e, dict) and e.get("ph") == "X" else None
        if problem:
            raise UserInputError(f"a complete event {problem}", source=path, field=f"traceEvents[{i}]")
    return data


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not a JSON number")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _complete_event_problem(e: dict) -> Optional[str]:
    """What makes a complete ("X") event unreadable, or None."""
    if not isinstance(e.get("name"), str):
        return "has no name (a string)"
    if not (_is_number(e.get("ts")) and abs(e["ts"]) <= MAX_TS_US):
        return f"{e['name']!r} has no start ts (a finite number of microseconds)"
    if not (_is_number(e.get("dur")) and 0 <= e["dur"] <= MAX_DUR_US):
        return f"{e['name']!r} has no duration dur from 0 to {MAX_DUR_US:g} microseconds"
    if not isinstance(e.get("args", {}), dict):
        return f"{e['name']!r} has args that are not a mapping"
    for key in ("pid", "tid"):  # the Trace Event Format's process and thread ids: numbers or names
        if key in e and not (isinstance(e[key], (int, float, str)) and not isinstance(e[key], bool)):
            return f"{e['name']!r} has a {key} that is neither a number nor a string"
    return None


def _distributed(data: dict, path: str) -> tuple[int, int, str]:
    """(world size, rank, backend) from distributedInfo (absent: a run of one rank)."""
    info = data.get("distributedInfo") or {}
    if not isinstance(info, dict):
        raise UserInputError("not a mapping", source=path, field="distributedInfo")
    world, rank = info.get("world_size"), info.get("rank")
    world, rank = 1 if world is None else world, 0 if rank is None else rank
    if not (isinstance(world, int) and not isinstance(world, bool) and world >= 1):
        raise UserInputError(f"expected a whole number >= 1, got {world!r}", source=path,
                             field="distributedInfo.world_size")
    limits.RANKS.check(world, source=path, field="distributedInfo.world_size")
    if not (isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < world):
        raise UserInputError(f"expected a whole number from 0 to {world - 1} (the world size less 1), got {rank!r}",
                             source=path, field="distributedInfo.rank")
    return world, rank, str(info.get("backend", "") or "none")


def _complete_events(data: dict) -> list[dict]:
    return [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]


def _end(e: dict) -> float:
    return e["ts"] + e["dur"]


def _inside(e: dict, lo: float, hi: float) -> bool:
    return e["ts"] >= lo and _end(e) <= hi + 1e-3


def _top_level(events: list[dict]) -> list[dict]:
    """Events not nested in another of the list (sorted by start)."""
    out, reach = [], float("-inf")
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= reach:
            out.append(e)
            reach = _end(e)
    return out


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, cur_lo, cur_hi = 0.0, None, None
    for lo, hi in sorted(intervals):
        if cur_hi is None or lo > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    return total + (cur_hi - cur_lo if cur_hi is not None else 0.0)


def _clip(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def _element_bytes(type_name: Any) -> int:
    return _DTYPE_BYTES.get(str(type_name).strip().lower(), 4)


def _first_type(args: dict) -> Any:
    """The first entry of an event's Input type (float when it has none)."""
    types = args.get("Input type")
    return types[0] if isinstance(types, list) and types else "float"


def _dims_elements(dims: Any) -> int:
    """Elements of the first tensor (or tensor list) in an Input Dims entry; 0 (unknown)
    unless every dimension is a whole number >= 0 and the product at most MAX_BYTES."""
    while isinstance(dims, list) and dims and isinstance(dims[0], list):
        dims = dims[0]
    if not isinstance(dims, list):
        return 0
    n = 1
    for d in dims:
        if not (isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_BYTES):
            return 0
        n *= d
        if n > MAX_BYTES:
            return 0
    return n


def _op_bytes(e: dict) -> float:
    """Bytes an operator reads and writes, from record_shapes' Input Dims and types (inputs
    only: Kineto records no output shapes; outputs are the next operators' inputs)."""
    args = e.get("args", {})
    dims, types = args.get("Input Dims", []), args.get("Input type", [])
    if not isinstance(dims, list) or not isinstance(types, list):
        return 0.0
    total = 0.0
    for i, d in enumerate(dims):
        if isinstance(d, list) and d and not isinstance(d[0], list):
            total += _dims_elements(d) * _element_bytes(types[i] if i < len(types) else "float")
    return total


def _op_flops(e: dict) -> float:
    """An operator's FLOPs: Kineto's own ``flops`` (with_flops), else matrix products from
    their Input Dims (2 m k n; convolutions need strides Kineto does not give: none)."""
    args = e.get("args", {})
    if _is_number(args.get("flops")) and args["flops"] > 0:
        return float(args["flops"])
    dims = args.get("Input Dims", [])
    if not isinstance(dims, list):
        return 0.0
    name = e["name"]
    if name in ("aten::mm", "aten::bmm") and len(dims) >= 2:
        a, b = dims[0], dims[1]
    elif name in ("aten::addmm", "aten::baddbmm") and len(dims) >= 3:
        a, b = dims[1], dims[2]
    else:
        return 0.0
    columns = _dims_elements([b[-1]]) if isinstance(b, list) and b and not isinstance(b[-1], list) else 0
    return 2.0 * _dims_elements(a) * columns


# ---------------------------------------------------------------------------- one rank
def _is_autograd(e: dict) -> bool:
    return e["name"].startswith("autograd::engine::evaluate_function")


def _children(events: list[dict], parent: dict) -> list[dict]:
    return [e for e in events if e is not parent and _inside(e, parent["ts"], _end(parent))]


_NO_STEPS = ("no ProfilerStep#N events: profile with a torch.profiler schedule and call prof.step() once per "
             "training step")


def _leaves(ops: list[dict]) -> list[dict]:
    """The operators with no other inside them (an operator's bytes are its leaves' bytes):
    for each, only the operators that start within it are looked at, and the first found
    inside settles it, so a stack of nested calls costs about one look per operator."""
    ordered = sorted(ops, key=lambda e: (e["ts"], -e["dur"]))
    starts = [e["ts"] for e in ordered]
    leaves = []
    for e in ordered:
        lo, hi = e["ts"], _end(e)
        within = ordered[bisect.bisect_left(starts, lo):bisect.bisect_right(starts, hi + 1e-3)]
        if not any(o is not e and _inside(o, lo, hi) for o in within):
            leaves.append(e)
    return leaves


def _interleaved(networks: list[Optional[str]]) -> bool:
    """Whether another network steps between two generator steps of one ProfilerStep (several
    GAN steps in it), not only G steps in a row (a generator's own regularisation step)."""
    steps = [k for k, net in enumerate(networks) if net == "g"]
    return len(steps) > 1 and any(net != "g" for net in networks[steps[0]:steps[-1]])


def _tensor_shapes(dims: Any, found: set) -> None:
    """Every tensor shape (a list of at least one int) in an operator's Input Dims, tensor
    lists included."""
    if isinstance(dims, list):
        if dims and all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            found.add(tuple(dims))
        else:
            for d in dims:
                _tensor_shapes(d, found)


def backward_start(events: list[dict], lo: float, hi: float) -> float:
    """Where the backward pass that ends at ``hi`` (an optimizer step) starts: the trailing
    run of backward events (the autograd engine's functions, the gradient seed, DDP's bucket
    copies, the zero_grad just before) among the events in [lo, hi], looked for inside
    whatever encloses them (a user's label, a compiled region) when that is last. A gradient
    penalty's autograd.grad in the forward is followed by more forward operators, so it stays
    in the forward."""
    inside = [e for e in events if e["ts"] >= lo and _end(e) <= hi + 1e-3]
    start = hi
    for e in reversed(_top_level(inside)):
        if e["name"].startswith(_BACKWARD_TAIL):
            start = e["ts"]
            continue
        children = _children(inside, e)
        if any(_is_autograd(c) for c in children):
            inner = backward_start(children, e["ts"], _end(e))
            if inner <= e["ts"] + 1e-3:  # all of it is backward (a label around loss.backward())
                start = e["ts"]
                continue
            return inner if inner < _end(e) - 1e-3 else start
        break
    return start


def backward_end(events: list[dict], lo: float, hi: float) -> float:
    """Where the backward pass before ``hi`` (an optimizer step) ends: where the first
    operator after its last autograd function or DDP bucket copy starts, looked for inside
    whatever encloses them; ``hi`` when nothing runs in between. What runs there prepares the
    gradients for the update (GradScaler's unscale and inf check, clip_grad_norm_, a manual
    all-reduce of the gradients) and is the optimizer's work."""
    inside = [e for e in events if e["ts"] >= lo and _end(e) <= hi + 1e-3]
    top = _top_level(inside)
    for k in range(len(top) - 1, -1, -1):
        e, after = top[k], (top[k + 1]["ts"] if k + 1 < len(top) else hi)
        if e["name"].startswith(_BACKWARD_END):
            return after
        children = _children(inside, e)
        if any(_is_autograd(c) for c in children):
            inner = backward_end(children, e["ts"], _end(e))
            return inner if inner < _end(e) - 1e-3 else after
    return hi


class _Spans:
    """Where each host thread was inside one of some events (the math operators, the
    autograd engine's functions): the union of their intervals per thread, so that an event
    is looked up in log time."""

    def __init__(self, ops: Any):
        spans: dict[Any, list[tuple[float, float]]] = {}
        for e in ops:
            spans.setdefault(e.get("tid"), []).append((e["ts"], _end(e)))
        self.spans = {}
        for tid, intervals in spans.items():
            merged: list[list[float]] = []
            for lo, hi in sorted(intervals):
                if merged and lo <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], hi)
                else:
                    merged.append([lo, hi])
            self.spans[tid] = ([lo for lo, _ in merged], [hi for _, hi in merged])

    def holds(self, tid: Any, ts: float) -> bool:
        starts, ends = self.spans.get(tid, ((), ()))
        k = bisect.bisect_right(starts, ts) - 1
        return k >= 0 and ts <= ends[k]


class RankTrace:
    """One rank's steps, phases, collectives and costs from its trace.

    ``phase_map`` maps a user's ``record_function`` label to the network (``d`` or ``g``)
    whose optimizer steps it encloses."""

    def __init__(self, path: str, data: dict, phase_map: Optional[dict[str, str]] = None):
        self.path = path
        self.phase_map = dict(phase_map or {})
        self.world_size, self.rank, self.backend = _distributed(data, path)
        # the profiler's options, which its cost per event depends on (Kineto writes those that were on)
        self.options = {name: bool(data.get(name)) for name in ("record_shapes", "with_flops", "with_stack",
                                                                 "profile_memory")}
        events = _complete_events(data)
        steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
        if steps:
            self.main = (steps[0].get("pid"), steps[0].get("tid"))
        else:  # profiled without a schedule: the training thread is the one that steps the optimizers
            threads = collections.Counter((e.get("pid"), e.get("tid")) for e in events
                                          if e["name"].startswith("Optimizer.step#"))
            if not threads:
                raise UserInputError(_NO_STEPS, source=path, field="traceEvents")
            self.main = threads.most_common(1)[0][0]
        self.steps = steps
        self.events = events
        on_main = [e for e in events if (e.get("pid"), e.get("tid")) == self.main and not e["name"].startswith("ProfilerStep#")]
        self.on_main = sorted(on_main, key=lambda e: e["ts"])
        # the backend's own collective events (their thread does the work): type and time
        self.backend_events = [e for e in events if str(e.get("name", "")).startswith(("gloo:", "nccl:"))]
        # every host thread of the training process (on GPU, backward runs on autograd's own thread)
        self.host = sorted((e for e in events if e.get("pid") == self.main[0] and e.get("cat") in _HOST_CATEGORIES
                            and not e["name"].startswith(("ProfilerStep#", "gloo:", "nccl:"))),
                           key=lambda e: (e["ts"], -e["dur"]))
        self.labelled = any(phase_name(e["name"]) for e in self.on_main if e.get("cat") == "user_annotation")
        if self.labelled and not steps:
            raise UserInputError(_NO_STEPS + " (the phase labels need it)", source=path, field="traceEvents")
        self.user_labels = [e for e in self.host if e.get("cat") == "user_annotation" and not phase_name(e["name"])
                            and not e["name"].startswith(_FRAMEWORK_LABELS)]
        self.types = {}
        for e in self.backend_events:
            args = e.get("args", {})
            key = (e["name"].split(":", 1)[1].replace("_", ""), _dims_elements(args.get("Input Dims", [])))
            self.types.setdefault(key, _first_type(args))
        self.device, self.datasheet = _device(data, path)
        self.gpu_work, self.nccl_kernels = self._gpu_events()

    def _gpu_events(self) -> tuple[list[tuple[float, float, bool]], list[dict]]:
        """(launch time, GPU seconds, whether a math operator launched it) of every kernel,
        copy and memset but NCCL's, each at the time its CUDA runtime call launched it (matched
        by correlation id), and NCCL's kernels."""
        launched = {e["args"]["correlation"]: e for e in self.events
                    if e.get("cat") == "cuda_runtime" and e.get("pid") == self.main[0]
                    and isinstance(e.get("args", {}).get("correlation"), int)}
        in_math = _Spans(e for e in self.host if e["name"] in MATH_OPERATORS)
        work, nccl = [], []
        self.tensor_core_seconds = 0.0
        for e in self.events:
            if e.get("cat") not in _GPU_CATEGORIES:
                continue
            if e["name"].startswith("ncclKernel") or e["name"].startswith("ncclDevKernel"):
                nccl.append(e)
                continue
            launch = launched.get(e.get("args", {}).get("correlation"))
            if launch is not None:
                math = in_math.holds(launch.get("tid"), launch["ts"])
                work.append((launch["ts"], e["dur"] * 1e-6, math))
                if math and any(mark in e["name"].lower() for mark in _TENSOR_CORE_KERNELS):
                    self.tensor_core_seconds += e["dur"] * 1e-6
        return sorted(work), nccl

    @property
    def cuda(self) -> bool:
        return bool(self.gpu_work)

    def gpu_seconds(self, lo: float, hi: float, math_only: bool = False) -> float:
        """GPU stream time of the work launched in [lo, hi) (NCCL's kernels aside); with
        ``math_only``, of the work the math operators launched."""
        launches = self._gpu_launches
        within = self.gpu_work[bisect.bisect_left(launches, lo):bisect.bisect_left(launches, hi)]
        return sum(seconds for _, seconds, math in within if math or not math_only)

    @cached_property
    def _gpu_launches(self) -> list[float]:
        """When each of gpu_work's kernels was launched, in order (for bisecting a window)."""
        return [at for at, _, _ in self.gpu_work]

    def step_windows(self) -> list[tuple[float, float]]:
        """The training steps: the ProfilerSteps when each holds one GAN step (generator
        steps, in a row if several); else (prof.step() once per critic step with the generator
        every n-th, the usual WGAN loop; or once per epoch) from the end of one generator step
        to the end of the next, each a whole GAN step."""
        return self._windows

    @cached_property
    def _profiled(self) -> list[tuple[float, float]]:
        """The ProfilerSteps; without a schedule, the whole of the training thread's record."""
        if self.steps:
            return [(s["ts"], _end(s)) for s in self.steps]
        return [(self.on_main[0]["ts"], max(_end(e) for e in self.on_main))]

    @cached_property
    def _windows(self) -> list[tuple[float, float]]:
        own, optimizers = self._profiled, self._profiled_optimizers
        per_step = [[self._network_of(o) for o in opts] for opts in optimizers]
        told = any(net == "g" for nets in per_step for net in nets)  # where G steps is known
        if self.labelled or (not told and self.steps):
            return own
        if not told:  # no schedule: one network's optimizer steps each end a step, or nothing tells
            kinds = {self._parameter_shapes[id(o)] for o in optimizers[0]}
            if len(optimizers[0]) < 2 or len(kinds) != 1 or None in kinds:
                raise UserInputError(_NO_STEPS + ": without it, the steps are told by which network each optimizer "
                                     "step updates, which needs record_shapes=True and two whole steps",
                                     source=self.path, field="traceEvents")
            ends = [_end(o) for o in optimizers[0]]
            return list(zip(ends[:-1], ends[1:]))
        g_ends = [[_end(o) for o, net in zip(opts, nets) if net == "g"] for opts, nets in zip(optimizers, per_step)]
        if all(g_ends) and not any(map(_interleaved, per_step)):  # each ProfilerStep is one GAN step
            return own
        # what runs before the first generator step, and after the last, belongs to GAN steps
        # the profiler did not see whole
        ends = [end for step in g_ends for end in step]
        if len(ends) < 2:
            raise UserInputError(
                f"the generator's optimizer steps {len(ends)} time(s) in the {len(own)} profiled steps: the profile "
                "holds no whole GAN step (from the end of one generator step to the end of the next); profile more "
                "steps (schedule active=...)", source=self.path, field="traceEvents")
        return list(zip(ends[:-1], ends[1:]))

    @cached_property
    def _optimizer_networks(self) -> dict[int, str]:
        """d or g per optimizer step (by id), told apart by the parameters each updates (the
        tensor shapes its operators read, record_shapes' Input Dims): the generator's is the
        one whose backward passes read the other's weights (_backward_through); where they do
        not tell, the one that steps in only some ProfilerSteps while the other steps in all;
        where both step in every ProfilerStep, the one that steps last in most of them. Of more
        than two networks (a generator and two discriminators, as CycleGAN trains them), only
        the backward passes tell: G is the one whose backward reads the others' weights, every
        other network's step is a D step. Empty when the trace does not tell the networks apart
        (no shapes, one network, or more than two that the backward passes do not tell)."""
        per_step, shapes = self._profiled_optimizers, self._parameter_shapes
        kinds = set(shapes.values())
        if len(kinds) < 2 or None in kinds:
            return {}
        g = self._backward_through(kinds)
        if g is None and len(kinds) > 2:  # only the backward passes tell G among several discriminators
            return {}
        if g is None:
            first, second = sorted(kinds, key=lambda k: min(o["ts"] for opts in per_step for o in opts
                                                             if shapes[id(o)] == k))
            present = [{shapes[id(o)] for o in opts} for opts in per_step]
            in_all = [k for k in (first, second) if all(k in p for p in present)]
            counts = {k: sum(1 for v in shapes.values() if v == k) for k in (first, second)}
            if len(in_all) == 1:
                g = second if in_all[0] == first else first
            elif not self.steps and counts[first] != counts[second]:  # no schedule: D steps at least as often
                g = min((first, second), key=counts.__getitem__)
            else:
                last = [shapes[id(opts[-1])] for opts in per_step if opts]
                g = first if last.count(first) > last.count(second) else second
        # with several discriminators (CycleGAN's two), each of their steps is a D step
        return {key: "g" if kind == g else "d" for key, kind in shapes.items()}

    def _backward_through(self, kinds: set) -> Optional[frozenset]:
        """The generator's parameters, where the backward passes tell: the generator's loss is
        the discriminators' verdict on its output, so its backward runs through their layers
        and reads their weights (a convolution's or matrix product's gradient with respect to
        its input needs the weight, whether or not the weight wants a gradient itself), while a
        discriminator's backward stops at the generator's detached output. So the one network
        whose backward passes read most of another's own weights (the shapes of two or more
        dimensions only that one's optimizer updates) is G; None where the backward passes do
        not tell (no network or several read another's, a network has no weights of its own)."""
        shapes = self._parameter_shapes
        read: dict[frozenset, set] = {kind: set() for kind in kinds}
        in_backward = _Spans(e for e in self.host if _is_autograd(e))
        starts = self._host_starts
        for (lo, _), opts in zip(self._profiled, self._profiled_optimizers):
            for opt in opts:
                found = read[shapes[id(opt)]]
                for e in self.host[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, opt["ts"])]:
                    if e.get("cat") == "cpu_op" and not _is_autograd(e) and in_backward.holds(e.get("tid"), e["ts"]):
                        _tensor_shapes(e.get("args", {}).get("Input Dims"), found)
                lo = _end(opt)
        for found in read.values():  # a matrix product may read a weight transposed
            found |= {shape[::-1] for shape in found if len(shape) == 2}
        everyone_else = {kind: frozenset().union(*(k for k in kinds if k != kind)) for kind in kinds}
        weights = {kind: {shape for shape in kind - everyone_else[kind] if len(shape) >= 2} for kind in kinds}
        if not all(weights.values()):
            return None
        reads_another = [net for net in kinds
                         if any(len(weights[other] & read[net]) > 0.5 * len(weights[other])
                                for other in kinds if other != net)]
        return reads_another[0] if len(reads_another) == 1 else None

    @cached_property
    def _host_starts(self) -> list[float]:
        """The host events' start times, in their order (for bisecting a window)."""
        return [e["ts"] for e in self.host]

    @cached_property
    def _profiled_optimizers(self) -> list[list[dict]]:
        """The optimizer steps of each of the profiled windows (_profiled)."""
        return [self.optimizer_steps(lo, hi) for lo, hi in self._profiled]

    @cached_property
    def _parameter_shapes(self) -> dict[int, Optional[frozenset]]:
        """Per optimizer step (by id), the shapes of the tensors its operators read: its
        parameters' and their state's (None without record_shapes)."""
        starts = self._host_starts
        out: dict[int, Optional[frozenset]] = {}
        for opt in (o for opts in self._profiled_optimizers for o in opts):
            found: set = set()
            for e in self.host[bisect.bisect_left(starts, opt["ts"]):bisect.bisect_right(starts, _end(opt))]:
                if (e is not opt and e.get("cat") == "cpu_op" and e.get("tid") == opt.get("tid")
                        and _inside(e, opt["ts"], _end(opt))):
                    _tensor_shapes(e.get("args", {}).get("Input Dims"), found)
            out[id(opt)] = frozenset(found) or None
        return out

    def phase_windows(self, lo: float, hi: float) -> list[tuple[str, float, float]]:
        """(phase, start, end) of one step, in order."""
        if self.labelled:
            inside = [e for e in self.on_main if _inside(e, lo, hi)]
            return [(phase_name(e["name"]), e["ts"], _end(e)) for e in inside
                    if e.get("cat") == "user_annotation" and phase_name(e["name"])]
        return self._structure_regions(lo, hi)

    def optimizer_steps(self, lo: float, hi: float) -> list[dict]:
        """The step's optimizer steps at any depth (the outermost of nested ones)."""
        return _top_level([e for e in self.host if e["name"].startswith("Optimizer.step#") and _inside(e, lo, hi)])

    def _networks(self, optimizers: list[dict]) -> list[str]:
        """d or g per optimizer step: the innermost enclosing label the phase map names, else
        the network its parameters tell (_optimizer_networks), else its place (the last of a
        step is G's, the ones before D's; alone, a one-network training's, counted as G)."""
        return [self._network_of(opt) or ("g" if k == len(optimizers) - 1 else "d")
                for k, opt in enumerate(optimizers)]

    @property
    def networks_told(self) -> bool:
        """Whether the parameters of its optimizer steps tell the two networks apart."""
        return bool(self._optimizer_networks)

    def _network_of(self, opt: dict) -> Optional[str]:
        """d or g for one optimizer step where the phase map (its innermost enclosing label)
        or its parameters (_optimizer_networks) tell; None where neither does."""
        mapped = [e for e in self.user_labels if e["name"] in self.phase_map and e["ts"] <= opt["ts"]
                  and _end(opt) <= _end(e) + 1e-3]
        if mapped:
            return self.phase_map[min(mapped, key=lambda e: e["dur"])["name"]]
        return self._optimizer_networks.get(id(opt))

    def _structure_regions(self, lo: float, hi: float) -> list[tuple[str, float, float]]:
        optimizers = self.optimizer_steps(lo, hi)
        if not optimizers:
            raise UserInputError(
                f"the step at {lo:.0f} us has no optimizer step (no Optimizer.step#... event at any depth) and no "
                "phase labels: profile the training steps themselves, or label the phases with "
                "torch.profiler.record_function('d_forward') etc.", source=self.path, field="traceEvents")
        regions, start = [], lo
        inside = [e for e in self.host if _inside(e, lo, hi)]
        for net, opt in zip(self._networks(optimizers), optimizers):
            # the gradients' preparation after the backward (unscale, clipping) is the optimizer's
            end = max(start, backward_end(inside, start, opt["ts"]))
            backward = max(start, backward_start(inside, start, end))
            regions += [(f"{net}_forward_s", start, backward), (f"{net}_backward_s", backward, end),
                        (f"{net}_optimizer_s", end, _end(opt))]
            start = _end(opt)
        return regions

    def label_seconds(self, lo: float, hi: float) -> dict[str, tuple[int, float]]:
        """The user's own labels in [lo, hi]: (how many, seconds in all) per name."""
        out: dict[str, tuple[int, float]] = {}
        for e in self.user_labels:
            if _inside(e, lo, hi):
                n, s = out.get(e["name"], (0, 0.0))
                out[e["name"]] = (n + 1, s + e["dur"] * 1e-6)
        return out

    def collectives(self, lo: float, hi: float, windows: list[tuple[str, float, float]]) -> list[dict]:
        """The collectives issued in [lo, hi], each in the phase it was issued in. NCCL's
        record_param_comms (element count and dtype without record_shapes) when the trace has
        them, else the c10d operators (element count from record_shapes' Input Dims)."""
        out = []
        counts: dict[str, int] = {}
        occurrence_at = []
        for name, a, b in windows:
            counts[name] = counts.get(name, 0) + 1
            occurrence_at.append((name, a, b, counts[name]))
        param_comms = any(e["name"] == "record_param_comms" and "In msg nelems" in e.get("args", {})
                          for e in self.events)
        for e in self.events:
            if e.get("pid") != self.main[0] or not _inside(e, lo, hi):
                continue
            args = e.get("args", {})
            if e["name"] in _COLLECTIVE_OPS and not param_comms:
                op = _COLLECTIVE_OPS[e["name"]]
                n = _dims_elements(args.get("Input Dims", []))
                nbytes = n * _element_bytes(self.types.get((op, n), "float"))
            elif e["name"] == "record_param_comms" and "In msg nelems" in args:
                op = str(args.get("Collective name", "")).replace("_", "")
                if op not in ("allreduce", "broadcast"):
                    continue
                nbytes = _dims_elements([args["In msg nelems"]]) * _element_bytes(args.get("dtype", "float"))
            else:
                continue
            # windows meet end to end: one issued where a phase ends is the next one's (a
            # script's own all-reduce, the first operator after the backward, is the optimizer's)
            where = ([(name, occ) for name, a, b, occ in occurrence_at if a <= e["ts"] < b]
                     or [(name, occ) for name, a, b, occ in occurrence_at if a <= e["ts"] <= b])
            phase, occ = where[0] if where else ("", 0)
            out.append({"op": op, "phase": phase, "occurrence": occ, "owner": "", "bytes": nbytes})
        return out

    def allreduce_times(self) -> list[tuple[int, float]]:
        """(bytes, seconds) of each all-reduce in issue order: NCCL's kernels on the GPU (In
        msg nelems, dtype), else the backend's own events (gloo:all_reduce with Input Dims)."""
        out: list[tuple[int, float]] = []
        if self.nccl_kernels:
            for e in sorted(self.nccl_kernels, key=lambda e: e["ts"]):
                args = e.get("args", {})
                if "allreduce" in str(args.get("Collective name", "")).replace("_", "").lower():
                    n = _dims_elements([args.get("In msg nelems")])
                    if n:
                        out.append((n * _element_bytes(args.get("dtype", "float")), e["dur"] * 1e-6))
            return out
        for e in sorted(self.backend_events, key=lambda e: e["ts"]):
            if e["name"].endswith(("all_reduce", "allreduce")):
                args = e.get("args", {})
                n = _dims_elements(args.get("Input Dims", []))
                if n:
                    out.append((n * _element_bytes(_first_type(args)), e["dur"] * 1e-6))
        return out

    def batch_in(self, lo: float, hi: float) -> Optional[int]:
        """The per-rank batch a forward in [lo, hi] takes: the first dimension of the input of
        its first layer (the first linear or convolution operator); None without shapes."""
        for k in range(bisect.bisect_left(self._host_starts, lo), bisect.bisect_left(self._host_starts, hi)):
            e = self.host[k]
            if e["name"] in _BATCH_OPERATORS:
                dims = e.get("args", {}).get("Input Dims")
                first = dims[0] if isinstance(dims, list) and dims else None
                if (isinstance(first, list) and len(first) >= 2 and isinstance(first[0], int)
                        and not isinstance(first[0], bool) and first[0] >= 1):
                    return first[0]
                return None
        return None

    def events_in(self, lo: float, hi: float) -> int:
        return sum(1 for e in self.on_main if _inside(e, lo, hi))

    def costs_in(self, lo: float, hi: float) -> tuple[float, float]:
        # on GPU the backward's operators run on autograd's own thread
        ops = [e for e in (self.host if self.cuda else self.on_main) if _inside(e, lo, hi) and e.get("cat") == "cpu_op"]
        flops = sum(_op_flops(e) for e in ops)
        return flops, sum(_op_bytes(e) for e in _leaves(ops))

    def waiting(self, lo: float, hi: float) -> float:
        """Time (us) in [lo, hi] the training thread spent on communication, not compute: in
        the collectives' own calls (c10d::allreduce_ and what it runs), and running no event
        while a backend collective was in flight."""
        calls = _clip([(e["ts"], _end(e)) for e in self.on_main if e["name"] in _COLLECTIVE_OPS], lo, hi)
        in_flight = _clip([(e["ts"], _end(e)) for e in self.backend_events], lo, hi)
        # A label reaching the window's edge (the phase's own label, the user's critic_step
        # around it, an Optimizer.step# that is the window) encloses the waits as well as the
        # work: only what runs inside the window tells the thread was busy. So does a Python
        # frame (with_stack): loss.backward()'s frame spans DDP's wait for its buckets.
        busy = _clip([(e["ts"], _end(e)) for e in self.on_main if _end(e) > lo and e["ts"] < hi
                      and e.get("cat") != "python_function"
                      and not (e.get("cat") == "user_annotation" and (e["ts"] <= lo or _end(e) >= hi))], lo, hi)
        idle = _union_length(busy + in_flight) - _union_length(busy) if in_flight else 0.0
        return max(0.0, idle) + _union_length(calls)


def _device(data: dict, path: str) -> tuple[Optional[str], Optional[Datasheet]]:
    """The GPU's name and datasheet figures from deviceProperties (its first entry: the GPUs
    of one machine are of one kind); (None, None) without any."""
    props = data.get("deviceProperties")
    if props in (None, []):
        return None, None
    if not (isinstance(props, list) and isinstance(props[0], dict) and isinstance(props[0].get("name"), str)):
        raise UserInputError("expected a list of devices, each with a name", source=path, field="deviceProperties")
    return props[0]["name"].strip() or None, datasheet(props[0])


# ---------------------------------------------------------------------------- profile
def import_traces(paths: Sequence[str], *, overhead_s_per_event: Optional[float] = None,
                  log: Callable[[str], None] = lambda s: None, device_tflops: Optional[float] = None,
                  device_memory_bandwidth_GBps: Optional[float] = None,
                  phase_map: Optional[dict[str, str]] = None, batch_size: Optional[int] = None) -> Profile:
    """The profile of the traces of one or several runs (grouped by their world size).
    ``batch_size`` is the per-rank batch when the caller knows it; else the traces tell it
    (their forwards' first layers' inputs, with record_shapes), or nothing does."""
    ranks = [RankTrace(p, read_trace(p), phase_map) for p in paths]
    runs: dict[int, list[RankTrace]] = {}
    for r in ranks:
        run = runs.setdefault(r.world_size, [])
        if any(o.rank == r.rank for o in run):
            raise UserInputError(f"two traces of rank {r.rank} of world size {r.world_size}; allowed: one file per "
                                 "rank of each run (a schedule with repeat writes one per profiling cycle: give one "
                                 "cycle's, as the profiler's cost per event differs from cycle to cycle)",
                                 source=r.path, field="distributedInfo.rank")
        run.append(r)
    for r in ranks[:1]:
        counts = {len(r.optimizer_steps(lo, hi)) for lo, hi in r.step_windows()}
        if len(counts) > 1 and not (r.labelled or phase_map or r.networks_told):
            log(f"warning: {os.path.basename(r.path)}'s profiled steps hold {' or '.join(map(str, sorted(counts)))} "
                "optimizer steps and the trace cannot tell its networks apart (record_shapes=True shows which "
                "parameters each updates): each step's last optimizer step is taken as the generator's")
    for label in phase_map or {}:
        if not any(label == e["name"] for r in ranks for e in r.user_labels):
            raise UserInputError(f"no record_function label {label!r} in the traces; their labels: "
                                 f"{', '.join(sorted({e['name'] for r in ranks for e in r.user_labels})) or 'none'}",
                                 field="--phase-map")
    cuda = any(r.cuda for r in ranks)
    if cuda:  # GPU stream times: the profiler's cost on the host thread is not in them
        overhead_s_per_event = 0.0 if overhead_s_per_event is None else overhead_s_per_event
    probe = ""
    if not cuda and overhead_s_per_event is None:
        first = min(min(runs.items())[1], key=lambda r: r.rank)  # the smallest run's first rank
        lo, hi = first.step_windows()[0]
        layers = probe_layers(e for e in first.on_main if _inside(e, lo, hi) and e.get("cat") == "cpu_op")
        overhead_s_per_event = measure_profiler_overhead(**first.options, layers=layers)
        probe = (f" (measured here on a probe of the trace's {len(layers)} layer shapes, first profiling session)"
                 if layers != DEFAULT_LAYERS else " (measured here on a small probe: the trace records no layer shapes)")
    notes = [f"profiler overhead removed: {overhead_s_per_event * 1e6:.2f} us per recorded event" + probe
             + (" (from the host's step times; the phases are GPU stream times)" if cuda else "")]
    try:  # the notes and warnings are printed once the profile is whole: a failure is one line
        profile = _profile_from(runs, overhead_s_per_event, notes.append, device_tflops, device_memory_bandwidth_GBps,
                                batch_size)
    except ValidationError as err:  # a figure beyond what a profile takes (a phase of days, 10^30 FLOPs)
        problem = validation_error(err, ranks[0].path)
        raise UserInputError(f"the traces make no valid profile: {problem.field}: {problem.message}",
                             source=ranks[0].path, field="traceEvents") from None
    for note in notes:
        log(note)
    return profile


class _Run:
    """One run's figures: every rank's per-step phases (and without the waits for a
    collective: compute), rank 0's raw phases, recorded events, costs, collectives."""

    def __init__(self, ranks: list[RankTrace], overhead_s_per_event: float):
        self.ranks = sorted(ranks, key=lambda r: r.rank)
        self.first = self.ranks[0]
        self.world = self.first.world_size
        self.samples: list[dict] = []
        self.compute_samples: list[dict] = []
        self.raw: dict[str, float] = {}
        self.events_per_step: dict[str, float] = {}
        self.costs: dict[str, list[float]] = {}
        self.collectives: list[dict] = []
        self.d_counts: list[int] = []
        self.labels: dict[str, list[float]] = {}
        self.batches: list[int] = []  # the batch each forward of the first rank took, where its shapes tell
        for r in self.ranks:
            self._add_rank(r, overhead_s_per_event)
        self.n_steps = len(self.first.step_windows())
        self.raw = {k: v / self.n_steps for k, v in self.raw.items()}
        self.events_per_step = {k: v / self.n_steps for k, v in self.events_per_step.items()}
        self.means = phase_means(self.samples)
        self.compute_means = phase_means(self.compute_samples)
        self.records = summarize(self.collectives, self.n_steps)

    def _add_rank(self, r: RankTrace, overhead_s_per_event: float) -> None:
        phases: dict[str, list[float]] = {}
        compute: dict[str, list[float]] = {}
        first = r is self.first
        for lo, hi in r.step_windows():
            windows = r.phase_windows(lo, hi)
            if not windows:
                raise UserInputError(f"a step without phases (at {lo:.0f} us)", source=r.path, field="traceEvents")
            d_count = sum(1 for name, _, _ in windows if name == "d_forward_s")
            self.d_counts.append(d_count)
            k = max(1, d_count)
            rec = dict.fromkeys((p for p in PHASES if "allreduce" not in p), 0.0)
            rec_compute = dict(rec)
            for name, a, b in windows:
                seconds = (b - a) * 1e-6
                n_events = r.events_in(a, b)
                share = 1 / k if name.startswith("d_") else 1.0
                if r.cuda:  # what the GPU ran of what this phase launched: no host wait, no profiler cost
                    corrected = waited = r.gpu_seconds(a, b)
                else:
                    corrected = max(0.0, seconds - n_events * overhead_s_per_event)
                    waited = max(0.0, corrected - r.waiting(a, b) * 1e-6)
                rec[name] = rec.get(name, 0.0) + corrected * share
                rec_compute[name] = rec_compute.get(name, 0.0) + waited * share
                if first:
                    batch = r.batch_in(a, b) if name.endswith("_forward_s") else None
                    if batch is not None:
                        self.batches.append(batch)
                    self.raw[name] = self.raw.get(name, 0.0) + seconds * share
                    self.events_per_step[name] = self.events_per_step.get(name, 0.0) + n_events * share
                    flops, nbytes = r.costs_in(a, b)
                    c = self.costs.setdefault(name, [0.0, 0.0, 0.0, 0.0])
                    c[0] += flops * share
                    c[1] += nbytes * share
                    if r.cuda:  # the GPU time of the phase's kernels, and of its math operators' kernels
                        c[2] += corrected * share
                        c[3] += r.gpu_seconds(a, b, math_only=True) * share
            step = max(0.0, (hi - lo) * 1e-6 - r.events_in(lo, hi) * overhead_s_per_event)
            labelled = sum(v * (k if n.startswith("d_") else 1) for n, v in rec.items())
            for target in (rec, rec_compute):
                target[UNLABELLED] = max(0.0, step - labelled)
                target["data_s"] += target[UNLABELLED]
                target[STEP] = step
            for name in rec:
                phases.setdefault(name, []).append(rec[name])
                compute.setdefault(name, []).append(rec_compute[name])
            if first:
                self.collectives += r.collectives(lo, hi, windows)
                for name, (n, seconds) in r.label_seconds(lo, hi).items():
                    total = self.labels.setdefault(name, [0.0, 0.0])
                    total[0] += n
                    total[1] += seconds
        self.samples.append({"rank": r.rank, "phases": phases})
        self.compute_samples.append({"rank": r.rank, "phases": compute})

    def allreduce_points(self) -> list[AllreducePoint]:
        """(size, mean time) of the run's all-reduces. A rank's all-reduce lasts from its own
        call until the last rank has joined and the data has moved: the rank that joined last
        waited for nobody, so each all-reduce's time is the shortest of its ranks' (the k-th
        of every rank, when they issued the same sizes in the same order; with one rank's
        trace, its own times, waits included)."""
        if self.world < 2:
            return []
        issued = [r.allreduce_times() for r in self.ranks]
        same = all([n for n, _ in times] == [n for n, _ in issued[0]] for times in issued)
        if not same:
            issued = issued[:1]
        by_size: dict[int, list[float]] = {}
        for calls in zip(*issued):
            by_size.setdefault(calls[0][0], []).append(min(seconds for _, seconds in calls))
        return [AllreducePoint(world_size=self.world, bytes=n, time_s=statistics.fmean(t), iters=len(t), samples_s=t)
                for n, t in sorted(by_size.items())]

    def describe(self, log: Callable[[str], None]) -> None:
        log(f"world size {self.world}: {len(self.ranks)} trace(s), {self.n_steps} steps a rank: step "
            f"{self.means[STEP] * 1e3:.2f} ms after removing the profiler's overhead (rank {self.first.rank}'s phases: "
            f"{sum(self.raw.values()) * 1e3:.2f} ms raw, {sum(self.events_per_step.values()):.0f} events a step)")
        if self.labels:  # the user's own labels, by their own names
            log(f"  your labels a step (rank {self.first.rank}): " + ", ".join(
                f"{name} {n / self.n_steps:g} x {seconds / n * 1e3:.2f} ms" for name, (n, seconds) in self.labels.items()))
        log("  phases a step: " + ", ".join(f"{name} {self.means[name] * 1e3:.2f} ms" for name in COMPUTE_PHASES
                                            if self.means.get(name)))
        idle = self.means.get(UNLABELLED, 0.0)
        if self.first.cuda and idle > 0.25 * self.means[STEP]:
            log(f"  the GPU ran nothing of the phases for {idle * 1e3:.2f} ms of the {self.means[STEP] * 1e3:.2f} ms "
                "step: the host's own time (its launches, Python, the input), counted in data_s, which the GPU "
                "phases do not overlap")


def _profile_from(runs: dict[int, list[RankTrace]], overhead_s_per_event: float, log: Callable[[str], None],
                  device_tflops: Optional[float], device_memory_bandwidth_GBps: Optional[float],
                  batch_size: Optional[int] = None) -> Profile:
    """The profile of the traces of one or several runs, fitted as ``--script`` is
    (:func:`gansim.calibration.fit.measurements.fit_from_measurements`): compute from the smallest run,
    communication and core sharing from the larger ones."""
    figures = [_Run(ranks, overhead_s_per_event) for _, ranks in sorted(runs.items())]
    smallest, largest = figures[0], figures[-1]
    for run in figures:
        _warn_step_spread(run.ranks, log)
        run.describe(log)
    measured = Measured(
        step_time_s={str(r.world): r.means[STEP] for r in figures},
        repeat_step_time_s={str(r.world): [r.means[STEP]] for r in figures},
        samples={str(r.world): r.samples for r in figures},
        phases={str(r.world): r.means for r in figures},
        collectives={str(r.world): r.records for r in figures},
        # a run of one rank has nobody to wait for: its phases are its compute
        compute_only={str(r.world): r.compute_means if r.world > 1 else r.means for r in figures},
        compute_samples={str(r.world): [RankSamples(**s) for s in (r.compute_samples if r.world > 1 else r.samples)]
                         for r in figures},
        allreduce=[p for r in figures for p in r.allreduce_points()],
        phase_costs={name: PhaseCost(flops=f / smallest.n_steps, bytes=b / smallest.n_steps,
                                     math_share=min(1.0, math / gpu) if gpu > 0 else None)
                     for name, (f, b, gpu, math) in smallest.costs.items() if f > 0 or b > 0 or gpu > 0},
        profiler=ProfilerCorrection(overhead_s_per_event=overhead_s_per_event, events_per_step=smallest.events_per_step,
                                    raw_phases=smallest.raw, resolution_s=1e-9),  # Kineto: us with three decimals
    )
    d_counts = [k for r in figures for k in r.d_counts]
    one_network = max(d_counts) == 0
    buckets = gradient_buckets(largest.records)
    if one_network and buckets["generator"]:
        # the profile's shape is a GAN's: a one-network training is its G step, and its D a
        # single float32 (the smallest all-reduce a profile takes: one latency a step)
        buckets["discriminator"] = [4]
        log("one optimizer step a training step: calibrated as a one-network training (its phases are the g_* "
            "ones; d_* are 0)")
    if largest.world > 1 and not (buckets["discriminator"] and buckets["generator"]):
        log("warning: no gradient all-reduce found in the d_* and g_* phases (record with record_shapes=True)")
    grad = {net: sum(b) for net, b in buckets.items()}
    fit_buckets = buckets if all(grad.values()) else None
    if fit_buckets is None:
        grad = {"discriminator": 4, "generator": 4}
    fit_input = measured
    if "1" not in measured.compute_only:  # no run of one rank: the smallest run's compute, its sharing unknown
        log(f"warning: no trace of world size 1: the compute figures are world size {smallest.world}'s (its ranks "
            "shared the machine) and core sharing is not known; give a world-size-1 trace as well")
        fit_input = measured.model_copy(update={"compute_only": {"1": measured.compute_only[str(smallest.world)]}})
    if largest.world == 1:
        log("warning: only traces of one rank: nothing tells the all-reduce's cost, alpha = beta = 0, and the profile "
            "predicts other world sizes without communication; give the traces of a run of 2 or more ranks too")
    elif not measured.allreduce:
        log("warning: no all-reduce with its size in the traces of world size > 1 (record with record_shapes=True):"
            " alpha = beta = 0, the profile predicts other world sizes without communication")
    fit = fit_from_measurements(fit_input, grad, buffer_bytes(largest.records))
    fit["gradient_buckets"] = fit_buckets
    first = smallest.first
    sheet = first.datasheet
    if first.cuda and sheet is not None and device_tflops is None and device_memory_bandwidth_GBps is None:
        device_tflops, device_memory_bandwidth_GBps = sheet.tflops, sheet.memory_bandwidth_GBps
        log(f"device {first.device}: {sheet.model}, {sheet.tflops:g} TFLOP/s FP32, {sheet.memory_bandwidth_GBps:g} "
            "GB/s (datasheet)")
    if first.cuda:
        gpu = sum(c[2] for c in smallest.costs.values())
        math = sum(c[3] for c in smallest.costs.values())
        if gpu > 0:
            log(f"kernels of matrix products and convolutions: {math / gpu:.0%} of the phases' GPU time (the roofline "
                "moves them at the ratio of peak FLOP/s, the rest at the ratio of memory bandwidths)")
        tensor_cores = first.tensor_core_seconds / max(1e-12, sum(s for _, s, m in first.gpu_work if m))
        if tensor_cores > 0.1:
            log(f"warning: {tensor_cores:.0%} of the math kernels' time ran on tensor cores (TF32, FP16 or BF16, by "
                "their names), while the roofline's peaks are FP32 (tflops): moved to another GPU, they are scaled "
                "by the FP32 ratio")
    else:
        log(f"the traces' host is taken to have {os.cpu_count() or 1} cores, as this one has (a trace does not "
            "record its host's cores): predicted ranks beyond them share cores")
    batch, batch_known = _batch(smallest.batches, batch_size, log)
    provenance = Provenance(
        host=str(os.path.basename(first.path)), device=(first.device or "cuda") if first.cuda else "cpu",
        backend=first.backend, torch="", date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        model=f"trace:{os.path.basename(first.path)}", batch_size=batch, batch_known=batch_known, cores=max(1, os.cpu_count() or 1),
        mode=_sync_mode(largest.records, fit_buckets), threads=0, gansim_version=__version__, python=platform.python_version(),
        steps=smallest.n_steps, warmup=0, d_steps=max(1, statistics.mode(d_counts)),
        world_sizes=[r.world for r in figures], launcher="trace", source="trace", device_tflops=device_tflops,
        device_memory_bandwidth_GBps=device_memory_bandwidth_GBps)
    return Profile.model_validate({"schema": 1, "provenance": provenance.model_dump(),
                                   "measured": measured.model_dump(), "fit": fit})


def _batch(found: list[int], given: Optional[int], log: Callable[[str], None]) -> tuple[int, bool]:
    """(per-rank batch, whether it is known): the caller's, else the one most of the traced
    forwards took."""
    traced = collections.Counter(found).most_common(1)[0][0] if found else None
    if given is not None:
        if traced is not None and traced != given:
            log(f"warning: --batch-size {given}, while the traced forwards' first layers took batches of {traced}: "
                f"{given} is kept")
        return given, True
    if traced is None:
        log("warning: the traces do not tell the per-rank batch (no input shapes: record_shapes=True shows them); "
            "give --batch-size to predict other batch sizes from this profile")
        return 1, False
    log(f"per-rank batch {traced} (the input of the traced forwards' first layers)")
    return traced, True


def _sync_mode(records: Sequence[CollectiveRecord], buckets: Optional[dict]) -> str:
    """``ddp`` when the gradients' all-reduces start during the backward (DDP's buckets, as
    their gradients are ready), ``flat`` when they all start after it (a script that
    all-reduces its gradients itself before the optimizer step, as StyleGAN2-ADA does: nothing
    overlaps the backward, and no buffers are broadcast)."""
    if buckets is None:
        return "flat"
    overlapped = any(r.op == "allreduce" and r.phase.endswith("_backward_s") for r in records)
    return "ddp" if overlapped else "flat"


def _warn_step_spread(ranks: list[RankTrace], log: Callable[[str], None], tolerance: float = 1.25) -> None:
    """Profiled steps that differ more than the profiler's own cost can explain (a busy
    machine, a first recorded step slower than the next) make the profile's mean uncertain:
    say so, with the steps."""
    for r in ranks:
        steps = [(hi - lo) * 1e-3 for lo, hi in r.step_windows()]
        if len(steps) > 1 and max(steps) > tolerance * min(steps):
            log(f"warning: rank {r.rank}'s {len(steps)} profiled steps range from {min(steps):.2f} to {max(steps):.2f} ms "
                f"(x{max(steps) / min(steps):.2f}): the profile's mean is uncertain by more than the profiler's own "
                "cost; profile more steps (schedule active=5 or more) on a quiet machine")
