"""Facts about the machine a calibration runs on: cores, CPU name, load and CPU steal.
No torch import, so bench scripts can use it too."""

from __future__ import annotations

import os
import platform
from typing import Optional


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> Optional[float]:
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def cpu_steal_ticks() -> Optional[tuple[int, int]]:
    """(stolen, all) CPU time since boot, in clock ticks summed over the CPUs, from the
    first line of /proc/stat (user nice system idle iowait irq softirq steal; guest time
    is already inside user and nice). None where there is no /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]
    return ticks[7], sum(ticks)


def steal_between(before: Optional[tuple[int, int]], after: Optional[tuple[int, int]]) -> Optional[float]:
    """The share of all CPU time stolen between two `cpu_steal_ticks` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return max(0.0, min(1.0, (after[0] - before[0]) / (after[1] - before[1])))
