"""How gradients are issued (options.gradient_sync) and lazy regularisation phases: each
all-reduce is a collective of its own, and a regularisation phase adds exactly its work
weighted by how often it runs. Expected figures come from the cost models' own functions."""

from __future__ import annotations

import typing

import pytest
import simpy

from gansim.collectives.closed_forms import closed_form_time
from gansim.collectives.communicator import Communicator
from gansim.collectives.nccl import model_seconds, nccl_state
from gansim.core.config import GradientSync, Scenario
from gansim.network.cluster import Cluster
from gansim.network.engine import TaskGraph
from gansim.runner.point import simulate_point
from gansim.topology.graph import load_topology
from gansim.training.step import GRADIENT_SYNCS, gradient_message_sizes
from gansim.training.workloads import scenario_workload
from tests.cli_checks import run_bad

D_PARAMS, G_PARAMS = 1_200_000, 2_400_000


def workload(*, d_vars: int = 1, g_vars: int = 1, regularization=()) -> dict:
    return {
        "name": "w",
        "networks": {
            "discriminator": {"params": D_PARAMS, "forward_s": 0.01, "backward_s": 0.02, "optimizer_s": 0.001,
                              "variable_count": d_vars},
            "generator": {"params": G_PARAMS, "forward_s": 0.01, "backward_s": 0.02, "optimizer_s": 0.002,
                          "variable_count": g_vars},
        },
        "regularization": list(regularization),
    }


def run(topology: str, gpus: int, algorithm: str, work: dict, steps: int = 1, on_timeline=None, **options) -> dict:
    s = Scenario.model_validate({"name": "t", "topology": topology, "workload": work, "gpus": [gpus],
                                 "algorithms": [algorithm], "cost_model": "alpha_beta", "per_gpu_batch": 8,
                                 "steps": steps, "options": options})
    return simulate_point(s, load_topology(topology), gpus, algorithm, on_timeline=on_timeline)


def allreduce_seconds(topology: str, gpus: int, algorithm: str) -> typing.Callable[[float], float]:
    """The alpha_beta model's own time of one all-reduce of n bytes on this machine."""
    cluster = Cluster(load_topology(topology), gpus, simpy.Environment())
    if algorithm == "nccl":
        state = nccl_state(cluster)
        return lambda n: model_seconds(state, "all_reduce", n)
    link = Communicator(cluster, TaskGraph(), algorithm, "alpha_beta").link_parameters()
    return lambda n: float(closed_form_time(algorithm, gpus, n, link.alpha_s, link.beta_s_per_byte, 0.0, None))


def test_every_gradient_sync_name_is_registered_and_validated():
    assert set(typing.get_args(GradientSync)) == set(GRADIENT_SYNCS.names())


@pytest.mark.parametrize("topology,gpus,algorithm", [("paper-gtx1080ti-pcie", 4, "ring"), ("dgx1-v100", 8, "nccl")])
def test_k_equal_variables_cost_k_collectives(topology, gpus, algorithm):
    k = 12
    spans = []
    one = run(topology, gpus, algorithm, workload(), gradient_sync="per_variable")
    many = run(topology, gpus, algorithm, workload(d_vars=k, g_vars=k), gradient_sync="per_variable",
               on_timeline=lambda t: spans.extend(t.spans))
    assert len(spans) == 2 * k  # k all-reduces for D and k for G
    assert {s.nbytes for s in spans} == {4 * D_PARAMS / k, 4 * G_PARAMS / k}
    t = allreduce_seconds(topology, gpus, algorithm)
    # the same bytes in k collectives: k times the model's per-collective time of a 1/k piece
    expected = sum(k * t(4 * n / k) - t(4 * n) for n in (D_PARAMS, G_PARAMS))
    assert many.step_time_s - one.step_time_s == pytest.approx(expected, rel=1e-9)
    # k - 1 more per-collective latencies (the model's time of an empty all-reduce) per network:
    # exactly so for the ring's closed form; NCCL at least that (smaller pieces also get fewer
    # channels or another protocol, so their bandwidth term grows too)
    if algorithm == "ring":
        assert expected == pytest.approx(2 * (k - 1) * t(0.0), rel=1e-9)
    else:
        assert expected >= 2 * (k - 1) * t(0.0)
    # the flat buffer is the one-variable case, and per_phase_flat ignores the variables
    flat = run(topology, gpus, algorithm, workload(d_vars=k, g_vars=k), gradient_sync="per_phase_flat")
    assert flat.step_time_s == pytest.approx(one.step_time_s, rel=1e-12)


