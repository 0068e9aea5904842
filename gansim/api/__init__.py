"""gansim's Python API: what the `gansim` commands do, called from Python, with typed results.

Each function takes what its command takes (keyword arguments named after the flags, as
Python values) and returns a typed result whose `to_dict()` is the JSON the command writes
(`summary.json`, `--json`). Bad input raises `UserInputError` with the one-line message the
command prints.

Example:
    >>> import gansim
    >>> result = gansim.simulate("paper-table3")
    >>> [(run.gpus, round(run.speedup, 2)) for run in result.runs][:2]

This module sits at the top of the layers, under the CLI only: the CLI parses flags and
prints, and calls these functions for the work."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gansim.core import limits
from gansim.core.errors import UserInputError
from gansim.core.files import check_output_dir, replaced_dir
from gansim.core.values import positive_int_list, whole_number
from gansim.core.version import __version__
from gansim.outputs.names import KNOWN_OUTPUTS, SIMULATE_OUTPUTS, SIMULATE_PARTIAL, VALIDATION_OUTPUTS
from gansim.runner.record import RunRecord

# Each function imports the layers it uses when called: `gansim nccl-tests` should not pay
# for loading the what-ifs, nor `gansim simulate` for the profile's models.
if TYPE_CHECKING:
    from gansim.calibration.profile.schema import Profile, Provenance
    from gansim.prediction.calibrated import Prediction
    from gansim.prediction.nccl_tests_table import NcclTestsRow
    from gansim.runner.scenario import LoadedScenario
    from gansim.topology.graph import Topology

__all__ = [
    "UserInputError", "Run", "SimulationResult", "simulate", "PredictionResult", "predict",
    "NcclTestsResult", "nccl_tests", "ValidationResult", "validate",
]

Progress = Callable[[int, int], None]
Log = Callable[[str], None]


# ----------------------------------------------------------------------------- simulate
# One run of a simulated scenario (one sweep combination at one GPU count and all-reduce
# algorithm): the runner's record itself, typed from the worker that simulated it to here.
# Its fields are summary.json's (docs/formats.md); the what-ifs' fields (`cost_usd`,
# `time_to_train_s`, ...) are in `extensions` and read as attributes too; `to_dict()` is its
# row of summary.json's `runs`.
Run = RunRecord


@dataclass(frozen=True)
class SimulationResult:
    """A simulated scenario.

    Attributes:
        scenario: The scenario's name.
        gansim_version: The gansim that simulated it.
        source: The file the scenario came from (`<dict>` for a mapping).
        sweep_axes: The sweep's axes, in the file's order.
        reference: The scenario's reference (measured) figures, or None.
        runs: Every run the scenario lists, in summary.json's order.
        simulated: Points simulated by this call (1-GPU baselines included).
        resumed: Points taken from the partial state of an interrupted earlier call into `out`.
        wall_s: Wall-clock seconds the simulation took.
        cpu_s: CPU seconds the workers spent simulating.
        traced: Runs written with a Chrome trace into `out`.
        written: The files written into `out` (empty without `out`).
        extensions: The scenario-level what-ifs (`plan`, `elastic`), as summary.json holds them.
    """

    scenario: str
    gansim_version: str
    source: str
    sweep_axes: tuple[str, ...]
    reference: Mapping[str, Any] | None
    runs: tuple[Run, ...]
    simulated: int
    resumed: int
    wall_s: float
    cpu_s: float
    traced: int
    written: tuple[Path, ...]
    extensions: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """summary.json's object (what `gansim simulate --json` prints)."""
        return {"scenario": self.scenario, "gansim_version": self.gansim_version, "source": self.source,
                "sweep_axes": list(self.sweep_axes), "reference": copy.deepcopy(self.reference),
                "runs": [run.to_dict() for run in self.runs], **copy.deepcopy(dict(self.extensions))}


