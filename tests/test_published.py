"""The published nccl-tests measurements (validation/, installed as gansim.shipped_validation):
every file loads and names its source, the set covers the kinds of system issue 12 asks for,
and the error table on the validation page (docs/validation.md) is what `gansim validate --published`
prints today."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gansim.cli.main import main
from gansim.collectives.nccl_topology import NcclMachine
from gansim.core.errors import UserInputError
from gansim.prediction.nccl_tests_table import OPS
from gansim.prediction.published import compare, error_table, load_published, summarize
from tests.cli_checks import run_bad
from tests.test_report import assert_clean, render

VALIDATION_PAGE = Path(__file__).resolve().parents[1] / "docs" / "validation.md"


@pytest.fixture(scope="module")
def published():
    files = load_published()
    return files, [row for f in files for row in compare(f)]


HELD_ASIDE = Path(__file__).resolve().parents[1] / "validation" / "held-aside"


def test_every_held_aside_file_loads_as_a_shipped_one_and_is_listed_in_its_readme():
    """The held-aside files pass the shipped loader's checks (bench/nccl_model_doc.py reads
    them with it) and each is in the folder's README table, which says why and since when it
    is held aside. Nothing here predicts them."""
    files = load_published(directory=HELD_ASIDE)
    listed = set(re.findall(r"^\| `([\w.-]+)\.yaml` \|", (HELD_ASIDE / "README.md").read_text(), flags=re.M))
    assert files and {f.spec.name for f in files} == listed
    for f in files:  # (one cites the docs' old table it was rebuilt from: its source page was lost)
        assert len(f.topology().ranks) >= f.spec.gpus


def test_every_file_loads_and_names_its_source(published):
    files, _ = published
    assert len(files) >= 6
    for f in files:
        source = f.spec.source
        assert source.url.startswith("https://github.com/"), f.path
        # a repository file is cited at a commit, an issue by its number
        assert re.search(r"/blob/[0-9a-f]{40}/|/issues/\d+$", source.url), source.url
        assert source.where and re.fullmatch(r"\d{4}-\d{2}-\d{2}", source.read), f.path
        assert re.fullmatch(r"\d+\.\d+\.\d+|not stated", f.spec.nccl_version), f.spec.nccl_version
        topology = f.topology()
        assert len(topology.ranks) >= f.spec.gpus
        for m in f.spec.measurements:
            assert m.op in OPS
            sizes = [size for size, *_ in m.points]
            assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), f.path
            for size, time_us, _algbw, busbw in m.points:
                assert time_us > 0 and busbw > 0


def test_the_set_covers_the_kinds_of_system_asked_for(published):
    files, _ = published
    models = {f.spec.name: " ".join(node.model or "" for node in f.topology().nodes.values()) for f in files}
    kinds = {f.spec.name: f.spec.kind for f in files}
    single_nvswitch = [n for n, k in kinds.items() if k.startswith("single-node NVSwitch")]
    assert any("A100" in models[n] for n in single_nvswitch)
    multi = [n for n, k in kinds.items() if k.startswith("multi-node")]
    assert any("H100" in models[n] or "H200" in models[n] for n in multi) and len(multi) >= 2
    assert any(k == "NVLink-bridged pair" for k in kinds.values())
    assert any(k == "PCIe without peer-to-peer" for k in kinds.values())


def test_every_point_is_predicted_and_the_summary_counts_large_messages(published):
    files, rows = published
    assert len(rows) == sum(len(m.points) for f in files for m in f.spec.measurements)
    for r in rows:
        assert r.predicted_busbw_GBps > 0 and r.algorithm in {"ring", "tree", "nvls", "nvls_tree"}
        assert r.error == pytest.approx((r.predicted_busbw_GBps - r.measured_busbw_GBps) / r.measured_busbw_GBps)
    large = [abs(r.error) for r in rows if r.nbytes >= 1 << 20]
    s = summarize(rows)
    assert s.points == len(large) and s.worst_abs_error == max(large)


def _readout_block(marker: str) -> str:
    text = VALIDATION_PAGE.read_text()
    match = re.search(rf"<!-- {marker}:start -->\n```text\n(.*?)```\n<!-- {marker}:end -->", text, re.S)
    assert match, f"docs/validation.md has no {marker} block"
    return match.group(1).rstrip("\n")


def test_the_validation_page_error_table_is_what_the_command_prints(published):
    files, rows = published
    summary, points = error_table(files, rows).split("\n\n")
    assert _readout_block("validate-published-summary") == summary
    assert _readout_block("validate-published-points") == points


def test_validate_published_cli_prints_the_table_and_writes_the_report(tmp_path, capsys):
    assert main(["validate", "--published", "a40-nvlink-pair", "--out", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr()
    record = json.loads(out.out)
    assert [s["name"] for s in record["systems"]] == ["a40-nvlink-pair"]
    assert record["summary"]["points"] == 4 and "a40-nvlink-pair" in out.err
    html = (tmp_path / "report.html").read_text()
    assert "a40-nvlink-pair" in html and json.loads((tmp_path / "validation.json").read_text()) == record


def test_validate_published_unknown_name_is_one_line(capsys):
    line = run_bad(capsys, ["validate", "--published", "no-such-system"])
    assert "--published" in line and "no-such-system" in line and "a40-nvlink-pair" in line


def test_published_report_renders_one_panel_per_system_in_chromium(tmp_path):
    assert main(["validate", "--published", "autodl-2080ti-pcie-no-p2p", "--out", str(tmp_path)]) == 0
    page = render(tmp_path / "report.html")
    assert_clean(page)
    (plot,) = page.plots()
    assert plot["traces"] == 2 * 3  # three collectives, each a predicted curve and the measured points
    assert plot["svg_traces"] > 0 and plot["main_svg"] >= 2
    assert "Error table" in page.dom and "autodl-2080ti-pcie-no-p2p" in page.dom


def _edited_copy(tmp_path, name: str, edit) -> Path:
    """A folder holding the shipped published file `name` with `edit(data)` applied to it."""
    import yaml

    from gansim.core.files import shipped_dir

    data = yaml.safe_load((shipped_dir("validation") / f"{name}.yaml").read_text())
    edit(data)
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path


def _copy_with_env(tmp_path, name: str, env: dict) -> Path:
    return _edited_copy(tmp_path, name, lambda data: data.update(env=env))


def test_a_run_s_nccl_algo_and_proto_are_applied(tmp_path):
    """NCCL_ALGO / NCCL_PROTO in a published run's environment force what the run forced."""
    folder = _copy_with_env(tmp_path, "nebius-h100-2node-ib", {"NCCL_ALGO": "Ring", "NCCL_PROTO": "simple"})
    (forced,) = load_published("nebius-h100-2node-ib", folder)
    rows = compare(forced)
    assert {(r.algorithm, r.protocol) for r in rows} == {("ring", "Simple")}
    (shipped,) = load_published("nebius-h100-2node-ib")
    assert {r.algorithm for r in compare(shipped)} != {"ring"}


