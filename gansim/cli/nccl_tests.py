"""`gansim nccl-tests`: the table nccl-tests' all_reduce_perf (all_gather_perf, ...) would
print on a topology, predicted: what NCCL chooses for each size, played on the flow model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gansim.cli.args import EXIT_OK, positive_int, whole_number_in
from gansim.core.config import NCCL_CHANNEL_BOUNDS
from gansim.core.values import number

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
    p.add_argument("--nccl-algo", metavar="LIST",
                   help="the algorithms NCCL may choose from, as NCCL_ALGO takes them: tree, ring, nvls, nvls_tree, "
                        "pat (NCCL's spellings too), comma-separated (ring,tree), ^ first to exclude (^nvls), "
                        "entries after the first prefixed by a collective (^nvls;allreduce:tree)")
    p.add_argument("--nccl-proto", metavar="LIST",
                   help="the protocols NCCL may choose from, as NCCL_PROTO takes them: LL, LL128, Simple, in the "
                        "same list form")
    p.add_argument("--nccl-version", metavar="X.Y[.Z]",
                   help="the NCCL release whose tuning model to follow (default: the topology's nccl_version, "
                        "else the newest followed)")
    p.add_argument("--nccl-min-channels", metavar="N",
                   type=whole_number_in(*NCCL_CHANNEL_BOUNDS["nccl_min_channels"], "--nccl-min-channels"),
                   help="NCCL_MIN_NCHANNELS: the communicator's channels duplicated up to N (0 to 64; a release "
                        "caps it at its MAXCHANNELS)")
    p.add_argument("--nccl-max-channels", metavar="N",
                   type=whole_number_in(*NCCL_CHANNEL_BOUNDS["nccl_max_channels"], "--nccl-max-channels"),
                   help="NCCL_MAX_NCHANNELS: the communicator's channels capped at N (1 to 64), before the minimum")
    p.add_argument("--gpus-per-thread", type=positive_int("--gpus-per-thread"), default=1, metavar="G",
                   help="GPUs each thread drives, nccl-tests' own -g (here -g counts ranks): one thread "
                        "launches on each of its GPUs, so an operation takes at least G launches; G = N is "
                        "one process for all, whose communicators NCCL makes with ncclCommInitAll (default 1)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON on stdout")
    p.add_argument("--explain", action="store_true",
                   help="under each row, what bounds it: NCCL's choice and runner-up, channels, latency share, "
                        "the saturated resource (--algorithm nccl only)")
    p.set_defaults(func=cmd_nccl_tests)


# gansim.api (and through it the prediction layer) is imported by the command that uses
# it: `gansim simulate` should not pay for loading it.
def cmd_nccl_tests(args: argparse.Namespace) -> int:
    from gansim import api
    from gansim.prediction.nccl_tests_table import format_table

    result = api.nccl_tests(args.topology, args.ngpus, op=args.op, minbytes=args.minbytes, maxbytes=args.maxbytes,
                            stepfactor=number(args.stepfactor, "-f"), algorithm=args.algorithm,
                            nccl_algo=args.nccl_algo, nccl_proto=args.nccl_proto, nccl_version=args.nccl_version,
                            nccl_min_channels=args.nccl_min_channels, nccl_max_channels=args.nccl_max_channels,
                            explain=args.explain, gpus_per_thread=args.gpus_per_thread)
    human = sys.stderr if args.json else sys.stdout
    header = (f"gansim nccl-tests: {args.op} on {args.ngpus} GPUs of {result.topology}, algorithm {args.algorithm}"
              + (f" (NCCL {result.nccl_version} tuning model ({result.nccl_tuning}))" if result.nccl_version else "")
              + ", flow model")
    print(format_table(list(result.rows), args.op, header), file=human)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    return EXIT_OK
