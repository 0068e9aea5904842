"""`gansim validate`: predict each calibrated world size from the fitted figures only and
compare with what was measured (the table; gansim.outputs.validation_files writes the files)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gansim.calibration.profile.schema import UNSTEADY_SPREAD, Profile, repeat_spread
from gansim.core.errors import UserInputError
from gansim.prediction.calibrated import predict


@dataclass(frozen=True)
class Comparison:
    world_size: int
    measured_step_s: float
    predicted_step_s: float
    measured_speedup: float | None  # None: no 1-rank run measured (a trace of one run)
    predicted_speedup: float
    measured_repeats_s: tuple[float, ...] = ()  # each repeat's own mean step
    steal_fractions: tuple[float, ...] = ()  # each repeat's share of CPU time stolen

    @property
    def repeat_spread(self) -> float | None:
        return repeat_spread(self.measured_repeats_s)

    def speedup_at(self, step_s: float) -> float | None:
        """The measured speed-up had this size's step taken `step_s` (the base unchanged)."""
        return None if self.measured_speedup is None else self.measured_speedup * self.measured_step_s / step_s

    @property
    def step_error(self) -> float:
        return (self.predicted_step_s - self.measured_step_s) / self.measured_step_s


@dataclass(frozen=True)
class ValidationReport:
    profile: Profile
    rows: list[Comparison]

    def table(self) -> str:
        prov = self.profile.provenance
        lines = [f"validation of {prov.model} on {prov.device} ({prov.backend}, {prov.mode}, batch {prov.batch_size} "
                 f"per rank, {prov.cores} cores)",
                 f"{'ranks':>5} {'measured ms':>12} {'predicted ms':>13} {'error':>8} {'speedup meas':>13} "
                 f"{'speedup pred':>13}  measured per repeat (ms)  [CPU steal per repeat]"]
        for r in self.rows:
            runs = " / ".join(f"{t * 1e3:.1f}" for t in r.measured_repeats_s)
            if r.steal_fractions:
                runs += "  [" + " / ".join(f"{s:.0%}" for s in r.steal_fractions) + "]"
            lines.append(f"{r.world_size:>5} {r.measured_step_s * 1e3:>12.3f} {r.predicted_step_s * 1e3:>13.3f} "
                         f"{r.step_error:>+8.1%} {_speedup(r.measured_speedup):>13} {r.predicted_speedup:>13.3f}  {runs}")
        unsteady = [r for r in self.rows if (r.repeat_spread or 0) > UNSTEADY_SPREAD]
        for r in unsteady:
            lines.append(f"note: at {r.world_size} rank{'s' if r.world_size > 1 else ''} the repeats differ by "
                         f"{r.repeat_spread:.0%}: the machine "
                         "was not steady while calibrating, and errors within that are noise")
        steal = self.profile.measured.notable_steal()
        if steal is not None:
            lines.append(f"note: the hypervisor took up to {steal[1]:.0%} of the CPU time while calibrating (steal): "
                         "this VM's speed moves with other guests' load, and so will any later measurement")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "provenance": self.profile.provenance.model_dump(mode="json"),
            "rows": [{"world_size": r.world_size, "measured_step_time_s": r.measured_step_s,
                      "predicted_step_time_s": r.predicted_step_s, "step_time_error": r.step_error,
                      "measured_speedup": r.measured_speedup, "predicted_speedup": r.predicted_speedup,
                      "measured_repeats_step_time_s": list(r.measured_repeats_s),
                      "steal_fraction_per_repeat": list(r.steal_fractions)}
                     for r in self.rows],
        }


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def validate(profile: Profile) -> ValidationReport:
    measured = {int(k): v for k, v in profile.measured.step_time_s.items()}
    if not measured:
        hint = ("; it was fitted from timings: calibrate --from-timings printed each row's residual, kept in "
                "fit.timings.rows (hold rows out with --fit-gpus to check predictions)") if profile.fit.timings else ""
        raise UserInputError(f"the profile has no measured step times to validate against{hint}",
                             field="measured.step_time_s")
    sizes = sorted(measured)
    predictions = {p.world_size: p for p in predict(profile, sizes)}
    base = measured.get(1)
    rows = []
    for w in sizes:
        p = predictions[w]
        rows.append(Comparison(w, measured[w], p.step_time_s, w * base / measured[w] if base else None,
                               p.speedup, tuple(profile.measured.repeat_step_time_s.get(str(w), ())),
                               tuple(profile.measured.steal_fraction.get(str(w), ()))))
    return ValidationReport(profile, rows)
