"""Collectives on the simulated machine: how long an all-reduce takes under each cost
model. `flow` plays the algorithm's schedule transfer by transfer on the flow network;
`alpha_beta` and `paper` charge the closed forms of gansim/collectives/closed_forms.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

from gansim.collectives.closed_forms import (
    binomial_broadcast_time,
    closed_form_time,
    paper_allreduce_time,
)
from gansim.collectives import nccl
from gansim.collectives import chunked_ring
from gansim.collectives.chunked_ring import ChunkedRingPlay, chunked_ring_plan
from gansim.collectives.schedules import Schedule, broadcast, build_schedule
from gansim.collectives.uncontended import PlayPlan, TransferBudget, UncontendedPlay
from gansim.core.config import TrainingOptions
from gansim.core.errors import UserInputError
from gansim.core.registry import Registry
from gansim.network.cluster import Cluster
from gansim.network.engine import COMMUNICATION, DELAY, FLOW, SYNC, TaskGraph
from gansim.topology.graph import Topology


@dataclass(frozen=True)
class LinkParameters:
    """alpha (s) and beta (s/byte) seen by a collective: the slowest hop of the rank ring."""

    alpha_s: float
    beta_s_per_byte: float


@dataclass
class CollectiveSpan:
    label: str
    nbytes: float
    entry: np.ndarray  # per rank: the task after which the rank joins (-1: from the start)
    exit: np.ndarray  # per rank: the task whose end is the rank leaving the collective
    transfers: tuple[int, int] = (0, 0)  # task id range of its transfers (flow model)
    play: UncontendedPlay | None = None  # when it was played without the flow network


@dataclass
class Communicator:
    cluster: Cluster
    graph: TaskGraph
    algorithm: str
    cost_model: str
    chunks: int = 1
    gamma_s_per_byte: float = 0.0
    element_bytes: int = 4
    # the `nccl` algorithm: NCCL_ALGO / NCCL_PROTO, or None for NCCL's own choice
    nccl_algo: str | None = None
    nccl_proto: str | None = None
    nccl_version: str | None = None
    nccl_single_process: bool = False  # TrainingOptions.nccl_single_process
    # (NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS): TrainingOptions.nccl_min_channels, nccl_max_channels
    nccl_channel_limits: tuple[int | None, int | None] = (None, None)
    # all-reduces of at least this many transfers that nothing contends with are played
    # by gansim/collectives/uncontended.py (None: never), keeping the run's first
    # `keep_transfers` transfers, in all, for its details
    uncontended_min_transfers: int | None = None
    keep_transfers: int = 0
    # per collective (its index in `spans`): (how many of its first steps to take out of its
    # play, per rank how many of those are flows), where other work met its start
    # (training/step.py). A transfer of step k between ranks i and j is a flow where k <
    # max(flows[i], flows[j]), else timed as if alone on its route (checked after the run).
    head_steps: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)
    # NCCL's view of the machine, shared by the communicators of one run played again on a
    # cluster built afresh from the same topology (its plans keep their routes per cluster)
    nccl_states: dict[tuple, nccl.NcclState] = field(default_factory=dict, repr=False)
    spans: list[CollectiveSpan] = field(default_factory=list)
    _play: UncontendedPlay | None = None  # the play the last flow all-reduce used, if any
    _groups: tuple[tuple[int, ...], ...] | None = None
    _budget: TransferBudget | None = None
    # per (schedule, bytes): the schedule (kept alive, so its id stays its own) and its
    # plan, or None where it is contended
    _plans: dict[tuple[int, float], tuple[Schedule, PlayPlan | None]] = field(default_factory=dict)
    # the shapes of plans that move between the same pairs, shared (PlayPlan.build)
    _structures: dict = field(default_factory=dict)
    # per (schedule, steps in its head): the schedule (kept alive) and its two parts
    _splits: dict[tuple[int, int], tuple[Schedule, Schedule, Schedule]] = field(default_factory=dict)
    _nccl: nccl.NcclState | None = field(default=None, repr=False)

    @classmethod
    def for_options(cls, cluster: Cluster, graph: TaskGraph, algorithm: str, cost_model: str,
                    options: TrainingOptions, **rest) -> "Communicator":
        """A run's communicator: its options' chunks and NCCL settings (NCCL_ALGO, NCCL_PROTO,
        the release, one process for all GPUs, the channel limits) in one place, the other
        fields as given."""
        return cls(cluster, graph, algorithm, cost_model, chunks=options.chunks, nccl_algo=options.nccl_algo,
                   nccl_proto=options.nccl_proto, nccl_version=options.nccl_version,
                   nccl_single_process=options.nccl_single_process,
                   nccl_channel_limits=(options.nccl_min_channels, options.nccl_max_channels), **rest)

    def play_plan(self, schedule: Schedule, nbytes: float) -> PlayPlan | None:
        key = (id(schedule), nbytes)
        if key not in self._plans:
            self._plans[key] = (schedule, PlayPlan.build(self.cluster, schedule, _participants(self.cluster, schedule),
                                                         nbytes, self._structures))
        return self._plans[key][1]

    def split(self, schedule: Schedule, head: int) -> tuple[Schedule, Schedule]:
        """schedule.split(head), made once per schedule (plans are kept per schedule)."""
        key = (id(schedule), head)
        if key not in self._splits:
            self._splits[key] = (schedule, *schedule.split(head))
        return self._splits[key][1:]

    def nccl(self) -> nccl.NcclState:
        """NCCL's view of this run's machine and its tuning (built on first use)."""
        if self._nccl is None:
            key = (self.nccl_version, self.nccl_single_process, self.nccl_channel_limits)
            if key not in self.nccl_states:
                self.nccl_states[key] = nccl.nccl_state(self.cluster, self.nccl_version, self.nccl_single_process,
                                                        self.nccl_channel_limits)
            self._nccl = self.nccl_states[key]
        return self._nccl

    def allreduce(self, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        """Add an all-reduce of `nbytes` per rank that each rank joins after its `entry`
        task; return, per rank, the task at whose end that rank has the sum."""
        model = COST_MODELS.get(self.cost_model, field="cost_model")
        before = self.graph.size
        self._play = None
        if self.algorithm == nccl.NCCL:
            exits = model.nccl(self, entry, "all_reduce", nbytes, label)
        else:
            exits = model.all_reduce(self, entry, nbytes, label)
        self.spans.append(CollectiveSpan(label, nbytes, entry, exits, (before, self.graph.size), self._play))
        return exits

    def broadcast(self, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        """A broadcast of `nbytes` from rank 0: NCCL's for the `nccl` algorithm, else a
        binomial tree, each as the cost model charges it."""
        model = COST_MODELS.get(self.cost_model, field="cost_model")
        before = self.graph.size
        if self.algorithm == nccl.NCCL:
            exits = model.nccl(self, entry, "broadcast", nbytes, label)
        else:
            exits = model.broadcast(self, entry, nbytes, label)
        self.spans.append(CollectiveSpan(label, nbytes, entry, exits, (before, self.graph.size)))
        return exits

    def collective(self, op: str, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        """Any of nccl-tests' collectives (all_reduce, all_gather, reduce_scatter, broadcast);
        the textbook algorithms have the all-reduce and the broadcast only."""
        if op == "all_reduce":
            return self.allreduce(entry, nbytes, label)
        if op == "broadcast":
            return self.broadcast(entry, nbytes, label)
        if self.algorithm != nccl.NCCL:
            raise UserInputError(f"{op} is modelled for the nccl algorithm only, not {self.algorithm!r}",
                                 field="algorithm")
        before = self.graph.size
        exits = COST_MODELS.get(self.cost_model, field="cost_model").nccl(self, entry, op, nbytes, label)
        self.spans.append(CollectiveSpan(label, nbytes, entry, exits, (before, self.graph.size)))
        return exits

    def groups(self) -> tuple[tuple[int, ...], ...]:
        if self._groups is None:  # (the same for every collective of the run)
            topology = self.cluster.topology
            groups = machine_groups(topology, self.cluster.ranks, self.algorithm, source=topology.source,
                                    field="algorithms")
            self._groups = tuple(tuple(g) for g in groups)
        return self._groups

    def link_parameters(self) -> LinkParameters:
        nodes = self.cluster.rank_nodes
        hops = self.cluster.topology.routes([(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))])
        return LinkParameters(max(h.latency_s for h in hops), max(1.0 / h.bottleneck_Bps for h in hops))


class CostModel:
    """How a collective is charged on the simulated machine. Each method adds the
    collective's tasks to the communicator's graph after each rank's `entry` task and
    returns, per rank, the task at whose end that rank leaves it. A new cost model is one
    subclass registered in COST_MODELS (its name is then allowed in a scenario's
    `cost_model`)."""

    def all_reduce(self, comm: Communicator, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        raise NotImplementedError

    def broadcast(self, comm: Communicator, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        raise NotImplementedError

    def nccl(self, comm: Communicator, entry: np.ndarray, op: str, nbytes: float, label: str) -> np.ndarray:
        """Any of NCCL's collectives (the `nccl` algorithm)."""
        raise NotImplementedError


