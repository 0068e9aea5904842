"""On-device memory of one data-parallel rank (seed 002, section VI.B "on-device memory"),
and the small step-model helpers for its two remedies: recomputation (activation
checkpointing) and quantization (fewer bytes per gradient element).

Per rank, at the step's peak:

- parameters, gradients (fp32 master copies: `bytes_per_param` each);
- optimizer state: Adam keeps two moments per parameter (momentum SGD one, plain SGD none);
- DDP's gradient buckets when there is more than one rank: PyTorch DDP copies gradients into
  its all-reduce buckets unless `gradient_as_bucket_view=True`, "the saved memory size will be
  equal to the total gradients size" (torch.nn.parallel.DistributedDataParallel docs);
- the input batch on the device;
- activations kept for backward, per sample, estimated layer by layer from the shipped
  architectures (gansim/training/workloads.py): every layer's output is saved once (it is the next
  layer's saved input, or an activation function's saved output), plus the network input and
  one byte per element for dropout masks. At the D step the step model holds D's graph on the
  real batch and on the fake batch and G's graph at once, so the peak is G + 2 D per sample.
  With `recompute: true` only sqrt(L) segment boundaries are kept and one segment is rebuilt at
  a time (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"), at the price of
  one more forward pass;
- a framework reserve on GPU ranks (CUDA context and kernels; MemorySpec.reserve_MiB, sourced
  there).

A run that does not fit in the rank device's `memory_GB` is reported, never simulated."""

from __future__ import annotations

import math
import re
from typing import Any

from gansim.core.config import GanWorkloadSpec, Scenario
from gansim.core.units import GB, MiB
from gansim.topology.graph import Topology
from gansim.training.workloads import (
    AllreduceWorkload,
    GanArchitecture,
    GanWorkload,
    Layer,
    Network,
    StepPhases,
    Workload,
    scenario_workload,
)

ACTIVATION_BYTES = 4  # fp32 activations
OPTIMIZER_STATES = {"adam": 2, "momentum": 1, "sgd": 0}

# Bytes each gradient element travels as in the all-reduce.
_GRADIENT_BYTES = {"fp32": 4, "fp16": 2, "int8": 1}

# ----------------------------------------------------------------------------- step-model helpers
def bytes_per_gradient_element(dtype: str) -> int:
    """Bytes one gradient element occupies on the wire: fp32 4, fp16 2, int8 1."""
    try:
        return _GRADIENT_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown gradient dtype {dtype!r}; allowed: {', '.join(_GRADIENT_BYTES)}") from None


def quantize_seconds(elements: float, dtype: str, memory_bandwidth_GBps: float, *, launch_s: float = 5e-6) -> float:
    """Seconds to compress `elements` fp32 gradients to `dtype` before the all-reduce and to
    expand the result after it, as memory-bound kernels: read 4 B + write b B, then read b B +
    write 4 B per element; int8 also reads the fp32 tensor once more for its scale (max |g|).
    fp32 costs nothing. Two kernel launches (three for int8)."""
    b = bytes_per_gradient_element(dtype)
    if b == 4 or elements <= 0:
        return 0.0
    moved = elements * (4 + b) * 2
    launches = 2
    if dtype == "int8":
        moved += elements * 4
        launches = 3
    return moved / (memory_bandwidth_GBps * GB) + launches * launch_s


def recompute_extra_forward(phases: StepPhases) -> tuple[float, float]:
    """Extra seconds per step with activation checkpointing: one more forward pass of each
    network step, added before its backward: (D step, G step)."""
    return phases.d_forward_s, phases.g_forward_s


# ----------------------------------------------------------------------------- activations
_DENSE = re.compile(r"dense (\d+)->(\d+)")
_CONV = re.compile(r"(convT|conv) (\d+)->(\d+) k(\d+)")


def layer_outputs(layers: tuple[Layer, ...]) -> list[tuple[int, int]]:
    """(output elements, mask bytes) per layer and sample, from the layer's kind and figures."""
    out: list[tuple[int, int]] = []
    for i, layer in enumerate(layers):
        mask = 0
        if (m := _DENSE.match(layer.name)) is not None:
            elements = int(m.group(2))
        elif (m := _CONV.match(layer.name)) is not None:
            c_in, k = int(m.group(2)), int(m.group(4))
            elements = layer.macs_per_sample // (c_in * k * k)  # conv: out_hw^2 * c_out exactly
            nxt = layers[i + 1] if i + 1 < len(layers) else None
            if m.group(1) == "convT" and nxt is not None and not _DENSE.match(nxt.name) \
                    and not _CONV.match(nxt.name):
                # a transposed conv's output is its successor's input (batch norm or an
                # activation, whose figures give its size exactly); without one, the formula
                # above is the stride-1 size, a lower bound
                elements = nxt.macs_per_sample // 2 if nxt.name.startswith("batchnorm") else \
                    _elementwise_elements(nxt)
        elif layer.name.startswith("batchnorm"):
            elements = layer.macs_per_sample // 2
        else:
            elements = _elementwise_elements(layer)
            if "dropout" in layer.name:
                mask = elements  # a bool mask, one byte per element
        out.append((elements, mask))
    return out


def _elementwise_elements(layer: Layer) -> int:
    return layer.macs_per_sample // 2 if "+" in layer.name else layer.macs_per_sample


def network_input_elements(net: Network, sample_elements: int | None = None) -> int:
    first = net.layers[0]
    if (m := _DENSE.match(first.name)) is not None:
        return int(m.group(1))
    if sample_elements is not None:
        return sample_elements
    return 0


