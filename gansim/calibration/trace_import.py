"""``gansim calibrate --from-trace``: a profile from torch.profiler Chrome traces (Kineto's
JSON, one file per rank of one run, ``.json`` or ``.json.gz``). No torch import, except to
measure the profiler's own cost when the caller does not give it.

What is read (names as PyTorch 2.x's Kineto exporter writes them):

- ``distributedInfo.world_size`` (absent: a run of one rank) and ``.rank``;
- steps: ``ProfilerStep#N`` events (a profiler ``schedule`` and ``prof.step()``); the thread
  that has them is the training thread;
- phases: ``record_function`` labels named like the calibrator's phases (``d_forward``,
  ``d_backward``, ... with or without ``_s``), summed per step; without them, the autograd
  regions: each ``Optimizer.step#...`` closes a network step, whose backward is the trailing
  run of ``autograd::engine::evaluate_function`` events (with ``Optimizer.zero_grad``, the
  gradient seed and DDP's bucket copies) before it and whose forward is the rest since the
  previous network step; the last network step of
  a ProfilerStep is G's, the ones before it D's;
- communication: ``c10d::allreduce_`` / ``c10d::broadcast_`` operators (the phase they were
  issued in, their element count from ``Input Dims``, which needs ``record_shapes=True``),
  their dtype from the backend's own ``gloo:*`` / ``nccl:*`` events, and
  ``record_param_comms`` events (``In msg nelems``, ``dtype``: NCCL's, on GPU); the backend
  events' durations give the all-reduce time per size (the fit's alpha and beta);
- per-phase FLOPs (``flops``, with ``with_flops=True``) and bytes (``Input Dims`` and types)
  for the roofline.

The profiler's overhead: every recorded event costs the traced program's thread time (the
RecordFunction callbacks run on it). Each phase loses (events recorded in it) x (the cost of
one event), the thread CPU time the profiler adds to a loop of small training steps here
with the trace's own options (``record_shapes``, ``with_flops``; see
:func:`measure_profiler_overhead`), or given with ``--profiler-overhead-us``. A trace whose
profiled steps differ by more than that can explain is reported.

With several ranks, a phase's time waiting for a collective (the training thread idle
while a backend collective is in flight) is not compute: the profile's compute figures
(``fit.compute``) leave it out, and the simulator adds the communication back.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import math
import os
import platform
import statistics
import zlib
from typing import Any, Callable, Optional, Sequence

from pydantic import ValidationError

from gansim.calibration.communication import buffer_bytes, gradient_buckets, summarize
from gansim.calibration.fit import fit_alpha_beta, phase_means
from gansim.calibration.instrument import phase_name
from gansim.calibration.phases import COMPUTE_PHASES, PHASES, STEP
from gansim.calibration.profile import (
    AllreducePoint,
    Measured,
    PhaseCost,
    Profile,
    ProfilerCorrection,
    Provenance,
    RankSamples,
)
from gansim.collectives.closed_forms import ring_time
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
_KINETO_KEYS = ("schemaVersion", "traceName", "baseTimeNanoseconds", "deviceProperties", "distributedInfo")
# an event's start may be any microsecond timestamp (Kineto's count from the epoch, ~1.7e15);
# its duration at most MAX_SECONDS, as every duration gansim takes
MAX_TS_US, MAX_DUR_US = 1e18, MAX_SECONDS * 1e6


# ---------------------------------------------------------------------------- reading
def read_trace(path: str) -> dict:
    """The trace's JSON, checked to be a torch.profiler (Kineto) Chrome trace with steps,
    whose complete events (the ones read) have a name, finite times and mapping args."""
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
    if not any(isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#") for e in events):
        raise UserInputError("no ProfilerStep#N events: profile with a torch.profiler schedule and call "
                             "prof.step() once per training step", source=path, field="traceEvents")
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
class RankTrace:
    """One rank's steps, phases, collectives and costs from its trace."""

    def __init__(self, path: str, data: dict):
        self.path = path
        self.world_size, self.rank, self.backend = _distributed(data, path)
        self.options = {"record_shapes": bool(data.get("record_shapes")), "with_flops": bool(data.get("with_flops"))}
        events = _complete_events(data)
        steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
        if not steps:
            raise UserInputError("no complete ProfilerStep#N events", source=path, field="traceEvents")
        self.main = (steps[0].get("pid"), steps[0].get("tid"))
        self.steps = steps
        self.events = events
        on_main = [e for e in events if (e.get("pid"), e.get("tid")) == self.main and not e["name"].startswith("ProfilerStep#")]
        self.on_main = sorted(on_main, key=lambda e: e["ts"])
        self.labelled = any(phase_name(e["name"]) for e in self.on_main if e.get("cat") == "user_annotation")
        # the backend's own collective events (their thread does the work): type and time
        self.backend_events = [e for e in events if str(e.get("name", "")).startswith(("gloo:", "nccl:"))]
        self.types = {}
        for e in self.backend_events:
            args = e.get("args", {})
            key = (e["name"].split(":", 1)[1].replace("_", ""), _dims_elements(args.get("Input Dims", [])))
            self.types.setdefault(key, _first_type(args))

    def step_windows(self) -> list[tuple[float, float]]:
        return [(s["ts"], _end(s)) for s in self.steps]

    def phase_windows(self, lo: float, hi: float) -> list[tuple[str, float, float]]:
        """(phase, start, end) of one step, in order."""
        inside = [e for e in self.on_main if _inside(e, lo, hi)]
        if self.labelled:
            return [(phase_name(e["name"]), e["ts"], _end(e)) for e in inside
                    if e.get("cat") == "user_annotation" and phase_name(e["name"])]
        return self._autograd_regions(inside, lo, hi)

    def _autograd_regions(self, inside: list[dict], lo: float, hi: float) -> list[tuple[str, float, float]]:
        top = _top_level(inside)
        optimizers = [e for e in top if e["name"].startswith("Optimizer.step#")]
        if len(optimizers) < 2:
            raise UserInputError(
                f"step at {lo:.0f} us has {len(optimizers)} optimizer step(s) and no phase labels: a GAN step has a D "
                "and a G optimizer step; label the phases with torch.profiler.record_function('d_forward') etc.",
                source=self.path, field="traceEvents")
        regions, start = [], lo
        for k, opt in enumerate(optimizers):
            net = "g" if k == len(optimizers) - 1 else "d"
            before = [e for e in top if e["ts"] >= start and _end(e) <= opt["ts"] + 1e-3]
            tail = []
            for e in reversed(before):
                if e["name"].startswith(_BACKWARD_TAIL):
                    tail.append(e)
                else:
                    break
            backward_start = min((e["ts"] for e in tail), default=opt["ts"])
            regions += [(f"{net}_forward_s", start, backward_start), (f"{net}_backward_s", backward_start, opt["ts"]),
                        (f"{net}_optimizer_s", opt["ts"], _end(opt))]
            start = _end(opt)
        return regions

    def collectives(self, lo: float, hi: float, windows: list[tuple[str, float, float]]) -> list[dict]:
        out = []
        counts: dict[str, int] = {}
        occurrence_at = []
        for name, a, b in windows:
            counts[name] = counts.get(name, 0) + 1
            occurrence_at.append((name, a, b, counts[name]))
        for e in self.events:
            if e.get("pid") != self.main[0] or not _inside(e, lo, hi):
                continue
            args = e.get("args", {})
            if e["name"] in _COLLECTIVE_OPS:
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
            where = [(name, occ) for name, a, b, occ in occurrence_at if a <= e["ts"] <= b]
            phase, occ = where[0] if where else ("", 0)
            out.append({"op": op, "phase": phase, "occurrence": occ, "owner": "", "bytes": nbytes})
        return out

    def events_in(self, lo: float, hi: float) -> int:
        return sum(1 for e in self.on_main if _inside(e, lo, hi))

    def costs_in(self, lo: float, hi: float) -> tuple[float, float]:
        ops = [e for e in self.on_main if _inside(e, lo, hi) and e.get("cat") == "cpu_op"]
        flops = sum(_op_flops(e) for e in ops)
        leaves = [e for e in ops if not any(o is not e and _inside(o, e["ts"], _end(e)) for o in ops)] \
            if len(ops) < 5000 else ops
        return flops, sum(_op_bytes(e) for e in leaves)

    def waiting(self, lo: float, hi: float) -> float:
        """Time (us) in [lo, hi] the training thread ran no event while a backend collective
        was in flight: waiting for communication, not compute."""
        comm = _clip([(e["ts"], _end(e)) for e in self.backend_events], lo, hi)
        if not comm:
            return 0.0
        busy = _clip([(e["ts"], _end(e)) for e in self.on_main if _end(e) > lo and e["ts"] < hi], lo, hi)
        return max(0.0, _union_length(busy + comm) - _union_length(busy))


