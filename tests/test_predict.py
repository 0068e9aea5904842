"""`gansim predict` / `validate` take their figures from the profile, and only from the fit
and the world-size-1 run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gansim.calibration.profile.schema import Profile
from gansim.cli.main import main
from gansim.prediction.calibrated import predict, profile_workload

PHASES = ("data_s", "d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s", "g_optimizer_s")


def profile(*, alpha=2e-4, beta=1e-9, compute=0.01, sharing=1.1, mode="flat", measured_ws2=0.09,
            buffers=None, cv=0.0) -> Profile:
    alone = {name: compute for name in PHASES}
    return Profile.model_validate({
        "schema": 1,
        "provenance": {"host": "h", "device": "cpu", "backend": "gloo", "torch": "2.13.0", "date": "2026-11-22",
                       "model": "paper-mlp-gan", "batch_size": 64, "cores": 2, "mode": mode, "threads": 1},
        "measured": {"step_time_s": {"1": 7 * compute, "2": measured_ws2},
                     "phases": {"1": dict(alone, step_s=7 * compute), "2": {"step_s": measured_ws2}}},
        "fit": {"alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": 0.0,
                "compute": dict(alone, step_s=7 * compute), "core_sharing": {"1": 1.0, "2": sharing},
                "gradient_bytes": {"discriminator": 935940, "generator": 8205536},
                "buffer_bytes": buffers or {}, "compute_cv": cv},
    })


def step(p: Profile, world_size: int) -> float:
    return {x.world_size: x.step_time_s for x in predict(p, [1, world_size])}[world_size]


def test_world_size_1_is_the_sum_of_the_measured_phases():
    assert step(profile(compute=0.01), 1) == pytest.approx(0.07, rel=1e-9)
    assert step(profile(compute=0.02), 1) == pytest.approx(0.14, rel=1e-9)


def test_two_ranks_pay_core_sharing_and_the_fitted_ring_allreduce():
    p = profile(alpha=2e-4, beta=1e-9, compute=0.01, sharing=1.1, mode="flat")
    d_bytes, g_bytes = 935940, 8205536
    # flat mode: compute x sharing, then for each network a 2-rank ring: 2 alpha + n beta (the
    # cores are otherwise idle while the all-reduce runs, so it is not slowed)
    expected = 7 * 0.01 * 1.1 + (2 * 2e-4 + d_bytes * 1e-9) + (2 * 2e-4 + g_bytes * 1e-9)
    assert step(p, 2) == pytest.approx(expected, rel=1e-6)


def test_more_ranks_than_cores_go_at_the_pace_of_the_busiest_core():
    # 3 ranks on the profile's 2 cores run as 2 + 1 (a run queue per CPU): the pair sharing a
    # core compute at half speed and move their messages at half speed, so compute is x2 (not
    # the x1.5 of processor sharing) and each of the 3-rank ring's 4 steps costs 2 (alpha + n/3 beta)
    p = profile(alpha=2e-4, beta=1e-9, compute=0.01, sharing=1.1, mode="flat")
    d_bytes, g_bytes = 935940, 8205536
    ring = sum(4 * 2 * (2e-4 + n / 3 * 1e-9) for n in (d_bytes, g_bytes))
    assert step(p, 3) == pytest.approx(7 * 0.01 * 1.1 * 2 + ring, rel=1e-6)
    # 4 ranks on 2 cores: 2 + 2, the same pace as 3
    assert step(p, 4) > step(p, 3)


def test_a_scripts_own_sums_of_each_gradient_are_predicted_one_all_reduce_each():
    """A script without DDP that all-reduces each parameter's gradient by hand (the profile's
    measured buckets, mode flat): each sum is a 2-rank ring of its own, 2 alpha + n beta, one
    after another, not one all-reduce of the network's flattened gradients."""
    d, g = [4000, 400, 40], [8000, 800]
    data = profile(alpha=2e-4, beta=1e-9, compute=0.01, sharing=1.1, mode="flat").model_dump()
    data["fit"]["gradient_bytes"] = {"discriminator": sum(d), "generator": sum(g)}
    data["fit"]["gradient_buckets"] = {"discriminator": d, "generator": g}
    expected = 7 * 0.01 * 1.1 + sum(2 * 2e-4 + n * 1e-9 for n in d + g)
    assert step(Profile.model_validate(data), 2) == pytest.approx(expected, rel=1e-6)


