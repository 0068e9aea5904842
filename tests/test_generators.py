"""Tests for gansim.topology.generators and the shipped topology files."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
import yaml

from gansim.core.errors import UserInputError
from gansim.topology.generators import DGX1_NVLINK_BRICKS, GENERATORS, generate

TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topologies"
NODE_KINDS = {"gpu", "cpu", "host", "pcie_switch", "nvswitch", "nic", "switch"}
LINK_KINDS = {"pcie", "nvlink", "net", "loopback"}
EXPECTED_NAMES = {
    "pcie_tree", "ring", "switch", "fully_connected", "nvswitch", "dgx1", "multi_node", "cpu_host",
}  # fmt: skip


def graph(topo: dict) -> nx.Graph:
    g = nx.Graph()
    for n in topo["nodes"]:
        g.add_node(n["id"], **n)
    for link in topo["links"]:
        g.add_edge(link["a"], link["b"], **link)
    return g


def ranks(topo: dict) -> list[str]:
    return [n["id"] for n in topo["nodes"] if n["kind"] in ("gpu", "cpu")]


def check_well_formed(topo: dict) -> nx.Graph:
    """The schema every generator promises: unique ids, known kinds, a simple connected graph."""
    assert set(topo) == {"nodes", "links"}
    ids = [n["id"] for n in topo["nodes"]]
    assert len(ids) == len(set(ids)), "node ids must be unique"
    for n in topo["nodes"]:
        assert n["kind"] in NODE_KINDS
        if n["kind"] == "gpu":
            assert n["memory_GB"] > 0 and n["tflops"] > 0 and isinstance(n["model"], str)
        if n["kind"] == "host":
            assert isinstance(n["cores"], int) and n["cores"] >= 1
        if n["kind"] == "cpu":
            assert n["host"] in ids and n["threads"] == 1
    pairs = set()
    for link in topo["links"]:
        assert link["a"] in ids and link["b"] in ids and link["a"] != link["b"]
        assert link["kind"] in LINK_KINDS
        assert link["bandwidth_GBps"] > 0 and link["latency_us"] >= 0
        pair = frozenset((link["a"], link["b"]))
        assert pair not in pairs, f"parallel link {sorted(pair)}"
        pairs.add(pair)
    g = graph(topo)
    assert nx.is_connected(g)
    rs = ranks(topo)
    assert rs, "a topology needs at least one rank"
    reachable = nx.node_connected_component(g, rs[0])
    assert all(r in reachable for r in rs)
    return g


def degree_by_kind(g: nx.Graph, node: str, kind: str) -> int:
    return sum(1 for _, _, d in g.edges(node, data=True) if d["kind"] == kind)


# --------------------------------------------------------------------------- registry


def test_all_generators_registered():
    assert set(GENERATORS) == EXPECTED_NAMES
    for name in GENERATORS:
        gen = GENERATORS.get(name)
        assert gen.description
        assert gen.params_model.model_config.get("extra") == "forbid"


@pytest.mark.parametrize("name", sorted(EXPECTED_NAMES))
def test_defaults_build_well_formed(name):
    check_well_formed(generate(name, {}))


# --------------------------------------------------------------------------- pcie_tree


def test_pcie_tree_direct_on_root_complex():
    topo = generate("pcie_tree", {"gpus": 4, "gpus_per_switch": 0, "host_cores": 16})
    g = check_well_formed(topo)
    assert ranks(topo) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert len(topo["nodes"]) == 5 and len(topo["links"]) == 4
    assert g.nodes["host"]["cores"] == 16
    for r in ranks(topo):
        assert list(g.neighbors(r)) == ["host"]
    assert nx.shortest_path(g, "gpu0", "gpu3") == ["gpu0", "host", "gpu3"]
    gpu = g.nodes["gpu0"]
    assert (gpu["model"], gpu["tflops"], gpu["memory_GB"]) == ("GTX 1080 Ti", 11.34, 11.0)


def test_pcie_tree_with_switches():
    topo = generate(
        "pcie_tree",
        {"gpus": 6, "gpus_per_switch": 4, "pcie_bandwidth_GBps": 12, "switch_uplink_bandwidth_GBps": 15},
    )
    g = check_well_formed(topo)
    kinds = Counter(n["kind"] for n in topo["nodes"])
    assert kinds == {"gpu": 6, "pcie_switch": 2, "host": 1}
    assert len(topo["links"]) == 6 + 2
    assert set(g.neighbors("pcie_sw0")) == {"gpu0", "gpu1", "gpu2", "gpu3", "host"}
    assert set(g.neighbors("pcie_sw1")) == {"gpu4", "gpu5", "host"}
    assert g.edges["pcie_sw0", "host"]["bandwidth_GBps"] == 15
    assert g.edges["gpu0", "pcie_sw0"]["bandwidth_GBps"] == 12
    assert nx.shortest_path(g, "gpu0", "gpu1") == ["gpu0", "pcie_sw0", "gpu1"]


# --------------------------------------------------------------------------- ring


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_ring(p):
    topo = generate("ring", {"gpus": p, "bandwidth_GBps": 25, "latency_us": 0.5})
    g = check_well_formed(topo)
    assert len(topo["nodes"]) == p
    assert len(topo["links"]) == {1: 0, 2: 1}.get(p, p)
    for i in range(p):
        expected = {f"gpu{(i + 1) % p}", f"gpu{(i - 1) % p}"} - {f"gpu{i}"}
        assert set(g.neighbors(f"gpu{i}")) == expected
    assert all(link["kind"] == "nvlink" for link in topo["links"])


def test_ring_link_kind():
    topo = generate("ring", {"gpus": 4, "link_kind": "pcie"})
    assert {link["kind"] for link in topo["links"]} == {"pcie"}


# --------------------------------------------------------------------------- switch


def test_switch():
    topo = generate("switch", {"gpus": 5, "bandwidth_GBps": 12.5, "latency_us": 2})
    g = check_well_formed(topo)
    assert len(topo["nodes"]) == 6 and len(topo["links"]) == 5
    assert g.nodes["switch"]["kind"] == "switch"
    assert g.degree("switch") == 5
    assert all(g.degree(r) == 1 for r in ranks(topo))
    assert {(link["kind"], link["bandwidth_GBps"]) for link in topo["links"]} == {("net", 12.5)}


# --------------------------------------------------------------------------- fully_connected


@pytest.mark.parametrize("p", [1, 2, 4, 7])
def test_fully_connected(p):
    topo = generate("fully_connected", {"gpus": p})
    g = check_well_formed(topo)
    assert len(topo["nodes"]) == p
    assert len(topo["links"]) == p * (p - 1) // 2
    assert all(g.degree(r) == p - 1 for r in ranks(topo))


# --------------------------------------------------------------------------- nvswitch


def test_nvswitch():
    topo = generate("nvswitch", {"gpus": 8, "nvlink_bandwidth_GBps": 300, "pcie_bandwidth_GBps": 24})
    g = check_well_formed(topo)
    kinds = Counter(n["kind"] for n in topo["nodes"])
    assert kinds == {"gpu": 8, "nvswitch": 1, "host": 1}
    assert len(topo["links"]) == 16
    assert ranks(topo) == [f"gpu{i}" for i in range(8)]
    for r in ranks(topo):
        assert g.edges[r, "nvswitch"]["kind"] == "nvlink"
        assert g.edges[r, "nvswitch"]["bandwidth_GBps"] == 300
        assert g.edges[r, "host"]["kind"] == "pcie"
        assert g.edges[r, "host"]["bandwidth_GBps"] == 24
    assert g.degree("nvswitch") == 8 and g.degree("host") == 8


# --------------------------------------------------------------------------- dgx1


def test_dgx1_counts_and_bricks():
    topo = generate("dgx1", {})
    g = check_well_formed(topo)
    kinds = Counter(n["kind"] for n in topo["nodes"])
    assert kinds == {"gpu": 8, "pcie_switch": 4, "host": 2}
    nvlinks = [link for link in topo["links"] if link["kind"] == "nvlink"]
    assert len(nvlinks) == 16  # 12 cube edges + 2 face diagonals x 2 faces
    assert len(topo["links"]) == 16 + 8 + 4 + 1
    for r in ranks(topo):
        # six NVLink2 bricks per GPU, counted with multiplicity, at 25 GB/s each
        total = sum(d["bandwidth_GBps"] for _, _, d in g.edges(r, data=True) if d["kind"] == "nvlink")
        assert total == pytest.approx(6 * 25.0)
        assert degree_by_kind(g, r, "nvlink") == 4
        assert degree_by_kind(g, r, "pcie") == 1
    assert sorted(link["bandwidth_GBps"] for link in nvlinks) == [25.0] * 8 + [50.0] * 8
    # quads fully connected, cross links i <-> i+4, no other NVLink pairs
    for quad in ((0, 1, 2, 3), (4, 5, 6, 7)):
        for i in quad:
            for j in quad:
                if i < j:
                    assert g.edges[f"gpu{i}", f"gpu{j}"]["kind"] == "nvlink"
    for i in range(4):
        assert g.edges[f"gpu{i}", f"gpu{i + 4}"]["kind"] == "nvlink"
    assert not g.has_edge("gpu0", "gpu6")
    # documented multiplicities (nvidia-smi numbering)
    assert g.edges["gpu0", "gpu3"]["bandwidth_GBps"] == 50.0
    assert g.edges["gpu0", "gpu4"]["bandwidth_GBps"] == 50.0
    assert g.edges["gpu0", "gpu1"]["bandwidth_GBps"] == 25.0
    assert g.edges["gpu1", "gpu2"]["bandwidth_GBps"] == 50.0
    # PCIe: two GPUs per switch, two switches per socket, sockets joined
    for s in range(4):
        assert set(g.neighbors(f"pcie_sw{s}")) == {f"gpu{2 * s}", f"gpu{2 * s + 1}", f"host{s // 2}"}
    assert g.has_edge("host0", "host1")
    assert g.nodes["host0"]["cores"] == 20


def _multigraph(matrix_or_pairs) -> nx.MultiGraph:
    m = nx.MultiGraph()
    m.add_nodes_from(range(8))
    for (i, j), k in matrix_or_pairs.items():
        for _ in range(k):
            m.add_edge(i, j)
    return m


def test_dgx1_bricks_isomorphic_to_msccl_matrix():
    # microsoft/msccl-tools sccl/topologies/nvidia.py dgx1(), in its own GPU numbering
    msccl = [
        [0, 2, 1, 1, 2, 0, 0, 0],
        [2, 0, 1, 2, 0, 1, 0, 0],
        [1, 1, 0, 2, 0, 0, 2, 0],
        [1, 2, 2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2, 1, 1],
        [0, 1, 0, 0, 2, 0, 1, 2],
        [0, 0, 2, 0, 1, 1, 0, 2],
        [0, 0, 0, 1, 1, 2, 2, 0],
    ]
    theirs = {(i, j): msccl[i][j] for i in range(8) for j in range(i + 1, 8) if msccl[i][j]}
    assert nx.is_isomorphic(_multigraph(DGX1_NVLINK_BRICKS), _multigraph(theirs))
    # the other assignment that six bricks per GPU would allow is not the DGX-1's
    other = dict(DGX1_NVLINK_BRICKS)
    other.update({(2, 3): 1, (2, 6): 2, (3, 7): 2, (6, 7): 1, (4, 6): 2, (5, 7): 2, (4, 7): 1, (5, 6): 1})
    assert all(sum(k for p, k in other.items() if g in p) == 6 for g in range(8))
    assert not nx.is_isomorphic(_multigraph(other), _multigraph(theirs))


def test_dgx1_brick_bandwidth_param():
    topo = generate("dgx1", {"nvlink_brick_bandwidth_GBps": 20})
    g = graph(topo)
    for r in ranks(topo):
        total = sum(d["bandwidth_GBps"] for _, _, d in g.edges(r, data=True) if d["kind"] == "nvlink")
        assert total == pytest.approx(120.0)


# --------------------------------------------------------------------------- multi_node


def test_multi_node_nvswitch_counts():
    topo = generate("multi_node", {"nodes": 4, "gpus_per_node": 8, "intra": "nvswitch"})
    g = check_well_formed(topo)
    kinds = Counter(n["kind"] for n in topo["nodes"])
    assert kinds == {"gpu": 32, "nic": 32, "nvswitch": 4, "host": 4, "switch": 1}
    # per node: 8 GPU-NVSwitch + 8 GPU-host + 8 GPU-NIC + 8 NIC-switch + 8 host-NIC
    assert len(topo["links"]) == 4 * 40
    assert g.degree("switch") == 32
    for n in range(4):
        for k in range(8):
            assert g.edges[f"n{n}.gpu{k}", f"n{n}.nic{k}"]["kind"] == "pcie"
            assert g.edges[f"n{n}.nic{k}", "switch"]["kind"] == "net"
            assert g.edges[f"n{n}.nic{k}", "switch"]["bandwidth_GBps"] == 25.0
            assert g.edges[f"n{n}.host", f"n{n}.nic{k}"]["kind"] == "pcie"
        assert g.nodes[f"n{n}.nvswitch"]["kind"] == "nvswitch"
        assert g.nodes[f"n{n}.host"]["kind"] == "host"
    path = nx.shortest_path(g, "n0.gpu0", "n3.gpu5")
    assert path == ["n0.gpu0", "n0.nic0", "switch", "n3.nic5", "n3.gpu5"]


def test_multi_node_128_nodes_in_node_order():
    topo = generate("multi_node", {"nodes": 128, "gpus_per_node": 8})
    rs = ranks(topo)
    assert len(rs) == 1024
    assert rs == [f"n{n}.gpu{k}" for n in range(128) for k in range(8)]
    g = check_well_formed(topo)
    assert g.degree("switch") == 1024


@pytest.mark.parametrize(
    "intra, extra_kinds",
    [
        ("pcie_tree", {"host": 2}),
        ("fully_connected", {}),
        ("dgx1", {"host": 4, "pcie_switch": 8}),
    ],
)
def test_multi_node_other_intra(intra, extra_kinds):
    gpus = 8
    topo = generate("multi_node", {"nodes": 2, "gpus_per_node": gpus, "intra": intra})
    check_well_formed(topo)
    kinds = Counter(n["kind"] for n in topo["nodes"])
    assert kinds == {"gpu": 2 * gpus, "nic": 2 * gpus, "switch": 1, **extra_kinds}
    assert ranks(topo) == [f"n{n}.gpu{k}" for n in range(2) for k in range(gpus)]


def test_multi_node_intra_params_passed_through():
    topo = generate(
        "multi_node",
        {"nodes": 2, "gpus_per_node": 4, "intra": "pcie_tree",
         "intra_params": {"gpus_per_switch": 2, "gpu_model": "X", "gpu_tflops": 1.5}},
    )  # fmt: skip
    g = check_well_formed(topo)
    assert g.nodes["n1.gpu3"]["model"] == "X" and g.nodes["n1.gpu3"]["tflops"] == 1.5
    assert set(g.neighbors("n1.pcie_sw1")) == {"n1.gpu2", "n1.gpu3", "n1.host"}


# --------------------------------------------------------------------------- cpu_host


def test_cpu_host():
    topo = generate("cpu_host", {"ranks": 3, "cores": 2, "bandwidth_GBps": 4, "latency_us": 30})
    g = check_well_formed(topo)
    assert ranks(topo) == ["cpu0", "cpu1", "cpu2"]
    assert len(topo["nodes"]) == 4 and len(topo["links"]) == 3
    assert g.nodes["host"]["cores"] == 2
    for r in ranks(topo):
        assert g.nodes[r]["host"] == "host" and g.nodes[r]["threads"] == 1
        assert g.edges[r, "host"]["kind"] == "loopback"
    assert nx.shortest_path(g, "cpu0", "cpu2") == ["cpu0", "host", "cpu2"]


# --------------------------------------------------------------------------- errors


def test_unknown_generator():
    with pytest.raises(UserInputError) as exc:
        generate("torus", {}, source="topologies/x.yaml")
    assert exc.value.field == "generator"
    assert "generator" in str(exc.value)
    assert "torus" in str(exc.value) and "multi_node" in str(exc.value)
    assert str(exc.value).startswith("topologies/x.yaml: generator: ")


def test_bad_param_value():
    with pytest.raises(UserInputError) as exc:
        generate("multi_node", {"nodes": -1}, source="topologies/x.yaml")
    assert exc.value.field == "params.nodes"
    assert str(exc.value).startswith("topologies/x.yaml: params.nodes: ")
    assert "greater than" in str(exc.value)


def test_unknown_param():
    with pytest.raises(UserInputError) as exc:
        generate("ring", {"gpus": 4, "bandwith_GBps": 10})
    assert exc.value.field == "params.bandwith_GBps"
    assert "params.bandwith_GBps" in str(exc.value)
    assert "Extra inputs are not permitted" in str(exc.value)


@pytest.mark.parametrize(
    "name, params, field",
    [
        ("ring", {"gpus": 0}, "params.gpus"),
        ("pcie_tree", {"pcie_bandwidth_GBps": 0}, "params.pcie_bandwidth_GBps"),
        ("pcie_tree", {"gpus_per_switch": -1}, "params.gpus_per_switch"),
        ("switch", {"latency_us": -1}, "params.latency_us"),
        ("ring", {"link_kind": "qpi"}, "params.link_kind"),
        ("cpu_host", {"cores": 0}, "params.cores"),
        ("nvswitch", {"gpus": "eight"}, "params.gpus"),
        ("multi_node", {"intra": "torus"}, "params.intra"),
        ("multi_node", {"intra": "dgx1", "gpus_per_node": 4}, "params.gpus_per_node"),
        ("multi_node", {"intra_params": {"gpu_tflops": -1}}, "params.intra_params.gpu_tflops"),
        ("multi_node", {"intra_params": {"gpus": 4}}, "params.intra_params.gpus"),
        ("multi_node", {"intra_params": {"gpus_per_switch": 2}}, "params.intra_params.gpus_per_switch"),
    ],
)
def test_bad_params_name_the_field(name, params, field):
    with pytest.raises(UserInputError) as exc:
        generate(name, params, source="t.yaml")
    assert exc.value.field == field
    assert f"t.yaml: {field}: " in str(exc.value)


def test_params_must_be_a_mapping():
    with pytest.raises(UserInputError) as exc:
        generate("ring", [1, 2])  # type: ignore[arg-type]
    assert exc.value.field == "params"


# --------------------------------------------------------------------------- shipped files

SHIPPED = sorted(TOPOLOGY_DIR.glob("*.yaml"))


def test_expected_files_shipped():
    names = {p.stem for p in SHIPPED}
    assert {"paper-gtx1080ti-pcie", "dgx1-v100", "dgx-a100", "dgx-h100", "dgx-b200", "dgx-h100-superpod",
            "aws-p5-efa", "multi-node", "cpu-host"} <= names


@pytest.mark.parametrize("name, nvls", [("dgx-a100", False), ("dgx-h100", True), ("dgx-b200", True)])
def test_shipped_nvswitch_machines_reduce_in_the_switch_from_hopper_on(name, nvls):
    """A third-generation NVSwitch (H100) or later reduces in the switch, which NCCL takes at
    1 GiB on 8 GPUs; the A100's second generation does not."""
    import gansim

    (row,) = gansim.nccl_tests(name, 8, minbytes="1G", maxbytes="1G").rows
    assert (row.algorithm == "nvls") == nvls


