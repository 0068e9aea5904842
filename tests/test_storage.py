"""Storage-bound input and checkpoint I/O (seed 004): request rates, per-epoch reads, packed
loads, overlap, a slower volume showing in per-epoch time, and bad input."""

from __future__ import annotations

import pytest

from gansim.cli.main import main
from gansim.core.config import Scenario, StorageSpec
from gansim.core.errors import UserInputError
from gansim.runner.point import simulate_point
from gansim.runner.scenario import topology_for
from gansim.topology.graph import load_topology
from gansim.whatif.extensions import evaluate_run_extensions
from gansim.whatif.storage import (
    checkpoint_write_seconds,
    dataset_load_seconds,
    epoch_input_seconds,
    read_seconds,
    request_rate,
    resolve_storage,
    sequential_seconds,
    step_with_input,
)
from gansim.whatif.study import load_scenario
from gansim.runner.record import RunRecord

INLINE = {"name": "cpu-gan", "networks": {
    "discriminator": {"params": 1000, "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.0001},
    "generator": {"params": 2000, "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.0001}},
    "data": {"host_prep_s": 0.0001, "bytes_per_sample": 3072}}


def volume(**fields) -> StorageSpec:
    data = {"bandwidth_MBps": 100.0, "iops": 1000.0}
    data.update(fields)
    return StorageSpec.model_validate(data)


def test_request_rate_is_iops_or_queue_depth_over_latency():
    assert request_rate(volume()) == 1000.0
    assert request_rate(volume(latency_ms=2.0)) == pytest.approx(500.0)  # one reader, 2 ms each
    assert request_rate(volume(latency_ms=2.0, queue_depth=8)) == 1000.0  # eight in flight: IOPS binds


def test_reads_are_bound_by_the_slower_of_requests_and_bytes():
    assert read_seconds(volume(), 1000, 1e6) == pytest.approx(1.0)  # IOPS-bound small files
    assert read_seconds(volume(), 10, 1e9) == pytest.approx(10.0)  # bandwidth-bound
    assert sequential_seconds(volume(latency_ms=5.0), 1e8) == pytest.approx(0.005 + 1.0)
    assert sequential_seconds(volume(iops=10.0), 100 * 1024 * 1024) == pytest.approx(10.0)  # 1 MiB requests


def test_epoch_input_depends_on_the_format():
    v = volume()
    assert epoch_input_seconds(v, 50_000, 3072, "files") == pytest.approx(50.0)
    assert epoch_input_seconds(v, 50_000, 3072, "packed") == 0.0
    assert epoch_input_seconds(None, 50_000, 3072, "files") == 0.0
    assert dataset_load_seconds(v, 1.5e8, "packed") == pytest.approx(1.5)
    assert dataset_load_seconds(v, 1.5e8, "files") == 0.0


def test_overlapped_input_hides_behind_compute_until_it_is_slower():
    assert step_with_input(0.1, 0.05, overlap=False) == pytest.approx(0.15)
    assert step_with_input(0.1, 0.05, overlap=True) == pytest.approx(0.1)
    assert step_with_input(0.1, 0.3, overlap=True) == pytest.approx(0.3)


def scenario(storage, **fields) -> Scenario:
    data = {"name": "s", "topology": "cpu-host", "workload": INLINE, "gpus": [1], "steps": 2,
            "run": {"dataset": "cifar10", "epochs": 2, "data_format": "files"},
            "checkpoint": {"every_steps": 782}, "storage": storage}
    data.update(fields)
    return Scenario.model_validate(data)


def test_a_slower_volume_shows_in_per_epoch_time():
    topo = load_topology("cpu-host")
    fast = scenario({"name": "fast", "bandwidth_MBps": 1000, "iops": 48_000})
    slow = scenario({"name": "slow", "bandwidth_MBps": 1000, "iops": 3_000})
    record = simulate_point(fast, topo, 1, "ring")
    a = evaluate_run_extensions(fast, topo, 1, "ring", record)
    b = evaluate_run_extensions(slow, topo, 1, "ring", record)
    assert a["input_s_per_epoch"] == pytest.approx(50_000 / 48_000)
    assert b["input_s_per_epoch"] == pytest.approx(50_000 / 3_000)
    assert b["epoch_time_s"] - a["epoch_time_s"] == pytest.approx(50_000 / 3_000 - 50_000 / 48_000)
    assert b["time_to_train_s"] > a["time_to_train_s"]
    # checkpoints go to the volume too: parameters + Adam moments, one 1 MiB-request stream
    assert a["checkpoint_cost_s"] == pytest.approx(3000 * 12 / 1e9)
    assert a["storage"] == "fast"


def test_packed_input_costs_a_load_per_process_not_per_epoch():
    topo = load_topology("cpu-host")
    s = scenario({"name": "v", "bandwidth_MBps": 100, "iops": 3_000},
                 run={"dataset": "cifar10", "epochs": 2, "data_format": "packed"})
    ext = evaluate_run_extensions(s, topo, 1, "ring", simulate_point(s, topo, 1, "ring"))
    assert ext["input_s_per_epoch"] == 0.0
    assert ext["dataset_load_s"] == pytest.approx(50_000 * 3073 / 100e6)


def test_checkpoint_bandwidth_overrides_the_volume():
    s = scenario("gke-pd-30k-iops", checkpoint={"every_steps": 10, "storage_bandwidth_GBps": 2.0})
    assert checkpoint_write_seconds(s, 4e9) == pytest.approx(2.0)


def test_catalog_storage_classes_and_the_seed_scenario_sweep():
    assert resolve_storage("ibm-block-48k-iops").iops == 48_000
    with pytest.raises(UserInputError, match="allowed: gke-pd-30k-iops, ibm-block-48k-iops"):
        resolve_storage("nvme-dream")
    loaded = load_scenario("seed004-k8s-storage")
    epochs = {}
    for name in ("ibm-block-48k-iops", "gke-pd-30k-iops"):
        s = loaded.with_overrides({"storage": name})
        topo = topology_for(s.topology, loaded.base_dir, loaded.source)
        ext = evaluate_run_extensions(s, topo, 1, "ring", RunRecord(
            gpus=1, algorithm="ring", cost_model="flow", topology=topo.name, scaling="weak", step_time_s=1.0))
        epochs[name] = ext["epoch_time_s"]
    assert epochs["gke-pd-30k-iops"] > epochs["ibm-block-48k-iops"]


@pytest.mark.parametrize(("storage", "field", "words"), [
    ("nvme-dream", "storage", "unknown storage class 'nvme-dream'"),
    ({"bandwidth_MBps": 100, "iops": 0}, "storage.iops", "greater than 0"),
    ({"bandwidth_MBps": 100, "iops": 10, "latency_ms": -1}, "storage.latency_ms", "greater than or equal to 0"),
    ({"bandwidth_MBps": 100}, "storage.iops", "required field is missing"),
])
def test_bad_storage_is_one_line(capsys, write_yaml, storage, field, words):
    data = {"name": "s", "topology": "cpu-host", "workload": INLINE, "gpus": [1], "storage": storage}
    code = main(["simulate", str(write_yaml("s.yaml", data))])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "s.yaml" in err and f"{field}:" in err and words in err
