"""The hang roll call: when a rank sits in one collective too long, ask every rank where it is.

Started by ``init(hang_timeout=...)`` or ``HELIOS_HANG_TIMEOUT`` (seconds), stopped by
``shutdown()``; off by default, and then nothing here runs. While it is on:

- the collectives of ``torch.distributed`` are called through thin wrappers that note the
  collective each rank is in (``helios_pg._wrappers``); where the torch has process-group
  hooks, so are the collectives no wrapper sees, from issue to completion (DDP's gradient
  buckets, ``async_op=True``: see ``helios_pg._issued``);
- one daemon thread per rank, with a store connection of its own, looks every tick at
  its rank's current collective and at the job's roll-call key. It never issues a
  collective, and the process never waits for it at exit;
- when a rank has sat in one collective longer than the timeout, it calls the roll: every
  rank that can answer writes its current collective and its main thread's stack to the
  store and to a file of its own; the rank that called publishes and prints one grouped
  report that names the culprits (``helios_pg._verdict``); under torchrun each culprit
  writes its error file dated when the hang began, so that torchrun names it the root cause;
- a rank whose main thread holds the GIL in C cannot answer; faulthandler's C-level
  dump, armed every tick, still writes its stack to its file. The signal
  ``HELIOS_HANG_SIGNAL`` (default ``SIGUSR2``, ``none`` to leave every signal alone;
  ``SIGUSR1`` is SLURM's and Lightning's requeue signal) dumps a rank's stack to its
  file on demand.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any

from helios_pg._error_file import ERROR_FILE_VARIABLE, write_error_file
from helios_pg._issued import IssuedWork, Place, hooks_supported
from helios_pg._stackdump import StackDump
from helios_pg._verdict import announce
from helios_pg._wrappers import unwrap, wrap

__all__ = [
    "SIGNAL_VARIABLE",
    "TIMEOUT_VARIABLE",
    "Watchdog",
    "hang_timeout_from",
    "start",
    "stop",
]

TIMEOUT_VARIABLE = "HELIOS_HANG_TIMEOUT"
SIGNAL_VARIABLE = "HELIOS_HANG_SIGNAL"
DIRECTORY_VARIABLE = "HELIOS_HANG_DIR"
_ANSWER_WAIT = 5.0
_STOP_WAIT = 3.0


def hang_timeout_from(
    argument: float | None, environ: dict[str, str] | None = None
) -> float | None:
    """The hang timeout in seconds: the argument, else ``HELIOS_HANG_TIMEOUT``, else off.

    Args:
        argument: ``init(hang_timeout=...)``.
        environ: The environment; ``os.environ`` when omitted.

    Returns:
        The timeout, or None when the watchdog is off.

    Raises:
        ValueError: The timeout is not a positive number.
    """
    raw: object = argument
    source = "hang_timeout"
    if argument is None:
        raw = (environ if environ is not None else os.environ).get(TIMEOUT_VARIABLE)
        source = TIMEOUT_VARIABLE
        if raw is None or not str(raw).strip():
            return None
    try:
        value = float(str(raw))
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        message = f"{source} must be a positive number of seconds, got {raw!r}; fix it or unset it"
        raise ValueError(message)
    return value


def _describe(place: Place | None, top: str | None = None) -> str:
    if place is None or place.op is None:
        return f"in no collective, at {top}" if top else "in no collective"
    group = place.group
    group = f" on {group}" if group else ""
    site = f"at {place.site}" if place.site else "issued from C++"
    return f"in {place.op} #{place.seq}{group} {site}"


@dataclass
class Watchdog:
    """One rank's watchdog: the thread, its store, its file and what it saw."""

    rank: int
    world_size: int
    store: Any
    key: str
    timeout: float
    directory: Path
    host: str = field(default_factory=socket.gethostname)
    current: Place = field(default_factory=Place)
    main: int = field(default_factory=threading.get_ident)
    stopping: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    originals: dict[str, Callable[..., Any]] = field(default_factory=dict)
    dump: StackDump | None = None
    answered: bool = False
    failure_key: str = ""
    issued: IssuedWork | None = None
    wrapper_code: CodeType | None = None

    @property
    def path(self) -> Path:
        """This rank's report file."""
        return self.directory / f"rank-{self.rank}.txt"

    def place(self) -> Place | None:
        """Where this rank is: the wrapped call it is in, else its oldest issued work.

        The wrapped call's site is read off the main thread's stack, where the wrapper's
        frame sits while the collective lasts: the frame that called the outermost
        wrapper (a wrapped call made inside another passes straight through).
        """
        current = self.current
        op = current.op
        if op is None:
            return self.issued.oldest() if self.issued is not None else None
        place = Place(current.seq, op, current.group_arg, since=current.since)
        frame = sys._current_frames().get(self.main)
        caller = None
        while frame is not None:
            if frame.f_code is self.wrapper_code:
                caller = frame.f_back
            frame = frame.f_back
        if caller is not None:
            place.code, place.line = caller.f_code, caller.f_lineno
        del caller
        return place

    def stack(self) -> tuple[str, str | None]:
        """The main thread's stack, formatted, and its innermost ``file:line``."""
        frame = sys._current_frames().get(self.main)
        if frame is None:
            return "(no stack)\n", None
        top = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
        return "".join(traceback.format_stack(frame)), top

    def answer(self) -> dict[str, Any]:
        """This rank's answer to a roll call, also written to its own file."""
        stack, top = self.stack()
        place = self.place()
        where = _describe(place, top)
        answer = {
            "rank": self.rank,
            "host": self.host,
            "pid": os.getpid(),
            "where": where,
            "seq": place.seq if place is not None else None,
            "since": place.wall if place is not None else None,
            "stack": stack,
        }
        with contextlib.suppress(OSError):
            text = (
                f"rank {self.rank} on {self.host} (pid {os.getpid()}): {where}\n{answer['stack']}"
            )
            self.path.write_text(text)
        return answer

    def call(self) -> None:
        """Call the roll (the first rank to see a hang does), gather it and print it."""
        value = json.dumps({"rank": self.rank, "time": time.time()})
        first = bytes(self.store.compare_set(f"{self.key}/called", "", value)).decode()
        if json.loads(first).get("rank") != self.rank:
            return  # another rank called it first
        deadline = time.monotonic() + min(self.timeout, _ANSWER_WAIT)
        keys = [f"{self.key}/answer/{rank}" for rank in range(self.world_size)]
        while time.monotonic() < deadline and not self.stopping.is_set():
            if self.store.check(keys):
                break
            time.sleep(0.1)
        answers = {}
        for rank, key in enumerate(keys):
            with contextlib.suppress(Exception):
                if self.store.check([key]):
                    answers[rank] = json.loads(bytes(self.store.get(key)).decode())
        announce(
            answers,
            caller=self.rank,
            world_size=self.world_size,
            directory=self.directory,
            store=self.store,
            key=self.key,
            failure_key=self.failure_key,
        )

    def convict(self) -> None:
        """A culprit writes its error file, dated when the hang began."""
        raw = bytes(self.store.get(f"{self.key}/verdict")).decode()
        verdict = json.loads(raw)
        path = os.environ.get(ERROR_FILE_VARIABLE)
        if self.rank not in verdict["culprits"] or not path:
            return
        stack, top = self.stack()
        message = f"hang: rank {self.rank} on {self.host} {_describe(self.place(), top)}"
        write_error_file(path, f"{message}; {verdict['line']}", stack, int(verdict["began"]))

    def tick(self) -> None:
        """One look at this rank and at the roll call."""
        if self.dump is not None:
            self.dump.arm(self.timeout + 1)
        place = self.place()
        if place is not None and time.monotonic() - place.since > self.timeout:
            self.store.compare_set(f"{self.key}/hung", "", str(self.rank))
            if not self.answered:
                self.store.set(f"{self.key}/answer/{self.rank}", json.dumps(self.answer()))
                self.answered = True
            self.call()
        if not self.answered and self.store.check([f"{self.key}/hung"]):
            self.store.set(f"{self.key}/answer/{self.rank}", json.dumps(self.answer()))
            self.answered = True
        if self.answered and self.store.check([f"{self.key}/verdict"]):
            self.convict()
            self.stopping.set()  # one roll call per group

    def run(self) -> None:
        """The thread's loop, until :func:`stop` or the roll call is done."""
        interval = min(1.0, self.timeout / 5)
        try:
            while not self.stopping.wait(interval):
                self.tick()
        except Exception:  # noqa: S110 - the store is gone: the job is ending
            pass
        finally:
            if self.dump is not None:
                self.dump.disarm()


