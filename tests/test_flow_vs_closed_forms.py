"""The `flow` model against the closed forms, on topologies where they are exact."""

from __future__ import annotations

import pytest

from gansim.collectives.closed_forms import (
    binomial_broadcast_time,
    binomial_tree_time,
    halving_doubling_time,
    paper_allreduce_time,
    ring_time,
)
from gansim.core.config import Scenario, TrainingOptions
from gansim.runner.point import simulate_point
from gansim.topology.graph import topology_from_dict

ALPHA_US, BW_GBPS = 3.0, 20.0


def fully_connected(gpus: int):
    return topology_from_dict({"name": "fc", "generator": "fully_connected",
                               "params": {"gpus": gpus, "bandwidth_GBps": BW_GBPS, "latency_us": ALPHA_US}}, "test")


def ring_topology(gpus: int):
    return topology_from_dict({"name": "ring", "generator": "ring",
                               "params": {"gpus": gpus, "bandwidth_GBps": BW_GBPS, "latency_us": ALPHA_US}}, "test")


def allreduce_time(topology, gpus: int, algorithm: str, cost_model: str, nbytes: int, gamma: float = 0.0) -> float:
    scenario = Scenario(name="t", topology="t", workload={"allreduce_bytes": nbytes}, gpus=[gpus],
                        algorithms=[algorithm], cost_model=cost_model, steps=1,
                        options=TrainingOptions(gamma_s_per_byte=gamma))
    return simulate_point(scenario, topology, gpus, algorithm).allreduce_time_s


CASES = [
    ("ring", ring_time, [2, 3, 5, 8]),
    ("halving_doubling", halving_doubling_time, [2, 4, 8, 16]),
    ("tree", binomial_tree_time, [2, 4, 8]),
]


@pytest.mark.parametrize("algorithm,formula,sizes", CASES)
@pytest.mark.parametrize("gamma", [0.0, 2e-11])
def test_flow_equals_alpha_beta_on_contention_free_topologies(algorithm, formula, sizes, gamma):
    nbytes = 4 * 840 * 1024  # divisible into equal segments for every p used
    for p in sizes:
        topo = fully_connected(p)
        flow = allreduce_time(topo, p, algorithm, "flow", nbytes, gamma)
        closed = allreduce_time(topo, p, algorithm, "alpha_beta", nbytes, gamma)
        exact = formula(p, nbytes, ALPHA_US * 1e-6, 1 / (BW_GBPS * 1e9), gamma)
        assert closed == pytest.approx(exact, rel=1e-12)
        assert abs(flow - closed) / closed < 1e-9, (algorithm, p, flow, closed)


def test_ring_on_a_ring_topology_matches_the_closed_form():
    nbytes = 4 * 840 * 1024
    for p in (3, 6):
        topo = ring_topology(p)
        flow = allreduce_time(topo, p, "ring", "flow", nbytes)
        assert abs(flow - ring_time(p, nbytes, ALPHA_US * 1e-6, 1 / (BW_GBPS * 1e9), 0.0)) / flow < 1e-9


def test_paper_model_is_equations_5_to_7():
    nbytes = 10_000_000
    for n in (2, 3, 4):
        t = allreduce_time(fully_connected(n), n, "ring", "paper", nbytes)
        assert t == pytest.approx((2 * n - 1) * nbytes / (BW_GBPS * 1e9), rel=1e-12)
        assert t == pytest.approx(paper_allreduce_time(n, nbytes, BW_GBPS * 1e9), rel=1e-12)


def test_contention_makes_flow_slower_than_alpha_beta_on_a_shared_root_complex():
    # reduce_to_one on the paper's box: three GPUs send to gpu0 through one host->gpu0 link
    from gansim.topology.graph import load_topology

    topo = load_topology("paper-gtx1080ti-pcie")
    nbytes = 8_000_000
    flow = allreduce_time(topo, 4, "reduce_to_one", "flow", nbytes)
    single = allreduce_time(topo, 2, "reduce_to_one", "flow", nbytes)
    assert flow == pytest.approx(3 * single, rel=0.01)  # three senders share host->gpu0


def _gan_step_time(gpus: int, cost_model: str, **options) -> float:
    workload = {"name": "bn-gan", "d_steps_per_g_step": 2, "networks": {
        "discriminator": {"params": 1000, "forward_s": 1e-3, "backward_s": 2e-3, "optimizer_s": 1e-4,
                          "buffer_bytes": 1032},
        "generator": {"params": 5000, "forward_s": 2e-3, "backward_s": 4e-3, "optimizer_s": 2e-4,
                      "buffer_bytes": 17616}}}
    scenario = Scenario(name="t", topology="fc", workload=workload, gpus=[gpus], algorithms=["ring"],
                        cost_model=cost_model, steps=2, options=TrainingOptions(**options))
    return simulate_point(scenario, fully_connected(gpus), gpus, "ring").step_time_s


