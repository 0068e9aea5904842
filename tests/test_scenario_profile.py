"""A scenario's `profile:` replaces its workload's compute figures with the profile's, so that
`gansim simulate` of the scenario and `gansim predict --topology` of the profile agree."""

from __future__ import annotations

import json

import pytest
import yaml

from gansim.calibration.profile.schema import Profile
from gansim.cli.main import main
from gansim.prediction.calibrated import predict
from gansim.topology.graph import load_topology
from gansim.whatif.study import load_scenario, simulate_scenario
from tests.cli_checks import run_bad

PHASES = ("data_s", "d_forward_s", "d_backward_s", "d_optimizer_s", "g_forward_s", "g_backward_s", "g_optimizer_s")
HEAVY = {"flops": 4e9, "bytes": 1e6}  # compute-bound on both devices below


def gpu_profile(device: str, *, compute: float = 0.004, mode: str = "ddp", figures: dict | None = None) -> Profile:
    alone = {name: compute for name in PHASES}
    return Profile.model_validate({
        "schema": 1,
        "provenance": {"host": "h", "device": device, "backend": "nccl", "torch": "2.13.0", "date": "2026-11-23",
                       "model": "paper-mlp-gan", "batch_size": 64, "cores": 8, "mode": mode, "threads": 1,
                       **(figures or {})},
        "measured": {"step_time_s": {"1": 7 * compute}, "phases": {"1": dict(alone, step_s=7 * compute)},
                     "phase_costs": {name: HEAVY for name in PHASES if name != "data_s"}},
        "fit": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-11, "gamma_s_per_byte": 0.0,
                "compute": dict(alone, step_s=7 * compute), "core_sharing": {"1": 1.0},
                "gradient_bytes": {"discriminator": 935940, "generator": 8205536}},
    })


def write_scenario(tmp_path, measured: Profile, **fields) -> str:
    (tmp_path / "profile.json").write_text(json.dumps(measured.model_dump(mode="json", by_alias=True)))
    scenario = {"name": "mine", "topology": "dgx-a100", "workload": "paper-mlp-gan", "gpus": [1, 2, 8],
                "per_gpu_batch": 64, "steps": 3, "profile": "profile.json", **fields}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return str(path)


def step_times(path: str) -> dict[int, float]:
    runs = simulate_scenario(load_scenario(path))["runs"]
    return {r["gpus"]: r["step_time_s"] for r in runs}


def test_the_profiles_phases_replace_the_workloads_and_agree_with_predict(tmp_path):
    profile = gpu_profile("A100-SXM4-40GB", compute=0.004)
    simulated = step_times(write_scenario(tmp_path, profile))
    # one GPU: the profile's seven phases, nothing else (the FLOP-costed workload is far from it)
    assert simulated[1] == pytest.approx(7 * 0.004, rel=1e-9)
    predicted = {p.world_size: p.step_time_s for p in predict(profile, [1, 2, 8], load_topology("dgx-a100"))}
    for gpus in (1, 2, 8):
        assert simulated[gpus] == pytest.approx(predicted[gpus], rel=1e-9)
    slower = step_times(write_scenario(tmp_path, gpu_profile("A100-SXM4-40GB", compute=0.008)))
    assert slower[1] == pytest.approx(2 * simulated[1], rel=1e-9)


def test_a_profile_from_another_gpu_is_moved_by_the_roofline(tmp_path):
    # measured on a device with a quarter of the A100's peak FLOP/s: compute-bound phases
    # take a quarter of their measured time; the host's input work stays
    a100 = load_topology("dgx-a100").nodes[load_topology("dgx-a100").ranks[0]]
    figures = {"device_tflops": a100.tflops / 4, "device_memory_bandwidth_GBps": a100.memory_bandwidth_GBps}
    profile = gpu_profile("some-older-gpu", compute=0.004, figures=figures)
    simulated = step_times(write_scenario(tmp_path, profile))
    assert simulated[1] == pytest.approx(0.004 + 6 * 0.001, rel=1e-9)
    predicted = {p.world_size: p.step_time_s for p in predict(profile, [1, 8], load_topology("dgx-a100"))}
    assert simulated[8] == pytest.approx(predicted[8], rel=1e-9)


