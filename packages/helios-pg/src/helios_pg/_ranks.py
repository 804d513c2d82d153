"""Run one ``ranks`` test on its ranks, from the pytest process.

Ranks are started from one forkserver per session whose process already imported
torch and helios_pg, so a rank starts in milliseconds instead of importing torch. The
parent waits on the ranks' pipes: the first failure kills the others at once; at the
deadline every rank still running is asked for its Python stack (``SIGUSR1``), then
all are killed. The temporary directory (store file, output, stacks) is removed after
every test, also after a failure or a hang. With ``--ranks-reuse`` the ranks of a
passing test serve the next test of the same size, each test on a group of its own.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from helios_pg._rank_worker import DIST_INFO, RankJob, main, serve

__all__ = ["DEFAULT_TIMEOUT", "close_pools", "run_on_ranks"]

DEFAULT_TIMEOUT = 60.0
_STACK_WAIT = 1.0
# pytest too: every rank imports the parent's main module (pytest) and the test module.
_PRELOAD = ["torch", "torch.distributed", "pytest", "helios_pg._init", "helios_pg._rank_worker"]
_context: ForkServerContext | None = None


def _forkserver() -> ForkServerContext:
    global _context  # noqa: PLW0603 - one forkserver for the whole session
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        assert isinstance(context, ForkServerContext)
        context.set_forkserver_preload(_PRELOAD)
        _context = context
    return _context


def _spec(marker: pytest.Mark) -> tuple[int, float, str | None]:
    if len(marker.args) != 1 or not isinstance(marker.args[0], int) or marker.args[0] < 1:
        message = f"ranks(n) needs one positive integer, got ranks{marker.args!r}"
        raise pytest.UsageError(message)
    unknown = set(marker.kwargs) - {"timeout", "backend"}
    if unknown:
        message = f"ranks() takes timeout= and backend=, got {sorted(unknown)}"
        raise pytest.UsageError(message)
    timeout = float(marker.kwargs.get("timeout", DEFAULT_TIMEOUT))
    backend = marker.kwargs.get("backend")
    return marker.args[0], timeout, backend


def _arguments(item: pytest.Function) -> tuple[bytes, bool]:
    names = item._fixtureinfo.argnames
    values = {name: item.funcargs[name] for name in names if name != DIST_INFO}
    for name, value in values.items():
        try:
            pickle.dumps(value)
        except Exception as exc:  # pickle raises many types: each is reported the same way
            problem = f"{type(exc).__name__}: {exc}"
        else:
            continue
        message = (
            f"fixture {name!r} ({type(value).__name__}) cannot be sent to the ranks "
            f"({problem}). A ranks test's fixtures are resolved in the pytest process and "
            f"pickled to every rank; build this value inside the test instead"
        )
        pytest.fail(message, pytrace=False)
    return pickle.dumps(values), DIST_INFO in names


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _output(directory: Path, rank: int) -> str:
    parts = []
    for name in ("stdout", "stderr"):
        text = _read(directory / f"{name}.{rank}").rstrip()
        if text:
            parts.append(f"--- rank {rank} {name} ---\n{text}")
    return "\n".join(parts)


def _kill(processes: list[BaseProcess]) -> None:
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(5)


def _stacks(directory: Path, processes: list[BaseProcess]) -> str:
    for process in processes:
        if process.is_alive() and process.pid is not None:
            os.kill(process.pid, signal.SIGUSR1)
    time.sleep(_STACK_WAIT)
    dumps = []
    for rank in range(len(processes)):
        text = _read(directory / f"stacks.{rank}").rstrip() or "(finished, no stack)"
        dumps.append(f"--- rank {rank} stack ---\n{text}")
    return "\n".join(dumps)


def _job(
    item: pytest.Function,
    *,
    world_size: int,
    timeout: float,
    backend: str | None,
    directory: Path,
    arguments: tuple[bytes, bool],
) -> RankJob:
    return RankJob(
        module=item.module.__name__,
        cls=item.cls.__name__ if item.cls is not None else None,
        function=item.originalname,
        arguments=arguments[0],
        wants_dist_info=arguments[1],
        world_size=world_size,
        directory=str(directory),
        backend=backend,
        timeout=timeout,
        sys_path=list(sys.path),
        environ=dict(os.environ),
    )


def _check_backend(world_size: int, backend: str | None) -> None:
    if backend is None or "nccl" not in backend:
        return
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < world_size:
        pytest.skip(f"backend={backend!r} needs {world_size} CUDA devices, one per rank")


class _Pool:
    """Ranks kept alive between tests (``--ranks-reuse``): one process per rank."""

    def __init__(self, context: ForkServerContext, world_size: int) -> None:
        self.processes: list[BaseProcess] = []
        self.conns: dict[Connection, int] = {}
        for rank in range(world_size):
            parent, child = context.Pipe()
            process = context.Process(target=serve, args=(rank, child), daemon=True)
            process.start()
            child.close()
            self.processes.append(process)
            self.conns[parent] = rank

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for process in self.processes:
            process.join(2)
        _kill(self.processes)
        for conn in self.conns:
            conn.close()


_pools: dict[int, _Pool] = {}


def close_pools() -> None:
    """Stop every rank kept for reuse (at the end of the session)."""
    while _pools:
        _pools.popitem()[1].close()


def run_on_ranks(item: pytest.Function, marker: pytest.Mark, *, reuse: bool) -> None:
    """Run ``item`` on the ranks its ``ranks`` marker asks for; raise its outcome.

    Args:
        item: The test.
        marker: Its ``ranks`` marker.
        reuse: Run it on ranks kept from the previous test of the same size, each
            with a fresh group; any outcome but a pass discards them.
    """
    world_size, timeout, backend = _spec(marker)
    _check_backend(world_size, backend)
    arguments = _arguments(item)  # before anything is created: it may fail the test
    directory = Path(tempfile.mkdtemp(prefix="helios-ranks-"))
    try:
        job = _job(
            item,
            world_size=world_size,
            timeout=timeout,
            backend=backend,
            directory=directory,
            arguments=arguments,
        )
        if reuse:
            _run_reused(job, directory, timeout)
        else:
            _run_fresh(job, directory, timeout)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _run_reused(job: RankJob, directory: Path, timeout: float) -> None:
    pool = _pools.pop(job.world_size, None) or _Pool(_forkserver(), job.world_size)
    for conn in pool.conns:
        conn.send(job)
    try:
        _collect(directory, pool.processes, dict(pool.conns), timeout)
    except BaseException:
        pool.close()
        raise
    _pools[job.world_size] = pool


def _run_fresh(job: RankJob, directory: Path, timeout: float) -> None:
    context = _forkserver()
    processes: list[BaseProcess] = []
    conns: dict[Connection, int] = {}
    try:
        for rank in range(job.world_size):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=main, args=(rank, job, sender), daemon=True)
            process.start()
            sender.close()
            processes.append(process)
            conns[receiver] = rank
        _collect(directory, processes, conns, timeout)
    finally:
        _kill(processes)
        for conn in conns:
            conn.close()


def _collect(
    directory: Path, processes: list[BaseProcess], conns: dict[Connection, int], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    outcomes: dict[int, tuple[str, str]] = {}
    pending = dict(conns)
    while pending:
        remaining = deadline - time.monotonic()
        ready = wait(list(pending), timeout=max(0.0, remaining)) if remaining > 0 else []
        if not ready:
            hung = sorted(pending.values())
            stacks = _stacks(directory, processes)
            message = (
                f"rank(s) {hung} of {len(processes)} still running after the ranks "
                f"timeout of {timeout:g} s; every rank's stack:\n{stacks}"
            )
            pytest.fail(message, pytrace=False)
        for conn in ready:
            assert isinstance(conn, Connection)
            rank = pending.pop(conn)
            try:
                outcomes[rank] = conn.recv()
            except EOFError:
                processes[rank].join(5)
                code = processes[rank].exitcode
                outcomes[rank] = ("failed", f"rank {rank} exited (status {code}) without a result")
            if outcomes[rank][0] != "passed":
                _raise(rank, outcomes[rank], directory, processes)


def _raise(
    rank: int, outcome: tuple[str, str], directory: Path, processes: list[BaseProcess]
) -> None:
    kind, text = outcome
    _kill(processes)
    if kind == "skipped":
        pytest.skip(f"rank {rank}: {text}")
    if kind == "xfailed":
        pytest.xfail(f"rank {rank}: {text}")
    output = _output(directory, rank)
    message = f"rank {rank} of {len(processes)} failed:\n{text.rstrip()}"
    if output:
        message += f"\n{output}"
    pytest.fail(message, pytrace=False)
