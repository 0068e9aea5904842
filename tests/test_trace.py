"""trace.json (Chrome trace event format, for Perfetto): structure, one pid per topology
node, one tid per rank activity and per directed link, and no two events of one track
overlapping, for flow and closed-form collectives, chunked and overlapped all-reduces,
a parameter server (a non-rank sender) and CPU ranks."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from gansim.cli.main import main
from gansim.core.config import Scenario, TrainingOptions
from gansim.outputs.trace import (
    MAX_TRACE_EVENTS,
    chrome_trace,
    gantt,
    link_utilisation,
    merge_intervals,
)
from gansim.runner.point import simulate_point
from gansim.topology.graph import load_topology


def timeline_of(topology: str, gpus: int, algorithm: str, *, workload="paper-mlp-gan", cost_model="flow",
                steps=3, **options):
    s = Scenario(name="t", topology=topology, workload=workload, gpus=[gpus], algorithms=[algorithm],
                 cost_model=cost_model, steps=steps, options=TrainingOptions(**options))
    box = {}
    record = simulate_point(s, load_topology(topology), gpus, algorithm, on_timeline=lambda t: box.setdefault("t", t))
    return box["t"], record


def check_trace(doc: dict, topology: str) -> dict[tuple[int, int], list[dict]]:
    """Every structural rule of the format we rely on; returns the X events per track."""
    topo = load_topology(topology)
    assert set(doc) >= {"traceEvents", "displayTimeUnit", "otherData"}
    events = doc["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and len(meta) + len(complete) == len(events)
    process_names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    thread_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    # one pid per topology node, named after it
    assert len(set(process_names.values())) == len(process_names)
    nodes = list(topo.nodes)
    for pid, name in process_names.items():
        assert name.split(" ")[0] == nodes[pid - 1]
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in complete:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["pid"] in process_names and (e["pid"], e["tid"]) in thread_names
        assert e["ts"] >= 0 and e["dur"] >= 0
        tracks[(e["pid"], e["tid"])].append(e)
    # link tracks: one per directed link, in the process of the node it leaves
    for (pid, tid), name in thread_names.items():
        if name.startswith("link "):
            link = name.split(" ")[1]
            assert link in topo.link_names
            assert link.split("->")[0] == nodes[pid - 1]
    # no two events of one track overlap (touching is fine); timestamps are in us
    for key, evs in tracks.items():
        evs.sort(key=lambda e: e["ts"])
        for a, b in zip(evs, evs[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (thread_names[key], a, b)
    json.dumps(doc, allow_nan=False)  # strict JSON: what Perfetto's importer reads
    return tracks


def categories(doc: dict) -> set[str]:
    return {e["cat"] for e in doc["traceEvents"] if e["ph"] == "X"}


@pytest.mark.parametrize("algorithm", ["ring", "tree", "halving_doubling", "reduce_to_one", "hierarchical_copy",
                                       "parameter_server", "hierarchical_ring"])
def test_every_algorithm_gives_a_well_formed_trace(algorithm):
    timeline, _ = timeline_of("paper-gtx1080ti-pcie", 4, algorithm)
    doc = json.loads(chrome_trace(timeline, "t"))
    check_trace(doc, "paper-gtx1080ti-pcie")
    assert {"compute", "data", "all-reduce", "all-reduce steps", "send", "link"} <= categories(doc)
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert {"D forward", "D backward", "D optimizer", "G forward", "G backward", "G optimizer",
            "D all-reduce", "G all-reduce", "D all-reduce: transfer", "D all-reduce: step 0"} <= names
    assert doc["otherData"]["steps_shown"] == 2 and doc["otherData"]["steps_simulated"] == 3


def test_transfers_carry_their_route_and_sit_on_the_sender():
    timeline, _ = timeline_of("paper-gtx1080ti-pcie", 4, "parameter_server")
    doc = json.loads(chrome_trace(timeline, "t"))
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    sends = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "send"]
    assert sends
    for e in sends:
        route = e["args"]["route"].split(" ")
        assert procs[e["pid"]].split(" ")[0] == route[0] and e["args"]["to"] == route[-1]
        assert e["args"]["bytes"] > 0
    # the server (the host, not a rank) pushes the sums back: its sends are on its own process
    assert any(procs[e["pid"]].startswith("host") for e in sends)


def test_chunked_overlapped_allreduce_uses_lanes_instead_of_overlapping():
    timeline, _ = timeline_of("dgx-a100", 8, "ring", chunks=4, overlap=True, bucket_MiB=1.0, first_bucket_MiB=0.5)
    doc = json.loads(chrome_trace(timeline, "t"))
    tracks = check_trace(doc, "dgx-a100")
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert "all-reduce steps #2" in names  # pipelined chunks run at once: a second lane
    assert any(name.startswith("link gpu0->nvswitch") for name in names)
    assert len(tracks) > 8 * 5


def test_closed_form_and_allreduce_workloads():
    timeline, _ = timeline_of("dgx-a100", 8, "ring", cost_model="alpha_beta")
    doc = json.loads(chrome_trace(timeline, "t"))
    check_trace(doc, "dgx-a100")
    assert "all-reduce" in categories(doc) and "send" not in categories(doc)
    timeline, _ = timeline_of("dgx-a100", 8, "halving_doubling", workload={"allreduce_bytes": 1 << 24}, steps=2)
    doc = json.loads(chrome_trace(timeline, "t"))
    check_trace(doc, "dgx-a100")
    assert {"all-reduce", "all-reduce steps", "send", "link"} <= categories(doc)


def test_cpu_ranks():
    inline = {"name": "w", "networks": {
        "discriminator": {"params": 100_000, "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.0005},
        "generator": {"params": 200_000, "forward_s": 0.001, "backward_s": 0.002, "optimizer_s": 0.0005}},
        "data": {"host_prep_s": 0.0005, "bytes_per_sample": 3136}}
    timeline, _ = timeline_of("cpu-host", 2, "ring", workload=inline)
    check_trace(json.loads(chrome_trace(timeline, "t")), "cpu-host")


def test_trace_is_bounded():
    timeline, _ = timeline_of("multi-node", 16, "ring", workload={"allreduce_bytes": 1 << 20}, steps=5)
    doc = json.loads(chrome_trace(timeline, "t", max_events=500))
    check_trace(doc, "multi-node")
    other = doc["otherData"]
    assert other["truncated"] and other["events"] == 500 < other["events_in_window"]
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "X") == 500
    # the earliest events are the ones kept
    full = json.loads(chrome_trace(timeline, "t"))
    assert not full["otherData"]["truncated"] and full["otherData"]["events"] <= MAX_TRACE_EVENTS
    cut = max(e["ts"] for e in doc["traceEvents"] if e["ph"] == "X")
    assert all(e["ts"] >= cut for e in full["traceEvents"][-10:] if e["ph"] == "X")
    assert other["window_us"] < timeline.execution.makespan * 1e6  # two of five steps


def test_link_utilisation_and_gantt_agree_with_the_summary():
    timeline, record = timeline_of("paper-gtx1080ti-pcie", 4, "ring")
    util = link_utilisation(timeline)
    topo = load_topology("paper-gtx1080ti-pcie")
    assert len(util) == topo.num_links
    busiest = record.busiest_link
    assert util[topo.link_names.index(busiest.resource)] == pytest.approx(busiest.utilization, abs=1e-6)
    g = gantt(timeline)
    assert g["ranks_shown"] == 4 and g["steps_shown"] == 2
    for rank in range(4):
        compute = sorted((b[2], b[3]) for b in g["bars"] if b[0] == rank and b[1] == "compute")
        assert all(b[0] >= a[1] - 1e-12 for a, b in zip(compute, compute[1:]))
        assert len(compute) == 2 * 6  # forward, backward, optimizer of D and G, two steps


def test_merge_intervals():
    group = np.array([0, 0, 0, 1, 1])
    start = np.array([0.0, 1.0, 5.0, 0.0, 0.5])
    end = np.array([2.0, 3.0, 6.0, 1.0, 0.7])
    g, s, e, n, w = merge_intervals(group, start, end, np.ones(5))
    assert g.tolist() == [0, 0, 1] and s.tolist() == [0.0, 5.0, 0.0] and e.tolist() == [3.0, 6.0, 1.0]
    assert n.tolist() == [2, 1, 2] and w.tolist() == [2.0, 1.0, 2.0]


def test_simulate_writes_one_trace_per_run(tmp_path):
    assert main(["simulate", "paper-table3", "--out", str(tmp_path), "--workers", "2"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    details = json.loads((tmp_path / "details.json").read_text())
    traces = sorted((tmp_path / "traces").glob("*.json"))
    assert len(traces) == len(summary["runs"]) == 16
    for run, detail in zip(summary["runs"], details["runs"]):
        doc = json.loads((tmp_path / detail["trace"]).read_text())
        check_trace(doc, "paper-gtx1080ti-pcie")
        assert f"{run['gpus']} x {run['algorithm']}" in doc["otherData"]["title"]
    # a later run with fewer traces leaves no stale ones behind
    assert main(["simulate", "paper-table3", "--out", str(tmp_path), "--traces", "featured"]) == 0
    assert len(list((tmp_path / "traces").glob("*.json"))) == 4  # per algorithm, its largest GPU count
    assert main(["simulate", "paper-table3", "--out", str(tmp_path), "--traces", "none"]) == 0
    assert not list((tmp_path / "traces").glob("*.json"))
    assert "gantt" in (tmp_path / "report.html").read_text()  # the report keeps its Gantt


def test_lanes_are_first_fit_within_each_owner_and_track():
    from gansim.outputs.trace import first_fit_lanes

    owner = np.array([0, 0, 0, 0, 1, 1, 0])
    track = np.array([0, 0, 0, 0, 0, 0, 1])
    start = np.array([0.0, 1.0, 1.5, 3.0, 0.0, 1.0, 0.5])
    end = np.array([1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 5.0])
    # rank 0's first track: [0,1] [1,2] touch (lane 0), [1.5,3] overlaps [1,2] (lane 1), [3,4]
    # fits lane 0 again; rank 1 never overlaps; another track is a group of its own
    assert first_fit_lanes(owner, track, start, end).tolist() == [0, 0, 1, 0, 0, 0, 0]