def test_dgx_h100_superpod_is_four_scalable_units_on_rails():
    from gansim.topology.graph import load_topology

    topo = load_topology("dgx-h100-superpod")
    assert len(topo.ranks) == 1024
    # the NICs of one rail of an SU's 32 machines share a leaf; other SUs are a spine away
    assert _switches(topo, "n0.gpu3", "n31.gpu3") == ["leaf0.rail3"]
    assert _switches(topo, "n0.gpu3", "n32.gpu3") == ["leaf0.rail3", "spine0", "leaf1.rail3"]
    capacity = dict(zip(topo.link_names, topo.capacity_Bps))
    assert capacity["n0.nic3->leaf0.rail3"] == pytest.approx(50e9)  # NDR 400 Gb/s
    assert capacity["leaf0.rail3->spine0"] == pytest.approx(32 * 50e9)  # non-blocking


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_topology_well_formed(path):
    text = path.read_text()
    assert text.lstrip().startswith("#"), "each shipped file starts with a header citing its sources"
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    assert doc["name"] == path.stem
    assert isinstance(doc["description"], str) and doc["description"].strip()
    if "generator" in doc:
        assert set(doc) <= {"name", "description", "generator", "params"}
        topo = generate(doc["generator"], doc.get("params") or {}, source=str(path))
    else:
        assert set(doc) == {"name", "description", "nodes", "links"}
        topo = {"nodes": doc["nodes"], "links": doc["links"]}
    check_well_formed(topo)


