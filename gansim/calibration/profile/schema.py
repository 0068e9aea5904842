"""profile.json: the calibration profile (schema 1), as docs/formats.md documents it.

No torch import: ``gansim predict`` / ``validate`` read profiles on installs without torch.

Layout (world-size keys are strings, "1", "2", ...; every time is in seconds)::

    {
      "schema": 1,
      "provenance": {host, device, backend, torch, date, model, batch_size, cores,
                     mode, threads, gansim_version, python, + steps, warmup, d_steps,
                     world_sizes, launcher, platform},
      "measured": {
        "step_time_s": {"2": 0.08},     # median over the repeats of each one's mean step
        "repeat_step_time_s": {"2": [0.079, 0.081, ...]},       # each repeat's mean step
        "samples": {"2": [{"rank": 0, "phases": {"data_s": [...], ..., "step_s": [...]}}]},
        "phases": {"2": {"data_s": ..., "step_s": ...}},   # medians of the repeats' means
        "allreduce": [{"world_size": 2, "bytes": 4096, "time_s": ..., "iters": 160,
                       "median_s": ..., "samples_s": [...]}],
        "reduction": [{"bytes": 65536, "time_s": ..., "iters": 20}],     # a += b
        "compute_only": {"1": {...phase means...}, "2": {...}},  # no communication,
                                                      # w ranks computing at once
        "compute_samples": {"1": [{"rank": 0, "phases": {...}}]},
        "steal_fraction": {"1": [0.01, ...], "2": [...]}   # per spawn, in repeat order
      },
      "fit": {
        "allreduce_model": "ring",
        "alpha_s": ..., "beta_s_per_byte": ..., "gamma_s_per_byte": ...,
        "compute": {"data_s": ..., "d_forward_s": ..., ..., "step_s": ...},  # world size 1
        "core_sharing": {"1": 1.0, "2": 1.15},
        "compute_cv": 0.1,                   # each rank's own variability (stragglers)
        "gradient_bytes": {"discriminator": 935940, "generator": 8205536},
        "residuals": {"2": {"4096": 0.03, ...}},     # (predicted - measured) / measured
        "rms_relative_residual": ...
      }
    }
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any, Literal, Optional, Sequence, Union

from pydantic import AfterValidator, ConfigDict, Field, ValidationError, field_validator, model_serializer

from gansim.calibration.profile.phases import COMPUTE_PHASES
from gansim.core.config import (
    BandwidthGBps,
    ByteCount,
    Bytes,
    CoefficientOfVariation,
    Count,
    DStepCount,
    MAX_BYTES,
    Multiplier,
    PositiveByteCount,
    PositiveSeconds,
    RankCount,
    Seconds,
    SecondsPerByte,
    Strict,
    Tflops,
    validation_error,
)
from gansim.core import limits
from gansim.core.errors import UserInputError
from gansim.core.files import atomic_write

SCHEMA_VERSION = 1


def _check_ws_keys(value: dict) -> dict:
    for key in value:
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and int(key) >= 1):
            raise ValueError(f"world-size key {key!r} must be a positive integer string")
        limits.RANKS.validator(int(key))
    return value


class _Model(Strict):
    """Strict, finite and bounded like every config model (gansim.core.config.Strict);
    fields a later gansim adds are ignored, so an older one still reads a newer profile."""

    model_config = ConfigDict(extra="ignore", frozen=False, populate_by_name=True)


# The figures a prediction uses: the phases of one rank's step at world size 1
NETWORK_PHASES = tuple(p for p in COMPUTE_PHASES if p != "data_s")


class Provenance(_Model):
    host: str
    device: str
    backend: str
    torch: str
    date: str
    model: str
    batch_size: Count
    # False where nothing told the per-rank batch (a trace without input shapes, imported
    # without --batch-size): batch_size is then a placeholder, and no prediction scales to
    # another batch
    batch_known: bool = True
    cores: Count
    mode: str = "ddp"
    threads: Annotated[int, Field(ge=0, le=10**9)] = 1
    gansim_version: str = ""
    python: str = ""
    steps: Optional[Count] = None
    warmup: Optional[Annotated[int, Field(ge=0, le=10**9)]] = None
    repeats: Count = 1  # spawns per world size; figures are medians over them
    d_steps: DStepCount = 1
    world_sizes: list[RankCount] = Field(default_factory=list)
    launcher: str = "spawn"
    platform: str = ""
    # 1-minute load average before and after the runs: other work on the machine makes
    # the measurements noisy (and core sharing too high)
    load_average_start: Optional[Annotated[float, Field(ge=0, le=1e9)]] = None
    load_average_end: Optional[Annotated[float, Field(ge=0, le=1e9)]] = None
    # what was measured: gansim's own loop (model), a user's script, a torch.profiler trace
    source: Literal["model", "script", "trace", "timings"] = "model"
    # the measured device's peak figures when the user gave them (datasheet), for the roofline
    # that moves the profile to another device
    device_tflops: Optional[Tflops] = None
    device_memory_bandwidth_GBps: Optional[BandwidthGBps] = None

    @property
    def on_cpu(self) -> bool:
        """Whether the ranks computed on the host's cores (not on GPUs of their own)."""
        return self.device.lower() == "cpu"


