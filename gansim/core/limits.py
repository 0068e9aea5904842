"""How much work one command may take on: every limit in one place, checked before any
work starts, each raisable by an environment variable.

A limit guards the machine, not the model: past it a run would take hours or exhaust
memory (a sweep whose axes multiply to millions of points, a topology of millions of GPUs,
a YAML alias bomb). Over a limit is one line naming the limit, its value and the variable
that raises it (`GANSIM_MAX_<NAME>`); docs/limits.md lists them."""

from __future__ import annotations

import os
from dataclasses import dataclass

from gansim.core.errors import UserInputError


@dataclass(frozen=True)
class Limit:
    name: str
    default: int
    what: str  # the counted thing, plural ("runs in one scenario")

    @property
    def variable(self) -> str:
        return f"GANSIM_MAX_{self.name.upper()}"

    @property
    def value(self) -> int:
        """The limit in force: the environment variable when set, else the default."""
        text = os.environ.get(self.variable)
        if text is None or not text.strip():
            return self.default
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:
            value = 0
        if value < 1:
            raise UserInputError(f"expected a whole number >= 1, got {text!r}", field=self.variable)
        return value

    def problem(self, count: int) -> str | None:
        """What is wrong with `count` (None when it is within the limit)."""
        limit = self.value
        if count <= limit:
            return None
        return f"{count:,} {self.what} exceed the limit of {limit:,} ({self.variable}; set it higher to allow more)"

    def check(self, count: int, *, source: str | None = None, field: str | None = None) -> None:
        """UserInputError when `count` exceeds the limit."""
        problem = self.problem(count)
        if problem is not None:
            raise UserInputError(problem, source=source, field=field)

    def validator(self, count: int) -> int:
        """The same check as a pydantic validator (`AfterValidator(LIMIT.validator)`): a config
        field that counts something the limit bounds."""
        problem = self.problem(count)
        if problem is not None:
            raise ValueError(problem)
        return count


RUNS = Limit("runs", 10_000, "runs in one scenario (sweep combinations x GPU counts x algorithms, "
                             "1-GPU baselines included)")
# 100,000 GPUs: what docs/performance.md shows running in under a minute (an nccl
# all-reduce over 12,500 machines); their topology has about 2.25 nodes per GPU (host,
# NVSwitch, one NIC per GPU, the network switch)
RANKS = Limit("ranks", 100_000, "rank devices (GPUs or CPU ranks)")
TOPOLOGY_NODES = Limit("topology_nodes", 500_000, "nodes in a topology")
TOPOLOGY_LINKS = Limit("topology_links", 1_000_000, "links in a topology")
STEPS = Limit("steps", 100_000, "simulated steps in one run (training steps x discriminator steps per generator step)")
D_STEPS = Limit("d_steps", 1_000, "discriminator steps per generator step")
SEGMENTS = Limit("segments", 100_000, "whole-run segments (checkpoint intervals; epochs of a dynamic allocation)")
# about 220 bytes of memory each while a run is built and played: 20 M tasks are about 4.5 GB
TASKS = Limit("tasks", 20_000_000, "tasks in one run's task graph (each transfer of an all-reduce on the flow "
                                    "network is one: a p-rank ring has 2p(p-1), halving-doubling 2p log2(p); "
                                    "fewer GPUs, steps, chunks or buckets make fewer)")
WORKERS = Limit("workers", 64, "worker processes")
YAML_BYTES = Limit("yaml_bytes", 8 * 1024 * 1024, "bytes in one YAML file")
YAML_DEPTH = Limit("yaml_depth", 64, "levels of nesting in one YAML file")
YAML_NODES = Limit("yaml_nodes", 1_000_000, "values in one YAML file once its aliases are expanded")
# a trace's JSON text once decompressed; read into Python objects it takes several times that
TRACE_BYTES = Limit("trace_bytes", 256 * 1024 * 1024, "bytes in one torch.profiler trace (decompressed)")

ALL = (RUNS, RANKS, TOPOLOGY_NODES, TOPOLOGY_LINKS, STEPS, D_STEPS, SEGMENTS, TASKS, WORKERS, YAML_BYTES, YAML_DEPTH,
       YAML_NODES, TRACE_BYTES)
