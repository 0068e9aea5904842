"""What nccl-tests would print for a topology: each size simulated (the `nccl` algorithm by
default, on the flow model), with nccl-tests' own columns and definitions (NVIDIA/nccl-tests
src/common.cu, src/*.cu *GetCollByteCount / *GetBw, doc/PERFORMANCE.md):

- size: the bytes of the operation: the buffer for all_reduce and broadcast, the whole
  gathered (scattered) buffer, count x ranks elements, for all_gather (reduce_scatter);
- count: elements per rank (float, 4 bytes);
- time: microseconds; algbw = size / time; busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n
  (all_gather, reduce_scatter), 1 (broadcast).

nccl-tests times `iters` operations launched back to back and divides (src/common.cu), so a
row is the collective's own time unless the host cannot launch that fast. One thread that
drives several GPUs (nccl-tests' `-g G`) enqueues the collective on each of them and only at
ncclGroupEnd launches all G kernels, one after another ("ncclGroupEnd will launch the kernels
on all devices", NVIDIA/nccl#347; "one thread is now responsible for launching on all GPUs,
which needs context switches", NVIDIA/nccl#613): an operation then takes at least G launches.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gansim.collectives.closed_forms import algbw, bus_factor
from gansim.collectives.nccl import NCCL
from gansim.collectives.nccl_explain import Explanation
from gansim.core.config import TrainingOptions
from gansim.core.errors import UserInputError
from gansim.runner.collective import collective_times
from gansim.topology.graph import Topology

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
FLOAT_BYTES = 4
_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "all_gather": "none", "broadcast": "none"}


# What one thread spends on each GPU it drives, per collective, when it drives several (nccl-tests
# -g): NVIDIA/nccl-tests#123 measured all_reduce_perf -g 3 to 8 (one thread) of 8 to 128 bytes on a
# DGX A100 (NCCL_ALGO=Ring NCCL_MAX_NCHANNELS=1) at 13.76, 16.88, 20.8, 25.2, 29.5 and 33.7 us:
# from 4 GPUs on, 4.2 us times the GPUs to within 1 %, the launches and not the ring, whose NVLink
# steps NCCL rates at 0.6 us. A measured figure (that machine's CPU and NCCL), from a run that is
# not in the published set gansim validates against.
LAUNCH_US_PER_GPU = 4.2


@dataclass(frozen=True)
class NcclTestsRow:
    nbytes: int
    count: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    algorithm: str
    protocol: str
    channels: int
    explain: Explanation | None = None  # with --explain: what bounds the row
    # the host's launches for one operation when one thread drives several GPUs (LAUNCH_US_PER_GPU
    # x nccl-tests' -g); where above the collective's own time, it is the row's time
    launch_floor_us: float = 0.0


def sweep_sizes(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """-b, -e, -f: every size from min to max, multiplying by the factor (src/common.cu)."""
    if max_bytes < min_bytes:
        raise UserInputError(f"-e {max_bytes} is smaller than -b {min_bytes}", field="-e")
    if factor <= 1:
        raise UserInputError(f"expected a factor above 1, got {factor}", field="-f")
    sizes, size = [], float(min_bytes)
    while size <= max_bytes and len(sizes) < 200:
        sizes.append(int(size))
        size *= factor
    return sizes


def operation_bytes(op: str, size: int, ranks: int) -> tuple[int, int]:
    """(bytes the operation moves, elements per rank) of nccl-tests' -b/-e size: for
    all_gather / reduce_scatter, nccl-tests rounds each rank's share down to 16 bytes
    (AllGatherGetCollByteCount) and prints the whole buffer."""
    count = max(1, size // FLOAT_BYTES)
    if op in ("all_gather", "reduce_scatter"):
        per_rank = max(4, (count // ranks) & ~3)
        return per_rank * ranks * FLOAT_BYTES, per_rank
    return count * FLOAT_BYTES, count


def nccl_tests_table(topology: Topology, gpus: int, op: str, sizes: list[int], algorithm: str = NCCL,
                     options: TrainingOptions | None = None, source: str | None = None,
                     explain: bool = False, gpus_per_thread: int = 1) -> list[NcclTestsRow]:
    """Predict nccl-tests' rows for `op` on the first `gpus` ranks of `topology` (`explain`,
    for the nccl algorithm: each with what bounds it), each thread driving `gpus_per_thread`
    of them (nccl-tests' -g): an operation takes at least that many launches. One thread
    driving every GPU is one process, whose communicators nccl-tests makes with
    ncclCommInitAll (common.cu: "if (nProcs == 1)"; TrainingOptions.nccl_single_process)."""
    if op not in OPS:
        raise UserInputError(f"unknown collective {op!r}; allowed: {', '.join(OPS)}", field="--op")
    floor_us = launch_floor_us(gpus, gpus_per_thread)
    if gpus_per_thread == gpus > 1:
        options = (options or TrainingOptions()).model_copy(update={"nccl_single_process": True})
    moved = [operation_bytes(op, size, gpus) for size in sizes]
    times = collective_times(topology, gpus, op, [nbytes for nbytes, _ in moved], algorithm, "flow", options,
                             source=source, explain=explain)
    rows = []
    for (nbytes, count), t in zip(moved, times):
        seconds = max(t.seconds, floor_us * 1e-6) if t.seconds > 0 else 0.0
        bw = algbw(nbytes, seconds) if seconds > 0 else 0.0
        rows.append(NcclTestsRow(nbytes, count, seconds * 1e6, bw / 1e9, bw * bus_factor(op, gpus) / 1e9,
                                 t.algorithm, t.protocol, t.channels, t.explain, floor_us))
    return rows


def launch_floor_us(gpus: int, gpus_per_thread: int) -> float:
    """The least time of one operation when each thread launches on `gpus_per_thread` GPUs
    (one GPU a thread: its launch hides behind the collective before it, 0)."""
    if isinstance(gpus_per_thread, bool) or not isinstance(gpus_per_thread, int) or gpus_per_thread < 1:
        raise UserInputError(f"expected a whole number >= 1, got {gpus_per_thread!r}", field="--gpus-per-thread")
    if gpus_per_thread > gpus:
        raise UserInputError(f"{gpus_per_thread} GPUs a thread but {gpus} GPUs in all; allowed: 1 to {gpus}",
                             field="--gpus-per-thread")
    return LAUNCH_US_PER_GPU * gpus_per_thread if gpus_per_thread > 1 else 0.0


def format_table(rows: list[NcclTestsRow], op: str, header: str) -> str:
    """nccl-tests' layout (src/util.cu writeResultHeader / writeBenchmarkLinePreamble), one
    set of columns (a simulation has no in-place difference and nothing #wrong), plus what
    NCCL chose."""
    lines = [f"# {header}", "#",
             f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
             f"{'busbw':>6}   {'algo':>9} {'proto':>6} {'ch':>3}",
             f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
             f"{'(GB/s)':>6}"]
    root = 0 if op == "broadcast" else -1
    for r in rows:
        lines.append(f"{r.nbytes:>12}  {r.count:>12}  {'float':>8}  {_REDOP[op]:>6}  {root:>6}  "
                     f"{_time(r.time_us):>7}  {r.algbw_GBps:>6.2f}  {r.busbw_GBps:>6.2f}   "
                     f"{r.algorithm:>9} {r.protocol:>6} {r.channels or '':>3}")
        if r.explain is not None:  # a comment line, so that nccl-tests' columns stay as they are
            launches = (f"; host-bound: one thread launches on each of its GPUs, {r.launch_floor_us:.1f} us an "
                        f"operation, above the collective's {r.explain.time_us:.1f} us"
                        if r.launch_floor_us > r.explain.time_us else "")
            lines.append(f"#{'':>11}{r.explain.sentence()}{launches}")
    large = [r.busbw_GBps for r in rows if r.time_us > 0]
    lines.append(f"# Avg bus bandwidth    : {sum(large) / len(large) if large else 0.0:g}")
    return "\n".join(lines)


def row_json(row: NcclTestsRow, explain: bool = False) -> dict[str, Any]:
    """A row as JSON: nccl-tests' columns and NCCL's choice, and (`explain`) what bounds it
    (null where nothing moves: one GPU)."""
    out = asdict(row)
    del out["explain"]
    if explain:
        out["explain"] = None if row.explain is None else row.explain.to_json()
    return out


def _time(us: float) -> str:
    """nccl-tests prints times with 7 characters: 2 decimals below 10 ms, fewer above."""
    if us < 1e4:
        return f"{us:.2f}"
    if us < 1e5:
        return f"{us:.1f}"
    return f"{us:.0f}"
