"""A sweep's partial state: every finished point kept on disk as it finishes, so that the
same sweep run again after a kill (SIGKILL, a power loss, a full disk) simulates only the
points still missing.

Each point is one file named by its key: a hash of everything its result depends on (the
gansim version, the scenario as resolved for its sweep combination, the bytes of every file
that scenario names, the machine it runs on, its GPU count, algorithm, detail level and the
hooks that extend it). A point whose scenario, topology or option changed has another key,
so a stale point is never reused: it is simply not found."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from gansim.core.config import NodeSpec
from gansim.core.errors import OutputError
from gansim.core.version import __version__
from gansim.runner.point import PointHooks, RunRequest
from gansim.runner.record import RunRecord
from gansim.runner.scenario import LoadedScenario
from gansim.topology.graph import Topology

# (record, details) as one point's worker returns them
PointResult = tuple[RunRecord, dict[str, Any]]

_SUFFIX = ".json"


class PointStore:
    """Finished points in a folder, one JSON file per point.

    Each file is written beside its place and renamed into it, so that no reader (another
    run into the same folder) sees half of one. It is not flushed to disk point by point
    (two fsyncs per point would cost a sweep of small points more than its simulation): a
    power loss may leave a renamed file empty or cut, which `get` finds unreadable and the
    point is simulated again. The results themselves are flushed (core.files.atomic_write)."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)

    def get(self, key: str) -> PointResult | None:
        """The point kept under `key`, or None (never kept, or unreadable: a file cut by a
        crash or damaged outside gansim is simulated again rather than trusted)."""
        path = self.folder / f"{key}{_SUFFIX}"
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
            record, details = kept["record"], kept["details"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if kept.get("key") != key or not (isinstance(record, dict) and isinstance(details, dict)):
            return None
        try:
            return RunRecord.from_dict(record), details
        except (KeyError, TypeError, ValueError):
            return None  # a record of another shape (damaged outside gansim): simulated again

    def put(self, key: str, result: PointResult) -> None:
        record, details = result
        text = json.dumps({"key": key, "gansim_version": __version__, "record": record.to_dict(),
                           "details": details})
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.folder)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                os.replace(tmp, self.folder / f"{key}{_SUFFIX}")
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise OutputError(f"cannot keep a finished point in {self.folder}: {exc.strerror or exc}; the points "
                              "kept so far stay there and the same command resumes from them") from None

    def __len__(self) -> int:
        return sum(1 for _ in self.folder.glob(f"*{_SUFFIX}")) if self.folder.is_dir() else 0

    def clear(self) -> None:
        """Forget every kept point (`--fresh`)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def point_keys(loaded: LoadedScenario, requests: list[RunRequest]) -> list[str]:
    """Each request's key (see the module's docstring); a sweep combination's part is
    computed once for all its points."""
    by_combination: dict[tuple, str] = {}
    keys = []
    for req in requests:
        if req.overrides not in by_combination:
            by_combination[req.overrides] = combination_digest(loaded, req.overrides)
        point = {
            "combination": by_combination[req.overrides],
            "gpus": req.gpus,
            "algorithm": req.algorithm,
            "detail": req.detail,
            "baseline_only": req.baseline_only,
            "hooks": _hook_names(req.hooks),
        }
        keys.append(_digest(point))
    return keys


def combination_digest(loaded: LoadedScenario, overrides: tuple[tuple[str, Any], ...]) -> str:
    """What a sweep combination's points depend on besides their own fields."""
    scenario = loaded.with_overrides(dict(overrides))
    resolved = scenario.model_dump(mode="json")
    return _digest({
        "gansim_version": __version__,
        "scenario": resolved,
        "overrides": [[axis, value] for axis, value in overrides],
        "files": _named_files(resolved, loaded.base_dir),
        "topology": topology_digest(loaded.topology(scenario)),
    })


# every node's model_dump(mode="json") in one call
_NODE_LIST: TypeAdapter[list[NodeSpec]] = TypeAdapter(list[NodeSpec])


def topology_digest(topology: Topology) -> str:
    """The machine as simulated: its devices, links, bandwidths and latencies (a machine
    made in memory, such as a calibration profile's, has no file to hash)."""
    h = hashlib.sha256()
    h.update(json.dumps({"name": topology.name, "nccl_version": topology.nccl_version,
                         "nccl_p2p_level": topology.nccl_p2p_level, "ranks": topology.ranks}, sort_keys=True).encode())
    # the nodes by pydantic's own JSON writer, fields in the model's order (a large machine's
    # tens of thousands of nodes at a quarter of the cost of json's sorted dump); the links as
    # the arrays the simulation reads: each directed link's ends (positions of the nodes just
    # written), kind, capacity and latency (a json dump of 80,000 link tuples cost a tenth of a
    # second); each part after its length, so that no two parts run into each other
    for part in (_NODE_LIST.dump_json(list(topology.nodes.values())), topology.ends.tobytes(),
                 "\n".join(topology.link_kinds).encode(), topology.capacity_Bps.tobytes(),
                 topology.latency_s.tobytes()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _named_files(value: Any, base_dir: str) -> dict[str, str]:
    """The sha256 of every existing file a string of the resolved scenario names (a
    topology, a profile, a platform, a trace), by that string: an edited file makes
    another key."""
    found: dict[str, str] = {}

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)
        elif isinstance(v, str) and v and len(v) < 4096 and v not in found:
            path = Path(v) if Path(v).is_absolute() else Path(base_dir) / v
            try:
                if path.is_file():
                    found[v] = hashlib.sha256(path.read_bytes()).hexdigest()
            except (OSError, ValueError):
                pass  # not a path (a name with characters no path may hold)

    walk(value)
    return found


def _hook_names(hooks: PointHooks) -> list[str | None]:
    return [None if f is None else f"{f.__module__}.{f.__qualname__}" for f in (hooks.extend, hooks.details)]


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]