def test_paper_box():
    doc = yaml.safe_load((TOPOLOGY_DIR / "paper-gtx1080ti-pcie.yaml").read_text())
    topo = {"nodes": doc["nodes"], "links": doc["links"]}
    g = check_well_formed(topo)
    assert ranks(topo) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    hosts = [n for n in doc["nodes"] if n["kind"] == "host"]
    assert len(hosts) == 1 and hosts[0]["cores"] == 16
    for r in ranks(topo):
        assert g.nodes[r]["model"] == "GTX 1080 Ti"
        assert g.nodes[r]["memory_GB"] == 11 and g.nodes[r]["tflops"] == 11.34
        assert g.nodes[r]["p2p"] is False  # GeForce in a VM: bytes are staged in host memory
        (neighbor,) = g.neighbors(r)  # the host is a GPU's only neighbour
        assert neighbor == hosts[0]["id"]
        assert g.edges[r, neighbor]["kind"] == "pcie"
        assert g.edges[r, neighbor]["bandwidth_GBps"] == 15.75  # PCIe 3.0 x16 line rate
    # the file equals what the pcie_tree generator builds from the same figures
    assert generate("pcie_tree", {"gpus": 4, "host_cores": 16, "p2p": False, "host_dram_bandwidth_GBps": 127.9,
                                  "host_model": "Intel Xeon Scalable (Skylake)"}) == topo


