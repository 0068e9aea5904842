"""One collective after another on a machine: what nccl-tests measures, simulated. The
sizes run back to back in one simulation (each starts when the previous one ended), so the
machine, its routes and NCCL's tuning are built once for the whole sweep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from gansim.collectives import uncontended
from gansim.collectives.communicator import Communicator
from gansim.collectives.nccl import NCCL, plan
from gansim.collectives.nccl_explain import explain as explain_nccl
from gansim.core.config import TrainingOptions
from gansim.network.cluster import Cluster
from gansim.network.engine import SYNC, DELAY, TaskGraph, execute
from gansim.topology.graph import Topology


@dataclass(frozen=True)
class CollectiveTime:
    nbytes: int
    seconds: float
    algorithm: str  # for `nccl`, what NCCL chose (ring, tree, nvls, nvls_tree, pat), else the algorithm
    protocol: str  # LL, LL128, Simple for `nccl`; "" otherwise
    channels: int
    explain: Any = None  # with explain=True, for `nccl`: a gansim.collectives.nccl_explain.Explanation


def collective_times(topology: Topology, gpus: int, op: str, sizes: list[int], algorithm: str = NCCL,
                     cost_model: str = "flow", options: TrainingOptions | None = None,
                     source: str | None = None, explain: bool = False) -> list[CollectiveTime]:
    """Simulate `op` of each size in turn on the first `gpus` ranks of `topology` (`explain`:
    for `nccl`, each with what bounds it)."""
    options = options or TrainingOptions()
    env = simpy.Environment()
    cluster = Cluster(topology, gpus, env, source=source)
    graph = TaskGraph()
    # Each size starts once every rank has ended the one before, and nothing else runs: a
    # collective whose own transfers never contend (PlayPlan's rules) is played, not simulated
    comm = Communicator.for_options(cluster, graph, algorithm, cost_model, options,
                                    gamma_s_per_byte=options.gamma_s_per_byte,
                                    uncontended_min_transfers=uncontended.UNCONTENDED_MIN_TRANSFERS)
    after = np.full(gpus, -1, dtype=np.int64)
    marks = []
    for nbytes in sizes:
        start = graph.add(DELAY, -1, 0.0, -1, SYNC, f"{op} {nbytes} B: start", count=1)
        graph.depend(after, np.repeat(start, after.size))
        if gpus > 1:
            after = comm.collective(op, np.repeat(start, gpus), float(nbytes), f"{op} {nbytes} B")
        else:
            after = np.repeat(start, gpus)
        end = graph.add(DELAY, -1, 0.0, -1, SYNC, f"{op} {nbytes} B: end", count=1)
        graph.depend(after, np.repeat(end, after.size))
        after = np.repeat(end, gpus)
        marks.append((int(start[0]), int(end[0])))
    execution = execute(graph.freeze(), env, cluster.network)
    out = []
    for nbytes, (start, end) in zip(sizes, marks):
        seconds = float(execution.end[end] - execution.end[start])
        algo, proto, channels, why = algorithm, "", 0, None
        if algorithm == NCCL and gpus > 1:
            chosen = plan(cluster, comm.nccl(), op, float(nbytes), options.nccl_algo, options.nccl_proto).choice
            algo, proto, channels = chosen.algorithm, chosen.protocol, chosen.channels
            if explain:
                why = explain_nccl(cluster, comm.nccl(), op, float(nbytes), seconds, options.nccl_algo,
                                   options.nccl_proto)
        out.append(CollectiveTime(int(nbytes), seconds, algo, proto, channels, why))
    return out
