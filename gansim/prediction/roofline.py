"""Moving a calibrated profile to another device: a roofline of the two devices.

Each compute phase of the profile was measured on one device (``provenance.device``) and
carries its FLOPs and bytes (``measured.phase_costs``: torch.utils.flop_counter's formulas,
and every operator's inputs and outputs once). Against the measured device's ridge point
(peak FLOP/s over peak memory bandwidth, datasheet figures) a phase whose arithmetic
intensity (FLOPs per byte) is at or above the ridge is compute-bound and scales with the
ratio of peak FLOP/s; below it, it is memory-bound and scales with the ratio of memory
bandwidths (Williams, Waterman & Patterson, "Roofline", CACM 2009). Host work (``data_s``)
stays as measured. A device without a figure is an error, never a ratio of 1.

The measured device's figures come, in this order, from the caller (``gansim predict
--measured-tflops/--measured-memory-bandwidth-GBps``), from the profile
(``gansim calibrate --device-tflops/--device-memory-bandwidth-GBps``), or from a shipped
topology's GPU node whose ``model`` names the same device; the target's from its topology's
GPU nodes (``tflops``, ``memory_bandwidth_GBps``).

A GPU trace that records no shapes (so no FLOPs and bytes) still timed each kernel: the
kernels launched by the operators torch's FLOP counter counts (matrix products,
convolutions, attention) are the compute-bound part of a phase, the others (elementwise,
normalisation, reductions, copies) the memory-bound part, and each part moves at its own
ratio (``PhaseCost.math_share``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from gansim.calibration.profile.schema import PhaseCost, Profile
from gansim.core.errors import UserInputError
from gansim.core.files import shipped_dir
from gansim.topology.graph import Topology, load_topology
from gansim.training.workloads import StepPhases

# the step's device phases (StepPhases field = the profile's phase name)
SCALED_PHASES = ("d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s", "g_optimizer_s")


@dataclass(frozen=True)
class DeviceFigures:
    name: str
    tflops: float
    memory_bandwidth_GBps: float

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity at which the device turns from memory- to compute-bound."""
        return self.tflops * 1e12 / (self.memory_bandwidth_GBps * 1e9)


def _same_device(a: str, b: str) -> bool:
    a, b = a.strip().lower(), b.strip().lower()
    return bool(a) and bool(b) and (a in b or b in a)


def shipped_device(name: str) -> Optional[DeviceFigures]:
    """The figures of a GPU model named in a shipped topology (e.g. torch's device name
    'NVIDIA A100-SXM4-40GB' matches 'A100-SXM4-40GB'), or None."""
    for path in sorted(shipped_dir("topologies").glob("*.yaml")):
        topo = load_topology(str(path))
        for node in topo.nodes.values():
            if node.kind == "gpu" and node.model and _same_device(node.model, name) \
                    and node.tflops and node.memory_bandwidth_GBps:
                return DeviceFigures(node.model, node.tflops, node.memory_bandwidth_GBps)
    return None


def measured_device(profile: Profile, tflops: Optional[float] = None,
                    memory_bandwidth_GBps: Optional[float] = None) -> DeviceFigures:
    prov = profile.provenance
    tflops = tflops or prov.device_tflops
    bandwidth = memory_bandwidth_GBps or prov.device_memory_bandwidth_GBps
    if tflops and bandwidth:
        return DeviceFigures(prov.device, tflops, bandwidth)
    known = shipped_device(prov.device)
    if known is not None:
        return DeviceFigures(prov.device, tflops or known.tflops, bandwidth or known.memory_bandwidth_GBps)
    raise UserInputError(
        f"the measured device {prov.device!r} has no peak FLOP/s and memory bandwidth figures, so its compute "
        "cannot be moved to another device; give its datasheet figures with --measured-tflops and "
        "--measured-memory-bandwidth-GBps", field="--measured-tflops")


def target_device(topology: Topology) -> Optional[DeviceFigures]:
    """The target's rank device: None for CPU ranks; an error for a GPU without figures."""
    node = topology.nodes[topology.ranks[0]]
    if node.kind != "gpu":
        return None
    missing = [f for f in ("tflops", "memory_bandwidth_GBps") if getattr(node, f) is None]
    if missing:
        raise UserInputError(f"GPU node {node.id!r} has no {' and '.join(missing)}: the roofline that moves the "
                             "profile's compute to this device needs its datasheet figures",
                             source=topology.name, field=f"nodes.{node.id}.{missing[0]}")
    return DeviceFigures(node.model or node.id, node.tflops, node.memory_bandwidth_GBps)


def needs_scaling(profile: Profile, target: Optional[DeviceFigures]) -> bool:
    if target is None:
        return not profile.provenance.on_cpu
    return not _same_device(profile.provenance.device, target.name)


def phase_scaling(cost: Optional[PhaseCost], measured: DeviceFigures, target: DeviceFigures,
                  phase: str) -> tuple[str, float]:
    """(bound, time ratio target/measured) of one phase. Where a GPU trace timed the phase's
    kernels, its matrix products' and convolutions' share moves at the ratio of peak FLOP/s
    and the rest at the ratio of memory bandwidths (``mixed`` when it has both); otherwise the
    phase's arithmetic intensity against the measured device's ridge decides for all of it."""
    compute_ratio = measured.tflops / target.tflops
    memory_ratio = measured.memory_bandwidth_GBps / target.memory_bandwidth_GBps
    if cost is not None and cost.math_share is not None:
        share = cost.math_share
        bound = "compute" if share == 1 else "memory" if share == 0 else "mixed"
        return bound, share * compute_ratio + (1 - share) * memory_ratio
    if cost is None:
        raise UserInputError(f"no FLOPs and bytes for phase {phase}: the roofline needs them (calibrate again "
                             "with --warmup 1 or more: the last warm-up step counts them, in a --script only "
                             "where it marks its phases with phase() or record_function labels; or import a "
                             "trace recorded with with_flops=True and record_shapes=True)",
                             field=f"measured.phase_costs.{phase}")
    intensity = cost.flops / cost.bytes if cost.bytes > 0 else float("inf")
    if intensity >= measured.ridge_flops_per_byte:
        return "compute", compute_ratio
    return "memory", memory_ratio


def scale_phases(phases: StepPhases, costs: Mapping[str, PhaseCost], measured: DeviceFigures,
                 target: DeviceFigures) -> tuple[StepPhases, dict[str, Any]]:
    """The phases on the target device, and what was done (for the prediction's output)."""
    report: dict[str, Any] = {"device": measured.name, "tflops": measured.tflops,
                              "memory_bandwidth_GBps": measured.memory_bandwidth_GBps,
                              "ridge_flops_per_byte": measured.ridge_flops_per_byte,
                              "to": target.name, "phases": {}}
    changes = {}
    before = after = 0.0
    for name in SCALED_PHASES:
        seconds = getattr(phases, name)
        if seconds == 0:
            continue
        cost = costs.get(name)
        bound, ratio = phase_scaling(cost, measured, target, name)
        changes[name] = seconds * ratio
        before += seconds
        after += seconds * ratio
        report["phases"][name] = {"bound": bound, "ratio": ratio}
        if cost is not None and cost.math_share is not None:
            report["phases"][name]["math_share"] = cost.math_share
    report["ratio"] = after / before if before > 0 else 1.0
    return replace(phases, **changes), report