def activation_bytes(net: Network, input_elements: int, *, recompute: bool = False) -> float:
    """Bytes per sample this network keeps for its backward pass."""
    outs = layer_outputs(net.layers)
    per_layer = [e * ACTIVATION_BYTES + mask for e, mask in outs]
    if not recompute:
        return input_elements * ACTIVATION_BYTES + float(sum(per_layer))
    n = len(per_layer)
    seg = max(1, math.ceil(math.sqrt(n)))
    kept = input_elements * ACTIVATION_BYTES
    transient = 0.0
    for start in range(0, n, seg):
        chunk = per_layer[start:start + seg]
        kept += outs[start + len(chunk) - 1][0] * ACTIVATION_BYTES  # the segment's boundary
        transient = max(transient, float(sum(chunk)))
    return kept + transient


def gan_activation_bytes(arch: GanArchitecture, *, recompute: bool = False) -> dict[str, float]:
    """Per-sample activation bytes of G, of D, and the step's peak (G + 2 D; with recompute
    the boundaries of all three graphs plus one segment rebuilt at a time)."""
    sample_elements = arch.sample_bytes // 4
    g_in = network_input_elements(arch.generator)
    d_in = network_input_elements(arch.discriminator, sample_elements)
    g = activation_bytes(arch.generator, g_in)
    d = activation_bytes(arch.discriminator, d_in)
    if not recompute:
        return {"generator": g, "discriminator": d, "peak": g + 2 * d}
    g_r = activation_bytes(arch.generator, g_in, recompute=True)
    d_r = activation_bytes(arch.discriminator, d_in, recompute=True)
    g_seg = g_r - _kept(arch.generator, g_in)
    d_seg = d_r - _kept(arch.discriminator, d_in)
    peak = _kept(arch.generator, g_in) + 2 * _kept(arch.discriminator, d_in) + max(g_seg, d_seg)
    return {"generator": g_r, "discriminator": d_r, "peak": peak}


def _kept(net: Network, input_elements: int) -> float:
    outs = layer_outputs(net.layers)
    n = len(outs)
    seg = max(1, math.ceil(math.sqrt(n)))
    kept = input_elements * ACTIVATION_BYTES
    for start in range(0, n, seg):
        end = min(start + seg, n) - 1
        kept += outs[end][0] * ACTIVATION_BYTES
    return kept


# ----------------------------------------------------------------------------- the report
def rank_capacity_GB(topology: Topology, gpus: int) -> float | None:
    """The smallest `memory_GB` among the run's rank devices (None when any is unknown)."""
    values = [topology.nodes[n].memory_GB for n in topology.ranks[:gpus]]
    if not values or any(v is None for v in values):
        return None
    return float(min(values))  # type: ignore[type-var]


def memory_report(scenario: Scenario, topology: Topology, gpus: int, workload: Workload | None = None) -> dict[str, Any]:
    """Peak memory per rank and whether it fits the rank device's `memory_GB`.

    Returns {memory_peak_GB, memory_capacity_GB, fits, parts (GB each), activations_known}.
    `fits` is None when the device's capacity is unknown (CPU ranks), and False means: report
    out of memory, do not simulate."""
    if workload is None:
        workload = scenario_workload(scenario)
    batch = scenario.batch_per_gpu(gpus)
    spec = scenario.memory
    parts: dict[str, float] = {}
    activations_known = True
    if isinstance(workload, AllreduceWorkload):
        parts["buffers"] = 2.0 * workload.nbytes  # send and receive
    else:
        assert isinstance(workload, GanWorkload)
        params = workload.d_params + workload.g_params
        parts["parameters"] = params * workload.bytes_per_param
        parts["gradients"] = params * workload.bytes_per_param
        parts["optimizer_state"] = params * 4.0 * OPTIMIZER_STATES[spec.optimizer]
        if gpus > 1:
            parts["ddp_buckets"] = params * workload.bytes_per_param
        recompute = scenario.options.recompute
        if workload.architecture is not None:
            arch = workload.architecture
            per_sample = gan_activation_bytes(arch, recompute=recompute)["peak"]
            parts["input_batch"] = batch * arch.sample_bytes
        else:
            inline = scenario.workload if isinstance(scenario.workload, GanWorkloadSpec) else None
            sample_bytes = inline.data.bytes_per_sample if inline is not None else 0.0
            parts["input_batch"] = batch * sample_bytes
            if spec.activation_bytes_per_sample is None:
                per_sample = 0.0
                activations_known = False
            else:
                # a user's figure is for plain training; recomputation keeps about 1/sqrt(L) of it
                per_sample = spec.activation_bytes_per_sample
        parts["activations"] = batch * per_sample
    if any(topology.nodes[n].kind == "gpu" for n in topology.ranks[:gpus]):
        parts["framework_reserve"] = spec.reserve_MiB * MiB  # a CUDA context: GPU ranks only
    peak = sum(parts.values())
    capacity = rank_capacity_GB(topology, gpus)
    fits = None if capacity is None else bool(peak <= capacity * GB)
    return {
        "memory_peak_GB": peak / GB,
        "memory_capacity_GB": capacity,
        "fits": fits,
        "parts": {k: v / GB for k, v in parts.items()},
        "activations_known": activations_known,
    }


def checkpoint_bytes(workload: Workload, *, include_optimizer: bool = True, optimizer: str = "adam") -> float:
    """Bytes one checkpoint writes: the parameters, and (by default) the optimizer state."""
    if not isinstance(workload, GanWorkload):
        return 0.0
    params = workload.d_params + workload.g_params
    nbytes = float(params * workload.bytes_per_param)
    if include_optimizer:
        nbytes += params * 4.0 * OPTIMIZER_STATES[optimizer]
    return nbytes
