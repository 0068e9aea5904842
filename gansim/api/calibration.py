"""`gansim.calibrate`: a calibration profile from real runs of a model or a user's script,
from torch.profiler traces, or from a table of reported timings (what `gansim calibrate`
does; the command parses its flags into these arguments). Every argument is checked here,
with the flag's name in the one-line error, before any torch import or real run."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from gansim.calibration.ranks.run_config import RunConfig, ScriptSpec
from gansim.core import limits
from gansim.core.config import parse_size
from gansim.core.errors import UserInputError
from gansim.core.values import number, positive_int_list, whole_number

if TYPE_CHECKING:
    from gansim.calibration.profile.schema import Profile

INSTALL_HINT = "pip install 'gansim[calibrate]' torch==2.13.0"

Log = Callable[[str], None]


@dataclass(frozen=True)
class CalibrateRequest:
    """What to calibrate from and how: one field per `gansim calibrate` flag, with its default
    (a flag `--batch-size` is the field `batch_size`). Values may be given as the flag's text
    (`"1,2"`, `"4K:64M"`) or as Python values (`(1, 2)`)."""

    world_sizes: str | Sequence[int] = "1,2"
    backend: str = "gloo"
    model: str = "paper-mlp-gan"
    batch_size: int | str | None = None  # --model and --script: 64; --from-trace: the trace's
    steps: int | str = 30
    warmup: int | str = 5
    repeats: int | str = 4
    out: str | os.PathLike[str] = "profile.json"
    mode: str = "ddp"
    threads: int | str = 1
    timeout_s: float | str = 120
    sizes: str = "4K:64M"
    sweep_iters: int | str = 0
    d_steps: int | str = 1
    seed: int | str = 0
    script: str | os.PathLike[str] | None = None
    script_args: Sequence[str] = ()
    from_trace: Sequence[str | os.PathLike[str]] | None = None
    phase_map: str | Mapping[str, str] | None = None
    profiler_overhead_us: float | str | None = None
    device_tflops: float | str | None = None
    device_memory_bandwidth_GBps: float | str | None = None
    from_timings: str | os.PathLike[str] | None = None
    workload: str | None = None
    topology: str | None = None
    algorithm: str = "nccl"
    gradient_sync: str = "per_phase_flat"
    fit_gpus: str | Sequence[int] | None = None
    dataset_samples: int | str | None = None


#: The request's fields: the flags `gansim calibrate` passes on.
REQUEST_FIELDS = tuple(f.name for f in fields(CalibrateRequest))


@dataclass(frozen=True)
class CalibrationResult:
    """A calibration: the profile written and where.

    Attributes:
        out: The profile file written.
        profile: The profile (`gansim.calibration.profile.schema.Profile`); None on the ranks
            other than 0 of a calibration under torchrun, which write nothing.
        source: How it was made: `model`, `script`, `trace` or `timings`.
        lines: What the timings fit printed (its figures and each row's residual); empty for
            the other sources, whose progress goes to `log`.
    """

    out: str
    profile: "Profile | None"
    source: str
    lines: tuple[str, ...] = field(default=())


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def calibrate(*, log: Log | None = None, **arguments: Any) -> CalibrationResult:
    """Make a calibration profile (what `gansim calibrate` does).

    Give one source: `script=` (your own training script, run at each of `world_sizes`),
    `from_trace=` (torch.profiler traces), `from_timings=` (a CSV of reported step times,
    with `workload=` and `topology=`), or nothing (the built-in `model=`, run for real).

    Args:
        log: Where progress lines go (default: stderr).
        **arguments: The fields of `CalibrateRequest`, one per flag of `gansim calibrate`.

    Returns:
        The profile written to `out`.

    Raises:
        UserInputError: A bad argument, with the command's one-line message.
        gansim.calibration.ranks.run_config.CalibrationError: A real run failed (what was
            measured so far is kept in the profile's `.partial.json`).
    """
    unknown = sorted(set(arguments) - set(REQUEST_FIELDS))
    if unknown:
        raise UserInputError(f"unknown argument {unknown[0]!r}; allowed: {', '.join(REQUEST_FIELDS)}",
                             field="calibrate")
    request = CalibrateRequest(**arguments)
    say = log or _say
    if request.from_trace:
        return _from_trace(request, say)
    if request.phase_map is not None:
        raise UserInputError("only with --from-trace (it names the labels of a trace)", field="--phase-map")
    if request.from_timings:
        return _from_timings(request, say)
    return _from_runs(request, say)


# --------------------------------------------------------------------------- real runs
def _int(value: object, flag: str, *, minimum: int, maximum: int = 10**9) -> int:
    return whole_number(str(value), flag, minimum=minimum, maximum=maximum)


def parse_world_sizes(value: str | Sequence[int]) -> tuple[int, ...]:
    sizes = positive_int_list(value, "--world-sizes")
    if max(sizes) < 2:
        raise UserInputError(
            f"{value!r}: needs at least one world size >= 2 (the all-reduce sweep that fits "
            "alpha and beta runs there)", field="--world-sizes")
    return tuple(sizes)


def parse_sizes(text: str) -> tuple[int, ...]:
    """The all-reduce sweep's sizes: LO:HI, doubling."""
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


def _check_out(path: str | os.PathLike[str]) -> str:
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


def _optional_number(value: object, flag: str, unit: str) -> float | None:
    return None if value is None else number(value, flag, unit)


def _check_script(request: CalibrateRequest) -> tuple[str, tuple[str, ...], str | None] | None:
    """(the script's file, its arguments, the module it is run as or None)."""
    script_args = tuple(request.script_args or ())
    if request.script is None:
        if script_args:
            raise UserInputError(f"unexpected arguments {' '.join(script_args)!r}; allowed: script "
                                 "arguments after -- with --script", field="calibrate")
        return None
    path = os.fspath(request.script)
    if not path.endswith(".py") and not os.path.isfile(path) and _MODULE_NAME.fullmatch(path):
        return _module_file(path), script_args, path
    if not os.path.isfile(path):
        raise UserInputError(f"file does not exist; allowed: {_SCRIPTS}", source=path, field="--script")
    if not path.endswith(".py"):
        raise UserInputError("not a .py file; allowed: a Python training script", source=path,
                             field="--script")
    return os.path.abspath(path), script_args, None


# what --script takes, in its errors
_SCRIPTS = "a Python training script (train.py) or a module python -m can run (package.train)"
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _module_file(name: str) -> str:
    """The file of module `name` as `python -m` finds it (the working directory first), without
    running it (its packages' __init__ files are imported, as python -m imports them)."""
    import importlib.util

    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise UserInputError(f"module {name!r} cannot be found ({type(exc).__name__}: {exc}); allowed: {_SCRIPTS}",
                             source=name, field="--script") from None
    finally:
        if added:
            sys.path.remove(here)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise UserInputError(f"no file or module {name!r} here; allowed: {_SCRIPTS}, from the directory holding its "
                             "package", source=name, field="--script")
    if spec.submodule_search_locations is not None:  # a package: python -m runs its __main__
        main = importlib.util.find_spec(f"{name}.__main__")
        if main is None or main.origin is None:
            raise UserInputError(f"package {name!r} has no __main__ module, so python -m cannot run it; allowed: a "
                                 "module of it", source=name, field="--script")
        return main.origin
    return spec.origin


def validate_request(request: CalibrateRequest) -> dict[str, Any]:
    """Check every argument of a calibration by real runs (no torch needed) and return the
    parsed values."""
    values = {
        "world_sizes": parse_world_sizes(request.world_sizes),
        "backend": str(request.backend).strip(),
        "model": str(request.model).strip(),
        "batch_size": _int(64 if request.batch_size is None else request.batch_size, "--batch-size", minimum=1),
        "steps": _int(request.steps, "--steps", minimum=1),
        "warmup": _int(request.warmup, "--warmup", minimum=0),
        "repeats": _int(request.repeats, "--repeats", minimum=1),
        "out": _check_out(request.out),
        "mode": str(request.mode).strip(),
        "threads": _int(request.threads, "--threads", minimum=0),
        "timeout_s": number(request.timeout_s, "--timeout-s", "seconds"),
        "sweep_sizes": parse_sizes(request.sizes),
        "sweep_iters": _int(request.sweep_iters, "--sweep-iters", minimum=0),
        "d_steps": _int(request.d_steps, "--d-steps", minimum=1, maximum=2**63),
        "seed": _int(request.seed, "--seed", minimum=0, maximum=2**63 - 1),
        "script": _check_script(request),
        "device_tflops": _optional_number(request.device_tflops, "--device-tflops", "TFLOP/s"),
        "device_memory_bandwidth_GBps": _optional_number(request.device_memory_bandwidth_GBps,
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


def _check_torch_side(values: dict[str, Any]) -> None:
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


def _from_runs(request: CalibrateRequest, say: Log) -> CalibrationResult:
    values = validate_request(request)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UserInputError(
            f"calibration needs PyTorch, which is not installed; install it with: {INSTALL_HINT}",
            field="calibrate",
        ) from None
    _check_torch_side(values)

    from gansim.calibration import pipeline

    cfg = RunConfig(
        model=values["model"], backend=values["backend"], mode=values["mode"], batch_size=values["batch_size"],
        steps=values["steps"], warmup=values["warmup"], d_steps=values["d_steps"], threads=values["threads"],
        timeout_s=values["timeout_s"], seed=values["seed"], sweep_sizes=values["sweep_sizes"],
        sweep_iters=values["sweep_iters"],
    )
    script = None if values["script"] is None else ScriptSpec(values["script"][0], values["script"][1],
                                                              module=values["script"][2])
    opts = pipeline.CalibrationOptions(world_sizes=values["world_sizes"], out=values["out"],
                                       repeats=values["repeats"], run=cfg, script=script,
                                       device_tflops=values["device_tflops"],
                                       device_memory_bandwidth_GBps=values["device_memory_bandwidth_GBps"])
    profile = pipeline.run_calibration(opts, log=say)
    return CalibrationResult(values["out"], profile, "script" if script else "model")


# --------------------------------------------------------------------------- traces
def parse_phase_map(value: str | Mapping[str, str] | None) -> dict[str, str]:
    """``critic_step=d,generator_step=g`` (or that mapping) -> {label: network}."""
    if value is None:
        return {}
    items = value.split(",") if isinstance(value, str) else [f"{k}={v}" for k, v in value.items()]
    out: dict[str, str] = {}
    for item in items:
        label, sep, net = item.partition("=")
        label, net = label.strip(), net.strip().lower()
        if not sep or not label or net not in ("d", "g"):
            raise UserInputError(f"{item.strip()!r}: allowed: LABEL=d or LABEL=g, comma-separated (a record_function "
                                 "label and the network whose optimizer steps it encloses)", field="--phase-map")
        if label in out:
            raise UserInputError(f"label {label!r} given twice", field="--phase-map")
        out[label] = net
    return out


def _from_trace(request: CalibrateRequest, say: Log) -> CalibrationResult:
    from gansim.calibration.profile.schema import write_profile_atomic
    from gansim.calibration.traces.importer import import_traces

    out = _check_out(request.out)
    overhead = request.profiler_overhead_us
    overhead_s = None if overhead is None else number(overhead, "--profiler-overhead-us", "microseconds",
                                                      allow_zero=True) * 1e-6
    if request.script or request.script_args:
        raise UserInputError("give either --from-trace or --script, not both", field="--from-trace")
    traces = [os.fspath(path) for path in request.from_trace or ()]
    for path in traces:
        if os.path.isdir(path):
            raise UserInputError("is a directory; allowed: a trace file (.json or .json.gz)", source=path,
                                 field="--from-trace")
        if not os.path.isfile(path):
            raise UserInputError("file does not exist", source=path, field="--from-trace")
    phase_map = parse_phase_map(request.phase_map)
    batch_size = None if request.batch_size is None else _int(request.batch_size, "--batch-size", minimum=1)
    profile = import_traces(traces, overhead_s_per_event=overhead_s, log=say, phase_map=phase_map,
                            batch_size=batch_size, device_tflops=_optional_number(request.device_tflops, "--device-tflops", "TFLOP/s"),
                            device_memory_bandwidth_GBps=_optional_number(
                                request.device_memory_bandwidth_GBps, "--device-memory-bandwidth-GBps", "GB/s"))
    write_profile_atomic(profile, out)
    return CalibrationResult(out, profile, "trace")


# --------------------------------------------------------------------------- timings
def _from_timings(request: CalibrateRequest, say: Log) -> CalibrationResult:
    from gansim.calibration.fit.timings import read_timings
    from gansim.calibration.profile.schema import write_profile_atomic
    from gansim.prediction.from_timings import calibrate_from_timings, describe

    out = _check_out(request.out)
    if request.from_trace or request.script or request.script_args:
        raise UserInputError("give one of --from-timings, --from-trace, --script", field="--from-timings")
    for flag in ("workload", "topology"):
        if not getattr(request, flag):
            raise UserInputError(f"--from-timings needs --{flag}", field=f"--{flag}")
    dataset = request.dataset_samples
    source = os.fspath(request.from_timings)  # type: ignore[arg-type]
    rows = read_timings(source, None if dataset is None else _int(dataset, "--dataset-samples", minimum=1))
    fit_gpus = None if request.fit_gpus is None else set(positive_int_list(request.fit_gpus, "--fit-gpus"))
    calibration = calibrate_from_timings(rows, source, str(request.workload), str(request.topology),
                                         algorithm=str(request.algorithm).strip(),
                                         gradient_sync=str(request.gradient_sync).strip(), fit_gpus=fit_gpus)
    write_profile_atomic(calibration.profile, out)
    return CalibrationResult(out, calibration.profile, "timings", tuple(describe(calibration)))