# ---------------------------------------------------------------------------- overhead
def measure_profiler_overhead(record_shapes: bool, with_flops: bool, iterations: int = 40, rounds: int = 7) -> float:
    """Seconds of the training thread's CPU time the CPU profiler adds per recorded event on
    this machine: training steps of a small MLP (forward, backward, Adam: the operators a
    training trace records) with and without it, the difference in the thread's CPU time
    (``time.thread_time``) over the events recorded, median of ``rounds``.

    Why CPU time: the profiler's cost is work its RecordFunction callbacks do on the thread
    that runs the operators (time stamps, the inputs' shapes and types with record_shapes,
    a copy of matrix products' arguments with with_flops); nothing is added to Python calls
    (no Python tracer without with_stack), and a record_function label costs what an
    operator does. Wall time would add whatever else this machine runs at import time (on a
    busy 2-core VM, three runs of 7 rounds gave wall-clock medians of 1.5 to 2.3 us an event,
    single rounds -10.8 to 7.1; CPU-time medians 1.50 to 1.58, single rounds 0.3 to 5.2)."""
    import time

    import torch  # lazily: reading a trace needs no torch, measuring the profiler does
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 16)

    def loop() -> float:
        t = time.thread_time()
        for _ in range(iterations):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        return time.thread_time() - t

    loop()
    costs = []
    for _ in range(rounds):
        plain = loop()
        with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes, with_flops=with_flops) as prof:
            profiled = loop()
        costs.append((profiled - plain) / max(1, len(prof.events())))
    return max(0.0, statistics.median(costs))


