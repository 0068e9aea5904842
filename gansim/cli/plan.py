"""`gansim plan SCENARIO`: the cheapest catalog configuration that trains the scenario's
run before a deadline. Flags override the scenario's `plan:` section."""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from gansim.core.values import positive_int_list
from gansim.core.errors import UserInputError
from gansim.core.files import atomic_write, check_output_dir
from gansim.core.units import HOUR
from gansim.outputs.names import PLAN_OUTPUT
from gansim.whatif.catalog import load_catalog, platform_names
from gansim.whatif.datasets import dataset_for
from gansim.whatif.deadline_plan import format_plan, plan
from gansim.whatif.study import load_scenario


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


MAX_DEADLINE_HOURS = 1e6  # as the scenario's plan.deadline_hours (gansim.core.config.PlanSpec)


def _deadline_hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserInputError(f"expected a number of hours, got {text!r}", field="--deadline-hours") from None
    if not math.isfinite(value) or value <= 0:
        raise UserInputError(f"the deadline must be in the future: hours > 0, got {text!r}", field="--deadline-hours")
    if value > MAX_DEADLINE_HOURS:
        raise UserInputError(f"expected at most {MAX_DEADLINE_HOURS:g} hours, got {text!r}", field="--deadline-hours")
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


def register(subparsers: Any) -> None:
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


def run_plan(args: argparse.Namespace) -> int:
    if getattr(args, "list", False):
        catalog = load_catalog()
        for name in platform_names():
            pl = catalog.platforms[name]
            print(f"{name:<24} {pl.gpus:>2} x {pl.device_model:<24} on-demand "
                  f"{_hourly(pl.on_demand_usd_per_hour)}  spot {_hourly(pl.spot_usd_per_hour)}  ({pl.prices_as_of})")
        return 0
    if not args.scenario:
        raise UserInputError("give a SCENARIO (or --list to see the catalog)", field="SCENARIO")
    if args.out:
        check_output_dir(Path(args.out))
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
        out = Path(args.out) / PLAN_OUTPUT
        atomic_write(out, text)
        print(f"wrote {out}", file=sys.stderr)
    if args.json:
        sys.stdout.write(text)
    return 0


def _hourly(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.3f}/h"
