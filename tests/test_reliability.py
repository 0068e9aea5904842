"""Whole runs with checkpoints, failures and preemptions: the Young/Daly formula, accounting,
seeded reproducibility, agreement with Daly's expectation, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gansim.core.config import Scenario
from gansim.outputs.figures import figures_for
from gansim.topology.graph import load_topology
from gansim.whatif.extensions import evaluate_run_extensions
from gansim.whatif.reliability import (
    RunModel,
    curve_intervals,
    expected_wall_s,
    goodput_curve,
    job_mtbf_s,
    simulate_run,
    young_daly_interval_s,
)
from tests.cli_checks import run_bad

FAULTY = RunModel(step_s=0.1, total_steps=20_000, every_steps=500, checkpoint_s=5.0, restore_s=5.0,
                  failure_rate_per_s=1 / 600, failure_restart_s=30.0)




def base(**fields) -> dict:
    data = {"name": "r", "topology": "paper-gtx1080ti-pcie", "workload": "paper-mlp-gan", "gpus": [1, 2],
            "steps": 2, "run": {"dataset": "mnist", "epochs": 2}}
    data.update(fields)
    return data


# ----------------------------------------------------------------------------- formulas
def test_young_daly_is_sqrt_two_c_m():
    assert young_daly_interval_s(10.0, 2000.0) == pytest.approx(200.0)
    assert young_daly_interval_s(0.5, 7200.0) == pytest.approx(math.sqrt(2 * 0.5 * 7200.0))
    with pytest.raises(ValueError):
        young_daly_interval_s(1.0, 0.0)
    with pytest.raises(ValueError):
        young_daly_interval_s(-1.0, 10.0)


def test_job_mtbf_divides_by_gpus_and_adds_preemptions():
    assert job_mtbf_s(8, 1000.0) == pytest.approx(1000.0 * 3600 / 8)
    assert job_mtbf_s(1) == math.inf
    both = job_mtbf_s(4, 1000.0, instances=2, preemptions_per_hour=0.1)
    assert 1 / both == pytest.approx(4 / 3.6e6 + 2 * 0.1 / 3600)


def test_expected_goodput_peaks_near_the_young_daly_interval():
    optimum_steps = young_daly_interval_s(FAULTY.checkpoint_s, 1 / FAULTY.fault_rate_per_s) / FAULTY.step_s
    curve = goodput_curve(FAULTY, curve_intervals(FAULTY.every_steps, optimum_steps, FAULTY.total_steps, 41))
    best = max(curve, key=lambda c: c["expected_goodput"])
    assert best["every_steps"] / optimum_steps == pytest.approx(1.0, abs=0.35)
    assert curve[0]["expected_goodput"] < best["expected_goodput"] > curve[-1]["expected_goodput"]


# ----------------------------------------------------------------------------- the run
def test_fault_free_run_is_work_plus_checkpoints():
    model = RunModel(step_s=0.01, total_steps=1050, every_steps=100, checkpoint_s=0.5, startup_s=2.0)
    out = simulate_run(model, seed=1)
    segments = 11
    assert out["time_to_train_s"] == pytest.approx(2.0 + 1050 * 0.01 + segments * 0.5)
    assert out["checkpoints"] == segments and out["failures"] == 0 and out["lost_work_s"] == 0.0
    assert out["goodput"] == pytest.approx(1050 * 0.01 / out["time_to_train_s"])
    assert expected_wall_s(model) == pytest.approx(out["time_to_train_s"], rel=1e-3)


def test_wall_time_is_useful_plus_overheads_plus_lost_work():
    out = simulate_run(FAULTY, seed=7)
    assert out["failures"] > 0 and out["lost_work_s"] > 0
    parts = out["useful_s"] + out["checkpoint_s"] + out["startup_s"] + out["lost_work_s"] + out["restart_s"]
    assert parts == pytest.approx(out["time_to_train_s"])
    assert out["useful_s"] == pytest.approx(FAULTY.total_steps * FAULTY.step_s)


def test_without_checkpoints_a_fault_restarts_from_the_start():
    model = RunModel(step_s=1.0, total_steps=100, failure_rate_per_s=1 / 150, failure_restart_s=1.0)
    out = simulate_run(model, seed=2)
    assert out["finished"] and out["checkpoints"] == 0
    # every interrupted attempt is lost whole: wall = the final clean 100 s + lost + restarts
    assert out["time_to_train_s"] == pytest.approx(100.0 + out["lost_work_s"] + out["restart_s"])


def test_seeded_failure_run_is_reproducible():
    model = RunModel(step_s=0.1, total_steps=5000, every_steps=200, checkpoint_s=1.0, restore_s=1.0,
                     failure_rate_per_s=1 / 100, failure_restart_s=5.0, preemption_rate_per_s=1 / 300,
                     preemption_restart_s=10.0)
    a, b = simulate_run(model, seed=42), simulate_run(model, seed=42)
    assert a == b
    c = simulate_run(model, seed=43)
    assert (c["time_to_train_s"], c["failures"], c["preemptions"]) != (a["time_to_train_s"], a["failures"],
                                                                      a["preemptions"])
    assert a["failures"] > 0 and a["preemptions"] > 0


def test_mean_of_seeded_runs_matches_dalys_expectation():
    walls = [simulate_run(FAULTY, seed=s)["time_to_train_s"] for s in range(300)]
    expected = expected_wall_s(FAULTY)
    stderr = np.std(walls) / math.sqrt(len(walls))
    assert abs(np.mean(walls) - expected) < 4 * stderr + 0.01 * expected


def test_a_hopeless_run_stops_instead_of_looping():
    model = RunModel(step_s=1.0, total_steps=1000, failure_rate_per_s=1.0, failure_restart_s=0.1)
    out = simulate_run(model, seed=0, max_wall_factor=3.0)
    assert out["finished"] is False


# ----------------------------------------------------------------------------- the scenario level
def test_run_extensions_report_goodput_and_young_daly_beside_the_chosen_interval():
    from gansim.runner.point import simulate_point

    s = Scenario.model_validate(base(checkpoint={"every_steps": 50, "storage_bandwidth_GBps": 0.001},
                                     failures={"mtbf_hours_per_gpu": 0.05, "restart_s": 2.0}, seed=5))
    topo = load_topology("paper-gtx1080ti-pcie")
    record = simulate_point(s, topo, 2, "ring")
    ext = evaluate_run_extensions(s, topo, 2, "ring", record)
    assert ext["steps_total"] == 2 * math.ceil(60_000 / 128)
    assert ext["checkpoint_every_steps"] == 50
    params = 2_051_384 + 233_985
    assert ext["checkpoint_bytes"] == params * 4 * 3  # parameters + Adam's two moments
    assert ext["checkpoint_cost_s"] == pytest.approx(params * 12 / 1e6)
    mtbf = 0.05 * 3600 / 2
    assert ext["job_mtbf_s"] == pytest.approx(mtbf)
    assert ext["young_daly_interval_s"] == pytest.approx(math.sqrt(2 * ext["checkpoint_cost_s"] * mtbf))
    assert ext["young_daly_interval_steps"] == pytest.approx(ext["young_daly_interval_s"] / ext["step_time_with_input_s"])
    assert 0 < ext["goodput"] < 1 and ext["lost_work_s"] >= 0
    assert ext["goodput_curve"] and all(0 <= c["expected_goodput"] <= 1 for c in ext["goodput_curve"])
    again = evaluate_run_extensions(s, topo, 2, "ring", record)
    assert again["time_to_train_s"] == ext["time_to_train_s"]  # the scenario seed drives the draws
    figures = figures_for([record.with_extensions(ext)])
    titles = [f.layout["title"]["text"] for f in figures]
    assert any("Goodput vs checkpoint interval" in t for t in titles)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"failures": {"mtbf_hours_per_gpu": -5, "restart_s": 10}}, "failures.mtbf_hours_per_gpu", "greater than 0"),
    ({"failures": {"mtbf_hours_per_gpu": 100, "restart_s": -1}}, "failures.restart_s", "greater than or equal"),
    ({"preemption": {"rate_per_hour": -0.1, "restart_s": 1}}, "preemption.rate_per_hour", "greater than or equal"),
    ({"checkpoint": {"every_steps": 0, "storage_bandwidth_GBps": 1}}, "checkpoint.every_steps", "greater than"),
    ({"checkpoint": {"every_steps": 10}}, "(top level)", "storage_bandwidth_GBps"),
    ({"run": {"epochs": 2}}, "run", "dataset"),
    ({"run": {"dataset": "imagenet", "epochs": 2}}, "run.dataset", "'celeba'"),
    ({"run": {"dataset": "mnist", "epochs": 0}}, "run.epochs", "greater than 0"),
])
def test_bad_run_fields_are_one_line(capsys, write_yaml, fields, field, words):
    path = write_yaml("s.yaml", base(**fields))
    line = run_bad(capsys, ["simulate", str(path)])
    assert "s.yaml" in line and field in line and words in line


def test_failures_without_a_run_are_refused(capsys, write_yaml):
    data = base(failures={"mtbf_hours_per_gpu": 100, "restart_s": 1})
    data.pop("run")
    line = run_bad(capsys, ["simulate", str(write_yaml("s.yaml", data))])
    assert "'failures' needs 'run'" in line