# ---------------------------------------------------------------------------- profile
def import_traces(paths: Sequence[str], *, overhead_s_per_event: Optional[float] = None,
                  log: Callable[[str], None] = lambda s: None, device_tflops: Optional[float] = None,
                  device_memory_bandwidth_GBps: Optional[float] = None) -> Profile:
    ranks = [RankTrace(p, read_trace(p)) for p in paths]
    world = ranks[0].world_size
    for r in ranks:
        if r.world_size != world:
            raise UserInputError(f"world size {r.world_size}, but {ranks[0].path} has {world}; allowed: the "
                                 "traces of one run", source=r.path, field="distributedInfo.world_size")
    seen = [r.rank for r in ranks]
    if len(set(seen)) != len(seen):
        raise UserInputError(f"two traces of rank {seen[0]}; allowed: one file per rank", source=ranks[-1].path,
                             field="distributedInfo.rank")
    if overhead_s_per_event is None:
        overhead_s_per_event = measure_profiler_overhead(**ranks[0].options)
    notes = [f"profiler overhead removed: {overhead_s_per_event * 1e6:.2f} us per recorded event"]
    try:  # the notes and warnings are printed once the profile is whole: a failure is one line
        profile = _profile_from(ranks, overhead_s_per_event, notes.append, device_tflops, device_memory_bandwidth_GBps)
    except ValidationError as err:  # a figure beyond what a profile takes (a phase of days, 10^30 FLOPs)
        problem = validation_error(err, ranks[0].path)
        raise UserInputError(f"the traces make no valid profile: {problem.field}: {problem.message}",
                             source=ranks[0].path, field="traceEvents") from None
    for note in notes:
        log(note)
    return profile


