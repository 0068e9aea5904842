"""A traced GPU's datasheet peaks from what its trace's ``deviceProperties`` say (name, compute
capability, memory), for the roofline that moves a profile's compute to another device.

Kineto writes the name the CUDA driver reports, which for some boards is not the marketing
name (an A100 SXM4 40GB in a Meta server reports ``NVIDIA A100-PG509-200``); the compute
capability and the memory size tell those apart where the name alone does not.

Figures (FP32 peak TFLOP/s, memory bandwidth GB/s):

- A100 40GB (SXM4 and PCIe alike): 19.5 TFLOP/s, 1,555 GB/s (NVIDIA A100 Tensor Core GPU
  datasheet, 2020); compute capability 8.0, 108 SMs;
- V100 SXM2 (16 and 32 GB): 15.7 TFLOP/s, 900 GB/s; V100 PCIe: 14 TFLOP/s, 900 GB/s (NVIDIA
  Tesla V100 datasheet, 2017); compute capability 7.0, 80 SMs;
- H200 SXM: 67 TFLOP/s, 4,800 GB/s; H200 NVL: 60 TFLOP/s, 4,800 GB/s (NVIDIA H200 Tensor Core
  GPU datasheet, 2024); compute capability 9.0, 132 SMs, 141 GB (an H200 SXM's trace says
  "NVIDIA H200", 139.8 GiB; an H100, of the same compute capability and SMs, is named so).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

GiB = 1024 ** 3


class Datasheet(NamedTuple):
    model: str
    tflops: float
    memory_bandwidth_GBps: float


# (compute capability, SMs, memory at most (GiB), a name part it needs or "") -> figures, most
# specific first
_KNOWN: tuple[tuple[tuple[int, int], int, float, str, Datasheet], ...] = (
    ((8, 0), 108, 48.0, "", Datasheet("A100 40GB", 19.5, 1555.0)),
    ((7, 0), 80, 40.0, "sxm2", Datasheet("V100 SXM2", 15.7, 900.0)),
    ((7, 0), 80, 40.0, "pcie", Datasheet("V100 PCIe", 14.0, 900.0)),
    ((9, 0), 132, 144.0, "h200 nvl", Datasheet("H200 NVL", 60.0, 4800.0)),
    ((9, 0), 132, 144.0, "h200", Datasheet("H200 SXM", 67.0, 4800.0)),
)


def datasheet(properties: dict) -> Optional[Datasheet]:
    """The datasheet figures of a deviceProperties entry, or None for a GPU not listed."""
    try:
        capability = (int(properties["computeMajor"]), int(properties["computeMinor"]))
        sms, memory = int(properties["numSms"]), float(properties["totalGlobalMem"]) / GiB
    except (KeyError, TypeError, ValueError):
        return None
    name = str(properties.get("name", "")).lower()
    for cc, n_sms, most_GiB, part, figures in _KNOWN:
        if cc == capability and n_sms == sms and memory <= most_GiB and part in name:
            return figures
    return None
