"""Where a scenario's points run: `local` (a process pool, or serially where one process
suffices) or `dask://HOST:PORT` (a Dask cluster), as any concurrent.futures executor."""

from __future__ import annotations

import os
import socket
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any, Callable

from gansim.core import limits
from gansim.core.errors import UserInputError


def make_executor(spec: str, workers: int | None, runs: int, baselines: int = 0) -> tuple[Executor | None,
                                                                                       Callable[[], None]]:
    """`local` (a process pool; serial when one worker or one run suffices; never more
    processes than runs, not counting `baselines` of them, 1-GPU runs so cheap that they
    never need a process of their own) or `dask://HOST:PORT` (a Dask cluster through
    distributed.Client.get_executor(), after checking within seconds that a Dask scheduler
    answers there)."""
    if spec == "local":
        if workers is not None:
            limits.WORKERS.check(workers, field="--workers")
        count = min(workers if workers is not None else (os.cpu_count() or 1), runs - baselines)
        if count <= 1:
            return None, lambda: None
        pool = ProcessPoolExecutor(max_workers=count)
        return pool, lambda: pool.shutdown(cancel_futures=True)
    if spec.startswith("dask://"):
        host, port = dask_address(spec)
        try:
            from distributed import Client
        except ImportError:
            raise UserInputError("the dask executor needs: pip install 'gansim[dask]'", field="--executor") from None
        address = f"tcp://{host}:{port}" if ":" not in host else f"tcp://[{host}]:{port}"
        check_dask_scheduler(host, port, address)
        try:
            client = Client(address, timeout=f"{DASK_TIMEOUT_S}s")
        except (OSError, TimeoutError) as exc:
            raise UserInputError(f"cannot reach the Dask scheduler at {host}:{port}: {exc}",
                                 field="--executor") from None
        return client.get_executor(), client.close
    raise UserInputError(f"unknown executor {spec!r}; allowed: local, dask://HOST:PORT", field="--executor")


# How long a Dask address may take to answer before it is declared unreachable
DASK_TIMEOUT_S = 5


def dask_address(spec: str) -> tuple[str, int]:
    """`dask://HOST:PORT` (IPv6: `dask://[::1]:8786`) -> (host, port), or the one-line error."""
    rest = spec.removeprefix("dask://")
    host, sep, port_text = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or any(c.isspace() or c in "/?#@[]" for c in host):
        raise UserInputError(f"expected dask://HOST:PORT, got {spec!r}", field="--executor")
    if not (port_text.isascii() and port_text.isdigit() and 1 <= int(port_text) <= 65535):
        raise UserInputError(f"expected a port number 1-65535 in dask://HOST:PORT, got {port_text!r}",
                             field="--executor")
    return host, int(port_text)


def check_dask_scheduler(host: str, port: int, address: str) -> None:
    """Fail within seconds when nothing listens at the address (refused at once), the host
    is unknown, or what listens is not a Dask scheduler: distributed.Client waits out its
    timeout on a refusal and waits forever for the handshake of a server that is not Dask."""
    # imported only when a Dask address is given: the optional dask extra, and asyncio (with
    # ssl, ~40 ms) that no local run needs
    import asyncio

    from distributed.comm import connect

    where = f"{host}:{port}"
    try:
        socket.create_connection((host, port), timeout=DASK_TIMEOUT_S).close()
    except socket.gaierror:
        raise UserInputError(f"unknown host {host!r}", field="--executor") from None
    except ConnectionRefusedError:
        raise UserInputError(f"nothing listens at {where} (connection refused); start the scheduler "
                             "(dask scheduler) or check the address", field="--executor") from None
    except OSError as exc:
        raise UserInputError(f"cannot reach {where}: {exc.strerror or exc}", field="--executor") from None

    async def identity() -> Any:
        comm = await connect(address, timeout=DASK_TIMEOUT_S)
        try:
            await comm.write({"op": "identity"})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded() -> Any:
        return await asyncio.wait_for(identity(), DASK_TIMEOUT_S)

    try:
        reply = asyncio.run(bounded())
    except Exception as exc:  # noqa: BLE001 -- however the handshake fails, it was not Dask's
        reply = exc
    if not (isinstance(reply, dict) and reply.get("type") == "Scheduler"):
        raise UserInputError(f"what listens at {where} is not a Dask scheduler (it gave no Dask answer within "
                             f"{DASK_TIMEOUT_S} s)", field="--executor")