def test_variables_fill_ddp_buckets_in_the_order_given():
    """DDP buckets take their tensors from the variable list (not one tensor per network)."""
    spans = []
    sizes = [300_000] * 4  # 1.2 MB each: the first bucket (1 MiB cap) takes one, the next (25 MiB) the rest
    work = workload()
    work["networks"]["discriminator"] = {**work["networks"]["discriminator"], "variable_count": None,
                                         "variables": [{"size": 300_000, "count": 4}]}
    run("paper-gtx1080ti-pcie", 2, "ring", work, overlap=True, on_timeline=lambda t: spans.extend(t.spans))
    d_buckets = [s.nbytes for s in spans if s.label.startswith("D all-reduce")]
    assert d_buckets == [4.0 * sizes[0], 4.0 * sum(sizes[1:])]


@pytest.mark.parametrize("options", [{"gradient_sync": "per_phase_flat"}, {"gradient_sync": "per_variable"},
                                     {"overlap": True}, {"overlap": True, "gradient_dtype": "fp16"}])
def test_the_message_sizes_are_the_all_reduces_a_step_issues(options):
    """gradient_message_sizes (what a prediction's band is sized by) lists exactly the
    all-reduces the simulated step issues for one D and one G step, DDP's caps and the
    wire's dtype included."""
    work = workload(d_vars=5, g_vars=7)
    work["networks"]["generator"]["params"] = 40_000_000  # several 25 MiB buckets
    spans = []
    run("paper-gtx1080ti-pcie", 2, "ring", work, on_timeline=lambda t: spans.extend(t.spans), **options)
    s = Scenario.model_validate({"name": "t", "topology": "paper-gtx1080ti-pcie", "workload": work, "gpus": [2],
                                 "options": options})
    sizes = gradient_message_sizes(scenario_workload(s), s.options)
    assert len(sizes) > 2 or "overlap" not in options
    assert sorted(sizes) == sorted(span.nbytes for span in spans)


@pytest.mark.parametrize("sync", ["per_phase_flat", "per_variable"])
@pytest.mark.parametrize("gpus", [1, 4])
def test_lazy_regularisation_adds_its_period_weighted_work(sync, gpus):
    """R1-like on D every 4 minibatches and path-length-like on G every 2: over a period of 4
    the step grows by each phase's compute, all-reduce of its network's gradients and optimizer
    update, times 1/every; hand-computed from the model's own per-phase times."""
    topology, algorithm, k = "paper-gtx1080ti-pcie", "ring", 3
    regs = [{"name": "r1", "network": "discriminator", "every": 4, "compute_s": 0.013},
            {"name": "pl", "network": "generator", "every": 2, "compute_s": 0.027}]
    plain = run(topology, gpus, algorithm, workload(d_vars=k, g_vars=k), steps=8, gradient_sync=sync)
    spans = []
    lazy = run(topology, gpus, algorithm, workload(d_vars=k, g_vars=k, regularization=regs), steps=8,
               gradient_sync=sync, on_timeline=lambda t: spans.extend(t.spans))
    t = allreduce_seconds(topology, gpus, algorithm) if gpus > 1 else (lambda n: 0.0)

    def sync_s(params: int) -> float:  # the network's gradients as the sync issues them
        return k * t(4 * params / k) if sync == "per_variable" else t(4 * params)

    d_extra = 0.013 + sync_s(D_PARAMS) + 0.001
    g_extra = 0.027 + sync_s(G_PARAMS) + 0.002
    assert lazy.step_time_s - plain.step_time_s == pytest.approx(d_extra / 4 + g_extra / 2, rel=1e-9)
    if gpus > 1:
        per_step = 4 * (D_PARAMS + G_PARAMS + D_PARAMS / 4 + G_PARAMS / 2)
        assert lazy.algbw_GBps * 1e9 * lazy.allreduce_time_s == pytest.approx(per_step, rel=1e-9)
        r1 = [s for s in spans if s.label.startswith("D r1")]
        pl = [s for s in spans if s.label.startswith("G pl")]
        collectives = k if sync == "per_variable" else 1
        assert len(r1) == 2 * collectives and len(pl) == 4 * collectives  # steps 0, 4 and 0, 2, 4, 6 of 8