def simulate(scenario: "str | os.PathLike[str] | Mapping[str, Any] | LoadedScenario", *, out: str | os.PathLike[str] | None = None,
             executor: str | Executor | None = "local", workers: int | None = None, traces: str | None = None,
             fresh: bool = False, progress: Progress | None = None, log: Log | None = None) -> SimulationResult:
    """Simulate a scenario with its what-ifs (what `gansim simulate` does).

    Args:
        scenario: A shipped scenario's name (`"paper-table3"`), a scenario YAML file, the
            mapping such a file holds (relative paths in it taken from the current folder),
            or a scenario already loaded (`gansim.load_scenario`).
        out: Folder to write summary.json, summary.csv, report.html, details.json and
            traces/ into (replaced as a whole; other files there are kept). While it runs,
            each finished point is kept there, and the same call after an interruption
            simulates only the points still missing. None: nothing is written.
        executor: `"local"` (a process pool; serial where one process suffices),
            `"dask://HOST:PORT"`, None (serially, in this process) or any
            concurrent.futures executor.
        workers: Processes of the local pool (default: one per core).
        traces: Which runs get a Chrome trace in `out`: `auto`, `all`, `featured`,
            `none` (default `auto`). Without `out`, no details are made.
        fresh: Forget the points an interrupted earlier call kept in `out`.
        progress: Called as `progress(done, total)` as points finish (`total`: those
            this call simulates).
        log: Called with each line of what `gansim simulate` says on stderr.

    Returns:
        The simulated scenario.

    Raises:
        UserInputError: A bad scenario, name, file, executor or output folder, with the
            one-line message the command prints.
    """
    from gansim.runner.executors import make_executor
    from gansim.runner.partial import PointStore
    from gansim.core.config import ProfiledWorkloadSpec
    from gansim.runner.scenario import LoadedScenario, planned_baselines, planned_runs
    from gansim.whatif.study import load_scenario, run_scenario

    if workers is not None:
        limits.WORKERS.check(workers, field="--workers")
    loaded = scenario if isinstance(scenario, LoadedScenario) else load_scenario(scenario)
    out_dir = Path(out) if out is not None else None
    if out_dir is not None:
        check_output_dir(out_dir, known=KNOWN_OUTPUTS)
        traces = "auto" if traces is None else traces
    else:
        traces = None  # the details (links, Gantt, traces) only go into out's files
    store = PointStore(out_dir / SIMULATE_PARTIAL) if out_dir is not None else None
    if fresh and store is not None:
        store.clear()
    runs = planned_runs(loaded.scenario)
    close: Callable[[], None] = lambda: None  # noqa: E731
    where = "serially"
    if isinstance(executor, str):
        spec = executor
        executor, close = make_executor(spec, workers, runs, planned_baselines(loaded.scenario))
        if executor is not None:
            where = f"on {spec}" if spec != "local" else "on a local process pool"
    elif executor is not None:
        where = f"on {type(executor).__name__}"
    say = log or (lambda line: None)
    say(f"gansim {__version__}: simulating {loaded.scenario.name} ({runs} runs, {where})")
    if store is not None and len(store):
        say(f"resuming: {store.folder} holds {len(store)} finished runs of an interrupted earlier run (those of "
            "this scenario as it is now are not simulated again; --fresh to start over)")
    details = None
    if traces is not None:
        from gansim.outputs.trace import run_details
        details = run_details
    try:
        result = run_scenario(loaded, executor, progress, traces=traces, details=details, store=store)
    finally:
        close()
    if isinstance(loaded.scenario.workload, ProfiledWorkloadSpec):  # a profile's: each run gets its band
        from gansim.prediction.profile_on_topology import with_bands

        result.runs = with_bands(loaded, result.runs)
    written: list[Path] = []
    if out_dir is not None:
        from gansim.outputs.results import write_run_outputs

        with replaced_dir(out_dir, SIMULATE_OUTPUTS + (SIMULATE_PARTIAL,)) as stage:
            written = [out_dir / path.relative_to(stage) for path in
                       write_run_outputs(stage, result, description=loaded.scenario.description)]
    header = result.header
    return SimulationResult(
        scenario=header["scenario"], gansim_version=header["gansim_version"], source=header["source"],
        sweep_axes=tuple(header["sweep_axes"]), runs=tuple(result.runs), reference=copy.deepcopy(header["reference"]),
        simulated=result.simulated, resumed=result.resumed, wall_s=result.wall_s, cpu_s=result.cpu_s,
        traced=sum(1 for d in result.details if "trace" in d), written=tuple(written),
        extensions=copy.deepcopy(result.extensions))


