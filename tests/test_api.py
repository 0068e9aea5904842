"""The Python API (gansim.api): a shipped name, a path and a dict simulate alike; results are
typed and their to_dict() is what the command writes; bad input raises UserInputError with
the command's one-line message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gansim
from gansim.cli.main import main
from gansim.core.files import resolve_file

SMALL = {
    "name": "api-small", "topology": "paper-gtx1080ti-pcie", "workload": "paper-mlp-gan", "gpus": [1, 2, 4],
    "algorithms": ["ring", "tree"], "steps": 2, "sweep": {"link_bandwidth_scale": [0.5, 1.0]},
}


@pytest.fixture(scope="module")
def shipped():
    return gansim.simulate("paper-table3")


def test_a_shipped_name_a_path_and_a_dict_give_equal_results(shipped):
    path = resolve_file("paper-table3", "scenarios")
    from_path = gansim.simulate(path)
    from_dict = gansim.simulate(yaml.safe_load(path.read_text()))
    assert from_path.to_dict() == shipped.to_dict()
    assert from_dict.runs == shipped.runs and from_dict.scenario == shipped.scenario
    # a dict has no file: summary.json's `source` says so, every other field is the same
    assert from_dict.source == "<dict>" and shipped.source == "paper-table3.yaml"
    assert {k: v for k, v in from_dict.to_dict().items() if k != "source"} == \
        {k: v for k, v in shipped.to_dict().items() if k != "source"}


def test_runs_are_typed_with_the_summary_fields_as_attributes(shipped):
    summary = shipped.to_dict()
    assert len(shipped.runs) == len(summary["runs"]) > 1
    for run, row in zip(shipped.runs, summary["runs"]):
        assert isinstance(run, gansim.Run)
        assert (run.gpus, run.algorithm, run.step_time_s, run.speedup) == \
            (row["gpus"], row["algorithm"], row["step_time_s"], row["speedup"])
        assert run.busbw_GBps == row["busbw_GBps"] and run.bottleneck.to_dict() == row["bottleneck"]
        assert run.breakdown.communication_s == row["breakdown"]["communication_s"]
        assert run.memory.peak_GB == row["memory_peak_GB"]
        assert run.to_dict() == row
    with pytest.raises(AttributeError):
        shipped.runs[0].no_such_field  # noqa: B018


def test_to_dict_equals_the_summary_json_the_command_writes(write_yaml, tmp_path):
    scenario = write_yaml("small.yaml", SMALL)
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "cli")]) == 0
    written = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert gansim.simulate(scenario).to_dict() == written
    into = gansim.simulate(scenario, out=tmp_path / "api", executor=None)
    assert json.loads((tmp_path / "api" / "summary.json").read_text()) == written
    assert {p.name for p in into.written} >= {"summary.json", "summary.csv", "report.html", "details.json"}


def test_a_bad_name_raises_the_message_the_command_prints(capsys):
    with pytest.raises(gansim.UserInputError) as err:
        gansim.simulate("no-such-scenario")
    assert main(["simulate", "no-such-scenario"]) == 2
    assert capsys.readouterr().err.strip() == f"gansim: error: {err.value}"
    assert "\n" not in str(err.value) and "unknown scenario 'no-such-scenario'" in str(err.value)


def test_a_bad_dict_names_the_field(capsys):
    with pytest.raises(gansim.UserInputError) as err:
        gansim.simulate({**SMALL, "gpus": [0]})
    assert str(err.value).startswith("<dict>: gpus")


def test_nccl_tests_gives_the_rows_the_command_prints(capsys):
    result = gansim.nccl_tests("dgx-a100", 8, minbytes="1M", maxbytes="16M")
    assert [row.nbytes for row in result.rows] == [1 << 20, 1 << 21, 1 << 22, 1 << 23, 1 << 24]
    assert main(["nccl-tests", "dgx-a100", "-g", "8", "-b", "1M", "-e", "16M", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == result.to_dict()
    with pytest.raises(gansim.UserInputError) as err:
        gansim.nccl_tests("dgx-a100", 64)
    assert "64 GPUs asked" in str(err.value) and err.value.field == "-g"


def test_validate_published_gives_the_record_the_command_writes(tmp_path, capsys):
    result = gansim.validate(published=True)
    assert result.kind == "published" and result.table
    assert main(["validate", "--published", "--json", "--out", str(tmp_path / "v")]) == 0
    assert json.loads(capsys.readouterr().out) == result.to_dict()
    with pytest.raises(gansim.UserInputError):
        gansim.validate()


def test_predict_gives_what_the_command_prints(tmp_path, capsys):
    profile = resolve_profile(tmp_path)
    result = gansim.predict(profile, [1, 2])
    assert [p.world_size for p in result.predictions] == [1, 2]
    assert main(["predict", "--profile", str(profile), "--world-sizes", "1,2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == result.to_dict()
    with pytest.raises(gansim.UserInputError) as err:
        gansim.predict(profile, [0])
    assert err.value.field == "--world-sizes"


def resolve_profile(tmp_path):
    """A profile written by the calibrator's trace import from the shipped test trace."""
    from tests.hostile import PROFILE

    path = tmp_path / "profile.json"
    path.write_text(json.dumps(PROFILE))
    return path


def test_calibrate_from_timings_writes_what_the_command_writes(tmp_path, capsys):
    csv = Path(__file__).resolve().parent.parent / "examples" / "timings" / "paper-table3.csv"
    common = {"workload": "paper-mlp-gan", "topology": "paper-gtx1080ti-pcie", "fit_gpus": [1, 2]}
    made = gansim.calibrate(from_timings=str(csv), out=str(tmp_path / "api.json"), **common)
    assert made.source == "timings" and made.profile.fit.timings is not None
    assert main(["calibrate", "--from-timings", str(csv), "--workload", "paper-mlp-gan", "--topology",
                 "paper-gtx1080ti-pcie", "--fit-gpus", "1,2", "--out", str(tmp_path / "cli.json")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert list(made.lines) == printed  # the figures and each row's residual
    api, cli = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("api", "cli"))
    for document in (api, cli):
        document["provenance"].pop("date")
    assert api == cli


def test_calibrate_refuses_a_bad_argument_with_the_commands_message(tmp_path, capsys):
    with pytest.raises(gansim.UserInputError) as err:
        gansim.calibrate(world_sizes="1", out=str(tmp_path / "p.json"))
    assert main(["calibrate", "--world-sizes", "1", "--out", str(tmp_path / "p.json")]) == 2
    assert str(err.value) in capsys.readouterr().err
    with pytest.raises(gansim.UserInputError, match="unknown argument 'world_size'"):
        gansim.calibrate(world_size=2)
