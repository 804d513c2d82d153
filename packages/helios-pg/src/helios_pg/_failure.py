"""Say which rank failed first, and why, on every launcher, without a decorator.

:func:`install` (called by ``init()``) chains ``sys.excepthook`` and
``threading.excepthook``, keeping whatever was installed before (torch's own hooks
included). On an uncaught exception in the main thread:

- a rank whose error is its own (not a collective broken by a peer) publishes
  ``rank R on HOST failed: <Type>: <text>`` in the job's store, first come first
  kept, through a connection of its own with a short timeout;
- a rank whose collective failed because a peer went away (connection closed or
  reset, a timeout) reads that line and puts ``rank R on HOST failed first: ...``
  first: on its stderr, before its own traceback, and in its error file;
- under torchrun (``TORCHELASTIC_ERROR_FILE``), the error file is written in
  torchrun's own format, atomically, only by the process that installed the hook,
  and never over a file that ``@record`` wrote. A victim's timestamp is set after
  the culprit's, so that torchrun's root cause is the culprit.

An exception in another thread, and a non-zero ``SystemExit`` that passes through
``shutdown()`` (a ``process_group()`` block), are kept and written to the error file at
exit, unless the main thread's error came first; the ``SystemExit`` is published at
once. ``os._exit()`` and signals leave nothing to say: the other ranks then say what
they know. :func:`uninstall` (``shutdown()``) restores the
previous hooks, except while an exception is propagating (``shutdown()`` in a
``finally``, or a ``process_group()`` block): that exception is then reported at once,
before the group is destroyed, since a launcher may stop this rank as soon as another
has failed. ``HELIOS_FAILURE_REPORT=0``, or
``init(report_failures=False)``, turns it all off.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from helios_pg._error_file import ERROR_FILE_VARIABLE, write_error_file

__all__ = [
    "OPT_OUT_VARIABLE",
    "Reporter",
    "active",
    "install",
    "is_peer_failure",
    "uninstall",
]

OPT_OUT_VARIABLE = "HELIOS_FAILURE_REPORT"
_READ_WAIT = 0.5  # how long a victim waits for the culprit's line to appear
_SILENT_MARGIN = 10
# What torch's transports say when a peer went away; torch gives them no type of
# their own before DistNetworkError, and gloo's come as plain RuntimeErrors.
_PEER_TEXTS = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "timed out",
    "timeout",
    "connection refused",
    "communicator was aborted",
)
ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], Any]
ThreadHook = Callable[[threading.ExceptHookArgs], Any]


def is_peer_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a collective broken by a peer.

    Args:
        exc: The exception.

    Returns:
        True for torch's distributed errors and for transport errors that say a peer
        closed, reset or never answered the connection.
    """
    dist: Any = sys.modules.get("torch.distributed")
    dist_error = getattr(dist, "DistError", None) if dist is not None else None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(dist_error, type) and isinstance(current, dist_error):
            return True
        text = str(current).lower()
        if isinstance(current, RuntimeError | TimeoutError | ConnectionError) and any(
            needle in text for needle in _PEER_TEXTS
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def _headline(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@dataclass
class Reporter:
    """The failure reporter of one process group: where to publish, and what it saw."""

    rank: int
    store: Any | None
    key: str
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    previous: ExceptHook | None = None
    previous_thread: ThreadHook | None = None
    kept: tuple[str, str, int] | None = None
    written: bool = False
    closed: bool = False
    pending: BaseException | None = None
    reported: BaseException | None = None

    def publish(self, what: str, timestamp: int | None = None) -> None:
        """Publish this rank as the job's first failure, unless another rank was first."""
        if self.store is None:
            return
        line = f"rank {self.rank} on {self.host} failed: {what}"
        stamp = int(time.time()) if timestamp is None else timestamp
        value = json.dumps({"line": line, "rank": self.rank, "timestamp": stamp})
        with contextlib.suppress(Exception):
            self.store.compare_set(self.key, "", value)

    def culprit(self) -> dict[str, Any] | None:
        """The first failure another rank published, waiting briefly for it to appear."""
        if self.store is None:
            return None
        deadline = time.monotonic() + _READ_WAIT
        with contextlib.suppress(Exception):
            while True:
                if self.store.check([self.key]):
                    found: object = json.loads(bytes(self.store.get(self.key)).decode())
                    if isinstance(found, dict) and found.get("rank") != self.rank:
                        return found
                    return None
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.02)
        return None

    def report(
        self, kind: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        """Handle an uncaught exception of the main thread (before the previous hook)."""
        if os.getpid() != self.pid or isinstance(exc, KeyboardInterrupt | SystemExit):
            return
        callstack = "".join(traceback.format_exception(kind, exc, tb))
        message = _headline(exc)
        timestamp = int(time.time())
        if is_peer_failure(exc):
            first = self.culprit()
            if first is not None:
                line = f"{str(first['line']).replace(' failed: ', ' failed first: ', 1)}"
                with contextlib.suppress(Exception):
                    sys.stderr.write(line + "\n")
                    sys.stderr.flush()
                message = f"{line}\nrank {self.rank} on {self.host}: {message}"
                callstack = f"{line}\n{callstack}"
                timestamp = max(timestamp, int(first.get("timestamp", 0)) + 1)
                if first.get("answered") is False:
                    # A hung rank that could not answer writes no error file: torchrun
                    # dates it when it stops it, so this one is dated after that.
                    timestamp += _SILENT_MARGIN
        else:
            self.publish(message)
        path = os.environ.get(ERROR_FILE_VARIABLE)
        if path and not self.written:
            self.written = write_error_file(path, message, callstack, timestamp)

    def keep(self, message: str, callstack: str) -> None:
        """Keep a failure that is not the main thread's exception for the error file.

        It is dated now, not at exit: the ranks that fail because of it are dated after.
        """
        if self.kept is None:
            self.kept = (message, callstack, int(time.time()))

    def exiting(self, exc: SystemExit) -> None:
        """Publish a non-zero ``SystemExit`` passing through ``shutdown()``, and keep it."""
        if exc.code in (0, None) or os.getpid() != self.pid:
            return
        callstack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.keep(f"SystemExit: {exc.code}", callstack)
        if self.kept is not None:
            self.publish(self.kept[0], self.kept[2])

    def at_exit(self) -> None:
        """Write a kept failure to the error file, if nothing was written."""
        path = os.environ.get(ERROR_FILE_VARIABLE)
        if self.kept is None or self.written or not path or os.getpid() != self.pid:
            return
        message, callstack, stamp = self.kept
        self.written = write_error_file(path, message, callstack, stamp)


_reporter: Reporter | None = None


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
                name = args.thread.name if args.thread is not None else "?"
                kind, tb = args.exc_type, args.exc_traceback
                callstack = "".join(traceback.format_exception(kind, exc, tb))
                reporter.keep(f"{_headline(exc)} (in thread {name})", callstack)
    previous(args)


def _at_exit() -> None:
    reporter = _reporter
    if reporter is not None:
        with contextlib.suppress(Exception):
            reporter.at_exit()


def active() -> Reporter | None:
    """The reporter installed by the live group's ``init()``, if any."""
    return _reporter


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
    if os.environ.get(OPT_OUT_VARIABLE, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    old = _reporter
    reporter = Reporter(rank=rank, store=store, key=key)
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
    _reporter = reporter
    sys.excepthook = _excepthook
    threading.excepthook = _threadhook
    return reporter


def uninstall() -> None:
    """Remove the reporter, unless an exception is propagating through the caller."""
    global _reporter  # noqa: PLW0603 - see install
    reporter = _reporter
    if reporter is None:
        return
    in_flight = sys.exc_info()[1]
    if isinstance(in_flight, SystemExit):
        with contextlib.suppress(Exception):
            reporter.exiting(in_flight)
    elif in_flight is not None and not isinstance(in_flight, KeyboardInterrupt):
        # Reported now, before the group is destroyed: a launcher that stops the other
        # ranks once one has failed may not leave this one time to reach its excepthook.
        reporter.closed, reporter.pending = True, in_flight
        with contextlib.suppress(Exception):
            reporter.report(type(in_flight), in_flight, in_flight.__traceback__)
        reporter.reported = in_flight
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
