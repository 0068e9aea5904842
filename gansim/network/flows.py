"""Flow-level network: transfers (and compute work, which is the same thing on a
resource measured in seconds of work per second) share every resource on their route
max-min fairly, by progressive filling.

Rates are recomputed only when a flow starts or ends, and all flows that start (or end)
at the same instant are handled as one batch with numpy: a ring step of 1024 transfers is
one event, not 1024. A SimPy timeout cannot be cancelled, so each rate change bumps a
generation counter and a timer that fires for an older generation does nothing."""

from __future__ import annotations

import math
from typing import Callable, Iterable

import numpy as np
import simpy

from gansim.core.arrays import ragged, unique_inverse

# Flows whose finishing times agree to this relative precision end in the same event;
# floating-point noise must not split a symmetric step into a thousand events.
SAME_TIME_RTOL = 1e-9
# Progressive filling freezes every resource whose share is within this of the round's
# level, so that shares equal but for rounding give their flows one rate.
LEVEL_RTOL = 1e-12
# An event's rates are worked out again for the flows joined, through shared resources, to
# those it starts or ends (FlowNetwork._group_rates), while these cross at most this many
# resources (counted once per flow), and while it starts or ends at most _EVENT_INDEXED_MAX
# flows crossing at most _EVENT_INDEXED_MAX_PAIRS resources (its flows are then indexed one
# resource at a time; a larger batch, a ring step of every rank or an NCCL channel over
# thousands of links, is solved as a whole).
_GROUP_MAX_PAIRS = 2048
_EVENT_INDEXED_MAX = 64
_EVENT_INDEXED_MAX_PAIRS = 1024
# with at most this many flows active, a multiset of routes met before in another order (a
# small run's steps) is looked up before any group is solved: one argsort of a few routes
_SORTED_LOOKUP_MAX_FLOWS = 64
# the index of resources' flows, dropped by a large batch, is made again once this many
# events in a row were small, where the active flows cross at most this many resources
_REINDEX_AFTER_EVENTS = 8
_REINDEX_MAX_PAIRS = 16384


