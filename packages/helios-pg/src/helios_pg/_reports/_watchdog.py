"""The hang roll call: when a rank sits in one collective too long, ask every rank where it is.

Started by ``init(hang_timeout=...)`` or ``HELIOS_HANG_TIMEOUT`` (seconds), stopped by
``shutdown()``; off by default, and then nothing here runs. While it is on:

- the collectives of ``torch.distributed`` are called through thin wrappers that note the
  collective each rank is in (``helios_pg._reports._wrappers``); where the torch has process-group
  hooks, so are the collectives no wrapper sees, from issue to completion (DDP's gradient
  buckets, ``async_op=True``: see ``helios_pg._reports._issued``);
- one daemon thread per rank, with a store connection of its own, looks every tick at
  its rank's current collective and at the job's roll-call key. It never issues a
  collective, and the process never waits for it at exit;
- when a rank has sat in one collective longer than the timeout, it calls the roll: every
  rank that can answer writes its current collective and its main thread's stack to the
  store and to a file of its own; the rank that called publishes and prints one grouped
  report that names the culprits (``helios_pg._reports._verdict``); under torchrun each culprit
  writes its error file dated when the hang began, so that torchrun names it the root cause;
- a hang can end (a late rank catches up): a waiting rank whose collective then completes
  without an error says so, the culprit's entry in the job's ledger of failures is
  withdrawn and its error file removed, and the next hang gets a roll call of its own;
- a hang after a rank's own code failed gets no roll call: that failure, first in the
  job's ledger, names the culprit, and each rank left waiting says once where it waits
  and which rank failed first;
- a rank whose main thread holds the GIL in C cannot answer; faulthandler's C-level
  dump, armed every tick, still writes its stack to its file. The signal
  ``HELIOS_HANG_SIGNAL`` (default ``SIGUSR2``, ``none`` to leave every signal alone;
  ``SIGUSR1`` is SLURM's and Lightning's requeue signal) dumps a rank's stack to its
  file on demand.

The report files live in a folder per job and host (``helios_pg._reports._hang_directory``),
removed when the job ends without a roll call.
"""

from __future__ import annotations

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
from pathlib import Path
from types import CodeType
from typing import Any

from helios_pg._reports._error_file import ERROR_FILE_VARIABLE, retract_hang_file, write_error_file
from helios_pg._reports._issued import IssuedWork, Place
from helios_pg._reports._ledger import Entry, Ledger
from helios_pg._reports._records import Answer, Collective, Verdict
from helios_pg._reports._round import Round, Waited, describe
from helios_pg._reports._stackdump import StackDump
from helios_pg._reports._verdict import announce
from helios_pg._store_poll import poll

__all__ = ["STOP_WAIT", "Watchdog"]

