"""Cost and energy (seeds 000 and 003): the platform catalog (platforms/*.yaml), dataset
sizes, hours / dollars / kWh of a run, and the cheapest configuration that meets a deadline.

`plan(...)` is a pure function of a scenario and a list of catalog platforms. It is exposed
two ways: as the scenario objective `plan:` (sim/whatif.py evaluate_scenario_extensions puts
its result under summary["plan"]) and as the command `gansim plan SCENARIO` (add_plan_parser /
run_plan below, wired by sim/cli.py).

Energy is GPU board power (the datasheet's maximum) times GPUs times hours, plus the host's
power where the catalog gives one: an upper bound, since a GPU waiting on communication draws
less than its board power."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, TypeVar

from pydantic import Field

from .config import Scenario, StorageSpec, Strict, parse, positive_int_list, read_yaml, shipped_dir
from .errors import UserInputError

T = TypeVar("T")

HOUR = 3600.0


# ----------------------------------------------------------------------------- datasets
@dataclass(frozen=True)
class Dataset:
    name: str
    images: int
    packed_bytes: float  # the dataset as torchvision reads it (one load per process)
    file_bytes: float  # one image as its own file (ImageFolder-style input)
    source: str


DATASETS: dict[str, Dataset] = {
    # MNIST training set: 60,000 images of 28x28 bytes; train-images-idx3-ubyte is a 16-byte
    # header plus 60,000 x 784 bytes = 47,040,016 bytes (Y. LeCun et al., "The MNIST database",
    # yann.lecun.com/exdb/mnist, file format section).
    "mnist": Dataset("mnist", 60_000, 47_040_016, 784,
                     "LeCun et al., MNIST database: 60,000 training images, idx file 16 + 60000x784 bytes"),
    # CIFAR-10 training set: 50,000 32x32x3 images; the binary version is 5 files of 10,000
    # rows of 3,073 bytes (1 label + 3,072 pixels) (A. Krizhevsky, cs.toronto.edu/~kriz/cifar.html).
    "cifar10": Dataset("cifar10", 50_000, 50_000 * 3_073, 3_072,
                       "Krizhevsky, CIFAR-10: 50,000 training images, binary rows of 3,073 bytes"),
    # CelebA: 202,599 face images (Liu et al., "Deep Learning Face Attributes in the Wild",
    # ICCV 2015; mmlab.ie.cuhk.edu.hk/projects/CelebA.html). The aligned JPEGs
    # (img_align_celeba.zip) are about 1.4 GB, i.e. about 7 kB per image: APPROXIMATE, from the
    # download listing, not measured here.
    "celeba": Dataset("celeba", 202_599, 1.4e9, 1.4e9 / 202_599,
                      "Liu et al. 2015, CelebA: 202,599 images; ~1.4 GB of aligned JPEGs (approximate)"),
}


def dataset_for(run: Any) -> Dataset:
    """The dataset of a RunSpec; `images` overrides the count (sizes scale with it)."""
    if run.dataset is not None:
        base = DATASETS[run.dataset]
        if run.images is None or run.images == base.images:
            return base
        return Dataset(base.name, run.images, base.packed_bytes * run.images / base.images, base.file_bytes,
                       base.source + f" (count overridden: {run.images})")
    return Dataset("custom", run.images, 0.0, 0.0, "images given in the scenario")


# ----------------------------------------------------------------------------- the catalog
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
    gpus: int = Field(ge=1)  # rank devices (GPUs, or CPU ranks of a pod)
    device: Literal["gpu", "cpu"] = "gpu"
    device_model: str = ""
    vcpus: int | None = Field(default=None, ge=1)
    gpu_power_W: float | None = Field(default=None, gt=0)
    host_power_W: float | None = Field(default=None, gt=0)
    on_demand_usd_per_hour: float | None = Field(default=None, ge=0)
    spot_usd_per_hour: float | None = Field(default=None, ge=0)
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


def storage_names() -> list[str]:
    return sorted(load_catalog().storage)


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
def platform_topology(name: str):
    """The platform's machine, built by its interconnect's topology generator."""
    from .topology import topology_from_dict

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


# ----------------------------------------------------------------------------- planning
def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """Which (time, cost) points no other point beats on both (ties kept)."""
    flags = []
    for i, (t, c) in enumerate(points):
        dominated = any((t2 <= t and c2 <= c) and (t2 < t or c2 < c) for j, (t2, c2) in enumerate(points) if j != i)
        flags.append(not dominated)
    return flags


def plan(scenario: Scenario, *, platforms: list[str], pricing: list[str] | None = None,
         deadline_hours: float | None = None, gpus: list[int] | None = None, algorithm: str | None = None,
         source: str | None = None, simulate: Callable[..., dict[str, Any]] | None = None) -> dict[str, Any]:
    """Simulate the scenario's workload on each catalog platform (at each GPU count, each
    pricing) for the scenario's whole run, and pick the cheapest that meets the deadline.

    Returns {"deadline_hours", "rows": [...], "chosen": row or None, "reason"}. Each row:
    platform, gpus, pricing, fits, step_time_s, time_to_train_s, hours, cost_usd, energy_kWh,
    goodput, meets_deadline, pareto. Preemption (scenario.preemption) applies to spot rows only;
    failures (scenario.failures) to all."""
    from .memory import memory_report
    from .scenario import reference_batch
    from .whatif import whole_run
    from .workloads import resolve_workload

    if scenario.run is None:
        raise UserInputError("planning needs 'run' (dataset or images, and epochs)", source=source, field="run")
    if deadline_hours is not None and deadline_hours <= 0:
        raise UserInputError(f"the deadline must be in the future (got {deadline_hours:g} hours)", source=source,
                             field="plan.deadline_hours")
    if simulate is None:
        from .scenario import simulate_point as simulate
    pricing = pricing or ["on_demand"]
    algorithm = algorithm or scenario.algorithms[0]
    workload = resolve_workload(scenario.workload, reference_batch(scenario), source=source)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for name in platforms:
        p = get_platform(name, source=source, field="plan.platforms")
        topo = platform_topology(name)
        counts = [g for g in (gpus or [p.gpus]) if g <= p.gpus]
        if gpus and len(counts) < len(gpus):
            notes.append(f"{name}: has {p.gpus} GPUs, skipped {[g for g in gpus if g > p.gpus]}")
        for g in counts:
            mem = memory_report(scenario, topo, g, workload)
            base = {"platform": name, "provider": p.provider, "kind": p.kind, "instance": p.instance,
                    "device_model": p.device_model, "gpus": g, "fits": mem["fits"],
                    "memory_peak_GB": mem["memory_peak_GB"]}
            if mem["fits"] is False:
                for price in pricing:
                    rows.append({**base, "pricing": price, "out_of_memory": True})
                continue
            try:
                record = simulate(scenario, topo, g, algorithm, source=source)
            except UserInputError as err:
                raise UserInputError(f"platform {name!r}: {err.message}", source=source,
                                     field="plan.platforms") from None
            for price in pricing:
                if price == "spot" and p.spot_usd_per_hour is None:
                    notes.append(f"{name}: no spot price in the catalog")
                    continue
                run = whole_run(scenario, topo, g, record, workload=workload, source=source,
                                with_preemption=(price == "spot"))
                cost = run_cost(p, g, run["time_to_train_s"], price)
                rows.append({**base, "pricing": price, "algorithm": algorithm, "step_time_s": record["step_time_s"],
                             "time_to_train_s": run["time_to_train_s"], "goodput": run["goodput"],
                             "failures": run.get("failures", 0), "preemptions": run.get("preemptions", 0),
                             **cost})
    timed = [r for r in rows if r.get("time_to_train_s") is not None]
    for r in timed:
        r["meets_deadline"] = None if deadline_hours is None else bool(r["hours"] <= deadline_hours)
    priced = [r for r in timed if r.get("cost_usd") is not None]
    for r, flag in zip(priced, pareto_front([(r["hours"], r["cost_usd"]) for r in priced])):
        r["pareto"] = flag
    candidates = [r for r in priced if r.get("meets_deadline") in (True, None)]
    chosen = min(candidates, key=lambda r: (r["cost_usd"], r["hours"])) if candidates else None
    if chosen is not None:
        chosen["chosen"] = True
        reason = (f"cheapest of {len(candidates)} priced configurations"
                  + (f" that finish within {deadline_hours:g} h" if deadline_hours is not None else ""))
    elif not priced:
        reason = "no configuration has a price in the catalog"
    else:
        fastest = min(priced, key=lambda r: r["hours"])
        reason = (f"no priced configuration meets the deadline of {deadline_hours:g} h; the fastest is "
                  f"{fastest['platform']} ({fastest['pricing']}) at {fastest['hours']:.2f} h")
    return {"deadline_hours": deadline_hours, "algorithm": algorithm, "rows": rows, "chosen": chosen,
            "reason": reason, "notes": notes}


def format_plan(result: dict[str, Any]) -> str:
    header = f"{'platform':<22} {'gpus':>4} {'pricing':<9} {'hours':>9} {'$':>10} {'kWh':>8} {'goodput':>7}  note"
    lines = [header, "-" * len(header)]
    for r in result["rows"]:
        if r.get("out_of_memory"):
            lines.append(f"{r['platform']:<22} {r['gpus']:>4} {r['pricing']:<9} {'':>9} {'':>10} {'':>8} {'':>7}  "
                         f"out of memory ({r['memory_peak_GB']:.1f} GB)")
            continue
        cost = "n/a" if r.get("cost_usd") is None else f"{r['cost_usd']:.2f}"
        kwh = "n/a" if r.get("energy_kWh") is None else f"{r['energy_kWh']:.2f}"
        note = []
        if r.get("chosen"):
            note.append("CHOSEN")
        if r.get("meets_deadline") is False:
            note.append("misses deadline")
        if r.get("pareto"):
            note.append("pareto")
        lines.append(f"{r['platform']:<22} {r['gpus']:>4} {r['pricing']:<9} {r['hours']:>9.3f} {cost:>10} {kwh:>8} "
                     f"{r['goodput']:>7.3f}  {', '.join(note)}")
    dl = result.get("deadline_hours")
    lines.append(f"deadline: {'none' if dl is None else f'{dl:g} h'}; {result['reason']}")
    lines.extend(f"note: {n}" for n in result.get("notes", []))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- gansim plan
def _csv(flag: str, allowed: list[str] | None = None) -> Callable[[str], list[str]]:
    def parse_list(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise UserInputError(f"expected a comma-separated list, got {text!r}", field=flag)
        if allowed is not None:
            for item in items:
                if item not in allowed:
                    raise UserInputError(f"unknown value {item!r}; allowed: {', '.join(allowed)}", field=flag)
        return items

    return parse_list


def _deadline_hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserInputError(f"expected a number of hours, got {text!r}", field="--deadline-hours") from None
    if not math.isfinite(value) or value <= 0:
        raise UserInputError(f"the deadline must be in the future: hours > 0, got {text!r}", field="--deadline-hours")
    return value


def _deadline_time(text: str) -> float:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UserInputError(f"expected an ISO 8601 time such as 2027-01-31T18:00, got {text!r}",
                             field="--deadline") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    hours = (when - datetime.now(timezone.utc)).total_seconds() / HOUR
    if hours <= 0:
        raise UserInputError(f"the deadline {when.isoformat()} is in the past", field="--deadline")
    return hours


def add_plan_parser(subparsers: Any) -> argparse.ArgumentParser:
    """`gansim plan SCENARIO`: the cheapest catalog configuration that trains the scenario's
    run before a deadline. Flags override the scenario's `plan:` section."""
    p = subparsers.add_parser("plan", help="cheapest platform configuration that meets a deadline")
    p.add_argument("scenario", metavar="SCENARIO", nargs="?",
                   help="a shipped scenario name or a scenario YAML file (needs run:)")
    p.add_argument("--platforms", metavar="LIST", help="comma-separated catalog platforms (default: the scenario's "
                   "plan.platforms)")
    p.add_argument("--pricing", metavar="LIST", help="on_demand, spot or both (default: the scenario's)")
    p.add_argument("--deadline-hours", metavar="H", help="finish within H hours")
    p.add_argument("--deadline", metavar="ISO_TIME", help="finish before this time (UTC unless a zone is given)")
    p.add_argument("--gpus", metavar="LIST", help="GPU counts to try on each platform (default: all its GPUs)")
    p.add_argument("--out", metavar="DIR", help="also write plan.json there")
    p.add_argument("--json", action="store_true", help="print the plan as JSON on stdout (the table goes to stderr)")
    p.add_argument("--list", action="store_true", help="list the catalog's platforms and exit")
    p.set_defaults(func=run_plan)
    return p


