"""What `gansim predict` spends its events on: each run it plays (the first, then any played
again with part of it on the flow network), and the max-min problems the flow network solves:
over the whole network (how many flows each covers, and how large the groups of flows that
share a resource are), or for the groups of flows an event changed (how many flows).

    python bench/predict_events.py [--profile PROFILE.json] [--world-size 1024] [--every 25]
                                   [--markdown docs/performance.md [--block predict-events]]

Runs the command in this process with counters around gansim's own functions; its times are
those of the counted run (the whole command's time is bench/shapes.py's). Without --profile
a tiny calibration of this machine's CPU host is made first (bench/shapes.py's)."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shapes import calibrated_profile, write_markdown  # noqa: E402  (a script beside this one)

import gansim.network.flows as flows  # noqa: E402
from gansim.network.engine import COMPUTE, FLOW, moved_alone  # noqa: E402
import gansim.training.step as step  # noqa: E402
from gansim.cli.main import main as gansim_main  # noqa: E402
from gansim.topology.paths import components  # noqa: E402


def largest_group(pair_flow: np.ndarray, pair_res: np.ndarray, count: int) -> int:
    """Flows in the largest set joined by shared resources (flows and resources as vertices,
    each pair an edge)."""
    resources, at = np.unique(pair_res, return_inverse=True)
    label = components(count + resources.size, pair_flow, count + at.ravel())
    return int(np.bincount(label[:count]).max()) if count else 0


def count_events(profile: Path, world_size: int, every: int) -> tuple[list[dict], list[int], list[int], list[int],
                                                                     float]:
    runs: list[dict] = []
    solved: list[int] = []
    groups: list[int] = []
    grouped: list[int] = []
    solve, solve_group, simulate = flows.max_min_levels, flows.group_levels, step._simulate

    def counted_solve(pair_flow, pair_res, count, capacity, pair_weight=None):
        solved.append(count)
        if len(solved) % every == 0:
            groups.append(largest_group(pair_flow, pair_res, count))
        return solve(pair_flow, pair_res, count, capacity, pair_weight)

    def counted_group(routes, capacity):
        grouped.append(len(routes))
        return solve_group(routes, capacity)

    def counted_simulate(*args, **kwargs):
        began = time.perf_counter()
        timeline = simulate(*args, **kwargs)
        graph = timeline.graph
        network = timeline.cluster.network
        runs.append({"ranks": timeline.cluster.ranks, "heads": dict(kwargs.get("heads") or {}),
                     "seconds": time.perf_counter() - began, "tasks": int(graph.kind.size),
                     "flows": int((graph.kind == FLOW).sum()),
                     "apart": int(moved_alone(graph.kind, graph.route, graph.category).sum()),
                     "compute_flows": int(((graph.kind == FLOW) & (graph.category == COMPUTE)).sum()),
                     "events": int(timeline.execution.events), "rates": int(network.rate_computations),
                     "groups": int(network.group_computations)})
        return timeline

    flows.max_min_levels, flows.group_levels, step._simulate = counted_solve, counted_group, counted_simulate
    began = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            gansim_main(["predict", "--profile", str(profile), "--world-sizes", str(world_size)])
    finally:
        flows.max_min_levels, flows.group_levels, step._simulate = solve, solve_group, simulate
    return runs, solved, groups, grouped, time.perf_counter() - began


def _spread(sizes: list[int]) -> str:
    values = np.array(sizes)
    return (f"median {np.median(values):.0f}, 90th percentile {np.quantile(values, 0.9):.0f}, most {values.max():,}"
            if values.size else "none")


def table(runs: list[dict], solved: list[int], groups: list[int], grouped: list[int], seconds: float,
          world_size: int, every: int) -> str:
    lines = [f"`gansim predict --world-sizes {world_size}` (and its one-rank baseline), counted in one process: "
             f"{seconds:.2f} s with the counters.", "",
             "| run | ranks | first steps taken out of the play, per collective | tasks | flows "
             "| of them compute | transfers timed alone | events | rates of the whole network "
             "| of an event's groups | s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(runs, 1):
        heads = run["heads"]
        head_text = (", ".join(str(total) for total, _ in heads.values()) + f" ({len(heads)} collectives)"
                     if heads else "none")
        lines.append(f"| {i} | {run['ranks']:,} | {head_text} | {run['tasks']:,} "
                     f"| {run['flows']:,} | {run['compute_flows']:,} | {run['apart']:,} | {run['events']:,} "
                     f"| {run['rates']:,} | {run['groups']:,} | {run['seconds']:.2f} |")
    lines += ["", f"Max-min problems of the whole network solved: {len(solved):,}; flows in each: {_spread(solved)}; "
              f"flows in the largest group joined by shared resources, in every {every}th problem "
              f"({len(groups):,}): {_spread(groups)}. Problems of an event's groups solved alone: {len(grouped):,}; "
              f"flows in each: {_spread(grouped)} (an event that changed no flow's rate solves none)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", type=Path, help="profile.json (default: a tiny calibration of this host)")
    parser.add_argument("--world-size", type=int, default=1024)
    parser.add_argument("--every", type=int, default=25, help="measure the groups of every Nth problem")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--block", default="predict-events")
    args = parser.parse_args()
    if args.every < 1 or args.world_size < 2:
        parser.error("--every must be at least 1 and --world-size at least 2")
    with tempfile.TemporaryDirectory() as scratch:
        profile = args.profile or calibrated_profile(Path(scratch))
        runs, solved, groups, grouped, seconds = count_events(profile, args.world_size, args.every)
    text = table(runs, solved, groups, grouped, seconds, args.world_size, args.every)
    print(text)
    if args.markdown:
        write_markdown(args.markdown, text, args.block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