def test_multi_node_yaml():
    doc = yaml.safe_load((TOPOLOGY_DIR / "multi-node.yaml").read_text())
    topo = generate(doc["generator"], doc["params"])
    assert len(ranks(topo)) == 32
    assert {n["model"] for n in topo["nodes"] if n["kind"] == "gpu"} == {"A100-SXM4-40GB"}
    nets = [link for link in topo["links"] if link["kind"] == "net"]
    assert len(nets) == 32 and {link["bandwidth_GBps"] for link in nets} == {25.0}


def _rail(**params):
    from gansim.topology.graph import topology_from_dict

    base = {"nodes": 8, "gpus_per_node": 2, "intra": "nvswitch", "fabric": "rail", "machines_per_leaf": 2,
            "machines_per_pod": 4}
    return topology_from_dict({"name": "rail", "generator": "multi_node", "params": {**base, **params}}, "test")


def _switches(topo, a, b):
    """The switches on the route from a to b, in order."""
    ends = [topo.link_names[i].split("->")[1] for i in topo.route(a, b).links]
    return [n for n in ends if topo.nodes[n].kind == "switch"]


def test_a_rail_fabric_joins_a_rail_at_its_leaf_a_pod_at_its_spine_and_pods_at_the_core():
    topo = _rail()
    # rail 0 of machines 0 and 1 (one leaf group), of 0 and 2 (one pod), of 0 and 5 (two pods)
    assert _switches(topo, "n0.gpu0", "n1.gpu0") == ["leaf0.rail0"]
    assert _switches(topo, "n0.gpu0", "n2.gpu0") == ["leaf0.rail0", "spine0", "leaf1.rail0"]
    assert _switches(topo, "n0.gpu0", "n5.gpu0") == ["leaf0.rail0", "spine0", "core", "spine1", "leaf2.rail0"]
    capacity = dict(zip(topo.link_names, topo.capacity_Bps))
    # a leaf's link up carries its machines' NIC links (2 x 25 GB/s), a spine's its pod's (4 x 2 x 25)
    assert capacity["leaf0.rail0->spine0"] == pytest.approx(50e9)
    assert capacity["spine1->core"] == pytest.approx(200e9)
    assert dict(zip(_rail(fabric_oversubscription=4).link_names,
                    _rail(fabric_oversubscription=4).capacity_Bps))["leaf0.rail0->spine0"] == pytest.approx(12.5e9)


