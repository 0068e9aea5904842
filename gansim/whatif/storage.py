"""Storage-bound input and checkpoint I/O (seed 004: Kubernetes pods whose persistent volume
claims differ in IOPS).

A volume has a sequential bandwidth, an IOPS limit and a per-request latency; reads are issued
`queue_depth` at a time, so the request rate is min(IOPS, queue_depth / latency): a single
reader (PyTorch DataLoader's default num_workers=0) is latency-bound long before it reaches a
volume's IOPS limit. Small random requests are IOPS-bound, large sequential ones
bandwidth-bound (Compute Engine docs, "Persistent Disk performance": IOPS limits 4-16 KB
random I/O, throughput limits 256 KB-1 MB I/O); sequential transfers are counted in 1 MiB
requests.

Input formats (RunSpec.data_format):
- packed: the dataset is one file read into memory once per run (torchvision's MNIST and
  CIFAR-10 do this), so the volume costs a one-time load and nothing per epoch;
- files: one file per image, read every epoch (torchvision ImageFolder).

Reads run in series with the step unless `overlap_input` (DataLoader workers prefetching
behind compute): a slower volume then shows in per-epoch time only once it is the slower one."""

from __future__ import annotations

import math

from gansim.core.config import Scenario, StorageSpec
from gansim.core.errors import UserInputError
from gansim.core.units import MB
from gansim.whatif.catalog import load_catalog

SEQUENTIAL_REQUEST_BYTES = 1024 * 1024


def resolve_storage(spec: str | StorageSpec | None, *, source: str | None = None,
                    field: str = "storage") -> StorageSpec | None:
    """A catalog name (platforms/*.yaml `storage:` entries) or an inline volume."""
    if spec is None or isinstance(spec, StorageSpec):
        return spec
    storage = load_catalog().storage
    if spec not in storage:
        raise UserInputError(f"unknown storage class {spec!r}; allowed: {', '.join(sorted(storage))} or an inline "
                             "mapping {bandwidth_MBps, iops, latency_ms}", source=source, field=field)
    return storage[spec]


def request_rate(storage: StorageSpec) -> float:
    """Requests per second the reader achieves: the IOPS limit, or queue_depth / latency."""
    if storage.latency_ms <= 0:
        return storage.iops
    return min(storage.iops, storage.queue_depth / (storage.latency_ms * 1e-3))


def read_seconds(storage: StorageSpec, requests: float, nbytes: float) -> float:
    """Seconds to read `nbytes` in `requests` requests (whichever limit binds)."""
    if requests <= 0 and nbytes <= 0:
        return 0.0
    return max(requests / request_rate(storage), nbytes / (storage.bandwidth_MBps * MB))


def sequential_seconds(storage: StorageSpec, nbytes: float) -> float:
    """One large sequential transfer (a checkpoint, a packed dataset): first-byte latency, then
    the slower of bandwidth and 1 MiB requests at the IOPS limit."""
    if nbytes <= 0:
        return 0.0
    requests = math.ceil(nbytes / SEQUENTIAL_REQUEST_BYTES)
    return storage.latency_ms * 1e-3 + max(nbytes / (storage.bandwidth_MBps * MB), requests / storage.iops)


def epoch_input_seconds(storage: StorageSpec | None, images: int, file_bytes: float, data_format: str) -> float:
    """Seconds of volume reads per epoch (0 for a packed dataset, already in memory)."""
    if storage is None or data_format != "files":
        return 0.0
    return read_seconds(storage, images, images * file_bytes)


def dataset_load_seconds(storage: StorageSpec | None, dataset_bytes: float, data_format: str) -> float:
    """One-time load of a packed dataset into memory at the start of the run (and after each
    restart: a new process loads it again)."""
    if storage is None or data_format != "packed":
        return 0.0
    return sequential_seconds(storage, dataset_bytes)


def step_with_input(step_s: float, input_s_per_step: float, overlap: bool) -> float:
    """Wall seconds per step once the volume's reads are added: behind compute when prefetched,
    else in series."""
    return max(step_s, input_s_per_step) if overlap else step_s + input_s_per_step


def checkpoint_write_seconds(scenario: Scenario, nbytes: float, *, source: str | None = None) -> float:
    """One checkpoint write: over `checkpoint.storage_bandwidth_GBps` when given (pure
    bandwidth, as the issue states it), else over the scenario's storage volume."""
    ckpt = scenario.checkpoint
    if ckpt is None:
        return 0.0
    if ckpt.storage_bandwidth_GBps is not None:
        return nbytes / (ckpt.storage_bandwidth_GBps * 1e9)
    storage = resolve_storage(scenario.storage, source=source)
    assert storage is not None  # the config validator requires one of the two
    return sequential_seconds(storage, nbytes)