def test_regularisation_scales_with_the_batch_like_the_backward():
    """Strong scaling: the phase's compute_s is given at the global batch of 32 (one GPU); at
    4 GPUs each computes 8 samples, a quarter of it, and then all-reduces G's gradients."""
    topology, topo = "paper-gtx1080ti-pcie", load_topology("paper-gtx1080ti-pcie")

    def step(gpus: int, regs: list) -> float:
        s = Scenario.model_validate({"name": "t", "topology": topology, "workload": workload(regularization=regs),
                                     "gpus": [gpus], "scaling": "strong", "global_batch": 32,
                                     "per_gpu_batch": None, "steps": 2})
        return simulate_point(s, topo, gpus, "ring").step_time_s

    regs = [{"network": "generator", "every": 2, "compute_s": 0.04}]
    assert step(1, regs) - step(1, []) == pytest.approx((0.04 + 0.002) / 2, rel=1e-9)
    t = allreduce_seconds(topology, 4, "ring")
    assert step(4, regs) - step(4, []) == pytest.approx((0.01 + t(4 * G_PARAMS) + 0.002) / 2, rel=1e-9)


@pytest.mark.parametrize("sync", ["per_phase_flat", "per_variable", "ddp_buckets"])
def test_rounds_synced_each_time_cost_one_all_reduce_per_round_and_no_more_compute(sync):
    """A batch of 8 in rounds of 2: the compute is the same, split in four; synced after every
    round (StyleGAN2's TF optimizer) each network step all-reduces four times, synced once
    (DDP's no_sync) as often as without rounds. Expected figures from the model's own time."""
    topology, gpus, k = "paper-gtx1080ti-pcie", 2, 3
    work = workload(d_vars=k, g_vars=k)
    options = {"gradient_sync": sync} if sync != "ddp_buckets" else {"overlap": True}
    plain = run(topology, gpus, "ring", work, **options)
    spans: dict[str, list] = {"once": [], "each": []}
    once = run(topology, gpus, "ring", work, round_batch=2, on_timeline=lambda t: spans["once"].extend(t.spans),
               **options)
    each = run(topology, gpus, "ring", work, round_batch=2, sync_each_round=True,
               on_timeline=lambda t: spans["each"].extend(t.spans), **options)
    collectives = {"per_phase_flat": 2, "per_variable": 2 * k}.get(sync, len(spans["once"]))
    assert len(spans["once"]) == collectives and len(spans["each"]) == 4 * collectives
    assert sorted(s.nbytes for s in spans["each"]) == sorted(s.nbytes for s in spans["once"] for _ in range(4))
    one = run(topology, 1, "ring", work, **options)
    assert run(topology, 1, "ring", work, round_batch=2, sync_each_round=True, **options).step_time_s == \
        pytest.approx(one.step_time_s, rel=1e-12)  # one rank: the rounds only split the compute
    if sync != "ddp_buckets":  # (DDP's buckets overlap each round's backward: not a plain sum)
        assert once.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)
        t = allreduce_seconds(topology, gpus, "ring")
        per_network = {n: (k * t(4 * n / k) if sync == "per_variable" else t(4 * n)) for n in (D_PARAMS, G_PARAMS)}
        assert each.step_time_s - once.step_time_s == pytest.approx(3 * sum(per_network.values()), rel=1e-9)
        assert each.algbw_GBps * each.allreduce_time_s == pytest.approx(4 * once.algbw_GBps * once.allreduce_time_s,
                                                                        rel=1e-9)
    assert each.step_time_s > once.step_time_s


