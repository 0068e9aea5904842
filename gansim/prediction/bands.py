"""The range a prediction's known errors give around its step time.

Two errors are known, and only these are counted:

- the calibration's run-to-run spread: the same configuration measured more than once (a
  profile's repeats, a timings table's repeated rows) took up to this much longer in its
  slowest run than in its fastest (slowest / fastest - 1). The whole step moves by it;
- the communication model's error in the size band of the workload's all-reduce messages,
  as `gansim validate --published` measures it on the shipped nccl-tests measurements of
  real systems (gansim/prediction/published.py: the median |error| over every system's
  points in that band), computed here from the shipped files. The communication's share of
  the step moves by it; that share is the step simulated with no compute at all (all of the
  communication, none of it hidden behind compute: the most it can move the step).

The band is [step - (spread x step + error x communication), step + the same]; the
speed-up's band is the speed-up at those ends with the one-GPU time held (a one-GPU step has
no communication and its spread cancels in the ratio to first order). Neither error is known
for a size band without validation points; the band then says so (`unknown`) rather than
count it as zero.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Optional

from gansim.calibration.profile import NETWORK_PHASES, Profile
from gansim.core.config import TrainingOptions
from gansim.prediction.published import BANDS, compare, load_published, summarize
from gansim.topology.graph import Topology
from gansim.training.workloads import GanWorkload, StepPhases


@dataclass(frozen=True)
class StepBand:
    low_s: float
    high_s: float
    speedup_low: float
    speedup_high: float
    repeat_spread: Optional[float]  # None: the calibration has no repeats to tell it
    communication_s: float
    communication_error: Optional[float]  # None: no validation points in that size band
    size_band: str
    unknown: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["unknown"] = list(self.unknown)
        return out


@functools.lru_cache(maxsize=1)
def band_errors() -> dict[str, Optional[float]]:
    """Size band -> median |error| of the communication model over the shipped published
    measurements in it (None without points), as `gansim validate --published` reports it."""
    rows = [row for published in load_published() for row in compare(published)]
    out: dict[str, Optional[float]] = {}
    for name, low, high in BANDS:
        summary = summarize(rows, low, high)
        out[name] = summary.median_abs_error if summary.points else None
    return out


def message_sizes(workload: GanWorkload, options: TrainingOptions) -> list[float]:
    """The bytes of each gradient all-reduce one step issues, as options.gradient_sync issues
    them: one per variable, one per network (flat), or DDP's buckets (at most bucket_MiB)."""
    per_param = workload.bytes_per_param
    networks = (workload.d_param_tensors, workload.g_param_tensors)
    sync = options.sync()
    if sync == "per_variable":
        return [t * per_param for tensors in networks for t in tensors]
    totals = [sum(tensors) * per_param for tensors in networks]
    if sync == "ddp_buckets":
        cap = options.bucket_MiB * 1024 * 1024
        return [size for total in totals for size in [cap] * int(total // cap) + ([total % cap] if total % cap else [])]
    return totals


def size_band(sizes: list[float]) -> str:
    """The band that carries most of the bytes (a message below the smallest band counts in
    the smallest, above the largest in the largest)."""
    carried = dict.fromkeys((name for name, _, _ in BANDS), 0.0)
    for size in sizes:
        for name, low, high in BANDS:
            if (size < high if high is not None else True) or name == BANDS[-1][0]:
                carried[name] += size
                break
    return max(carried, key=lambda name: carried[name])


def calibration_spread(profile: Profile) -> Optional[float]:
    """The largest run-to-run spread the calibration saw (None: no repeats)."""
    if profile.fit.timings is not None:
        return profile.fit.timings.repeat_spread
    spreads = [s for ws in profile.measured.repeat_step_time_s if (s := profile.measured.repeat_spread(ws)) is not None]
    return max(spreads) if spreads else None


SimulatePoint = Callable[[Profile, Topology, int, str, TrainingOptions, GanWorkload, StepPhases], dict[str, Any]]


def prediction_bands(profile: Profile, workload: GanWorkload, options: TrainingOptions, topology: Topology,
                     algorithm: str, steps: dict[int, tuple[float, StepPhases]],
                     simulate: SimulatePoint) -> dict[int, StepBand]:
    """The band of each world size's predicted step (`steps`: world size -> (step time, the
    phases it was simulated with)); `simulate` is the prediction's own simulation."""
    spread = calibration_spread(profile)
    band = size_band(message_sizes(workload, options))
    error = band_errors()[band]
    unknown = tuple(what for what, value in (("repeat_spread", spread), ("communication_error", error))
                    if value is None)
    # communication alone: no host work, no stragglers
    silent = options.model_copy(update={"host_overhead_per_replica_s": 0.0, "compute_cv": 0.0})
    t1 = steps[1][0]
    b1 = steps[1][1].batch
    out = {}
    for w, (step, phases) in steps.items():
        if w == 1:
            communication = 0.0
        else:
            idle = replace(phases, data_host_s=0.0, **{name: 0.0 for name in NETWORK_PHASES}, regularization=())
            communication = simulate(profile, topology, w, algorithm, silent, workload, idle)["step_time_s"]
        reach = (spread or 0.0) * step + (error or 0.0) * communication
        low, high = max(step - reach, 1e-12), step + reach
        throughput = w * phases.batch / b1 * t1
        out[w] = StepBand(low, high, throughput / high, throughput / low, spread, communication, error, band, unknown)
    return out
