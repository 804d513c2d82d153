"""Say which rank failed first, and why, on every launcher, without a decorator.

:func:`install` (called by ``init()``) chains ``sys.excepthook`` and
``threading.excepthook``, keeping whatever was installed before (torch's own hooks
included). The culprit is decided by one rule, the same in every report: the first
failure in the job's ledger (:mod:`helios_pg._reports._ledger`, the store's order of
publication) that still stands.

- A rank whose own code failed (an uncaught exception that is not a collective broken
  by a peer, :mod:`helios_pg._reports._peer`) publishes ``rank R on HOST failed: <Type>:
  <text>`` in the ledger, through a connection of its own with a short timeout.
- One of a rank's threads that dies publishes at once (``... failed: <Type>: <text>
  (in thread loader)``) and writes its error file then, not at exit, which may never
  come: the rank may be stopped while its main thread waits for that thread.
- A rank whose collective failed because a peer went away, or whose own failure came
  after another's, reads the first failure and puts ``rank R on HOST failed first:
  ...`` first: on its stderr, before its own traceback, and in its error file.
- Under torchrun (``TORCHELASTIC_ERROR_FILE``), the error file is written in
  torchrun's own format, atomically, only by the process that installed the hook, and
  never over a file that ``@record`` wrote. Every failure after the first is dated
  after it (whole seconds, as torchrun reads them), so torchrun's root cause is the
  same rank.

Reporting never depends on the exception behaving (:mod:`helios_pg._reports._render`). A
non-zero ``SystemExit`` that passes through ``shutdown()`` (a ``process_group()``
block) is published at once and written to the error file at exit. A
``KeyboardInterrupt`` (Ctrl-C, or SIGINT to one rank) is a failure like any other:
without it torchrun shows that rank with "Signal 2" alone. ``os._exit()`` and other
signals leave nothing to say: the other ranks then say what they know.
:func:`uninstall` (``shutdown()``) restores the previous hooks, except while an
exception is propagating (``shutdown()`` in a ``finally``, or a ``process_group()``
block): that exception is then reported at once, before the group is destroyed, since
a launcher may stop this rank as soon as another has failed.
``HELIOS_FAILURE_REPORT=0``, or ``init(report_failures=False)``, turns it all off.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any

from helios_env.integration import switch
from helios_pg._reports._error_file import (
    ERROR_FILE_VARIABLE,
    retract_hang_file,
    write_error_file,
)
from helios_pg._reports._ledger import Entry, Kind, Ledger
from helios_pg._reports._peer import is_peer_failure
from helios_pg._reports._render import callstack, headline

__all__ = [
    "OPT_OUT_VARIABLE",
    "Reporter",
    "active",
    "init_succeeded",
    "install",
    "uninstall",
    "unreported_failure",
]

OPT_OUT_VARIABLE = "HELIOS_FAILURE_REPORT"
_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
_READ_WAIT = 0.5  # how long a victim waits for the culprit's line to appear
ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]
ThreadHook = Callable[[threading.ExceptHookArgs], Any]


@dataclass
class Reporter:
    """The failure reporter of one process group: where to publish, and what it saw."""

    rank: int
    ledger: Ledger | None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    previous: ExceptHook | None = None
    previous_thread: ThreadHook | None = None
    kept: _Report | None = None
    written: bool = False
    closed: bool = False
    pending: BaseException | None = None
    reported: BaseException | None = None
    settle: Callable[[], None] | None = None
    """Called before the ledger is read: the hang watchdog says whether a hang ended."""
    own_thread_died: bool = False
    """Whether one of this rank's threads died of its own error: it explains the rank's
    later failure, whether or not the ledger can be read then."""

    def publish(self, what: str, timestamp: int, kind: Kind = "own") -> None:
        """Publish a failure of this rank in the job's ledger."""
        if self.ledger is None:
            return
        line = f"rank {self.rank} on {self.host} failed: {what}"
        with contextlib.suppress(Exception):
            self.ledger.publish(rank=self.rank, line=line, timestamp=timestamp, kind=kind)

    def left(self, how: str) -> None:
        """Publish that this rank leaves the job without an error, ``how``.

        Nobody reads it at the end of a job; a rank whose collective breaks because
        this one left in the middle names it. Only where torchrun's agent serves the
        store, which outlives the ranks: elsewhere rank 0 serves it and may have left
        already, and torch's client would print a warning of its own at a job's end.
        """
        if self.ledger is None or os.getpid() != self.pid:
            return
        if os.environ.get(_AGENT_STORE) != "True":
            return
        if not getattr(self.ledger.store, "ready", True):
            return  # a side channel still opening: the end of a job never waits for it
        line = (
            f"rank {self.rank} on {self.host} left the job early: {how}, without an "
            "error, while other ranks still waited in a collective with it"
        )
        with contextlib.suppress(Exception):
            self.ledger.publish(rank=self.rank, line=line, timestamp=int(time.time()), kind="exit")

    def first(self) -> Entry | None:
        """The job's first failure still standing, waiting briefly for one to appear."""
        if self.ledger is None:
            return None
        with contextlib.suppress(Exception):
            if self.settle is not None:
                self.settle()
            return self.ledger.first(_READ_WAIT)
        return None

    def explain(self, message: str, stack: str, *, own: Kind | None) -> _Report:
        """Publish a failure of this rank's own (``own``), then say who failed first.

        Returns:
            The error file's message and callstack, led by the first failure's line
            where another rank's came first, and its timestamp: after the first's.
        """
        stamp = int(time.time())
        if own is not None:
            self.publish(message, stamp, own)
        if own == "thread":
            # A thread of this rank died of its own error: that is what this rank's
            # file says, whatever failed elsewhere before.
            self.own_thread_died = True
            return _Report(message, stack, stamp, replace_hang=False)
        first = self.first()
        if first is None or first.rank == self.rank:
            if first is not None and first.kind == "hang":
                stamp = first.timestamp  # this rank's hang, which this failure explains
            # A hang's file of this rank is replaced only by its own failure: a
            # collective broken by a peer is what the hang led to. A thread of this
            # rank's that died first explains the failure: its file stays.
            explained = self.own_thread_died or (first is not None and first.kind == "thread")
            return _Report(message, stack, stamp, replace_hang=own is not None and not explained)
        line = first.first_line()
        with contextlib.suppress(Exception):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        return _Report(
            f"{line}\nrank {self.rank} on {self.host}: {message}",
            f"{line}\n{stack}",
            first.later(stamp),
            replace_hang=True,  # another rank's failure came first: no hang of this one's
        )

    def write(self, report: _Report, *, provisional: bool = False) -> None:
        """Write this rank's error file under torchrun, once.

        A provisional file (a thread that died while its rank goes on) is replaced by
        a report that another rank failed first, and withdrawn when the roll call names
        another rank; the rank's own later failure keeps it (the death explains it).
        """
        path = os.environ.get(ERROR_FILE_VARIABLE)
        if path and not self.written:
            written = write_error_file(
                path,
                report.message,
                report.stack,
                report.stamp,
                hang=provisional,
                replace_hang=report.replace_hang,
            )
            self.written = written and not provisional

    def report(
        self,
        kind: type[BaseException],
        exc: BaseException,
        tb: TracebackType | None,
        *,
        outer: FrameType | None = None,
    ) -> None:
        """Handle an uncaught exception of the main thread (before the previous hook).

        ``outer``: where it is met before it reached the program's outer frames
        (``shutdown()`` in a ``finally``), which then lead its traceback.
        """
        if os.getpid() != self.pid or isinstance(exc, SystemExit):
            return  # a SystemExit is told at shutdown() (exiting), where it is one
        own: Kind | None = None if is_peer_failure(exc) else "own"
        stack = callstack(kind, exc, tb, outer=outer)
        self.write(self.explain(headline(exc), stack, own=own))

    def thread_died(self, name: str, args: threading.ExceptHookArgs) -> None:
        """Publish a thread's uncaught exception now, and write the error file now."""
        exc = args.exc_value
        if exc is None or os.getpid() != self.pid:
            return
        own: Kind | None = None if is_peer_failure(exc) else "thread"
        message = f"{headline(exc)} (in thread {name})"
        stack = callstack(args.exc_type, exc, args.exc_traceback)
        # Written now (the rank may be stopped while its main thread waits for this
        # one), but provisional: the rank may train on, and something else end the job.
        self.write(self.explain(message, stack, own=own), provisional=True)

    def exiting(self, exc: SystemExit, outer: FrameType | None = None) -> None:
        """Publish a non-zero ``SystemExit`` passing through ``shutdown()``, and keep it."""
        if exc.code in (0, None) or os.getpid() != self.pid or self.kept is not None:
            return
        stack = callstack(type(exc), exc, exc.__traceback__, outer=outer)
        self.kept = self.explain(f"SystemExit: {exc.code}", stack, own="own")

    def at_exit(self) -> None:
        """Write a kept failure to the error file, if nothing was written."""
        if self.kept is not None and os.getpid() == self.pid:
            self.write(self.kept)


