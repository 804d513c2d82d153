"""One rank of a ``ranks`` test: form the group, run the test function, report.

Runs in a process forked by :mod:`helios_pg._testing._forkserver`'s server. Its
stdout and stderr go to files the parent reads; ``SIGUSR1`` dumps every thread's Python
stack to a file of its own (faulthandler), which the parent asks for when the test runs
past its deadline, when it also calls the hang watchdog's roll
(:mod:`helios_pg._testing._rollcall`). Each rank leads a process group of its own
(:mod:`helios_pg._testing._processes`). The outcome goes back over a pipe as an
:class:`Outcome`.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from helios_pg._reports import RankDumpFile
from helios_pg._testing._processes import own_group
from helios_pg._testing._rollcall import answer_roll_calls

__all__ = ["DIST_INFO", "RankJob", "main", "run", "serve"]

DIST_INFO = "dist_info"


@dataclass(frozen=True)
class RankJob:
    """What every rank of one test needs: where the test is and what it is called with."""

    module: str
    cls: str | None
    function: str
    arguments: bytes
    """The pickled fixture values, ``dist_info`` left out."""
    wants_dist_info: bool
    world_size: int
    directory: str
    backend: str
    group_timeout: float
    """The process group's timeout, in seconds."""
    sys_path: list[str]
    environ: dict[str, str]
    warning_filters: tuple[tuple[str, bool], ...]
    """pytest's warning filters for the test, in the order pytest applies them: the ini
    file's, then ``-W``'s (escaped), then the test's ``filterwarnings`` marks."""


class Outcome(NamedTuple):
    """How one rank's test ended, as sent to the parent."""

    kind: str
    """``passed``, ``failed``, ``skipped`` or ``xfailed``."""
    text: str
    """The traceback of a failure, the reason of a skip or xfail; empty for a pass."""
    when: float
    """``time.monotonic()`` when it ended (one clock for every process of a host), so
    the parent can tell the first failure from the failures it caused in other ranks."""


def _outcome(exc: BaseException) -> Outcome:
    import pytest

    when = time.monotonic()
    if isinstance(exc, pytest.skip.Exception):
        return Outcome("skipped", str(exc.msg), when)
    if isinstance(exc, pytest.xfail.Exception):
        return Outcome("xfailed", str(exc.msg), when)
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next  # from the test's own frame on, as pytest shows it
    return Outcome("failed", "".join(traceback.format_exception(type(exc), exc, tb)), when)


def _redirect(directory: Path, rank: int) -> None:
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(directory / f"{name}.{rank}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def _apply_warning_filters(filters: tuple[tuple[str, bool], ...]) -> None:
    """Filter warnings as pytest does around a test, so ``filterwarnings`` works here."""
    from _pytest.config import parse_warning_filter

    if not sys.warnoptions:
        warnings.filterwarnings("always", category=DeprecationWarning)
        warnings.filterwarnings("always", category=PendingDeprecationWarning)
    for arg, escape in filters:
        warnings.filterwarnings(*parse_warning_filter(arg, escape=escape))


def _import_test_module(name: str) -> ModuleType:
    """Import the test's module with pytest's assertion rewriting, as pytest imports it.

    A failing ``assert`` then explains itself (``assert 2.0 == 3.0``, with the values of
    its parts) in the rank's traceback, as in a plain test.
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return importlib.import_module(name)
    from _pytest.assertion.rewrite import rewrite_asserts

    source = Path(spec.origin).read_bytes()
    tree = ast.parse(source, filename=spec.origin)
    rewrite_asserts(tree, source, spec.origin)
    code = compile(tree, spec.origin, "exec", dont_inherit=True)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - the test module's own code, rewritten
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _function(job: RankJob) -> Any:
    module = _import_test_module(job.module)
    if job.cls is None:
        return getattr(module, job.function)
    return getattr(getattr(module, job.cls)(), job.function)


def run(rank: int, job: RankJob) -> Outcome:
    """Form this rank's group, run the test function on it, and say how it ended.

    Args:
        rank: This process's rank.
        job: The test and how to run it.

    Returns:
        The outcome: passed, failed (with the traceback), skipped or xfailed (with the
        reason).
    """
    directory = Path(job.directory)
    _redirect(directory, rank)
    # What the parent's SIGUSR1 asks for, when the test runs past its deadline.
    stacks = RankDumpFile(directory, rank).open(threading.get_ident(), signal_number=signal.SIGUSR1)
    os.environ.clear()
    os.environ.update(job.environ)
    rank_variables = {"RANK": rank, "WORLD_SIZE": job.world_size, "LOCAL_RANK": rank}
    os.environ.update({name: str(value) for name, value in rank_variables.items()})
    os.environ["LOCAL_WORLD_SIZE"] = str(job.world_size)
    # These variables describe the rank, whatever launcher started pytest (srun -n 1
    # pytest leaves SLURM_PROCID and friends describing one task).
    os.environ["HELIOS_LAUNCHER"] = "env"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    sys.path[:] = job.sys_path
    result: Outcome
    try:
        from torch._C._distributed_c10d import FileStore

        import helios_pg
        from helios_env import get_dist_info

        store = FileStore(str(directory / "store"), job.world_size)
        helios_pg.init(
            backend=job.backend,
            store=store,
            rank=rank,
            world_size=job.world_size,
            timeout=timedelta(seconds=job.group_timeout),
        )
        answer_roll_calls(rank, job.world_size, directory)
        arguments: dict[str, Any] = pickle.loads(job.arguments)  # noqa: S301
        if job.wants_dist_info:
            arguments[DIST_INFO] = get_dist_info()
        with warnings.catch_warnings():
            _apply_warning_filters(job.warning_filters)
            _function(job)(**arguments)
        helios_pg.shutdown()
        result = Outcome("passed", "", time.monotonic())
    except BaseException as exc:
        result = _outcome(exc)
    sys.stdout.flush()
    sys.stderr.flush()
    stacks.close()
    return result


def main(rank: int, job: RankJob, conn: Connection) -> None:
    """Run one rank of one test, send its outcome to the parent, and exit.

    Args:
        rank: This process's rank.
        job: The test and how to run it.
        conn: Where the outcome goes (see :func:`run`).
    """
    own_group()
    conn.send(run(rank, job))
    conn.close()
    # A failed rank may leave the group in a collective: leave without tearing it down.
    os._exit(0)


def serve(rank: int, conn: Connection) -> None:
    """Run one test after another as this rank, until told to stop or a test fails.

    Each test gets a group of its own, destroyed when it passes; after any other
    outcome the process exits, and the parent starts fresh ranks for the next test.

    Args:
        rank: This process's rank.
        conn: Jobs come in (None to stop); outcomes go out (see :func:`run`).
    """
    own_group()
    while True:
        job = conn.recv()
        if job is None:
            break
        result = run(rank, job)
        conn.send(result)
        if result.kind != "passed":
            break
    conn.close()
    os._exit(0)
