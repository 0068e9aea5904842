"""The platform catalog (platforms/*.yaml): cloud and private machines with prices and GPU
power, and storage classes; hours / dollars / kWh of a run on a platform.

Energy is GPU board power (the datasheet's maximum) times GPUs times hours, plus the host's
power where the catalog gives one: an upper bound, since a GPU waiting on communication draws
less than its board power."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, TypeVar

from pydantic import Field

from gansim.core.config import Count, RankCount, StorageSpec, Strict, parse
from gansim.core.errors import UserInputError
from gansim.core.files import read_yaml, shipped_dir
from gansim.core.units import HOUR
from gansim.topology.graph import Topology, topology_from_dict

T = TypeVar("T")

Watts = Annotated[float, Field(gt=0, le=1e6)]
UsdPerHour = Annotated[float, Field(ge=0, le=1e6)]


class Interconnect(Strict):
    generator: str
    params: dict[str, Any] = Field(default_factory=dict)


class PlatformSpec(Strict):
    name: str = Field(min_length=1)
    provider: str = ""
    instance: str = ""
    region: str = ""
    kind: Literal["public", "private", "local"] = "public"
    description: str = ""
    gpus: RankCount  # rank devices (GPUs, or CPU ranks of a pod)
    device: Literal["gpu", "cpu"] = "gpu"
    device_model: str = ""
    vcpus: Count | None = None
    gpu_power_W: Watts | None = None
    host_power_W: Watts | None = None
    on_demand_usd_per_hour: UsdPerHour | None = None
    spot_usd_per_hour: UsdPerHour | None = None
    prices_as_of: str = ""
    interconnect: Interconnect


class CatalogFile(Strict):
    provider: str = ""
    platforms: list[PlatformSpec] = Field(default_factory=list)
    storage: list[StorageSpec] = Field(default_factory=list)


@dataclass(frozen=True)
class Catalog:
    platforms: dict[str, PlatformSpec]
    storage: dict[str, StorageSpec]
    sources: dict[str, str]  # name -> the catalog file that defines it


def catalog_dir() -> Path:
    return shipped_dir("platforms")


def load_catalog_from(directory: Path) -> Catalog:
    platforms: dict[str, PlatformSpec] = {}
    storage: dict[str, StorageSpec] = {}
    sources: dict[str, str] = {}
    for path in sorted(directory.glob("*.yaml")):
        data: CatalogFile = parse(CatalogFile, read_yaml(path), str(path))
        for i, p in enumerate(data.platforms):
            if p.name in platforms:
                raise UserInputError(f"platform {p.name!r} is defined twice (also in {sources[p.name]})",
                                     source=str(path), field=f"platforms[{i}].name")
            platforms[p.name] = p
            sources[p.name] = str(path)
        for i, s in enumerate(data.storage):
            if s.name in storage:
                raise UserInputError(f"storage class {s.name!r} is defined twice", source=str(path),
                                     field=f"storage[{i}].name")
            storage[s.name] = s
            sources["storage:" + s.name] = str(path)
    return Catalog(platforms, storage, sources)


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    directory = catalog_dir()
    if not directory.is_dir():
        return Catalog({}, {}, {})
    return load_catalog_from(directory)


def platform_names() -> list[str]:
    return sorted(load_catalog().platforms)


def catalog_entry(table: Mapping[str, T], name: str, what: str, *, source: str | None, field: str) -> T:
    """`table[name]`, or the one-line error naming what is allowed."""
    try:
        return table[name]
    except KeyError:
        raise UserInputError(f"unknown {what} {name!r}; allowed: {', '.join(sorted(table))}",
                             source=source, field=field) from None


def get_platform(name: str, *, source: str | None = None, field: str = "platform") -> PlatformSpec:
    return catalog_entry(load_catalog().platforms, name, "platform", source=source, field=field)


@lru_cache(maxsize=64)
def platform_topology(name: str) -> Topology:
    """The platform's machine, built by its interconnect's topology generator."""
    p = get_platform(name)
    source = load_catalog().sources[name]
    topo = topology_from_dict({"name": name, "description": p.description or p.instance,
                               "generator": p.interconnect.generator, "params": p.interconnect.params}, source)
    if len(topo.ranks) != p.gpus:
        raise UserInputError(f"platform {name!r} says gpus: {p.gpus} but its interconnect builds "
                             f"{len(topo.ranks)} rank devices", source=source, field="platforms.gpus")
    return topo


def price_per_hour(platform: PlatformSpec, pricing: str) -> float | None:
    return platform.spot_usd_per_hour if pricing == "spot" else platform.on_demand_usd_per_hour


def instances_for(platform: PlatformSpec, gpus: int) -> int:
    return max(1, math.ceil(gpus / platform.gpus))


def run_cost(platform: PlatformSpec | None, gpus: int, seconds: float, pricing: str = "on_demand") -> dict[str, Any]:
    """Hours, dollars (whole instances billed per second) and kWh (board power upper bound)."""
    hours = seconds / HOUR
    out: dict[str, Any] = {"hours": hours}
    if platform is None:
        return out
    instances = instances_for(platform, gpus)
    price = price_per_hour(platform, pricing)
    out.update({
        "platform": platform.name,
        "pricing": pricing,
        "instances": instances,
        "price_usd_per_hour": None if price is None else price * instances,
        "cost_usd": None if price is None else price * instances * hours,
    })
    if platform.gpu_power_W is None:
        out["energy_kWh"] = None
    else:
        watts = gpus * platform.gpu_power_W + (instances * platform.host_power_W if platform.host_power_W else 0.0)
        out["energy_kWh"] = watts * hours / 1000.0
    return out
