"""What one rank of ``gansim calibrate --script`` runs: the user's own training script, its
phases timed through :mod:`gansim.calibration.ranks.instrument`, its communication recorded.

The rank sets the environment ``torchrun`` would (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR/PORT, and TORCHELASTIC_USE_AGENT_STORE, because the parent hosts the rendezvous
store as torchrun's agent does), then runs the script as ``__main__`` with its arguments.
The script initialises its own process group. While it runs:

- ``phase(...)`` markers and ``torch.profiler.record_function`` labels named like the
  calibrator's phases are timed per step (``torch.cuda.synchronize`` around each on GPU);
  ``step()`` closes a step; after ``steps`` steps the run stops (a ``BaseException`` that
  user code does not catch by accident), so the script needs no step-count argument; a
  script that marks nothing is timed from its ``backward()`` calls and optimizer steps
  (:class:`AutoPhases`);
- every DistributedDataParallel gets a communication hook that records each gradient bucket
  it all-reduces (bytes, the phase it was issued in) and then does what DDP does without a
  hook (``allreduce_hook``, documented by PyTorch as equivalent); a hook the user registers
  is wrapped the same way. DDP's buffer broadcasts and explicit ``dist.all_reduce`` calls
  are recorded too;
- in the last warm-up step each phase's FLOPs and bytes are counted
  (:mod:`gansim.calibration.ranks.costs`, as the built-in loop counts them), for the roofline
  that moves a profile to another device.

A phase opened and not closed before the next ``step()``, a phase opened inside another,
or an unknown ``phase()`` label raise :class:`ScriptMarkupError` (a user-input error: exit 2).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import runpy
import sys
import time
from typing import Any, Optional

import torch
import torch.distributed as dist

from gansim.calibration.ranks import instrument
from gansim.calibration.ranks.costs import PhaseCosts, tensor_bytes
from gansim.calibration.ranks.faults import Reporter
from gansim.calibration.profile.phases import STEP, phase_name
from gansim.calibration.ranks.run_config import RankPlace, RunConfig, ScriptMarkupError, ScriptSpec

#: Time of a step outside every marked phase (it is added to data_s, and kept on its own).
UNLABELLED = "unlabelled_s"


class EnoughSteps(BaseException):
    """Raised by ``step()`` once the run has its steps: unwinds the user's script."""


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def graph_storage(roots: Any, limit: int = 200_000) -> set[int]:
    """The data pointers of the tensors the autograd graph behind ``roots`` holds: the leaves
    it accumulates gradients into, and what its functions saved for their gradients (a
    convolution's or matrix product's weight, whether or not the weight wants a gradient).
    At most ``limit`` functions are looked at."""
    roots = roots if isinstance(roots, (tuple, list)) else (roots,)
    stack = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen: set = set()
    held: set[int] = set()
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        values = [getattr(node, "variable", None)]
        for name in dir(node):
            if name.startswith("_saved_"):
                try:
                    values.append(getattr(node, name))
                except RuntimeError:  # freed by an earlier backward (retain_graph=False)
                    continue
        for value in values:
            for tensor in (value if isinstance(value, (tuple, list)) else (value,)):
                if isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided and tensor.data_ptr():
                    held.add(tensor.data_ptr())  # (a sparse or nested tensor has no one pointer)
        stack.extend(fn for fn, _ in node.next_functions)
    return held