def test_a_slower_network_in_the_profile_slows_the_prediction_by_the_bytes_it_moves():
    fast, slow = profile(beta=1e-9), profile(beta=2e-9)
    assert step(slow, 2) - step(fast, 2) == pytest.approx((935940 + 8205536) * 1e-9, rel=1e-6)


def test_on_cpu_ranks_overlap_buys_nothing_because_the_cores_move_the_bytes():
    # gloo's messages are moved by the same cores that compute: DDP's overlap of buckets with
    # backward shares each core between them, so the step costs as much as doing them in turn
    # (on GPUs, where DMA engines move the bytes, overlap does help: tests/test_simulate.py)
    flat, ddp = profile(mode="flat"), profile(mode="ddp")
    assert step(ddp, 2) == pytest.approx(step(flat, 2), rel=1e-9)
    assert step(ddp, 1) == pytest.approx(step(flat, 1))


def test_measured_multi_rank_times_play_no_part():
    assert step(profile(measured_ws2=0.05), 2) == step(profile(measured_ws2=5.0), 2)


def test_workload_knows_the_papers_tensors_for_ddp_buckets():
    w = profile_workload(profile())
    assert sum(w.g_param_tensors) == 2051384 and sum(w.d_param_tensors) == 233985


def test_predict_and_validate_commands(tmp_path, capsys):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile().model_dump(mode="json", by_alias=True)))
    assert main(["predict", "--profile", str(path), "--world-sizes", "1,2,3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    sizes = [row["world_size"] for row in out["predictions"]]
    assert sizes == [1, 2, 3] and out["predictions"][0]["speedup"] == pytest.approx(1.0)
    assert main(["validate", "--profile", str(path), "--out", str(tmp_path / "v"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["world_size"] for r in rows] == [1, 2]
    assert rows[0]["step_time_error"] == pytest.approx(0.0, abs=1e-9)
    html = (tmp_path / "v" / "report.html").read_text()
    assert "plotly" in html.lower() and len(html) > 1_000_000  # plotly.js inlined: opens offline


def test_bad_profile_is_one_line(tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text("{not json")
    assert main(["predict", "--profile", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "p.json" in err[0]
    assert main(["predict", "--profile", str(tmp_path / "p.json"), "--world-sizes", "0,2"]) == 2


def test_ddp_pays_one_broadcast_of_the_generators_batchnorm_statistics_per_step():
    # DDP (broadcast_buffers, its default) sends G's running statistics from rank 0 once a
    # step; the flat all-reduce runner does not use DDP, so it sends none
    buffers = {"discriminator": 0, "generator": 17616}
    ddp_plain, ddp_buffers = profile(mode="ddp"), profile(mode="ddp", buffers=buffers)
    assert step(ddp_buffers, 2) - step(ddp_plain, 2) == pytest.approx(2e-4 + 17616 * 1e-9, rel=1e-6)
    assert step(ddp_buffers, 1) == pytest.approx(step(ddp_plain, 1))
    assert step(profile(mode="flat", buffers=buffers), 2) == pytest.approx(step(profile(mode="flat"), 2))


def test_validate_shows_each_repeat_and_flags_an_unsteady_machine(tmp_path, capsys):
    steady = profile()
    steady.measured.repeat_step_time_s = {"1": [0.069, 0.071], "2": [0.088, 0.092]}
    unsteady = profile()
    unsteady.measured.repeat_step_time_s = {"1": [0.069, 0.071], "2": [0.07, 0.12]}
    unsteady.measured.steal_fraction = {"1": [0.01, 0.0], "2": [0.02, 0.17]}
    for name, p in (("steady", steady), ("unsteady", unsteady)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(p.model_dump(mode="json", by_alias=True)))
        assert main(["validate", "--profile", str(path), "--out", str(tmp_path / name)]) == 0
    rows = json.loads((tmp_path / "steady" / "validation.json").read_text())["rows"]
    assert rows[1]["measured_repeats_step_time_s"] == [0.088, 0.092]
    text = capsys.readouterr().out
    assert "88.0 / 92.0" in text and "70.0 / 120.0" in text
    assert text.count("not steady") == 1 and "at 2 ranks the repeats differ by 71%" in text
    assert "70.0 / 120.0  [2% / 17%]" in text and text.count("(steal)") == 1
    assert "up to 17% of the CPU time" in text
    rows = json.loads((tmp_path / "unsteady" / "validation.json").read_text())["rows"]
    assert rows[1]["steal_fraction_per_repeat"] == [0.02, 0.17]


def test_rank_variability_from_the_profile_makes_two_ranks_wait_and_leaves_one_alone():
    steady, varying = profile(), profile(cv=0.2)
    assert step(varying, 1) == pytest.approx(step(steady, 1), rel=1e-12)
    # flat mode: the ranks meet at D's and G's all-reduce; each waits for the slower one
    assert 1.01 * step(steady, 2) < step(varying, 2) < 1.1 * step(steady, 2)


def test_flat_mode_counts_the_world_size_1_allreduce_phases_as_copies_paid_at_every_size():
    p = profile(mode="flat")
    alone = p.measured.phases["1"]
    alone.update(d_allreduce_s=0.001, g_allreduce_s=0.004, step_s=alone["step_s"] + 0.005)
    assert step(p, 1) == pytest.approx(alone["step_s"], rel=1e-9)
    assert step(p, 2) == pytest.approx(step(profile(mode="flat"), 2) + 0.005 * 1.1, rel=1e-6)


def test_validating_a_profile_of_one_run_has_no_measured_speedup(tmp_path, capsys):
    """A trace of one world size measured no 1-rank step: its speed-up is unknown (null, '-'),
    not NaN, which JSON cannot hold."""
    traces = sorted(str(p) for p in (Path(__file__).parent / "data").glob("ddp_gan_trace_rank*.json.gz"))
    path = tmp_path / "trace.json"
    assert main(["calibrate", "--from-trace", *traces, "--profiler-overhead-us", "2", "--out", str(path)]) == 0
    capsys.readouterr()
    assert main(["validate", "--profile", str(path), "--out", str(tmp_path / "v"), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["world_size"] == 2 and row["measured_speedup"] is None and row["predicted_speedup"] > 1
    assert json.loads((tmp_path / "v" / "validation.json").read_text())["rows"][0]["measured_speedup"] is None


def test_a_cpu_ddp_run_whose_first_bucket_meets_the_backward_plays_the_rest_of_it(monkeypatch):
    """On CPU ranks each rank's core both computes and moves its messages. With DDP the
    generator's first bucket is all-reduced while the rest of its backward runs on the same
    cores, so only the first steps of that ring meet other work: those are played on the flow
    network and the rest by the recurrence (gansim/training/step.py, _longer_heads), which
    gives the figures of the run played wholly on the flow network."""
    from gansim.collectives import uncontended
    from gansim.training import step as training_step

    runs = []
    simulate_run = training_step._simulate

    def spy(*args, **kwargs):
        timeline = simulate_run(*args, **kwargs)
        runs.append(([span.play.first_step for span in timeline.spans if span.play is not None],
                     training_step._what_was_shared(timeline)))
        return timeline

    monkeypatch.setattr(training_step, "_simulate", spy)
    p = profile(mode="ddp", cv=0.1)
    played = predict(p, [64])[0]
    heads = [first for first in runs[-1][0] if first > 0]
    assert runs[-1][1] is None and heads, runs  # the run that counted: plays with heads, nothing met
    assert len(runs[-1][0]) > len(heads)  # the other all-reduces are played whole
    monkeypatch.setattr(uncontended, "UNCONTENDED_MIN_TRANSFERS", 10**18)
    runs.clear()
    flowed = predict(p, [64])[0]
    assert runs[-1][0] == []  # wholly on the flow network
    assert played.step_time_s == pytest.approx(flowed.step_time_s, rel=1e-9)
    assert played.record.allreduce_time_s == pytest.approx(flowed.record.allreduce_time_s, rel=1e-9)
    for key, value in flowed.record.breakdown.to_dict().items():
        assert played.record.breakdown.to_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
