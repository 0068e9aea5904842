"""Resumable sweeps: a sweep interrupted after k of its n points (by a hook the test
controls, never by time) and run again simulates the n - k missing points only, and writes
what an uninterrupted run writes; --fresh starts over; a changed scenario never reuses a
kept point; a Dask worker killed mid-sweep loses and repeats no point."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest

import gansim.cli.simulate as simulate_cli
from gansim.cli.main import main
from gansim.outputs.names import SIMULATE_PARTIAL
from gansim.runner.partial import PointStore
from gansim.runner.sweep import run_requests
from gansim.whatif.study import load_scenario, run_scenario

SWEEP = {
    "name": "resume", "topology": "paper-gtx1080ti-pcie", "workload": "paper-mlp-gan", "gpus": [1, 2, 4],
    "algorithms": ["ring", "tree"], "steps": 2,
    "sweep": {"link_bandwidth_scale": [0.5, 1.0], "cost_model": ["flow", "alpha_beta"]},
}
OUTPUTS = ("summary.json", "summary.csv", "details.json", "report.html")


class Interrupt(Exception):
    """Raised by the test's progress hook after the k-th finished point."""


def stop_after(k: int):
    def progress(done: int, total: int) -> None:
        if done == k:
            raise Interrupt
    return progress


def simulated_count(err: str) -> int:
    return int(re.search(r"simulated (\d+) runs", err).group(1))


@pytest.fixture
def sweep_file(write_yaml):
    return write_yaml("resume.yaml", SWEEP)


@pytest.fixture
def interrupting(monkeypatch):
    """Make the next `gansim simulate` stop (as Ctrl-C would) after k finished points."""

    def arm(k: int) -> None:
        def make_progress(total: int):
            def progress(done: int, _total: int) -> None:
                if done == k:
                    raise KeyboardInterrupt
            return progress, lambda: None
        monkeypatch.setattr(simulate_cli, "make_progress", make_progress)

    return arm


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_interrupted_sweep_resumes_with_the_missing_points_only(sweep_file, tmp_path, capsys, interrupting,
                                                                   monkeypatch, workers):
    n = len(run_requests(load_scenario(str(sweep_file))))
    k = 5
    assert main(["simulate", str(sweep_file), "--out", str(tmp_path / "whole"), "--workers", workers]) == 0
    assert simulated_count(capsys.readouterr().err) == n

    interrupting(k)
    assert main(["simulate", str(sweep_file), "--out", str(tmp_path / "resumed"), "--workers", workers]) == 130
    assert len(PointStore(tmp_path / "resumed" / SIMULATE_PARTIAL)) == k
    assert not (tmp_path / "resumed" / "summary.json").exists()
    monkeypatch.undo()
    capsys.readouterr()

    assert main(["simulate", str(sweep_file), "--out", str(tmp_path / "resumed"), "--workers", workers]) == 0
    err = capsys.readouterr().err
    assert simulated_count(err) == n - k and f"{k} runs resumed" in err
    for name in OUTPUTS:
        assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    traces = sorted(p.name for p in (tmp_path / "whole" / "traces").iterdir())
    assert traces and sorted(p.name for p in (tmp_path / "resumed" / "traces").iterdir()) == traces
    for name in traces:
        assert (tmp_path / "resumed" / "traces" / name).read_bytes() == (tmp_path / "whole" / "traces" / name).read_bytes()
    assert not (tmp_path / "resumed" / SIMULATE_PARTIAL).exists()  # a finished run leaves no partial state


def test_fresh_simulates_every_point_again(sweep_file, tmp_path, capsys, interrupting, monkeypatch):
    n = len(run_requests(load_scenario(str(sweep_file))))
    interrupting(4)
    assert main(["simulate", str(sweep_file), "--out", str(tmp_path / "out"), "--workers", "1"]) == 130
    monkeypatch.undo()
    capsys.readouterr()
    assert main(["simulate", str(sweep_file), "--out", str(tmp_path / "out"), "--workers", "1", "--fresh"]) == 0
    err = capsys.readouterr().err
    assert simulated_count(err) == n and "resumed" not in err


