"""Phase names of the timed training step (no torch import: the fit and the profile use
them too)."""

from __future__ import annotations

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
