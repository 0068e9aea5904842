"""Fault handling of real runs: what each rank is doing (status, step, heartbeat) for the
parent's watchdog, injected faults for the tests (``RANK:PHASE[:ACTION[:STEP]]``), and the
one message that names the rank, task and phase where a run failed (no torch import)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Optional

from gansim.calibration.profile.phases import PHASES
from gansim.calibration.ranks.run_config import CalibrationError, ScriptMarkupError

STATUS = (
    "spawning",
    "starting",
    "init_process_group",
    "build_model",
    "barrier",
    *PHASES,
    "step_barrier",
    "script",
    "sweep",
    "reduce",
    "gather",
    "finished",
)
STATUS_INDEX = {name: i for i, name in enumerate(STATUS)}


@dataclass(frozen=True)
class FaultSpec:
    rank: int
    phase: str
    action: str = "exit"
    step: int = 0

    @staticmethod
    def parse(text: str) -> "FaultSpec":
        parts = text.split(":")
        if len(parts) < 2:
            raise ValueError(f"fault spec {text!r}: expected RANK:PHASE[:ACTION[:STEP]]")
        rank = int(parts[0])
        phase = parts[1]
        if phase not in STATUS_INDEX:
            raise ValueError(f"fault spec {text!r}: unknown phase {phase!r}")
        action = parts[2] if len(parts) > 2 and parts[2] else "exit"
        if action not in ("exit", "raise", "hang"):
            raise ValueError(f"fault spec {text!r}: action must be exit, raise or hang")
        step = int(parts[3]) if len(parts) > 3 and parts[3] else 0
        return FaultSpec(rank, phase, action, step)


class InjectedFault(RuntimeError):
    """Raised by an injected ``raise`` fault."""


class Reporter:
    """What a rank is doing, for the parent's watchdog and for error messages.

    In a spawned rank the state lives in shared arrays the parent reads; under torchrun
    it is only kept locally (for the message of an exception).
    """

    def __init__(self, rank: int, arrays: Optional[dict] = None, fault: Optional[FaultSpec] = None):
        self.rank = rank
        self.arrays = arrays
        self.fault = fault if fault is not None and fault.rank == rank else None
        self.task = ""
        self.current = "starting"
        self.step = -1
        self.set("starting")

    def set_task(self, index: int, name: str) -> None:
        self.task = name
        self.step = -1
        if self.arrays is not None:
            self.arrays["task"][self.rank] = index
            self.arrays["step"][self.rank] = -1

    def set_step(self, step: int) -> None:
        self.step = step
        if self.arrays is not None:
            self.arrays["step"][self.rank] = step

    def set(self, phase: str) -> None:
        self.current = phase
        if self.arrays is not None:
            self.arrays["phase"][self.rank] = STATUS_INDEX[phase]
            self.arrays["beat"][self.rank] = time.monotonic()
        f = self.fault
        if f is not None and f.phase == phase and self.step >= f.step:
            if f.action == "exit":
                os._exit(3)
            if f.action == "raise":
                raise InjectedFault(f"injected fault in rank {self.rank} at phase {phase}")
            if f.action == "hang":
                while True:
                    time.sleep(3600)

    def beat(self) -> None:
        if self.arrays is not None:
            self.arrays["beat"][self.rank] = time.monotonic()



@dataclass
class RankState:
    exitcode: Optional[int] = None
    error: Optional[dict] = None
    done: bool = False


def format_where(task: str, phase: str, step: int, world_size: int) -> str:
    bits = [f"phase {phase}"]
    extra = []
    if task:
        extra.append(f"task {task}")
    extra.append(f"world size {world_size}")
    if step >= 0:
        extra.append(f"step {step}")
    return f"{bits[0]} ({', '.join(extra)})"


def compose_failure(states, procs, world_size, status, now, arrays, hang_s=None) -> CalibrationError:
    crashed, raised, silent, comm = [], [], [], []
    for r, s in states.items():  # by rank: the ranks spawned here
        task, phase, step = status(r)
        if s.error is not None:
            e = s.error
            where = format_where(e["task"], e["phase"], e["step"], world_size)
            if e.get("user_line"):  # the last line of a calibrated script's own traceback
                where += f" at {e['user_line']}"
            # the script's own exit (an argument parser's) printed its reason above
            why = (f"the script exited with status {e['message']} (its own message is above)"
                   if e["type"] == "SystemExit" else f"{e['type']}: {e['message']}")
            text = f"rank {r} failed in {where}: {why}"
            (comm if e["comm"] else raised).append((r, e["phase"], e["task"], text))
        elif s.exitcode not in (None, 0) or (procs[r].exitcode not in (None, 0)):
            code = s.exitcode if s.exitcode is not None else procs[r].exitcode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            where = format_where(task, phase, step, world_size)
            crashed.append((r, phase, task, f"rank {r} {how} during {where}"))
        elif procs[r].is_alive() and not s.done:
            idle = now - arrays["beat"][r]
            where = format_where(task, phase, step, world_size)
            silent.append((r, phase, task,
                           f"rank {r} made no progress for {idle:.0f} s in {where}"))
    # root causes first: a dead rank, a rank's own error, a rank stuck without error;
    # the peers' communication errors are usually consequences
    ordered = crashed + raised + silent + comm
    if not ordered:
        return CalibrationError(f"world size {world_size}: ranks ended without results")
    head = ordered[0]
    prefix = f"no rank made progress for {hang_s:.0f} s: " if hang_s is not None else ""
    markup = states[head[0]].error is not None and states[head[0]].error["type"] == ScriptMarkupError.__name__
    if markup:  # the script's markers are wrong: say that one thing, as bad input
        return CalibrationError(f"rank {head[0]}: {states[head[0]].error['message']}", rank=head[0],
                                phase=head[1], task=head[2], user_input=True)
    message = prefix + "; ".join(item[3] for item in ordered)
    return CalibrationError(message, rank=head[0], phase=head[1], task=head[2])