# ----------------------------------------------------------------------------- predict
@dataclass(frozen=True)
class PredictionResult:
    """Predictions from a calibration profile, one per world size.

    Attributes:
        profile: The profile file (or `<Profile>` for a profile given as an object).
        provenance: What the profile was measured from (model, batch size per rank, mode, device).
        predictions: One per world size asked for, in increasing order: `world_size`,
            `per_gpu_batch` (None where the profile does not know its batch), `step_time_s`,
            `speedup`, `band` (the range from what is known of the prediction's error),
            `record` (the simulated run's figures) and
            `compute_scaled_from` (the roofline that moved the compute to another device,
            or None).
    """

    profile: str
    provenance: "Provenance"
    predictions: tuple["Prediction", ...]

    def to_dict(self) -> dict[str, Any]:
        """What `gansim predict --json` prints."""
        return {"profile": self.profile, "predictions": [self._prediction(p) for p in self.predictions]}

    @staticmethod
    def _prediction(p: "Prediction") -> dict[str, Any]:
        record = p.record.to_dict()
        return {"world_size": p.world_size, "per_gpu_batch": p.per_gpu_batch, "step_time_s": p.step_time_s,
                "speedup": p.speedup, **({"band": p.band.as_dict()} if p.band else {}),
                "breakdown": record["breakdown"], "bottleneck": record["bottleneck"],
                **({"compute_scaled_from": p.compute_scaled_from} if p.compute_scaled_from else {})}


def predict(profile: "str | os.PathLike[str] | Profile", world_sizes: Sequence[int] = (1, 2, 3, 4), *,
            topology: "str | os.PathLike[str] | Topology | None" = None, measured_tflops: float | None = None,
            measured_memory_bandwidth_GBps: float | None = None, per_gpu_batch: float | None = None,
            global_batch: float | None = None) -> PredictionResult:
    """Predict step time and speed-up from a calibration profile (what `gansim predict` does).

    Args:
        profile: profile.json written by `gansim calibrate`, or a loaded profile.
        world_sizes: Rank counts to predict.
        topology: Machine to predict for: a shipped name, a YAML file or a loaded topology
            (default: the calibrated host, ranks sharing its cores).
        measured_tflops: Peak TFLOP/s (datasheet) of the device the profile was measured on,
            when the topology's GPU differs.
        measured_memory_bandwidth_GBps: Peak memory bandwidth (GB/s, datasheet) of that device.
        per_gpu_batch: Samples per GPU per step, if not the calibrated batch (weak scaling).
        global_batch: Samples per step over all GPUs (strong scaling); not with `per_gpu_batch`.

    Returns:
        The predictions, one per world size, each with its band.

    Raises:
        UserInputError: A bad profile, topology or world size, with the command's message.
    """
    from gansim.calibration.profile.schema import Profile, load_profile
    from gansim.prediction.calibrated import predict as predict_profile
    from gansim.topology.graph import Topology, load_topology

    sizes = positive_int_list(world_sizes, "--world-sizes")
    if isinstance(profile, Profile):
        loaded_profile, name = profile, "<Profile>"
    else:
        name = os.fspath(profile)
        loaded_profile = load_profile(name)
    topo = topology if isinstance(topology, Topology) or topology is None else load_topology(
        os.fspath(topology), field="--topology")
    predictions = predict_profile(loaded_profile, sizes, topo, measured_tflops=measured_tflops,
                                  measured_memory_bandwidth_GBps=measured_memory_bandwidth_GBps,
                                  per_gpu_batch=per_gpu_batch, global_batch=global_batch, with_bands=True)
    return PredictionResult(name, loaded_profile.provenance, tuple(predictions))