def test_rail_fabric_parameters_are_checked():
    with pytest.raises(Exception, match="machines_per_pod.*not a multiple of machines_per_leaf"):
        _rail(machines_per_pod=3)
    with pytest.raises(Exception, match="fabric"):
        _rail(fabric="torus")
    with pytest.raises(Exception, match="fabric_oversubscription"):
        _rail(fabric_oversubscription=0.5)


def test_an_oversubscribed_spine_slows_the_transfer_that_crosses_it_by_its_ratio(tmp_path):
    import yaml

    import gansim

    def ring_s(oversubscription: float) -> float:
        topology = tmp_path / f"two-{oversubscription}.yaml"
        topology.write_text(yaml.safe_dump({
            "name": "two", "generator": "multi_node",
            "params": {"nodes": 2, "gpus_per_node": 1, "intra": "nvswitch", "fabric": "rail",
                       "machines_per_leaf": 1, "fabric_oversubscription": oversubscription}}))
        result = gansim.simulate({"name": "x", "topology": str(topology), "workload": {"allreduce_bytes": 1 << 30},
                                  "gpus": [2], "algorithms": ["ring"]})
        return next(r for r in result.runs if r.gpus == 2).step_time_s
    # 2 ranks: 2 ring steps of 512 MiB, each across the spine: its uplink of 25 / 4 GB/s binds
    # where the NIC's 25 GB/s did
    assert ring_s(4) - ring_s(1) == pytest.approx(2 * (1 << 29) * (1 / 6.25e9 - 1 / 25e9), rel=1e-3)


