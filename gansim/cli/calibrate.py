"""``gansim calibrate``: its flags, passed on to :func:`gansim.api.calibration.calibrate`
(which checks them; no torch import at import time).

``gansim.cli.main`` calls :func:`register` on its subparsers and :func:`run_calibrate` with
the parsed arguments. A user's mistake raises :class:`gansim.core.errors.UserInputError`
(field = the flag); a failed real run prints one line and returns 1; an interrupted one
returns 130.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from gansim.api.calibration import REQUEST_FIELDS, calibrate
from gansim.calibration.ranks.run_config import CalibrationError
from gansim.calibration.traces.profiler_cost import ProbeError
from gansim.core.errors import UserInputError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="measure this machine with short real torch.distributed runs and write a profile",
        description=(
            "Run short real data-parallel GAN trainings (torch.distributed: gloo on CPU, "
            "NCCL on GPU) and microbenchmarks (all-reduce sweep, local reduction, "
            "per-phase compute, core sharing), fit alpha/beta/gamma and write profile.json. "
            "Under torchrun every rank runs this command (multi-node calibration). "
            "--model also accepts 'module.path:factory' or 'file.py:factory' where "
            "factory() returns (generator, discriminator, latent_dim, sample_shape)."
        ),
    )
    p.add_argument("--world-sizes", metavar="LIST",
                   help="comma-separated world sizes to run (default 1,2; needs one >= 2)")
    p.add_argument("--backend", metavar="gloo|nccl",
                   help="torch.distributed backend: gloo (CPU) or nccl (GPU) (default gloo)")
    p.add_argument("--model",
                   metavar="paper-mlp-gan|dcgan|dcgan-32|module:factory",
                   help="workload (default paper-mlp-gan)")
    p.add_argument("--batch-size", metavar="N",
                   help="per-rank batch size (default 64; with --from-trace: the batch the trace's "
                        "first matrix product or convolution of each forward takes, which needs "
                        "record_shapes=True)")
    p.add_argument("--steps", metavar="N",
                   help="training steps per run, warm-up included (default 30)")
    p.add_argument("--warmup", metavar="N",
                   help="warm-up steps dropped from the samples (default 5)")
    p.add_argument("--repeats", metavar="N",
                   help="fresh spawns per world size, interleaved; every figure is the median "
                        "over them of each one's mean: a process's speed on a shared machine "
                        "varies from one start to the next (default 4)")
    p.add_argument("--out", metavar="FILE",
                   help="profile to write (default profile.json); progress is kept in "
                        "FILE's .partial.json until the run succeeds")
    p.add_argument("--mode", metavar="ddp|flat",
                   help="ddp: DistributedDataParallel, bucketed all-reduce overlapped with "
                        "backward; flat: one all-reduce of the flattened gradients after "
                        "backward (the paper's MirroredStrategy way) (default ddp)")
    p.add_argument("--threads", metavar="N",
                   help="torch threads per rank (default 1; 0 = torch's default)")
    p.add_argument("--timeout-s", metavar="S",
                   help="end the run when no rank progresses for this long; also the "
                        "process-group timeout (default 120)")
    p.add_argument("--sizes", metavar="LO:HI",
                   help="all-reduce sweep sizes in bytes, doubling from LO to HI "
                        "(K/M/G = KiB/MiB/GiB; default 4K:64M)")
    p.add_argument("--sweep-iters", metavar="N",
                   help="timed iterations per sweep size and repeat (default 0 = 40/15/6 "
                        "up to 1 MiB / 16 MiB / beyond)")
    p.add_argument("--d-steps", metavar="K",
                   help="discriminator steps per generator step (default 1)")
    p.add_argument("--seed", metavar="N", help="random seed (default 0)")
    p.add_argument("--script", metavar="TRAIN.py",
                   help="calibrate your own training script instead of --model: it is run as "
                        "torchrun would run it, at each world size, its phases marked with "
                        "gansim.calibration.phase()/step() or record_function labels; its own "
                        "arguments follow `--`; a module name (package.train) runs it as "
                        "python -m does, from the working directory")
    p.add_argument("--from-trace", nargs="+", metavar="TRACE.json",
                   help="make the profile from torch.profiler Chrome traces (one file per rank; "
                        "the traces of runs of several world sizes, grouped by their "
                        "distributedInfo.world_size, are fitted together as --script's runs are)")
    p.add_argument("--phase-map", metavar="LABEL=d|g,...",
                   help="with --from-trace: which network's optimizer steps your own "
                        "record_function labels enclose, e.g. critic_step=d,generator_step=g "
                        "(default: a step's last optimizer step is G's, the ones before D's)")
    p.add_argument("--profiler-overhead-us", metavar="US",
                   help="with --from-trace: the profiler's cost per recorded event, removed from "
                        "every phase (default: measured here with torch.profiler; 0 keeps the "
                        "raw times)")
    p.add_argument("--device-tflops", metavar="T",
                   help="the measured device's peak FLOP/s (TFLOP/s, datasheet), kept in the "
                        "profile for predicting on another device")
    p.add_argument("--device-memory-bandwidth-GBps", metavar="B",
                   help="the measured device's peak memory bandwidth (GB/s, datasheet)")
    timings = p.add_argument_group("from reported timings (--from-timings)")
    timings.add_argument("--from-timings", metavar="TIMINGS.csv",
                         help="make the profile from a table of reported timings: columns gpus, per_gpu_batch, "
                              "one of step_time_s / time_s (with steps) / epoch_time_s (with steps per epoch or "
                              "--dataset-samples), optional accumulation and label; needs --workload and --topology")
    timings.add_argument("--workload", metavar="NAME_OR_YAML",
                         help="with --from-timings: the trained networks, a shipped workload or a YAML with their "
                              "parameter counts (a workload, or a scenario's workload:)")
    timings.add_argument("--topology", metavar="NAME_OR_FILE",
                         help="with --from-timings: the machine the timings were measured on")
    timings.add_argument("--algorithm", metavar="NAME",
                         help="with --from-timings: the all-reduce algorithm the network model costs (default nccl)")
    timings.add_argument("--gradient-sync", metavar="NAME",
                         help="with --from-timings: how the framework summed the gradients: per_phase_flat (one "
                              "all-reduce per network, default), per_variable, ddp_buckets")
    timings.add_argument("--fit-gpus", metavar="LIST",
                         help="with --from-timings: fit only the rows at these GPU counts; the others are predicted "
                              "and their error printed (default: fit every row)")
    timings.add_argument("--dataset-samples", metavar="N",
                         help="with --from-timings and epoch_time_s without a steps column: samples per epoch")
    p.add_argument("script_args", nargs="*", metavar="-- SCRIPT_ARGS",
                   help="arguments of --script (after --)")
    p.set_defaults(func=run_calibrate)


def request_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed flags as the API's arguments (a flag left out keeps the API's default)."""
    return {name: value for name, value in vars(args).items() if name in REQUEST_FIELDS and value is not None}


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_calibrate(args: argparse.Namespace) -> int:
    """Run ``gansim calibrate`` with parsed ``args``; returns the exit code."""
    from gansim.calibration.profile.schema import partial_path

    arguments = request_arguments(args)
    try:
        result = calibrate(log=_log, **arguments)
    except CalibrationError as exc:
        out = str(arguments.get("out", "profile.json"))
        if exc.user_input:
            raise UserInputError(f"{exc} ({out} was not changed)", source=arguments.get("script"),
                                 field="--script") from None
        _log(f"gansim calibrate: error: {exc} (partial results in {partial_path(out)}; {out} was not changed)")
        return 1
    except ProbeError as exc:
        _log(f"gansim calibrate: error: {exc} ({arguments.get('out', 'profile.json')} was not changed)")
        return 1
    except KeyboardInterrupt:
        out = str(arguments.get("out", "profile.json"))
        _log(f"gansim calibrate: interrupted (partial results in {partial_path(out)}; {out} was not changed)")
        return 130
    for line in result.lines:
        print(line)
    sys.stdout.flush()
    if result.source in ("trace", "timings"):
        _log(f"wrote {result.out}")
        return 0
    from gansim.calibration.ranks.launch import launched_by_torchrun  # a real run: torch is there

    if launched_by_torchrun():
        # Everything is written and the process group destroyed. Leaving through the
        # interpreter's teardown lets C++ destructors race the backend's threads, which once
        # aborted a rank with "terminate called without an active exception" (exit -6) after
        # a complete run; skip the teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
