"""The communication a user's script or trace issued, per step: collective records, and
from them each network's gradient buckets and broadcast buffers (no torch import).

A GAN step's phases say whose communication it is: what is all-reduced in a ``d_*`` phase is
the discriminator's (its first D step: the buckets of one D step), in a ``g_*`` phase the
generator step's (which includes D's gradients when the script leaves D trainable while
G trains: that is what the step really all-reduces). Broadcasts (DDP's buffers) belong to
the network whose DDP also all-reduces in the ``d_*`` phases (D) or not (G).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from gansim.calibration.profile.schema import CollectiveRecord


def summarize(collectives: Iterable[Mapping[str, Any]], kept_steps: int) -> list[CollectiveRecord]:
    """Distinct (op, phase, occurrence, owner, bytes) in order of first appearance, each with
    how many times per kept step it was issued."""
    counts: dict[tuple, int] = {}
    for c in collectives:
        key = (c["op"], c.get("phase", ""), int(c.get("occurrence", 0)), c.get("owner", ""), int(c["bytes"]))
        counts[key] = counts.get(key, 0) + 1
    steps = max(1, kept_steps)
    return [CollectiveRecord(op=op, phase=phase, occurrence=occ, owner=owner, bytes=nbytes, per_step=n / steps)
            for (op, phase, occ, owner, nbytes), n in counts.items()]


def _repeat(record: CollectiveRecord) -> list[int]:
    return [record.bytes] * max(1, round(record.per_step))


def gradient_buckets(records: Sequence[CollectiveRecord]) -> dict[str, list[int]]:
    """Each network step's all-reduces in issue order: D's first D step, and the G step."""
    reduces = [r for r in records if r.op == "allreduce" and r.bytes > 0]
    d = [b for r in reduces if r.phase.startswith("d_") and r.occurrence <= 1 for b in _repeat(r)]
    g = [b for r in reduces if r.phase.startswith("g_") for b in _repeat(r)]
    return {"discriminator": d, "generator": g}


def buffer_bytes(records: Sequence[CollectiveRecord]) -> dict[str, int]:
    """Bytes each network broadcasts per step (DDP's buffers)."""
    d_owners = {r.owner for r in records if r.op == "allreduce" and r.phase.startswith("d_")}
    out = {"discriminator": 0.0, "generator": 0.0}
    for r in records:
        if r.op == "broadcast":
            out["discriminator" if r.owner in d_owners else "generator"] += r.bytes * r.per_step
    return {k: int(round(v)) for k, v in out.items()}


def unframed(records: Sequence[CollectiveRecord]) -> list[CollectiveRecord]:
    """All-reduces issued outside every marked phase (not attributed to a network)."""
    return [r for r in records if r.op == "allreduce" and not r.phase]
