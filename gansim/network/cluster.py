"""The simulated machine for one run: the first N ranks of a topology, turned into
resources the flow network shares (directed links, each rank's compute, host cores)
and routes between them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import simpy

from gansim.core.arrays import content_key
from gansim.core.errors import UserInputError
from gansim.network.flows import FlowNetwork
from gansim.topology.graph import Topology

# Amount units: bytes on links; seconds of single-device work on compute resources, whose
# capacity is then 1 (a GPU) or the number of cores (a host's core pool).


@dataclass(frozen=True)
class Resource:
    name: str
    kind: str  # a link kind (pcie, nvlink, net, loopback) or "compute" / "cores"


@dataclass
class _Resources:
    names: list[str]
    kinds: list[str]

    def append(self, name: str, kind: str) -> None:
        self.names.append(name)
        self.kinds.append(kind)


class Cluster:
    def __init__(self, topology: Topology, ranks: int, env: simpy.Environment, *, source: str | None = None):
        if ranks > len(topology.ranks):
            raise UserInputError(
                f"{ranks} GPUs asked but topology {topology.name!r} has {len(topology.ranks)}",
                source=source, field="gpus",
            )
        self.topology = topology
        self.ranks = ranks
        self.rank_nodes = topology.ranks[:ranks]
        # resources: the topology's directed links, then each rank's compute and loader
        # and the hosts' core pools, as (name, kind) lists
        names, kinds = list(topology.link_names), list(topology.link_kinds)
        resources = _Resources(names, kinds)
        capacity = topology.capacity_Bps.tolist()
        pools: dict[str, int] = {}
        # Compute resources are in "work units" per second: seconds of work for a GPU (whose
        # copies are done by DMA engines, not by its compute), but bytes for a CPU rank,
        # whose core both computes and moves its messages (gloo over loopback): measuring
        # its core in bytes/s of its loopback link lets computation and communication share
        # it max-min fairly. A compute task of s seconds has s x work_scale units.
        self.work_scale = np.ones(ranks)
        self.compute_resource = np.zeros(ranks, dtype=np.int64)
        self._cpu_route_extra: dict[str, list[int]] = {}
        compute_routes: list[list[int]] = []
        loader_routes: list[list[int]] = []
        for r, node in enumerate(self.rank_nodes):
            spec = topology.nodes[node]
            if spec.kind == "cpu":
                self.work_scale[r] = self._link_rate(node)
            self.compute_resource[r] = len(names)
            resources.append(f"{node}:compute", "compute")
            capacity.append(float(self.work_scale[r]))
            route = [len(names) - 1]
            if spec.kind == "cpu":
                host = spec.host or topology.host_of.get(node)
                if host is not None:
                    route.append(self._pool(host, pools, resources, capacity, self.work_scale[r]))
                self._cpu_route_extra[node] = list(route)
                loader_routes.append(route)  # the rank's own thread assembles its batch
            else:
                # input pipeline: one loader thread per GPU rank on its host's cores
                resources.append(f"{node}:dataloader", "compute")
                capacity.append(1.0)
                loader = [len(names) - 1]
                host = topology.host_of.get(node)
                if host is not None and topology.nodes[host].cores is not None:
                    loader.append(self._pool(host, pools, resources, capacity, 1.0))
                loader_routes.append(loader)
            compute_routes.append(route)
        # A GPU's collective kernels (the SMs NCCL's channels run on) as one resource of
        # capacity 1: a collective's flows weigh 1 / (what its kernels can move per second)
        # on it, so per-channel and per-GPU throughput limits bind like any other resource.
        self.kernel_resource = np.full(ranks, -1, dtype=np.int64)
        for r, node in enumerate(self.rank_nodes):
            if topology.nodes[node].kind == "gpu":
                self.kernel_resource[r] = len(names)
                resources.append(f"{node}:collective kernels", "kernels")
                capacity.append(1.0)
        # A host's DRAM, which GPU-to-GPU bytes staged in host memory write and read back
        self.memory_resource: dict[str, int] = {}
        for name, spec in topology.nodes.items():
            if spec.kind == "host":
                self.memory_resource[name] = len(names)
                resources.append(f"{name}:memory", "memory")
                capacity.append(spec.dram_bandwidth_GBps * 1e9 if spec.dram_bandwidth_GBps else float("inf"))
        # loader work is in the units of its route: the rank's core for CPU ranks, seconds else
        self.loader_scale = np.where([topology.nodes[n].kind == "cpu" for n in self.rank_nodes], self.work_scale, 1.0)
        self.resource_names, self.resource_kinds = names, kinds
        self.network = FlowNetwork(env, np.array(capacity, dtype=float), names)
        self.compute_route = np.array([self.network.add_route(np.array(r), 0.0) for r in compute_routes])
        self.idle_pools = _idle_pools(compute_routes, loader_routes, capacity)
        # Whether every rank's compute is a resource of its own (made above, one per rank) and
        # pools that cannot bind, so that a phase that ran alone on it took its amount at that
        # resource's rate. A GPU's is used by its own phases only; a CPU rank's also by its
        # messages: the run's checks find a phase timed so that met them (simulate() in
        # gansim/training/step.py). Likewise the input pipelines (a GPU rank's loader thread, a
        # CPU rank's own core).
        self.private_compute = all(set(route[1:]) <= self.idle_pools for route in compute_routes)
        self.private_loader = all(set(route[1:]) <= self.idle_pools for route in loader_routes)
        self.loader_route = np.array([self.network.add_route(np.array(r), 0.0) for r in loader_routes])
        self.loader_pool = _shared_loader_pools(compute_routes, loader_routes, self.idle_pools)
        self._node_routes: dict[tuple[str, str], int] = {}
        # node_route's routes made in blocks: sorted keys (src node index x nodes + dst) and ids
        self._block_keys, self._block_ids = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self._participant_index: dict[tuple[str, ...], np.ndarray] = {}
        # per node index: whether a route from or to it is the topology's alone as far as the
        # node goes (not a CPU rank, whose core moves its messages), a GPU, one that can do P2P
        nodes = topology.nodes.values()
        self._plain_node = np.array([n not in self._cpu_route_extra for n in topology.nodes], dtype=bool)
        self._gpu_node = np.array([spec.kind == "gpu" for spec in nodes], dtype=bool)
        self._p2p_node = np.array([spec.p2p for spec in nodes], dtype=bool)
        self._h2d_routes: np.ndarray | None = None
        # per participant tuple: sorted keys (src * participants + dst) and their route ids
        self._pair_routes: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}
        self._weighted_routes: dict[bytes, int] = {}

    def resource(self, index: int) -> Resource:
        return Resource(self.resource_names[index], self.resource_kinds[index])

    def _pool(self, host: str, pools: dict[str, int], resources: "_Resources", capacity: list[float],
              scale: float) -> int:
        """A host's cores as one resource, in the work units of the ranks using it."""
        if host not in pools:
            cores = self.topology.nodes[host].cores
            pools[host] = len(resources.names)
            resources.append(f"{host}:cores", "cores")
            capacity.append(float(cores) * scale if cores is not None else float("inf"))
        return pools[host]

    def _link_rate(self, node: str) -> float:
        """Bytes/s a CPU rank's core moves: it can send and receive at its link's rate at
        once (that is what the fitted beta of a 2-rank ring measures), so twice the slowest
        link out of it."""
        rates = self.topology.capacity_Bps[self.topology.links_from(node)]
        return 2.0 * float(rates.min()) if rates.size else 1.0

    def node_route(self, src: str, dst: str) -> int:
        key = (src, dst)
        found = self._node_routes.get(key)
        if found is None and self._block_keys.size:  # made in a block (_new_pair_routes)?
            position = self.topology.node_index
            made = int(self._block_pair_ids(np.array([position[src]]), np.array([position[dst]]))[0])
            if made >= 0:
                self._node_routes[key] = made
                return made
        if found is None:
            staging = self.staging_host(src, dst)
            if staging is not None:
                # no peer-to-peer: written to the receiver's host memory, read back from it
                first, second = self.topology.route(src, staging), self.topology.route(staging, dst)
                links = np.concatenate([first.links, second.links])
                found = self._node_routes[key] = self.network.add_route(
                    np.concatenate([links, [self.memory_resource[staging]]]), first.latency_s + second.latency_s,
                    np.concatenate([np.ones(links.size), [2.0]]))
                return found
            route = self.topology.route(src, dst)
            # a CPU rank's messages are moved by its own core (and draw on its host's cores)
            extra = self._cpu_route_extra.get(src, []) + self._cpu_route_extra.get(dst, [])
            resources = np.concatenate([route.links, np.array(sorted(set(extra)), dtype=np.int64)])
            found = self._node_routes[key] = self.network.add_route(resources, route.latency_s)
        return found

    def staging_host(self, src: str, dst: str) -> str | None:
        """The host whose memory stages bytes from GPU src to GPU dst when one of them cannot
        do peer-to-peer (`p2p: false`) and no NVLink joins them: the receiver's (as NCCL's SHM
        transport keeps its buffer on the receiver's side); None when they talk directly."""
        nodes = self.topology.nodes
        if nodes[src].kind != "gpu" or nodes[dst].kind != "gpu" or (nodes[src].p2p and nodes[dst].p2p):
            return None
        if self.topology.has_link(src, dst) and self.topology.link_kinds[self.topology.link_index(src, dst)] == "nvlink":
            return None
        return self.topology.host_of.get(dst)

    def weighted_route(self, resources: np.ndarray, weights: np.ndarray) -> int:
        """A route over any resources with a weight on each, no latency (a collective that
        charges its own latency); the same resources and weights give the same route id."""
        key = content_key(np.asarray(resources, dtype=np.int64), np.asarray(weights, dtype=float))
        found = self._weighted_routes.get(key)
        if found is None:
            found = self._weighted_routes[key] = self.network.add_route(resources, 0.0, weights)
        return found

    def pair_routes(self, participants: tuple[str, ...], src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Route ids for transfers between participants (indices into `participants`)."""
        n = len(participants)
        known_keys, known_ids = self._pair_routes.get(participants, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        keys = np.asarray(src, dtype=np.int64) * n + np.asarray(dst, dtype=np.int64)
        where = np.minimum(np.searchsorted(known_keys, keys), max(known_keys.size - 1, 0))
        found = known_keys[where] == keys if known_keys.size else np.zeros(keys.size, dtype=bool)
        if not found.all():
            new = np.unique(keys[~found])  # each distinct pair once, however many transfers use it
            new_ids = self._new_pair_routes(participants, new // n, new % n)
            known_keys = np.concatenate([known_keys, new])
            order = np.argsort(known_keys, kind="stable")
            known_keys, known_ids = known_keys[order], np.concatenate([known_ids, new_ids])[order]
            self._pair_routes[participants] = (known_keys, known_ids)
            where = np.searchsorted(known_keys, keys)
        return known_ids[where]

    def _new_pair_routes(self, participants: tuple[str, ...], a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """node_route(participants[a[i]], participants[b[i]]) for each i. Where that is the
        topology's route alone (no staging host, no CPU rank's core) and the topology finds
        it without a search (Topology.short_route_links), the routes are made in one block;
        the others one by one, after one search of the topology for all of them."""
        topo = self.topology
        nodes = self._participant_nodes(participants)
        na, nb = nodes[a], nodes[b]
        ids = np.full(a.size, -1, dtype=np.int64)
        known = self._node_pair_ids(na, nb)
        plain = (known < 0) & self._plain_node[na] & self._plain_node[nb] & ~(
            self._gpu_node[na] & self._gpu_node[nb] & ~(self._p2p_node[na] & self._p2p_node[nb]))
        ids[known >= 0] = known[known >= 0]
        if plain.any():
            count, links = topo.short_route_links(na[plain], nb[plain])
            found = np.flatnonzero(plain)[count > 0]
            count, links = count[count > 0], links[count > 0]
            if found.size:
                flat = links[np.arange(links.shape[1]) < count[:, None]]  # row by row, each route's links in order
                ids[found] = self.network.add_routes(count, flat, topo.links_latency(count, links))
                self._remember_node_pairs(na[found], nb[found], ids[found])
        rest = np.flatnonzero(ids < 0)
        if rest.size:
            pairs = [(participants[i], participants[j]) for i, j in zip(a[rest].tolist(), b[rest].tolist())]
            topo.routes(pairs)  # in bulk
            ids[rest] = [self.node_route(x, y) for x, y in pairs]
        return ids

    def _participant_nodes(self, participants: tuple[str, ...]) -> np.ndarray:
        found = self._participant_index.get(participants)
        if found is None:
            position = self.topology.node_index
            found = self._participant_index[participants] = np.array([position[p] for p in participants],
                                                                     dtype=np.int64)
        return found

    def _node_pair_ids(self, na: np.ndarray, nb: np.ndarray) -> np.ndarray:
        """The route ids already made in a block between nodes na[i] and nb[i] (indices), or
        by node_route; -1 for the others."""
        ids = self._block_pair_ids(na, nb)
        if self._node_routes:
            names = self._node_names
            for i in np.flatnonzero(ids < 0).tolist():
                ids[i] = self._node_routes.get((names[na[i]], names[nb[i]]), -1)
        return ids

    def _block_pair_ids(self, na: np.ndarray, nb: np.ndarray) -> np.ndarray:
        """The route ids made in a block (_new_pair_routes) between nodes na[i] and nb[i]; -1
        for the others."""
        ids = np.full(na.size, -1, dtype=np.int64)
        if self._block_keys.size:
            keys = na * len(self.topology.nodes) + nb
            where = np.minimum(np.searchsorted(self._block_keys, keys), self._block_keys.size - 1)
            hit = self._block_keys[where] == keys
            ids[hit] = self._block_ids[where[hit]]
        return ids

    @cached_property
    def _node_names(self) -> list[str]:
        """The topology's node names by index (Topology.node_index's order)."""
        return list(self.topology.nodes)

    def _remember_node_pairs(self, na: np.ndarray, nb: np.ndarray, ids: np.ndarray) -> None:
        keys = np.concatenate([self._block_keys, na * len(self.topology.nodes) + nb])
        order = np.argsort(keys, kind="stable")
        self._block_keys, self._block_ids = keys[order], np.concatenate([self._block_ids, ids])[order]

    def h2d_route(self, rank: int) -> int:
        node = self.rank_nodes[rank]
        host = self.topology.host_of.get(node)
        return self.node_route(host, node) if host is not None else -1

    def private_h2d(self) -> bool:
        """Whether every rank has a host-to-device route and no two ranks' routes share a
        resource (a copy can then meet only other traffic, never another rank's copy)."""
        routes = self.h2d_routes()
        if routes.size == 0 or (routes < 0).any():
            return False
        _, res = self.network.route_pairs(routes)
        return bool(np.unique(res).size == res.size)

    def h2d_routes(self) -> np.ndarray:
        """Every rank's host-to-device route (-1 where a rank has no host)."""
        if self._h2d_routes is None:
            host_of = self.topology.host_of
            self.topology.routes([(host_of[n], n) for n in self.rank_nodes if n in host_of])  # in bulk
            self._h2d_routes = np.array([self.h2d_route(r) for r in range(self.ranks)], dtype=np.int64)
        return self._h2d_routes

    def device_tflops(self) -> float | None:
        values = [self.topology.nodes[n].tflops for n in self.rank_nodes]
        return None if any(v is None for v in values) else float(min(values))  # type: ignore[type-var]


def _idle_pools(compute_routes: list[list[int]], loader_routes: list[list[int]], capacity: list[float]) -> set[int]:
    """Host core pools their work can never fill: those whose cores are not counted (unlimited:
    `cores` not given), and those only GPU ranks' input pipelines use, each held to one core by
    its own resource of capacity 1 (its first), where there are no more of them than the pool
    has cores, so every one runs at one core whatever the others do."""
    unlimited = {res for route in (*compute_routes, *loader_routes) for res in route[1:]
                 if capacity[res] == float("inf")}
    busy = {res for route in compute_routes for res in route}
    loaders: dict[int, int] = {}
    for route in loader_routes:
        if capacity[route[0]] != 1.0:
            return unlimited
        for res in route[1:]:
            loaders[res] = loaders.get(res, 0) + 1
    return unlimited | {res for res, count in loaders.items() if res not in busy and count <= capacity[res]}


def _shared_loader_pools(compute_routes: list[list[int]], loader_routes: list[list[int]],
                         idle_pools: set[int]) -> np.ndarray | None:
    """Per rank, the host core pool its input pipeline shares with other ranks' and with
    nothing else (gansim/network/pools.py times such pipelines without events); None unless
    every rank's pipeline is its own loader thread on such a pool, and some pool can fill."""
    busy = {res for route in compute_routes for res in route}
    pools = []
    for route in loader_routes:
        if len(route) != 2 or route[0] in busy or route[1] in busy:
            return None
        pools.append(route[1])
    if set(pools) <= idle_pools:
        return None
    return np.array(pools, dtype=np.int64)