def test_a_changed_scenario_never_reuses_a_kept_point(sweep_file, write_yaml, tmp_path):
    store = PointStore(tmp_path / "partial")
    loaded = load_scenario(str(sweep_file))
    n = len(run_requests(loaded))
    with pytest.raises(Interrupt):
        run_scenario(loaded, progress=stop_after(n - 1), traces="none", store=store)
    changed = write_yaml("resume.yaml", {**SWEEP, "steps": 4})
    again = run_scenario(load_scenario(str(changed)), traces="none", store=store)
    assert again.simulated == n and again.resumed == 0
    # and the scenario as it was resumes from its own points
    back = write_yaml("resume.yaml", SWEEP)
    resumed = run_scenario(load_scenario(str(back)), traces="none", store=store)
    assert (resumed.simulated, resumed.resumed) == (1, n - 1)
    assert resumed.summary == run_scenario(load_scenario(str(back)), traces="none").summary


def test_an_edited_topology_file_never_reuses_a_kept_point(write_yaml, tmp_path):
    topo = {"name": "t", "generator": "switch", "params": {"gpus": 4, "bandwidth_GBps": 10.0, "latency_us": 1.0}}
    write_yaml("t.yaml", topo)
    scenario = write_yaml("s.yaml", {"name": "s", "topology": "t.yaml", "workload": {"allreduce_bytes": 1 << 20},
                                     "gpus": [1, 2, 4], "algorithms": ["ring"], "steps": 1})
    store = PointStore(tmp_path / "partial")
    first = run_scenario(load_scenario(str(scenario)), traces="none", store=store)
    write_yaml("t.yaml", {**topo, "params": {**topo["params"], "bandwidth_GBps": 20.0}})
    second = run_scenario(load_scenario(str(scenario)), traces="none", store=store)
    assert second.resumed == 0
    assert second.summary["runs"][-1]["step_time_s"] < first.summary["runs"][-1]["step_time_s"]


def test_a_damaged_kept_point_is_simulated_again(sweep_file, tmp_path):
    store = PointStore(tmp_path / "partial")
    loaded = load_scenario(str(sweep_file))
    whole = run_scenario(loaded, traces="none", store=store)
    damaged = sorted(store.folder.iterdir())[0]
    damaged.write_text('{"record": ')
    again = run_scenario(loaded, traces="none", store=store)
    assert (again.simulated, again.resumed) == (1, whole.simulated - 1)
    assert again.summary == whole.summary


def test_a_dask_worker_killed_mid_sweep_loses_and_repeats_no_point(sweep_file, tmp_path):
    distributed = pytest.importorskip("distributed", reason="the test extra installs distributed")
    loaded = load_scenario(str(sweep_file))
    expected = run_scenario(loaded, traces="none").summary
    store = PointStore(tmp_path / "partial")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster, distributed.Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
        killed = []

        def kill_a_worker_at_the_first_point(done: int, total: int) -> None:
            if not killed:
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])

        result = run_scenario(loaded, client.get_executor(), kill_a_worker_at_the_first_point, traces="none",
                              store=store)
    assert killed
    assert result.summary == json.loads(json.dumps(expected))
    keys = [(r["gpus"], r["algorithm"], tuple(r["sweep"].items())) for r in result.summary["runs"]]
    assert len(keys) == len(set(keys)) == len(expected["runs"])
    assert len(store) == result.simulated == len(run_requests(loaded))


def test_a_full_disk_keeps_the_points_kept_so_far_and_the_same_command_resumes(sweep_file, tmp_path, capsys,
                                                                               monkeypatch):
    import errno
    import tempfile

    import gansim.runner.partial as partial

    n = len(run_requests(load_scenario(str(sweep_file))))
    k = 3
    real = tempfile.mkstemp
    calls = {"n": 0}

    def full_after_k(*args, **kwargs):
        if kwargs.get("dir") is not None and SIMULATE_PARTIAL in str(kwargs["dir"]):
            calls["n"] += 1
            if calls["n"] > k:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(partial.tempfile, "mkstemp", full_after_k)
    out = tmp_path / "out"
    assert main(["simulate", str(sweep_file), "--out", str(out), "--workers", "1"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("gansim: error: cannot keep a finished point") and "No space left" in lines[-1]
    monkeypatch.undo()
    assert len(PointStore(out / SIMULATE_PARTIAL)) == k
    assert main(["simulate", str(sweep_file), "--out", str(out), "--workers", "1"]) == 0
    assert simulated_count(capsys.readouterr().err) == n - k
