"""A topology as a picture: node positions (a deterministic layered layout of its links)
and a plotly figure with one colour per link kind, each link labelled with its bandwidth.
A cluster of many machines is drawn one marker per machine (its GPUs, switches and NICs
collapsed), beside a full drawing of its first machine. The links are read as a plain
adjacency (`Adjacency`), not through networkx, whose import alone costs `gansim simulate`
a fifth of a second."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gansim.outputs import plot
from gansim.outputs.plot import Figure
from gansim.topology.graph import Topology

KIND_COLOURS = {"pcie": "#1f77b4", "nvlink": "#2ca02c", "net": "#ff7f0e", "loopback": "#9467bd"}
NODE_STYLE = {  # kind: (marker symbol, colour, size)
    "gpu": ("square", "#2ca02c", 16),
    "cpu": ("square", "#9467bd", 16),
    "host": ("diamond", "#1f77b4", 18),
    "pcie_switch": ("triangle-up", "#17becf", 14),
    "nvswitch": ("hexagon", "#bcbd22", 18),
    "nic": ("circle", "#ff7f0e", 10),
    "switch": ("star", "#d62728", 20),
}
LABEL_MAX_NODES = 80
LINK_LABEL_MAX_LINKS = 48
# above this many rank devices, on more than one machine, machines are drawn collapsed
COLLAPSE_MIN_RANKS = 64
GROUP = 8  # rank devices drawn as one where machines hold one each


# vertical level of each node kind around the rank devices (y = 0)
LEVEL = {"switch": 3.2, "nic": 1.9, "nvswitch": 1.0, "pcie_switch": -1.0, "host": -2.0}


class Adjacency:
    """The undirected links of a topology, one per pair of nodes (a later link between the
    same pair updates the first one's figures), in the order networkx's Graph gives them:
    a node's neighbours in the order their links come, each link once, from the end that
    comes first among the nodes."""

    def __init__(self, topo: Topology) -> None:
        self.neighbours: dict[str, dict[str, dict[str, Any]]] = {node: {} for node in topo.nodes}
        for link in topo.links:
            figures = self.neighbours[link.a].get(link.b, {})
            figures.update(kind=link.kind, bandwidth_GBps=link.bandwidth_GBps, latency_us=link.latency_us)
            self.neighbours[link.a][link.b] = figures
            self.neighbours[link.b][link.a] = figures

    def edges(self) -> list[tuple[str, str, dict[str, Any]]]:
        done: set[str] = set()
        edges = []
        for node, around in self.neighbours.items():
            edges += [(node, other, figures) for other, figures in around.items() if other not in done]
            done.add(node)
        return edges

    def has_edge(self, u: str, v: str) -> bool:
        return v in self.neighbours.get(u, {})


def positions(topo: Topology) -> dict[str, tuple[float, float]]:
    """A deterministic, layered picture: each machine (the nodes that reach each other
    without a `net` link) gets its own stretch of the x axis; its rank devices sit on a
    row at y = 0 (on a circle when they are linked to each other directly, as in an
    NVLink mesh or ring), NVSwitches and NICs above them, PCIe switches and hosts below,
    network switches on top; every other node is placed above or below the mean x of the
    neighbours already placed, spread so that none overlap."""
    neighbours = Adjacency(topo).neighbours
    machine = topo.machine_of
    ranks = set(topo.ranks)
    pos: dict[str, tuple[float, float]] = {}
    machines: dict[int, list[str]] = {}
    for node in topo.nodes:
        machines.setdefault(machine.get(node, -1), []).append(node)
    x0 = 0.0
    for m in sorted(machines):
        members = [n for n in machines[m] if n in ranks]
        if not members:
            continue
        meshed = any(v in ranks for u in members for v in neighbours[u])
        n = len(members)
        if meshed and n > 2:
            radius = max(1.0, n / (2 * math.pi) * 1.2)
            cx = x0 + radius
            for i, node in enumerate(members):
                angle = math.pi / 2 - 2 * math.pi * i / n
                pos[node] = (cx + radius * math.cos(angle), radius * math.sin(angle) * 0.8)
            x0 = cx + radius + 2.0
        else:
            for i, node in enumerate(members):
                pos[node] = (x0 + i, 0.0)
            x0 += max(n - 1, 1) + 2.0
    # the rest, level by level from the ranks outwards
    file_order = {n: i for i, n in enumerate(topo.nodes)}
    order = sorted((n for n in topo.nodes if n not in pos),
                   key=lambda n: (abs(LEVEL.get(topo.nodes[n].kind, 2.6)), file_order[n]))
    pending = list(order)
    for _ in range(len(pending) + 1):
        if not pending:
            break
        later = []
        for node in pending:
            placed = [pos[nb][0] for nb in neighbours[node] if nb in pos]
            if not placed and any(nb in pending for nb in neighbours[node]) and len(later) < len(pending):
                later.append(node)
                continue
            x = sum(placed) / len(placed) if placed else x0
            pos[node] = (x, LEVEL.get(topo.nodes[node].kind, 2.6))
        if len(later) == len(pending):  # nothing could be placed: put them anywhere
            for node in later:
                pos[node] = (x0, LEVEL.get(topo.nodes[node].kind, 2.6))
            later = []
        pending = later
    # spread nodes that landed on the same level too close to each other
    levels: dict[float, list[str]] = {}
    for node, (x, y) in pos.items():
        if node not in ranks:
            levels.setdefault(y, []).append(node)
    for y, nodes in levels.items():
        nodes.sort(key=lambda n: (pos[n][0], file_order[n]))
        gap = 0.9
        xs = [pos[n][0] for n in nodes]
        for i in range(1, len(xs)):
            xs[i] = max(xs[i], xs[i - 1] + gap)
        # re-centre the spread group on where it wanted to be
        shift = (sum(pos[n][0] for n in nodes) - sum(xs)) / len(xs)
        for node, x in zip(nodes, xs):
            pos[node] = (x + shift, y)
    return pos


def _fmt_bw(gbps: float) -> str:
    return f"{gbps:g} GB/s"


def topology_figures(topo: Topology, *, highlight: dict[tuple[str, str], str] | None = None) -> list[Figure]:
    """The drawings of a topology: the whole of it, or, for more than COLLAPSE_MIN_RANKS
    rank devices on several machines, the machines collapsed and the first one in full."""
    machines = _machines(topo)
    if len(topo.ranks) <= COLLAPSE_MIN_RANKS or len(machines) < 2:
        return [topology_figure(topo, highlight=highlight)]
    ids = list(topo.nodes)
    first = set(machines[0])
    position = {node: i for i, node in enumerate(ids)}
    inside = np.zeros(len(ids), dtype=bool)
    inside[[position[n] for n in first]] = True
    ends = topo.ends
    out_of_first = ends[inside[ends[:, 0]] & ~inside[ends[:, 1]], 1]
    keep = [n for n in ids if n in first] + [ids[i] for i in np.unique(out_of_first)]
    part = topo.part(keep, f"{topo.name}, machine 0")
    title = f"{topo.name}, its first machine in full ({len(part.ranks)} rank devices) and its links out of it"
    return [collapsed_figure(topo, machines, highlight=highlight), topology_figure(part, highlight=highlight,
                                                                                    title=title)]


def _machines(topo: Topology) -> list[list[str]]:
    """The nodes of each machine that holds rank devices, machines in rank order; where
    every machine is a single rank device (GPUs straight on a network), eight at a time."""
    machine = topo.machine_of
    members: dict[int, list[str]] = {}
    for node in topo.nodes:
        members.setdefault(machine[node], []).append(node)
    with_ranks = [members[m] for m in dict.fromkeys(machine[r] for r in topo.ranks)]
    ranks = set(topo.ranks)
    if all(sum(n in ranks for n in nodes) == 1 for nodes in with_ranks):
        with_ranks = [sum(with_ranks[i:i + GROUP], []) for i in range(0, len(with_ranks), GROUP)]
    return with_ranks


def collapsed_figure(topo: Topology, machines: list[list[str]], *,
                     highlight: dict[tuple[str, str], str] | None = None) -> Figure:
    """One marker per machine (or group of GPUs, see _machines) on a row, the nodes outside
    them (network switches) above, one line per machine and outside node for the links
    between them."""
    ids = list(topo.nodes)
    position = {node: i for i, node in enumerate(ids)}
    kinds = [spec.kind for spec in topo.nodes.values()]
    machine_of = np.full(len(ids), -1, dtype=np.int64)
    for m, nodes in enumerate(machines):
        machine_of[[position[n] for n in nodes]] = m
    a, b = topo.ends[0::2, 0], topo.ends[0::2, 1]
    ma, mb = machine_of[a], machine_of[b]
    bandwidth = np.array([link.bandwidth_GBps for link in topo.links])
    hot_link = np.zeros(a.size, dtype=bool)
    for u, v in highlight or {}:
        if topo.has_link(u, v):
            hot_link[topo.link_index(u, v) // 2] = True
    hot_machines = set(ma[hot_link & (ma >= 0) & (ma == mb)].tolist())
    # links between a machine and a node outside machines, one bundle per pair
    one_in = (ma >= 0) != (mb >= 0)
    bundle_m = np.where(ma >= 0, ma, mb)[one_in]
    bundle_node = np.where(ma >= 0, b, a)[one_in]
    key = bundle_m * len(ids) + bundle_node
    keys, which = np.unique(key, return_inverse=True)
    count = np.bincount(which)
    total = np.bincount(which, weights=bandwidth[one_in])
    hot_bundle = np.bincount(which, weights=hot_link[one_in]) > 0
    kinds_of = np.array(topo.link_kinds[0::2], dtype=object)[one_in]
    first_kind = kinds_of[np.unique(which, return_index=True)[1]]
    b_machine, b_node = np.divmod(keys, len(ids))
    outside = sorted(set(b_node.tolist()) | set(np.flatnonzero(machine_of < 0).tolist()),
                     key=lambda i: (LEVEL.get(kinds[i], 2.6), ids[i]))
    mean_x = np.bincount(b_node, weights=b_machine, minlength=len(ids)) / np.maximum(
        np.bincount(b_node, minlength=len(ids)), 1)
    served = np.bincount(b_node, minlength=len(ids))
    x_of = {i: (float(mean_x[i]) if served[i] else (len(machines) - 1) / 2) for i in outside}
    y_of = {i: 2.0 + LEVEL.get(kinds[i], 2.6) for i in outside}
    fig = Figure()
    xs: list[float | None] = []
    ys: list[float | None] = []
    red_x: list[float | None] = []
    red_y: list[float | None] = []
    for m, node, hot in zip(b_machine.tolist(), b_node.tolist(), hot_bundle.tolist()):
        xs += [m, x_of[node], None]
        ys += [0.0, y_of[node], None]
        if hot:
            red_x += [m, x_of[node], None]
            red_y += [0.0, y_of[node], None]
    hover = [f"machine {m} - {ids[node]}: {c} {k} link(s), {_fmt_bw(t)} per direction in all"
             for m, node, c, k, t in zip(b_machine.tolist(), b_node.tolist(), count.tolist(), first_kind.tolist(),
                                         total.tolist())]
    fig.add_trace(plot.scatter(x=xs, y=ys, mode="lines", line={"color": KIND_COLOURS["net"], "width": 1},
                               name="links out of a machine", hoverinfo="skip"))
    fig.add_trace(plot.scatter(x=[(m + x_of[n]) / 2 for m, n in zip(b_machine.tolist(), b_node.tolist())],
                               y=[y_of[n] / 2 for n in b_node.tolist()], mode="markers",
                               marker={"size": 4, "color": KIND_COLOURS["net"], "opacity": 0.4},
                               hovertext=hover, hoverinfo="text", name="link bundles", showlegend=False))
    if red_x:
        fig.add_trace(plot.scatter(x=red_x, y=red_y, mode="lines", line={"color": "#d62728", "width": 5},
                                   opacity=0.5, name="bottleneck link", hoverinfo="skip"))
    rank_set = set(topo.ranks)
    labels = []
    for m, nodes in enumerate(machines):
        tally: dict[str, int] = {}
        for n in nodes:
            tally[topo.nodes[n].kind] = tally.get(topo.nodes[n].kind, 0) + 1
        ranks = [n for n in nodes if n in rank_set]
        labels.append(f"<b>machine {m}</b>: {ranks[0]} .. {ranks[-1]}<br>"
                      + ", ".join(f"{c} {k}" for k, c in sorted(tally.items()))
                      + ("<br>holds a bottleneck link" if m in hot_machines else ""))
    symbol, colour, _ = NODE_STYLE["gpu"]
    fig.add_trace(plot.scatter(x=list(range(len(machines))), y=[0.0] * len(machines), mode="markers",
                               marker={"symbol": symbol, "size": 9, "color": [
                                   "#d62728" if m in hot_machines else colour for m in range(len(machines))],
                                   "line": {"width": 0.5, "color": "#333"}},
                               hovertext=labels, hoverinfo="text", name=f"machine ({len(machines)})"))
    for kind in sorted({kinds[i] for i in outside}):
        nodes = [i for i in outside if kinds[i] == kind]
        symbol, colour, size = NODE_STYLE.get(kind, ("circle", "#7f7f7f", 12))
        few = len(nodes) <= 16
        fig.add_trace(plot.scatter(x=[x_of[i] for i in nodes], y=[y_of[i] for i in nodes],
                                   mode="markers+text" if few else "markers",
                                   text=[ids[i] for i in nodes] if few else None, textposition="top center",
                                   marker={"symbol": symbol, "color": colour, "size": size,
                                           "line": {"width": 1, "color": "#333"}},
                                   hovertext=[f"<b>{ids[i]}</b> ({kind}), links to {int(served[i])} machines"
                                              for i in nodes], hoverinfo="text", name=f"{kind} ({len(nodes)})"))
    fig.update_layout(
        title=f"{topo.name}: {len(topo.ranks)} rank devices on {len(machines)} machines (one marker each), "
              f"{len(topo.links)} full-duplex links",
        xaxis={"visible": False}, yaxis={"visible": False}, height=420, hovermode="closest",
        legend={"itemsizing": "constant"})
    return fig


def topology_figure(topo: Topology, *, highlight: dict[tuple[str, str], str] | None = None,
                    title: str | None = None) -> Figure:
    """The topology drawing. `highlight` maps an undirected link (u, v) to a note; those
    links are drawn thick and red (e.g. the bottleneck of some run)."""
    pos = positions(topo)
    adjacency = Adjacency(topo)
    links = adjacency.edges()
    fig = Figure()
    by_kind: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for u, v, attrs in links:
        by_kind.setdefault(attrs["kind"], []).append((u, v, attrs))
    max_bw = max((a["bandwidth_GBps"] for _, _, a in links), default=1.0)
    label_links = len(links) <= LINK_LABEL_MAX_LINKS
    for kind in sorted(by_kind):
        edges = by_kind[kind]
        # line width grows with the log of the bandwidth; one trace per width keeps it cheap
        widths: dict[float, tuple[list[float | None], list[float | None]]] = {}
        for u, v, attrs in edges:
            w = round(1.0 + 4.0 * math.log1p(attrs["bandwidth_GBps"]) / math.log1p(max_bw), 1)
            xs, ys = widths.setdefault(w, ([], []))
            xs += [pos[u][0], pos[v][0], None]
            ys += [pos[u][1], pos[v][1], None]
        first = True
        for w, (xs, ys) in sorted(widths.items()):
            fig.add_trace(plot.scatter(x=xs, y=ys, mode="lines", line={"color": KIND_COLOURS.get(kind, "#7f7f7f"),
                                                                     "width": w},
                                     name=f"{kind} link", legendgroup=f"link-{kind}", showlegend=first,
                                     hoverinfo="skip"))
            first = False
        # hover (and, when few, a label) at each link's midpoint
        mx = [(pos[u][0] + pos[v][0]) / 2 for u, v, _ in edges]
        my = [(pos[u][1] + pos[v][1]) / 2 for u, v, _ in edges]
        hover = [f"{u} - {v}<br>{a['kind']}, {_fmt_bw(a['bandwidth_GBps'])} per direction, {a['latency_us']:g} us"
                 for u, v, a in edges]
        fig.add_trace(plot.scatter(x=mx, y=my, mode="markers+text" if label_links else "markers",
                                 marker={"size": 6, "color": KIND_COLOURS.get(kind, "#7f7f7f"), "opacity": 0.5},
                                 text=[_fmt_bw(a["bandwidth_GBps"]) for _, _, a in edges] if label_links else None,
                                 textposition="middle right", textfont={"size": 9, "color": "#555"},
                                 hovertext=hover, hoverinfo="text", name=f"{kind} bandwidth",
                                 legendgroup=f"link-{kind}", showlegend=False))
    if highlight:
        xs, ys, hx, hy, notes = [], [], [], [], []
        for (u, v), note in sorted(highlight.items()):
            if not adjacency.has_edge(u, v):
                continue
            xs += [pos[u][0], pos[v][0], None]
            ys += [pos[u][1], pos[v][1], None]
            hx.append((pos[u][0] + pos[v][0]) / 2)
            hy.append((pos[u][1] + pos[v][1]) / 2)
            notes.append(f"{u} - {v}: {note}")
        if notes:
            fig.add_trace(plot.scatter(x=xs, y=ys, mode="lines", line={"color": "#d62728", "width": 7},
                                     opacity=0.45, name="bottleneck link", legendgroup="bottleneck",
                                     hoverinfo="skip"))
            fig.add_trace(plot.scatter(x=hx, y=hy, mode="markers", marker={"symbol": "x", "size": 11,
                                                                         "color": "#d62728"},
                                     hovertext=notes, hoverinfo="text", name="bottleneck", legendgroup="bottleneck",
                                     showlegend=False))
    rank_of = {node: r for r, node in enumerate(topo.ranks)}
    by_node_kind: dict[str, list[str]] = {}
    for node, spec in topo.nodes.items():
        by_node_kind.setdefault(spec.kind, []).append(node)
    show_labels = len(topo.nodes) <= LABEL_MAX_NODES
    for kind in sorted(by_node_kind):
        nodes = by_node_kind[kind]
        symbol, colour, size = NODE_STYLE.get(kind, ("circle", "#7f7f7f", 12))
        hover = []
        for n in nodes:
            spec = topo.nodes[n]
            bits = [f"<b>{n}</b> ({kind}{', rank ' + str(rank_of[n]) if n in rank_of else ''})"]
            for attr in ("model", "tflops", "memory_GB", "cores"):
                value = getattr(spec, attr, None)
                if value is not None:
                    bits.append(f"{attr}: {value}")
            hover.append("<br>".join(bits))
        fig.add_trace(plot.scatter(x=[pos[n][0] for n in nodes], y=[pos[n][1] for n in nodes],
                                 mode="markers+text" if show_labels else "markers",
                                 marker={"symbol": symbol, "color": colour, "size": size,
                                         "line": {"width": 1, "color": "#333"}},
                                 text=nodes if show_labels else None, textposition="top center",
                                 textfont={"size": 10}, hovertext=hover, hoverinfo="text",
                                 name=f"{kind} ({len(nodes)})"))
    fig.update_layout(
        title=title or f"{topo.name}: {len(topo.ranks)} rank devices, {len(links)} full-duplex links",
        xaxis={"visible": False}, yaxis={"visible": False}, height=560, hovermode="closest",
        legend={"itemsizing": "constant"},
    )
    return fig
