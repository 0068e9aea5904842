"""gansim.calibration.ranks.launch (and the tasks it runs): real gloo runs at world size 2, faults ending the run in bounded time,
port selection with a busy port."""

from __future__ import annotations

import multiprocessing
import socket

import pytest

torch = pytest.importorskip("torch")  # the calibrate extra; installed in CI

from gansim.calibration.ranks.faults import FaultSpec
from gansim.calibration.ranks.launch import (
    create_store,
    find_free_port,
    run_local,
    run_training,
)
from gansim.calibration.profile.phases import COMPUTE_PHASES, PHASES, STEP  # noqa: E402
from gansim.calibration.ranks.run_config import CalibrationError, RunConfig  # noqa: E402

SMALL = dict(steps=4, warmup=1, batch_size=16, timeout_s=30.0)


def _no_children_left():
    """Every child the run started has ended (waited for: a child left running hangs the test)."""
    for child in multiprocessing.active_children():
        child.join()
    return not multiprocessing.active_children()


class _BusyPort:
    """A listening socket: its port is taken."""

    def __enter__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        return self

    def __exit__(self, *exc):
        self.sock.close()


def test_ddp_world_size_2_samples_every_phase_and_rank_with_a_busy_port():
    with _BusyPort() as busy:
        picked = []

        def picker(host):
            # the first candidate is taken: the store must move to another port
            port = busy.port if not picked else find_free_port(host)
            picked.append(port)
            return port

        result = run_training(RunConfig(mode="ddp", **SMALL), 2, port_picker=picker)
    assert picked[0] == busy.port and len(picked) == 2 and picked[1] != busy.port
    ranks = result["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    expected = set(COMPUTE_PHASES) | {STEP}  # ddp: the all-reduce is inside backward
    for r in ranks:
        assert set(r["phases"]) == expected
        for name, values in r["phases"].items():
            assert len(values) == SMALL["steps"] - SMALL["warmup"], name
            assert all(v >= 0 for v in values)
        assert all(v > 0 for v in r["phases"]["g_backward_s"])
        # the step (between barriers) holds its phases
        for i in range(len(r["phases"][STEP])):
            inner = sum(r["phases"][p][i] for p in COMPUTE_PHASES)
            assert r["phases"][STEP][i] >= inner * 0.99
    assert _no_children_left()


def test_flat_mode_compute_sweep_and_reduce():
    cfg = RunConfig(mode="flat", sweep_sizes=(4096, 8192, 65536), sweep_iters=3,
                    reduce_sizes=(65536, 131072), **SMALL)
    res = run_local(cfg, 2, ("sweep", "compute", "train", "reduce"))
    for r in res["train"]["ranks"]:
        assert set(r["phases"]) == set(PHASES) | {STEP}
        assert all(len(v) == 3 for v in r["phases"].values())
        assert all(v > 0 for v in r["phases"]["g_allreduce_s"])
    for r in res["compute"]["ranks"]:
        assert set(r["phases"]) == set(COMPUTE_PHASES) | {STEP}
    rows = res["sweep"]["rows"]
    assert [row["bytes"] for row in rows] == [4096, 8192, 65536]
    assert all(row["world_size"] == 2 and row["time_s"] > 0 and row["iters"] == 3 for row in rows)
    assert [row["bytes"] for row in res["reduce"]["rows"]] == [65536, 131072]
    assert _no_children_left()


def test_create_store_skips_a_busy_port():
    with _BusyPort() as busy:
        store, port = create_store("127.0.0.1", busy.port, timeout_s=5)
        assert port != busy.port
        store.set("k", "v")
        assert store.get("k") == b"v"
        del store


def test_fault_spec_parse():
    assert FaultSpec.parse("1:d_backward_s") == FaultSpec(1, "d_backward_s", "exit", 0)
    assert FaultSpec.parse("0:g_forward_s:hang:3") == FaultSpec(0, "g_forward_s", "hang", 3)
    with pytest.raises(ValueError):
        FaultSpec.parse("1:nope")


@pytest.mark.parametrize("action,phase", [("exit", "d_backward_s"), ("raise", "g_forward_s"),
                                          ("hang", "g_optimizer_s")])
def test_a_failing_rank_ends_the_run_naming_rank_and_phase(action, phase):
    timeout = 4.0
    cfg = RunConfig(mode="ddp", steps=6, warmup=1, batch_size=16, timeout_s=timeout,
                    fault=f"1:{phase}:{action}:2")
    with pytest.raises(CalibrationError) as err:
        run_training(cfg, 2)
    e = err.value
    assert e.rank == 1, str(e)
    assert e.phase == phase, str(e)
    text = str(e)
    assert text.startswith("rank 1") and phase in text and "step 2" in text
    if action == "exit":
        assert "exited with code 3" in text
    if action == "raise":
        assert "InjectedFault" in text
    assert _no_children_left()


def test_fault_from_environment(monkeypatch):
    monkeypatch.setenv("GANSIM_CALIBRATE_FAULT", "0:data_s:exit:1")
    with pytest.raises(CalibrationError) as err:
        run_training(RunConfig(steps=3, warmup=1, batch_size=8, timeout_s=10.0), 1)
    assert err.value.rank == 0 and err.value.phase == "data_s"
    assert _no_children_left()


# A discriminator whose every forward first writes a buffer in place and then keeps it for
# its backward: on a GPU, DDP writes the buffers it broadcasts in place as each forward
# starts, and CUDA's batch norm keeps its running statistics for its backward, so a second
# forward before the first one's backward changes what that backward needs
SAVED_BUFFER_MODEL = '''
import torch
from torch import nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        self.scale.mul_(1.0)  # written in place as the forward starts (DDP's broadcast on a GPU)
        return x * self.scale  # (the backward of x needs the buffer as it was)


def factory():
    g = nn.Sequential(nn.Linear(8, 4))
    d = nn.Sequential(nn.Linear(4, 4), Scaled(), nn.Linear(4, 1), nn.Sigmoid())
    return g, d, 8, (4,)
'''


def test_ddp_discriminator_whose_backward_keeps_a_buffer_trains(tmp_path):
    """D's forwards on the real and the fake batch each have their backward before the next
    (the first accumulating only), so DDP's buffer broadcast at the second forward changes
    nothing the first backward needs: the run that failed on a GPU with batch norm
    ("modified by an inplace operation", NCCL on an H200) trains. (Both forwards before one
    backward, as the calibrator did before, fail here with that error.)"""
    model = tmp_path / "saved_buffer.py"
    model.write_text(SAVED_BUFFER_MODEL)
    result = run_training(RunConfig(mode="ddp", model=f"{model}:factory", **SMALL), 2)
    for r in result["ranks"]:
        assert len(r["phases"]["d_backward_s"]) == SMALL["steps"] - SMALL["warmup"]
        assert all(v > 0 for v in r["phases"]["d_backward_s"])
    assert _no_children_left()