class AllreducePoint(_Model):
    world_size: Annotated[int, Field(ge=2), AfterValidator(limits.RANKS.validator)]
    bytes: PositiveByteCount
    # the slowest rank's mean over the timed iterations (the median of the repeats' means)
    time_s: PositiveSeconds
    iters: Optional[Count] = None
    median_s: Optional[Seconds] = None
    samples_s: list[Seconds] = Field(default_factory=list)  # every timed iteration, slowest rank


class ReductionPoint(_Model):
    bytes: PositiveByteCount
    time_s: PositiveSeconds
    iters: Optional[Count] = None


class CollectiveRecord(_Model):
    """A collective a calibrated script or trace issued: what, in which phase (its n-th
    occurrence in the step, e.g. the first D step), by whom (ddp0, ddp1, ... in creation
    order, or explicit), how many bytes, and how many times per step."""

    op: str
    phase: str = ""
    occurrence: Annotated[int, Field(ge=0, le=10**9)] = 0
    owner: str = ""
    bytes: ByteCount
    per_step: Annotated[float, Field(ge=0, le=1e9)]


class PhaseCost(_Model):
    """One occurrence of a phase: FLOPs (torch.utils.flop_counter) and bytes its operators
    read and write (each input and output tensor once), for the roofline; from a GPU trace,
    also the share of its GPU time in the kernels of the operators that count FLOPs (matrix
    products, convolutions, attention), which the roofline moves at the ratio of peak FLOP/s
    and the rest at the ratio of memory bandwidths."""

    flops: Annotated[float, Field(ge=0, le=1e21)]  # a zettaFLOP: far beyond any one phase
    bytes: Bytes
    math_share: Optional[Annotated[float, Field(ge=0, le=1)]] = None


class ProfilerCorrection(_Model):
    """How a trace's phases were freed of the profiler's own cost: events recorded per step
    and phase, the cost of one event measured on the importing machine, and the raw times."""

    overhead_s_per_event: Annotated[float, Field(ge=0, le=1.0)]
    events_per_step: dict[str, Annotated[float, Field(ge=0, le=1e12)]] = Field(default_factory=dict)
    raw_phases: dict[str, Seconds] = Field(default_factory=dict)
    resolution_s: Optional[Seconds] = None


class RankSamples(_Model):
    rank: Annotated[int, Field(ge=0, le=10**9)]
    phases: dict[str, list[Seconds]]


# A training step's spread over a world size's repeats beyond which the machine was not
# steady enough for the figures to be trusted to better than that (calibrate warns, and
# validate says so beside the errors)
UNSTEADY_SPREAD = 0.15

# The share of the machine's CPU time a virtual machine's hypervisor gave to other guests
# (steal) beyond which calibrate warns: their load then sets the timings
NOTABLE_STEAL = 0.05


def repeat_spread(runs: Sequence[float]) -> Optional[float]:
    """Slowest over fastest repeat, minus 1 (None with fewer than two repeats)."""
    return max(runs) / min(runs) - 1 if len(runs) > 1 and min(runs) > 0 else None


class Measured(_Model):
    step_time_s: dict[str, PositiveSeconds] = Field(default_factory=dict)
    # each repeat's (spawn's) own mean training step: the spread says how steady the machine was
    repeat_step_time_s: dict[str, list[PositiveSeconds]] = Field(default_factory=dict)
    samples: dict[str, list[RankSamples]] = Field(default_factory=dict)
    phases: dict[str, dict[str, Seconds]] = Field(default_factory=dict)
    allreduce: list[AllreducePoint] = Field(default_factory=list)
    reduction: list[ReductionPoint] = Field(default_factory=list)
    compute_only: dict[str, dict[str, Seconds]] = Field(default_factory=dict)
    compute_samples: dict[str, list[RankSamples]] = Field(default_factory=dict)
    # per world size w > 1: rank 0 computing a step alone just before each step the w ranks
    # compute at once (the denominator of the core-sharing factor)
    compute_solo: dict[str, dict[str, Seconds]] = Field(default_factory=dict)
    compute_solo_samples: dict[str, list[RankSamples]] = Field(default_factory=dict)
    # per world size, each spawn's share of all CPU time that was stolen (a VM's hypervisor
    # running other guests on its cores; /proc/stat), in repeat order; empty off Linux
    steal_fraction: dict[str, list[Annotated[float, Field(ge=0, le=1)]]] = Field(default_factory=dict)
    # per world size: the collectives a user's script or trace issued in a kept step
    collectives: dict[str, list[CollectiveRecord]] = Field(default_factory=dict)
    # per phase (one occurrence): FLOPs and bytes, counted in a warm-up step or from a trace
    phase_costs: dict[str, PhaseCost] = Field(default_factory=dict)
    # a trace's profiler overhead correction (gansim calibrate --from-trace)
    profiler: Optional[ProfilerCorrection] = None

    _keys = field_validator(
        "step_time_s", "repeat_step_time_s", "samples", "phases", "compute_only", "compute_samples",
        "compute_solo", "compute_solo_samples", "steal_fraction", "collectives",
    )(_check_ws_keys)

    def repeat_spread(self, world_size: str) -> Optional[float]:
        """How far apart the training step's repeats were at `world_size` (see repeat_spread)."""
        return repeat_spread(self.repeat_step_time_s.get(world_size, []))

    def notable_steal(self) -> Optional[tuple[float, float]]:
        """(least, most) CPU steal over every spawn when the most exceeds NOTABLE_STEAL,
        else None: the cue for calibrate's warning and validate's note."""
        stolen = [s for runs in self.steal_fraction.values() for s in runs]
        return (min(stolen), max(stolen)) if stolen and max(stolen) > NOTABLE_STEAL else None


