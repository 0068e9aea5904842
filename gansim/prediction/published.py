"""Published nccl-tests measurements of real systems (validation/*.yaml, installed as
gansim.shipped_validation) and how the model predicts them from each system's topology alone.

Every file names one system, the NCCL version it ran, where its numbers come from (URL and
which table), the topology written from datasheet line rates, and the measured rows
(out-of-place columns: size, time, algbw, busbw). The prediction simulates each size with the
`nccl` algorithm on the flow model (gansim/prediction/nccl_tests_table.py) and compares busbw;
nothing in a file is read by the model except its topology and the sizes."""

from __future__ import annotations

import functools
import re
import statistics
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator

from gansim.collectives.nccl_tuning import NcclSettingError
from gansim.core.config import (NCCL_CHANNEL_BOUNDS, BandwidthGBps, PositiveByteCount, RankCount, Strict,
                                TrainingOptions, parse)
from gansim.core.errors import UserInputError
from gansim.core.files import read_yaml, shipped_dir
from gansim.core.nccl_env import ALGORITHM, PROTOCOL, canonical, without
from gansim.core.nccl_release import NEWEST_VERSION, OLDEST_VERSION, newest_release_before, parse_version
from gansim.core.units import MiB
from gansim.core.values import whole_number
from gansim.prediction.nccl_tests_table import OPS, nccl_tests_table
from gansim.topology.graph import Topology, topology_from_dict

# The goal's range: messages from 1 MiB up (issue 12)
LARGE_BYTES = MiB
# Size bands the error is reported by: small (latency-bound), mid (where a GAN's gradients
# travel: DDP buckets, per-variable all-reduces) and large (bandwidth-bound)
BANDS = (("64K-1M", 64 * 1024, MiB), ("1M-128M", MiB, 128 * MiB), (">=128M", 128 * MiB, None))


class PublishedSource(Strict):
    url: str = Field(min_length=8)
    where: str = Field(min_length=3)
    read: str = Field(min_length=4)
    # the day the source first showed the table (the commit that added it, a post's or a
    # comment's date): a run that does not state its NCCL release used one from before it
    dated: str | None = None

    @field_validator("read", "dated", mode="before")
    @classmethod
    def _unquoted_day(cls, value: Any) -> Any:
        """YAML reads an unquoted 2023-04-18 as a date: the same day, as text."""
        return value.isoformat() if isinstance(value, date) else value

    @field_validator("dated")
    @classmethod
    def _a_day(cls, day: str | None) -> str | None:
        if day is not None:
            try:
                if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", day):
                    raise ValueError(day)
                date.fromisoformat(day)
            except ValueError:
                raise ValueError(f"expected a day as YYYY-MM-DD, got {day!r}") from None
        return day


# size_B, time_us, algbw_GBps, busbw_GBps (nccl-tests' out-of-place columns); the measured
# busbw divides each error, so it is above zero
MeasuredPoint = tuple[PositiveByteCount, Annotated[float, Field(gt=0, le=1e12)], BandwidthGBps, BandwidthGBps]


class PublishedMeasurement(Strict):
    op: str
    points: list[MeasuredPoint] = Field(min_length=1)

    @field_validator("points", mode="before")
    @classmethod
    def _rows_as_tuples(cls, rows: Any) -> Any:
        """YAML has no tuples: a row is a list of four numbers (strict mode takes no list for a tuple)."""
        return [tuple(row) if isinstance(row, list) else row for row in rows] if isinstance(rows, list) else rows

    @field_validator("op")
    @classmethod
    def _known_op(cls, op: str) -> str:
        if op not in OPS:
            raise ValueError(f"unknown collective {op!r}; allowed: {', '.join(OPS)}")
        return op


# NCCL's environment variables a run set that change what the model predicts, and the
# values each may take (NCCL's names, any case); NCCL_ALGO and NCCL_PROTO are read as NCCL reads
# them (gansim/core/nccl_env.py); others are kept as the run's record only
_P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
APPLIED_ENV = {
    "NCCL_P2P_LEVEL": _P2P_LEVELS,
    "NCCL_P2P_DISABLE": ("0", "1"),
    "NCCL_TREE_THRESHOLD": ("0",),  # 2.4 only: 0 keeps all-reduces off the tree
    # transport/nvls.cc NCCL_PARAM(NvlsEnable, "NVLS_ENABLE", 2): 0 leaves comm->nvlsSupport 0,
    # so neither NVLS nor NVLS-Tree has channels; 1 and 2 (the default) leave NCCL to decide
    "NCCL_NVLS_ENABLE": ("0", "1", "2"),
}
_LISTS = {"NCCL_ALGO": ALGORITHM, "NCCL_PROTO": PROTOCOL}
# connect.cc ncclMinNchannels / ncclMaxNchannels: the NCHANNELS name wins over the legacy NRINGS
# one; the option each sets (its bounds: NCCL_CHANNEL_BOUNDS)
_CHANNEL_LIMITS = {"nccl_min_channels": ("NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS"),
                   "nccl_max_channels": ("NCCL_MAX_NCHANNELS", "NCCL_MAX_NRINGS")}