@dataclass(frozen=True)
class _Report:
    """What a rank's error file says of its failure."""

    message: str
    stack: str
    stamp: int
    replace_hang: bool


_reporter: Reporter | None = None
_unreported: set[str] = set()
"""Error files written for an error of init() or shutdown(): an init that works takes
them back."""


_inside = threading.local()


def _excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    reporter = _reporter
    previous = sys.__excepthook__
    if getattr(_inside, "sys", False):  # a hook we chained to called ours again
        previous(kind, exc, tb)
        return
    _inside.sys = True
    try:
        _chain_sys(reporter, kind, exc, tb)
    finally:
        _inside.sys = False


def _chain_sys(
    reporter: Reporter | None,
    kind: type[BaseException],
    exc: BaseException,
    tb: TracebackType | None,
) -> None:
    previous = sys.__excepthook__
    if reporter is not None:
        previous = reporter.previous or sys.__excepthook__
        if reporter.reported is not exc and (not reporter.closed or reporter.pending is exc):
            with contextlib.suppress(Exception):
                reporter.report(kind, exc, tb)
    previous(kind, exc, tb)


def _threadhook(args: threading.ExceptHookArgs) -> None:
    if getattr(_inside, "thread", False):  # a hook we chained to called ours again
        threading.__excepthook__(args)
        return
    _inside.thread = True
    try:
        _chain_thread(_reporter, args)
    finally:
        _inside.thread = False