@pytest.mark.parametrize("cost_model", ["flow", "alpha_beta"])
@pytest.mark.parametrize("gpus", [2, 5, 8])
def test_buffer_broadcasts_cost_one_binomial_broadcast_per_network_per_step(cost_model, gpus):
    # DDP's broadcast_buffers: G's and D's buffers once a step, however many D steps
    alpha, beta = ALPHA_US * 1e-6, 1 / (BW_GBPS * 1e9)
    extra = binomial_broadcast_time(gpus, 17616, alpha, beta) + binomial_broadcast_time(gpus, 1032, alpha, beta)
    plain = _gan_step_time(gpus, cost_model)
    with_buffers = _gan_step_time(gpus, cost_model, broadcast_buffers=True)
    assert with_buffers - plain == pytest.approx(extra, rel=1e-9)
    assert _gan_step_time(1, cost_model, broadcast_buffers=True) == pytest.approx(_gan_step_time(1, cost_model))


def _straggler_step(gpus: int, cv: float, seed: int = 0, backward_s: float = 0.01, steps: int = 1000) -> float:
    # all compute is G's backward, between the two all-reduces that line the ranks up
    zero = {"params": 1000, "forward_s": 0.0, "backward_s": 0.0, "optimizer_s": 0.0}
    workload = {"name": "one-phase", "networks": {"discriminator": zero,
                                                  "generator": dict(zero, backward_s=backward_s)}}
    scenario = Scenario(name="t", topology="fc", workload=workload, gpus=[gpus], algorithms=["ring"],
                        cost_model="alpha_beta", steps=steps, seed=seed,
                        options=TrainingOptions(compute_cv=cv))
    return simulate_point(scenario, fully_connected(gpus), gpus, "ring").step_time_s


@pytest.mark.parametrize("gpus", [2, 4])
def test_variable_ranks_wait_for_the_slowest_at_every_collective(gpus):
    import numpy as np

    cv, t = 0.2, 0.01
    sigma2 = np.log1p(cv * cv)
    draws = np.random.default_rng(123).lognormal(-sigma2 / 2, np.sqrt(sigma2), (400_000, gpus))
    expected_max = draws.max(axis=1).mean()  # E[slowest of the ranks], mean of each is 1
    penalty = _straggler_step(gpus, cv) - _straggler_step(gpus, 0.0)
    assert penalty == pytest.approx(t * (expected_max - 1), rel=0.15)  # 1000 steps: ~3 standard errors
    assert _straggler_step(gpus, cv, seed=1, steps=20) != _straggler_step(gpus, cv, seed=2, steps=20)
    assert _straggler_step(gpus, cv, seed=1, steps=20) == _straggler_step(gpus, cv, seed=1, steps=20)
    # one rank waits for nobody: its mean step is kept exactly
    assert _straggler_step(1, cv, steps=20) == _straggler_step(1, 0.0, steps=20)


def test_a_cost_model_is_one_registered_class(write_yaml):
    """A new cost model is a subclass registered by name: a scenario may then name it, and
    an all-reduce workload's step is exactly what it charges; an unknown name is refused."""
    from gansim.collectives.communicator import COST_MODELS, AlphaBetaModel, _closed_form_delay, register_cost_model
    from gansim.core.errors import UserInputError
    from gansim.whatif.study import load_scenario, simulate_scenario

    @register_cost_model("one_second_per_gib")
    class OneSecondPerGiB(AlphaBetaModel):
        def all_reduce(self, comm, entry, nbytes, label):
            return _closed_form_delay(comm, entry, nbytes / 2**30, label)

    try:
        scenario = {"name": "c", "topology": "dgx-a100", "workload": {"allreduce_bytes": 1 << 29}, "gpus": [8],
                    "steps": 1, "cost_model": "one_second_per_gib"}
        (run,) = simulate_scenario(load_scenario(str(write_yaml("c.yaml", scenario))))["runs"]
        assert run["step_time_s"] == run["allreduce_time_s"] == 0.5
        with pytest.raises(UserInputError, match="unknown cost model 'nope'; allowed: .*one_second_per_gib"):
            load_scenario(str(write_yaml("bad.yaml", dict(scenario, cost_model="nope"))))
    finally:
        COST_MODELS._items.pop("one_second_per_gib")
