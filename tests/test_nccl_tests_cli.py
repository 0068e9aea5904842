"""`gansim nccl-tests`: nccl-tests' columns and definitions on a predicted sweep, and bad input
getting one line."""

from __future__ import annotations

import json

import pytest

from gansim.cli.main import main
from gansim.core.config import parse_size
from gansim.core.errors import UserInputError
from gansim.prediction.nccl_tests_table import operation_bytes, sweep_sizes
from tests.cli_checks import run_bad


def rows_of(capsys, argv):
    assert main(argv + ["--json"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out)["rows"], out.err


def test_all_reduce_columns_follow_nccl_tests_definitions(capsys):
    rows, table = rows_of(capsys, ["nccl-tests", "dgx-a100", "-g", "8", "-b", "8", "-e", "1G", "-f", "8"])
    assert [r["nbytes"] for r in rows] == [8 * 8**k for k in range(10)]
    for r in rows:
        assert r["count"] == r["nbytes"] // 4
        assert r["algbw_GBps"] == pytest.approx(r["nbytes"] / (r["time_us"] * 1e-6) / 1e9)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * 7 / 8)  # 2(n-1)/n
    assert rows[0]["protocol"] == "LL" and rows[-1]["protocol"] == "Simple"
    header = table.splitlines()[2]
    for column in ("size", "count", "type", "redop", "root", "time", "algbw", "busbw"):
        assert column in header
    assert f"{rows[-1]['nbytes']:>12}  {rows[-1]['count']:>12}     float     sum      -1" in table


def test_all_gather_sizes_and_bus_factor(capsys):
    rows, _ = rows_of(capsys, ["nccl-tests", "dgx-a100", "-g", "3", "-b", "1M", "-e", "4M", "--op", "all_gather"])
    for r in rows:
        assert r["nbytes"] == 3 * r["count"] * 4 and r["count"] % 4 == 0  # nccl-tests' per-rank rounding
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 / 3)  # (n-1)/n


def test_forcing_nccl_algo_and_proto(capsys):
    rows, _ = rows_of(capsys, ["nccl-tests", "dgx-a100", "-g", "8", "-b", "64M", "-e", "64M",
                               "--nccl-algo", "tree", "--nccl-proto", "LL128"])
    assert (rows[0]["algorithm"], rows[0]["protocol"]) == ("tree", "LL128")


def test_size_syntax_and_sweep():
    assert parse_size("8", "-b") == 8 and parse_size("64K", "-b") == 65536 and parse_size("8G", "-e") == 8 << 30
    # one grammar for every size flag: nccl-tests' K/M/G and calibrate's 4MiB both read
    assert parse_size("4MiB", "--sizes") == parse_size("4M", "-b") == 4 << 20
    assert parse_size("1.5K", "-b") == 1536 and parse_size("2048G", "-e") == 2 << 40
    for bad in ("8X", "0", "0.5", "-4K", "2T", "2000000G"):
        with pytest.raises(UserInputError, match="allowed"):
            parse_size(bad, "-b")
    assert sweep_sizes(8, 64, 2) == [8, 16, 32, 64]
    assert operation_bytes("all_reduce", 1 << 20, 8) == (1 << 20, 1 << 18)


@pytest.mark.parametrize("argv, field", [
    (["nccl-tests", "dgx-a100", "-g", "99"], "-g"),
    (["nccl-tests", "dgx-a100", "-g", "2", "-b", "8X"], "-b"),
    (["nccl-tests", "dgx-a100", "-g", "2", "-b", "1M", "-e", "1K"], "-e"),
    (["nccl-tests", "dgx-a100", "-g", "2", "-f", "1"], "-f"),
    (["nccl-tests", "dgx-a100", "-g", "2", "--op", "all_gather", "--algorithm", "ring"], "--op"),
    (["nccl-tests", "dgx-a100", "-g", "2", "--algorithm", "no-such"], "--algorithm"),
    (["nccl-tests", "no-such-box", "-g", "2"], "topology"),
    (["nccl-tests", "dgx-a100", "-g", "2", "--gpus-per-thread", "0"], "--gpus-per-thread"),
    (["nccl-tests", "dgx-a100", "-g", "2", "--gpus-per-thread", "4"], "--gpus-per-thread"),
])
def test_bad_input_is_one_line(capsys, argv, field):
    line = run_bad(capsys, argv)
    assert field in line


def test_nccl_on_ranks_that_are_not_gpus_names_the_first_such_rank(capsys, tmp_path):
    """A topology whose second rank device is a CPU: NCCL's model stops at that rank, by name."""
    box = tmp_path / "mixed.yaml"
    box.write_text("name: mixed\nnodes:\n"
                   "  - {id: g0, kind: gpu, model: A100}\n  - {id: c0, kind: cpu, cores: 4}\n"
                   "  - {id: sw, kind: pcie_switch}\nlinks:\n"
                   "  - {a: g0, b: sw, kind: pcie, bandwidth_GBps: 24, latency_us: 1}\n"
                   "  - {a: c0, b: sw, kind: pcie, bandwidth_GBps: 24, latency_us: 1}\n")
    line = run_bad(capsys, ["nccl-tests", str(box), "-g", "2"])
    assert line.endswith("mixed.yaml: algorithms: the nccl algorithm runs on GPUs; 'c0' is a cpu"), line


def test_one_thread_driving_several_gpus_takes_a_launch_per_gpu(capsys):
    """nccl-tests -g 8 from one thread: an operation takes at least 8 launches of 4.2 us
    (LAUNCH_US_PER_GPU); small sizes are held by that floor, large ones are the collective's."""
    from gansim.prediction.nccl_tests_table import LAUNCH_US_PER_GPU

    argv = ["nccl-tests", "dgx-a100", "-g", "8", "-b", "8", "-e", "1G", "-f", "64"]
    alone, _ = rows_of(capsys, argv)
    driven, _ = rows_of(capsys, argv + ["--gpus-per-thread", "8", "--explain"])
    floor = 8 * LAUNCH_US_PER_GPU
    for a, d in zip(alone, driven):
        assert a["launch_floor_us"] == 0.0 and d["launch_floor_us"] == pytest.approx(floor)
        assert d["time_us"] == pytest.approx(max(a["time_us"], floor))
        assert d["busbw_GBps"] == pytest.approx(d["nbytes"] / (d["time_us"] * 1e-6) / 1e9 * 2 * 7 / 8)
    assert alone[0]["time_us"] < floor < alone[-1]["time_us"]  # the sweep crosses the floor
    assert driven[-1]["time_us"] == alone[-1]["time_us"]
    assert main(argv + ["--gpus-per-thread", "8", "--explain"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#" + " " * 11)]
    assert "host-bound" in notes[0] and "host-bound" not in notes[-1]
