"""The one validated config tree: topology files, scenario files, CLI overrides and the
results record all go through these models.

Loading never raises anything but `UserInputError` for a user's mistake, with the file
and the dotted field in the message, so the CLI can print one line and exit 2.

This is the validation boundary: every model a user's file or flag fills in derives from
`Strict` (strict types, finite numbers, no unknown fields) and gives each number one of the
range types below, so whatever passes here is something every model downstream can compute
with (no NaN, infinity, overflow or division by zero)."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BeforeValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gansim.core import limits
from gansim.core.errors import UserInputError
from gansim.core.nccl_env import ALGORITHM, PROTOCOL, canonical
from gansim.core.nccl_release import check_version

NodeKind = Literal["gpu", "cpu", "host", "pcie_switch", "nvswitch", "nic", "switch"]
LinkKind = Literal["pcie", "nvlink", "net", "loopback"]
Scaling = Literal["weak", "strong"]
GradientDtype = Literal["fp32", "fp16", "int8"]
# How a network's gradients are all-reduced (gansim/training/step.py GRADIENT_SYNCS, one
# implementation per name): DDP's buckets overlapped with the backward; one all-reduce per
# trainable variable after the backward (TensorFlow's tflib.Optimizer and MirroredStrategy);
# one all-reduce of all of a phase's gradients flattened into one buffer after the backward
# (StyleGAN3's training loop, and gansim's default without overlap)
GradientSync = Literal["ddp_buckets", "per_variable", "per_phase_flat"]


def _nccl_version(text: str) -> str:
    return check_version(text)


def _nccl_version_as_text(value: Any) -> Any:
    # YAML reads 2.18 as a number, and 2.10 as 2.1: a number is refused with the way out
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"write the NCCL version as text, in quotes ('{value}'): a YAML number loses "
                         "trailing zeros (2.10 reads as 2.1)")
    return value


# an NCCL release whose tuning model gansim follows: "2.18", "2.18.3" (gansim/core/nccl_release.py)
NcclVersion = Annotated[str, BeforeValidator(_nccl_version_as_text), Field(min_length=3, max_length=20),
                        AfterValidator(_nccl_version)]
# NCCL_ALGO / NCCL_PROTO as NCCL reads them ("ring", "Ring,Tree", "^nvls;allreduce:tree"),
# held in gansim's names (gansim/core/nccl_env.py)
NcclAlgo = Annotated[str, AfterValidator(lambda t: canonical(ALGORITHM, t))]
NcclProto = Annotated[str, AfterValidator(lambda t: canonical(PROTOCOL, t))]
# NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS: channel counts up to the newest release's MAXCHANNELS
# (device.h); an older release caps them at its own, as NCCL does (connect.cc)
NCCL_MAXCHANNELS = 64
# per option, the (least, most) it takes: no minimum asked is 0, the fewest channels is 1
NCCL_CHANNEL_BOUNDS = {"nccl_min_channels": (0, NCCL_MAXCHANNELS), "nccl_max_channels": (1, NCCL_MAXCHANNELS)}
NcclMinChannels = Annotated[int, Field(ge=NCCL_CHANNEL_BOUNDS["nccl_min_channels"][0],
                                       le=NCCL_CHANNEL_BOUNDS["nccl_min_channels"][1])]
NcclMaxChannels = Annotated[int, Field(ge=NCCL_CHANNEL_BOUNDS["nccl_max_channels"][0],
                                       le=NCCL_CHANNEL_BOUNDS["nccl_max_channels"][1])]
Pricing = Literal["on_demand", "spot"]
DatasetName = Literal["mnist", "cifar10", "celeba"]


class Strict(BaseModel):
    """The base of every model a user fills in (scenario and topology files, generator
    parameters, the platform catalog, calibration profiles): an unknown field is an error,
    types are strict (`true` is not 1, `"2"` is not 2, 2.5 is not a whole number) and no
    float is NaN or infinite. A new field takes one of the range types below (or a Field
    with both bounds), and inherits all of this."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# ----------------------------------------------------------------------------- ranges
# Sane ranges: far beyond any real machine or model, yet narrow enough that no product or sum
# of them downstream overflows a float or divides by zero. docs/limits.md lists
# them.
def at_least(floor: float, unit: str) -> AfterValidator:
    """A lower bound above zero, after pydantic's own `gt=0` (whose message stays for 0 and
    negative numbers)."""

    def check(value: float) -> float:
        if value < floor:
            raise ValueError(f"Input should be at least {floor:g}{unit} (far below any real figure)")
        return value

    return AfterValidator(check)