class StepRecorder:
    """Times the marked phases of each step of one rank and records its collectives."""

    def __init__(self, steps: int, warmup: int, reporter: Optional[Reporter] = None):
        self.steps = steps
        self.warmup = warmup
        self.reporter = reporter
        self.clock = time.perf_counter
        self.step_start = 0.0
        self.open_name: Optional[str] = None
        self.open_label = ""
        self.open_at = 0.0
        self._start_recording()
        self.batch_size: Optional[int] = None
        self.ddp_batch: Optional[int] = None  # the first tensor a DDP module took: samples per rank
        self.model_batch: Optional[int] = None  # without DDP: the first a module an optimizer holds took
        self.quiet = 0  # >0 while a recorded hook issues its own collective
        self.in_hook: Optional[list[int]] = None  # the bytes of each all_reduce a DDP hook issues
        self.ddp_modules: list[Any] = []
        self.ddp_buckets: dict[str, list[int]] = {}  # what each DDP logged of its own buckets
        self.calls_step = False  # the script calls step() itself
        self.phases_marked = False  # the script labels its phases (AutoPhases stands aside)
        self.auto_phases = 0  # phases AutoPhases found
        self.g_in_step = False  # a g_* phase has opened in the step under way
        self.auto_steps = 0  # steps AutoPhases closed
        self.auto: Optional["AutoPhases"] = None

    # ------------------------------------------------------------------ phases
    def open(self, label: str, strict: bool = False) -> None:
        name = phase_name(label)
        if name is None:
            if strict:
                raise ScriptMarkupError(f"phase({label!r}): unknown phase; allowed: "
                                        f"{', '.join(instrument.PHASE_LABELS)}")
            return  # another record_function label: part of whatever encloses it
        self._marking()
        if not self.phases_marked:
            self.phases_marked = True
            if self.auto_phases:  # found by AutoPhases before the script's first label: dropped
                self._start_recording()
        if not self.calls_step and self._label_step_due(name):
            self.step(auto=True)
        if self.index < 0:
            return  # before the first step(): set-up, not timed
        self.g_in_step = self.g_in_step or name.startswith("g_")
        if self.open_name is not None:
            raise ScriptMarkupError(f"phase {label!r} opened inside phase {self.open_label!r} "
                                    f"(step {self.index}); phases do not nest")
        _sync()
        self.open_name, self.open_label = name, label
        self.occurrence[name] = self.occurrence.get(name, 0) + 1
        if self.reporter is not None:
            self.reporter.set(name)
        if self.index == self.warmup - 1:
            self.counter, self.count_step = self.counter or PhaseCosts(), self.index
            self.counter.start(name)
        self.open_at = self.clock()

    def _label_step_due(self, name: str) -> bool:
        """Where a script that labels its phases but calls no step() begins a step: at its first
        labelled phase, then where a data or d_* phase opens after a g_* phase (a GAN step ends
        with its generator's phases; data may open once per D step)."""
        return self.index < 0 or (self.g_in_step and not name.startswith("g_"))

    def close(self, label: str, failed: bool = False) -> None:
        name = phase_name(label)
        if name is None or self.open_name != name or failed:
            return  # an exception leaves the phase open: the failure names it
        _sync()
        elapsed = self.clock() - self.open_at
        if self.counter is not None:
            self.counter.stop()
        self.current[name] = self.current.get(name, 0.0) + elapsed
        self.open_name = None
        if self.reporter is not None:
            self.reporter.set("script")

    # ------------------------------------------------------------------ steps
    def _start_recording(self) -> None:
        """No step yet, and nothing recorded."""
        if getattr(self, "counter", None) is not None:
            self.counter.stop()  # leave its dispatch mode
        self.index = -1  # the step under way; -1 before the first step()
        self.current: dict[str, float] = {}
        self.occurrence: dict[str, int] = {}
        self.samples: dict[str, list[float]] = {}
        self.collectives: list[dict] = []  # kept steps: {step, op, phase, occurrence, owner, bytes}
        self.costs: dict[str, dict[str, float]] = {}  # per phase occurrence, from the counted step
        self.counter: Optional[PhaseCosts] = None  # while the counted step runs
        self.count_step = -1  # the step whose FLOPs and bytes are counted (a warm-up one)
        self.d_steps: list[int] = []

    @property
    def marked(self) -> bool:
        """The script marks its steps or phases itself."""
        return self.calls_step or self.phases_marked

    def _marking(self) -> None:
        if not self.marked and self.auto_steps:
            # the script marks its steps after all (after optimizer steps of its own set-up):
            # what AutoPhases recorded is dropped, and the marked steps count from the first
            self._start_recording()

    def add_phase(self, name: str, seconds: float) -> None:
        """One occurrence of a phase found by AutoPhases, `seconds` long."""
        self.auto_phases += 1
        self.occurrence[name] = self.occurrence.get(name, 0) + 1
        self.current[name] = self.current.get(name, 0.0) + seconds

    def relabel(self, since: int, names: dict[str, str], until: Optional[int] = None) -> None:
        """The phases of the collectives recorded from `since` to `until` (AutoPhases records
        them before it knows the network), each the current occurrence of its new name."""
        for c in self.collectives[since:until]:
            if c["phase"] in names:
                c["phase"] = names[c["phase"]]
                c["occurrence"] = self.occurrence.get(c["phase"], 0)

    def step(self, batch_size: Optional[int] = None, auto: bool = False, at: Optional[float] = None) -> None:
        """A step starts here (`at`: at that earlier clock reading, where AutoPhases closes it)."""
        if not auto:
            self._marking()
            if not self.calls_step and self.phases_marked:
                self._start_recording()  # the script's own steps replace those its labels gave
            self.calls_step = True
        if self.open_name is not None:
            raise ScriptMarkupError(f"phase {self.open_label!r} was opened in step {self.index} and not "
                                    "closed before the next step() (use `with phase(...):`)")
        _sync()
        now = self.clock() if at is None else at
        if self.index >= 0:
            self._end_step(now)
        if batch_size is not None:
            self.batch_size = int(batch_size)
        self.index += 1
        if self.reporter is not None:
            self.reporter.set_step(self.index)
            self.reporter.set("script")
        if self.index >= self.steps:
            raise EnoughSteps()
        self.current = {}
        self.occurrence = {}
        self.g_in_step = False
        self.step_start = self.clock() if at is None else at
        if not auto and self.auto is not None:
            self.auto.script_step(self.step_start)

    def _end_step(self, now: float) -> None:
        if self.counter is not None and self.index == self.count_step:
            # the counted step's FLOPs and bytes per phase occurrence (d_* per D step)
            self.costs = self.counter.per_occurrence(self.occurrence)
            self.counter = None
        if self.index < self.warmup:
            return
        total = now - self.step_start
        k = max(1, self.occurrence.get("d_forward_s", self.occurrence.get("d_backward_s", 1)))
        self.d_steps.append(k)
        labelled = sum(self.current.values())
        record = {name: (t / k if name.startswith("d_") else t) for name, t in self.current.items()}
        record[UNLABELLED] = max(0.0, total - labelled)
        record["data_s"] = record.get("data_s", 0.0) + record[UNLABELLED]
        record[STEP] = total
        for name, value in record.items():
            self.samples.setdefault(name, []).append(value)

    def collective(self, op: str, nbytes: int, owner: str) -> None:
        # AutoPhases ends a GAN step only when the next one's first D step has stepped: what
        # is issued after a generator step is the next step's (the last, never ended, is not kept)
        index = self.index + (1 if self.auto is not None and self.auto.active and self.auto.pending is not None else 0)
        if self.quiet or index < self.warmup or index >= self.steps:
            return
        name = self.open_name or ""
        self.collectives.append({"step": index, "op": op, "phase": name,
                                 "occurrence": self.occurrence.get(name, 0), "owner": owner,
                                 "bytes": int(nbytes)})

    def payload(self) -> dict:
        kept = len(self.samples.get(STEP, []))
        # every kept step has the same phases (a phase missing in one step counts 0 there)
        samples = {name: values + [0.0] * (kept - len(values)) if len(values) < kept else values
                   for name, values in self.samples.items()}
        batch = next((b for b in (self.batch_size, self.ddp_batch, self.model_batch) if b is not None), None)
        return {"samples": samples, "collectives": self.collectives, "costs": self.costs, "batch_size": batch,
                "d_steps": self.d_steps, "steps_seen": self.index + 1, "ddp_buckets": self.ddp_buckets}