_watchdog: Watchdog | None = None


def _signal_number(raw: str | None) -> int | None:
    if raw is None:
        return int(signal.SIGUSR2)
    text = raw.strip()
    if text.lower() in ("", "none", "0", "off"):
        return None
    if text.isdigit():
        return int(text)
    name = text.upper() if text.upper().startswith("SIG") else f"SIG{text.upper()}"
    found = getattr(signal, name, None)
    if not isinstance(found, signal.Signals):
        message = f"{SIGNAL_VARIABLE} must name a signal (SIGUSR2, 12) or be none, got {raw!r}"
        raise ValueError(message)
    return int(found)


def start(
    *,
    rank: int,
    world_size: int,
    store: Any,
    key: str,
    timeout: float,
    job: str,
    failure_key: str = "",
) -> Watchdog:
    """Start this rank's watchdog and wrap ``torch.distributed``'s collectives.

    Args:
        rank: This rank.
        world_size: The number of ranks.
        store: A store client of its own, with a short timeout.
        key: The store key under which this group's roll call runs.
        timeout: Seconds in one collective after which the roll is called.
        job: The job's identity, for the name of the report directory.
        failure_key: The failure reporter's key of the job's first failure, where the
            roll call's culprit is published.

    Returns:
        The running watchdog.

    Raises:
        ValueError: ``HELIOS_HANG_SIGNAL`` names no signal.
    """
    global _watchdog  # noqa: PLW0603 - one watchdog per process, for the default group
    import torch.distributed as dist

    stop()
    number = _signal_number(os.environ.get(SIGNAL_VARIABLE))
    configured = os.environ.get(DIRECTORY_VARIABLE)
    tag = "".join(c if c.isalnum() else "-" for c in job)[:80]
    base = Path(configured) if configured else Path(tempfile.gettempdir()) / f"helios-hang-{tag}"
    base.mkdir(parents=True, exist_ok=True)
    watchdog = Watchdog(rank, world_size, store, key, timeout, base, failure_key=failure_key)
    if hooks_supported():
        issued = IssuedWork(watchdog.current, watchdog.main)
        if issued.install(dist.group.WORLD, default=True):
            watchdog.issued = issued
    with contextlib.suppress(OSError):
        watchdog.dump = StackDump(
            base / f"rank-{rank}.faulthandler.txt",
            # faulthandler names threads by id: say which one is the main thread.
            header=f"helios: rank {rank}, main thread 0x{watchdog.main:016x}",
            signal_number=number,
        )
    if watchdog.dump is not None:  # armed now: the main thread may never let the loop run
        watchdog.dump.arm(timeout + 1)
    watchdog.wrapper_code = wrap(
        dist, watchdog.current, watchdog.main, watchdog.originals, watchdog.issued
    )
    watchdog.thread = threading.Thread(
        target=watchdog.run, name="helios-hang-watchdog", daemon=True
    )
    watchdog.thread.start()
    _watchdog = watchdog
    return watchdog


def stop() -> None:
    """Stop the watchdog, if one runs, and put ``torch.distributed`` back as it was."""
    global _watchdog  # noqa: PLW0603 - see start
    watchdog = _watchdog
    if watchdog is None:
        return
    _watchdog = None
    watchdog.stopping.set()
    if watchdog.thread is not None and watchdog.thread is not threading.current_thread():
        # It wakes at once, unless a store request is under way (its timeout is short).
        watchdog.thread.join(timeout=_STOP_WAIT)
    dist: Any = sys.modules.get("torch.distributed")
    if dist is not None:
        unwrap(dist, watchdog.originals, watchdog.issued)
    if watchdog.dump is not None:
        watchdog.dump.close()
