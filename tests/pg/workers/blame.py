"""Worker: a job of three ranks where the rank to blame is not the obvious one.

``HELIOS_TEST_BLAME`` says which case:

- ``recovered``: rank 1 is late twice (until the roll call on it was held, inside the
  group timeout) and catches up each time; once both hangs ended, rank 2 raises
  ``ValueError`` while the others wait. Rank 2 is to blame, each of the two hangs had a
  roll call, and the wait after the failure has none.
- ``two_groups``: rank 2 sleeps outside any collective while rank 1 waits in the
  default group and rank 0 in a group of ranks 0 and 1. Rank 2 is to blame.
- ``broken_str``: rank 1 raises an exception whose ``__str__`` raises.
- ``own_timeout``: rank 1 raises ``TimeoutError`` in its own code.
- ``huge``: rank 1 raises ``ValueError`` with a message of a million characters.
- ``two_failures``: rank 2 raises ``TypeError``, rank 1 ``ValueError`` 50 ms later.
- ``thread_wait``: rank 1's loader thread dies; its main thread waits on the thread's
  queue, which never fills, until torchrun stops it.
- ``caught_up_elsewhere``: ranks 1 and 2 share a group; rank 0 waits in a world
  barrier while rank 2 straggles, named by the roll call; rank 2 then catches up in
  its group's all-reduce with rank 1, and rank 1, once rank 2 has taken back its error
  file, dies of SIGKILL (as of the OOM killer). Rank 2 is to blame for nothing.
- ``dead_metrics``: rank 2's metrics thread dies at start and rank 2 trains on; later
  rank 1 sleeps outside any collective. ``all_dead_metrics``: every rank's metrics
  thread dies at start, the rest the same. Rank 1's hang is to blame, not a thread.

Run with ``HELIOS_HANG_TIMEOUT`` set for ``recovered``, ``two_groups`` and the metrics
cases.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from helios_pg import process_group
from helios_pg._reports import _watchdog
from tests.support.worker import group_timeout

HUGE = 1_000_000
ERROR_FILE = "TORCHELASTIC_ERROR_FILE"


class BrokenStrError(Exception):
    """An exception that cannot be rendered by ``str``."""

    def __str__(self) -> str:
        message = "__str__ is broken"
        raise RuntimeError(message)


def convicted(present: bool) -> bool:
    """Whether this rank's hang error file is there (``present``) or gone, as asked.

    A culprit's watchdog writes it once it has read the roll call's verdict, and takes
    it back once that hang ended: events, whatever the speed of the machine.
    """
    return Path(os.environ[ERROR_FILE]).exists() == present


def late_until_convicted() -> None:
    """Stay out of the collective until the roll call on this hang was held."""
    deadline = time.monotonic() + group_timeout().total_seconds()
    for present in (False, True):  # the last hang ended here, then this one's verdict
        while not convicted(present) and time.monotonic() < deadline:
            time.sleep(0.05)


def hangs_ended(count: int) -> None:
    """Wait until this rank's watchdog saw ``count`` hangs end (its round moved on)."""
    deadline = time.monotonic() + group_timeout().total_seconds()
    watchdog = _watchdog._watchdog
    while watchdog is not None and watchdog.round.number < count:
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def recovered(rank: int) -> None:
    for _ in range(2):
        if rank == 1:
            late_until_convicted()
        dist.all_reduce(torch.ones(1))
        dist.all_reduce(torch.ones(1))  # the job went on
    if rank == 2:
        hangs_ended(2)
        message = "bad batch 9"
        raise ValueError(message)
    dist.all_reduce(torch.ones(1))


def two_groups(rank: int) -> None:
    pair = dist.new_group([0, 1])
    if rank == 2:
        time.sleep(60)  # outside any collective
    elif rank == 0:
        assert isinstance(pair, dist.ProcessGroup)
        dist.all_reduce(torch.ones(1), group=pair)  # rank 1 is elsewhere
    dist.all_reduce(torch.ones(1))


def own_failure(rank: int, case: str) -> None:
    if rank == 1:
        time.sleep(0.2)  # the others are in the next all-reduce by now
        if case == "broken_str":
            raise BrokenStrError
        if case == "own_timeout":
            message = "reading shard 17 timed out"
            raise TimeoutError(message)
        if case == "huge":
            raise ValueError("x" * HUGE)
    dist.all_reduce(torch.ones(1))


def two_failures(rank: int) -> None:
    if rank == 2:
        message = "rank 2's batch"
        raise TypeError(message)
    if rank == 1:
        time.sleep(0.05)
        message = "rank 1's batch"
        raise ValueError(message)
    dist.all_reduce(torch.ones(1))


def thread_wait(rank: int) -> None:
    if rank == 1:
        batches: queue.Queue[int] = queue.Queue()

        def load() -> None:
            message = "shard 3 is unreadable"
            raise OSError(message)

        threading.Thread(target=load, name="loader", daemon=True).start()
        batches.get(timeout=120)  # the loader never puts a batch
    dist.all_reduce(torch.ones(1))


def caught_up_elsewhere(rank: int) -> None:
    pair = dist.new_group([1, 2])
    if rank == 2:
        late_until_convicted()
    if rank in (1, 2):
        assert isinstance(pair, dist.ProcessGroup)
        dist.all_reduce(torch.ones(1), group=pair)  # rank 2 catches up here
    if rank == 1:
        mine = Path(os.environ[ERROR_FILE])
        theirs = mine.parent.parent / "2" / mine.name
        deadline = time.monotonic() + group_timeout().total_seconds()
        while theirs.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # until rank 2 has taken back its file
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def dead_metrics(rank: int, *, every_rank: bool) -> None:
    if every_rank or rank == 2:

        def report() -> None:
            message = "metrics endpoint unreachable"
            raise ConnectionError(message)

        thread = threading.Thread(target=report, name="metrics", daemon=True)
        thread.start()
        thread.join()
    for _ in range(3):
        dist.all_reduce(torch.ones(1))  # it trains on
    if rank == 1:
        time.sleep(60)  # outside any collective
    dist.all_reduce(torch.ones(1))


def main() -> None:
    case = os.environ["HELIOS_TEST_BLAME"]
    with process_group(timeout=group_timeout()) as info:
        dist.all_reduce(torch.ones(1))
        if case == "recovered":
            recovered(info.rank)
        elif case == "two_groups":
            two_groups(info.rank)
        elif case == "two_failures":
            two_failures(info.rank)
        elif case == "thread_wait":
            thread_wait(info.rank)
        elif case == "caught_up_elsewhere":
            caught_up_elsewhere(info.rank)
        elif case in ("dead_metrics", "all_dead_metrics"):
            dead_metrics(info.rank, every_rank=case == "all_dead_metrics")
        else:
            own_failure(info.rank, case)


if __name__ == "__main__":
    main()
