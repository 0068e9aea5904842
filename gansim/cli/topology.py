"""`gansim topology show`: a topology's nodes, links and bisection bandwidth, and its
drawing."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gansim.cli.args import EXIT_OK, OneLineParser
from gansim.core.files import atomic_write, check_output_dir
from gansim.outputs.names import TOPOLOGY_OUTPUT
from gansim.outputs.report import topology_page
from gansim.topology.graph import load_topology, summarize


def register(sub: Any) -> None:
    topo = sub.add_parser("topology", help="inspect topologies")
    topo_sub = topo.add_subparsers(dest="topology_command", required=True, parser_class=OneLineParser)
    show = topo_sub.add_parser("show", help="summarise a topology (nodes, links, bisection bandwidth)")
    show.add_argument("topology", metavar="NAME_OR_FILE")
    show.add_argument("--out", metavar="DIR", help="where to write the drawing (topology.html, self-contained)")
    show.add_argument("--json", action="store_true", help="print the summary as JSON")
    show.set_defaults(func=cmd_topology_show)


def cmd_topology_show(args: argparse.Namespace) -> int:
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        check_output_dir(out_dir)
    topo = load_topology(args.topology, field="topology")
    info = summarize(topo)
    text = format_topology_summary(info)
    if args.json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
    else:
        print(text)
    if out_dir is not None:
        path = out_dir / TOPOLOGY_OUTPUT
        atomic_write(path, topology_page(topo, info, text))
        print(f"wrote {path}", file=sys.stderr)
    return EXIT_OK


def format_topology_summary(info: dict[str, Any]) -> str:
    lines = [f"topology {info['name']}: {info['description']}", f"  rank devices: {info['gpus']}"]
    lines.append("  nodes: " + ", ".join(f"{k} {v}" for k, v in info["nodes_by_kind"].items()))
    for kind, row in info["links_by_kind"].items():
        lines.append(f"  links {kind}: {row['count']} (per direction {row['min_GBps']:g}-{row['max_GBps']:g} GB/s, "
                     f"{row['min_latency_us']:g}-{row['max_latency_us']:g} us)")
    b = info["bisection"]
    lines.append(f"  bisection bandwidth (ranks {b['halves'][0]} | {b['halves'][1]}): {b['bandwidth_GBps']:g} GB/s "
                 "per direction")
    return "\n".join(lines)