def run_plan(args: argparse.Namespace) -> int:
    from .scenario import load_scenario

    if getattr(args, "list", False):
        catalog = load_catalog()
        for name in platform_names():
            pl = catalog.platforms[name]
            print(f"{name:<24} {pl.gpus:>2} x {pl.device_model:<24} on-demand "
                  f"{_money(pl.on_demand_usd_per_hour)}/h  spot {_money(pl.spot_usd_per_hour)}/h  ({pl.prices_as_of})")
        return 0
    if not args.scenario:
        raise UserInputError("give a SCENARIO (or --list to see the catalog)", field="SCENARIO")
    loaded = load_scenario(args.scenario)
    s = loaded.scenario
    spec = s.plan
    platforms = _csv("--platforms", platform_names())(args.platforms) if args.platforms else (
        spec.platforms if spec else None)
    if not platforms:
        raise UserInputError("no platforms: give --platforms or a 'plan:' section in the scenario", field="--platforms")
    pricing = _csv("--pricing", ["on_demand", "spot"])(args.pricing) if args.pricing else (
        spec.pricing if spec else ["on_demand"])
    if args.deadline_hours is not None and args.deadline is not None:
        raise UserInputError("give --deadline-hours or --deadline, not both", field="--deadline")
    if args.deadline_hours is not None:
        deadline = _deadline_hours(args.deadline_hours)
    elif args.deadline is not None:
        deadline = _deadline_time(args.deadline)
    else:
        deadline = spec.deadline_in_hours() if spec else None
    gpus = positive_int_list(args.gpus, "--gpus") if args.gpus else (spec.gpus if spec else None)
    if s.run is None:
        raise UserInputError("planning needs 'run' (dataset or images, and epochs)", source=loaded.source, field="run")
    result = plan(s, platforms=platforms, pricing=pricing, deadline_hours=deadline, gpus=gpus,
                  algorithm=spec.algorithm if spec else None, source=loaded.source)
    result = {"scenario": s.name, **result}
    human = sys.stderr if args.json else sys.stdout
    print(f"plan for {s.name}: {s.run.epochs:g} epochs of {dataset_for(s.run).name} "
          f"({dataset_for(s.run).images} images)", file=human)
    print(format_plan(result), file=human)
    text = json.dumps(result, indent=2, default=str, allow_nan=False) + "\n"
    if args.out:
        from .results import atomic_write

        out = Path(args.out) / "plan.json"
        atomic_write(out, text)
        print(f"wrote {out}", file=sys.stderr)
    if args.json:
        sys.stdout.write(text)
    return 0


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.3f}"