def _chain_thread(reporter: Reporter | None, args: threading.ExceptHookArgs) -> None:
    previous: ThreadHook = threading.__excepthook__
    if reporter is not None:
        previous = reporter.previous_thread or threading.__excepthook__
        exc = args.exc_value
        # A thread's SystemExit is no failure: the default hook ignores it too.
        if not reporter.closed and exc is not None and not isinstance(exc, SystemExit):
            with contextlib.suppress(Exception):
                reporter.thread_died(args.thread.name if args.thread is not None else "?", args)
    previous(args)


_INSTALLED_IN: list[int] = []
"""The process whose ``init`` installed the reporter: a child it forks inherits the exit
handler, and must not report its own exit as that rank's."""


def _at_exit() -> None:
    reporter = _reporter
    if reporter is not None and [os.getpid()] == _INSTALLED_IN:
        with contextlib.suppress(Exception):
            reporter.at_exit()


def active() -> Reporter | None:
    """The reporter installed by the live group's ``init()``, if any."""
    return _reporter


def _enabled() -> bool:
    return switch(OPT_OUT_VARIABLE, os.environ.get(OPT_OUT_VARIABLE), default=True)


def unreported_failure(
    exc: BaseException, caller: FrameType | None, *, enabled: bool = True
) -> bool:
    """Write torchrun's error file for an error no reporter sees: ``init()``'s, ``shutdown()``'s.

    The file is provisional: a later failure of this process replaces it, and an
    ``init()`` that succeeds after it (a retry) removes it. Its traceback starts at
    ``caller``'s outermost frame, so the program's own frames come first.

    Args:
        exc: What ``init()`` or ``shutdown()`` raised.
        caller: The frame that called it.
        enabled: ``init(report_failures=...)``; ``HELIOS_FAILURE_REPORT=0`` turns it
            off too.

    Returns:
        Whether the file was written (only under torchrun, once).
    """
    path = os.environ.get(ERROR_FILE_VARIABLE)
    if not path or not enabled or not _enabled():
        return False
    stack = callstack(type(exc), exc, exc.__traceback__, outer=caller)
    written = write_error_file(path, headline(exc), stack, int(time.time()), hang=True)
    if written:
        _unreported.add(path)
    return written