COST_MODELS: Registry[CostModel] = Registry("cost model")


def register_cost_model(name: str) -> Callable[[type[CostModel]], type[CostModel]]:
    def decorate(cls: type[CostModel]) -> type[CostModel]:
        COST_MODELS.register(name)(cls())
        return cls

    return decorate


# algorithms that split the ranks by machine into groups of one size (schedules.hierarchical_ring)
EQUAL_GROUP_ALGORITHMS = ("hierarchical_ring",)


def machine_groups(topology: Topology, ranks: int, algorithm: str, *, source: str | None,
                   field: str) -> list[list[int]]:
    """The first `ranks` ranks grouped by machine (Topology.rank_groups); for an algorithm
    that needs groups of one size, a one-line error where they differ (12 GPUs on machines
    of 8 sit 8 and 4), saying which GPU counts the topology allows."""
    groups = topology.rank_groups(ranks)
    sizes = sorted({len(g) for g in groups}, reverse=True)
    if algorithm not in EQUAL_GROUP_ALGORITHMS or len(sizes) == 1:
        return groups
    per_machine = {len(g) for g in topology.rank_groups(len(topology.ranks))}
    if len(per_machine) == 1:
        (m,) = per_machine
        allowed = f"at most {m} GPUs or a multiple of {m} (the GPUs of one machine), or another algorithm"
    else:
        allowed = "a GPU count that gives every machine as many GPUs, or another algorithm"
    raise UserInputError(
        f"{algorithm} runs a ring inside each machine over as many GPUs on every machine, but {ranks} GPUs of "
        f"topology {topology.name!r} sit {' and '.join(map(str, sizes))} to a machine; allowed: {allowed}",
        source=source, field=field)


