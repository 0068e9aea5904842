"""The C allocator's and Python's collector's settings for a simulation process.

A large run allocates and frees arrays of tens to hundreds of MB many times over (its task
graph, the pairs of its collectives' routes, the intervals of its trace). glibc's malloc
serves such blocks by mmap and returns them to the system when they are freed, so each new
one is faulted in page by page again: at 100,000 GPUs a third of the command's CPU time was
the kernel's, zeroing pages. With a high mmap threshold and trim threshold, freed blocks stay
in the heap for the next ones (peak memory grows by a few MB; the pages are reused, not
faulted again). `tune_allocator` does this once per process, where the C library is glibc
(elsewhere it does nothing); the command line calls it, as a library gansim leaves the
allocator alone.

numpy asks the kernel for transparent huge pages on its large arrays (madvise). Where the
kernel's THP `defrag` setting makes such a fault compact memory on the spot (`always`,
`madvise`, `defer+madvise`: the kernel's Documentation/admin-guide/mm/transhuge.rst), a
run's page faults cost far more than zeroing 4 KiB pages: rail_gan_ddp_nccl at 16,384 GPUs
spent 0.95-1.18 s in the kernel with them and 0.35-0.46 s without, for 0.1 s more user time
(bench/shapes.py's scenario, /usr/bin/time, two runs each). `tune_allocator` then turns
numpy's request off.

Python's cyclic garbage collector runs its youngest generation every 700 container objects
allocated beyond those freed (gc.get_threshold's default), and its older ones every 10 of
those. Building a large machine allocates millions of tuples, lists and dicts that live for
the whole command (adjacency lists, routes, node specifications), so the collector scans
them again and again and finds nothing: rail_gan_ddp_nccl at 16,384 GPUs spent 4.1-4.5 s of
user time with the default, 3.8 s with 10,000, 3.7 s with no collection at all, for the same
peak memory (912-923 MB; /usr/bin/time, this module's history). `tune_collector` sets
10,000: cycles are still collected, a hundred times fewer times."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys

# mallopt parameters (glibc malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MMAP_THRESHOLD = 1 << 30  # blocks below 1 GiB come from the heap
TRIM_THRESHOLD = 1 << 32  # the heap's free top is given back beyond 4 GiB only
TOP_PAD = 64 << 20  # the heap grows 64 MiB at a time

_done = False
THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
# the settings under which a fault in a region asking for huge pages compacts memory at once
_COMPACTING_ON_FAULT = {"always", "madvise", "defer+madvise"}


def thp_compacts_on_fault(setting: str) -> bool:
    """Whether the THP defrag setting (the file's text, its choice in brackets) makes a
    fault in a region that asked for huge pages compact memory on the spot."""
    chosen = [word[1:-1] for word in setting.split() if word.startswith("[") and word.endswith("]")]
    return bool(chosen) and chosen[0] in _COMPACTING_ON_FAULT


def _numpy_huge_pages_off() -> None:
    """Where faults compact memory, numpy is told not to ask for huge pages: through its
    NUMPY_MADVISE_HUGEPAGE, read when it is imported (so a command that never needs numpy
    does not import it here, and the workers it starts inherit it), unless the user set it;
    numpy imported already is told directly."""
    try:
        with open(THP_DEFRAG) as f:
            setting = f.read()
    except OSError:
        return
    if not thp_compacts_on_fault(setting) or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return
    os.environ["NUMPY_MADVISE_HUGEPAGE"] = "0"
    if "numpy" in sys.modules:
        try:
            from numpy._core import multiarray  # numpy 2
        except ImportError:
            from numpy.core import multiarray  # type: ignore[no-redef]  # numpy 1.26
        multiarray._set_madvise_hugepage(False)


# the youngest generation's threshold for a simulation process (gc.get_threshold()[0])
COLLECTOR_THRESHOLD = 10_000


def tune_collector() -> None:
    """Collect the youngest generation every COLLECTOR_THRESHOLD allocations, the older
    ones as before (see the module's docstring); where it is set higher already, leave it."""
    young, middle, old = gc.get_threshold()
    if 0 < young < COLLECTOR_THRESHOLD:
        gc.set_threshold(COLLECTOR_THRESHOLD, middle, old)


def tune_allocator() -> bool:
    """Set the thresholds above (once); whether they are set."""
    global _done
    if _done:
        return True
    _numpy_huge_pages_off()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
        gnu = libc.gnu_get_libc_version  # glibc only
    except (OSError, AttributeError):
        return False
    del gnu
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = all(mallopt(param, value) == 1 for param, value in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, min(TRIM_THRESHOLD, 2**31 - 1)), (M_TOP_PAD, TOP_PAD)))
    _done = ok
    return ok
