"""Property-based tests (Hypothesis) of the validation boundary, to find what nobody listed:

- whatever replaces any part of a scenario, a topology or a profile, reading it gives the
  model or one UserInputError line, never another exception;
- whatever bytes a YAML file holds, the same;
- whatever passes validation, every model downstream computes with: a scenario simulates to
  a summary.json of finite numbers, a profile predicts finite step times and speed-ups.

Examples are bounded and derandomized (the same cases on every run of CI); set
GANSIM_EXPLORE=N to search N times as many random ones."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gansim.calibration.profile.schema import load_profile
from gansim.core.config import Scenario, parse
from gansim.core.errors import UserInputError
from gansim.core.files import read_yaml
from gansim.outputs.results import table, to_csv, to_json
from gansim.prediction.calibrated import predict
from gansim.prediction.profile_validation import validate
from gansim.topology.graph import topology_from_dict
from gansim.whatif.study import load_scenario, run_scenario
from tests.hostile import BOX, GOOD, PROFILE, leaves, replaced, write_files

EXPLORE = int(os.environ.get("GANSIM_EXPLORE", "0"))


def examples(n: int) -> settings:
    return settings(max_examples=n * max(1, EXPLORE), derandomize=not EXPLORE, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# Anything a YAML or JSON document can hold
documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)
# Numbers near every bound the ranges have, and between them
numbers = st.one_of(
    st.sampled_from([0, 1, 2, 3, 4, 0.0, 1e-12, 1e-9, 1e-6, 1e-3, 0.5, 1.0, 2.0, 10.0, 1e3, 1e6, 1e9, 1e12, 2**50,
                     10**13, 2**63 - 1]),
    st.floats(min_value=0, max_value=1e6),
    st.integers(min_value=0, max_value=10**6),
)


def paths(doc: Any, path: tuple = ()) -> list[tuple]:
    """Every place in a document, containers included."""
    found = [path] if path else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += paths(value, path + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += paths(value, path + (i,))
    return found


def one_line(err: UserInputError) -> None:
    assert "\n" not in str(err) and str(err)


@examples(300)
@given(path=st.sampled_from(paths(GOOD)), value=documents)
def test_any_scenario_document_is_a_scenario_or_one_line(path, value):
    try:
        parse(Scenario, replaced(GOOD, path, value), "s.yaml")
    except UserInputError as err:
        one_line(err)


@examples(200)
@given(path=st.sampled_from(paths(BOX)), value=documents)
def test_any_topology_document_is_a_topology_or_one_line(path, value):
    try:
        topology_from_dict(replaced(BOX, path, value), "t.yaml")
    except UserInputError as err:
        one_line(err)


@examples(200)
@given(params=st.dictionaries(st.sampled_from(["nodes", "gpus_per_node", "intra", "nic_bandwidth_GBps",
                                               "nic_latency_us", "intra_params"]), documents, max_size=3))
def test_any_generator_parameters_are_a_topology_or_one_line(params):
    try:
        topology_from_dict({"name": "g", "generator": "multi_node", "params": params}, "g.yaml")
    except UserInputError as err:
        one_line(err)


@examples(200)
@given(data=st.binary(max_size=400) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_a_mapping_or_one_line(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f.yaml"
        path.write_bytes(data)
        try:
            assert isinstance(read_yaml(path), dict)
        except UserInputError as err:
            one_line(err)


@examples(300)
@given(path=st.sampled_from(paths(PROFILE)), value=documents)
def test_any_profile_document_is_a_profile_or_one_line(path, value):
    with tempfile.TemporaryDirectory() as folder:
        write_files(Path(folder), {"p.json": replaced(PROFILE, path, value)})
        try:
            load_profile(Path(folder) / "p.json")
        except UserInputError as err:
            one_line(err)


def finite_numbers(doc: Any) -> None:
    """Every number in a result is finite (JSON without NaN or Infinity)."""
    for _, value in leaves(doc, every=True):
        assert math.isfinite(value), value


# All but the step count, which only makes a run longer (up to its limit, minutes at 2 ranks)
SCENARIO_NUMBERS = [path for path, _ in leaves(GOOD) if path != ("steps",)]


def changed(places: list[tuple]) -> st.SearchStrategy:
    """A document's numbers at one to three of `places` replaced by `numbers`."""
    return st.lists(st.tuples(st.sampled_from(places), numbers), min_size=1, max_size=3)


