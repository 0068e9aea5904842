"""The task-graph engine (gansim/network/engine.py): a graph without flows is timed in waves,
with the very sums the events would add; delays that ran alone on a route take what a flow
alone on it takes."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from gansim.network.engine import COMPUTE, DELAY, FLOW, SOLVED, GatheredTooLate, TaskGraph, execute
from gansim.network.flows import FlowNetwork

CAPACITY = np.array([1.0, 12.5e9, 25e9, 1.0])  # a GPU's compute, two links, a spare resource


def network(env: simpy.Environment) -> FlowNetwork:
    net = FlowNetwork(env, CAPACITY, ["gpu", "link-a", "link-b", "spare"])
    net.add_route(np.array([0]), 0.0)  # route 0: the GPU, no latency
    net.add_route(np.array([1, 2]), 3e-6)  # route 1: two links, 3 us
    net.add_route(np.array([3]), 0.0)  # route 2: a resource nothing else uses
    return net


def random_graph(seed: int, tasks: int = 400, with_flow: bool = False, chains: bool = False) -> tuple[TaskGraph, list]:
    """Delays (some of no time, some alone on a route) and solved tasks, each depending on
    up to three earlier ones (with `chains`, half of them on the one before alone: runs of
    tasks that each only the next waits for); returns the graph and, per task, (kind, route,
    amount, preds)."""
    rng = np.random.default_rng(seed)
    graph = TaskGraph()
    spec = []
    for i in range(tasks):
        preds = sorted(set(rng.integers(0, i, size=rng.integers(0, 4)).tolist())) if i else []
        if chains and i and rng.random() < 0.5:
            preds = [i - 1]
        roll = rng.random()
        if roll < 0.2:
            kind, route, amount = DELAY, -1, 0.0
        elif roll < 0.5:
            kind, route, amount = DELAY, 0, float(rng.exponential(1e-3))  # GPU work, seconds
        elif roll < 0.7:
            kind, route, amount = DELAY, 1, float(rng.exponential(1e6))  # bytes alone on two links
        elif roll < 0.8 and preds:
            kind, route, amount = SOLVED, -1, 0.0
        else:
            kind, route, amount = DELAY, -1, float(rng.exponential(1e-3))
        if kind == SOLVED:
            first = preds[0]

            def solve(now, end, first=first):  # ends 2 ms after its first predecessor did
                return np.array([end[first] + 2e-3])

            ids = graph.add_solved(np.array([0]), COMPUTE, f"s{i}", solve)
        else:
            ids = graph.add(kind, route, amount, 0, COMPUTE, f"t{i}", count=1)
        for p in preds:
            graph.depend(np.array([p]), ids)
        spec.append((kind, route, amount, preds))
    if with_flow:  # on a resource nothing else uses: it changes no other task's times
        graph.add(FLOW, 2, 0.5, 0, COMPUTE, "unrelated flow", count=1)
    return graph, spec


def longest_paths(spec: list) -> tuple[list[float], list[float]]:
    """Start and end of every task, task by task in order: a task starts when its last
    predecessor ends and ends its duration later."""
    latency, rate = 3e-6, 12.5e9  # route 1: its latency, its slowest link
    start, end = [], []
    for kind, route, amount, preds in spec:
        s = max((end[p] for p in preds), default=0.0)
        if kind == SOLVED:
            d = max(end[preds[0]] + 2e-3 - s, 0.0)
        elif route == 1:
            d = latency + amount / rate
        elif route == 0:
            d = 0.0 + amount / 1.0
        else:
            d = amount
        start.append(s)
        end.append(s + d if d > 0 else s)
    return start, end


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_graph_without_flows_is_timed_in_waves_as_the_events_time_it(seed):
    env = simpy.Environment()
    graph, spec = random_graph(seed)
    waves = execute(graph.freeze(), env, network(env))
    env = simpy.Environment()
    flowing, _ = random_graph(seed, with_flow=True)
    events = execute(flowing.freeze(), env, network(env))
    n = len(spec)
    start, end = longest_paths(spec)
    assert np.array_equal(waves.start, start) and np.array_equal(waves.end, end)
    assert np.array_equal(events.start[:n], start) and np.array_equal(events.end[:n], end)
    assert waves.events > 1 and events.events == 1  # the unrelated flow's end: the rest needs no event


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_runs_of_delays_that_only_the_next_waits_for_are_timed_as_their_events_time_them(seed):
    """Delays and solved tasks are timed ahead of the clock where their predecessors' ends
    are known: the same starts and ends, to the last digit, as longest paths give."""
    env = simpy.Environment()
    graph, spec = random_graph(seed, with_flow=True, chains=True)
    events = execute(graph.freeze(), env, network(env))
    start, end = longest_paths(spec)
    assert np.array_equal(events.start[:len(spec)], start) and np.array_equal(events.end[:len(spec)], end)


def flows_between_delays(seed: int, tasks: int = 300) -> tuple[TaskGraph, list, FlowNetwork, simpy.Environment]:
    """A random graph of delays and flows, each flow on a resource of its own (so it takes
    its amount / capacity whenever it runs), each task after up to three earlier ones."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    net = FlowNetwork(env, np.ones(tasks), [f"r{i}" for i in range(tasks)])
    graph, spec = TaskGraph(), []
    for i in range(tasks):
        preds = sorted(set(rng.integers(0, i, size=rng.integers(0, 4)).tolist())) if i else []
        kind = FLOW if rng.random() < 0.3 else DELAY
        amount = float(rng.exponential(1e-3))
        route = net.add_route(np.array([i]), 0.0) if kind == FLOW else -1
        ids = graph.add(kind, route, amount, 0, COMPUTE, f"t{i}", count=1)
        for p in preds:
            graph.depend(np.array([p]), ids)
        spec.append((kind, amount, preds))
    return graph, spec, net, env


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_flow_starts_at_the_instant_its_last_predecessor_ends(seed):
    """Every task starts when the last of its predecessors ends, to the last digit, flows too
    (a flow whose predecessors' ends were known ahead of the clock is started by an event at
    that very instant: SimPy adds a delay to now, which can round); a delay ends its
    duration later, exactly; a flow alone on its resource its amount later."""
    graph, spec, net, env = flows_between_delays(seed)
    run = execute(graph.freeze(), env, net)
    for i, (kind, amount, preds) in enumerate(spec):
        assert run.start[i] == max((run.end[p] for p in preds), default=0.0)
        if kind == DELAY:
            assert run.end[i] == run.start[i] + amount
        else:
            assert run.end[i] == pytest.approx(run.start[i] + amount, rel=1e-12, abs=1e-18)


