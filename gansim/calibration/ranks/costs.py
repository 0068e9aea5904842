"""FLOPs and bytes of each phase of a training step, counted while it runs, for the roofline
that moves a profile to another device (:mod:`gansim.prediction.roofline`). The built-in
training loop and a user's script count them the same way, in their last warm-up step (the
dispatch mode slows the step down, so it is never a timed one).

FLOPs are ``torch.utils.flop_counter``'s per-operator formulas (matrix products and
convolutions; element-wise operators count none); bytes are every operator's input and
output tensors, each once: the memory traffic of unfused kernels, an upper estimate on a GPU
that fuses. Communication operators (``c10d``) are not compute and are skipped.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry


def tensor_bytes(tensors: Any) -> int:
    """Bytes of all tensors in a (nested) structure."""
    return sum(t.numel() * t.element_size() for t in tree_flatten(tensors)[0] if isinstance(t, torch.Tensor))


class CostCounter(TorchDispatchMode):
    """FLOPs and bytes read and written of the operators run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace != "c10d":
            packet = func._overloadpacket
            if packet in flop_registry:
                self.flops += int(flop_registry[packet](*args, **kwargs, out_val=out))
            self.bytes += tensor_bytes((args, kwargs)) + tensor_bytes(out)
        return out


class PhaseCosts:
    """The counts of one step's phases: ``start(name)`` begins counting a phase (ending the
    one under way), ``stop()`` ends it; a phase run several times in the step (each D step's)
    adds up, and ``per_occurrence`` divides by how often it ran."""

    def __init__(self) -> None:
        self.totals: dict[str, dict[str, float]] = {}
        self._name: Optional[str] = None
        self._counter: Optional[CostCounter] = None

    def start(self, name: str) -> None:
        self.stop()
        self._name, self._counter = name, CostCounter()
        self._counter.__enter__()

    def stop(self) -> None:
        if self._counter is None:
            return
        self._counter.__exit__(None, None, None)
        total = self.totals.setdefault(self._name, {"flops": 0.0, "bytes": 0.0})
        total["flops"] += self._counter.flops
        total["bytes"] += self._counter.bytes
        self._name = self._counter = None

    def rename(self, names: Mapping[str, Optional[str]]) -> None:
        """Counts under a provisional name moved to their phase's (added to what it has), or
        dropped where it maps to None; the phase under way ends first."""
        self.stop()
        for old, new in names.items():
            total = self.totals.pop(old, None)
            if total is not None and new is not None:
                into = self.totals.setdefault(new, {"flops": 0.0, "bytes": 0.0})
                into["flops"] += total["flops"]
                into["bytes"] += total["bytes"]

    def per_occurrence(self, occurrences: Mapping[str, int]) -> dict[str, dict[str, float]]:
        """Each phase's FLOPs and bytes per run of it (``occurrences``: runs in the step, 1 if
        absent); provisional names (``?_...``, not yet known to be a phase) are left out."""
        self.stop()
        return {name: {k: v / max(1, occurrences.get(name, 1)) for k, v in total.items()}
                for name, total in self.totals.items() if not name.startswith("?")}