def _profile_from(ranks: list[RankTrace], overhead_s_per_event: float, log: Callable[[str], None],
                  device_tflops: Optional[float], device_memory_bandwidth_GBps: Optional[float]) -> Profile:
    """The profile of one run's rank traces, with the profiler's overhead removed."""
    world = ranks[0].world_size
    samples, compute_samples, events_per_step, raw = [], [], {}, {}
    costs: dict[str, list[float]] = {}
    collectives: list[dict] = []
    d_counts: list[int] = []
    resolution = 1e-9  # Kineto writes microseconds with three decimals
    for r in sorted(ranks, key=lambda r: r.rank):
        phases: dict[str, list[float]] = {}
        compute: dict[str, list[float]] = {}
        for lo, hi in r.step_windows():
            windows = r.phase_windows(lo, hi)
            if not windows:
                raise UserInputError(f"a step without phases (at {lo:.0f} us)", source=r.path, field="traceEvents")
            k = max(1, sum(1 for name, _, _ in windows if name == "d_forward_s"))
            d_counts.append(k)
            rec = dict.fromkeys((p for p in PHASES if "allreduce" not in p), 0.0)
            rec_compute = dict(rec)
            for name, a, b in windows:
                seconds = (b - a) * 1e-6
                n_events = r.events_in(a, b)
                corrected = max(0.0, seconds - n_events * overhead_s_per_event)
                share = 1 / k if name.startswith("d_") else 1.0
                rec[name] = rec.get(name, 0.0) + corrected * share
                rec_compute[name] = rec_compute.get(name, 0.0) + max(0.0, corrected - r.waiting(a, b) * 1e-6) * share
                if r.rank == ranks[0].rank:
                    raw[name] = raw.get(name, 0.0) + seconds * share
                    events_per_step[name] = events_per_step.get(name, 0.0) + n_events * share
                    flops, nbytes = r.costs_in(a, b)
                    c = costs.setdefault(name, [0.0, 0.0])
                    c[0] += flops * share
                    c[1] += nbytes * share
            step_events = r.events_in(lo, hi)
            step = max(0.0, (hi - lo) * 1e-6 - step_events * overhead_s_per_event)
            labelled = sum(v * (k if n.startswith("d_") else 1) for n, v in rec.items())
            for target in (rec, rec_compute):
                target[UNLABELLED] = max(0.0, step - labelled)
                target["data_s"] += target[UNLABELLED]
                target[STEP] = step
            for name in rec:
                phases.setdefault(name, []).append(rec[name])
                compute.setdefault(name, []).append(rec_compute[name])
            if r.rank == ranks[0].rank:
                for c in r.collectives(lo, hi, windows):
                    collectives.append(c)
        samples.append({"rank": r.rank, "phases": phases})
        compute_samples.append({"rank": r.rank, "phases": compute})
    n_steps = len(ranks[0].steps)
    _warn_step_spread(ranks, log)
    raw = {k: v / n_steps for k, v in raw.items()}
    events_per_step = {k: v / n_steps for k, v in events_per_step.items()}
    means = phase_means(samples)
    compute_means = phase_means(compute_samples)
    records = summarize(collectives, n_steps)
    key = str(world)
    measured = Measured(
        step_time_s={key: means[STEP]}, repeat_step_time_s={key: [means[STEP]]}, samples={key: samples},
        phases={key: means}, collectives={key: records},
        phase_costs={name: PhaseCost(flops=f / n_steps, bytes=b / n_steps) for name, (f, b) in costs.items()
                     if f > 0 or b > 0},
        profiler=ProfilerCorrection(overhead_s_per_event=overhead_s_per_event, events_per_step=events_per_step,
                                    raw_phases=raw, resolution_s=resolution),
    )
    if world > 1:
        measured = measured.model_copy(update={"compute_only": {key: compute_means}})
        measured.compute_samples = {key: [RankSamples(**r) for r in compute_samples]}
    alpha, beta = _fit_from_trace(ranks, world, measured, log)
    buckets = gradient_buckets(records)
    if world > 1 and not (buckets["discriminator"] and buckets["generator"]):
        log("warning: no gradient all-reduce found in the d_* and g_* phases (record with record_shapes=True)")
    grad = {net: sum(b) for net, b in buckets.items()}
    if not all(grad.values()):
        grad = {"discriminator": 4, "generator": 4}
        buckets = None
    first = ranks[0]
    provenance = Provenance(
        host=str(os.path.basename(first.path)), device="cpu" if not any(e.get("cat") == "kernel" for e in first.events)
        else "cuda", backend=first.backend, torch="", date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        model=f"trace:{os.path.basename(first.path)}", batch_size=1, cores=max(1, os.cpu_count() or 1),
        mode="ddp" if buckets else "flat", threads=0, gansim_version=__version__, python=platform.python_version(),
        steps=n_steps, warmup=0, d_steps=statistics.mode(d_counts), world_sizes=[world], launcher="trace",
        source="trace", device_tflops=device_tflops, device_memory_bandwidth_GBps=device_memory_bandwidth_GBps)
    compute_fit = compute_means if world > 1 else means
    fit = {
        "alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": 0.0,
        "compute": {k: compute_fit[k] for k in (*COMPUTE_PHASES, STEP) if k in compute_fit},
        "core_sharing": {}, "compute_cv": 0.0, "gradient_bytes": grad,
        "buffer_bytes": buffer_bytes(records), "gradient_buckets": buckets,
    }
    log(f"{len(ranks)} trace(s), world size {world}, {n_steps} steps a rank: step {means[STEP] * 1e3:.2f} ms after "
        f"removing the profiler's overhead (rank {first.rank}'s phases: {sum(raw.values()) * 1e3:.2f} ms raw, "
        f"{sum(events_per_step.values()):.0f} events a step)")
    return Profile.model_validate({"schema": 1, "provenance": provenance.model_dump(),
                                   "measured": measured.model_dump(), "fit": fit})


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


