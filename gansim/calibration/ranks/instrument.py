"""Marking the phases of your own training loop (no torch import: cheap to import anywhere).

Add two kinds of lines to a training script that already runs under ``torchrun``::

    from gansim.calibration import phase, step

    for real, labels in loader:
        step(batch_size=real.shape[0])          # a new training step starts here
        with phase("d_forward"):
            loss_d = critic_loss(D, G, real)
        with phase("d_backward"):
            opt_d.zero_grad(); loss_d.backward()
        with phase("d_optimizer"):
            opt_d.step()
        ...

Run on its own (``python train.py``, ``torchrun ...``) the markers do nothing but a test
of one module global. Run by ``gansim calibrate --script train.py``, they time each phase
of each step on each rank (see :mod:`gansim.calibration.ranks.script`). The phases are the
calibrator's own (:data:`gansim.calibration.profile.phases.PHASES`, with or without the ``_s``):
``data``, ``d_forward``, ``d_backward``, ``d_allreduce``, ``d_optimizer``, ``g_forward``,
``g_backward``, ``g_allreduce``, ``g_optimizer``. ``torch.profiler.record_function`` labels
with these names count as well. Several discriminator steps per generator step are several
``d_*`` phases within one step. Time of a step outside every phase counts as host work
(``data_s``).
"""

from __future__ import annotations

from typing import Any, Optional

from gansim.calibration.profile.phases import PHASES

#: The labels a phase may have (the calibrator's phase names without ``_s``).
PHASE_LABELS = tuple(p[:-2] for p in PHASES)

# The recorder of a run under `gansim calibrate --script` (set by script_rank), else None.
_recorder: Optional[Any] = None


class phase:
    """``with phase("d_backward"): ...`` marks one phase of the current step."""

    __slots__ = ("label",)

    def __init__(self, label: str):
        self.label = label

    def __enter__(self) -> "phase":
        if _recorder is not None:
            _recorder.open(self.label, strict=True)
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> bool:
        if _recorder is not None:
            _recorder.close(self.label, failed=exc_type is not None)
        return False


def step(batch_size: Optional[int] = None) -> None:
    """A training step starts here (call it at the top of the loop body). ``batch_size``:
    samples per rank in this step, for the profile's provenance."""
    if _recorder is not None:
        _recorder.step(batch_size)


def install(recorder: Any) -> None:
    """Make the markers record into `recorder` (script_rank does this in a calibrated rank)."""
    global _recorder
    _recorder = recorder
