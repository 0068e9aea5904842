"""A run's record is typed from the worker that simulates it to the outputs: RunRecord gives
back summary.json's row exactly (keys, order, values), and a sweep's partial state keeps it
losslessly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gansim
from gansim.runner.partial import PointStore
from gansim.runner.point import oom_record
from gansim.runner.record import Breakdown, Memory, ResourceUse, RunRecord
from gansim.topology.graph import load_topology
from gansim.training.memory import memory_report
from gansim.whatif.study import load_scenario, run_scenario

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.summary.json")), ids=lambda p: p.name.split(".")[0])
def test_every_golden_run_reads_back_to_the_same_row_in_the_same_order(path):
    runs = json.loads(path.read_text())["runs"]
    for row in runs:
        record = RunRecord.from_dict(row)
        again = record.to_dict()
        assert list(again) == list(row)
        assert json.dumps(again) == json.dumps(row)  # values and their types (64 stays 64, not 64.0)
        assert RunRecord.from_dict(again) == record


def test_a_simulated_run_has_typed_fields_and_its_whatifs_in_order():
    result = run_scenario(load_scenario("seed003-spot-checkpoints"), traces=None)
    golden = json.loads((GOLDEN / "seed003-spot-checkpoints.summary.json").read_text())["runs"]
    for run, row in zip(result.runs, golden, strict=True):
        assert isinstance(run.breakdown, Breakdown) and isinstance(run.bottleneck, ResourceUse)
        assert all(isinstance(use, ResourceUse) for use in run.top_resources)
        assert isinstance(run.memory, Memory) and run.memory.peak_GB == row["memory_peak_GB"]
        # the what-ifs' fields: in `extensions`, in summary.json's order, readable as attributes
        assert list(run.extensions) == [k for k in row if k in run.extensions]
        assert run.cost_usd == row["cost_usd"] and run.extensions["goodput_curve"] == row["goodput_curve"]
        assert list(run.to_dict()) == list(row)
    with pytest.raises(AttributeError, match="no field 'no_such_field'"):
        result.runs[0].no_such_field  # noqa: B018


def test_an_out_of_memory_run_keeps_the_row_it_always_had():
    topo = load_topology("paper-gtx1080ti-pcie")
    huge = load_scenario("paper-table3").with_overrides({"workload": "dcgan", "per_gpu_batch": 40_000})
    record = oom_record(huge, topo, 2, "ring", memory_report(huge, topo, 2))
    row = record.to_dict()
    assert list(row) == ["gpus", "algorithm", "cost_model", "topology", "workload", "scaling", "per_gpu_batch",
                         "step_time_s", "speedup", "efficiency", "out_of_memory", "fits", "memory_peak_GB",
                         "memory_capacity_GB", "memory_parts"]
    assert row["step_time_s"] is None and row["fits"] is False and record.fits is False
    assert RunRecord.from_dict(row) == record


def test_the_partial_state_gives_back_each_record_equal(tmp_path):
    result = run_scenario(load_scenario("seed004-k8s-storage"), traces=None)
    topo = load_topology("paper-gtx1080ti-pcie")
    huge = load_scenario("paper-table3").with_overrides({"workload": "dcgan", "per_gpu_batch": 40_000})
    oom = oom_record(huge, topo, 2, "ring", memory_report(huge, topo, 2))
    store = PointStore(tmp_path / "partial")
    records = [*result.runs, oom]
    for i, record in enumerate(records):
        store.put(f"k{i}", (record, {"cpu_s": 0.5}))
    for i, record in enumerate(records):
        kept = store.get(f"k{i}")
        assert kept is not None
        assert kept[0] == record and kept[1] == {"cpu_s": 0.5}
        assert list(kept[0].to_dict()) == list(record.to_dict())
    assert any(record.sweep for record in records) and any(record.extensions for record in records)


def test_a_kept_point_of_another_shape_is_simulated_again(tmp_path):
    store = PointStore(tmp_path)
    (tmp_path / "bad.json").write_text(json.dumps({"key": "bad", "record": {"gpus": 1}, "details": {}}))
    assert store.get("bad") is None


def test_the_api_run_is_the_runner_record():
    assert gansim.Run is RunRecord


def test_each_level_covers_the_union_of_its_own_and_the_lower_levels_intervals():
    """union_lengths_per_rank against a merge done by hand, rank by rank: the measure of the
    union of every interval of level L or less (compute, then compute and data, then all)."""
    import numpy as np

    from gansim.runner.record import union_lengths_per_rank

    rng = np.random.default_rng(7)
    for _ in range(50):
        ranks, n = int(rng.integers(1, 6)), int(rng.integers(0, 40))
        rank, level = rng.integers(0, ranks, n), rng.integers(0, 3, n)
        start = np.round(rng.random(n) * 10, 1)
        end = start + np.round(rng.random(n) * 3, 1)
        parts = [(rank[level == at], start[level == at], end[level == at]) for at in range(3)]
        got = union_lengths_per_rank(parts, ranks)
        assert parts == []  # read and let go
        for at in range(3):
            for r in range(ranks):
                merged: list[list[float]] = []
                for s, e in sorted(zip(start[(rank == r) & (level <= at)], end[(rank == r) & (level <= at)])):
                    if merged and s <= merged[-1][1]:
                        merged[-1][1] = max(merged[-1][1], e)
                    else:
                        merged.append([s, e])
                assert got[at][r] == pytest.approx(sum(e - s for s, e in merged), abs=1e-9)