class PublishedSystem(Strict):
    name: str = Field(min_length=1)
    kind: str = Field(min_length=3)
    system: str = Field(min_length=10)
    nccl_version: str = Field(min_length=3)
    env: dict[str, str] = Field(default_factory=dict)
    source: PublishedSource
    topology: dict[str, Any]
    gpus: Annotated[RankCount, Field(ge=2)]
    # nccl-tests' -g: GPUs each thread drove (several: one thread launched on each of them)
    gpus_per_thread: Annotated[int, Field(ge=1, le=64)] = 1
    measurements: list[PublishedMeasurement] = Field(min_length=1)

    @field_validator("gpus_per_thread")
    @classmethod
    def _a_thread_drives_some_of_the_gpus(cls, value: int, info: ValidationInfo) -> int:
        gpus = info.data.get("gpus")
        if gpus is not None and value > gpus:
            raise ValueError(f"{value} GPUs a thread but {gpus} GPUs in all; allowed: 1 to {gpus}")
        return value

    @field_validator("env")
    @classmethod
    def _applied_env_is_understood(cls, env: dict[str, str]) -> dict[str, str]:
        """A variable the model applies must hold a value it can apply (one algorithm or
        protocol, a P2P level, 0 or 1); the rest are kept as they are."""
        for key, allowed in APPLIED_ENV.items():
            if key in env and env[key].strip().lower() not in {a.lower() for a in allowed}:
                raise ValueError(f"{key}={env[key]!r} is not one the model applies; allowed: {', '.join(allowed)}")
        for key, kind in _LISTS.items():
            if key in env:
                canonical(kind, env[key])  # its ValueError names the variable and what is allowed
        for option, names in _CHANNEL_LIMITS.items():
            least, most = NCCL_CHANNEL_BOUNDS[option]
            for key in (k for k in names if k in env):
                try:
                    whole_number(env[key], key, minimum=least, maximum=most)
                except UserInputError:
                    raise ValueError(f"{key}={env[key]!r} is not one the model applies; allowed: a whole number "
                                     f"from {least} to {most}") from None
        return env


@dataclass(frozen=True)
class PublishedFile:
    spec: PublishedSystem
    path: str

    def topology(self) -> Topology:
        """The file's topology, with the NCCL_P2P_LEVEL its run set (the nccl algorithm's
        TopologyFile.nccl_p2p_level; NCCL_P2P_DISABLE=1 is level LOC, no peer-to-peer between
        two GPUs) unless the topology gives one itself."""
        data = dict(self.spec.topology)
        env = self.spec.env
        if "NCCL_P2P_LEVEL" in env:
            data.setdefault("nccl_p2p_level", env["NCCL_P2P_LEVEL"].strip().upper())
        elif env.get("NCCL_P2P_DISABLE", "0").strip() == "1":
            data.setdefault("nccl_p2p_level", "LOC")  # no peer-to-peer between any two GPUs
        return topology_from_dict(data, self.path)

    @property
    def model_version(self) -> str:
        """The NCCL release whose tuning model predicts this file: the one it ran; the
        oldest modelled for an older one; where the source does not say, the newest release
        from before the source's day (`source.dated`), else the newest modelled."""
        try:
            ran = parse_version(self.spec.nccl_version)
        except ValueError:  # "not stated"
            dated = self.spec.source.dated
            return newest_release_before(dated) if dated else NEWEST_VERSION
        if ran < parse_version(OLDEST_VERSION):
            return OLDEST_VERSION
        return min(self.spec.nccl_version, NEWEST_VERSION, key=parse_version)

    def options(self) -> TrainingOptions:
        """The run's NCCL release, and the choices its environment allowed: NCCL_ALGO and
        NCCL_PROTO, less NVLS and NVLS-Tree where NCCL_NVLS_ENABLE=0, or NCCL_TREE_THRESHOLD=0,
        which kept NCCL 2.4 off its tree (init.cc; releases from 2.5 no longer read it); and
        the channel limits it set (NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS)."""
        env = self.spec.env
        algo, proto = (canonical(kind, env[key]) if key in env else None for key, kind in _LISTS.items())
        if env.get("NCCL_NVLS_ENABLE", "").strip() == "0":
            algo = without(ALGORITHM, algo, ("nvls", "nvls_tree"))
        if env.get("NCCL_TREE_THRESHOLD") == "0" and parse_version(self.model_version) < (2, 5, 0):
            algo = "ring"
        limits = {option: int(env[key]) for option, names in _CHANNEL_LIMITS.items()
                  for key in reversed(names) if key in env}  # the NCHANNELS name last, so it wins
        return TrainingOptions(nccl_version=self.model_version, nccl_algo=algo, nccl_proto=proto, **limits)