def _fit_from_trace(ranks: list[RankTrace], world: int, measured: Measured, log) -> tuple[float, float]:
    """alpha and beta from the backend's all-reduce events (size, mean duration)."""
    if world < 2:
        log("warning: a trace of one rank has no communication: the profile predicts other world sizes "
            "without any (alpha = beta = 0)")
        return 0.0, 0.0
    by_size: dict[int, list[float]] = {}
    for r in ranks:
        for e in r.backend_events:
            if e["name"].endswith(("all_reduce", "allreduce")):
                args = e.get("args", {})
                n = _dims_elements(args.get("Input Dims", []))
                if n:
                    nbytes = n * _element_bytes(_first_type(args))
                    by_size.setdefault(nbytes, []).append(e["dur"] * 1e-6)
    points = [AllreducePoint(world_size=world, bytes=n, time_s=statistics.fmean(t), iters=len(t), samples_s=t)
              for n, t in sorted(by_size.items())]
    measured.allreduce = points
    if len(points) >= 2:
        alpha, beta, _ = fit_alpha_beta(points, 0.0)
        return alpha, beta
    if len(points) == 1:  # one size: its time as bandwidth alone
        p = points[0]
        return 0.0, p.time_s / ring_time(world, p.bytes, 0.0, 1.0, 0.0)
    log("warning: no all-reduce events with sizes in the traces (record_shapes=True): alpha = beta = 0")
    return 0.0, 0.0