def test_ranks_that_differ_cost_events_for_their_flows_not_for_each_rank():
    """1,000 ranks computing for different times, then one flow after all of them, then
    each rank's own work again: the flow's three events, none for a rank."""
    env = simpy.Environment()
    net = network(env)
    graph = TaskGraph()
    ranks = 1000
    rng = np.random.default_rng(0)
    first = graph.add(DELAY, -1, rng.uniform(1e-3, 2e-3, ranks), np.arange(ranks), COMPUTE, "forward")
    flow = graph.add(FLOW, 1, 1e6, 0, COMPUTE, "all-reduce", count=1)
    graph.depend(first, np.full(ranks, flow[0]))
    backward = rng.uniform(1e-3, 2e-3, ranks)
    after = graph.add(DELAY, -1, backward, np.arange(ranks), COMPUTE, "backward")
    graph.depend(np.full(ranks, flow[0]), after)
    run = execute(graph.freeze(), env, net)
    assert run.events == 3  # the flow starts, its latency passes, it ends
    assert run.start[flow[0]] == run.end[first].max()
    assert np.array_equal(run.end[after], run.end[flow[0]] + backward)


def test_a_delay_alone_on_a_route_takes_what_a_flow_alone_on_it_takes():
    def run(kind: int) -> float:
        env = simpy.Environment()
        graph = TaskGraph()
        graph.add(kind, 1, 4e6, 0, COMPUTE, "copy", count=1)
        if kind == DELAY:  # keep the delay on the event path too
            graph.add(FLOW, 2, 1e-9, 0, COMPUTE, "elsewhere", count=1)
        return float(execute(graph.freeze(), env, network(env)).end[0])

    assert run(DELAY) == pytest.approx(run(FLOW), rel=1e-12)
    assert run(DELAY) == pytest.approx(3e-6 + 4e6 / 12.5e9, rel=1e-12)


def gathered_pair(successor_kind: int) -> tuple[TaskGraph, list[tuple[float, np.ndarray]]]:
    """Two gathered tasks: the first after a delay of 1 ms, the second after a flow of 2 s
    of GPU work; each ends 1 ms after its own predecessor (their solve records when it was
    asked and what it saw). The first is followed by a task of `successor_kind` on the
    spare resource."""
    graph = TaskGraph()
    asked: list[tuple[float, np.ndarray]] = []
    before = graph.add(DELAY, -1, 1e-3, 0, COMPUTE, "short", count=1)
    slow = graph.add(FLOW, 0, 2.0, 1, COMPUTE, "long", count=1)
    entries = np.array([before[0], slow[0]])

    def solve(now, end):
        asked.append((now, end[entries].copy()))
        return end[entries] + 1e-3

    pair = graph.add_solved(np.array([0, 1]), COMPUTE, "gathered", solve, gather=True)
    graph.depend(entries, pair)
    after = graph.add(successor_kind, 2, 0.5, 0, COMPUTE, "after", count=1)
    graph.depend(pair[:1], after)
    return graph, asked


def test_a_gathered_group_is_solved_once_every_task_is_ready_and_each_starts_when_its_own_are():
    graph, asked = gathered_pair(DELAY)
    env = simpy.Environment()
    ex = execute(graph.freeze(), env, network(env))
    assert len(asked) == 1 and asked[0][1].tolist() == [1e-3, 2.0]  # asked once, both entries known
    assert ex.start[2:4].tolist() == [1e-3, 2.0]  # each started as its own predecessor ended
    assert ex.end[2:4].tolist() == [1e-3 + 1e-3, 2.0 + 1e-3]
    assert ex.start[4] == ex.end[2]  # its successor, timed behind the clock: a delay meets nothing


def test_a_flow_released_by_a_gathered_group_behind_the_clock_stops_the_run():
    # the first task ends at 2 ms, but the group is solved at 2 s: its flow would start late
    graph, _ = gathered_pair(FLOW)
    env = simpy.Environment()
    with pytest.raises(GatheredTooLate):
        execute(graph.freeze(), env, network(env))
