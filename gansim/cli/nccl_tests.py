"""`gansim nccl-tests`: the table nccl-tests' all_reduce_perf (all_gather_perf, ...) would
print on a topology, predicted: what NCCL chooses for each size, played on the flow model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gansim.cli.args import EXIT_OK, number, positive_int
from gansim.core.config import TrainingOptions
from gansim.core.errors import UserInputError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def register(sub: Any) -> None:
    p = sub.add_parser("nccl-tests", help="predict nccl-tests' table (size, count, time, algbw, busbw) on a topology")
    p.add_argument("topology", metavar="TOPOLOGY", help="shipped topology name or YAML file")
    p.add_argument("-g", "--ngpus", required=True, type=positive_int("-g"), metavar="N", help="ranks (the first N GPUs)")
    p.add_argument("-b", "--minbytes", default="8", metavar="SIZE", help="smallest size, e.g. 8, 64K, 1M (default 8)")
    p.add_argument("-e", "--maxbytes", default="8G", metavar="SIZE", help="largest size (default 8G)")
    p.add_argument("-f", "--stepfactor", default="2", metavar="F", help="size factor (default 2)")
    p.add_argument("--op", default="all_reduce", choices=OPS, help="collective (default all_reduce)")
    p.add_argument("--algorithm", default="nccl", metavar="NAME",
                   help="nccl (what NCCL would run, default) or a textbook algorithm (all_reduce, broadcast only)")
    p.add_argument("--nccl-algo", choices=("ring", "tree", "nvls", "nvls_tree"), help="force NCCL's algorithm (NCCL_ALGO)")
    p.add_argument("--nccl-proto", choices=("LL", "LL128", "Simple"), help="force NCCL's protocol (NCCL_PROTO)")
    p.add_argument("--nccl-version", metavar="X.Y[.Z]",
                   help="the NCCL release whose tuning model to follow (default: the topology's nccl_version, "
                        "else the newest followed)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON on stdout")
    p.add_argument("--explain", action="store_true",
                   help="under each row, what bounds it: NCCL's choice and runner-up, channels, latency share, "
                        "the saturated resource (--algorithm nccl only)")
    p.set_defaults(func=cmd_nccl_tests)


# The prediction layer is imported by the command that uses it: `gansim simulate` should not
# pay for loading it.
def cmd_nccl_tests(args: argparse.Namespace) -> int:
    from gansim.collectives.schedules import ALGORITHMS
    from gansim.core.config import parse_size
    from gansim.prediction.nccl_tests_table import format_table, nccl_tests_table, row_json, sweep_sizes
    from gansim.topology.graph import load_topology

    topology = load_topology(args.topology, field="topology")
    ALGORITHMS.get(args.algorithm, field="--algorithm")
    if args.ngpus > len(topology.ranks):
        raise UserInputError(f"{args.ngpus} GPUs asked but topology {topology.name!r} has {len(topology.ranks)}",
                             field="-g")
    if args.algorithm != "nccl" and args.op not in ("all_reduce", "broadcast"):
        raise UserInputError(f"--op {args.op} is modelled for the nccl algorithm only", field="--op")
    if args.explain and args.algorithm != "nccl":
        raise UserInputError(f"explains NCCL's choice, so it needs --algorithm nccl (the default), "
                             f"not {args.algorithm!r}", field="--explain")
    sizes = sweep_sizes(parse_size(args.minbytes, "-b"), parse_size(args.maxbytes, "-e"),
                        number(args.stepfactor, "-f"))
    from gansim.collectives.nccl_versions import era_for

    era = era_for(args.nccl_version, field="--nccl-version") if args.nccl_version else era_for(topology.nccl_version)
    options = TrainingOptions(nccl_algo=args.nccl_algo, nccl_proto=args.nccl_proto, nccl_version=args.nccl_version)
    rows = nccl_tests_table(topology, args.ngpus, args.op, sizes, args.algorithm, options, source=args.topology,
                            explain=args.explain)
    human = sys.stderr if args.json else sys.stdout
    header = (f"gansim nccl-tests: {args.op} on {args.ngpus} GPUs of {topology.name}, algorithm {args.algorithm}"
              + (f" (NCCL {era.name} tuning model ({era.tag}))" if args.algorithm == "nccl" else "")
              + ", flow model")
    print(format_table(rows, args.op, header), file=human)
    if args.json:
        sys.stdout.write(json.dumps({"topology": topology.name, "gpus": args.ngpus, "op": args.op,
                                     "algorithm": args.algorithm, "rows": [row_json(r, args.explain) for r in rows]}, indent=2) + "\n")
    return EXIT_OK