class AutoPhases:
    """The phases of a script that marks none, from its own calls: each optimizer step closes
    one network's step; its backward is the time in ``backward()`` calls since the previous
    optimizer step, its optimizer phase the time from the last of them to the step's end
    (GradScaler's unscale and gradient clipping included), its forward the rest. Optimizers
    are told apart by identity: of two or more, G is the one whose backward's autograd graph
    holds another's parameters (its loss is the discriminator's verdict, so its graph runs
    through the discriminator's layers, which saved their weights, while the discriminator's
    stops at the generator's detached output), the others D (CycleGAN's two discriminators);
    where the graphs do not tell (none or several hold another's), the one that steps last
    before the first to step steps again is G, the others D
    (n D steps a G step: the usual WGAN loop); with one, every
    step is a one-network training step. A training step ends with G's optimizer step. Its
    phases' FLOPs and bytes are counted by the same rule in one warm-up step (_count_from).
    Generator steps in a row (its own regularisation step after its main one) are one GAN
    step's."""

    # what a collective issued in a backward() call is recorded in until the network is known
    # (one issued outside it is recorded in no phase, "")
    BACKWARD = "?_backward_s"

    def __init__(self, rec: StepRecorder, enabled: bool = True):
        self.rec = rec
        self.enabled = enabled
        rec.auto = self
        self.stepped = 0  # optimizer steps seen
        self.optimizers: dict[int, Any] = {}  # every optimizer the script made
        self.held: set[int] = set()  # what the backward graphs since the last optimizer step held
        self.held_by: dict[int, set[int]] = {}  # per optimizer, what its steps' backward graphs held
        self.order: list[int] = []  # the optimizers' steps before G is known
        self.stepping = 0  # optimizer steps under way (one inside another's is that one's)
        self.counted = False  # the counted step's FLOPs and bytes have begun (_count_from)
        self.g: Optional[int] = None
        self.last_end: Optional[float] = None  # the previous optimizer step's end
        self.backward_s = 0.0
        self.backward_end: Optional[float] = None
        self.after_backward = 0  # the first collective issued after the last backward() ended
        self.depth = 0  # backward() inside backward() (a gradient penalty's own) counts once
        self.opt_start = 0.0
        self.since = 0  # the first collective of this network step
        self.batch_size: Optional[int] = None  # the first tensor a DDP module took: samples per rank
        self.pending: Optional[float] = None  # the end of the last generator step, not yet a step's end

    @property
    def active(self) -> bool:
        return self.enabled and not self.rec.phases_marked and self.rec.index < self.rec.steps

    def script_step(self, start: float) -> None:
        """The script began a step of its own (it marks its steps, not its phases): the phases
        found from here on are this step's, and the script's steps, not G's, end steps."""
        self.last_end, self.backward_s, self.backward_end, self.pending = start, 0.0, None, None
        self.since = len(self.rec.collectives)
        if self.active and self.rec.index == self.rec.warmup - 1:
            self._count_from(self.rec.index)

    # The FLOPs and bytes of each phase (for the roofline) are counted in one warm-up step, as
    # for marked phases: under provisional names while the network is not known (what runs
    # between a backward() and the next is forward, what runs after the last is the optimizer
    # step's), given the network's names at its optimizer step. A step AutoPhases closes is
    # known to have ended only once the next one's first D step has stepped, so it counts the
    # step before the last warm-up one, and what it counted of that D step is dropped.
    def _count_from(self, step: int) -> None:
        if not self.counted and self.rec.counter is None:
            self.counted = True
            self.rec.counter, self.rec.count_step = PhaseCosts(), step
            self.rec.counter.start("?_forward_s")

    def _counting(self, name: str) -> None:
        # (while AutoPhases is active, a counter running is its own: marked phases stop it)
        if self.rec.counter is not None:
            self.rec.counter.start(name)

    def made(self, optimizer: Any) -> None:
        self.optimizers[id(optimizer)] = optimizer

    def backward_started(self, tensors: Any = None) -> float:
        self.depth += 1
        if self.depth == 1 and self.active:
            if self.rec.counter is not None:
                self.rec.counter.rename({"?_after_s": "?_forward_s"})  # another forward came between
            self._counting("?_backward_s")
            if self.g is None and len(self.optimizers) >= 2:
                self.held |= graph_storage(tensors)
            _sync()
            if self.rec.open_name is None:
                self.rec.open_name = self.BACKWARD  # what DDP all-reduces meanwhile is this backward's
        return self.rec.clock()

    def backward_ended(self, started: float) -> None:
        self.depth -= 1
        if self.depth == 0 and self.active:
            _sync()
            now = self.rec.clock()
            self.backward_s += now - started
            self.backward_end = now
            self.after_backward = len(self.rec.collectives)
            self._counting("?_after_s")
            if self.rec.open_name == self.BACKWARD:
                self.rec.open_name = None

    def step_started(self, optimizer: Any) -> None:
        self.stepping += 1
        if self.stepping > 1:
            # stepped by another optimizer's step (ZeroRedundancyOptimizer's own Adam on its
            # shard): part of that one's step, and not an optimizer of the script's
            self.optimizers.pop(id(optimizer), None)
            return
        if self.active:
            _sync()
            self._counting("?_optimizer_s")
            self.opt_start = self.rec.clock()

    def step_ended(self, optimizer: Any) -> None:
        self.stepping -= 1
        if not self.active or self.stepping > 0:
            return
        _sync()
        rec, key, end = self.rec, id(optimizer), self.rec.clock()
        self.stepped += 1
        self.held_by.setdefault(key, set()).update(self.held)
        self.held = set()
        net = self._network(key)
        if net == "d" and self.pending is not None and not rec.calls_step:
            # the GAN step ended with the generator step(s) before
            self._close(self.pending)  # raises EnoughSteps once the run has its steps
        if rec.counter is not None:  # (a step closed just now took its counts)
            provisional = ("?_forward_s", "?_backward_s", "?_after_s", "?_optimizer_s")
            rec.counter.rename(dict(zip(provisional, (None,) * 4)) if net is None else {
                "?_forward_s": f"{net}_forward_s", "?_backward_s": f"{net}_backward_s",
                "?_after_s": f"{net}_optimizer_s", "?_optimizer_s": f"{net}_optimizer_s"})
            rec.counter.start("?_forward_s")
        if net is not None and rec.index >= 0 and self.last_end is not None:
            after_backward = self.backward_end if self.backward_end is not None else self.opt_start
            total, optimizer_s = end - self.last_end, end - after_backward
            rec.add_phase(f"{net}_forward_s", max(0.0, total - self.backward_s - optimizer_s))
            rec.add_phase(f"{net}_backward_s", self.backward_s)
            rec.add_phase(f"{net}_optimizer_s", optimizer_s)
            # issued after the last backward (a script's own sum of the gradients): in the time
            # of the optimizer phase, where they are counted
            after = self.after_backward if self.backward_end is not None else len(rec.collectives)
            rec.relabel(self.since, {self.BACKWARD: f"{net}_backward_s", "": f"{net}_forward_s"}, until=after)
            rec.relabel(after, {"": f"{net}_optimizer_s"})
        self.last_end, self.backward_s, self.backward_end = end, 0.0, None
        self.since = len(rec.collectives)
        if net == "g" and not rec.calls_step:
            # a generator step ends the GAN step unless another follows in a row (its own
            # regularisation step): closed when D steps next, or at once with one network
            self.pending = end
            single = len(self.optimizers) == 1
            # counted: the last warm-up step where a G step closes its step at once (one network),
            # else the one before it (its end is known only once the next D step has stepped)
            if rec.index == rec.warmup - (2 if single else 3):
                self._count_from(rec.index + 1)
            if single:
                self._close(end)

    def _close(self, at: float) -> None:
        self.pending = None
        self.rec.auto_steps += 1
        self.rec.step(self.batch_size, auto=True, at=at)

    def _generator_by_graph(self) -> Optional[int]:
        """The one optimizer whose backward graphs held another's parameters: the generator's
        (with two discriminators, as CycleGAN trains them, both are D). None where that does
        not tell (none or several did)."""
        if len(self.held_by) != len(self.optimizers) or not any(self.held_by.values()):
            return None  # no backward() seen (a graph built by torch.autograd.grad alone, say)
        params = {key: {p.data_ptr() for group in opt.param_groups for p in group["params"]}
                  for key, opt in self.optimizers.items()}
        holders = [key for key, held in self.held_by.items()
                   if any(held & params[other] for other in params if other != key)]
        return holders[0] if len(holders) == 1 else None

    def why_not(self) -> str:
        """Why fewer steps were found than the optimizers stepped, for the error line."""
        if self.g is None and len(set(self.order)) == 1 and len(self.optimizers) > 1:
            return (f", only one of them stepping: with {len(self.optimizers)} optimizers made, its steps are taken "
                    "as the discriminator's until another steps")
        return ""

    def _network(self, key: int) -> Optional[str]:
        if self.g is None:
            if len(self.optimizers) == 1:
                self.g = key
            elif self.order and key == self.order[0] and self.order[-1] != key:
                self.g = self._generator_by_graph() or self.order[-1]
                if not self.rec.calls_step:
                    return None  # the first step of a new cycle, before the first step() is recorded
                # (in the script's own steps, this network step is the step's as any other)
            else:
                self.order.append(key)
                if len(self.order) > 10_000:
                    raise ScriptMarkupError("the script's optimizers step in no repeating order gansim can follow: "
                                            "mark its steps and phases (gansim.calibration.step() and phase())")
                return None
        return "g" if key == self.g else "d"


