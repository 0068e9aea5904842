"""Process management of real runs: ranks spawned here or started by torchrun, watched and
always cleaned up.

Two ways to start ranks:

- :func:`run_local` spawns ``world_size`` ranks on this machine with
  ``torch.multiprocessing`` (start method ``spawn``). The parent hosts the rendezvous
  ``TCPStore`` on a free port (found by binding port 0; on ``EADDRINUSE`` another port is
  tried), watches every rank (phase, step and a heartbeat in shared memory, results and
  errors through a queue) and always cleans its children up.
- :func:`run_tasks_in_group` runs the same tasks inside an already initialised process
  group, e.g. one started by ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``MASTER_ADDR``, ``MASTER_PORT`` from the environment), which is how multi-node
  calibration works; see :func:`init_from_env`.

Tasks a rank can run (one spawn can run several, in order):

``train``
    The training step of docs/model.md ("The training step"): load a batch, ``d_steps``
    discriminator steps, one generator step; Adam, BCE. ``mode="ddp"`` wraps both networks
    in ``DistributedDataParallel`` (bucketed all-reduce overlapped with backward);
    ``mode="flat"`` does one explicit all-reduce of the flattened gradients after each
    backward (TensorFlow MirroredStrategy's way, as in the paper).
``compute``
    The same step with no communication at all (no DDP, no all-reduce): at world size 1
    this is the per-phase compute; with w ranks it measures how much ranks slow each other
    down by sharing cores: each step of all w at once (lined up before every phase)
    follows one of rank 0 alone (``solo``).
``sweep``
    An all-reduce sweep (float32, sizes doubling), mean over iterations of the slowest
    rank's time, nccl-tests style.
``reduce``
    The local reduction ``a += b`` over sizes, for gamma (seconds per byte).
``script``
    A user's own training script (``ScriptSpec``), which initialises its own process group
    from the torchrun-style environment each rank gets (the parent hosts the rendezvous
    store, as torchrun's agent does); with ``ScriptSpec.solo`` every process runs it as a
    world of one, each with its own store (the communication-free compute run). Under
    torchrun, each launched rank below the world size runs its rank of the script in a child
    of its own (:func:`spawn_ranks`, :func:`_script_in_group`). See
    :mod:`gansim.calibration.ranks.script`.

Phase names (seconds per step, at the per-rank batch), see :data:`PHASES`:
``data_s`` (produce a batch of synthetic MNIST-shaped images on the host, plus the
host-to-device copy on GPU), ``d_forward_s`` (G forward for the fakes without grad, D
forward on real and fake), ``d_backward_s`` (D backward; in ddp mode this includes DDP's
overlapped all-reduce), ``d_allreduce_s`` (flat mode only), ``d_optimizer_s``,
``g_forward_s`` (G forward, D forward on the fakes), ``g_backward_s``, ``g_allreduce_s``
(flat mode only), ``g_optimizer_s``; and ``step_s``, the whole step from its start to the
next one's (the training loop has no per-step barrier, as users train; the compute-only
loop at world size > 1 lines its ranks up before every phase, outside the phase timings,
so its ``step_s`` includes those waits). With ``d_steps > 1`` the ``d_*`` phases are per
discriminator step (the
mean of the step's ``d_steps`` repetitions). Warm-up steps are dropped; every other
per-step sample of every rank is kept.

GPU path (NCCL): each rank uses ``cuda:LOCAL_RANK``; batches are produced into a pinned
host buffer and copied to the device with ``non_blocking=True`` inside ``data_s``;
``torch.cuda.synchronize()`` closes every timed phase; barriers pass ``device_ids``.
**This path is untested here** (the development machine has no GPU): treat its first
results with care.

Faults: a rank that crashes, raises or hangs ends the whole run within a bounded time.
The process-group timeout is ``timeout_s``; the parent ends the run when no rank has made
progress for ``timeout_s`` or shortly after the first failure, and raises
:class:`CalibrationError` naming the rank, the task and the phase it was in. For tests a
fault can be injected with ``RunConfig.fault`` or the ``GANSIM_CALIBRATE_FAULT``
environment variable: ``RANK:PHASE[:ACTION[:STEP]]`` with ACTION ``exit`` (``os._exit(3)``,
the default), ``raise`` or ``hang``, and STEP the first step (0-based, warm-up included)
at which it fires.
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import os
import queue as queue_mod
import signal
import socket
import sys
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gansim.calibration.ranks.faults import (
    STATUS,
    STATUS_INDEX,
    FaultSpec,
    RankState,
    Reporter,
    compose_failure,
    format_where,
)
from gansim.calibration.ranks.run_config import TASKS, CalibrationError, RankPlace, RunConfig, ScriptSpec
from gansim.calibration.ranks.script import run_script, script_environment
from gansim.calibration.ranks.tasks import combine_task, execute_task
from gansim.calibration.ranks.timing import RankEnv, pin_threads, thread_env


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bind to port 0 and let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _is_addr_in_use(exc: BaseException) -> bool:
    text = str(exc)
    return "EADDRINUSE" in text or "address already in use" in text.lower()


def create_store(host: str = "127.0.0.1", port: int | None = None, *, world_size: int = 1,
                 timeout_s: float = 120.0, attempts: int = 8,
                 port_picker: Callable[[str], int] = find_free_port) -> tuple[Any, int]:
    """Start the rendezvous ``TCPStore`` server in this process and return ``(store, port)``.

    ``port`` is tried first when given; otherwise (and whenever a port turns out to be
    taken, ``EADDRINUSE``) a free one is picked with ``port_picker`` and tried, up to
    ``attempts`` times.
    """
    last: BaseException | None = None
    candidate = port
    for _ in range(max(1, attempts)):
        if candidate is None:
            candidate = port_picker(host)
        try:
            store = dist.TCPStore(host, candidate, world_size + 1, True,
                                  timedelta(seconds=timeout_s), wait_for_workers=False)
            return store, store.port
        except (RuntimeError, OSError) as exc:  # DistNetworkError is a RuntimeError
            if not _is_addr_in_use(exc):
                raise
            last = exc
            candidate = None
    raise CalibrationError(f"could not find a free port for the rendezvous on {host}: {last}")



# --------------------------------------------------------------------------- spawned ranks
def _set_parent_death_signal(parent_pid: int) -> None:
    """Linux: get SIGKILL if the parent dies, so a killed parent leaves no orphan ranks;
    if it died already (while this rank was starting), leave at once."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass
    if os.getppid() != parent_pid:
        os._exit(1)