@lru_cache(maxsize=64)
def _schedule(algorithm: str, ranks: int, count: int, groups: tuple[tuple[int, ...], ...] | None) -> Schedule:
    return build_schedule(algorithm, ranks, count, [list(g) for g in groups] if groups else None)


def _closed_form_delay(comm: Communicator, entry: np.ndarray, seconds: float, label: str) -> np.ndarray:
    """A closed form is a synchronising collective: it starts when the last rank joins."""
    graph = comm.graph
    ranks = np.arange(comm.cluster.ranks)
    join = graph.add(DELAY, -1, 0.0, -1, SYNC, f"{label}: join", count=1)
    graph.depend(entry, np.repeat(join, entry.size))
    body = graph.add(DELAY, -1, seconds, -1, COMMUNICATION, label, count=1)
    graph.depend(join, body)
    return np.repeat(body, ranks.size)


@register_cost_model("alpha_beta")
class AlphaBetaModel(CostModel):
    """The closed forms (gansim/collectives/closed_forms.py) with alpha and beta of the
    slowest hop of the rank ring; NCCL's collectives at NCCL's own tuning-model time."""

    def all_reduce(self, comm: Communicator, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        p = comm.cluster.ranks
        link = comm.link_parameters()
        groups = [list(g) for g in comm.groups()]
        seconds = closed_form_time(comm.algorithm, p, nbytes, link.alpha_s, link.beta_s_per_byte,
                                   comm.gamma_s_per_byte, groups)
        return _closed_form_delay(comm, entry, float(seconds), label)

    def broadcast(self, comm: Communicator, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        link = comm.link_parameters()
        seconds = binomial_broadcast_time(comm.cluster.ranks, nbytes, link.alpha_s, link.beta_s_per_byte)
        return _closed_form_delay(comm, entry, seconds, label)

    def nccl(self, comm: Communicator, entry: np.ndarray, op: str, nbytes: float, label: str) -> np.ndarray:
        seconds = nccl.model_seconds(comm.nccl(), op, nbytes, comm.nccl_algo, comm.nccl_proto)
        return _closed_form_delay(comm, entry, seconds, label)


@register_cost_model("paper")
class PaperModel(AlphaBetaModel):
    """Seed 002 eqs. (5)-(7) with B the bandwidth per GPU (the slowest ring hop), whatever the
    algorithm: the paper's model has no latency term and no algorithm. The paper has no
    broadcast and no NCCL, so those are charged as `alpha_beta` charges them."""

    def all_reduce(self, comm: Communicator, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        p = comm.cluster.ranks
        bandwidth = 1.0 / comm.link_parameters().beta_s_per_byte
        return _closed_form_delay(comm, entry, paper_allreduce_time(p, nbytes, bandwidth), label)


# Steps are laid out in blocks of at most this many (step, participant) cells, so that
# a 1024-rank ring is built with a few dozen numpy calls per block, in bounded memory.
_BLOCK_CELLS = 1 << 21


@register_cost_model("flow")
class FlowModel(CostModel):
    """Every transfer of the collective's schedule played on the flow network (see
    play_schedule), or, where nothing contends with it, solved without it (uncontended)."""

    def all_reduce(self, comm: Communicator, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        count = max(1, int(np.ceil(nbytes / comm.element_bytes)))
        groups = comm.groups() if comm.algorithm in EQUAL_GROUP_ALGORITHMS else None
        schedule = _schedule(comm.algorithm, comm.cluster.ranks, count, groups)
        if (comm.uncontended_min_transfers is not None and comm.chunks == 1
                and schedule.transfers() >= comm.uncontended_min_transfers):
            head, flow_steps = comm.head_steps.get(len(comm.spans), (0, None))
            first_steps, played = comm.split(schedule, head) if head else (None, schedule)
            plan = comm.play_plan(played, nbytes)
            if plan is not None:
                if first_steps is not None:  # beside the work that met them
                    entry = play_schedule(comm, entry, first_steps, nbytes, label, flow_steps=flow_steps)
                if comm._budget is None:
                    comm._budget = TransferBudget(comm.keep_transfers)
                play = comm._play = UncontendedPlay(plan, comm.gamma_s_per_byte, entry, comm._budget,
                                                    first_step=head)
                return play_uncontended(comm, entry, play, label)
        if (comm.uncontended_min_transfers is not None and comm.chunks > 1 and comm.algorithm == "ring"
                and schedule.transfers() * comm.chunks >= max(comm.uncontended_min_transfers,
                                                               chunked_ring.CHUNKED_MIN_TRANSFERS)):
            # a chunked ring whose edges share nothing: each edge played as a processor-sharing
            # server of the chunks on it (gansim/collectives/chunked_ring.py)
            plan = comm.play_plan(schedule, nbytes)
            if plan is not None and chunked_ring_plan(plan):
                play = comm._play = ChunkedRingPlay(plan, comm.gamma_s_per_byte, entry, comm.chunks)
                return play_uncontended(comm, entry, play, label)
        return play_schedule(comm, entry, schedule, nbytes, label)

    def broadcast(self, comm: Communicator, entry: np.ndarray, nbytes: float, label: str) -> np.ndarray:
        count = max(1, int(np.ceil(nbytes / comm.element_bytes)))
        return play_schedule(comm, entry, broadcast(comm.cluster.ranks, count), nbytes, label)

    def nccl(self, comm: Communicator, entry: np.ndarray, op: str, nbytes: float, label: str) -> np.ndarray:
        """NCCL's channels as flows (gansim/collectives/nccl.py)."""
        return nccl.play(comm.cluster, comm.graph, comm.nccl(), entry, op, nbytes, label, comm.nccl_algo,
                         comm.nccl_proto)


def play_uncontended(comm: Communicator, entry: np.ndarray, play: UncontendedPlay, label: str) -> np.ndarray:
    """The collective as one task per rank, whose end the play computes once every rank
    has joined (every rank of an all-reduce leaves after the last one joined)."""
    graph = comm.graph
    p = comm.cluster.ranks
    joined = graph.add(DELAY, -1, 0.0, -1, SYNC, f"{label}: all joined", count=1)
    graph.depend(entry, np.repeat(joined, entry.size))
    exits = graph.add_solved(np.arange(p), COMMUNICATION, f"{label}: uncontended", play.solve)
    graph.depend(np.repeat(joined, p), exits)
    return exits


def _participants(cluster: Cluster, schedule: Schedule) -> tuple[str, ...]:
    return tuple(cluster.rank_nodes) + tuple(_extra_node(cluster, name) for name in schedule.extra_participants)


def play_schedule(comm: Communicator, entry: np.ndarray, schedule: Schedule, nbytes: float,
                  label: str, flow_steps: np.ndarray | None = None) -> np.ndarray:
    """Play a schedule: a transfer of step k starts when its sender and its receiver have
    both finished their earlier steps (per-rank rendezvous); after receiving a reduce step
    a rank spends gamma per byte reduced. With chunks, the buffer is cut into pieces that
    run the schedule one after another on every pair, so they pipeline. With `flow_steps`
    (per rank), a transfer of step k between ranks i and j is a flow where k <
    max(flow_steps[i], flow_steps[j]), else a delay timed as if alone on its route."""
    cluster, graph = comm.cluster, comm.graph
    p = cluster.ranks
    count = schedule.count
    participants = _participants(cluster, schedule)
    n_part = len(participants)
    is_rank = np.arange(n_part) < p
    bytes_per_element = nbytes / count / comm.chunks
    first_entry = np.concatenate([entry, np.full(n_part - p, -1, dtype=np.int64)])
    steps = schedule.steps
    block = max(1, _BLOCK_CELLS // max(n_part, 1))
    chunk_exits = []
    previous_chunk: np.ndarray | None = None  # transfer ids of the previous chunk, in schedule order
    for _chunk in range(comm.chunks):
        last = first_entry.copy()
        this_chunk = []
        for b0 in range(0, len(steps), block):
            block_steps = steps[b0:b0 + block]
            sizes = np.array([len(st) for st in block_steps])
            step_of = np.repeat(np.arange(len(block_steps)), sizes)
            src = np.concatenate([st.src for st in block_steps])
            dst = np.concatenate([st.dst for st in block_steps])
            amount = np.concatenate([st.size for st in block_steps]) * bytes_per_element
            routes = cluster.pair_routes(participants, src, dst)
            owner = np.where(src < p, src, dst)
            if flow_steps is None:
                transfers = graph.add(FLOW, routes, amount, owner, COMMUNICATION, f"{label}: transfer",
                                      detail=step_of + b0)
            else:
                transfers = _transfers_timed_apart(graph, routes, amount, owner, step_of + b0,
                                                   _flow_steps_of(flow_steps, src, dst, p), f"{label}: transfer")
            # who takes part in which step: one "step done" task per (step, participant)
            takes_part = np.zeros((len(block_steps), n_part), dtype=bool)
            takes_part[step_of, src] = True
            takes_part[step_of, dst] = True
            cell = np.flatnonzero(takes_part.ravel())
            cell_step, cell_part = np.divmod(cell, n_part)
            reduce_time = np.zeros(cell.size)
            if comm.gamma_s_per_byte > 0:
                reducing = np.repeat(np.array([st.reduce for st in block_steps]), sizes)
                received = np.zeros(takes_part.size)
                np.add.at(received, (step_of * n_part + dst)[reducing], amount[reducing])
                reduce_time = received[cell] * comm.gamma_s_per_byte
            done = graph.add(DELAY, -1, reduce_time, np.where(is_rank[cell_part], cell_part, -1), COMMUNICATION,
                             f"{label}: step done", detail=cell_step + b0)
            done_at = np.full(takes_part.shape, -1, dtype=np.int64)
            done_at.ravel()[cell] = done
            # the step-done task each participant last finished before step k (or its entry)
            upto = np.maximum.accumulate(done_at, axis=0)
            before = np.vstack([last[None, :], upto[:-1]])
            before = np.where(before >= 0, before, last[None, :])
            graph.depend(before[step_of, src], transfers)
            graph.depend(before[step_of, dst], transfers)
            graph.depend(transfers, done_at[step_of, src])
            graph.depend(transfers, done_at[step_of, dst])
            last = np.where(upto[-1] >= 0, upto[-1], last)
            this_chunk.append(transfers)
        chunk_transfers = np.concatenate(this_chunk) if this_chunk else np.zeros(0, dtype=np.int64)
        if previous_chunk is not None:
            graph.depend(previous_chunk, chunk_transfers)  # one chunk after another on each pair
        previous_chunk = chunk_transfers
        chunk_exits.append(last[:p])
    if comm.chunks == 1:
        exits = chunk_exits[0]
    else:
        exits = graph.add(DELAY, -1, 0.0, np.arange(p), SYNC, f"{label}: chunks joined", count=p)
        for last in chunk_exits:
            graph.depend(last, exits)
    # a rank that took no part in any step (p == 1) leaves as it joined
    return np.where(exits >= 0, exits, entry)


def _flow_steps_of(flow_steps: np.ndarray, src: np.ndarray, dst: np.ndarray, p: int) -> np.ndarray:
    """Per transfer, the steps of its pair that go on the flow network: its ranks' most (a
    participant that is no rank, such as a parameter server, puts all of them there)."""
    big = np.iinfo(np.int64).max
    return np.maximum(np.where(src < p, flow_steps[np.minimum(src, p - 1)], big),
                      np.where(dst < p, flow_steps[np.minimum(dst, p - 1)], big))


def _transfers_timed_apart(graph: TaskGraph, routes: np.ndarray, amount: np.ndarray, owner: np.ndarray,
                           step: np.ndarray, flow_steps: np.ndarray, label: str) -> np.ndarray:
    """The transfers as flows where their step is below `flow_steps`, else as delays with
    their route (timed as if alone on it); ids in the order given."""
    flows = step < flow_steps
    ids = np.empty(step.size, dtype=np.int64)
    ids[flows] = graph.add(FLOW, routes[flows], amount[flows], owner[flows], COMMUNICATION, label,
                           detail=step[flows])
    apart = ~flows
    if apart.any():
        ids[apart] = graph.add(DELAY, routes[apart], amount[apart], owner[apart], COMMUNICATION, label,
                               detail=step[apart])
    return ids


def _extra_node(cluster: Cluster, name: str) -> str:
    """Where a non-rank participant (the parameter server) lives: rank 0's host."""
    host = cluster.topology.host_of.get(cluster.rank_nodes[0])
    if host is None:
        raise UserInputError(
            f"algorithm needs a {name} on a host, and topology {cluster.topology.name!r} has no host node "
            "reachable from the GPUs", source=cluster.topology.source, field="algorithms",
        )
    return host
