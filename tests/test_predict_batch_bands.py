"""`gansim predict --per-gpu-batch / --global-batch` and the band beside every prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gansim.calibration.fit.timings import read_timings
from gansim.cli.main import main
from gansim.outputs.report import speedup_figure
from gansim.runner.record import RunRecord
from gansim.prediction.bands import band_errors
from gansim.prediction.calibrated import predict
from gansim.prediction.from_timings import calibrate_from_timings
from gansim.prediction.published import BANDS, compare, load_published, summarize
from tests.test_predict import profile as cpu_profile

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def table3(tmp_path_factory):
    calibration = calibrate_from_timings(read_timings(str(ROOT / "examples/timings/paper-table3.csv")), "table3",
                                         "paper-mlp-gan", "paper-gtx1080ti-pcie", fit_gpus={1, 2})
    path = tmp_path_factory.mktemp("profile") / "table3.json"
    path.write_text(calibration.profile.to_json())
    return calibration.profile, path


def by_size(predictions):
    return {p.world_size: p for p in predictions}


def test_a_larger_per_gpu_batch_takes_longer_per_step(table3):
    profile, _ = table3
    small = by_size(predict(profile, [1, 2], per_gpu_batch=32))
    large = by_size(predict(profile, [1, 2], per_gpu_batch=128))
    for w in (1, 2):
        assert large[w].step_time_s > small[w].step_time_s
        assert large[w].per_gpu_batch == 128 and small[w].per_gpu_batch == 32


def test_strong_scaling_lowers_each_gpus_compute(table3):
    profile, _ = table3
    strong = by_size(predict(profile, [1, 4], global_batch=256))
    weak = by_size(predict(profile, [1, 4], per_gpu_batch=256))
    assert strong[4].per_gpu_batch == 64 and weak[4].per_gpu_batch == 256
    assert strong[4].record.breakdown.compute_s < weak[4].record.breakdown.compute_s
    assert strong[4].step_time_s < weak[4].step_time_s
    # the same global batch on one GPU: speed-up is the ratio of step times
    assert strong[4].speedup == pytest.approx(strong[1].step_time_s / strong[4].step_time_s)


def test_a_profile_from_a_calibration_run_takes_another_batch_too():
    p = cpu_profile(compute=0.01)
    base = by_size(predict(p, [1]))[1].step_time_s
    doubled = by_size(predict(p, [1], per_gpu_batch=128))[1].step_time_s
    # forward and backward (4 of the 6 network phases, data too) double; the optimizers do not
    assert doubled == pytest.approx(base + 0.01 * 5, rel=1e-6)


def fitted_cpu_profile():
    """A calibration run's profile whose all-reduce fit left residuals of 0.02, 0.04 and 0.10."""
    profile = cpu_profile()
    return profile.model_copy(update={"fit": profile.fit.model_copy(update={
        "residuals": {"2": {"4096": 0.02, "65536": -0.04}, "3": {"4096": 0.10}}})})


@pytest.mark.parametrize("source", ["timings", "calibration run"])
def test_every_prediction_has_a_band_around_its_step_time(table3, source):
    profile = table3[0] if source == "timings" else fitted_cpu_profile()
    for p in predict(profile, [1, 2, 3, 4], with_bands=True):
        assert p.band is not None
        assert p.band.low_s <= p.step_time_s <= p.band.high_s
        assert p.band.speedup_low <= p.speedup <= p.band.speedup_high
        if p.world_size > 1:  # communication exists, and its error widens the band
            assert p.band.communication_s > 0 and p.band.high_s > p.step_time_s


def test_the_band_uses_the_published_validation_error_of_its_size_band(table3):
    rows = [row for f in load_published() for row in compare(f)]
    for name, low, high in BANDS:
        assert band_errors()[name] == pytest.approx(summarize(rows, low, high).median_abs_error)
    profile, _ = table3
    p = by_size(predict(profile, [1, 2], with_bands=True))[2]
    # the MLP GAN's gradients (each network's, one all-reduce each) are megabytes
    assert p.band.size_band == "1M-128M"
    spread = profile.fit.timings.repeat_spread
    reach = spread * p.step_time_s + band_errors()["1M-128M"] * p.band.communication_s
    assert p.band.high_s == pytest.approx(p.step_time_s + reach)


