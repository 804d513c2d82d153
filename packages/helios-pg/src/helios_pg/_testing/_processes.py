"""The ranks' processes: each leads a process group of its own, ended with all it started.

A rank calls :func:`own_group` first: every process it then starts (and they start) is
in its group unless it leaves it (a new session), so the parent ends them all with one
signal, whether the rank is still alive or exited first (:meth:`RankProcess.kill`). A
rank kept for the next test (``--ranks-reuse``) stays; only the rest of its group is
ended (:meth:`RankProcess.end_strays`). The parent learns that a rank exited from its
process's sentinel, which the forkserver makes readable when it reaps the rank, whatever
the rank's children hold (they inherit its end of the pipe it reports on).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

__all__ = ["RankProcess", "own_group"]

_ROUNDS = 3
_JOIN = 5.0


def own_group() -> None:
    """Make this process the leader of a new process group, as a rank's first step."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name, or None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _start_time(pid: int | None) -> str | None:
    fields = _stat(pid) if pid is not None else None
    return fields[19] if fields is not None and len(fields) > 19 else None


def _members(group: int) -> list[int]:
    """The live processes of process group ``group`` (zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and len(fields) > 2 and fields[0] != "Z" and fields[2] == str(group):
            found.append(int(entry.name))
    return found


@dataclass
class RankProcess:
    """One rank's process, the parent's end of its pipe, and its process group."""

    rank: int
    process: BaseProcess
    conn: Connection
    started: str | None
    """Its start time in ``/proc``, which tells it from a later process given its pid."""

    @classmethod
    def start(
        cls,
        context: ForkServerContext,
        rank: int,
        conn: Connection,
        target: Callable[..., None],
        args: tuple[Any, ...],
    ) -> RankProcess:
        """Fork a rank from the forkserver; ``args`` end with the rank's end of ``conn``.

        Args:
            context: The session's forkserver.
            rank: The rank.
            conn: The parent's end of the pipe to the rank.
            target: What the rank runs.
            args: Its arguments, the last of them the rank's end of the pipe (closed
                here once the rank has it).

        Returns:
            The started rank.
        """
        process = context.Process(target=target, args=args, daemon=True)
        process.start()
        args[-1].close()
        return cls(rank, process, conn, _start_time(process.pid))

    @property
    def sentinel(self) -> int:
        """Readable once the rank's process has exited (see the module's docstring)."""
        return self.process.sentinel

    def _group_is_ours(self) -> bool:
        """Whether the group with the rank's pid as id can only be the rank's.

        While the group has a member, no new process gets its id as pid; so a process
        with that pid that is not the rank means the rank's group is gone.
        """
        pid = self.process.pid
        if pid is None:
            return False
        now = _start_time(pid)
        return now is None or now == self.started

    def _end_group(self) -> None:
        if self._group_is_ours():
            assert self.process.pid is not None
            with contextlib.suppress(OSError):  # empty, or not made yet
                os.killpg(self.process.pid, signal.SIGKILL)

    def kill(self) -> None:
        """Kill the rank and every process in its group, without waiting for them."""
        self._end_group()
        if self.process.is_alive():
            self.process.kill()

    def reap(self) -> None:
        """Wait for the killed rank, then end what its group may have started meanwhile."""
        self.process.join(_JOIN)
        self._end_group()

    def end_strays(self) -> None:
        """Kill the processes of the rank's group but the rank (kept for the next test)."""
        pid = self.process.pid
        if pid is None or not self._group_is_ours():
            return
        for _ in range(_ROUNDS):  # a stray may fork while the others are killed
            strays = [member for member in _members(pid) if member != pid]
            if not strays:
                return
            for stray in strays:
                with contextlib.suppress(OSError):
                    os.kill(stray, signal.SIGKILL)

    def signal(self, number: int) -> None:
        """Send the rank signal ``number``, if it is alive."""
        if self.process.is_alive() and self.process.pid is not None:
            with contextlib.suppress(OSError):
                os.kill(self.process.pid, number)

    def exit_text(self) -> str:
        """How the rank ended without a result: its exit status, or the signal that killed it.

        Returns:
            One line, such as ``rank 1 exited with status 3, without a result``.
        """
        self.process.join(_JOIN)
        code = self.process.exitcode
        if code is None:
            return f"rank {self.rank} closed its pipe without a result, and is still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "a signal"
            return f"rank {self.rank} was killed by {name} (signal {-code}), without a result"
        return f"rank {self.rank} exited with status {code}, without a result"