class GradientBytes(_Model):
    # at least one float32 per network (the prediction counts parameters as bytes / 4)
    discriminator: Annotated[int, Field(ge=4, le=MAX_BYTES)]
    generator: Annotated[int, Field(ge=4, le=MAX_BYTES)]


class BufferBytes(_Model):
    """Each network's buffers (BatchNorm statistics; 0 without), for DDP's broadcast_buffers."""

    discriminator: ByteCount = 0
    generator: ByteCount = 0


class GradientBuckets(_Model):
    """The gradient all-reduces one network's step issued, in order (DDP's buckets as it
    formed them): bytes each."""

    # at least one float32 each: predict() caps DDP's buckets at the smallest (bucket_caps_MiB)
    discriminator: list[Annotated[int, Field(ge=4, le=MAX_BYTES)]] = Field(default_factory=list)
    generator: list[Annotated[int, Field(ge=4, le=MAX_BYTES)]] = Field(default_factory=list)


class TimingsRow(_Model):
    """One row of a timings table as the fit saw it (per optimizer step)."""

    gpus: RankCount
    per_gpu_batch: Count
    accumulation: Count = 1
    step_time_s: PositiveSeconds
    communication_s: Seconds  # the network model's, never fitted
    residual: Optional[Annotated[float, Field(ge=-1e9, le=1e9)]] = None  # (predicted - measured) / measured
    held_out: bool = False  # not fitted: a check of the prediction
    label: str = ""


class TimingsFigures(_Model):
    """What ``calibrate --from-timings`` fitted (gansim/calibration/fit/timings.py: the step model):
    a step is accumulation x round_fixed_s + per_gpu_batch x per_sample_s on one GPU, plus
    host_overhead_per_replica_s per replica, plus the network model's communication on
    `topology` with `algorithm`."""

    round_fixed_s: Seconds
    per_sample_s: Seconds
    host_overhead_per_replica_s: Seconds
    determined: list[str] = Field(default_factory=list)  # the figures the table fixes alone
    combined: Optional[str] = None  # what the table fixes in place of the others
    round_batch: Annotated[float, Field(gt=0, le=1e9)]  # the largest batch of one round in the table
    topology: str
    algorithm: str
    gradient_sync: str
    # how the compute of a step splits over the phases (the workload's own proportions)
    phase_shares: dict[str, Annotated[float, Field(ge=0, le=1)]]
    repeat_spread: Optional[Annotated[float, Field(ge=0, le=1e9)]] = None
    rows: list[TimingsRow] = Field(default_factory=list)