# ---------------------------------------------------------------------------- patches
def leading_batch(inputs: Any) -> Optional[int]:
    """The first dimension of a forward's first tensor of at least one dimension: its samples
    per rank (None where it takes no such tensor)."""
    first = next((x for x in inputs if isinstance(x, torch.Tensor) and x.dim() >= 1), None)
    return int(first.shape[0]) if first is not None else None


def labels_its_phases(path: str) -> bool:
    """Whether a script names a phase in quotes (gansim's phase() or a record_function label):
    then its phases are its own from the first step, and AutoPhases stays out of it even while
    the script steps its optimizers in a set-up of its own before its marked loop. A script
    that marks only its steps (step(batch_size=N)) has its phases found within them."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return False
    return any(f"{q}{label}{q}" in text for label in instrument.PHASE_LABELS for q in ("'", '"'))


@contextlib.contextmanager
def recording(rec: StepRecorder, find_phases: bool = True):
    """Install the markers, the record_function timing and the communication recording for
    the duration of the script (and, with `find_phases`, AutoPhases); everything is restored
    afterwards."""
    from torch.autograd import profiler as autograd_profiler
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    original_rf = autograd_profiler.record_function

    class TimedRecordFunction(original_rf):  # type: ignore[misc, valid-type]
        def __enter__(self):
            rec.open(self.name)  # first: what it raises (enough steps, a nested phase) leaves nothing entered
            return super().__enter__()

        def __exit__(self, exc_type, *exc):
            rec.close(self.name, failed=exc_type is not None)
            return super().__exit__(exc_type, *exc)

    owners: dict[int, str] = {}

    def owner_of(ddp) -> str:
        return owners.setdefault(id(ddp), f"ddp{len(owners)}")

    def ddp_logged_buckets(ddp) -> list[int]:
        """The buckets DDP itself logged (after its rebuild in the first iteration)."""
        data = ddp._get_ddp_logging_data()
        text = str(data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or "")
        return [int(x) for x in text.replace(" ", "").split(",") if x]

    def recorded(hook, ddp):
        def run(state, bucket):
            # what the hook puts on the wire: the all_reduce calls it issues (fp16_compress_hook's
            # half-size bucket, PowerSGD's factors); the bucket itself where it issues none we see
            issued: list[int] = []
            rec.in_hook = issued
            rec.quiet += 1
            try:
                return hook(state, bucket)
            finally:
                rec.quiet -= 1
                rec.in_hook = None
                for nbytes in issued or [tensor_bytes(bucket.buffer())]:
                    rec.collective("allreduce", nbytes, owner_of(ddp))
        return run

    original_init = DDP.__init__
    original_register = DDP.register_comm_hook
    original_sync_buffers = DDP._sync_buffers
    original_all_reduce = dist.all_reduce

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        owner_of(self)
        rec.ddp_modules.append(self)
        self._gansim_hooked = False

        def first_forward(module, inputs):
            if not module._gansim_hooked:  # the user registered none before the first forward
                module._gansim_hooked = True
                original_register(module, module.process_group, recorded(default_hooks.allreduce_hook, module))
        self._gansim_pre_forward = self.register_forward_pre_hook(first_forward)

        def batch_of(module, inputs):  # the batch of a script that gives none: what its DDP modules take
            if rec.ddp_batch is None:
                rec.ddp_batch = leading_batch(inputs)
            if auto.active and auto.batch_size is None:
                auto.batch_size = leading_batch(inputs)
        self._gansim_batch = self.register_forward_pre_hook(batch_of)

    def register_comm_hook(self, state, hook):
        self._gansim_hooked = True
        wrapped = recorded(hook, self)
        wrapped.__qualname__ = getattr(hook, "__qualname__", "hook")
        wrapped.__wrapped__ = hook  # DDP checks the user's hook's signature
        return original_register(self, state, wrapped)

    def sync_buffers(self):
        rec.collective("broadcast", tensor_bytes(list(self.modules_buffers)), owner_of(self))
        rec.quiet += 1
        try:
            return original_sync_buffers(self)
        finally:
            rec.quiet -= 1

    def all_reduce(tensor, *args, **kwargs):
        if rec.in_hook is not None:
            rec.in_hook.append(tensor_bytes(tensor))
        rec.collective("allreduce", tensor_bytes(tensor), "explicit")
        return original_all_reduce(tensor, *args, **kwargs)

    auto = AutoPhases(rec, enabled=find_phases)
    original_optimizer_init = torch.optim.Optimizer.__init__
    original_backward = torch.autograd.backward

    def optimizer_init(self, *args, **kwargs):
        original_optimizer_init(self, *args, **kwargs)
        auto.made(self)

    def backward(*args, **kwargs):
        started = auto.backward_started(args[0] if args else kwargs.get("tensors"))
        try:
            return original_backward(*args, **kwargs)
        finally:
            auto.backward_ended(started)

    optimizer_hooks = [register_optimizer_step_pre_hook(lambda opt, *a: auto.step_started(opt)),
                       register_optimizer_step_post_hook(lambda opt, *a: auto.step_ended(opt))]

    trained: dict[int, set[int]] = {}  # per count of optimizers made, the parameters they hold

    def first_batch(module, inputs):  # a script without DDP: the batch its trained networks take
        if rec.model_batch is not None or not auto.optimizers:
            return
        made = len(auto.optimizers)
        if made not in trained:
            trained[made] = {id(p) for opt in auto.optimizers.values() for group in opt.param_groups
                             for p in group["params"]}
        if any(id(p) in trained[made] for p in module.parameters()):
            rec.model_batch = leading_batch(inputs)
            if rec.model_batch is not None:
                batch_hook.remove()
    batch_hook = torch.nn.modules.module.register_module_forward_pre_hook(first_batch)

    original_init_group = dist.init_process_group

    def init_process_group(*args, **kwargs):
        check_confined(inspect.signature(original_init_group).bind(*args, **kwargs).arguments)
        return original_init_group(*args, **kwargs)

    saved = [(autograd_profiler, "record_function", original_rf), (dist, "init_process_group", original_init_group),
             (torch.profiler, "record_function", torch.profiler.record_function),
             (DDP, "__init__", original_init), (DDP, "register_comm_hook", original_register),
             (DDP, "_sync_buffers", original_sync_buffers), (dist, "all_reduce", original_all_reduce),
             (torch.optim.Optimizer, "__init__", original_optimizer_init), (torch.autograd, "backward", original_backward)]
    autograd_profiler.record_function = TimedRecordFunction
    torch.profiler.record_function = TimedRecordFunction
    DDP.__init__ = init
    DDP.register_comm_hook = register_comm_hook
    DDP._sync_buffers = sync_buffers
    dist.all_reduce = all_reduce
    dist.init_process_group = init_process_group
    torch.optim.Optimizer.__init__ = optimizer_init
    torch.autograd.backward = backward
    instrument.install(rec)
    try:
        yield rec
    finally:
        rec.ddp_buckets = {owner_of(m): ddp_logged_buckets(m) for m in rec.ddp_modules}
        rec.ddp_modules = []
        instrument.install(None)
        for handle in (*optimizer_hooks, batch_hook):
            handle.remove()
        for obj, attr, value in saved:
            setattr(obj, attr, value)


def check_confined(arguments: dict) -> None:
    """A script's init_process_group must form the world gansim describes in its environment
    (RANK, WORLD_SIZE, MASTER_ADDR/PORT: env://), or a world size smaller than torchrun's, or
    the one-rank copies, cannot run on the ranks given them: refuse it at once (a user-input
    error) rather than hang waiting for ranks that never come."""
    method = arguments.get("init_method")
    own = []
    if arguments.get("store") is not None:
        own.append("its own store=")
    if method not in (None, "env://"):
        own.append(f"init_method={method!r}")
    for name, var in (("world_size", "WORLD_SIZE"), ("rank", "RANK")):
        value = arguments.get(name, -1)
        if value not in (-1, None) and str(value) != os.environ.get(var):
            own.append(f"{name}={value} (gansim gives {var}={os.environ.get(var)})")
    if own:
        raise ScriptMarkupError(
            f"the script's init_process_group uses {', '.join(own)}: gansim runs each world size on ranks of "
            "their own that meet through RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, so the script cannot "
            "be confined to them; call init_process_group(backend) (env://, as under torchrun)")


def script_environment(place: RankPlace, spec: ScriptSpec, cfg: RunConfig, host: str, port: int) -> dict[str, str]:
    """What torchrun would set for this rank (a one-rank copy: rank 0 of a world of 1, on the
    GPU of its place). The rendezvous store at host:port is hosted by a gansim process, as
    torchrun's agent hosts its own (TORCHELASTIC_USE_AGENT_STORE)."""
    if spec.solo:
        env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
               "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "1"}
        if cfg.backend == "nccl":  # each copy on the GPU of its place (set before CUDA starts)
            env["CUDA_VISIBLE_DEVICES"] = str(place.local_rank)
    else:
        env = {"RANK": str(place.rank), "WORLD_SIZE": str(place.world_size), "LOCAL_RANK": str(place.local_rank),
               "LOCAL_WORLD_SIZE": str(place.local_world_size), "GROUP_RANK": str(place.node),
               "ROLE_RANK": str(place.rank), "ROLE_WORLD_SIZE": str(place.world_size)}
    return {**env, "MASTER_ADDR": host, "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True"}


def run_script(spec: ScriptSpec, cfg: RunConfig, reporter: Optional[Reporter]) -> dict:
    """Run the user's script in this process until it has `cfg.steps` steps (or ends);
    return this rank's payload. The script's process group is destroyed afterwards."""
    rec = StepRecorder(cfg.steps, cfg.warmup, reporter)
    argv, path0 = sys.argv, sys.path[0] if sys.path else None
    sys.argv = [spec.path, *spec.args]
    # as python does: the script's directory first, or for python -m the working directory
    sys.path.insert(0, os.getcwd() if spec.module else os.path.dirname(os.path.abspath(spec.path)))
    try:
        with recording(rec, find_phases=not labels_its_phases(spec.path)):
            try:
                if spec.module:
                    runpy.run_module(spec.module, run_name="__main__", alter_sys=True)
                else:
                    runpy.run_path(spec.path, run_name="__main__")
            except EnoughSteps:
                pass
            except SystemExit as end:  # sys.exit(0) or exit() ends a script as falling off its end does
                if end.code not in (None, 0):
                    raise
    finally:
        sys.argv = argv
        if sys.path and sys.path[0] != path0:
            sys.path.pop(0)
    if rec.index < cfg.steps:
        auto = rec.auto
        if not rec.marked and auto is not None and auto.stepped:
            raise ScriptMarkupError(
                f"the script ended after {max(0, rec.index + 1)} training step(s) found from its optimizer steps "
                f"({auto.stepped} steps of {len(auto.optimizers)} optimizer(s){auto.why_not()}); calibrating needs "
                f"--steps {cfg.steps}: let the script run longer, lower --steps, or mark its steps and phases "
                "(gansim.calibration.step() and phase())")
        if not rec.marked and not (dist.is_available() and dist.is_initialized()):
            raise ScriptMarkupError(
                "the script ended without training in this process: it never called "
                "torch.distributed.init_process_group() here. A script that starts its own processes "
                "(torch.multiprocessing.spawn) cannot be timed; give --script a file that runs one rank, "
                "as torchrun runs it (RANK, WORLD_SIZE and MASTER_ADDR/PORT are set, init_method env://)")
        raise ScriptMarkupError(
            f"the script ended after {max(0, rec.index + 1)} step() call(s); calibrating needs "
            f"--steps {cfg.steps} (call gansim.calibration.step() at the start of every training "
            "step, and let the script run at least that many steps, or lower --steps)")
    # the threads the script left torch with (its own torch.set_num_threads wins over --threads)
    payload = {**rec.payload(), "torch_threads": torch.get_num_threads()}
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # no rank tears the group down while a peer still uses it
        dist.destroy_process_group()
    return payload