def load_published(name: str | None = None, directory: Path | None = None) -> list[PublishedFile]:
    """Every shipped published measurement, or the one named."""
    folder = directory or shipped_dir("validation")
    names = sorted(p.stem for p in folder.glob("*.yaml"))
    if name is not None:
        if name not in names:
            raise UserInputError(f"unknown published system {name!r}; shipped: {', '.join(names)}",
                                 field="--published")
        names = [name]
    out = []
    for stem in names:
        path = folder / f"{stem}.yaml"
        spec: PublishedSystem = parse(PublishedSystem, read_yaml(path), str(path))
        if spec.name != stem:
            raise UserInputError(f"name {spec.name!r} differs from the file name {stem!r}", source=str(path),
                                 field="name")
        out.append(PublishedFile(spec, str(path)))
    return out


@dataclass(frozen=True)
class PointComparison:
    system: str
    op: str
    nbytes: int
    measured_busbw_GBps: float
    predicted_busbw_GBps: float
    predicted_time_us: float
    algorithm: str
    protocol: str
    channels: int

    @property
    def error(self) -> float:
        """(predicted - measured) / measured busbw (the same as for algbw and, inverted, time)."""
        return (self.predicted_busbw_GBps - self.measured_busbw_GBps) / self.measured_busbw_GBps


def compare(published: PublishedFile) -> list[PointComparison]:
    """Predict every measured point of one file from its topology alone."""
    spec = published.spec
    topology = published.topology()
    rows = []
    for m in spec.measurements:
        try:
            predicted = nccl_tests_table(topology, spec.gpus, m.op, [size for size, *_ in m.points],
                                         options=published.options(), source=published.path,
                                         gpus_per_thread=spec.gpus_per_thread)
        except NcclSettingError as err:
            raise UserInputError(err.message, source=published.path, field=f"env.{err.variable}") from None
        for (size, _time, _algbw, busbw), p in zip(m.points, predicted):
            rows.append(PointComparison(spec.name, m.op, size, busbw, p.busbw_GBps, p.time_us, p.algorithm,
                                        p.protocol, p.channels))
    return rows


@functools.lru_cache(maxsize=1)
def shipped_comparisons() -> tuple[list[PublishedFile], tuple[PointComparison, ...]]:
    """Every shipped published file and every point of theirs compared (`compare`), worked
    out once per process: the docs' tables and the band errors both read them."""
    files = load_published()
    return files, tuple(row for published in files for row in compare(published))


def predicted_curves(published: PublishedFile) -> dict[str, list[tuple[int, float]]]:
    """Per measured collective, the predicted busbw from 1 KiB to the largest measured size
    (powers of two): the curve the report draws the measured points over."""
    spec = published.spec
    topology = published.topology()
    out = {}
    for m in spec.measurements:
        largest = max(size for size, *_ in m.points)
        sizes = [1 << k for k in range(10, max(11, largest.bit_length()))]
        rows = nccl_tests_table(topology, spec.gpus, m.op, sizes, options=published.options(), source=published.path,
                                gpus_per_thread=spec.gpus_per_thread)
        out[m.op] = [(r.nbytes, r.busbw_GBps) for r in rows]
    return out


@dataclass(frozen=True)
class ErrorSummary:
    points: int
    median_abs_error: float
    worst_abs_error: float


def summarize(rows: list[PointComparison], min_bytes: int = LARGE_BYTES, max_bytes: int | None = None) -> ErrorSummary:
    """|error| over the points of at least `min_bytes` (and below `max_bytes`): their count,
    median and worst."""
    errors = [abs(r.error) for r in rows if r.nbytes >= min_bytes and (max_bytes is None or r.nbytes < max_bytes)]
    if not errors:
        return ErrorSummary(0, float("nan"), float("nan"))
    return ErrorSummary(len(errors), statistics.median(errors), max(errors))