def distinct(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (np.unique without its hashing path, which is slow on the
    small arrays of one event)."""
    if values.size <= 1:
        return values
    ordered = np.sort(values)
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def max_min_rates(pair_flow: np.ndarray, pair_res: np.ndarray, flows: int, capacity: np.ndarray,
                  pair_weight: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rates by progressive filling.

    pair_flow/pair_res list, for every flow, each resource on its route; pair_weight (default
    1) is what one unit of the flow's rate uses of that resource (a protocol that sends two
    bytes per byte of data weighs 2 on every link it crosses). Repeatedly find the resource
    whose remaining capacity split among the weights of its unfrozen flows is smallest, give
    that rate to all of its unfrozen flows, freeze them, and go on."""
    return max_min_levels(pair_flow, pair_res, flows, capacity, pair_weight)[0]


def max_min_levels(pair_flow: np.ndarray, pair_res: np.ndarray, flows: int, capacity: np.ndarray,
                   pair_weight: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """max_min_rates, and whether a round froze a resource whose share was above the round's
    level (within the freezing tolerance, LEVEL_RTOL): where none did, every flow's rate is
    the level its own group of flows joined by shared resources gets alone (group_levels)."""
    if pair_flow.size == 0:  # (no flow crosses a resource of limited capacity)
        return np.full(flows, np.inf), False
    rates = np.zeros(flows)
    # None where every weight is 1 (counts are then whole numbers of flows)
    weight_of = pair_weight if pair_weight is not None and not bool((pair_weight == 1.0).all()) else None
    if capacity.size <= 2 * pair_res.size + 4096:
        # resources numbered as the network numbers them: arrays of all of them cost less
        # than finding the few used (an event's problem is small, and so is the network);
        # not where every round would then go over many more resources than the problem has
        res_of, remaining = pair_res, capacity.astype(float)
        users = np.bincount(res_of, minlength=capacity.size)
    else:
        used, res_of = unique_inverse(pair_res)
        remaining = capacity[used].astype(float)
        users = np.bincount(res_of, minlength=used.size)
    if not bool((users > 1).any()):
        # what a resource alone gives its flow: its capacity over the flow's weight on it
        alone = capacity[pair_res] / weight_of if weight_of is not None else capacity[pair_res]
        return _unshared_levels(pair_flow, alone, flows)
    size = remaining.size
    counts = users if weight_of is None else np.bincount(res_of, weights=weight_of, minlength=size)
    # a flow with an empty route (src == dst) is never constrained
    constrained = np.zeros(flows, dtype=bool)
    constrained[pair_flow] = True
    rates[~constrained] = np.inf
    # the pairs of the flows not frozen yet, kept in their order (so each resource's weights
    # are summed in the same order every round)
    flow_of = pair_flow
    share = np.empty(size)
    newly = np.zeros(flows, dtype=bool)
    merged = False
    while True:
        share.fill(np.inf)
        np.divide(remaining, counts, out=share, where=counts > 0)
        level = share.min()
        tight = share <= level * (1 + LEVEL_RTOL)
        merged = merged or bool((share[tight] != level).any())
        newly[flow_of[tight[res_of]]] = True
        rates[newly] = level
        newly_pairs = newly[flow_of]
        freed = np.bincount(res_of[newly_pairs], weights=None if weight_of is None else weight_of[newly_pairs],
                            minlength=size)
        remaining -= level * freed
        np.maximum(remaining, 0.0, out=remaining)
        left = ~newly_pairs
        flow_of, res_of = flow_of[left], res_of[left]
        if not flow_of.size:
            return rates, merged
        if weight_of is not None:
            weight_of = weight_of[left]
        newly[:] = False
        counts = np.bincount(res_of, weights=weight_of, minlength=size)


def _unshared_levels(pair_flow: np.ndarray, pair_capacity: np.ndarray, flows: int) -> tuple[np.ndarray, bool]:
    """max_min_levels when no resource carries two flows: the same levels, frozen with the
    same tolerance, from each flow's slowest resource alone (`pair_capacity`: what each
    resource gives, its capacity over the flow's weight on it)."""
    slowest = np.full(flows, np.inf)  # a flow with an empty route is never constrained
    np.minimum.at(slowest, pair_flow, pair_capacity)
    rates = np.empty(flows)
    left = np.ones(flows, dtype=bool)
    merged = False
    while left.any():
        level = slowest[left].min()
        hit = left & (slowest <= level * (1 + LEVEL_RTOL))
        merged = merged or bool((slowest[hit] != level).any())
        rates[hit] = level
        left &= ~hit
    return rates, merged


def group_levels(routes: list[tuple[tuple[int, float], ...]], capacity: np.ndarray) -> tuple[list[float], bool]:
    """max_min_levels of a few flows, each a route of (resource, weight) pairs, in the order
    max_min_levels takes them, worked out one number at a time with the same arithmetic:
    each resource's weights summed in the flows' order, its share its remaining capacity
    over them, the least share the round's level, every resource within LEVEL_RTOL of it
    frozen, its flows' weights times the level taken off what the resources have left; and,
    as there, whether a round froze a share above its level. (For a group of ten flows,
    numpy's calls cost more than their sums.)"""
    remaining = {r: float(capacity[r]) for route in routes for r, _ in route}
    levels = [np.inf] * len(routes)  # (a flow with an empty route is never constrained)
    left = [i for i, route in enumerate(routes) if route]
    merged = False
    while left:
        counts: dict[int, float] = {}
        for i in left:
            for r, w in routes[i]:
                counts[r] = counts.get(r, 0.0) + w
        shares = {r: remaining[r] / c for r, c in counts.items()}
        level = min(shares.values())
        bound = level * (1 + LEVEL_RTOL)
        tight = {r for r, share in shares.items() if share <= bound}
        merged = merged or any(shares[r] != level for r in tight)
        newly = [i for i in left if any(r in tight for r, _ in routes[i])]
        freed: dict[int, float] = {}
        for i in newly:
            levels[i] = level
            for r, w in routes[i]:
                freed[r] = freed.get(r, 0.0) + w
        for r, f in freed.items():
            after = remaining[r] - level * f
            remaining[r] = after if after > 0.0 else 0.0
        frozen = set(newly)
        left = [i for i in left if i not in frozen]
    return levels, merged


def near_another(rates: np.ndarray, levels: Iterable[float]) -> bool:
    """Whether one of `rates` is within LEVEL_RTOL of one of `levels` without being equal to
    it (the whole network's filling would freeze the two together); 0, a flow's rate before
    it is first set, and inf, a flow nothing constrains, are never near. One comparison of
    every rate with each of an event's few levels: `predict` at 1,024 ranks takes the time
    it took with an index of the levels kept from event to event (which each solve of the
    whole network had to make again), with no index to keep."""
    wanted = [level for level in levels if 0.0 < level < math.inf]
    if not wanted:
        return False
    level = np.array(wanted)[:, None]
    other = rates[None, :]
    within = np.where(other > level, other <= level * (1 + LEVEL_RTOL), level <= other * (1 + LEVEL_RTOL))
    return bool((within & (other != level) & (other > 0.0) & (other < math.inf)).any())


class FlowNetwork:
    """Resources with capacities, routes over them, and flows of work along routes.

    `on_complete(tags, now)` is called once per batch of flows that end together."""

    def __init__(self, env: simpy.Environment, capacity: np.ndarray, resource_names: list[str]):
        self.env = env
        self.capacity = np.asarray(capacity, dtype=float)
        self.resource_names = resource_names
        self.on_complete: Callable[[np.ndarray, float], None] = lambda tags, now: None
        # routes, as a growing CSR table: blocks of routes added since it was last made
        # (per block: each route's count of resources, the resources, their weights, latencies)
        self._new_routes: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._single_routes: list[tuple[np.ndarray, np.ndarray | None, float]] = []  # added one by one since
        self._route_count = 0
        self._route_ptr = np.zeros(1, dtype=np.int64)
        self._route_flat = np.zeros(0, dtype=np.int64)
        self._route_wflat = np.zeros(0)
        self._weighted_routes = False
        self._route_lat = np.zeros(0)
        self._bind_ptr, self._bind_flat, self._bind_wflat = self._route_ptr, self._route_flat, None
        self._bind_len = np.diff(self._bind_ptr)  # per route, how many of its resources bind
        # active flows
        self._tags = np.zeros(0, dtype=np.int64)
        self._routes = np.zeros(0, dtype=np.int64)
        self._remaining = np.zeros(0)
        self._rates = np.zeros(0)
        self._last = 0.0
        self._generation = 0
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._in_event = False  # inside our own event, flush() leaves rescheduling to it
        # rates of whole multisets of routes, and whether their solve froze levels together
        self._rate_cache: dict[bytes, tuple[np.ndarray, bool]] = {}
        self._ending = np.zeros(0, dtype=bool)
        self.rate_computations = 0
        self.group_computations = 0
        # Each active flow's number (increasing in the order flows join, so that the active
        # ones' stay sorted) and, while kept, which active flows use each resource, each
        # flow's route and (resource, weight) pairs, the resources whose flows changed and
        # the flows that joined since rates were last set (FlowNetwork._group_rates)
        self._ids = np.zeros(0, dtype=np.int64)
        self._next_id = 0
        self._users: dict[int, set[int]] | None = {}
        self._pairs_of: dict[int, tuple[int, tuple[tuple[int, float], ...]]] = {}
        self._touched: set[int] = set()
        self._joined: list[int] = []
        self._route_binding: dict[int, tuple[tuple[int, float], ...]] = {}
        self._group_cache: dict[tuple[int, ...], tuple[list[float], bool]] = {}  # per routes in order
        self._small_events = 0
        # whether every active flow's rate is the level of its own group (max_min_levels
        # froze no levels together when it last solved the whole network)
        self._own_levels = True

    # -- routes
    def add_route(self, resources: np.ndarray, latency_s: float, weights: np.ndarray | None = None) -> int:
        """A route over `resources`; `weights` (default 1 each) is what one unit of a flow's
        rate uses of each of them."""
        links = np.asarray(resources, dtype=np.int64)
        weights = self._checked_weights(links, weights)
        # kept as it is until the table is next made (a machine adds one per rank and resource)
        self._single_routes.append((links, weights, float(latency_s)))
        self._route_count += 1
        return self._route_count - 1

    def _checked_weights(self, resources: np.ndarray, weights: np.ndarray | None) -> np.ndarray | None:
        """`weights` as floats, one > 0 per resource (None: all 1); the network's rates then
        take routes' weights into account."""
        if weights is None:
            return None
        weights = np.asarray(weights, dtype=float)
        if weights.shape != resources.shape or not bool((weights > 0).all()):
            raise ValueError("route weights must be > 0, one per resource")
        self._weighted_routes = True
        return weights

    def _block_of_single_routes(self) -> None:
        """The routes added one by one since the last block, as a block of their own."""
        singles, self._single_routes = self._single_routes, []
        if not singles:
            return
        lengths = np.array([links.size for links, _, _ in singles], dtype=np.int64)
        weights = np.ones(int(lengths.sum()))
        at = np.cumsum(lengths) - lengths
        for k, (_, w, _) in enumerate(singles):
            if w is not None:
                weights[at[k]:at[k] + w.size] = w
        self._new_routes.append((lengths, np.concatenate([links for links, _, _ in singles]), weights,
                                 np.array([latency for _, _, latency in singles], dtype=float)))

    def add_routes(self, lengths: np.ndarray, resources: np.ndarray, latency_s: np.ndarray,
                   weights: np.ndarray | None = None) -> np.ndarray:
        """Routes laid end to end: route i crosses the next lengths[i] of `resources` (with
        their `weights`, default 1) and waits latency_s[i]. Returns their ids, in order."""
        lengths = np.asarray(lengths, dtype=np.int64)
        resources = np.asarray(resources, dtype=np.int64)
        weights = self._checked_weights(resources, weights)
        self._block_of_single_routes()  # (ids in the order routes were added)
        ids = np.arange(self._route_count, self._route_count + lengths.size, dtype=np.int64)
        self._new_routes.append((lengths, resources, np.ones(resources.size) if weights is None else weights,
                                 np.asarray(latency_s, dtype=float)))
        self._route_count += lengths.size
        return ids

    @property
    def route_count(self) -> int:
        return self._route_count

    def _sync_routes(self) -> None:
        self._block_of_single_routes()
        if not self._new_routes:
            return
        blocks, self._new_routes = self._new_routes, []
        lengths = np.concatenate([b[0] for b in blocks])
        flat = np.concatenate([b[1] for b in blocks])
        wflat = np.concatenate([b[2] for b in blocks])
        self._route_ptr = np.concatenate([self._route_ptr, self._route_ptr[-1] + np.cumsum(lengths)])
        self._route_flat = np.concatenate([self._route_flat, flat])
        self._route_wflat = np.concatenate([self._route_wflat, wflat])
        self._route_lat = np.concatenate([self._route_lat, *(b[3] for b in blocks)])
        # the same without the resources of unlimited capacity, which never bind (the same
        # arrays where there are none)
        finite = np.isfinite(self.capacity[self._route_flat])
        if finite.all():
            self._bind_ptr, self._bind_flat = self._route_ptr, self._route_flat
            self._bind_wflat = self._route_wflat if self._weighted_routes else None
        else:
            every = np.diff(self._route_ptr)
            kept = np.bincount(np.repeat(np.arange(every.size), every)[finite], minlength=every.size)
            self._bind_ptr = np.concatenate([[0], np.cumsum(kept)])
            self._bind_flat = self._route_flat[finite]
            self._bind_wflat = self._route_wflat[finite] if self._weighted_routes else None
        self._bind_len = np.diff(self._bind_ptr)

    def route_pairs(self, routes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flow index, resource) for every resource on each given route: flow i of
        `routes` crosses every resource paired with i."""
        self._sync_routes()
        starts = self._route_ptr[routes]
        at, pair_flow = ragged(starts, self._route_ptr[routes + 1] - starts)
        return pair_flow, self._route_flat[at]

    def binding_pairs(self, routes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """route_pairs(routes) and their weights (None: all 1) without the resources of
        unlimited capacity (a host's cores when not counted): a flow's share of such a
        resource is unlimited, so they take no part in the max-min rates or in contention."""
        self._sync_routes()
        starts = self._bind_ptr[routes]
        at, pair_flow = ragged(starts, self._bind_len[routes])
        return pair_flow, self._bind_flat[at], None if self._bind_wflat is None else self._bind_wflat[at]

    def route_pairs_on(self, routes: np.ndarray, wanted: np.ndarray,
                       rows_per_batch: int = 1 << 20) -> tuple[np.ndarray, np.ndarray]:
        """route_pairs(routes) without the pairs whose resource is not `wanted` (a mask over
        resources), worked out a batch of routes at a time: a collective's flow may cross
        thousands of resources, and all of a run's flows together tens of millions. Flows on
        the same route (a collective's channels, step after step) share its pairs, found once."""
        self._sync_routes()
        routes = np.asarray(routes, dtype=np.int64)
        found, inverse = unique_inverse(routes)
        if found.size < routes.size:
            of_route, resources = self.route_pairs_on(found, wanted, rows_per_batch)
            counts = np.bincount(of_route, minlength=found.size)
            at, of_flow = ragged((np.cumsum(counts) - counts)[inverse], counts[inverse])
            return of_flow, resources[at]
        lengths = self._route_ptr[routes + 1] - self._route_ptr[routes]
        ends = np.cumsum(lengths)
        flow_parts, res_parts = [], []
        first = 0
        while first < routes.size:
            # as many routes as fit in the batch's rows (at least one)
            last = max(int(np.searchsorted(ends, (ends[first] - lengths[first]) + rows_per_batch, side="right")),
                       first + 1)
            flow, res = self.route_pairs(routes[first:last])
            keep = wanted[res]
            flow_parts.append(flow[keep] + first)
            res_parts.append(res[keep])
            first = last
        if not flow_parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(flow_parts), np.concatenate(res_parts)

    def route_pair_weights(self, routes: np.ndarray) -> np.ndarray | None:
        """The weights of `route_pairs(routes)`, in the same order (None: all 1)."""
        self._sync_routes()
        if not self._weighted_routes:
            return None
        starts = self._route_ptr[routes]
        lengths = self._route_ptr[routes + 1] - starts
        offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return self._route_wflat[np.repeat(starts, lengths) + offsets]

    def route_latency(self, routes: np.ndarray) -> np.ndarray:
        self._sync_routes()
        return self._route_lat[routes]

    def alone_rate(self, routes: np.ndarray) -> np.ndarray:
        """What a flow alone on each route moves per second: its resources' least capacity
        over the route's weight on it (inf for an empty route)."""
        routes = np.asarray(routes, dtype=np.int64)
        found, inverse = unique_inverse(routes)
        if found.size < routes.size:  # each route once (a rank's compute under every step's phases)
            return self.alone_rate(found)[inverse]
        flow, res = self.route_pairs(routes)
        weight = self.route_pair_weights(routes)
        rate = np.full(routes.size, np.inf)
        np.minimum.at(rate, flow, self.capacity[res] if weight is None else self.capacity[res] / weight)
        return rate

    def alone_seconds(self, routes: np.ndarray, amounts: np.ndarray) -> np.ndarray:
        """How long a flow of each amount takes alone on its route: the route's latency, then
        the amount at the route's alone rate."""
        return self.route_latency(routes) + amounts / self.alone_rate(routes)

    # -- flows
    def start(self, tags: np.ndarray, routes: np.ndarray, amounts: np.ndarray) -> None:
        """Start flows now: each first waits its route's latency, then moves its amount.
        Flows with no latency join at the next `flush()`, so that everything started at
        one instant costs one rate computation."""
        if tags.size == 0:
            return
        self._sync_routes()
        latency = self._route_lat[routes]
        first = latency[0]
        uniform = bool((latency == first).all())
        for lat in ((first,) if uniform else distinct(latency)):
            if uniform:
                batch = (tags, routes, np.asarray(amounts, dtype=float))
            else:
                sel = latency == lat
                batch = (tags[sel], routes[sel], amounts[sel].astype(float))
            if lat <= 0.0:
                self._pending.append(batch)
            else:
                event = self.env.timeout(float(lat))
                event.callbacks.append(lambda _e, b=batch: self._arrive(b))

    def _arrive(self, batch: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self._pending.append(batch)
        self._in_event = True
        self.flush()
        self._in_event = False
        self._reschedule()

    def flush(self) -> None:
        if not self._pending:
            return
        if len(self._pending) == 1:
            tags, routes, amounts = self._pending[0]
        else:
            tags = np.concatenate([b[0] for b in self._pending])
            routes = np.concatenate([b[1] for b in self._pending])
            amounts = np.concatenate([b[2] for b in self._pending])
        self._pending.clear()
        self._advance()
        empty = amounts <= 0.0
        instant = tags[empty]
        if instant.size:
            tags, routes, amounts = tags[~empty], routes[~empty], amounts[~empty]
        ids = np.arange(self._next_id, self._next_id + tags.size, dtype=np.int64)
        self._next_id += tags.size
        self._index_joined(ids, routes)
        self._ids = np.concatenate([self._ids, ids])
        self._tags = np.concatenate([self._tags, tags])
        self._routes = np.concatenate([self._routes, routes])
        self._remaining = np.concatenate([self._remaining, amounts])
        self._rates = np.concatenate([self._rates, np.zeros(amounts.size)])
        if not self._in_event:
            self._reschedule()
        if instant.size:
            self.on_complete(instant, self.env.now)

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last
        if dt > 0 and self._remaining.size:
            self._remaining -= self._rates * dt
            # now - last can exceed the planned interval by a rounding error: never below zero
            np.maximum(self._remaining, 0.0, out=self._remaining)
        self._last = now

    # -- which flows an event can change
    def _binding_of(self, route: int) -> tuple[tuple[int, float], ...]:
        found = self._route_binding.get(route)
        if found is None:
            start, end = int(self._bind_ptr[route]), int(self._bind_ptr[route + 1])
            weights = self._bind_wflat[start:end].tolist() if self._bind_wflat is not None else [1.0] * (end - start)
            found = self._route_binding[route] = tuple(zip(self._bind_flat[start:end].tolist(), weights))
        return found

    def _pairs_in(self, routes: np.ndarray) -> int:
        """How many resources of limited capacity the flows on `routes` cross in all."""
        return int(self._bind_len[routes].sum())

    def _small_event(self, routes: np.ndarray) -> bool:
        """Whether an event that starts or ends flows on `routes` keeps the index (dropped
        otherwise)."""
        if routes.size > _EVENT_INDEXED_MAX or self._pairs_in(routes) > _EVENT_INDEXED_MAX_PAIRS:
            self._small_events = 0
            self._users = None
            self._pairs_of, self._touched, self._joined = {}, set(), []
            return False
        self._small_events += 1
        return self._users is not None

    def _index_joined(self, ids: np.ndarray, routes: np.ndarray) -> None:
        self._sync_routes()
        if not self._small_event(routes):
            return
        users, touched = self._users, self._touched
        for flow, route in zip(ids.tolist(), routes.tolist()):
            pairs = self._binding_of(route)
            self._pairs_of[flow] = (route, pairs)
            self._joined.append(flow)
            for r, _ in pairs:
                users.setdefault(r, set()).add(flow)
                touched.add(r)

    def _index_left(self, ids: np.ndarray, routes: np.ndarray) -> None:
        if not self._small_event(routes):
            return
        users, touched = self._users, self._touched
        for flow in ids.tolist():
            for r, _ in self._pairs_of.pop(flow)[1]:
                flows = users[r]
                flows.discard(flow)
                if not flows:
                    del users[r]
                touched.add(r)

    def _reindex(self) -> None:
        self._users, self._pairs_of = {}, {}
        for flow, route in zip(self._ids.tolist(), self._routes.tolist()):
            pairs = self._binding_of(route)
            self._pairs_of[flow] = (route, pairs)
            for r, _ in pairs:
                self._users.setdefault(r, set()).add(flow)

    # -- rates
    def _compute_rates(self) -> np.ndarray:
        # Rates depend only on the multiset of active routes; symmetric steps, and a small
        # run's steps, repeat the same multiset thousands of times: looked up first, in the
        # order the flows joined (cheap)
        quick_key = self._routes.tobytes()
        found = self._rate_cache.get(quick_key)
        if found is None and self._ids.size <= _SORTED_LOOKUP_MAX_FLOWS:
            found = self._whole_rates(quick_key, solve=False)
        if found is None and self._users is not None and self._own_levels:
            rates = self._group_rates()
            if rates is not None:
                self.group_computations += 1
                found = (rates, False)
                self._remember(quick_key, found)
        if found is None:
            found = self._whole_rates(quick_key)
        rates, merged = found
        self._own_levels = not merged
        if self._users is None and self._small_events >= _REINDEX_AFTER_EVENTS and \
                self._pairs_in(self._routes) <= _REINDEX_MAX_PAIRS:
            self._reindex()
        self._touched, self._joined = set(), []
        return rates

    def _group_rates(self) -> np.ndarray | None:
        """The rates of every flow after an event that changed a few: the flows joined by
        shared resources to those it started or ended (their groups) solved alone
        (group_levels), the others' rates as they were. That is what the whole network's
        max_min_levels gives wherever no level comes within LEVEL_RTOL of another without
        being equal (it would freeze them together; an event's groups, solved as one, would
        too): checked, and None where one does, or where the groups cross more than
        _GROUP_MAX_PAIRS resources."""
        users, pairs_of = self._users, self._pairs_of
        group = set(self._joined)
        seen: set[int] = set()
        stack = list(self._touched)
        pairs = len(stack)
        while stack:
            r = stack.pop()
            if r in seen:
                continue
            seen.add(r)
            for flow in users.get(r, ()):
                if flow not in group:
                    group.add(flow)
                    route = pairs_of[flow][1]
                    pairs += len(route)
                    if pairs > _GROUP_MAX_PAIRS:
                        return None
                    stack.extend(r2 for r2, _ in route if r2 not in seen)
        rates = self._rates.copy()
        if group:
            # in max_min_levels' order: by route, then as they joined
            order = sorted(group, key=lambda flow: (pairs_of[flow][0], flow))
            routes = tuple(pairs_of[flow][0] for flow in order)
            found = self._group_cache.get(routes)
            if found is None:
                if len(self._group_cache) > 8192:
                    self._group_cache.clear()
                found = self._group_cache[routes] = group_levels([pairs_of[flow][1] for flow in order],
                                                                 self.capacity)
            levels, merged = found
            if merged:
                return None
            rates[np.searchsorted(self._ids, np.array(order, dtype=np.int64))] = levels
            # (the other flows' levels come no nearer to one another than before the event)
            if near_another(rates, set(levels)):
                return None
        return rates

    def _whole_rates(self, quick_key: bytes, solve: bool = True) -> tuple[np.ndarray, bool] | None:
        """max_min_levels of every active flow (their routes in the order they joined are
        `quick_key`): looked up in the sorted order (one argsort), and only then solved
        (None where not found and not to be solved)."""
        flows = self._routes.size
        order = np.argsort(self._routes, kind="stable")
        sorted_routes = self._routes[order]
        key = b"s" + sorted_routes.tobytes()
        found = self._rate_cache.get(key)
        if found is None:
            if not solve:
                return None
            pair_flow, pair_res, pair_weight = self.binding_pairs(sorted_routes)
            found = max_min_levels(pair_flow, pair_res, flows, self.capacity, pair_weight)
            self.rate_computations += 1
            self._remember(key, found)
        rates = np.empty(flows)
        rates[order] = found[0]
        self._remember(quick_key, (rates, found[1]))
        return rates, found[1]

    def _remember(self, key: bytes, found: tuple[np.ndarray, bool]) -> None:
        if len(self._rate_cache) > 8192:
            self._rate_cache.clear()
        self._rate_cache[key] = found

    def _reschedule(self) -> None:
        self._generation += 1
        if self._remaining.size == 0:
            self._rates = np.zeros(0)
            return
        self._rates = self._compute_rates()  # always > 0 (inf where nothing constrains a flow)
        finish = self._remaining / self._rates
        soonest = float(finish.min())
        # decided now, while remaining/rates are exact: which flows this timer ends
        self._ending = finish <= soonest * (1 + SAME_TIME_RTOL)
        generation = self._generation
        self.env.timeout(max(soonest, 0.0)).callbacks.append(lambda _e: self._on_timer(generation))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return  # a stale timer: rates changed after it was set
        done = self._ending
        self._advance()
        finished = self._tags[done]
        keep = ~done
        self._index_left(self._ids[done], self._routes[done])
        self._ids = self._ids[keep]
        self._tags, self._routes = self._tags[keep], self._routes[keep]
        self._remaining, self._rates = self._remaining[keep], self._rates[keep]
        self._in_event = True
        self.on_complete(finished, self.env.now)  # may start flows: they join before rates are set
        self._in_event = False
        self._reschedule()

    def carried_per_resource(self, flows: Iterable[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """Total work each resource carried (bytes on links, seconds on compute), given
        every flow's route and amount (times the route's weight on each resource), as
        (routes, amounts) pieces: added one after another, as one bincount over them laid
        end to end would."""
        self._sync_routes()
        per_route = np.zeros(self._route_count)
        for routes, amounts in flows:
            np.add.at(per_route, routes, amounts)
        lengths = np.diff(self._route_ptr)
        per_entry = np.repeat(per_route, lengths)
        if self._weighted_routes:
            per_entry = per_entry * self._route_wflat
        return np.bincount(self._route_flat, weights=per_entry, minlength=self.capacity.size)
