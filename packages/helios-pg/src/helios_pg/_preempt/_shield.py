"""Child processes that outlive the job's stop signal until their rank ends them.

A cluster stops a job by signalling every process of it at once: SLURM's ``scancel
--signal``, a preemption and the ``--signal=SIG@N`` warning reach every process of a
step, and torchrun signals each worker's whole process group. A DataLoader worker then
dies: of a SIGTERM, which torch's worker handler turns back into the default action
unless the worker's parent sent it, or of a SIGUSR1, whose default action ends a process.
The rank's next batch raises "DataLoader worker ... exited unexpectedly" before any rank
reaches ``should_stop()``, and nothing is saved.

While a watcher is open, DataLoader workers start with its signals blocked: children
inherit the blocked set of the thread that starts them, through ``fork`` and ``exec``
alike, so a signal sent to them stays pending, unseen, and they serve batches until the
rank ends them as it always does (a ``None`` on their queue when the iterator goes).
Their rank may still end them with SIGTERM, as ``Process.terminate()`` and
multiprocessing's exit handler do: the first thing each worker runs (its
``worker_init_fn``, then the user's) starts a thread that takes the blocked signals and
ends the worker on one its rank sent, as torch's own handler does for its parent's.

A forkserver started by a shielded iterator keeps the signals blocked (so that the job's
signal does not end it, which would end its workers too), and so does every process it
forks later: another ``multiprocessing`` child of that start method then ignores
``terminate()``'s SIGTERM too; end it with ``kill()``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

__all__ = ["Guard", "blocked", "install", "unshielded"]

_installed: list[Callable[[], frozenset[int]]] = []


@contextlib.contextmanager
def blocked(numbers: Collection[int], start_method: str | None = None) -> Iterator[None]:
    """Block ``numbers`` in the calling thread while the body starts child processes.

    Args:
        numbers: The signals the children must not see.
        start_method: The multiprocessing start method of the children the body starts,
            where it is known; None where the body may use any.
    """
    if not numbers:
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, numbers)
    try:
        if start_method != "fork":
            # Starting multiprocessing's resource tracker, which the first spawn or
            # forkserver child of a process does, unblocks SIGINT and SIGTERM in the
            # calling thread (CPython's resource_tracker.ensure_running): start it here,
            # and block them again before the children start.
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, numbers)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class Guard:
    """A DataLoader's ``worker_init_fn`` that first starts the worker's signal thread.

    Pickled by reference to this module into spawned and forkserver workers.
    """

    def __init__(self, numbers: frozenset[int], then: Callable[[int], object] | None) -> None:
        self.numbers = numbers
        self.rank = os.getpid()
        self.then = then

    def __call__(self, worker_id: int) -> None:
        args = (self.numbers, self.rank)
        threading.Thread(target=_take, args=args, name="helios-shield", daemon=True).start()
        if self.then is not None:
            self.then(worker_id)


def _take(numbers: frozenset[int], rank: int) -> None:
    """Take the worker's blocked signals for good: ignore the job's, end on its rank's."""
    while True:
        info = signal.sigwaitinfo(numbers)
        if info.si_pid == rank:
            os._exit(0)  # torch's worker ends so on its parent's SIGTERM


def _start_method(context: Any) -> str | None:
    """The start method of a DataLoader's ``multiprocessing_context`` (None: the default)."""
    import multiprocessing

    if context is None:
        return multiprocessing.get_start_method()  # fixes the default, as torch's start does
    method = getattr(context, "get_start_method", None)
    return str(method()) if callable(method) else None


def unshielded(pids: Collection[int], numbers: Collection[int]) -> list[int]:
    """The processes of ``pids`` that do not block every signal of ``numbers``.

    Read from ``/proc``; a process that is gone, or a system without ``/proc``, is not
    counted.
    """
    wanted = 0
    for number in numbers:
        wanted |= 1 << (number - 1)
    found = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("SigBlk:"):
                if int(line.split()[1], 16) & wanted != wanted:
                    found.append(pid)
                break
    return found


def _warn_unshielded(pids: list[int], numbers: Collection[int]) -> None:
    names = ", ".join(signal.Signals(number).name for number in sorted(numbers))
    message = (
        f"helios preemption: DataLoader workers {', '.join(map(str, pids))} do not block "
        f"{names}: they were forked by a forkserver started before preemption(), and a "
        "stop signal sent to every process of the job ends them; call preemption() "
        "before the first DataLoader with workers is iterated\n"
    )
    sys.stderr.write(message)


def install(watched: Callable[[], frozenset[int]]) -> None:
    """Start every DataLoader's workers with the signals ``watched()`` names blocked.

    Wraps the constructor of torch's multi-process DataLoader iterator, once per process;
    ``watched()`` is asked at each iterator, so a closed watcher shields nothing. A
    worker that still does not block them (forked by a forkserver started earlier) is
    named on stderr, once.
    """
    if _installed:
        _installed[0] = watched
        return
    from torch.utils.data import dataloader

    iterator = dataloader._MultiProcessingDataLoaderIter
    original = iterator.__init__
    warned: list[bool] = []

    @functools.wraps(original)
    def start_shielded(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        numbers = _installed[0]()
        if not numbers:
            original(self, loader, *args, **kwargs)
            return
        theirs = loader.worker_init_fn
        loader.worker_init_fn = Guard(numbers, theirs)
        try:
            with blocked(numbers, _start_method(loader.multiprocessing_context)):
                original(self, loader, *args, **kwargs)
        finally:
            loader.worker_init_fn = theirs
        if not warned:
            pids = [worker.pid for worker in getattr(self, "_workers", ())]
            missed = unshielded([pid for pid in pids if pid is not None], numbers)
            if missed:
                warned.append(True)
                _warn_unshielded(missed, numbers)

    _installed.append(watched)
    iterator.__init__ = start_shielded  # type: ignore[method-assign]