def test_p2p_disable_sends_every_gpu_pair_through_host_memory(tmp_path):
    """NCCL_P2P_DISABLE=1: no peer-to-peer transport, NVLink included; the NVLink pair's bytes
    go through host memory (SHM) and its busbw falls."""
    folder = _copy_with_env(tmp_path, "a40-nvlink-pair", {"NCCL_P2P_DISABLE": "1"})
    (disabled,) = load_published("a40-nvlink-pair", folder)
    (shipped,) = load_published("a40-nvlink-pair")
    assert NcclMachine.build(disabled.topology(), 2).hop(0, 1).transport == "shm"
    slow, fast = (compare(f)[-1].predicted_busbw_GBps for f in (disabled, shipped))
    assert slow < fast / 2


@pytest.mark.parametrize("key,value", [("NCCL_ALGO", "Ring,Butterfly"), ("NCCL_PROTO", "LL256"),
                                       ("NCCL_NVLS_ENABLE", "off"),
                                       ("NCCL_P2P_DISABLE", "yes"), ("NCCL_P2P_LEVEL", "NODE")])
def test_an_env_value_the_model_cannot_apply_is_one_line(tmp_path, capsys, key, value):
    _copy_with_env(tmp_path, "a40-nvlink-pair", {key: value})
    with pytest.raises(UserInputError) as err:
        load_published("a40-nvlink-pair", tmp_path)
    text = str(err.value)
    assert "\n" not in text and key in text and "allowed" in text and "a40-nvlink-pair.yaml" in text