def is_comm_error(exc: BaseException) -> bool:
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc).lower()
    return any(s in text for s in ("gloo", "nccl", "connection closed", "connection reset",
                                   "timed out", "timeout", "broken pipe", "socket"))


def _user_line(tb: Any, script: str) -> str:
    """`file:line` of the last frame of a traceback inside the user's script ('' if none)."""
    frames = [f for f in traceback.extract_tb(tb) if os.path.abspath(f.filename) == os.path.abspath(script)]
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""


def _leave_delivered() -> None:
    """Ends a rank whose results and `done` have reached the parent (the queue's feeder has
    flushed them): its exit handlers run and its output is flushed, then it exits 0 without
    the interpreter's teardown. There a library's C++ thread left joinable (torch's, gloo's,
    a script's) aborts the process (`terminate called without an active exception`,
    SIGABRT), which would fail a run whose every figure was already delivered."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


def _rank_main(place: RankPlace, cfg: RunConfig, tasks: tuple[str, ...], rendezvous: tuple[str, int],
               q: Any, arrays: dict, parent_pid: int, script: Optional[ScriptSpec] = None) -> None:
    """Entry point of a spawned rank."""
    rank, world_size = place.rank, place.world_size
    host, port = rendezvous
    _set_parent_death_signal(parent_pid)
    pin_threads(cfg.threads)
    fault = None
    text = cfg.fault or os.environ.get("GANSIM_CALIBRATE_FAULT")
    if text:
        fault = FaultSpec.parse(text)
    rep = Reporter(rank, arrays, fault)
    try:
        if script is not None:
            os.environ.update(script_environment(place, script, cfg, host, port))
            # the platform's start method, as under torchrun: this rank was spawned, which made
            # spawn its default, and a spawned DataLoader worker would run the script again
            mp.set_start_method(None, force=True)
            rep.set_task(0, "script")
            q.put(("result", rank, 0, run_script(script, cfg, rep)))
            rep.set("finished")
            q.put(("done", rank))
            q.close()
            q.join_thread()
            _leave_delivered()
        rep.set("init_process_group")
        if cfg.backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
        store = dist.TCPStore(host, port, world_size + 1, False,
                              timedelta(seconds=cfg.timeout_s))
        kwargs = {}
        if cfg.backend == "nccl":
            kwargs["device_id"] = device
        dist.init_process_group(cfg.backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=cfg.timeout_s), **kwargs)
        env = RankEnv(rank, world_size, None, device, cfg.backend, rep, local_rank=rank)
        for index, task in enumerate(tasks):
            rep.set_task(index, task)
            payload = execute_task(env, cfg, task)
            q.put(("result", rank, index, payload))
        rep.set("finished")
        env.barrier()
        dist.destroy_process_group()
        q.put(("done", rank))
        q.close()
        q.join_thread()
        _leave_delivered()
    except BaseException as exc:  # report, then leave at once (peers may be gone)
        info = {
            "phase": rep.current,
            "task": rep.task,
            "step": rep.step,
            "type": type(exc).__name__,
            "message": " ".join(str(exc).split())[:500],
            "comm": is_comm_error(exc),
            "traceback": traceback.format_exc(),
            "user_line": _user_line(exc.__traceback__, script.path) if script is not None else "",
        }
        try:
            q.put(("error", rank, info))
            q.close()
            q.join_thread()
        finally:
            os._exit(1)


def run_local(cfg: RunConfig, world_size: int, tasks: Sequence[str], *,
              on_task: Optional[Callable[[str, Any], None]] = None,
              log: Optional[Callable[[str], None]] = None,
              progress_every_s: float = 10.0,
              port_picker: Callable[[str], int] = find_free_port,
              script: Optional[ScriptSpec] = None) -> dict[str, Any]:
    """Spawn ``world_size`` ranks here, run ``tasks`` in order on each, return
    ``{task: combined result}``. ``on_task(task, result)`` is called as each task completes
    on every rank (e.g. to save partial results). Raises :class:`CalibrationError` when a
    rank crashes, raises or hangs; the children are always terminated before returning.
    With ``script``, the only task is ``("script",)``: the ranks run the user's script.
    """
    results: dict[str, Any] = {}

    def combine(task: str, payloads: dict[int, Any]) -> None:
        results[task] = combine_task(task, [payloads[r] for r in range(world_size)])
        if on_task is not None:
            on_task(task, results[task])

    places = [RankPlace.one_node(r, world_size) for r in range(world_size)]
    spawn_ranks(cfg, places, tasks, on_payloads=combine, log=log, progress_every_s=progress_every_s,
                port_picker=port_picker, script=script)
    return results


def spawn_ranks(cfg: RunConfig, places: Sequence[RankPlace], tasks: Sequence[str], *,
                rendezvous: Optional[tuple[str, int]] = None,
                on_payloads: Optional[Callable[[str, dict[int, Any]], None]] = None,
                log: Optional[Callable[[str], None]] = None,
                progress_every_s: float = 10.0,
                port_picker: Callable[[str], int] = find_free_port,
                script: Optional[ScriptSpec] = None) -> dict[str, dict[int, Any]]:
    """Spawn the ranks at ``places`` (all of one world, or, under torchrun, the one rank of
    it that runs on this process's node) and watch them; return ``{task: {rank: payload}}``
    of the ranks spawned here, calling ``on_payloads`` as each task completes on all of them.
    Their process group meets at ``rendezvous`` (host, port), a store hosted elsewhere, or
    without it at one hosted here (one per one-rank copy of a script)."""
    tasks = ("script",) if script is not None else tuple(tasks)
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"unknown task {t!r}")
    world_size = places[0].world_size
    if cfg.backend == "nccl":
        need = max(p.local_rank for p in places) + 1
        if not torch.cuda.is_available() or torch.cuda.device_count() < need:
            raise CalibrationError(
                f"world size {world_size} needs {need} CUDA devices for nccl on this machine, "
                f"found {torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    arrays = {
        "phase": ctx.RawArray("i", world_size),
        "step": ctx.RawArray("i", world_size),
        "task": ctx.RawArray("i", world_size),
        "beat": ctx.RawArray("d", world_size),
    }
    now = time.monotonic()
    for p in places:
        arrays["phase"][p.rank] = STATUS_INDEX["spawning"]
        arrays["step"][p.rank] = -1
        arrays["beat"][p.rank] = now
    # one rendezvous store per process group: one for the ranks, one per one-rank copy
    solo = script is not None and script.solo
    stores = []
    if rendezvous is None or solo:
        stores = [create_store(cfg.host, world_size=1 if solo else world_size, timeout_s=cfg.timeout_s,
                               port_picker=port_picker) for _ in range(len(places) if solo else 1)]
    procs: dict[int, Any] = {}
    saved_env = {k: os.environ.get(k) for k in thread_env(cfg.threads)}
    try:
        os.environ.update(thread_env(cfg.threads))
        for i, place in enumerate(places):
            meet = (cfg.host, stores[i if solo else 0][1]) if stores else rendezvous
            # not daemonic: a script's DataLoader workers are the rank's children, which a
            # daemonic process may not have; _cleanup ends every rank whatever happens
            proc = ctx.Process(target=_rank_main, name=f"gansim-rank{place.rank}",
                               args=(place, cfg, tasks, meet, q, arrays, os.getpid(), script), daemon=False)
            proc.start()
            procs[place.rank] = proc
    except BaseException:
        _cleanup(list(procs.values()), q)
        raise
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        return _monitor(cfg, world_size, tasks, procs, q, arrays, on_payloads, log, progress_every_s)
    finally:
        _cleanup(list(procs.values()), q)
        del stores


def _cleanup(procs: list, q: Any) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5.0)
    try:
        q.close()
        q.cancel_join_thread()
    except (OSError, ValueError):
        pass


def _monitor(cfg: RunConfig, world_size: int, tasks: tuple[str, ...], procs: dict[int, Any], q: Any,
             arrays: dict, on_payloads, log, progress_every_s: float) -> dict[str, dict[int, Any]]:
    ranks = sorted(procs)
    states = {r: RankState() for r in ranks}
    partial: dict[int, dict[int, Any]] = {i: {} for i in range(len(tasks))}
    results: dict[str, dict[int, Any]] = {}
    first_failure: Optional[float] = None
    grace_s = 3.0
    last_progress_log = time.monotonic()

    def status(r: int) -> tuple[str, str, int]:
        ti = arrays["task"][r]
        task = tasks[ti] if 0 <= ti < len(tasks) else ""
        return task, STATUS[arrays["phase"][r]], arrays["step"][r]

    while True:
        try:
            msg = q.get(timeout=0.05)
        except queue_mod.Empty:
            msg = None
        except (EOFError, OSError):
            msg = None
        if msg is not None:
            kind, rank = msg[0], msg[1]
            if kind == "result":
                index, payload = msg[2], msg[3]
                partial[index][rank] = payload
                if len(partial[index]) == len(ranks):
                    task = tasks[index]
                    results[task] = partial[index]
                    if on_payloads is not None:
                        on_payloads(task, partial[index])
            elif kind == "error":
                states[rank].error = msg[2]
                if first_failure is None:
                    first_failure = time.monotonic()
            elif kind == "done":
                states[rank].done = True
            continue  # drain the queue before checking processes

        now = time.monotonic()
        for r, p in procs.items():
            if states[r].exitcode is None and p.exitcode is not None:
                states[r].exitcode = p.exitcode
                if p.exitcode != 0 and first_failure is None:
                    first_failure = now
        if all(s.done for s in states.values()) and all(p.exitcode is not None for p in procs.values()):
            if all(p.exitcode == 0 for p in procs.values()) and len(results) == len(tasks):
                return results
        if first_failure is not None:
            all_exited = all(p.exitcode is not None for p in procs.values())
            if all_exited or now - first_failure > grace_s:
                raise compose_failure(states, procs, world_size, status, now, arrays)
        stale = now - max(arrays["beat"][r] for r in ranks)
        if stale > cfg.timeout_s + 5.0:
            raise compose_failure(states, procs, world_size, status, now, arrays,
                                   hang_s=stale)
        if log is not None and now - last_progress_log >= progress_every_s:
            last_progress_log = now
            bits = []
            for r in ranks:
                task, phase, step = status(r)
                if task in ("train", "compute", "script"):
                    where = f"step {max(step, 0)}/{cfg.steps}"
                elif task == "sweep":
                    where = f"size {max(step, 0) + 1}/{len(cfg.sweep_sizes)}"
                elif task == "reduce":
                    where = f"size {max(step, 0) + 1}/{len(cfg.reduce_sizes)}"
                else:
                    where = ""
                bits.append(f"rank {r}: {task or 'starting'} {where} {phase}".replace("  ", " "))
            log(f"  ... world size {world_size}: " + "; ".join(bits))


def run_training(cfg: RunConfig, world_size: int, **kwargs: Any) -> dict:
    """Convenience: spawn ``world_size`` ranks and run only the training task; returns
    ``{"ranks": [{"rank": r, "phases": {phase: [seconds per kept step]}}]}``."""
    return run_local(cfg, world_size, ("train",), **kwargs)["train"]


def launched_by_torchrun(environ: Optional[dict] = None) -> bool:
    """True when RANK and WORLD_SIZE are set (torchrun / torch.distributed.launch)."""
    e = os.environ if environ is None else environ
    return "RANK" in e and "WORLD_SIZE" in e


def init_from_env(cfg: RunConfig) -> tuple[int, int, int, torch.device]:
    """Initialise the default process group from torchrun's environment
    (``env://``: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
    Returns ``(rank, world_size, local_rank, device)``."""
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    pin_threads(cfg.threads)
    kwargs = {}
    if cfg.backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        kwargs["device_id"] = device
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(cfg.backend, init_method="env://", rank=rank, world_size=world,
                                timeout=timedelta(seconds=cfg.timeout_s), **kwargs)
    return rank, world, local, device


_GROUP_RUNS = itertools.count()  # run_tasks_in_group calls in this process


def _script_in_group(cfg: RunConfig, env: RankEnv, spec: ScriptSpec) -> Any:
    """This rank's share of a user's script run under torchrun: one child process running
    the script as rank ``env.rank`` of a world of ``env.world_size`` (ranks 0..w-1 of the
    launched world, on their own nodes and GPUs). Their process group meets at a store of
    its own, hosted by rank 0 on a fresh port at torchrun's MASTER_ADDR (rank 0's node:
    torchrun's agent advertises it so, torch.distributed.elastic.rendezvous.api
    RendezvousStoreInfo.build; a TCPStore server listens on every interface), so the
    script's own ``init_process_group()`` forms exactly that world. One-rank copies
    (``spec.solo``) each host their own store. Returns this rank's payload."""
    rank, world = env.rank, env.world_size
    # where the participants sit: torchrun's local rank (the GPU) and node of each
    me = (int(os.environ.get("GROUP_RANK", "0")), env.local_rank)
    where = [me] * world
    store = None
    rendezvous = None
    if world > 1:
        dist.all_gather_object(where, me, group=env.group)
    if not spec.solo:
        port = [0]
        if rank == 0:
            store, port[0] = create_store(cfg.host if world == 1 else "0.0.0.0", world_size=world,
                                          timeout_s=cfg.timeout_s)
        if world > 1:
            dist.broadcast_object_list(port, src=0, group=env.group)
        rendezvous = (cfg.host if world == 1 else os.environ.get("MASTER_ADDR", cfg.host), port[0])
    place = RankPlace(rank, world, env.local_rank, sum(1 for node, _ in where if node == me[0]), me[0])
    try:
        return spawn_ranks(cfg, [place], (), rendezvous=rendezvous, script=spec)["script"][rank]
    finally:
        del store  # rank 0 hosts the rendezvous until its own child is done


def run_tasks_in_group(cfg: RunConfig, world_size: int, tasks: Sequence[str], *,
                       device: torch.device, local_rank: int, wait_timeout_s: float = 86400.0,
                       on_task: Optional[Callable[[str, Any], None]] = None,
                       script: Optional[ScriptSpec] = None) -> dict[str, Any]:
    """Inside an initialised default group (e.g. under torchrun): run ``tasks`` on global
    ranks ``0..world_size-1`` (a subgroup when ``world_size`` is smaller than the launched
    world); the other ranks wait. Every launched rank must call this with the same
    arguments. Rank 0 returns the combined results (``on_task`` is called there); other
    ranks return ``{}``. A failing rank raises :class:`CalibrationError` naming its phase;
    torchrun then ends the other ranks. With ``script`` the only task is ``("script",)``:
    each of the ranks runs the user's script in a child process (:func:`_script_in_group`)."""
    tasks = ("script",) if script is not None else tuple(tasks)
    rank = dist.get_rank()
    launched = dist.get_world_size()
    if world_size > launched:
        raise CalibrationError(f"world size {world_size} > launched world size {launched}")
    group = None if world_size == launched else dist.new_group(ranks=list(range(world_size)))
    fault = None
    text = cfg.fault or os.environ.get("GANSIM_CALIBRATE_FAULT")
    if text:
        fault = FaultSpec.parse(text)
    rep = Reporter(rank, None, fault)
    results: dict[str, Any] = {}
    if rank < world_size:
        env = RankEnv(rank, world_size, group, device, cfg.backend, rep, local_rank=local_rank)
        for index, task in enumerate(tasks):
            rep.set_task(index, task)
            try:
                payload = execute_task(env, cfg, task) if script is None else _script_in_group(cfg, env, script)
                rep.set("gather")
                gathered = [None] * world_size if rank == 0 else None
                if world_size > 1:
                    dist.gather_object(payload, gathered, dst=0, group=group)
                else:
                    gathered = [payload]
            except CalibrationError:
                raise
            except Exception as exc:
                where = format_where(rep.task, rep.current, rep.step, world_size)
                raise CalibrationError(f"rank {rank} failed in {where}: {type(exc).__name__}: "
                                       f"{exc}", rank=rank, phase=rep.current,
                                       task=rep.task) from exc
            if rank == 0:
                combined = combine_task(task, gathered)
                results[task] = combined
                if on_task is not None:
                    on_task(task, combined)
    # the ranks outside the subgroup wait for it without a collective (which would time
    # out on a long task): through the rendezvous store
    if world_size < launched:
        store = dist.distributed_c10d._get_default_store()
        # one key per call (every rank makes the same calls in the same order): a key left
        # set by an earlier run at this world size must not release the waiters early
        done_key = f"gansim_calibrate_run{next(_GROUP_RUNS)}_ws{world_size}_done"
        if rank == 0:
            store.set(done_key, b"1")
        elif rank >= world_size:
            store.wait([done_key], timedelta(seconds=wait_timeout_s))
    dist.barrier()
    return results