MAX_SECONDS = 1e6  # any one duration: a phase, a restart, an overhead (11.6 days)
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
MIN_SECONDS = 1e-12  # the shortest duration above zero
PositiveSeconds = Annotated[float, Field(gt=0, le=MAX_SECONDS), at_least(MIN_SECONDS, " s")]
Microseconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]  # a latency: up to 1 s
SecondsPerByte = Annotated[float, Field(ge=0, le=1e-3)]  # 1 kB/s and faster
BandwidthGBps = Annotated[float, Field(gt=0, le=1e6), at_least(1e-6, " GB/s")]  # per direction
Tflops = Annotated[float, Field(gt=0, le=1e6), at_least(1e-6, " TFLOP/s")]
MemoryGB = Annotated[float, Field(gt=0, le=1e6), at_least(1e-6, " GB")]
Multiplier = Annotated[float, Field(gt=0, le=1e6), at_least(1e-6, "")]
Fraction = Annotated[float, Field(gt=0, le=1), at_least(1e-6, "")]
MAX_BYTES = 2**50  # 1 PiB: any one buffer, message or file
ByteCount = Annotated[int, Field(ge=0, le=MAX_BYTES)]
PositiveByteCount = Annotated[int, Field(ge=1, le=MAX_BYTES)]


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str, field: str) -> int:
    """A byte count as a user types it on a command line: a number with an optional K, M or G
    (powers of 1024, the units nccl-tests' src/common.cu parsesize reads) and an optional B or
    iB: 4096, 64K, 1.5M, 4MiB, 8G."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:i?[bB])?\s*", str(text))
    if not match:
        raise UserInputError(f"{text!r} is not a size; allowed: bytes such as 8, 64K, 1.5M, 4MiB or 8G",
                             field=field)
    value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if value < 1:
        raise UserInputError(f"{text!r}: allowed: a size of at least 1 byte", field=field)
    if not value <= MAX_BYTES:  # also a number too long for a float (infinity)
        raise UserInputError(f"{text!r}: allowed: a size of at most {MAX_BYTES:,} bytes (1 PiB)", field=field)
    return int(value)
Bytes = Annotated[float, Field(ge=0, le=float(MAX_BYTES))]
ParamCount = Annotated[int, Field(ge=1, le=10**13)]
Count = Annotated[int, Field(ge=1, le=10**9)]  # cores, threads, batch sizes, queue depths
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]
# counts that a limit (gansim.core.limits) bounds: raisable, so checked by the limit itself
RankCount = Annotated[int, Field(ge=1), AfterValidator(limits.RANKS.validator)]
StepCount = Annotated[int, Field(ge=1), AfterValidator(limits.STEPS.validator)]
DStepCount = Annotated[int, Field(ge=1), AfterValidator(limits.D_STEPS.validator)]


# each rank's own variability of its compute phases (TrainingOptions.compute_cv; a profile's fit)
CoefficientOfVariation = Annotated[float, Field(ge=0, le=2)]


# ----------------------------------------------------------------------------- topology
class NodeSpec(Strict):
    id: str = Field(min_length=1)
    kind: NodeKind
    memory_GB: MemoryGB | None = None
    tflops: Tflops | None = None
    # peak device-memory bandwidth per datasheet (GB/s): memory-bound kernels (gradient
    # compression) and the roofline that moves a calibrated profile to another GPU use it
    memory_bandwidth_GBps: BandwidthGBps | None = None
    model: str | None = None
    cores: Count | None = None
    host: str | None = None
    threads: Count | None = None
    # gpu: False when it cannot reach another GPU's memory directly (GeForce cards, P2P disabled,
    # most VMs): its GPU-to-GPU bytes are staged in host memory, as NCCL's SHM transport does
    p2p: bool = True
    # gpu: CUDA compute capability (8.0 for an A100); left out, it is read from `model`
    # (gansim/topology/devices.py), which sets the NVLink generation and NCCL's tuning
    compute_capability: float | None = Field(default=None, ge=1, le=20, allow_inf_nan=False)
    # nvswitch: whether it reduces in the switch (NVLink SHARP, NCCL's NVLS algorithm); left out,
    # yes when its GPUs are Hopper or newer (third-generation NVSwitch), as NCCL checks
    nvlink_sharp: bool | None = None
    # host: DRAM bandwidth (all channels, datasheet rate), which staged GPU-to-GPU traffic
    # (written to and read back from host memory) shares; left out, not a constraint
    dram_bandwidth_GBps: BandwidthGBps | None = None


class LinkSpec(Strict):
    a: str
    b: str
    kind: LinkKind
    bandwidth_GBps: BandwidthGBps
    latency_us: Microseconds


class TopologyFile(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    nodes: list[NodeSpec] | None = None
    links: list[LinkSpec] | None = None
    generator: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    # the NCCL release the machine runs, for the `nccl` algorithm's tuning model (default:
    # the newest the model follows); a scenario's options.nccl_version overrides it
    nccl_version: NcclVersion | None = None
    # NCCL_P2P_LEVEL of the runs on it: the worst GPU-to-GPU path NCCL still takes with P2P
    # (default: NCCL's own, PXB; SYS on AMD hosts with two GPUs), worse ones through host memory
    nccl_p2p_level: Literal["LOC", "NVL", "PIX", "PXB", "PHB", "SYS"] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> "TopologyFile":
        explicit = self.nodes is not None or self.links is not None
        if explicit and self.generator is not None:
            raise ValueError("give either nodes and links, or a generator, not both")
        if not explicit and self.generator is None:
            raise ValueError("give either nodes and links, or a generator")
        if explicit and (not self.nodes or not self.links):
            raise ValueError("an explicit topology needs a non-empty 'nodes' and 'links' list")
        return self


# ----------------------------------------------------------------------------- workloads
MAX_VARIABLES = 1_000_000  # trainable variables of one network (each may be a collective a step)


class VariableGroup(Strict):
    """`count` trainable variables of `size` elements each (a summary of a variable list)."""

    size: ParamCount
    count: Annotated[int, Field(ge=1, le=MAX_VARIABLES)] = 1


def _variable_form(value: Any) -> str:
    return "variable group" if isinstance(value, (dict, VariableGroup)) else "variable size"


# a size, or {size, count}: tagged, so that a mistake is reported against the form written
VariableField = Annotated[
    Union[Annotated[ParamCount, Tag("variable size")], Annotated[VariableGroup, Tag("variable group")]],
    Discriminator(_variable_form),
]


class NetworkFigures(Strict):
    """One network (generator or discriminator) on one GPU at the scenario's per-GPU batch.

    Its trainable variables (what `options.gradient_sync: per_variable` all-reduces one by one,
    and what DDP's buckets are filled from), optional: `variables`, a list in gradient-ready
    order (last layer first) whose items are a size in elements or `{size, count}` for `count`
    variables of that size, summing to `params`; or `variable_count`, that many variables of
    equal size (params split as evenly as whole elements allow). Neither: one variable of
    `params` elements."""

    params: ParamCount
    forward_s: Seconds
    backward_s: Seconds
    optimizer_s: Seconds
    # non-parameter state (BatchNorm running statistics), for options.broadcast_buffers
    buffer_bytes: ByteCount = 0
    variables: list[VariableField] | None = Field(default=None, min_length=1)
    variable_count: Annotated[int, Field(ge=1, le=MAX_VARIABLES)] | None = None

    @model_validator(mode="after")
    def _variables_sum_to_params(self) -> "NetworkFigures":
        if self.variables is not None and self.variable_count is not None:
            raise ValueError("give variables or variable_count, not both")
        if self.variables is not None:
            count = sum(1 if isinstance(v, int) else v.count for v in self.variables)
            if count > MAX_VARIABLES:
                raise ValueError(f"{count:,} variables; at most {MAX_VARIABLES:,} per network")
            total = sum(v if isinstance(v, int) else v.size * v.count for v in self.variables)
            if total != self.params:
                raise ValueError(f"variables sum to {total:,} elements, params is {self.params:,}")
        if self.variable_count is not None and self.variable_count > self.params:
            raise ValueError(f"variable_count ({self.variable_count:,}) exceeds params ({self.params:,})")
        return self

    def variable_sizes(self) -> tuple[int, ...]:
        """Every trainable variable's size in elements, in the order given."""
        if self.variables is not None:
            return tuple(size for v in self.variables
                         for size in ((v,) if isinstance(v, int) else (v.size,) * v.count))
        k = self.variable_count or 1
        base, extra = divmod(self.params, k)
        return (base + 1,) * extra + (base,) * (k - extra)


class LazyRegularization(Strict):
    """A regularisation phase run as a step of its own every `every` minibatches (StyleGAN2's
    lazy regularisation: R1 on D with D_reg_interval 16, path length on G with G_reg_interval 4;
    NVlabs/stylegan2 training/training_loop.py), at the first minibatch and every `every`-th
    after it: its own forward and backward (`compute_s`, at the scenario's reference batch on
    one GPU, scaling with the batch like the other phases), then the all-reduce of all of that
    network's gradients (as `options.gradient_sync` issues them) and its optimizer update."""

    name: str = Field(default="regularization", min_length=1)
    network: Literal["discriminator", "generator"]
    every: Annotated[int, Field(ge=1, le=1000)]
    compute_s: Seconds


class GanNetworks(Strict):
    discriminator: NetworkFigures
    generator: NetworkFigures


class DataFigures(Strict):
    host_prep_s: Seconds = 0.0
    bytes_per_sample: Bytes = 0.0


class GanWorkloadSpec(Strict):
    name: str = "inline-gan"
    bytes_per_param: int = Field(default=4, ge=1, le=8)
    d_steps_per_g_step: DStepCount = 1
    networks: GanNetworks
    data: DataFigures = DataFigures()
    # lazy regularisation phases (StyleGAN2's R1 and path length); with any, `steps` must be a
    # whole number of their period (the lcm of their `every`), so that the step time is the
    # exact mean over whole periods
    regularization: list[LazyRegularization] = Field(default_factory=list, max_length=16)

    def regularization_period(self) -> int:
        """Minibatches after which the pattern of regularisation phases repeats."""
        return math.lcm(1, *(r.every for r in self.regularization))


class AllreduceWorkloadSpec(Strict):
    allreduce_bytes: PositiveByteCount


class StepPhaseFigures(Strict):
    """Seconds of one rank's step phases at `batch` samples (the calibrator's vocabulary:
    gansim.training.workloads.StepPhases)."""

    batch: Annotated[float, Field(gt=0, le=1e9)]
    data_host_s: Seconds = 0.0
    sample_bytes: Bytes = 0.0
    d_forward_s: Seconds
    d_backward_s: Seconds
    d_optimizer_s: Seconds
    g_forward_s: Seconds
    g_backward_s: Seconds
    g_optimizer_s: Seconds


class ProfiledWorkloadSpec(Strict):
    """What a scenario's `profile:` makes of its workload (gansim/prediction/scenario_profile.py):
    the profile's measured phases (moved to the topology's GPU by the roofline when the profile
    was measured on another device) and its gradient tensors and buffers, in place of the
    workload's own figures."""

    name: str = Field(min_length=1)
    from_profile: str = Field(min_length=1)
    d_steps_per_g_step: DStepCount = 1
    phases: StepPhaseFigures
    # elements (4 bytes each) of each gradient tensor: at most a profile's 2^50 gradient bytes
    d_param_tensors: list[Annotated[int, Field(ge=1, le=MAX_BYTES)]] = Field(min_length=1)
    g_param_tensors: list[Annotated[int, Field(ge=1, le=MAX_BYTES)]] = Field(min_length=1)
    d_buffer_bytes: ByteCount = 0
    g_buffer_bytes: ByteCount = 0
    # on the calibrated machine itself: how much slower each rank computes with this many
    # ranks computing at once (the profile's core sharing; 1 where not given)
    core_sharing: dict[RankCount, Multiplier] = Field(default_factory=dict)

    @field_validator("core_sharing")
    @classmethod
    def _sharing_slows(cls, factors: dict[int, float]) -> dict[int, float]:
        if any(v < 1.0 for v in factors.values()):
            raise ValueError("core sharing factors are >= 1: a rank never computes faster for sharing its cores")
        return factors


def _workload_form(value: Any) -> str:
    if isinstance(value, str):
        return "name"
    if isinstance(value, dict) and "allreduce_bytes" in value:
        return "allreduce"
    if isinstance(value, AllreduceWorkloadSpec):
        return "allreduce"
    if isinstance(value, ProfiledWorkloadSpec) or (isinstance(value, dict) and "from_profile" in value):
        return "profiled"
    return "gan"


# A tagged union, so that a mistake inside an inline workload is reported against the
# form the user meant rather than against the first alternative pydantic tried.
WorkloadField = Annotated[
    Union[
        Annotated[str, Tag("name")],
        Annotated[AllreduceWorkloadSpec, Tag("allreduce")],
        Annotated[GanWorkloadSpec, Tag("gan")],
        Annotated[ProfiledWorkloadSpec, Tag("profiled")],
    ],
    Discriminator(_workload_form),
]


# ----------------------------------------------------------------------------- scenario
class Reference(Strict):
    speedup: dict[RankCount, Annotated[float, Field(gt=0, le=1e9)]] = Field(default_factory=dict)
    step_time_s: dict[RankCount, PositiveSeconds] = Field(default_factory=dict)
    source: str = ""


class TrainingOptions(Strict):
    """How one data-parallel step is run (the DDP-like knobs of docs/model.md, "The training step")."""

    overlap: bool = False  # DDP-style bucketed all-reduce overlapped with backward
    # how gradients are all-reduced (GradientSync above); left out, `ddp_buckets` with
    # overlap and `per_phase_flat` without. overlap: true is ddp_buckets, so with any other
    # gradient_sync it is an error
    gradient_sync: GradientSync | None = None
    bucket_MiB: Multiplier = 25.0
    first_bucket_MiB: Multiplier = 1.0
    gradient_dtype: GradientDtype = "fp32"
    host_overhead_per_replica_s: Seconds = 0.0
    chunks: int = Field(default=1, ge=1, le=4096)
    # Gradient accumulation: a rank's batch is run in rounds of at most this many samples
    # (NVlabs/stylegan2's minibatch_gpu; left out, one round), each round's gradients added to
    # the last; the optimizer updates once, after the last round. With sync_each_round the
    # gradients are all-reduced after every round (stylegan2's TF optimizer sums across GPUs
    # before it accumulates; PyTorch DDP outside no_sync), else once, after the last
    # (DDP's no_sync on the others, stylegan2-ada's PyTorch loop)
    round_batch: Count | None = None
    sync_each_round: bool = False
    # FLOP-costed workloads only: achieved fraction of the device's peak, and the fixed cost
    # of each kernel launch (what dominates small layers on a GPU)
    compute_efficiency: Fraction = 0.35
    kernel_launch_us: Microseconds = 5.0
    # local reduction cost of the all-reduce; NCCL fuses it into the copy, hence 0 by default
    gamma_s_per_byte: SecondsPerByte = 0.0
    # activation checkpointing (seed 002 "recomputation"): less activation memory, one more
    # forward pass of compute per step (gansim/training/memory.py: recompute_extra_forward)
    recompute: bool = False
    # PyTorch DDP's broadcast_buffers (its default is on): a network with buffers (BatchNorm
    # statistics) broadcasts them from rank 0 before its forward. DDP does it only when the
    # previous forward of that network ran with grad, which in a GAN loop (G's forward for
    # the fakes runs without) is once per step per network; that is what is simulated.
    broadcast_buffers: bool = False
    # Per-rank variability of computation (stragglers): with several ranks, each compute
    # phase of each rank and step takes its time times a lognormal factor of mean 1 and this
    # coefficient of variation, drawn from the scenario's seed. A synchronous step waits at
    # every collective for the slowest rank, so variability costs time, more with more ranks.
    compute_cv: CoefficientOfVariation = 0.0
    # For the `nccl` algorithm: the algorithms or protocols NCCL may choose from, as NCCL_ALGO /
    # NCCL_PROTO allow them (default: all; NCCL's own choice by message size among those
    # allowed, gansim/collectives/nccl_tuning.py)
    nccl_algo: NcclAlgo | None = None
    nccl_proto: NcclProto | None = None
    # the NCCL release whose tuning model (choices, latencies, caps) the `nccl` algorithm
    # follows; default: the topology's nccl_version, else the newest the model follows
    nccl_version: NcclVersion | None = None
    # one process made the communicators of all its GPUs (ncclCommInitAll: torch.nn.DataParallel,
    # nccl-tests without MPI) rather than one each (ncclCommInitRank: DDP, MPI); only NCCL
    # 2.4's switch from LL to Simple depends on it
    nccl_single_process: bool = False
    # NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS: the communicator's channels capped at the maximum,
    # then duplicated up to the minimum (connect.cc; 2.4's misc/rings.cc ignores the minimum
    # where the maximum applies). None: NCCL's own count
    nccl_min_channels: NcclMinChannels | None = None
    nccl_max_channels: NcclMaxChannels | None = None

    @model_validator(mode="after")
    def _one_sync(self) -> "TrainingOptions":
        if self.overlap and self.gradient_sync not in (None, "ddp_buckets"):
            raise ValueError(f"overlap: true is gradient_sync: ddp_buckets; it cannot go with "
                             f"gradient_sync: {self.gradient_sync}")
        if self.sync_each_round and self.round_batch is None:
            raise ValueError("sync_each_round: true needs round_batch (the samples a rank runs in one round)")
        return self

    def round_shares(self, batch: float) -> list[float]:
        """The share of a rank's `batch` samples each round runs: rounds of round_batch, the
        last one what is left (one round without round_batch, or with a batch no larger)."""
        if self.round_batch is None or batch <= self.round_batch:
            return [1.0]
        whole, left = divmod(batch, self.round_batch)
        return [self.round_batch / batch] * int(whole) + ([left / batch] if left > 1e-9 * batch else [])

    def syncs_per_step(self, batch: float) -> int:
        """How many times a network step all-reduces its gradients at `batch` samples a rank."""
        return len(self.round_shares(batch)) if self.sync_each_round else 1

    def sync(self) -> str:
        """The gradient_sync in effect (see gradient_sync)."""
        if self.gradient_sync is not None:
            return self.gradient_sync
        return "ddp_buckets" if self.overlap else "per_phase_flat"


# ----------------------------------------------------------------------------- what-ifs
# Whole-run, memory, cost, storage and elastic what-ifs (gansim/whatif/extensions.py evaluates them).
class RunSpec(Strict):
    """A whole training run: `epochs` passes over a dataset (by name, or a count of images)."""

    dataset: DatasetName | None = None
    images: Annotated[int, Field(ge=1, le=10**12)] | None = None
    epochs: Annotated[float, Field(gt=0, le=1e6)]
    # packed: the dataset is one file read into memory once per run (torchvision's MNIST and
    # CIFAR-10); files: one file per image, read from the volume every epoch (ImageFolder)
    data_format: Literal["packed", "files"] = "packed"

    @model_validator(mode="after")
    def _size(self) -> "RunSpec":
        if self.dataset is None and self.images is None:
            raise ValueError("give a dataset (mnist, cifar10, celeba) or a number of images")
        return self


class CheckpointSpec(Strict):
    every_steps: Annotated[int, Field(ge=1, le=10**15)]
    # defaults to the scenario's storage volume bandwidth when a storage class is given
    storage_bandwidth_GBps: BandwidthGBps | None = None
    include_optimizer: bool = True


class FailureSpec(Strict):
    # at least 3.6 s: a fault every few seconds per GPU is no longer a training run
    mtbf_hours_per_gpu: Annotated[float, Field(gt=0, le=1e9), at_least(1e-3, " h")]
    restart_s: Seconds


class PreemptionSpec(Strict):
    rate_per_hour: Annotated[float, Field(ge=0, le=1e3)]  # per instance (machine) of the run
    restart_s: Seconds


class StorageSpec(Strict):
    """A storage volume: sequential bandwidth, IOPS limit, per-request latency; reads are
    issued `queue_depth` at a time (1 = PyTorch DataLoader's default num_workers=0)."""

    name: str = Field(default="inline", min_length=1)
    bandwidth_MBps: Annotated[float, Field(gt=0, le=1e9), at_least(1e-3, " MB/s")]
    iops: Annotated[float, Field(gt=0, le=1e9), at_least(1e-3, "")]
    latency_ms: Annotated[float, Field(ge=0, le=MAX_SECONDS)] = 0.0
    queue_depth: Count = 1
    overlap_input: bool = False  # True: reads prefetched behind compute (DataLoader workers)
    source: str = ""


class MemorySpec(Strict):
    # CUDA context + kernels: nvidia-smi shows ~781 MB right after creating one CUDA tensor
    # (pytorch/pytorch issue #34323, 2020); NCCL buffers come on top and are not counted.
    reserve_MiB: Annotated[float, Field(ge=0, le=1e9)] = 780.0
    optimizer: Literal["adam", "momentum", "sgd"] = "adam"
    # inline workloads have no layers to estimate activations from: give them here
    activation_bytes_per_sample: Bytes | None = None


class ElasticSpec(Strict):
    """Seed 001: add or remove GPUs at epoch boundaries from the GPUs' utilisation."""

    min_gpus: RankCount
    max_gpus: RankCount
    start_gpus: RankCount | None = None  # default: fixed_gpus
    fixed_gpus: RankCount | None = None  # the fixed allocation compared; default max_gpus
    scale_up_above: float = Field(default=0.8, gt=0, le=1)
    scale_down_below: float = Field(default=0.5, ge=0, lt=1)
    step: Literal["double", "one"] = "double"
    rescale_s: Seconds = 60.0
    cooldown_epochs: Annotated[int, Field(ge=0, le=10**6)] = 0
    algorithm: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "ElasticSpec":
        if self.min_gpus > self.max_gpus:
            raise ValueError(f"min_gpus ({self.min_gpus}) must be <= max_gpus ({self.max_gpus})")
        if self.scale_down_below >= self.scale_up_above:
            raise ValueError("scale_down_below must be smaller than scale_up_above")
        for name in ("start_gpus", "fixed_gpus"):
            value = getattr(self, name)
            if value is not None and not self.min_gpus <= value <= self.max_gpus:
                raise ValueError(f"{name} ({value}) must lie in [min_gpus, max_gpus] = "
                                 f"[{self.min_gpus}, {self.max_gpus}]")
        return self


class PlanSpec(Strict):
    """Cheapest configuration that meets a deadline, over catalog platforms (gansim/whatif/deadline_plan.py plan)."""

    platforms: list[str] = Field(min_length=1)
    pricing: list[Pricing] = Field(default_factory=lambda: ["on_demand"], min_length=1)
    deadline_hours: Annotated[float, Field(gt=0, le=1e6)] | None = None
    # ISO 8601; without a zone it is UTC; must be in the future. Not strict: YAML gives a
    # timestamp, a quoted one is a string, and both mean the same.
    deadline: datetime | None = Field(default=None, strict=False)
    gpus: list[RankCount] | None = None  # GPU counts tried on each platform (default: all its GPUs)
    algorithm: str | None = None

    @field_validator("gpus")
    @classmethod
    def _positive(cls, gpus: list[int] | None) -> list[int] | None:
        if gpus is not None:
            if not gpus or min(gpus) < 1:
                raise ValueError("GPU counts must be >= 1")
            return sorted(set(gpus))
        return gpus

    @field_validator("deadline")
    @classmethod
    def _future(cls, deadline: datetime | None) -> datetime | None:
        if deadline is None:
            return None
        if deadline.tzinfo is None:
            deadline = deadline.replace(tzinfo=timezone.utc)
        if deadline <= datetime.now(timezone.utc):
            raise ValueError(f"deadline {deadline.isoformat()} is in the past; give a future time or "
                             "deadline_hours > 0")
        return deadline

    @model_validator(mode="after")
    def _one_deadline(self) -> "PlanSpec":
        if self.deadline is not None and self.deadline_hours is not None:
            raise ValueError("give deadline_hours or deadline, not both")
        return self

    def deadline_in_hours(self, now: datetime | None = None) -> float | None:
        if self.deadline_hours is not None:
            return self.deadline_hours
        if self.deadline is None:
            return None
        now = now or datetime.now(timezone.utc)
        return (self.deadline - now).total_seconds() / 3600.0


def _storage_form(value: Any) -> str:
    return "catalog" if isinstance(value, str) else "inline"


StorageField = Annotated[
    Union[Annotated[str, Tag("catalog")], Annotated[StorageSpec, Tag("inline")]],
    Discriminator(_storage_form),
]


SWEEPABLE = (
    "topology",
    "workload",
    "cost_model",
    "scaling",
    "per_gpu_batch",
    "global_batch",
    "link_bandwidth_scale",
    "steps",
    "overlap",
    "gradient_sync",
    "gradient_dtype",
    "chunks",
    "platform",
    "pricing",
    "storage",
)


class Scenario(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    topology: str
    workload: WorkloadField
    gpus: list[RankCount] = Field(min_length=1)
    algorithms: list[str] = Field(default_factory=lambda: ["ring"], min_length=1)
    # a name in gansim/collectives/communicator.py COST_MODELS, checked when the scenario loads
    cost_model: str = Field(default="flow", min_length=1)
    scaling: Scaling = "weak"
    per_gpu_batch: Count | None = 64
    global_batch: Count | None = None
    steps: StepCount = 20
    seed: Seed = 0
    profile: str | None = None
    link_bandwidth_scale: Multiplier = 1.0
    options: TrainingOptions = TrainingOptions()
    reference: Reference | None = None
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    # what-ifs (all optional; gansim/whatif/extensions.py)
    memory: MemorySpec = MemorySpec()
    run: RunSpec | None = None
    checkpoint: CheckpointSpec | None = None
    failures: FailureSpec | None = None
    preemption: PreemptionSpec | None = None
    storage: StorageField | None = None
    platform: str | None = None
    pricing: Pricing = "on_demand"
    elastic: ElasticSpec | None = None
    plan: PlanSpec | None = None

    @field_validator("gpus")
    @classmethod
    def _positive_gpus(cls, gpus: list[int]) -> list[int]:
        bad = [g for g in gpus if g < 1]
        if bad:
            raise ValueError(f"GPU counts must be >= 1, got {bad[0]}")
        return sorted(set(gpus))

    @field_validator("steps")
    @classmethod
    def _simulated_steps(cls, steps: int, info: ValidationInfo) -> int:
        """Each training step simulates d_steps_per_g_step discriminator steps: the limit is on both."""
        workload = info.data.get("workload")
        if isinstance(workload, GanWorkloadSpec):
            limits.STEPS.validator(steps * workload.d_steps_per_g_step)
            period = workload.regularization_period()
            if steps % period:
                everies = ", ".join(str(r.every) for r in workload.regularization)
                raise ValueError(f"steps ({steps}) must be a whole number of lazy-regularisation periods of "
                                 f"{period} minibatches (the lcm of every: {everies}), e.g. "
                                 f"{period * max(1, round(steps / period))}")
        return steps

    @field_validator("sweep")
    @classmethod
    def _known_axes(cls, sweep: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for axis, values in sweep.items():
            if axis not in SWEEPABLE:
                raise ValueError(f"unknown sweep axis {axis!r}; allowed: {', '.join(SWEEPABLE)}")
            if not values:
                raise ValueError(f"sweep axis {axis!r} needs at least one value")
        return sweep

    def reference_batch(self) -> float:
        """The batch at which inline compute figures were given (one GPU)."""
        return float(self.per_gpu_batch if self.per_gpu_batch is not None else self.global_batch)  # type: ignore[arg-type]

    def batch_per_gpu(self, gpus: int) -> float:
        """Each rank's batch at this GPU count: fixed (weak scaling) or the global batch
        split over the ranks (strong scaling)."""
        return float(self.per_gpu_batch) if self.scaling == "weak" else float(self.global_batch) / gpus  # type: ignore[arg-type]

    @model_validator(mode="after")
    def _batch_for_scaling(self) -> "Scenario":
        if self.scaling == "strong" and self.global_batch is None:
            raise ValueError("strong scaling needs global_batch")
        if self.scaling == "weak" and self.per_gpu_batch is None:
            raise ValueError("weak scaling needs per_gpu_batch")
        return self

    @model_validator(mode="after")
    def _whatifs_need_a_run(self) -> "Scenario":
        if self.run is None:
            for name in ("checkpoint", "failures", "preemption", "elastic", "plan"):
                if getattr(self, name) is not None:
                    raise ValueError(f"'{name}' needs 'run' (dataset or images, and epochs)")
        if self.checkpoint is not None and self.checkpoint.storage_bandwidth_GBps is None and self.storage is None:
            raise ValueError("checkpoint needs storage_bandwidth_GBps (or a 'storage' class to write to)")
        if self.pricing == "spot" and self.platform is None:
            raise ValueError("pricing: spot needs a 'platform' from the catalog")
        return self


# ----------------------------------------------------------------------------- loading
def _field_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in ("name", "allreduce", "gan") and parts and parts[-1].endswith("workload"):
            continue  # pydantic's union-branch tags say nothing a user wrote
        elif item in ("catalog", "inline") and parts and parts[-1].endswith("storage"):
            continue
        elif item in ("variable size", "variable group"):
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(top level)"


def validation_error(err: ValidationError, source: str) -> UserInputError:
    """Turn pydantic's report into our one line: the first problem, its field, the rule. An
    unknown field comes first: a misspelt name is both unknown and a missing field, and the
    name the user wrote is the one to show."""
    errors = err.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    if first["type"] == "missing":
        msg = "required field is missing"
    msg = msg.removeprefix("Value error, ")
    if isinstance(first.get("input"), bool) and first["type"] in ("int_type", "float_type"):
        msg = f"expected a number, got the boolean {str(first['input']).lower()}"
    return UserInputError(msg, source=source, field=_field_path(tuple(first["loc"])))


def parse(model: type[BaseModel], data: dict[str, Any], source: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise validation_error(err, source) from None