def init_succeeded() -> None:
    """Remove the error file an earlier ``init()`` of this process wrote, if it stands."""
    path = os.environ.get(ERROR_FILE_VARIABLE)
    if path and path in _unreported:
        _unreported.discard(path)
        retract_hang_file(path)


def install(rank: int, store: Any | None, key: str) -> Reporter | None:
    """Install the failure reporter for a group just formed.

    Args:
        rank: This process's rank.
        store: Where the job's first failure is published and read (a store client
            with a short timeout), or None to write only this rank's error file.
        key: The store key of this group's first failure.

    Returns:
        The reporter, or None when ``HELIOS_FAILURE_REPORT=0`` turns it off.
    """
    global _reporter  # noqa: PLW0603 - one reporter per process, as there is one excepthook
    if not _enabled():
        return None
    old = _reporter
    reporter = Reporter(rank=rank, ledger=Ledger(store, key) if store is not None else None)
    # Never our own hook as the one to chain to: each hook is judged on its own, since
    # another library (pytest's thread-exception plugin, say) may have swapped one.
    if sys.excepthook is _excepthook:
        reporter.previous = old.previous if old is not None else sys.__excepthook__
    else:
        reporter.previous = sys.excepthook
    if threading.excepthook is _threadhook:
        reporter.previous_thread = old.previous_thread if old is not None else None
    else:
        reporter.previous_thread = threading.excepthook
    if old is None:
        atexit.register(_at_exit)
    _INSTALLED_IN[:] = [os.getpid()]
    _reporter = reporter
    sys.excepthook = _excepthook
    threading.excepthook = _threadhook
    return reporter


def uninstall(*, hand_back: bool = False) -> None:
    """Remove the reporter, unless an exception is propagating through the caller.

    Args:
        hand_back: Remove it even then, once that exception is reported: the group was
            adopted, and its owner (Ray, Lightning) catches the exception where no
            excepthook sees it.
    """
    global _reporter  # noqa: PLW0603 - see install
    reporter = _reporter
    if reporter is None:
        return
    in_flight = sys.exc_info()[1]
    here = sys._getframe()
    if in_flight is None and not reporter.closed and not hand_back:
        reporter.left("it shut down its process group")
    elif isinstance(in_flight, SystemExit) and in_flight.code in (0, None) and not hand_back:
        reporter.left(f"sys.exit({in_flight.code!r}) left its process_group() block")
    elif isinstance(in_flight, SystemExit):
        with contextlib.suppress(Exception):
            reporter.exiting(in_flight, here)
    elif in_flight is not None:
        # Reported now, before the group is destroyed: a launcher that stops the other
        # ranks once one has failed may not leave this one time to reach its excepthook.
        reporter.closed, reporter.pending = True, in_flight
        with contextlib.suppress(Exception):
            reporter.report(type(in_flight), in_flight, in_flight.__traceback__, outer=here)
        reporter.reported = in_flight
        if not hand_back:
            return
    if sys.excepthook is _excepthook and reporter.previous is not None:
        sys.excepthook = reporter.previous
    if threading.excepthook is _threadhook and reporter.previous_thread is not None:
        threading.excepthook = reporter.previous_thread
    if reporter.kept is not None:
        reporter.closed = True  # kept for the error file at exit
        return
    _reporter = None
    with contextlib.suppress(Exception):
        atexit.unregister(_at_exit)