_ANSWER_WAIT = 5.0
STOP_WAIT = 3.0
"""Seconds ``stop`` waits for the thread, busy with a store request at worst."""
_SETTLE_WAIT = 1.0
_GIVE_UP = 10  # ticks in a row whose store requests failed


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
    failure_key: str = ""
    issued: IssuedWork | None = None
    wrapper_code: CodeType | None = None
    round: Round = field(default_factory=Round)
    spoke: bool = False
    """Whether this rank ever answered a roll call (its report file is then kept)."""
    own_directory: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    failed: Entry | None = None
    """A rank's own failure, once published: a hang after it is what it left."""

    @property
    def round_key(self) -> str:
        """The store key of the roll call under way."""
        return self.round.key(self.key)

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

    def answer(self) -> Answer:
        """This rank's answer to a roll call, also written to its own file."""
        stack, top = self.stack()
        place = self.place()
        where = describe(place, top)
        answer = Answer(
            rank=self.rank,
            where=where,
            op=place.op if place is not None else None,
            group=place.group if place is not None else "",
            seq=place.seq if place is not None else None,
            since=place.wall if place is not None else None,
            host=self.host,
            pid=os.getpid(),
            stack=stack,
        )
        with contextlib.suppress(OSError):
            self.path.write_text(
                f"rank {self.rank} on {self.host} (pid {answer.pid}): {where}\n{stack}"
            )
        return answer

    def respond(self) -> None:
        """Answer the roll call under way, once, noting where this rank waits."""
        place = self.place()
        self.round.waited = None
        if place is not None:
            token = place.seq if place.key < 0 else -1 - place.key
            collective = Collective(place.op, place.group)
            self.round.waited = Waited(token, self.current.failures, collective)
        self.store.set(f"{self.round_key}/answer/{self.rank}", self.answer().encode())
        self.round.answered = self.spoke = True

    def call(self) -> None:
        """Call the roll (the first rank to see a hang does), gather it and print it."""
        value = json.dumps({"rank": self.rank, "time": time.time()})
        first = bytes(self.store.compare_set(f"{self.round_key}/called", "", value)).decode()
        if json.loads(first).get("rank") != self.rank:
            return  # another rank called it first
        keys = [f"{self.round_key}/answer/{rank}" for rank in range(self.world_size)]
        poll(
            lambda: self.store.check(keys),
            min(self.timeout, _ANSWER_WAIT),
            limit=0.1,
            stop=self.stopping,
        )
        answers = {}
        for rank, key in enumerate(keys):
            with contextlib.suppress(Exception):
                if self.store.check([key]):
                    answers[rank] = Answer.decode(bytes(self.store.get(key)))
        announce(
            answers,
            caller=self.rank,
            world_size=self.world_size,
            directory=self.directory,
            store=self.store,
            key=self.round_key,
            failure_key=self.failure_key,
        )

    def convict(self) -> None:
        """A culprit writes its error file, dated when the hang began, until it ends.

        Another rank takes back a provisional file of its own (a thread of its that died
        earlier): dated before the hang, it would make it torchrun's root cause. A
        culprit's own such file stays: its thread's death explains the hang.
        """
        verdict = self.round.verdict
        path = os.environ.get(ERROR_FILE_VARIABLE)
        if verdict is None:
            return
        if self.rank not in verdict.culprits:
            if verdict.culprits and path:
                retract_hang_file(path)
            return
        self.round.finished = (self.current.completed, self.current.failures)
        if not path:
            return
        stack, top = self.stack()
        message = f"hang: rank {self.rank} on {self.host} {describe(self.place(), top)}"
        self.round.convicted = write_error_file(
            path,
            f"{message}; {verdict.line}",
            stack,
            int(verdict.began),
            hang=True,
        )

    def caught_up(self) -> bool:
        """Whether this culprit has completed a collective since it was named.

        Its peers in that collective were there too: it is hung no more, also where
        the rank that called the roll waits in another group, which may never complete
        (a rank of it killed later). A collective that failed is no catching up.
        """
        named = self.round.finished
        if named is None:
            return False
        completed, failures = named
        return self.current.failures == failures and self.current.completed > completed

    def acquit(self) -> None:
        """A culprit that caught up takes back its error file and its entry in the ledger.

        The entry names the first culprit: it is withdrawn only where this rank was the
        only one named, since another may still be hung.
        """
        path = os.environ.get(ERROR_FILE_VARIABLE)
        if path and self.round.convicted:
            retract_hang_file(path)
        verdict = self.round.verdict
        alone = verdict is not None and verdict.culprits == (self.rank,)
        if alone and verdict is not None and verdict.entry is not None and self.failure_key:
            with contextlib.suppress(Exception):
                Ledger(self.store, self.failure_key).withdraw(verdict.entry)
        self.round.convicted, self.round.finished, self.round.acquitted = False, None, True

    def hang_ended(self) -> bool:
        """Whether the hang is over: the collective the calling rank waits in completed.

        A rank that waits in that collective says so once its own call of it completed
        without an error; a collective that failed leaves the hang standing, as what
        the job failed of, and so does any other collective completing.
        """
        over = f"{self.round_key}/over"
        verdict = self.round.verdict
        waited = self.round.waited
        if (
            verdict is not None
            and waited is not None
            and waited.collective == verdict.collective
            and self._waited_completed(waited)
            and not self.store.check([over])
        ):
            self.store.set(over, "1")
            if verdict.entry is not None and self.failure_key:
                Ledger(self.store, self.failure_key).withdraw(verdict.entry)
            return True
        return bool(self.store.check([over]))

    def _waited_completed(self, waited: Waited) -> bool:
        token = waited.token
        if self.current.failures != waited.failures:
            return False
        if token >= 0:  # a wrapped call: over once the wrapper returned or another began
            return self.current.op is None or self.current.seq != token
        return self.issued is None or -1 - token not in self.issued.noted

    def next_round(self) -> None:
        """The hang ended: take back this rank's error file, and watch for the next."""
        path = os.environ.get(ERROR_FILE_VARIABLE)
        if self.round.convicted and path:
            retract_hang_file(path)
        self.round = self.round.next()

    def after_failure(self, place: Place) -> bool:
        """Whether a rank's own code failed; if so, say once where this rank waits for it.

        That failure, not a roll call, names the culprit: a rank left waiting (its
        launcher did not stop it) says which rank failed first, as its collective would
        have, had it broken.
        """
        if self.failed is None and self.failure_key:
            self.failed = Ledger(self.store, self.failure_key).own_failure()
            if self.failed is not None:
                waited = time.monotonic() - place.since
                where = describe(place, None)
                line = f"helios hang (rank {self.rank}): {where} for {waited:.0f} s; "
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(line + self.failed.first_line() + "\n")
                    sys.stderr.flush()
        return self.failed is not None

    def tick(self) -> None:
        """One look at this rank and at the roll call."""
        if self.dump is not None:
            self.dump.arm(self.timeout + 1)
        if not self.round.answered:
            place = self.place()
            hung = place is not None and time.monotonic() - place.since > self.timeout
            if hung and place is not None and not self.after_failure(place):
                self.store.compare_set(f"{self.round_key}/hung", "", str(self.rank))
                self.respond()
                self.call()
            elif self.store.check([f"{self.round_key}/hung"]):
                self.respond()  # a roll call another rank began, even after a failure
        if not self.round.answered:
            return
        if self.round.verdict is None and self.store.check([f"{self.round_key}/verdict"]):
            raw = bytes(self.store.get(f"{self.round_key}/verdict"))
            self.round.verdict = Verdict.decode(raw)
            self.convict()
        if self.caught_up():
            self.acquit()
        if self.round.verdict is not None and self.hang_ended():
            self.next_round()

    def settle(self) -> None:
        """Say now, not at the next tick, whether the hang this rank answered has ended.

        Called by the failure reporter before it reads the job's first failure: a rank
        that fails just after a hang ended is not dated after that hang.
        """
        if self.lock.acquire(timeout=_SETTLE_WAIT):
            try:
                if self.round.verdict is not None and self.hang_ended():
                    self.next_round()
            finally:
                self.lock.release()

    def run(self) -> None:
        """The thread's loop, until :func:`stop`."""
        interval = min(1.0, self.timeout / 5)
        failed = 0
        try:
            while not self.stopping.wait(interval):
                try:
                    with self.lock:
                        self.tick()
                    failed = 0
                except Exception:
                    # A store request that timed out (a busy store) costs one tick; the
                    # store gone for good (the job is ending) ends the watch.
                    failed += 1
                    if failed >= _GIVE_UP:
                        return
        finally:
            if self.dump is not None:
                self.dump.disarm()


_watchdog: Watchdog | None = None
"""This process's running watchdog, for the default group (:mod:`._watch` starts it)."""
