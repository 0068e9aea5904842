"""Platform catalog, datasets, hours/dollars/kWh, the deadline planner (`plan`, `gansim plan`),
the cost figure, and the seed scenarios loading."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from gansim.cli.plan import register as add_plan_parser
from gansim.cli.plan import run_plan
from gansim.core.config import Scenario
from gansim.core.errors import UserInputError
from gansim.outputs.figures import figures_for
from gansim.whatif.catalog import (
    catalog_dir,
    get_platform,
    load_catalog,
    load_catalog_from,
    platform_names,
    platform_topology,
    run_cost,
)
from gansim.whatif.datasets import DATASETS
from gansim.whatif.deadline_plan import pareto_front, plan
from gansim.whatif.study import load_scenario
from gansim.runner.record import Breakdown, RunRecord
from tests.cli_checks import run_bad

SEEDS = ["seed000-dcgan-clouds", "seed001-resource-aware", "seed001-resource-aware-pcie",
         "seed003-spot-checkpoints", "seed004-k8s-storage"]




def scenario(**fields) -> Scenario:
    data = {"name": "c", "topology": "paper-gtx1080ti-pcie", "workload": "paper-mlp-gan", "gpus": [1], "steps": 2,
            "run": {"dataset": "mnist", "epochs": 10}}
    data.update(fields)
    return Scenario.model_validate(data)


def fake_simulate(step_times: dict[str, float]):
    calls = []

    def simulate(s, topo, gpus, algorithm, source=None):
        calls.append((topo.name, gpus))
        step = step_times[topo.name]
        return RunRecord(gpus=gpus, algorithm=algorithm, cost_model="flow", topology=topo.name, scaling="weak",
                         step_time_s=step, breakdown=Breakdown(step, 0.0, 0.0, 0.0))

    simulate.calls = calls
    return simulate


# ----------------------------------------------------------------------------- datasets and catalog
def test_dataset_sizes():
    assert DATASETS["mnist"].images == 60_000
    assert DATASETS["cifar10"].images == 50_000
    assert DATASETS["celeba"].images == 202_599
    assert DATASETS["mnist"].packed_bytes == 16 + 60_000 * 784


def test_catalog_platforms_build_their_interconnect():
    catalog = load_catalog()
    assert {"aws-p3.8xlarge", "gcp-a2-highgpu-4g", "private-4x-1080ti"} <= set(catalog.platforms)
    for name in platform_names():
        p = get_platform(name)
        topo = platform_topology(name)
        assert len(topo.ranks) == p.gpus
        assert p.prices_as_of, f"{name} says where its price comes from"
    assert catalog.storage["ibm-block-48k-iops"].iops == 48_000


def test_every_catalog_file_starts_with_its_sources():
    for path in sorted(catalog_dir().glob("*.yaml")):
        text = path.read_text()
        assert text.lstrip().startswith("#"), path
        assert "source" in text.lower() or "read 2026" in text or "datasheet" in text.lower(), path


def test_broken_catalog_is_reported_with_file_and_field(tmp_path):
    good = {"platforms": [{"name": "a", "gpus": 1, "interconnect": {"generator": "pcie_tree", "params": {"gpus": 1}}}]}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(good))
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(good))
    with pytest.raises(UserInputError, match="defined twice") as err:
        load_catalog_from(tmp_path)
    assert "two.yaml" in str(err.value)
    (tmp_path / "two.yaml").write_text(yaml.safe_dump({"platforms": [
        {"name": "b", "gpus": 1, "on_demand_usd_per_hour": -1, "interconnect": {"generator": "pcie_tree"}}]}))
    with pytest.raises(UserInputError) as err:
        load_catalog_from(tmp_path)
    assert "platforms[0].on_demand_usd_per_hour" in str(err.value)


def test_run_cost_arithmetic():
    p = get_platform("aws-p3.8xlarge")
    out = run_cost(p, 4, 2 * 3600.0, "on_demand")
    assert out["hours"] == 2.0 and out["cost_usd"] == pytest.approx(2 * 12.24)
    assert out["energy_kWh"] == pytest.approx(4 * 300 * 2 / 1000)
    spot = run_cost(p, 4, 3600.0, "spot")
    assert spot["cost_usd"] == pytest.approx(p.spot_usd_per_hour)
    private = run_cost(get_platform("private-4x-1080ti"), 4, 3600.0)
    assert private["cost_usd"] is None and private["energy_kWh"] == pytest.approx(4 * 250 / 1000)


def test_pareto_front():
    assert pareto_front([(1, 10), (2, 5), (3, 6), (2, 5), (4, 1)]) == [True, True, False, True, True]


# ----------------------------------------------------------------------------- planning
def test_plan_picks_the_cheapest_configuration_that_meets_the_deadline():
    # 10 epochs of MNIST at batch 64: 9380 steps on one GPU, 2350 on four
    simulate = fake_simulate({"aws-p3.2xlarge": 0.5, "aws-p3.8xlarge": 0.5, "gcp-a2-highgpu-4g": 0.4,
                              "private-4x-1080ti": 0.1})
    s = scenario()
    result = plan(s, platforms=["aws-p3.2xlarge", "aws-p3.8xlarge", "gcp-a2-highgpu-4g", "private-4x-1080ti"],
                  pricing=["on_demand"], deadline_hours=1.0, simulate=simulate)
    rows = {r["platform"]: r for r in result["rows"]}
    assert rows["aws-p3.2xlarge"]["hours"] == pytest.approx(9380 * 0.5 / 3600)
    assert rows["aws-p3.2xlarge"]["meets_deadline"] is False  # 1.3 h
    assert rows["aws-p3.8xlarge"]["cost_usd"] == pytest.approx(2350 * 0.5 / 3600 * 12.24)
    assert rows["private-4x-1080ti"]["cost_usd"] is None  # no list price: never chosen
    chosen = result["chosen"]
    assert chosen["platform"] == "gcp-a2-highgpu-4g" and chosen["meets_deadline"]
    assert "cheapest" in result["reason"]
    # without a deadline the cheapest of all wins, however slow (the single V100: 1.3 h, $3.99)
    simulate = fake_simulate({"aws-p3.2xlarge": 0.5, "aws-p3.8xlarge": 0.5, "gcp-a2-highgpu-4g": 0.5})
    free = plan(s, platforms=["aws-p3.2xlarge", "aws-p3.8xlarge", "gcp-a2-highgpu-4g"], deadline_hours=None,
                simulate=simulate)
    assert free["chosen"]["platform"] == "aws-p3.2xlarge"
    assert free["chosen"]["cost_usd"] == min(r["cost_usd"] for r in free["rows"])
    assert len(simulate.calls) == 3  # one step simulation per platform and GPU count


def test_plan_reports_when_nothing_meets_the_deadline_and_out_of_memory_rows():
    simulate = fake_simulate({"aws-p3.2xlarge": 5.0, "local-1x-1080ti": 1.0})
    result = plan(scenario(), platforms=["aws-p3.2xlarge"], pricing=["on_demand", "spot"], deadline_hours=0.5,
                  simulate=simulate)
    assert result["chosen"] is None and "no priced configuration meets the deadline" in result["reason"]
    spot = [r for r in result["rows"] if r["pricing"] == "spot"][0]
    assert spot["cost_usd"] < [r for r in result["rows"] if r["pricing"] == "on_demand"][0]["cost_usd"]
    big = scenario(workload="dcgan", per_gpu_batch=40_000)
    oom = plan(big, platforms=["local-1x-1080ti"], simulate=simulate)
    assert oom["rows"][0]["out_of_memory"] is True and oom["chosen"] is None
    assert simulate.calls[-1][0] != "local-1x-1080ti"  # never simulated


def test_plan_on_the_real_step_simulation(tmp_path):
    result = plan(scenario(), platforms=["local-1x-1080ti", "aws-p3.2xlarge"], deadline_hours=24.0)
    assert {r["platform"] for r in result["rows"]} == {"local-1x-1080ti", "aws-p3.2xlarge"}
    assert all(r["step_time_s"] > 0 and r["hours"] > 0 for r in result["rows"])
    assert result["chosen"]["platform"] == "aws-p3.2xlarge"
    json.dumps(result, allow_nan=False)  # JSON-able
    figures = figures_for([], {"plan": result})
    assert len(figures) == 1 and "Pareto front" in [t["name"] for t in figures[0].data]


# ----------------------------------------------------------------------------- gansim plan
def plan_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_plan_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["plan", *argv])


def write_scenario(tmp_path: Path, **fields) -> str:
    data = {"name": "p", "topology": "paper-gtx1080ti-pcie", "workload": "paper-mlp-gan", "gpus": [1], "steps": 2,
            "run": {"dataset": "mnist", "epochs": 1}}
    data.update(fields)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_gansim_plan_prints_json_and_writes_plan(tmp_path, capsys):
    path = write_scenario(tmp_path)
    args = plan_args(path, "--platforms", "aws-p3.2xlarge,local-1x-1080ti", "--deadline-hours", "5",
                     "--json", "--out", str(tmp_path / "out"))
    assert run_plan(args) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert result["chosen"]["platform"] == "aws-p3.2xlarge" and result["deadline_hours"] == 5.0
    assert json.loads((tmp_path / "out" / "plan.json").read_text()) == result
    assert "CHOSEN" in out.err


@pytest.mark.parametrize(("argv", "flag", "words"), [
    (["--platforms", "aws-p3.2xlarge", "--deadline-hours", "-2"], "--deadline-hours", "in the future"),
    (["--platforms", "aws-p3.2xlarge", "--deadline-hours", "soon"], "--deadline-hours", "number of hours"),
    (["--platforms", "aws-p3.2xlarge", "--deadline", "2001-01-01T00:00"], "--deadline", "in the past"),
    (["--platforms", "no-such-cloud"], "--platforms", "allowed: aws-c5.2xlarge"),
    (["--platforms", "aws-p3.2xlarge", "--pricing", "reserved"], "--pricing", "on_demand, spot"),
    (["--platforms", "aws-p3.2xlarge", "--gpus", "0"], "--gpus", ">= 1"),
    ([], "--platforms", "no platforms"),
])
def test_gansim_plan_bad_flags(tmp_path, argv, flag, words):
    path = write_scenario(tmp_path)
    with pytest.raises(UserInputError) as err:
        run_plan(plan_args(path, *argv))
    assert err.value.field == flag and words in str(err.value)


def test_gansim_plan_lists_the_catalog(capsys):
    assert run_plan(plan_args("--list")) == 0
    out = capsys.readouterr().out
    assert "aws-p3.8xlarge" in out and "$12.240/h" in out and "private-4x-1080ti" in out
    assert "aws-p5.48xlarge" in out and " 8 x H100-SXM5-80GB" in out and "spot $30.326/h" in out
    # a price not listed is n/a, not "n/a/h"
    assert "spot n/a  (" in out and "n/a/h" not in out
    with pytest.raises(UserInputError, match="give a SCENARIO"):
        run_plan(plan_args())


def test_plan_on_a_platform_that_cannot_cost_the_workload_names_the_platform():
    with pytest.raises(UserInputError) as err:
        plan(scenario(), platforms=["aws-c5.2xlarge"])
    assert err.value.field == "plan.platforms" and "aws-c5.2xlarge" in str(err.value) and "tflops" in str(err.value)


# ----------------------------------------------------------------------------- scenario fields
@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"platform": "aws-p9.huge"}, "platform", "unknown platform 'aws-p9.huge'; allowed:"),
    ({"pricing": "spot"}, "(top level)", "needs a 'platform'"),
    ({"plan": {"platforms": ["nowhere"]}}, "plan.platforms", "unknown platform 'nowhere'"),
    ({"plan": {"platforms": ["aws-p3.2xlarge"], "deadline_hours": 0}}, "plan.deadline_hours", "greater than 0"),
    ({"plan": {"platforms": ["aws-p3.2xlarge"], "deadline_hours": -3}}, "plan.deadline_hours", "greater than 0"),
    ({"plan": {"platforms": ["aws-p3.2xlarge"], "deadline": "2001-01-01T00:00:00Z"}}, "plan.deadline", "in the past"),
    ({"plan": {"platforms": ["aws-p3.2xlarge"], "pricing": ["cheap"]}}, "plan.pricing", "'spot'"),
])
def test_bad_cost_fields_are_one_line(capsys, tmp_path, fields, field, words):
    path = write_scenario(tmp_path, **fields)
    line = run_bad(capsys, ["simulate", path])
    assert "p.yaml" in line and field in line and words in line


def test_future_deadline_is_converted_to_hours(tmp_path):
    when = (datetime.now(timezone.utc) + timedelta(hours=10)).isoformat()
    s = load_scenario(write_scenario(tmp_path, plan={"platforms": ["aws-p3.2xlarge"], "deadline": when})).scenario
    assert s.plan.deadline_in_hours() == pytest.approx(10.0, abs=0.01)


@pytest.mark.parametrize("name", SEEDS)
def test_seed_scenarios_load(name):
    loaded = load_scenario(name)
    assert loaded.scenario.run is not None and loaded.scenario.name == name