# ----------------------------------------------------------------------------- nccl-tests
@dataclass(frozen=True)
class NcclTestsResult:
    """The table nccl-tests would print, predicted.

    Attributes:
        topology: Name of the machine.
        gpus: Ranks (its first GPUs).
        op: The collective (`all_reduce`, `all_gather`, `reduce_scatter`, `broadcast`).
        algorithm: `nccl` (what NCCL would choose) or a textbook algorithm.
        nccl_version: The NCCL release whose tuning model was followed (None: not the nccl algorithm).
        nccl_tuning: Which of gansim's tuning tables that release follows (None: not nccl).
        rows: One per message size: nccl-tests' columns and NCCL's choice.
        explained: Whether each row says what bounds it.
    """

    topology: str
    gpus: int
    op: str
    algorithm: str
    nccl_version: str | None
    nccl_tuning: str | None
    rows: tuple["NcclTestsRow", ...]
    explained: bool = False

    def to_dict(self) -> dict[str, Any]:
        """What `gansim nccl-tests --json` prints."""
        from gansim.prediction.nccl_tests_table import row_json

        return {"topology": self.topology, "gpus": self.gpus, "op": self.op, "algorithm": self.algorithm,
                "rows": [row_json(r, self.explained) for r in self.rows]}


def nccl_tests(topology: "str | os.PathLike[str]", gpus: int, *, op: str = "all_reduce", minbytes: int | str = 8,
               maxbytes: int | str = "8G", stepfactor: float = 2.0, algorithm: str = "nccl",
               nccl_algo: str | None = None, nccl_proto: str | None = None, nccl_version: str | None = None,
               nccl_min_channels: int | None = None, nccl_max_channels: int | None = None,
               explain: bool = False, gpus_per_thread: int = 1) -> NcclTestsResult:
    """Predict nccl-tests' table on a topology (what `gansim nccl-tests` does).

    Args:
        topology: A shipped topology name or a topology YAML file.
        gpus: Ranks: the topology's first `gpus` GPUs (`-g`).
        op: `all_reduce`, `all_gather`, `reduce_scatter` or `broadcast` (`--op`).
        minbytes: Smallest size in bytes, or nccl-tests' syntax (`"64K"`) (`-b`).
        maxbytes: Largest size (`-e`).
        stepfactor: Size factor between rows (`-f`).
        algorithm: `nccl` or a textbook algorithm (all_reduce and broadcast only).
        nccl_algo: The algorithms NCCL may choose from, as NCCL_ALGO takes them ("tree",
            "ring,tree", "^nvls", "^nvls;allreduce:tree").
        nccl_proto: The protocols NCCL may choose from, as NCCL_PROTO takes them ("Simple").
        nccl_version: NCCL release whose tuning model to follow (default: the topology's).
        nccl_min_channels: NCCL_MIN_NCHANNELS: channels duplicated up to this many.
        nccl_max_channels: NCCL_MAX_NCHANNELS: the communicator's channels capped at this many.
        explain: Say under each row what bounds it (nccl only).
        gpus_per_thread: GPUs each thread drives (nccl-tests' own `-g`): an operation takes
            at least that many kernel launches (`--gpus-per-thread`).

    Returns:
        The predicted table.

    Raises:
        UserInputError: A bad topology, size, collective or option, with the command's message.
    """
    from gansim.collectives.nccl_tuning import NcclSettingError
    from gansim.collectives.nccl_versions import era_for
    from gansim.collectives.schedules import ALGORITHMS
    from gansim.core.config import NCCL_CHANNEL_BOUNDS, TrainingOptions, parse_size
    from gansim.core.nccl_env import ALGORITHM, PROTOCOL, canonical
    from gansim.prediction.nccl_tests_table import nccl_tests_table, sweep_sizes
    from gansim.topology.graph import load_topology

    source = os.fspath(topology)
    topo = load_topology(source, field="topology")
    ALGORITHMS.get(algorithm, field="--algorithm")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise UserInputError(f"expected a whole number >= 1, got {gpus!r}", field="-g")
    if gpus > len(topo.ranks):
        raise UserInputError(f"{gpus} GPUs asked but topology {topo.name!r} has {len(topo.ranks)}", field="-g")
    if algorithm != "nccl" and op not in ("all_reduce", "broadcast"):
        raise UserInputError(f"--op {op} is modelled for the nccl algorithm only", field="--op")
    if explain and algorithm != "nccl":
        raise UserInputError(f"explains NCCL's choice, so it needs --algorithm nccl (the default), "
                             f"not {algorithm!r}", field="--explain")
    sizes = sweep_sizes(parse_size(str(minbytes), "-b"), parse_size(str(maxbytes), "-e"), stepfactor)
    era = era_for(nccl_version, field="--nccl-version") if nccl_version else era_for(topo.nccl_version)
    for value, kind, flag in ((nccl_algo, ALGORITHM, "--nccl-algo"), (nccl_proto, PROTOCOL, "--nccl-proto")):
        if value is not None:
            try:
                canonical(kind, value)
            except ValueError as err:
                raise UserInputError(str(err), field=flag) from None
    for option, value in (("nccl_min_channels", nccl_min_channels), ("nccl_max_channels", nccl_max_channels)):
        if value is not None:
            least, most = NCCL_CHANNEL_BOUNDS[option]
            whole_number(str(value), f"--{option.replace('_', '-')}", minimum=least, maximum=most)
    options = TrainingOptions(nccl_algo=nccl_algo, nccl_proto=nccl_proto, nccl_version=nccl_version,
                              nccl_min_channels=nccl_min_channels, nccl_max_channels=nccl_max_channels)
    try:
        rows = nccl_tests_table(topo, gpus, op, sizes, algorithm, options, source=source, explain=explain,
                                gpus_per_thread=gpus_per_thread)
    except NcclSettingError as err:
        raise UserInputError(err.message, field="--" + err.option.replace("_", "-")) from None
    nccl = algorithm == "nccl"
    return NcclTestsResult(topo.name, gpus, op, algorithm, era.name if nccl else None, era.tag if nccl else None,
                           tuple(rows), explain)