def test_the_scenarios_own_options_win_over_the_profiles(tmp_path):
    path = write_scenario(tmp_path, gpu_profile("A100-SXM4-40GB"), options={"overlap": False})
    loaded = load_scenario(path)
    assert loaded.scenario.options.overlap is False  # the ddp profile would have turned it on
    assert loaded.scenario.options.broadcast_buffers is True
    assert loaded.scenario.workload.from_profile.endswith("profile.json")


def test_simulate_writes_the_profiled_workload(tmp_path, capsys):
    path = write_scenario(tmp_path, gpu_profile("A100-SXM4-40GB"))
    assert main(["simulate", path, "--out", str(tmp_path / "out"), "--traces", "none"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {r["workload"] for r in summary["runs"]} == {"paper-mlp-gan"}


def test_bad_profiles_in_a_scenario_get_one_line(tmp_path, capsys):
    path = write_scenario(tmp_path, gpu_profile("A100-SXM4-40GB"), profile="nowhere.json")
    line = run_bad(capsys, ["simulate", path, "--out", str(tmp_path / "o")])
    assert "scenario.yaml" in line and "profile" in line and "does not exist" in line
    path = write_scenario(tmp_path, gpu_profile("A100-SXM4-40GB"), sweep={"workload": ["dcgan", "paper-mlp-gan"]})
    line = run_bad(capsys, ["simulate", path, "--out", str(tmp_path / "o")])
    assert "sweep.workload" in line
    path = write_scenario(tmp_path, gpu_profile("mystery-gpu"))
    line = run_bad(capsys, ["simulate", path, "--out", str(tmp_path / "o")])
    assert "provenance.device_tflops" in line and "mystery-gpu" in line
    (tmp_path / "profile.json").write_text("{not json")
    line = run_bad(capsys, ["simulate", str(tmp_path / "scenario.yaml"), "--out", str(tmp_path / "o")])
    assert "profile.json" in line and "not valid JSON" in line


def test_on_the_calibrated_machine_the_profile_gives_the_links_and_the_core_sharing_too(tmp_path):
    from tests.test_predict import profile as cpu_profile

    measured = cpu_profile(alpha=2e-4, beta=1e-9, compute=0.01, sharing=1.3, mode="ddp")
    path = write_scenario(tmp_path, measured, topology="calibrated", gpus=[1, 2, 3])
    simulated = step_times(path)
    predicted = {p.world_size: p.step_time_s for p in predict(measured, [1, 2, 3])}
    for gpus in (1, 2, 3):
        assert simulated[gpus] == pytest.approx(predicted[gpus], rel=1e-9)
    # a slower fitted network slows the simulated step by what predict says it should
    slower = step_times(write_scenario(tmp_path, cpu_profile(alpha=2e-4, beta=2e-9, compute=0.01, sharing=1.3,
                                                              mode="ddp"), topology="calibrated", gpus=[1, 2, 3]))
    assert slower[2] > simulated[2] and slower[1] == pytest.approx(simulated[1], rel=1e-12)
    bad = write_scenario(tmp_path, measured, topology="calibrated", gpus=[1, 2],
                         sweep={"topology": ["calibrated", "cpu-host"]})
    with pytest.raises(Exception, match="cannot be swept with other topologies"):
        load_scenario(bad)


def test_the_calibrated_machine_needs_a_profile(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "topology": "calibrated", "workload": "dcgan", "gpus": [1, 2]}))
    line = run_bad(capsys, ["simulate", str(path), "--out", str(tmp_path / "o")])
    assert "topology" in line and "profile: PATH" in line
