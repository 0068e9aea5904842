"""``gansim calibrate``: argument parsing and validation (no torch import at import time).

``gansim.cli.main`` calls :func:`register` on its subparsers and :func:`run_calibrate` with
the parsed arguments. A user's mistake raises :class:`gansim.core.errors.UserInputError`
(field = the flag); a failed real run prints one line and returns 1; an interrupted one
returns 130.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gansim.calibration.ranks.run_config import CalibrationError, RunConfig, ScriptSpec
from gansim.cli.args import number, positive_int_list, whole_number
from gansim.core import limits
from gansim.core.config import parse_size
from gansim.core.errors import UserInputError

INSTALL_HINT = "pip install 'gansim[calibrate]' torch==2.13.0"


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
    p.add_argument("--world-sizes", default="1,2", metavar="LIST",
                   help="comma-separated world sizes to run (default 1,2; needs one >= 2)")
    p.add_argument("--backend", default="gloo", metavar="gloo|nccl",
                   help="torch.distributed backend: gloo (CPU) or nccl (GPU) (default gloo)")
    p.add_argument("--model", default="paper-mlp-gan",
                   metavar="paper-mlp-gan|dcgan|dcgan-32|module:factory",
                   help="workload (default paper-mlp-gan)")
    p.add_argument("--batch-size", default="64", metavar="N",
                   help="per-rank batch size (default 64)")
    p.add_argument("--steps", default="30", metavar="N",
                   help="training steps per run, warm-up included (default 30)")
    p.add_argument("--warmup", default="5", metavar="N",
                   help="warm-up steps dropped from the samples (default 5)")
    p.add_argument("--repeats", default="4", metavar="N",
                   help="fresh spawns per world size, interleaved; every figure is the median "
                        "over them of each one's mean: a process's speed on a shared machine "
                        "varies from one start to the next (default 4)")
    p.add_argument("--out", default="profile.json", metavar="FILE",
                   help="profile to write (default profile.json); progress is kept in "
                        "FILE's .partial.json until the run succeeds")
    p.add_argument("--mode", default="ddp", metavar="ddp|flat",
                   help="ddp: DistributedDataParallel, bucketed all-reduce overlapped with "
                        "backward; flat: one all-reduce of the flattened gradients after "
                        "backward (the paper's MirroredStrategy way) (default ddp)")
    p.add_argument("--threads", default="1", metavar="N",
                   help="torch threads per rank (default 1; 0 = torch's default)")
    p.add_argument("--timeout-s", default="120", metavar="S",
                   help="end the run when no rank progresses for this long; also the "
                        "process-group timeout (default 120)")
    p.add_argument("--sizes", default="4K:64M", metavar="LO:HI",
                   help="all-reduce sweep sizes in bytes, doubling from LO to HI "
                        "(K/M/G = KiB/MiB/GiB; default 4K:64M)")
    p.add_argument("--sweep-iters", default="0", metavar="N",
                   help="timed iterations per sweep size and repeat (default 0 = 40/15/6 "
                        "up to 1 MiB / 16 MiB / beyond)")
    p.add_argument("--d-steps", default="1", metavar="K",
                   help="discriminator steps per generator step (default 1)")
    p.add_argument("--seed", default="0", metavar="N", help="random seed (default 0)")
    p.add_argument("--script", metavar="TRAIN.py",
                   help="calibrate your own training script instead of --model: it is run as "
                        "torchrun would run it, at each world size, its phases marked with "
                        "gansim.calibration.phase()/step() or record_function labels; its own "
                        "arguments follow `--`")
    p.add_argument("--from-trace", nargs="+", metavar="TRACE.json",
                   help="make the profile from torch.profiler Chrome traces (one file per rank; "
                        "the traces of runs of several world sizes, grouped by their "
                        "distributedInfo.world_size, are fitted together as --script's runs are)")
    p.add_argument("--phase-map", default=None, metavar="LABEL=d|g,...",
                   help="with --from-trace: which network's optimizer steps your own "
                        "record_function labels enclose, e.g. critic_step=d,generator_step=g "
                        "(default: a step's last optimizer step is G's, the ones before D's)")
    p.add_argument("--profiler-overhead-us", default=None, metavar="US",
                   help="with --from-trace: the profiler's cost per recorded event, removed from "
                        "every phase (default: measured here with torch.profiler; 0 keeps the "
                        "raw times)")
    p.add_argument("--device-tflops", default=None, metavar="T",
                   help="the measured device's peak FLOP/s (TFLOP/s, datasheet), kept in the "
                        "profile for predicting on another device")
    p.add_argument("--device-memory-bandwidth-GBps", default=None, metavar="B",
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
    timings.add_argument("--algorithm", default="nccl", metavar="NAME",
                         help="with --from-timings: the all-reduce algorithm the network model costs (default nccl)")
    timings.add_argument("--gradient-sync", default="per_phase_flat", metavar="NAME",
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


# --------------------------------------------------------------------------- validation
def _int(value, flag: str, *, minimum: int, maximum: int = 10**9) -> int:
    return whole_number(value, flag, minimum=minimum, maximum=maximum)


def parse_world_sizes(text: str) -> tuple[int, ...]:
    sizes = positive_int_list(text, "--world-sizes")
    if max(sizes) < 2:
        raise UserInputError(
            f"{text!r}: needs at least one world size >= 2 (the all-reduce sweep that fits "
            "alpha and beta runs there)", field="--world-sizes")
    return tuple(sizes)


def parse_sizes(text: str) -> tuple[int, ...]:
    if ":" not in str(text):
        raise UserInputError(f"{text!r}: allowed: LO:HI, e.g. 4K:64M", field="--sizes")
    lo_s, hi_s = str(text).split(":", 1)
    lo, hi = parse_size(lo_s, "--sizes"), parse_size(hi_s, "--sizes")
    if lo < 4 or lo % 4:
        raise UserInputError(f"LO {lo} B: allowed: a multiple of 4 bytes (float32), >= 4",
                             field="--sizes")
    if hi < lo:
        raise UserInputError(f"HI {hi} B < LO {lo} B", field="--sizes")
    if hi > 4 * 1024 ** 3:
        raise UserInputError(f"HI {hi} B: allowed: at most 4G", field="--sizes")
    sizes = []
    n = lo
    while n <= hi:
        sizes.append(n)
        n *= 2
    if len(sizes) < 2:
        raise UserInputError(f"{text!r} gives one size; the fit needs at least two "
                             "(HI >= 2 x LO)", field="--sizes")
    return tuple(sizes)


def _check_out(path: str) -> str:
    if not path or not str(path).strip():
        raise UserInputError("empty path", field="--out")
    path = os.fspath(path)
    if os.path.isdir(path):
        raise UserInputError(f"{path!r} is a directory; allowed: a file path", field="--out")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserInputError(f"directory {directory!r} does not exist", field="--out")
    if not os.access(directory, os.W_OK):
        raise UserInputError(f"directory {directory!r} is not writable", field="--out")
    return path


def _optional_number(value, flag: str, unit: str) -> float | None:
    return None if value is None else number(value, flag, unit)


def _check_script(args) -> tuple[str, tuple[str, ...]] | None:
    script_args = tuple(getattr(args, "script_args", None) or ())
    path = getattr(args, "script", None)
    if path is None:
        if script_args:
            raise UserInputError(f"unexpected arguments {' '.join(script_args)!r}; allowed: script "
                                 "arguments after -- with --script", field="calibrate")
        return None
    if not os.path.isfile(path):
        raise UserInputError("file does not exist; allowed: a Python training script", source=path,
                             field="--script")
    if not str(path).endswith(".py"):
        raise UserInputError("not a .py file; allowed: a Python training script", source=path,
                             field="--script")
    return os.path.abspath(path), script_args


def validate_args(args) -> dict:
    """Check every flag (no torch needed) and return the parsed values."""
    values = {
        "world_sizes": parse_world_sizes(args.world_sizes),
        "backend": str(args.backend).strip(),
        "model": str(args.model).strip(),
        "batch_size": _int(args.batch_size, "--batch-size", minimum=1),
        "steps": _int(args.steps, "--steps", minimum=1),
        "warmup": _int(args.warmup, "--warmup", minimum=0),
        "repeats": _int(args.repeats, "--repeats", minimum=1),
        "out": _check_out(args.out),
        "mode": str(args.mode).strip(),
        "threads": _int(args.threads, "--threads", minimum=0),
        "timeout_s": number(args.timeout_s, "--timeout-s", "seconds"),
        "sweep_sizes": parse_sizes(args.sizes),
        "sweep_iters": _int(args.sweep_iters, "--sweep-iters", minimum=0),
        "d_steps": _int(args.d_steps, "--d-steps", minimum=1, maximum=2**63),
        "seed": _int(args.seed, "--seed", minimum=0, maximum=2**63 - 1),
        "script": _check_script(args),
        "device_tflops": _optional_number(getattr(args, "device_tflops", None), "--device-tflops", "TFLOP/s"),
        "device_memory_bandwidth_GBps": _optional_number(getattr(args, "device_memory_bandwidth_GBps", None),
                                                           "--device-memory-bandwidth-GBps", "GB/s"),
    }
    limits.D_STEPS.check(values["d_steps"], field="--d-steps")
    if values["backend"] not in ("gloo", "nccl"):
        raise UserInputError(f"{values['backend']!r}; allowed: gloo, nccl", field="--backend")
    if values["mode"] not in ("ddp", "flat"):
        raise UserInputError(f"{values['mode']!r}; allowed: ddp, flat", field="--mode")
    if not values["model"]:
        raise UserInputError("empty model; allowed: paper-mlp-gan, dcgan, dcgan-32 or "
                             "module.path:factory", field="--model")
    if values["steps"] <= values["warmup"]:
        raise UserInputError(
            f"--steps {values['steps']} must be greater than --warmup {values['warmup']} "
            "(steps include the warm-up)", field="--steps")
    return values


def _check_torch_side(values: dict) -> None:
    import torch

    from gansim.calibration.ranks.launch import launched_by_torchrun
    from gansim.calibration.ranks.models import check_model_shapes

    if not launched_by_torchrun():  # every rank is a process on this machine
        limits.WORKERS.check(max(values["world_sizes"]), field="--world-sizes")
    if values["backend"] == "nccl":
        if not torch.cuda.is_available():
            raise UserInputError("nccl needs CUDA GPUs and this torch sees none "
                                 f"(torch {torch.__version__}); allowed here: gloo",
                                 field="--backend")
        if not launched_by_torchrun():
            need = max(values["world_sizes"])
            have = torch.cuda.device_count()
            if have < need:
                raise UserInputError(
                    f"world size {need} needs {need} GPUs on this machine, found {have} "
                    "(start multi-node runs with torchrun)", field="--world-sizes")
    if values["script"] is None:
        check_model_shapes(values["model"], batch=2, field="--model")


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_calibrate(args) -> int:
    """Run ``gansim calibrate`` with parsed ``args``; returns the exit code."""
    if getattr(args, "from_trace", None):
        return run_from_trace(args)
    if getattr(args, "phase_map", None) is not None:
        raise UserInputError("only with --from-trace (it names the labels of a trace)", field="--phase-map")
    if getattr(args, "from_timings", None):
        return run_from_timings(args)
    values = validate_args(args)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UserInputError(
            f"calibration needs PyTorch, which is not installed; install it with: {INSTALL_HINT}",
            field="calibrate",
        ) from None
    _check_torch_side(values)

    from gansim.calibration import pipeline
    from gansim.calibration.profile.schema import partial_path

    cfg = RunConfig(
        model=values["model"],
        backend=values["backend"],
        mode=values["mode"],
        batch_size=values["batch_size"],
        steps=values["steps"],
        warmup=values["warmup"],
        d_steps=values["d_steps"],
        threads=values["threads"],
        timeout_s=values["timeout_s"],
        seed=values["seed"],
        sweep_sizes=values["sweep_sizes"],
        sweep_iters=values["sweep_iters"],
    )
    script = None
    if values["script"] is not None:
        script = ScriptSpec(values["script"][0], values["script"][1])
    opts = pipeline.CalibrationOptions(world_sizes=values["world_sizes"], out=values["out"],
                                       repeats=values["repeats"], run=cfg, script=script,
                                       device_tflops=values["device_tflops"],
                                       device_memory_bandwidth_GBps=values["device_memory_bandwidth_GBps"])
    try:
        pipeline.run_calibration(opts, log=_log)
    except CalibrationError as exc:
        if exc.user_input:
            raise UserInputError(f"{exc} ({opts.out} was not changed)", source=script.path if script else None,
                                 field="--script") from None
        _log(f"gansim calibrate: error: {exc} (partial results in {partial_path(opts.out)}; "
             f"{opts.out} was not changed)")
        return 1
    except KeyboardInterrupt:
        _log(f"gansim calibrate: interrupted (partial results in {partial_path(opts.out)}; "
             f"{opts.out} was not changed)")
        return 130
    return 0


def parse_phase_map(text: str | None) -> dict[str, str]:
    """``critic_step=d,generator_step=g`` -> {label: network}."""
    if text is None:
        return {}
    out: dict[str, str] = {}
    for item in str(text).split(","):
        label, sep, net = item.partition("=")
        label, net = label.strip(), net.strip().lower()
        if not sep or not label or net not in ("d", "g"):
            raise UserInputError(f"{item.strip()!r}: allowed: LABEL=d or LABEL=g, comma-separated (a record_function "
                                 "label and the network whose optimizer steps it encloses)", field="--phase-map")
        if label in out:
            raise UserInputError(f"label {label!r} given twice", field="--phase-map")
        out[label] = net
    return out


def run_from_trace(args) -> int:
    """``gansim calibrate --from-trace``: a profile from torch.profiler Chrome traces."""
    from gansim.calibration.profile.schema import write_profile_atomic
    from gansim.calibration.traces.importer import import_traces

    out = _check_out(args.out)
    overhead = getattr(args, "profiler_overhead_us", None)
    overhead_s = None if overhead is None else number(overhead, "--profiler-overhead-us", "microseconds",
                                                      allow_zero=True) * 1e-6
    if getattr(args, "script", None) or getattr(args, "script_args", None):
        raise UserInputError("give either --from-trace or --script, not both", field="--from-trace")
    for path in args.from_trace:
        if os.path.isdir(path):
            raise UserInputError("is a directory; allowed: a trace file (.json or .json.gz)", source=path,
                                 field="--from-trace")
        if not os.path.isfile(path):
            raise UserInputError("file does not exist", source=path, field="--from-trace")
    phase_map = parse_phase_map(getattr(args, "phase_map", None))
    profile = import_traces(args.from_trace, overhead_s_per_event=overhead_s, log=_log, phase_map=phase_map,
                            device_tflops=_optional_number(args.device_tflops, "--device-tflops", "TFLOP/s"),
                            device_memory_bandwidth_GBps=_optional_number(
                                args.device_memory_bandwidth_GBps, "--device-memory-bandwidth-GBps", "GB/s"))
    write_profile_atomic(profile, out)
    _log(f"wrote {out}")
    return 0


def run_from_timings(args) -> int:
    """``gansim calibrate --from-timings``: a profile from a table of reported timings."""
    from gansim.calibration.profile.schema import write_profile_atomic
    from gansim.calibration.fit.timings import read_timings
    from gansim.prediction.from_timings import calibrate_from_timings, describe

    out = _check_out(args.out)
    if getattr(args, "from_trace", None) or getattr(args, "script", None) or getattr(args, "script_args", None):
        raise UserInputError("give one of --from-timings, --from-trace, --script", field="--from-timings")
    for flag in ("workload", "topology"):
        if not getattr(args, flag, None):
            raise UserInputError(f"--from-timings needs --{flag}", field=f"--{flag}")
    dataset = args.dataset_samples
    rows = read_timings(args.from_timings, None if dataset is None else _int(dataset, "--dataset-samples", minimum=1))
    fit_gpus = None if args.fit_gpus is None else set(positive_int_list(args.fit_gpus, "--fit-gpus"))
    calibration = calibrate_from_timings(rows, args.from_timings, args.workload, args.topology,
                                         algorithm=str(args.algorithm).strip(),
                                         gradient_sync=str(args.gradient_sync).strip(), fit_gpus=fit_gpus)
    for line in describe(calibration):
        print(line)
    sys.stdout.flush()
    write_profile_atomic(calibration.profile, out)
    _log(f"wrote {out}")
    return 0
