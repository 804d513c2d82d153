"""Run one ``ranks`` test on its ranks, from the pytest process.

Ranks are forked from the session's forkserver (:mod:`helios_pg._testing._forkserver`),
whose process already imported torch and helios_pg. The parent waits on the ranks'
pipes: after a failure it reads the outcomes that follow it closely, names the rank
that failed first and kills the others; at the deadline every rank still running is
asked for its Python stack (``SIGUSR1``), then all are killed.
The temporary directory (store file, output, stacks) is removed after every test, also
after a failure or a hang. With ``--ranks-reuse`` the ranks of a passing test serve the
next test of the same size, each test on a group of its own.
"""

from __future__ import annotations

import contextlib
import math
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
from typing import Any

import pytest

from helios_pg._testing._forkserver import forkserver_context
from helios_pg._testing._marker import RanksSpec, read_marker
from helios_pg._testing._rank import DIST_INFO, Outcome, RankJob, main, serve

__all__ = ["close_pools", "run_on_ranks"]

_STACK_WAIT = 1.0
# After a rank fails, the others' outcomes are read until none has come for this long,
# so that the report names the rank that failed first.
_SETTLE = 1.0


def _arguments(item: pytest.Function) -> tuple[bytes, bool]:
    names = item._fixtureinfo.argnames
    values = {name: item.funcargs[name] for name in names if name != DIST_INFO}
    try:
        return pickle.dumps(values), DIST_INFO in names
    except Exception as exc:  # pickle raises many types; find the fixture and name it
        together = f"{type(exc).__name__}: {exc}"
    for name, value in values.items():
        try:
            pickle.dumps(value)
        except Exception as exc:
            message = (
                f"fixture {name!r} ({type(value).__name__}) cannot be sent to the ranks "
                f"({type(exc).__name__}: {exc}). A ranks test's fixtures are resolved in the "
                "pytest process and pickled to every rank; build this value inside the test "
                "instead"
            )
            pytest.fail(message, pytrace=False)
    pytest.fail(f"the fixtures cannot be sent to the ranks ({together})", pytrace=False)


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
    item: pytest.Function, spec: RanksSpec, *, directory: Path, arguments: tuple[bytes, bool]
) -> RankJob:
    config = item.config
    filters = [(arg, False) for arg in config.getini("filterwarnings")]
    filters += [(arg, True) for arg in config.known_args_namespace.pythonwarnings or []]
    filters += [
        (arg, False) for mark in item.iter_markers(name="filterwarnings") for arg in mark.args
    ]
    environ = dict(os.environ)
    if spec.backend is None:
        # The default is gloo on the CPU on every machine, GPUs or not.
        environ["CUDA_VISIBLE_DEVICES"] = ""
    return RankJob(
        module=item.module.__name__,
        cls=item.cls.__name__ if item.cls is not None else None,
        function=item.originalname,
        arguments=arguments[0],
        wants_dist_info=arguments[1],
        world_size=spec.world_size,
        directory=str(directory),
        backend=spec.backend or "gloo",
        group_timeout=spec.group_timeout,
        sys_path=list(sys.path),
        environ=environ,
        warning_filters=tuple(filters),
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


_pools: dict[tuple[int, str | None], _Pool] = {}


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
    spec = read_marker(marker)
    _check_backend(spec.world_size, spec.backend)
    arguments = _arguments(item)  # before anything is created: it may fail the test
    directory = Path(tempfile.mkdtemp(prefix="helios-ranks-"))
    try:
        job = _job(item, spec, directory=directory, arguments=arguments)
        if reuse:
            _run_reused(job, directory, spec, item.config)
        else:
            _run_fresh(job, directory, spec.timeout, item.config)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _run_reused(job: RankJob, directory: Path, spec: RanksSpec, config: pytest.Config) -> None:
    # Ranks that once ran nccl keep CUDA initialized: kept apart from the gloo ones.
    key = (spec.world_size, spec.backend)
    pool = _pools.pop(key, None) or _Pool(forkserver_context(config), spec.world_size)
    for conn in pool.conns:
        conn.send(job)
    try:
        _collect(directory, pool.processes, dict(pool.conns), spec.timeout)
    except BaseException:
        pool.close()
        raise
    _pools[key] = pool


def _run_fresh(job: RankJob, directory: Path, timeout: float, config: pytest.Config) -> None:
    context = forkserver_context(config)
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
    pending = dict(conns)
    ended: dict[int, Outcome] = {}
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
        _receive(ready, pending, processes, ended)
        if ended:
            _settle(pending, processes, ended)
            _raise(ended, directory, processes)


def _receive(
    ready: list[Any],
    pending: dict[Connection, int],
    processes: list[BaseProcess],
    ended: dict[int, Outcome],
) -> None:
    """Read the outcomes of the ``ready`` ranks; keep those that did not pass."""
    for conn in ready:
        assert isinstance(conn, Connection)
        rank = pending.pop(conn)
        try:
            outcome: Outcome = conn.recv()
        except EOFError:
            processes[rank].join(5)
            code = processes[rank].exitcode
            text = f"rank {rank} exited (status {code}) without a result"
            # A rank that died is taken for the cause of what the others then raise.
            outcome = Outcome("failed", text, -math.inf)
        if outcome.kind != "passed":
            ended[rank] = outcome


def _settle(
    pending: dict[Connection, int], processes: list[BaseProcess], ended: dict[int, Outcome]
) -> None:
    """Read the other ranks' outcomes as long as they keep coming, ``_SETTLE`` s apart.

    A failing rank usually makes the others fail too (their collectives lose a peer),
    and the rank whose outcome is read first need not be the one that failed first.
    """
    quiet_until = time.monotonic() + _SETTLE
    while pending and (left := quiet_until - time.monotonic()) > 0:
        ready = wait(list(pending), timeout=left)
        if ready:
            _receive(ready, pending, processes, ended)
            quiet_until = time.monotonic() + _SETTLE


def _raise(ended: dict[int, Outcome], directory: Path, processes: list[BaseProcess]) -> None:
    """Report the rank whose test ended first, naming the ranks that failed after it."""
    rank, (kind, text, _) = min(ended.items(), key=lambda item: (item[1].when, item[0]))
    _kill(processes)
    if kind == "skipped":
        pytest.skip(f"rank {rank}: {text}")
    if kind == "xfailed":
        pytest.xfail(f"rank {rank}: {text}")
    output = _output(directory, rank)
    message = f"rank {rank} of {len(processes)} failed:\n{text.rstrip()}"
    if output:
        message += f"\n{output}"
    after = sorted(other for other in ended if other != rank)
    if after:
        message += f"\nrank(s) {after} failed after rank {rank}"
    pytest.fail(message, pytrace=False)
