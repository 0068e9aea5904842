"""Calibration from reported timings: a table of step (or run, or epoch) times at a few GPU
counts becomes the compute and host overhead of a profile (``gansim calibrate --from-timings``).

Each row is one configuration: ``gpus`` data-parallel replicas, ``per_gpu_batch`` samples per
GPU per optimizer step in ``accumulation`` rounds, and how long an optimizer step took. The
model of one step::

    step_time = accumulation x round_fixed_s + per_gpu_batch x per_sample_s
                + replicas x host_overhead_per_replica_s + communication(gpus)

- ``round_fixed_s``: what a forward/backward round costs whatever its batch (kernel launches,
  the framework's per-call work);
- ``per_sample_s``: what each sample adds;
- ``host_overhead_per_replica_s``: host work per replica per step, done one replica after
  another (seed 002, Ravikumar & Sriraman 2023, on TensorFlow's MirroredStrategy: "the code
  runs sequentially and becomes a bottleneck as the number of mirrored images increases"),
  the simulator's ``TrainingOptions.host_overhead_per_replica_s``. ``replicas`` are those of
  one process, which drives one machine's GPUs (MultiWorkerMirroredStrategy: "multiple
  workers, each with potentially multiple GPUs"): the run's GPUs on its fullest machine;
- ``communication``: never fitted; the network model's time for the workload's gradients on
  the topology the timings came from, given by the caller per row.

The table determines a figure only when its column is not a combination of the others (a
table whose rounds all hold the same batch cannot tell the fixed part of a round from its
per-sample part: it determines their sum at that batch). Rows that repeat a configuration
are repeats: their spread is the calibration's run-to-run spread.

Nothing here runs the simulator (this layer does not see it): gansim/prediction/from_timings.py
supplies the communication and writes the profile.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from gansim.core import limits
from gansim.core.config import MAX_SECONDS, MIN_SECONDS
from gansim.core.errors import UserInputError

# column -> what it holds; "label" is free text shown beside the row's residual
TIME_COLUMNS = ("step_time_s", "time_s", "epoch_time_s")
COLUMNS = ("gpus", "per_gpu_batch", "accumulation", *TIME_COLUMNS, "steps", "label")
# a table this long is not a table of reported timings
MAX_ROWS = 10_000
MAX_FILE_BYTES = 4 * 1024 * 1024
# the figures of the step model, in the order of the design matrix's columns
FIGURES = ("round_fixed_s", "per_sample_s", "host_overhead_per_replica_s")
# a fitted figure below this share of the step it belongs to is zero within rounding, not a
# contradiction (reported times carry three or four significant digits)
ROUNDING = 1e-3


@dataclass(frozen=True)
class TimingRow:
    line: int  # line of the file, for messages
    gpus: int
    per_gpu_batch: int
    accumulation: int
    step_time_s: float
    label: str = ""

    @property
    def configuration(self) -> tuple[int, int, int]:
        return self.gpus, self.per_gpu_batch, self.accumulation

    @property
    def round_batch(self) -> float:
        return self.per_gpu_batch / self.accumulation


def _cell(path: str, line: int, column: str, text: str, allowed: str, *, integer: bool) -> float:
    """One cell as a number above zero (an integer when `integer`), or one line naming it."""
    where = f"row {line}, column {column}"
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise UserInputError(f"{text!r} is not {'a whole number' if integer else 'a number'}; allowed: {allowed}",
                             source=path, field=where) from None
    if not math.isfinite(value) or value <= 0:
        raise UserInputError(f"{text!r}; allowed: {allowed}", source=path, field=where)
    if column == "gpus":
        limits.RANKS.check(value, source=path, field=where)
    if integer:
        if value > 10**9:
            raise UserInputError(f"{text!r}; allowed: {allowed} up to 10^9", source=path, field=where)
    elif value > 1e12:
        raise UserInputError(f"{text!r}; allowed: {allowed} up to 1e12", source=path, field=where)
    return value


def read_timings(path: str, dataset_samples: Optional[int] = None) -> list[TimingRow]:
    """The rows of a timings CSV (lines starting with # are comments: the source). Every cell
    is checked; a mistake is one UserInputError naming the file, the row (its line) and the
    column. Times become per-step times: ``time_s`` over ``steps`` steps, ``epoch_time_s``
    over ``steps`` per epoch or, without that column, the steps an epoch of
    `dataset_samples` takes at the row's global batch."""
    if os.path.isdir(path):
        raise UserInputError("is a directory; allowed: a CSV file", source=path, field="--from-timings")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise UserInputError("file does not exist", source=path, field="--from-timings") from None
    except OSError as exc:
        raise UserInputError(f"cannot read the file ({exc.strerror or exc})", source=path) from None
    if len(raw) > MAX_FILE_BYTES:
        raise UserInputError(f"larger than {MAX_FILE_BYTES} bytes; allowed: a table of timings", source=path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserInputError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                             source=path) from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise UserInputError(f"no header; allowed columns: {', '.join(COLUMNS)}", source=path)
    header_line, header_text = lines[0]
    header = [h.strip() for h in next(csv.reader([header_text]))]
    for name in header:
        if name not in COLUMNS:
            raise UserInputError(f"unknown column {name!r}; allowed: {', '.join(COLUMNS)}", source=path,
                                 field=f"row {header_line}")
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise UserInputError(f"column {duplicated[0]!r} appears twice", source=path, field=f"row {header_line}")
    missing = [c for c in ("gpus", "per_gpu_batch") if c not in header]
    times = [c for c in TIME_COLUMNS if c in header]
    if missing:
        raise UserInputError(f"no column {missing[0]!r}; required: gpus, per_gpu_batch and one of "
                             f"{', '.join(TIME_COLUMNS)}", source=path, field=f"row {header_line}")
    if len(times) != 1:
        raise UserInputError(f"{'no time column' if not times else 'time columns ' + ', '.join(times)}; allowed: "
                             f"exactly one of {', '.join(TIME_COLUMNS)}", source=path, field=f"row {header_line}")
    (time_column,) = times
    if time_column == "time_s" and "steps" not in header:
        raise UserInputError("time_s needs a steps column (the optimizer steps the time covers)", source=path,
                             field=f"row {header_line}")
    if time_column == "epoch_time_s" and "steps" not in header and dataset_samples is None:
        raise UserInputError("epoch_time_s needs a steps column (steps per epoch) or --dataset-samples",
                             source=path, field=f"row {header_line}")
    if time_column == "step_time_s" and "steps" in header:
        raise UserInputError("a steps column goes with time_s or epoch_time_s, not step_time_s", source=path,
                             field=f"row {header_line}")
    rows = []
    for line, row_text in lines[1:]:
        cells = [c.strip() for c in next(csv.reader([row_text]))]
        if len(cells) != len(header):
            raise UserInputError(f"{len(cells)} cells; allowed: {len(header)}, one per column of the header "
                                 f"({', '.join(header)})", source=path, field=f"row {line}")
        values = dict(zip(header, cells))
        gpus = int(_cell(path, line, "gpus", values["gpus"], "a whole number of GPUs >= 1", integer=True))
        batch = int(_cell(path, line, "per_gpu_batch", values["per_gpu_batch"],
                          "a whole number of samples per GPU per optimizer step >= 1", integer=True))
        rounds = int(_cell(path, line, "accumulation", values["accumulation"],
                           "a whole number of rounds per optimizer step >= 1", integer=True)) \
            if "accumulation" in values else 1
        if batch % rounds:
            raise UserInputError(f"per_gpu_batch {batch} is not a whole number of accumulation rounds ({rounds}); "
                                 "allowed: per_gpu_batch a multiple of accumulation", source=path,
                                 field=f"row {line}, column accumulation")
        seconds = _cell(path, line, time_column, values[time_column], "seconds > 0", integer=False)
        if time_column == "step_time_s":
            steps: float = 1
        elif "steps" in values:
            steps = _cell(path, line, "steps", values["steps"], "a whole number of optimizer steps >= 1",
                          integer=True)
        else:
            assert dataset_samples is not None
            steps = math.ceil(dataset_samples / (gpus * batch))
        per_step = seconds / steps
        if not MIN_SECONDS <= per_step <= MAX_SECONDS:
            per = "" if time_column == "step_time_s" else f" over {steps:g} steps"
            raise UserInputError(f"{values[time_column]!r}{per} is {per_step:.3g} s per optimizer step; allowed: "
                                 f"{MIN_SECONDS:g} to {MAX_SECONDS:g} s per step", source=path,
                                 field=f"row {line}, column {time_column}")
        rows.append(TimingRow(line, gpus, batch, rounds, per_step, values.get("label", "")))
        if len(rows) > MAX_ROWS:
            raise UserInputError(f"more than {MAX_ROWS} rows; allowed: a table of reported timings", source=path)
    if not rows:
        raise UserInputError("no rows under the header; the fit needs rows at two GPU counts", source=path)
    return rows


@dataclass(frozen=True)
class TimingsFit:
    """What the table determined. ``figures`` holds every figure the fit set; ``determined``
    names those the table alone fixes, and ``combined`` says what stands for the rest (e.g.
    'round_fixed_s + 64 x per_sample_s' when every round held 64 samples: then per_sample_s
    is that sum over 64 and round_fixed_s is 0, an assumption the prediction reports)."""

    figures: dict[str, float]
    determined: tuple[str, ...]
    combined: Optional[str]
    residuals: tuple[float, ...]  # (model - measured) / measured, per row in table order
    repeat_spread: Optional[float]  # the largest (slowest / fastest - 1) over repeated configurations
    notes: tuple[str, ...] = field(default=())


def repeat_spread(rows: Sequence[TimingRow]) -> Optional[float]:
    """The largest slowest/fastest - 1 over the configurations given more than once."""
    groups: dict[tuple[int, int, int], list[float]] = {}
    for r in rows:
        groups.setdefault(r.configuration, []).append(r.step_time_s)
    spreads = [max(t) / min(t) - 1 for t in groups.values() if len(t) > 1]
    return max(spreads) if spreads else None


def _rank(matrix: np.ndarray) -> int:
    return int(np.linalg.matrix_rank(matrix / np.maximum(np.abs(matrix).max(axis=0), 1e-300), tol=1e-9))


def fit_timings(rows: Sequence[TimingRow], communication_s: Sequence[float], source: str,
                replicas: Optional[Sequence[int]] = None) -> TimingsFit:
    """Least squares of the step model over the rows (relative errors weigh each row alike),
    `communication_s` being the network model's time per row and `replicas` the replicas of
    its fullest machine's process (None: every row's GPUs in one). Refuses, in one line, a
    table that cannot determine the host overhead and a compute (one configuration; every
    row at one GPU count, or at one count of replicas a machine) and rows that contradict
    each other (a figure that must be below zero)."""
    if len(rows) != len(communication_s):
        raise ValueError("one communication time per row")
    replicas = [r.gpus for r in rows] if replicas is None else list(replicas)
    if len(replicas) != len(rows):
        raise ValueError("one count of replicas per row")
    configurations = {r.configuration for r in rows}
    if len(configurations) < 2:
        what = "one row" if len(rows) == 1 else f"{len(rows)} rows of one configuration"
        raise UserInputError(f"{what}: a fit needs rows at two or more GPU counts (compute and the overhead per "
                             "replica are two unknowns)", source=source, field="--from-timings")
    if len({r.gpus for r in rows}) < 2:
        raise UserInputError(f"every row is at {rows[0].gpus} GPU(s): the overhead per replica cannot be told from "
                             "the compute; allowed: rows at two or more GPU counts", source=source,
                             field="--from-timings")
    if len(set(replicas)) < 2:
        raise UserInputError(f"every row runs {replicas[0]} replicas on its fullest machine: the overhead per replica "
                             "cannot be told from the compute; allowed: rows at two or more GPU counts within a "
                             "machine", source=source, field="--from-timings")
    design = np.array([[r.accumulation, r.per_gpu_batch, n] for r, n in zip(rows, replicas)], dtype=float)
    measured = np.array([r.step_time_s for r in rows])
    target = measured - np.asarray(communication_s, dtype=float)
    combined = None
    notes: list[str] = []
    if _rank(design) == 3:
        columns, names = design, FIGURES
        determined: tuple[str, ...] = FIGURES
    else:
        # the rounds' batches do not vary independently of their count: one compute figure,
        # the cost of a round at the table's round batch, spread over its samples
        round_batches = sorted({r.round_batch for r in rows})
        if len(round_batches) == 1:
            k = round_batches[0]
            combined = f"round_fixed_s + {k:g} x per_sample_s"
            notes.append(f"every round held {k:g} samples: the table determines a round's compute at that batch "
                         "(round_fixed_s + per_sample_s x batch), not its fixed and per-sample parts; a prediction at "
                         "another batch scales it with the batch (round_fixed_s taken as 0)")
            columns = design[:, 1:3]  # per_gpu_batch x (that sum / k), gpus
        else:
            # batches vary with the round count's inverse and the GPU count: only per-GPU-sample
            # compute and the overhead are told apart
            combined = "round_fixed_s (not told apart from the others)"
            notes.append("the rounds' batch follows the GPU count: per_sample_s and the overhead are fitted with "
                         "round_fixed_s taken as 0")
            columns = design[:, 1:3]
        names = ("per_sample_s", "host_overhead_per_replica_s")
        determined = ("host_overhead_per_replica_s",)
        if _rank(columns) < 2:
            raise UserInputError("the rows' GPU counts and batches move together, so compute and overhead per replica "
                                 "cannot be told apart; allowed: rows at two GPU counts with the same per-GPU batch",
                                 source=source, field="--from-timings")
    weights = 1.0 / measured
    solution, *_ = np.linalg.lstsq(columns * weights[:, None], target * weights, rcond=None)
    figures = dict.fromkeys(FIGURES, 0.0)
    figures.update(zip(names, (float(v) for v in solution)))
    model = columns @ solution + np.asarray(communication_s, dtype=float)
    residuals = tuple(float(v) for v in (model - measured) / measured)
    step = float(np.median(measured))
    for name, value in figures.items():
        share = value * float(np.median(design[:, FIGURES.index(name)])) / step
        if share < -ROUNDING:
            culprits = ", ".join(f"row {r.line} ({r.gpus} GPU, {r.step_time_s:.4g} s)" for r in rows)
            raise UserInputError(
                f"the rows contradict each other: they need {name} = {value:.3g} s, below zero ({culprits}; the "
                "network model's communication alone is "
                f"{', '.join(f'{c:.3g} s' for c in communication_s)}); allowed: timings whose step grows with the "
                "GPU count at least by the communication", source=source, field="--from-timings")
        figures[name] = max(0.0, value)
    return TimingsFit(figures, determined, combined, residuals, repeat_spread(rows), tuple(notes))


def compute_per_step(round_fixed_s: float, per_sample_s: float, per_gpu_batch: float, rounds: int) -> float:
    """The step's compute on one GPU (no overhead, no communication): the step model's first
    terms, `rounds` x round_fixed_s + per_gpu_batch x per_sample_s."""
    return rounds * round_fixed_s + per_gpu_batch * per_sample_s
