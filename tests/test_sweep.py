"""Sweeps: the product of the axes runs through any concurrent.futures executor (serial,
the local process pool, a real Dask cluster) with the same results; one CSV; progress on
stderr only."""

from __future__ import annotations

import csv
import io
import json

import pytest

from gansim.cli.main import main
from gansim.runner.executors import make_executor
from gansim.outputs.trace import run_details
from gansim.runner.sweep import run_requests
from gansim.whatif.study import load_scenario, run_scenario, simulate_scenario

SWEEP = {
    "name": "sw", "topology": "paper-gtx1080ti-pcie", "workload": "paper-mlp-gan", "gpus": [1, 2, 4],
    "algorithms": ["ring", "tree", "reduce_to_one"], "steps": 2,
    "sweep": {"topology": ["paper-gtx1080ti-pcie", "dgx-a100"], "link_bandwidth_scale": [0.5, 1.0],
              "cost_model": ["flow", "alpha_beta"]},
}


@pytest.fixture
def sweep_file(write_yaml):
    return write_yaml("sw.yaml", SWEEP)


def test_the_product_of_the_axes_runs_once_each(sweep_file, tmp_path, capsys):
    assert main(["simulate", str(sweep_file), "--out", str(tmp_path), "--json", "--workers", "2"]) == 0
    out = capsys.readouterr()
    summary = json.loads(out.out)  # stdout holds the JSON and nothing else (progress went to stderr)
    assert "72/72 runs" in out.err
    assert len(summary["runs"]) == 2 * 2 * 2 * 3 * 3
    combos = {tuple(sorted(r["sweep"].items())) for r in summary["runs"]}
    assert len(combos) == 8
    assert {r["topology"] for r in summary["runs"]} == {"paper-gtx1080ti-pcie", "dgx-a100"}
    rows = list(csv.DictReader(io.StringIO((tmp_path / "summary.csv").read_text())))
    assert len(rows) == 72
    assert {"sweep.topology", "sweep.link_bandwidth_scale", "sweep.cost_model"} <= rows[0].keys()
    assert {row["sweep.cost_model"] for row in rows} == {"flow", "alpha_beta"}
    for row, run in zip(rows, summary["runs"]):
        assert float(row["speedup"]) == pytest.approx(run["speedup"])


def test_local_pool_and_serial_agree_byte_for_byte(sweep_file, tmp_path):
    assert main(["simulate", str(sweep_file), "--out", str(tmp_path / "pool"), "--workers", "2"]) == 0
    assert main(["simulate", str(sweep_file), "--out", str(tmp_path / "serial"), "--workers", "1"]) == 0
    for name in ("summary.json", "summary.csv", "details.json"):
        assert (tmp_path / "pool" / name).read_bytes() == (tmp_path / "serial" / name).read_bytes()


def test_a_real_dask_cluster_gives_the_same_results_as_the_local_pool(sweep_file, tmp_path):
    distributed = pytest.importorskip("distributed", reason="the test extra installs distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster:
        address = cluster.scheduler_address.removeprefix("tcp://")
        assert main(["simulate", str(sweep_file), "--out", str(tmp_path / "dask"),
                     "--executor", f"dask://{address}"]) == 0
        # and through the executor directly, as a library user would
        executor, close = make_executor(f"dask://{address}", None, 10)
        try:
            direct = run_scenario(load_scenario(str(sweep_file)), executor, traces="none")
        finally:
            close()
    assert main(["simulate", str(sweep_file), "--out", str(tmp_path / "local"), "--workers", "2"]) == 0
    for name in ("summary.json", "summary.csv", "details.json"):
        assert (tmp_path / "dask" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    local = json.loads((tmp_path / "local" / "summary.json").read_text())
    assert json.loads(json.dumps(direct.summary)) == local
    traces = sorted(p.name for p in (tmp_path / "dask" / "traces").glob("*.json"))
    assert traces == sorted(p.name for p in (tmp_path / "local" / "traces").glob("*.json")) and traces


def test_results_keep_request_order_whatever_the_completion_order(sweep_file):
    loaded = load_scenario(str(sweep_file))
    serial = simulate_scenario(loaded)
    executor, close = make_executor("local", 2, 10)
    try:
        pooled = simulate_scenario(loaded, executor)
    finally:
        close()
    assert pooled == serial


def test_progress_counts_every_run(sweep_file):
    loaded = load_scenario(str(sweep_file))
    seen = []
    executor, close = make_executor("local", 2, 10)
    try:
        run_scenario(loaded, executor, lambda done, total: seen.append((done, total)), traces="none")
    finally:
        close()
    total = len(run_requests(loaded))
    assert seen == [(i, total) for i in range(1, total + 1)]


def test_large_sweeps_trace_the_featured_runs_only(write_yaml, tmp_path):
    body = dict(SWEEP, gpus=[1, 2, 3, 4], algorithms=["ring", "tree", "halving_doubling", "reduce_to_one"],
                workload={"allreduce_bytes": 1 << 16}, steps=1,
                sweep={"link_bandwidth_scale": [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]})
    result = run_scenario(load_scenario(str(write_yaml("big.yaml", body))), traces="auto", details=run_details)
    assert len(result.summary["runs"]) == 112
    traced = [i for i, d in enumerate(result.details) if "trace" in d]
    # per algorithm its largest GPU count, in the first four sweep combinations
    assert traced == result.featured and len(traced) == 4 * 4
    assert all(result.summary["runs"][i]["gpus"] == 4 for i in traced)
    assert all("link_utilization" in d for d in result.details)


@pytest.mark.parametrize("spec, words", [
    ("dask://", ["--executor", "dask://HOST:PORT"]),
    ("dask://justahost", ["--executor", "dask://HOST:PORT"]),
    ("ray://x:1", ["--executor", "unknown executor", "local"]),
])
def test_bad_executor_is_one_line(sweep_file, capsys, spec, words):
    assert main(["simulate", str(sweep_file), "--executor", spec]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words), err


def test_bad_trace_policy_is_one_line(sweep_file, capsys):
    with pytest.raises(SystemExit) as exc:  # argparse's own check, one line and exit 2 like the rest
        main(["simulate", str(sweep_file), "--traces", "every"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--traces" in err[0] and "featured" in err[0]


def test_the_shipped_sweep_scenario():
    loaded = load_scenario("sweep-interconnects")
    assert len(run_requests(loaded)) == 4 * 4 * 3 * 2
    assert set(loaded.scenario.sweep) == {"topology", "gradient_dtype"}
