"""The hang watchdog's roll call in a ``ranks`` test, called by the parent at the deadline.

Each rank runs helios-pg's hang watchdog (:mod:`helios_pg._reports`) on a store of its
own, with a timeout it never reaches: the collectives it is in are noted as in any watched
job, and it never calls the roll itself. When the test runs past its deadline,
the parent calls the roll (:func:`call_roll`): every rank that can answers where it is,
as it would in a job (``in all_reduce #2 at test_x.py:12``, ``in no collective, at
test_x.py:20``), and the parent groups the answers with the watchdog's own verdict
(``helios_pg._reports.decide``) into the report's first line (:func:`hang_line`). A rank that
cannot answer (its main thread holds the GIL in C) is placed by its faulthandler dump
(``helios_pg._reports.RankDumpFile``), which the parent asks for at the same time.

The store is a folder, one file a key (:class:`FolderStore`), so the parent needs no
torch to call the roll.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from helios_pg._reports import Answer

__all__ = [
    "FolderStore",
    "answer_roll_calls",
    "call_roll",
    "dump_text",
    "hang_line",
]

_KEY = "ranks/hang"
# The watchdog's first round of roll calls, its trigger and its answers.
_ROUND = f"{_KEY}/0"
_NEVER = 1e7
"""The watchdog's own timeout, in seconds: beyond any test's deadline."""
_POLL = 0.05
_FINISHED = "finished the test"


class FolderStore:
    """A key-value store in a folder, one file a key: what the roll call asks of a store.

    Args:
        folder: The folder, created if missing.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.folder / quote(key, safe="")

    def set(self, key: str, value: str | bytes) -> None:
        """Set ``key`` to ``value``, atomically."""
        path = self._path(key)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        temporary.write_bytes(value.encode() if isinstance(value, str) else value)
        temporary.replace(path)

    def get(self, key: str) -> bytes:
        """The value of ``key``.

        Raises:
            FileNotFoundError: ``key`` was never set.
        """
        return self._path(key).read_bytes()

    def check(self, keys: list[str]) -> bool:
        """Whether every one of ``keys`` is set."""
        return all(self._path(key).exists() for key in keys)

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        """Set ``key`` to ``desired`` if it holds ``expected`` (unset for ""); as torch's stores.

        Returns:
            The value ``key`` holds afterwards (``expected`` when unset and not set).
        """
        with (self.folder / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                current: bytes | None = self.get(key)
            except FileNotFoundError:
                current = None
            if current == expected.encode() or (current is None and not expected):
                self.set(key, desired)
                return desired.encode()
            return current if current is not None else expected.encode()


def dump_text(directory: Path, rank: int) -> str:
    """A rank's dumped stacks, without the header and the watchdog's thread; empty if none."""
    from helios_pg._reports import WATCHDOG_SOURCE, RankDumpFile

    _, threads = RankDumpFile(directory, rank).threads()
    kept = [
        part for part in threads if not (part.startswith("Thread ") and WATCHDOG_SOURCE in part)
    ]
    return "\n\n".join(kept)


def answer_roll_calls(rank: int, world_size: int, directory: Path) -> None:
    """Start this rank's hang watchdog, to answer when the parent calls the roll.

    ``helios_pg.shutdown()`` stops it, as any watchdog. Where it cannot start, the
    report goes without its answers, and says so.

    Args:
        rank: This rank.
        world_size: The number of ranks.
        directory: The test's folder.
    """
    from helios_pg._reports import DIRECTORY_VARIABLE, SIGNAL_VARIABLE, start_watchdog

    # Its reports in the test's folder; no signal of the test's taken over.
    settings = {DIRECTORY_VARIABLE: str(directory / "hang"), SIGNAL_VARIABLE: "none"}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        start_watchdog(
            rank=rank,
            world_size=world_size,
            store=FolderStore(directory / "roll"),
            key=_KEY,
            timeout=_NEVER,
            job=directory.name,
        )
    except Exception:  # noqa: S110 - the report then has the stacks alone
        pass
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def call_roll(directory: Path) -> None:
    """Ask every rank's watchdog where it is (each answers within its next tick, 1 s)."""
    FolderStore(directory / "roll").set(f"{_ROUND}/hung", "the ranks plugin")


def hang_line(directory: Path, *, running: list[int], world_size: int, wait: float) -> str:
    """The hang report's first line: where each rank is, the culprits first named.

    The ranks that finished the test are said to; of the culprits the verdict names,
    those still running are kept, where there are any (a rank that finished is to blame
    only where the ranks still running wait in a collective).

    Args:
        directory: The test's folder.
        running: The ranks still running.
        world_size: The number of ranks.
        wait: Seconds to wait for the running ranks' answers.

    Returns:
        ``helios hang (culprit: rank 1): rank 0 in all_reduce #1 at test_x.py:12; rank 1
        in no collective, at test_x.py:20``, or a line that says why there is none.
    """
    from helios_pg._reports import Answer, decide

    store = FolderStore(directory / "roll")
    keys = {rank: f"{_ROUND}/answer/{rank}" for rank in running}
    deadline = time.monotonic() + wait
    while not store.check(list(keys.values())) and time.monotonic() < deadline:
        time.sleep(_POLL)
    answers: dict[int, Answer] = {
        rank: Answer(rank, _FINISHED) for rank in range(world_size) if rank not in running
    }
    for rank, key in keys.items():
        with contextlib.suppress(OSError, ValueError):
            answers[rank] = Answer.decode(store.get(key))
    try:
        line, culprits, _ = decide(
            answers, caller=min(running), world_size=world_size, directory=directory
        )
    except Exception as exc:  # the stacks still follow
        return f"helios hang: no verdict ({type(exc).__name__}: {exc})"
    culprits = [rank for rank in culprits if rank in running] or culprits
    if not culprits:
        return f"helios hang: {line}"
    named = f"culprit: rank {culprits[0]}" if len(culprits) == 1 else f"culprits: ranks {culprits}"
    return f"helios hang ({named}): {line}"