def test_a_profile_on_its_own_machine_is_banded_by_its_all_reduce_fit(tmp_path, capsys):
    """On the calibrated host the communication comes from the all-reduce cost fitted to the
    profile's own measurements, not from the NCCL model: the band counts that fit's median
    |residual| (0.04 of 0.02, 0.04, 0.10 here), and says so; without measured all-reduces
    that error is unknown."""
    fitted = fitted_cpu_profile()
    p = by_size(predict(fitted, [1, 2], with_bands=True))[2]
    assert p.band.communication_error == pytest.approx(0.04)
    assert "all-reduce fit" in p.band.communication_error_from and "3 measured" in p.band.communication_error_from
    assert p.band.high_s == pytest.approx(p.step_time_s + 0.04 * p.band.communication_s)
    bare = by_size(predict(cpu_profile(), [1, 2], with_bands=True))[2]
    assert bare.band.communication_error is None and "communication_error" in bare.band.unknown
    path = tmp_path / "p.json"
    path.write_text(fitted.model_dump_json(by_alias=True))
    assert main(["predict", "--profile", str(path), "--world-sizes", "1,2"]) == 0
    assert "plus 4.0% of the communication: the profile's all-reduce fit" in capsys.readouterr().out


def test_predict_prints_and_writes_the_band(table3, capsys):
    _, path = table3
    assert main(["predict", "--profile", str(path), "--world-sizes", "1,2,4", "--global-batch", "128", "--json"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert [p["per_gpu_batch"] for p in result["predictions"]] == [128, 64, 32]
    for p in result["predictions"]:
        assert p["band"]["low_s"] <= p["step_time_s"] <= p["band"]["high_s"]
    assert "band:" in err


def test_per_gpu_and_global_batch_together_are_refused(table3, capsys):
    _, path = table3
    with pytest.raises(SystemExit) as exit:
        main(["predict", "--profile", str(path), "--per-gpu-batch", "8", "--global-batch", "64"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--global-batch" in err


def test_a_scenario_run_from_a_profile_has_bands_and_the_report_draws_them(table3, tmp_path, capsys):
    _, path = table3
    scenario = tmp_path / "from-timings.yaml"
    scenario.write_text(f"name: from-timings\ntopology: paper-gtx1080ti-pcie\nworkload: paper-mlp-gan\n"
                        f"gpus: [1, 2, 4]\nalgorithms: [nccl]\nper_gpu_batch: 64\nsteps: 5\nprofile: {path}\n")
    out = tmp_path / "out"
    assert main(["simulate", str(scenario), "--out", str(out)]) == 0
    assert "step-time bands" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    header, *lines = (out / "summary.csv").read_text().splitlines()
    assert header.endswith("band_low_s,band_high_s,band_speedup_low,band_speedup_high") and len(lines) == 3
    for run in summary["runs"]:
        band = run["band"]
        assert band["low_s"] <= run["step_time_s"] <= band["high_s"]
        assert band["speedup_low"] <= run["speedup"] <= band["speedup_high"]
    traces = speedup_figure([RunRecord.from_dict(run) for run in summary["runs"]]).data
    filled = [t for t in traces if t.get("fill") == "tonexty"]
    assert len(filled) == 1 and filled[0]["y"] == [r["band"]["speedup_low"] for r in summary["runs"]]


def test_a_global_batch_smaller_than_the_ranks_is_refused(table3, capsys):
    _, path = table3
    assert main(["predict", "--profile", str(path), "--world-sizes", "1,2,4", "--global-batch", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--global-batch" in err and "4 ranks" in err and "4 or more" in err