def _band_cells(rows: list[PointComparison]) -> str:
    cells = []
    for _, low, high in BANDS:
        b = summarize(rows, low, high)
        cells.append(f"{b.points:>4} {b.median_abs_error:>7.1%} {b.worst_abs_error:>7.1%}" if b.points
                     else f"{0:>4} {'-':>7} {'-':>7}")
    return "  ".join(cells)


def error_table(files: list[PublishedFile], rows: list[PointComparison]) -> str:
    """The table `gansim validate --published` prints: one line per system (its points of 1 MiB
    and more, then per size band: points, median and worst |error|), then every point of 1 MiB
    and more, then the summary over all systems."""
    bands = "  ".join(f"{name + ': n median worst':>20}" for name, _, _ in BANDS)
    lines = [f"{'system':<28} {'kind':<30} {'NCCL':>10} {'model':>7} {'points':>6} {'median |err|':>13} "
             f"{'worst |err|':>12}   {bands}"]
    for f in files:
        mine = [r for r in rows if r.system == f.spec.name]
        s = summarize(mine)
        lines.append(f"{f.spec.name:<28} {f.spec.kind:<30} {f.spec.nccl_version:>10} {f.model_version:>7} "
                     f"{s.points:>6} {s.median_abs_error:>12.1%} {s.worst_abs_error:>12.1%}   {_band_cells(mine)}")
    total = summarize(rows)
    lines.append(f"{'all systems':<28} {'':<30} {'':>10} {'':>7} {total.points:>6} {total.median_abs_error:>12.1%} "
                 f"{total.worst_abs_error:>12.1%}   {_band_cells(rows)}")
    lines.append("")
    lines.append(f"{'system':<28} {'op':<14} {'size (B)':>12} {'measured':>9} {'predicted':>10} {'error':>8}  "
                 f"NCCL's choice   (busbw in GB/s)")
    for r in rows:
        if r.nbytes < LARGE_BYTES:
            continue
        lines.append(f"{r.system:<28} {r.op:<14} {r.nbytes:>12} {r.measured_busbw_GBps:>9.2f} "
                     f"{r.predicted_busbw_GBps:>10.2f} {r.error:>+8.1%}  {r.algorithm}/{r.protocol} x{r.channels}")
    return "\n".join(lines)


def _bands_dict(rows: list[PointComparison]) -> list[dict[str, Any]]:
    out = []
    for name, low, high in BANDS:
        b = summarize(rows, low, high)
        out.append({"band": name, "min_size_B": low, "max_size_B": high, "points": b.points,
                    "median_abs_error": b.median_abs_error if b.points else None,
                    "worst_abs_error": b.worst_abs_error if b.points else None})
    return out


def as_dict(files: list[PublishedFile], rows: list[PointComparison]) -> dict[str, Any]:
    """The comparison as validation.json (and `--json`) carry it."""
    total = summarize(rows)
    return {"summary": {"min_size_B": LARGE_BYTES, "points": total.points, "median_abs_error": total.median_abs_error,
                        "worst_abs_error": total.worst_abs_error, "bands": _bands_dict(rows)},
            "systems": [{"name": f.spec.name, "kind": f.spec.kind, "nccl_version": f.spec.nccl_version,
                         "model_nccl_version": f.model_version,
                         "nccl_algo": options.nccl_algo, "nccl_proto": options.nccl_proto,
                         "nccl_min_channels": options.nccl_min_channels,
                         "nccl_max_channels": options.nccl_max_channels,
                         "bands": _bands_dict([r for r in rows if r.system == f.spec.name]),
                         "system": f.spec.system, "source": f.spec.source.model_dump(),
                         **dict(zip(("points", "median_abs_error", "worst_abs_error"),
                                    (lambda s: (s.points, s.median_abs_error, s.worst_abs_error))(
                                        summarize([r for r in rows if r.system == f.spec.name]))))}
                        for f, options in ((f, f.options()) for f in files)],
            "points": [{"system": r.system, "op": r.op, "size_B": r.nbytes, "measured_busbw_GBps": r.measured_busbw_GBps,
                        "predicted_busbw_GBps": r.predicted_busbw_GBps, "error": r.error, "algorithm": r.algorithm,
                        "protocol": r.protocol, "channels": r.channels} for r in rows]}
