"""Run one ``ranks`` test on its ranks, from the pytest process.

Ranks are forked from the session's forkserver (:mod:`helios_pg._testing._forkserver`),
whose process already imported torch and helios_pg. The parent waits on the ranks'
pipes and on their processes' exits (a rank that exits without a result fails the test
at once, with its exit status, whatever its children hold): after a failure it reads the
outcomes that follow it closely, names the rank that failed first and kills the others;
at the deadline it calls the hang watchdog's roll (every rank says where it is, and the
report's first line names the culprits) and asks every rank still running for its
Python stack (``SIGUSR1``), then all are killed. Killing a rank kills its process group:
nothing a rank started outlives its test, which passes or fails.
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
from pathlib import Path
from typing import NoReturn

import pytest

from helios_pg._testing._forkserver import forkserver_context
from helios_pg._testing._marker import RanksSpec, read_marker
from helios_pg._testing._processes import RankProcess
from helios_pg._testing._rank import DIST_INFO, Outcome, RankJob, main, serve
from helios_pg._testing._rollcall import call_roll, dump_text, hang_line

__all__ = ["close_pools", "run_on_ranks"]

_STACK_WAIT = 1.0
# After the stacks' wait, how long the ranks' answers to the roll call are waited for.
_ANSWER_WAIT = 4.0
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


def _kill(ranks: list[RankProcess]) -> None:
    for rank in ranks:
        rank.kill()
    for rank in ranks:
        rank.reap()


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
        self.ranks: list[RankProcess] = []
        for rank in range(world_size):
            parent, child = context.Pipe()
            self.ranks.append(RankProcess.start(context, rank, parent, serve, (rank, child)))

    def close(self) -> None:
        for rank in self.ranks:
            with contextlib.suppress(OSError):
                rank.conn.send(None)
        for rank in self.ranks:
            rank.process.join(2)
        _kill(self.ranks)
        for rank in self.ranks:
            rank.conn.close()


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
    for rank in pool.ranks:
        rank.conn.send(job)
    try:
        _collect(directory, pool.ranks, spec.timeout)
    except BaseException:
        pool.close()
        raise
    for rank in pool.ranks:
        rank.end_strays()
    _pools[key] = pool


def _run_fresh(job: RankJob, directory: Path, timeout: float, config: pytest.Config) -> None:
    context = forkserver_context(config)
    ranks: list[RankProcess] = []
    try:
        for rank in range(job.world_size):
            receiver, sender = context.Pipe(duplex=False)
            ranks.append(RankProcess.start(context, rank, receiver, main, (rank, job, sender)))
        _collect(directory, ranks, timeout)
    finally:
        _kill(ranks)
        for started in ranks:
            started.conn.close()


def _collect(directory: Path, ranks: list[RankProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = {rank.rank: rank for rank in ranks}
    ended: dict[int, Outcome] = {}
    while pending:
        remaining = deadline - time.monotonic()
        ready = _wait(pending, remaining) if remaining > 0 else []
        if not ready:
            _hang(directory, ranks, sorted(pending), timeout)
        _receive(ready, pending, ended)
        if ended:
            _settle(pending, ended)
            _raise(ended, directory, ranks)


def _wait(pending: dict[int, RankProcess], timeout: float) -> list[RankProcess]:
    """The pending ranks (in their order) that sent something or exited within ``timeout`` s."""
    watched: list[Connection | int] = []
    for rank in pending.values():
        watched += [rank.conn, rank.sentinel]
    found = set(wait(watched, timeout))
    return [rank for rank in pending.values() if rank.conn in found or rank.sentinel in found]


def _outcome(rank: RankProcess) -> Outcome:
    """The rank's outcome; one that exited without sending it failed, by its exit status."""
    with contextlib.suppress(EOFError, OSError):
        if rank.conn.poll():
            outcome: Outcome = rank.conn.recv()
            return outcome
    # A rank that died is taken for the cause of what the others then raise.
    return Outcome("failed", rank.exit_text(), -math.inf)


def _receive(
    ready: list[RankProcess], pending: dict[int, RankProcess], ended: dict[int, Outcome]
) -> None:
    """Read the outcomes of the ``ready`` ranks; keep those that did not pass."""
    for rank in ready:
        del pending[rank.rank]
        outcome = _outcome(rank)
        if outcome.kind != "passed":
            ended[rank.rank] = outcome


def _settle(pending: dict[int, RankProcess], ended: dict[int, Outcome]) -> None:
    """Read the other ranks' outcomes as long as they keep coming, ``_SETTLE`` s apart.

    A failing rank usually makes the others fail too (their collectives lose a peer),
    and the rank whose outcome is read first need not be the one that failed first.
    """
    quiet_until = time.monotonic() + _SETTLE
    while pending and (left := quiet_until - time.monotonic()) > 0:
        ready = _wait(pending, left)
        if ready:
            _receive(ready, pending, ended)
            quiet_until = time.monotonic() + _SETTLE


def _hang(
    directory: Path, ranks: list[RankProcess], running: list[int], timeout: float
) -> NoReturn:
    """Report a test past its deadline: where each rank is, the culprits, every stack."""
    call_roll(directory)
    for rank in ranks:
        rank.signal(signal.SIGUSR1)
    time.sleep(_STACK_WAIT)
    lead = hang_line(directory, running=running, world_size=len(ranks), wait=_ANSWER_WAIT)
    stacks = "\n".join(
        f"--- rank {rank} stack ---\n{dump_text(directory, rank) or '(finished, no stack)'}"
        for rank in range(len(ranks))
    )
    message = (
        f"{lead}\nrank(s) {running} of {len(ranks)} still running after the ranks "
        f"timeout of {timeout:g} s; every rank's stack:\n{stacks}"
    )
    pytest.fail(message, pytrace=False)


def _raise(ended: dict[int, Outcome], directory: Path, ranks: list[RankProcess]) -> None:
    """Report the rank whose test ended first, naming the ranks that failed after it."""
    rank, (kind, text, _) = min(ended.items(), key=lambda item: (item[1].when, item[0]))
    _kill(ranks)
    if kind == "skipped":
        pytest.skip(f"rank {rank}: {text}")
    if kind == "xfailed":
        pytest.xfail(f"rank {rank}: {text}")
    output = _output(directory, rank)
    message = f"rank {rank} of {len(ranks)} failed:\n{text.rstrip()}"
    if output:
        message += f"\n{output}"
    after = sorted(other for other in ended if other != rank)
    if after:
        message += f"\nrank(s) {after} failed after rank {rank}"
    pytest.fail(message, pytrace=False)
