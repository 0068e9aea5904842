"""`gansim predict` and `gansim validate`: predictions from a calibration profile, and how
they compare with what the calibrator measured."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gansim.cli.args import EXIT_OK, positive_float
from gansim.core.values import positive_int_list


def register(sub: Any) -> None:
    pred = sub.add_parser("predict", help="predict step time and speed-up from a calibration profile")
    pred.add_argument("--profile", required=True, metavar="FILE", help="profile.json written by gansim calibrate")
    pred.add_argument("--world-sizes", default="1,2,3,4", metavar="LIST", help="comma-separated rank counts")
    pred.add_argument("--topology", metavar="NAME_OR_FILE",
                      help="machine to predict for (default: the calibrated host, ranks sharing its cores)")
    pred.add_argument("--measured-tflops", type=positive_float("--measured-tflops", "TFLOP/s"), metavar="T",
                      help="peak FLOP/s (TFLOP/s, datasheet) of the device the profile was measured on, "
                           "when the --topology's GPU differs (default: the profile's, or a shipped "
                           "topology's GPU of the same name)")
    pred.add_argument("--measured-memory-bandwidth-GBps", type=positive_float("--measured-memory-bandwidth-GBps", "GB/s"),
                      metavar="B", help="peak memory bandwidth (GB/s, datasheet) of the measured device")
    batch = pred.add_mutually_exclusive_group()
    batch.add_argument("--per-gpu-batch", type=positive_float("--per-gpu-batch", "samples"), metavar="N",
                       help="samples per GPU per step at every world size (weak scaling; default: the profile's)")
    batch.add_argument("--global-batch", type=positive_float("--global-batch", "samples"), metavar="N",
                       help="samples per step over all GPUs, split between them (strong scaling)")
    pred.add_argument("--json", action="store_true", help="print the predictions as JSON on stdout")
    pred.set_defaults(func=cmd_predict)

    val = sub.add_parser("validate", help="predict every calibrated world size from the fit and compare; or "
                                           "(--published) the shipped nccl-tests measurements of real systems")
    which = val.add_mutually_exclusive_group(required=True)
    which.add_argument("--profile", metavar="FILE", help="profile.json written by gansim calibrate")
    which.add_argument("--published", nargs="?", const="", metavar="NAME",
                       help="predict the published nccl-tests measurements (validation/) from each system's topology "
                            "alone: all of them, or the one named")
    val.add_argument("--out", metavar="DIR", help="where to write validation.json and report.html "
                                                   "(default gansim-out/validate, gansim-out/validate-published)")
    val.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout")
    val.set_defaults(func=cmd_validate)


# gansim.api (and through it the profile's models and the prediction layer) is imported
# by the commands that use it: building the profile's pydantic models costs a fifth of a
# second that `gansim simulate` should not pay.
def cmd_predict(args: argparse.Namespace) -> int:
    from gansim import api

    result = api.predict(args.profile, positive_int_list(args.world_sizes, "--world-sizes"), topology=args.topology,
                         measured_tflops=args.measured_tflops,
                         measured_memory_bandwidth_GBps=args.measured_memory_bandwidth_GBps,
                         per_gpu_batch=args.per_gpu_batch, global_batch=args.global_batch)
    predictions, provenance = result.predictions, result.provenance
    human = sys.stderr if args.json else sys.stdout
    batch = provenance.batch_size if provenance.batch_known else "unknown"
    print(f"prediction from {args.profile} ({provenance.model}, batch {batch} "
          f"per rank, {provenance.mode}, {provenance.device})", file=human)
    scaled = predictions[0].compute_scaled_from if predictions else None
    if scaled:
        bounds = ", ".join(f"{name} {v['bound']}-bound x{v['ratio']:.3g}" for name, v in scaled["phases"].items())
        print(f"compute scaled from {scaled['device']} to {scaled['to']} by a roofline: x{scaled['ratio']:.3g} "
              f"overall ({bounds})", file=human)
    print(f"{'ranks':>5} {'batch':>8} {'step ms':>10} {'band ms':>21} {'speedup':>8} {'band':>15}  bottleneck",
          file=human)
    for p in predictions:
        b = p.record.bottleneck
        assert b is not None
        band = p.band
        assert band is not None
        batch = "-" if p.per_gpu_batch is None else f"{p.per_gpu_batch:.4g}"
        print(f"{p.world_size:>5} {batch:>8} {p.step_time_s * 1e3:>10.3f} "
              f"{band.low_s * 1e3:>10.3f}-{band.high_s * 1e3:<10.3f} {p.speedup:>8.3f} "
              f"{band.speedup_low:>7.3f}-{band.speedup_high:<7.3f}  {b.resource} ({b.utilization:.0%})", file=human)
    if predictions and predictions[0].band is not None:
        band = predictions[0].band
        spread = "unknown (no repeats)" if band.repeat_spread is None else f"{band.repeat_spread:.1%}"
        error = "unknown" if band.communication_error is None else f"{band.communication_error:.1%}"
        print(f"band: run-to-run spread {spread} of the step, plus {error} of the communication: "
              f"{band.communication_error_from}", file=human)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from gansim import api

    published = args.published is not None
    default = "validate-published" if published else "validate"
    out_dir = Path(args.out) if args.out else Path("gansim-out") / default
    result = api.validate(None if published else args.profile, published=(args.published or True) if published else False,
                          out=out_dir)
    human = sys.stderr if args.json else sys.stdout
    if published:
        print("published nccl-tests measurements predicted from each system's topology alone (nccl algorithm, flow "
              "model); error = (predicted - measured) / measured busbw; messages from 1 MiB", file=human)
    print(result.table, file=human)
    for path in result.written:
        print(f"wrote {path}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    return EXIT_OK
