"""Scenarios: read and validate a scenario file, check every name it refers to, and expand
its axes (the sweep) into the scenario each combination runs."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from gansim.collectives.communicator import COST_MODELS, EQUAL_GROUP_ALGORITHMS, machine_groups
from gansim.collectives.nccl import NCCL, check_settings
from gansim.collectives.nccl_tuning import NcclSettingError
from gansim.collectives.schedules import ALGORITHMS
from gansim.core import limits
from gansim.core.config import Scenario, parse
from gansim.core.errors import UserInputError
from gansim.core.files import read_yaml, resolve_file
from gansim.topology.graph import Topology, load_topology
from gansim.training.workloads import scenario_workload

# sweep axes that live under the scenario's `options:`
OPTION_AXES = ("overlap", "gradient_sync", "gradient_dtype", "chunks")


@dataclass(frozen=True)
class LoadedScenario:
    scenario: Scenario
    source: str  # the file it came from (or "<name>" for a shipped one)
    base_dir: str  # relative paths inside it are taken from here
    # machines made by the caller rather than read from a file, by the name a scenario's
    # `topology` gives them (the machine a calibration profile describes: "calibrated")
    machines: tuple[tuple[str, Topology], ...] = ()
    # such a machine as a run of that many ranks finds it (name, ranks, machine), where it
    # differs with the rank count: the calibrated host whose ranks outnumber its cores
    machines_at_ranks: tuple[tuple[str, int, Topology], ...] = ()

    def with_overrides(self, overrides: dict[str, Any]) -> Scenario:
        if not overrides:
            return self.scenario
        data = self.scenario.model_dump(exclude_none=False)
        data.pop("sweep")
        for axis, value in overrides.items():
            if axis in OPTION_AXES:
                data["options"] = {**data["options"], axis: value}
            else:
                data[axis] = value
        try:
            return parse(Scenario, data, self.source)
        except UserInputError as err:
            raise UserInputError(err.message, source=self.source, field=f"sweep.{err.field}") from None

    def combinations(self) -> list[tuple[dict[str, Any], Scenario]]:
        """Every sweep combination (its overrides) with the scenario it runs."""
        return [(overrides, self.with_overrides(overrides)) for overrides in sweep_combinations(self.scenario)]

    def topology(self, scenario: Scenario | None = None, field: str = "topology", ranks: int | None = None) -> Topology:
        """The topology `scenario` (default: the scenario as written) names, as in its file
        (or as a run of `ranks` ranks finds it)."""
        value = (scenario or self.scenario).topology
        for name, at, machine in self.machines_at_ranks:
            if value == name and ranks == at:
                return machine
        for name, machine in self.machines:
            if value == name:
                return machine
        return topology_for(value, self.base_dir, self.source, field)


def read_scenario(name_or_path: str,
                  prepare: Callable[[LoadedScenario], LoadedScenario] | None = None) -> LoadedScenario:
    """A shipped scenario name or a YAML path, validated, with every name it refers to that
    the simulation needs (algorithms, topologies, workloads) checked; `prepare` (from the
    layers above: a calibration profile's figures) changes it before the check."""
    path = resolve_file(name_or_path, "scenarios")
    return scenario_from_data(read_yaml(path), str(path), str(path.resolve().parent), prepare)


def scenario_from_data(data: Any, source: str, base_dir: str,
                       prepare: Callable[[LoadedScenario], LoadedScenario] | None = None) -> LoadedScenario:
    """A scenario given as the mapping its YAML file holds, validated as read_scenario
    validates a file; `source` names it in errors, and relative paths inside it are taken
    from `base_dir`."""
    scenario: Scenario = parse(Scenario, data, source)
    loaded = LoadedScenario(scenario, source, base_dir)
    if prepare is not None:
        loaded = prepare(loaded)
    validate_references(loaded)
    return loaded


def validate_references(loaded: LoadedScenario) -> None:
    """Check every name the scenario refers to, and its size against the limits, before
    simulating anything."""
    s, src = loaded.scenario, loaded.source
    limits.RUNS.check(planned_runs(s), source=src, field="sweep" if s.sweep else "gpus")
    for i, name in enumerate(s.algorithms):
        ALGORITHMS.get(name, source=src, field=f"algorithms[{i}]")
    # what is written beside a sweep of it is something the user gave too
    if "topology" in s.sweep:
        loaded.topology(s)
    if "workload" in s.sweep:
        scenario_workload(s, source=src)
    nccl_checked: dict[tuple, Topology] = {}
    for overrides, scenario in loaded.combinations():
        COST_MODELS.get(scenario.cost_model, source=src,
                        field="sweep.cost_model" if "cost_model" in overrides else "cost_model")
        topo = loaded.topology(scenario, "sweep.topology" if "topology" in overrides else "topology")
        if max(scenario.gpus) > len(topo.ranks):
            raise UserInputError(
                f"{max(scenario.gpus)} GPUs asked but topology {topo.name!r} has {len(topo.ranks)}",
                source=src, field="gpus",
            )
        if scenario.scaling == "strong" and scenario.global_batch is not None \
                and scenario.global_batch < max(scenario.gpus):
            raise UserInputError(
                f"a global batch of {scenario.global_batch} samples cannot be split over {max(scenario.gpus)} GPUs, "
                f"each of which trains on at least one; allowed: {max(scenario.gpus)} or more",
                source=src, field="sweep.global_batch" if "global_batch" in overrides else "global_batch")
        for algorithm in set(scenario.algorithms) & set(EQUAL_GROUP_ALGORITHMS):
            for gpus in scenario.gpus:
                machine_groups(topo, gpus, algorithm, source=src, field="gpus")
        workload = scenario_workload(scenario, source=src)
        if NCCL in scenario.algorithms:
            _check_nccl_settings(loaded, scenario, overrides, workload, nccl_checked)


def _check_nccl_settings(loaded: LoadedScenario, scenario: Scenario, overrides: dict[str, Any],
                         workload: Any, checked: dict[tuple, Topology]) -> None:
    """NCCL_ALGO / NCCL_PROTO (options.nccl_algo, nccl_proto) that leave one of the step's
    collectives nothing NCCL runs, on any GPU count: refused before simulating, as NCCL
    would refuse them at that collective (nccl_tuning.candidates). `checked`: the cases
    already checked for earlier sweep combinations (each is one NCCL machine to build),
    holding their topologies so that no other takes the same id."""
    opts = scenario.options
    buffers = getattr(workload, "d_buffer_bytes", 0) + getattr(workload, "g_buffer_bytes", 0)
    collectives = ("all_reduce", "broadcast") if opts.broadcast_buffers and buffers > 0 else ("all_reduce",)
    for gpus in scenario.gpus:
        topology = loaded.topology(scenario, ranks=gpus)
        case = (id(topology), gpus, collectives, opts.nccl_algo, opts.nccl_proto, opts.nccl_version,
                opts.nccl_single_process)
        if gpus < 2 or case in checked:
            continue
        checked[case] = topology
        try:
            check_settings(topology, gpus, collectives, opts.nccl_algo, opts.nccl_proto,
                           opts.nccl_version, opts.nccl_single_process)
        except NcclSettingError as err:
            where = "".join(f", with {axis} {value}" for axis, value in overrides.items())
            raise UserInputError(f"{err.message} (at {gpus} GPUs{where})", source=loaded.source,
                                 field=f"options.{err.option}") from None


def planned_runs(s: Scenario) -> int:
    """How many points the scenario simulates, 1-GPU baselines included (counted, not
    enumerated: a sweep may multiply to millions)."""
    combinations = math.prod(len(values) for values in s.sweep.values())
    return combinations * len(s.algorithms) * len(s.gpus) + planned_baselines(s)


def planned_baselines(s: Scenario) -> int:
    """How many of the planned runs are 1-GPU baselines the scenario does not list: one per
    sweep combination, for its speed-ups."""
    return 0 if 1 in s.gpus else math.prod(len(values) for values in s.sweep.values())


def sweep_combinations(s: Scenario) -> list[dict[str, Any]]:
    axes = list(s.sweep)
    return [dict(zip(axes, values)) for values in itertools.product(*(s.sweep[a] for a in axes))]


def _relative(value: str, base_dir: str) -> str:
    candidate = Path(value)
    if not candidate.is_absolute() and (base_dir and (Path(base_dir) / candidate).is_file()):
        return str(Path(base_dir) / candidate)
    return value


@lru_cache(maxsize=32)
def _load_topology_cached(path_or_name: str, source: str, field: str, version: tuple[int, int]) -> Topology:
    return load_topology(path_or_name, source=source, field=field)


def topology_for(value: str, base_dir: str, source: str, field: str = "topology") -> Topology:
    path_or_name = _relative(value, base_dir)
    try:  # a file edited since it was read (a library user's session) is read again
        stat = Path(path_or_name).stat()
        version = (stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError):
        version = (0, 0)  # a shipped name
    return _load_topology_cached(path_or_name, source, field, version)