def test_a_run_of_one_thread_driving_its_gpus_is_held_by_their_launches(tmp_path):
    """gpus_per_thread (nccl-tests -g): the shipped -g 8 box's smallest sizes take at least
    8 launches; a file that has a thread drive more GPUs than it has is one line."""
    from gansim.prediction.nccl_tests_table import LAUNCH_US_PER_GPU

    (driven,) = load_published("v100-sxm2-8gpu-cube-mesh")
    assert driven.spec.gpus_per_thread == 8
    rows = compare(driven)
    assert min(r.predicted_time_us for r in rows) == pytest.approx(8 * LAUNCH_US_PER_GPU)
    _edited_copy(tmp_path, "v100-sxm2-8gpu-cube-mesh", lambda data: data.update(gpus_per_thread=16))
    with pytest.raises(UserInputError) as err:
        load_published("v100-sxm2-8gpu-cube-mesh", tmp_path)
    text = str(err.value)
    assert "\n" not in text and "gpus_per_thread" in text and "allowed: 1 to 8" in text


def _copy_with_source(tmp_path, name: str, nccl_version: str, dated) -> Path:
    def edit(data):
        data["nccl_version"] = nccl_version
        data["source"].pop("dated", None)
        if dated is not None:
            data["source"]["dated"] = dated
    return _edited_copy(tmp_path, name, edit)


@pytest.mark.parametrize("nccl_version,dated,model", [
    # not stated: the newest release tagged in NVIDIA/nccl before the source's day
    ("not stated", "2019-09-26", "2.4.8"),  # v2.4.8-1 2019-06-25, v2.5.6-1 2019-11-19
    ("not stated", "2023-04-18", "2.17.1"),  # v2.18.1-1 is of that very day: not before it
    ("not stated", "2023-10-15", "2.19.3"),  # newest by number, not by date (v2.18.6-1 2023-10-10)
    ("not stated", "2017-01-01", "2.4"),  # before every release modelled: the oldest
    ("not stated", None, "2.30.7"),  # no day: the newest modelled
    ("2.16.2", "2026-01-01", "2.16.2"),  # a stated release stands
])
def test_a_run_that_does_not_state_its_nccl_is_modelled_by_the_newest_release_before_its_source(
        tmp_path, nccl_version, dated, model):
    folder = _copy_with_source(tmp_path, "stanage-a100-4gpu-nvlink", nccl_version, dated)
    (published,) = load_published("stanage-a100-4gpu-nvlink", folder)
    assert published.model_version == model
    if dated is not None:  # the day unquoted, which YAML reads as a date, is the same day
        path = folder / "stanage-a100-4gpu-nvlink.yaml"
        path.write_text(path.read_text().replace(f"dated: '{dated}'", f"dated: {dated}"))
        assert f"dated: {dated}\n" in path.read_text()
        (unquoted,) = load_published("stanage-a100-4gpu-nvlink", folder)
        assert unquoted.spec.source.dated == dated and unquoted.model_version == model


@pytest.mark.parametrize("day", ["April 2023", "20230418", "2023-02-30"])
def test_a_source_day_that_is_not_a_day_is_one_line(tmp_path, day):
    _copy_with_source(tmp_path, "stanage-a100-4gpu-nvlink", "not stated", day)
    with pytest.raises(UserInputError) as err:
        load_published("stanage-a100-4gpu-nvlink", tmp_path)
    text = str(err.value)
    assert "\n" not in text and "dated" in text and "YYYY-MM-DD" in text and "stanage-a100-4gpu-nvlink.yaml" in text
