"""Phase names of the timed training step (no torch import: the fit and the profile use
them too)."""

from __future__ import annotations

from typing import Optional

#: Phases of one training step, in order (seconds per step at the per-rank batch).
PHASES = (
    "data_s",
    "d_forward_s",
    "d_backward_s",
    "d_allreduce_s",
    "d_optimizer_s",
    "g_forward_s",
    "g_backward_s",
    "g_allreduce_s",
    "g_optimizer_s",
)
#: The whole step, measured between barriers at its start and end.
STEP = "step_s"
#: The phases with no communication (what the world-size-1 compute run measures).
COMPUTE_PHASES = tuple(p for p in PHASES if "allreduce" not in p)


def phase_name(label: str) -> Optional[str]:
    """The calibrator's phase name of a label (``d_forward`` or ``d_forward_s``), or None: a
    script's markers and a trace's record_function labels both name phases this way."""
    name = label if label.endswith("_s") else label + "_s"
    return name if name in PHASES else None
