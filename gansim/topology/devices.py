"""What a device's model name tells about it: a GPU's CUDA compute capability (which sets its
NVLink generation and what NCCL tunes for), the per-link NVLink line rate of that generation,
and a host CPU's vendor.

Compute capabilities: NVIDIA, "CUDA GPUs - Compute Capability" (developer.nvidia.com/cuda-gpus):
P100 6.0; GeForce GTX 10xx / TITAN Xp 6.1; V100 7.0; T4, RTX 20xx, TITAN RTX, Quadro RTX 7.5;
A100, A30 8.0; A10, A40, RTX A-series (A4000-A6000), RTX 30xx 8.6; L4, L40(S), RTX 40xx,
RTX 6000 Ada 8.9; H100, H200, H800, GH200 9.0; B200, B100, GB200 10.0.

NVLink line rates per link and direction (NVIDIA datasheets): NVLink 1 on P100 20 GB/s
(4 links, 160 GB/s bidirectional in all); NVLink 2 on V100 25 GB/s (6 links, 300 GB/s);
NVLink 3 on A100 25 GB/s (12 links, 600 GB/s); NVLink 3 on GA102 boards (RTX 3090, A40, RTX
A6000) 14.0625 GB/s (4 links, 112.5 GB/s bidirectional, the NVLink bridge's figure); NVLink 4
on H100/H200 25 GB/s (18 links, 900 GB/s); NVLink 5 on B200 50 GB/s (18 links, 1.8 TB/s).
"""

from __future__ import annotations

from gansim.core.config import NodeSpec

# (substring of the model name, lower case, most specific first) -> compute capability x 10
_COMPUTE_CAPABILITY: tuple[tuple[str, int], ...] = (
    ("gh200", 90), ("gb200", 100), ("b200", 100), ("b100", 100),
    ("h100", 90), ("h200", 90), ("h800", 90), ("h20", 90),
    ("a100", 80), ("a800", 80), ("a30", 80),
    ("rtx 6000 ada", 89), ("l40", 89), ("l4", 89), ("rtx 40", 89), ("4090", 89), ("4080", 89),
    ("a10", 86), ("a40", 86), ("a6000", 86), ("a5000", 86), ("a4000", 86), ("rtx 30", 86), ("3090", 86),
    ("3080", 86), ("t4", 75), ("titan rtx", 75), ("quadro rtx", 75), ("rtx 20", 75), ("2080", 75),
    ("v100", 70), ("titan v", 70),
    ("p100", 60), ("gtx 10", 61), ("1080", 61), ("1070", 61), ("titan xp", 61), ("p40", 61), ("p4", 61),
)  # fmt: skip


def compute_capability(spec: NodeSpec) -> int | None:
    """The GPU's compute capability x 10 (80 for an A100): its own field, else from its model
    name; None when neither says."""
    if spec.compute_capability is not None:
        return int(round(spec.compute_capability * 10))
    name = (spec.model or "").lower()
    for key, value in _COMPUTE_CAPABILITY:
        if key in name:
            return value
    return None


def nvlink_line_rate_GBps(capability: int) -> float:
    """One NVLink's line rate per direction on a GPU of this compute capability (x 10)."""
    if capability >= 100:
        return 50.0
    if capability == 86:
        return 14.0625
    return 25.0 if capability >= 70 else 20.0


def cpu_vendor(spec: NodeSpec) -> str:
    """'amd' when a host's model names an AMD CPU (EPYC, Ryzen, Threadripper), else 'intel':
    NCCL's tuning treats every other x86 host as Intel (src/graph/tuning.cc, getNetOverhead)."""
    name = (spec.model or "").lower()
    return "amd" if any(key in name for key in ("amd", "epyc", "ryzen", "threadripper")) else "intel"