class Fit(_Model):
    allreduce_model: Literal["ring"] = "ring"
    alpha_s: Annotated[float, Field(ge=0, le=1.0)]  # a latency: two loopback hops of alpha / 2
    beta_s_per_byte: SecondsPerByte
    gamma_s_per_byte: SecondsPerByte
    compute: dict[str, Seconds]
    # a rank computes this many times slower when that many ranks compute at once
    core_sharing: dict[str, Multiplier] = Field(default_factory=dict)
    # each rank's own coefficient of variation of its compute phases (stragglers), from the
    # spread between ranks computing at once (fit.compute_variability)
    compute_cv: CoefficientOfVariation = 0.0
    gradient_bytes: GradientBytes
    buffer_bytes: BufferBytes = Field(default_factory=BufferBytes)
    # measured buckets (scripts and traces); predictions all-reduce exactly these
    gradient_buckets: Optional[GradientBuckets] = None
    residuals: dict[str, dict[str, Annotated[float, Field(ge=-1e9, le=1e9)]]] = Field(default_factory=dict)
    rms_relative_residual: Optional[Annotated[float, Field(ge=0, le=1e9)]] = None
    timings: Optional[TimingsFigures] = None  # calibrate --from-timings

    _keys = field_validator("core_sharing", "residuals")(_check_ws_keys)

    @model_serializer(mode="wrap")
    def _timings_only_when_fitted(self, handler: Any) -> dict[str, Any]:
        """A profile not made from timings is written as before (no `timings: null`)."""
        data = handler(self)
        if data.get("timings") is None:
            data.pop("timings", None)
        return data

    @field_validator("compute")
    @classmethod
    def _phases_to_predict_from(cls, compute: dict[str, float]) -> dict[str, float]:
        missing = [p for p in NETWORK_PHASES if p not in compute]
        if missing:
            raise ValueError(f"lacks the phase{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
                             f"a prediction needs {', '.join(NETWORK_PHASES)}")
        if sum(compute.get(p, 0.0) for p in COMPUTE_PHASES) <= 0:
            raise ValueError("the compute phases add up to 0 s; a step must take some time")
        return compute


class Profile(_Model):
    """A complete calibration profile (what ``gansim calibrate`` writes to ``--out``)."""

    schema_version: Literal[1] = Field(SCHEMA_VERSION, alias="schema")
    provenance: Provenance
    measured: Measured
    fit: Fit

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=1) + "\n"


class PartialProfile(_Model):
    """What a calibration has measured so far (``<out>.partial.json``)."""

    schema_version: Literal[1] = Field(SCHEMA_VERSION, alias="schema")
    complete: bool = False
    stages_done: list[str] = Field(default_factory=list)
    error: Optional[str] = None
    provenance: Provenance
    measured: Measured

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), indent=1) + "\n"


def partial_path(out: Union[str, os.PathLike]) -> str:
    """``profile.json`` -> ``profile.partial.json`` (``x`` -> ``x.partial.json``)."""
    out = os.fspath(out)
    root, ext = os.path.splitext(out)
    return (root if ext == ".json" else out) + ".partial.json"


def write_profile_atomic(profile: Union[Profile, PartialProfile, dict],
                         path: Union[str, os.PathLike]) -> None:
    """Validate (a dict is validated as a :class:`Profile`) and write atomically."""
    if isinstance(profile, dict):
        profile = Profile.model_validate(profile)
    atomic_write(path, profile.to_json())


def load_profile(path: Union[str, os.PathLike]) -> Profile:
    """Read and validate a profile. Raises :class:`UserInputError` naming the file and the
    field (dotted path, e.g. ``fit.alpha_s``) on a missing file, bad JSON or bad content."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise UserInputError("is a directory, expected a profile JSON file", source=path, field="--profile")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limits.YAML_BYTES.value + 1)
    except FileNotFoundError:
        raise UserInputError("file does not exist", source=path, field="--profile") from None
    except OSError as exc:
        raise UserInputError(f"cannot read the file ({exc.strerror or exc})", source=path) from None
    limits.YAML_BYTES.check(len(raw), source=path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserInputError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                             source=path, field="(json)") from None
    try:
        # NaN and Infinity are not JSON: refuse them here rather than as a number later
        data: Any = json.loads(text, parse_constant=_not_json)
    except (json.JSONDecodeError, RecursionError) as exc:
        where = (f" ({exc.msg} at line {exc.lineno} column {exc.colno})" if isinstance(exc, json.JSONDecodeError)
                 else " (nested too deeply)")
        raise UserInputError(f"not valid JSON{where}", source=path, field="(json)") from None
    except ValueError as exc:
        raise UserInputError(f"not valid JSON ({exc})", source=path, field="(json)") from None
    if not isinstance(data, dict):
        raise UserInputError("must be a JSON object (a calibration profile)", source=path,
                             field="(top level)")
    if data.get("complete") is False and "fit" not in data:
        raise UserInputError(
            "this is a partial profile from an unfinished calibration (no fit); run "
            "`gansim calibrate` to completion", source=path, field="fit")
    if "schema" in data and data["schema"] != SCHEMA_VERSION:
        raise UserInputError(f"unsupported schema {data['schema']!r}; allowed: {SCHEMA_VERSION}",
                             source=path, field="schema")
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        message = validation_error(exc, path).message  # the same wording as for a scenario's fields
        more = len(exc.errors()) - 1
        if more > 0:
            message += f" (and {more} more error{'s' if more > 1 else ''})"
        raise UserInputError(message, source=path, field=_field_of(exc.errors()[0])) from None


def _field_of(err: dict) -> str:
    loc = [str(x) for x in err.get("loc", ())]
    return ".".join(loc) if loc else "(top level)"


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not a JSON number")