# ----------------------------------------------------------------------------- validate
@dataclass(frozen=True)
class ValidationResult:
    """Predictions compared with measurements.

    Attributes:
        kind: `profile` (a calibration's own world sizes) or `published` (the shipped
            nccl-tests measurements of real systems).
        table: The comparison as the command prints it.
        written: The files written into `out` (validation.json, report.html).
        record: The comparison as validation.json holds it.
    """

    kind: str
    table: str
    written: tuple[Path, ...]
    record: Mapping[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """validation.json's object (what `gansim validate --json` prints)."""
        return copy.deepcopy(dict(self.record))


def validate(profile: "str | os.PathLike[str] | None" = None, *, published: bool | str = False,
             out: str | os.PathLike[str] | None = None) -> ValidationResult:
    """Compare predictions with measurements (what `gansim validate` does).

    Args:
        profile: profile.json written by `gansim calibrate`: every calibrated world size is
            predicted from the fit and compared with what was measured.
        published: True: predict every shipped nccl-tests measurement of a real system from
            its topology alone; a name: only that system's. Give this or `profile`.
        out: Folder to write validation.json and report.html into (None: nothing written).

    Returns:
        The comparison.

    Raises:
        UserInputError: Neither or both of `profile` and `published`, or bad input, with the
            command's message.
    """
    if (profile is None) == (published is False):
        raise UserInputError("give one of --profile and --published", field="validate")
    out_dir = Path(out) if out is not None else None
    if out_dir is not None:
        check_output_dir(out_dir, known=KNOWN_OUTPUTS)
    if published is not False:
        return _validate_published(None if published is True else str(published), out_dir)
    from gansim.calibration.profile.schema import load_profile
    from gansim.prediction.profile_validation import validate as validate_profile

    source = os.fspath(profile)  # type: ignore[arg-type]
    report = validate_profile(load_profile(source))
    written: list[Path] = []
    if out_dir is not None:
        from gansim.outputs.validation_files import write_validation

        with replaced_dir(out_dir, VALIDATION_OUTPUTS) as stage:
            written = [out_dir / path.relative_to(stage) for path in write_validation(stage, report, source=source)]
    return ValidationResult("profile", report.table(), tuple(written), report.as_dict())


def _validate_published(name: str | None, out_dir: Path | None) -> ValidationResult:
    from gansim.prediction.published import as_dict, compare, error_table, load_published, predicted_curves

    files = load_published(name or None)
    rows = [row for f in files for row in compare(f)]
    record = as_dict(files, rows)
    table = error_table(files, rows)
    written: list[Path] = []
    if out_dir is not None:
        from gansim.outputs.validation_files import write_published_validation

        curves = {f.spec.name: predicted_curves(f) for f in files}
        with replaced_dir(out_dir, VALIDATION_OUTPUTS) as stage:
            written = [out_dir / path.relative_to(stage)
                       for path in write_published_validation(stage, record, curves, table)]
    return ValidationResult("published", table, tuple(written), record)