def with_changes(doc: Any, changes: list[tuple[tuple, Any]]) -> Any:
    for path, value in changes:
        doc = replaced(doc, path, value)
    return doc


@examples(25)
@given(changes=changed(SCENARIO_NUMBERS))
def test_every_valid_scenario_simulates_to_finite_numbers(changes):
    doc = with_changes(GOOD, changes)
    try:
        parse(Scenario, doc, "s.yaml")
    except UserInputError:
        assume(False)  # outside the ranges: the property above covers it
    with tempfile.TemporaryDirectory() as folder:
        write_files(Path(folder), {"box.yaml": BOX, "s.yaml": doc})
        try:
            loaded = load_scenario(str(Path(folder) / "s.yaml"))
        except UserInputError as err:  # a limit, or a figure that does not fit the machine
            one_line(err)
            return
        result = run_scenario(loaded, traces=None)
    text = to_json(result.summary)  # no NaN or infinity: json refuses them
    to_csv(result.runs, result.header["sweep_axes"]), table(result.header["scenario"], result.runs)
    finite_numbers(json.loads(text))


# All but the D steps per G step, which only make the prediction longer (up to their limit)
PROFILE_NUMBERS = [path for path, _ in leaves(PROFILE) if path not in (("schema",), ("provenance", "d_steps"))]


@examples(15)
@given(changes=changed(PROFILE_NUMBERS))
def test_every_valid_profile_predicts_finite_numbers(changes):
    doc = with_changes(PROFILE, changes)
    with tempfile.TemporaryDirectory() as folder:
        write_files(Path(folder), {"p.json": doc})
        try:
            profile = load_profile(Path(folder) / "p.json")
        except UserInputError:
            assume(False)
    predictions = predict(profile, [1, 2])
    for p in predictions:
        assert math.isfinite(p.step_time_s) and p.step_time_s > 0 and math.isfinite(p.speedup) and p.speedup > 0
    report = validate(profile)
    finite_numbers(json.loads(json.dumps(report.as_dict(), allow_nan=False)))
    report.table()


# A profile measured on a device with figures, every phase costed: what the roofline reads
# to move a profile to another device (`predict --topology` on a GPU)
COSTED = replaced(PROFILE, ("measured", "phase_costs"), {p: {"flops": 1e8, "bytes": 1e6} for p in (
    "d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s", "g_optimizer_s")})
DEVICE_NUMBERS = [path for path, _ in leaves(COSTED) if path[:2] == ("measured", "phase_costs")
                  or str(path[-1]).startswith("device_")] + [("nodes", 1, "tflops"), ("nodes", 1, "memory_bandwidth_GBps")]


@examples(15)
@given(changes=changed(DEVICE_NUMBERS))
def test_every_valid_device_figure_predicts_finite_numbers_on_another_device(changes):
    profile_doc = with_changes(COSTED, [c for c in changes if c[0][0] != "nodes"])
    box_doc = with_changes(BOX, [c for c in changes if c[0][0] == "nodes"])
    with tempfile.TemporaryDirectory() as folder:
        write_files(Path(folder), {"p.json": profile_doc})
        try:
            profile = load_profile(Path(folder) / "p.json")
            target = topology_from_dict(box_doc, "box.yaml")
        except UserInputError:
            assume(False)
    for p in predict(profile, [1, 2], target):
        assert math.isfinite(p.step_time_s) and p.step_time_s > 0 and math.isfinite(p.speedup) and p.speedup > 0
        assert p.compute_scaled_from is not None and math.isfinite(p.compute_scaled_from["ratio"])
