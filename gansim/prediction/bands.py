"""The range a prediction's known errors give around its step time.

Two errors are known, and only these are counted:

- the calibration's run-to-run spread: the same configuration measured more than once (a
  profile's repeats, a timings table's repeated rows) took up to this much longer in its
  slowest run than in its fastest (slowest / fastest - 1). The whole step moves by it;
- the error of what predicted the communication. On a topology (a scenario, `predict
  --topology`, a profile from timings), that is the network and collectives model: its
  error in the size band of the workload's all-reduce messages, as `gansim validate
  --published` measures it on the shipped nccl-tests measurements of real systems
  (gansim/prediction/published.py: the median |error| over every system's points in that
  band), worked out from the shipped files and kept in band_errors.json beside this
  module. On the profile's own machine it is the all-reduce cost the calibration fitted to
  its measured all-reduces: the median |relative residual| of that fit over its points
  (``fit.residuals``; in-sample, so a lower bound of its error at world sizes it did not
  measure). The communication's share of the step moves by it.

The band is [step - (spread x step + error x communication), step + the same], where the
communication is the simulation's, on the step's critical path (what it adds to the step); the
speed-up's band is the speed-up at those ends with the one-GPU time held (a one-GPU step has
no communication and its spread cancels in the ratio to first order). Neither error is known
for a size band without validation points; the band then says so (`unknown`) rather than
count it as zero.
"""

from __future__ import annotations

import functools
import json
import statistics
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional

from gansim.calibration.profile.schema import Profile
from gansim.core.config import TrainingOptions
from gansim.prediction.published import BANDS, shipped_comparisons, summarize
from gansim.runner.record import RunRecord
from gansim.training.step import gradient_message_sizes
from gansim.training.workloads import GanWorkload


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
    communication_error_from: str = ""  # what the error was measured on

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["unknown"] = list(self.unknown)
        return out


@dataclass(frozen=True)
class CommunicationError:
    """The known relative error of what predicted a run's communication, and where it comes
    from (None: nothing measured it)."""

    error: Optional[float]
    source: str


# band_errors() as a file in the package: working it out predicts every shipped published
# point (seconds), which every `predict --topology` would pay. `python -m gansim.docs` writes
# it and, with --check (tests/test_docs.py), fails while it differs from what the model gives.
BAND_ERRORS_FILE = Path(__file__).with_name("band_errors.json")


def measured_band_errors() -> dict[str, Optional[float]]:
    """Size band -> median |error| of the communication model over the shipped published
    measurements in it (None without points), as `gansim validate --published` reports it."""
    rows = list(shipped_comparisons()[1])
    out: dict[str, Optional[float]] = {}
    for name, low, high in BANDS:
        summary = summarize(rows, low, high)
        out[name] = summary.median_abs_error if summary.points else None
    return out


def band_errors_json() -> str:
    """What BAND_ERRORS_FILE holds: measured_band_errors() now."""
    return json.dumps({"about": "median |error| of the communication model per message-size band over the shipped "
                                "published measurements (gansim validate --published); written by python -m "
                                "gansim.docs", "band_errors": measured_band_errors()}, indent=2) + "\n"


@functools.lru_cache(maxsize=1)
def band_errors() -> dict[str, Optional[float]]:
    """measured_band_errors(), as BAND_ERRORS_FILE keeps it (worked out where it is missing)."""
    try:
        return json.loads(BAND_ERRORS_FILE.read_text(encoding="utf-8"))["band_errors"]
    except FileNotFoundError:
        return measured_band_errors()


def published_error(band: str) -> CommunicationError:
    """The network model's error in a size band, from `validate --published`."""
    return CommunicationError(band_errors()[band], f"the communication model's median |error| (validate --published, "
                                                   f"{band} band)")


def fit_error(profile: Profile) -> CommunicationError:
    """The error of the all-reduce cost a profile fitted to its own measured all-reduces."""
    residuals = [abs(r) for points in profile.fit.residuals.values() for r in points.values()]
    if not residuals:
        return CommunicationError(None, "the profile's all-reduce fit (no measured all-reduces)")
    return CommunicationError(statistics.median(residuals), f"the profile's all-reduce fit's median |residual| over its "
                                                            f"{len(residuals)} measured all-reduce sizes")


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


def step_band(step_s: float, speedup: float, communication_s: float, spread: Optional[float],
              band: str, communication: Optional[CommunicationError] = None) -> StepBand:
    """The band of one predicted step: `communication_s` is the communication on the step's
    critical path (the simulation's breakdown), `spread` the calibration's, `band` the size
    band of the workload's all-reduce messages, `communication` the error of what predicted
    it (the network model's in that band unless given)."""
    communication = communication or published_error(band)
    error = communication.error
    unknown = tuple(what for what, value in (("repeat_spread", spread), ("communication_error", error))
                    if value is None)
    reach = (spread or 0.0) * step_s + (error or 0.0) * communication_s
    low, high = max(step_s - reach, 1e-12), step_s + reach
    return StepBand(low, high, speedup * step_s / high, speedup * step_s / low, spread, communication_s, error, band,
                    unknown, communication.source)


def record_band(record: RunRecord, speedup: float, spread: Optional[float], band: str,
                communication: Optional[CommunicationError] = None) -> StepBand:
    """The band of a simulated run's record (its step time and the breakdown's communication)."""
    assert record.step_time_s is not None and record.breakdown is not None  # a run that was simulated
    return step_band(record.step_time_s, speedup, record.breakdown.communication_s, spread, band, communication)


def with_scenario_bands(runs: list[RunRecord], workload: GanWorkload, options: TrainingOptions,
                        profile: Profile) -> list[RunRecord]:
    """The runs of a scenario run from `profile`, each simulated one with its `band`
    (StepBand.as_dict)."""
    band = size_band(gradient_message_sizes(workload, options))
    spread = calibration_spread(profile)
    return [replace(run, band=record_band(run, run.speedup, spread, band).as_dict())
            if run.step_time_s is not None and run.speedup is not None else run for run in runs]