def test_rounds_of_a_batch_are_whole_rounds_then_what_is_left():
    s = Scenario.model_validate({"name": "t", "topology": "paper-gtx1080ti-pcie", "workload": workload(),
                                 "gpus": [1], "options": {"round_batch": 3}})
    assert s.options.round_shares(8) == pytest.approx([3 / 8, 3 / 8, 2 / 8])
    assert s.options.round_shares(3) == [1.0] and s.options.round_shares(2) == [1.0]


BOX = "paper-gtx1080ti-pcie"


def scenario_file(write_yaml, work: dict, steps: int = 2, **options) -> str:
    return str(write_yaml("s.yaml", {"name": "s", "topology": BOX, "workload": work, "gpus": [1, 2],
                                     "steps": steps, "options": options}))


def test_unknown_gradient_sync_is_one_line(capsys, write_yaml):
    line = run_bad(capsys, ["simulate", scenario_file(write_yaml, workload(), gradient_sync="per_tensor")])
    assert "s.yaml" in line and "options.gradient_sync" in line
    assert all(name in line for name in ("ddp_buckets", "per_variable", "per_phase_flat"))


def test_overlap_with_another_sync_is_one_line(capsys, write_yaml):
    line = run_bad(capsys, ["simulate", scenario_file(write_yaml, workload(), overlap=True,
                                                      gradient_sync="per_variable")])
    assert "s.yaml" in line and "options" in line and "ddp_buckets" in line


def test_variables_that_do_not_sum_to_params_are_one_line(capsys, write_yaml):
    work = workload()
    work["networks"]["generator"] = {**work["networks"]["generator"], "variable_count": None,
                                     "variables": [512, {"size": 1000, "count": 3}]}
    line = run_bad(capsys, ["simulate", scenario_file(write_yaml, work)])
    assert "s.yaml" in line and "workload.networks.generator" in line and "3,512" in line and "2,400,000" in line


def test_variables_and_a_variable_count_together_are_one_line(capsys, write_yaml):
    work = workload()
    work["networks"]["generator"]["variables"] = [G_PARAMS]
    line = run_bad(capsys, ["simulate", scenario_file(write_yaml, work)])
    assert "workload.networks.generator" in line and "not both" in line


def test_sync_each_round_without_rounds_is_one_line(capsys, write_yaml):
    line = run_bad(capsys, ["simulate", scenario_file(write_yaml, workload(), sync_each_round=True)])
    assert "s.yaml" in line and "options" in line and "round_batch" in line


def test_steps_must_be_whole_regularisation_periods(capsys, write_yaml):
    regs = [{"network": "discriminator", "every": 16, "compute_s": 0.01},
            {"network": "generator", "every": 4, "compute_s": 0.01}]
    line = run_bad(capsys, ["simulate", scenario_file(write_yaml, workload(regularization=regs), steps=5)])
    assert "s.yaml" in line and "steps" in line and "16" in line


def test_bad_regularisation_interval_is_one_line(capsys, write_yaml):
    regs = [{"network": "generator", "every": 0, "compute_s": 0.01}]
    line = run_bad(capsys, ["simulate", scenario_file(write_yaml, workload(regularization=regs))])
    assert "s.yaml" in line and "workload.regularization[0].every" in line