@pytest.mark.parametrize("intra", ["nvswitch", "dgx1", "pcie_tree"])
def test_kind_masks_are_the_kinds_element_by_element(intra):
    """Topology.node_kind_codes / link_kind_codes (a byte per element) against the
    nodes' and links' own kinds, for every kind there and one that is not."""
    from gansim.topology.graph import topology_from_dict

    topo = topology_from_dict({"name": "t", "generator": "multi_node", "params": {"nodes": 3, "intra": intra}}, "t")
    node_kinds = [spec.kind for spec in topo.nodes.values()]
    for kind in set(node_kinds) | {"no_such_kind"}:
        assert topo.node_kind_codes.mask(kind).tolist() == [k == kind for k in node_kinds]
    for kind in set(topo.link_kinds) | {"no_such_kind"}:
        assert topo.link_kind_codes.mask(kind).tolist() == [k == kind for k in topo.link_kinds]
    assert [topo.link_kind_codes.names[c] for c in topo.link_kind_codes.codes.tolist()] == topo.link_kinds


def test_aws_p5_efa_is_the_validated_pair_on_more_instances():
    """The shipped 16-instance p5 cluster uses the figures of the validation set's two-node p5
    (validation/aws-p5-h100-2node-efa.yaml), which are compared with published measurements."""
    from gansim.topology.graph import load_topology

    shipped = yaml.safe_load((TOPOLOGY_DIR / "aws-p5-efa.yaml").read_text())["params"]
    validated = yaml.safe_load((Path(__file__).parent.parent / "validation" / "aws-p5-h100-2node-efa.yaml")
                               .read_text())["topology"]["params"]
    for key in ("intra", "gpus_per_node", "nic_model", "nics_per_node", "nic_bandwidth_GBps",
                "nic_pcie_bandwidth_GBps"):
        assert shipped[key] == validated[key], key
    for key, value in validated["intra_params"].items():
        assert shipped["intra_params"][key] == value, key
    topo = load_topology("aws-p5-efa")
    nics = [spec for spec in topo.nodes.values() if spec.kind == "nic"]
    assert len(topo.ranks) == 128 and len(nics) == 16 * 32 and {n.model for n in nics} == {"AWS EFA (p5)"}
