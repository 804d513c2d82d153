"""The straggler report's rounds through the job's store, on a daemon thread per rank.

Every period, rank 0 asks for the collectives its rank made since the last round: it
writes the round's range of collective numbers and the seed of a random sample of at
most :data:`SAMPLE` of them, and counts the round up. Each rank, looking at that counter a
few times a period, answers with its waits in the sampled collectives, appended to one
key (:mod:`helios_pg._store_lines`). Rank 0 waits a little for the answers, reads them
in one request and judges (:func:`helios_pg._stragglers._judge.judge`). A rank's cost a
round: a few requests of O(1) bytes and one of O(:data:`SAMPLE`); rank 0's: one read of
O(N :data:`SAMPLE`) bytes. No collective is ever issued, so the report can neither hang
the job nor reorder its collectives; a round whose store requests fail is skipped, and
:data:`_GIVE_UP` such rounds in a row end the report, never the job. Where some rank did
not answer in time, nobody is named (that rank may be the one the others waited for).
"""

from __future__ import annotations

import base64
import contextlib
import random
import socket
import sys
import threading
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from helios_pg._arrivals import SIZE, Arrivals
from helios_pg._store_lines import arrived, read_lines, send_line
from helios_pg._store_poll import poll
from helios_pg._stragglers._judge import judge
from helios_pg._stragglers._report import StragglerReport

__all__ = ["SAMPLE", "Rounds", "decode", "encode"]

SAMPLE = 256
"""Collectives compared a round, at most."""
_FEWEST = 8
"""A period with fewer collectives is not asked about: too few to tell anything."""
_SETTLE = 2.0
"""Seconds a rank waits for the round's collectives to complete on its side."""
_LOOK = 0.25
"""Seconds between the first two looks at the round counter, once the next round is due;
the delay doubles up to ``_LOOK_LIMIT``."""
_LOOK_LIMIT = 1.0
_GIVE_UP = 5
"""Rounds in a row whose store requests failed, after which the report ends."""
_LITTLE_ENDIAN = sys.byteorder == "little"


def encode(host: str, waits: array[int], ops: bytes) -> str:
    """One rank's answer: its host, then its operation codes and waits, in base64."""
    if not _LITTLE_ENDIAN:
        waits = array("I", waits)
        waits.byteswap()
    return f"{host}\t{base64.b64encode(ops + waits.tobytes()).decode()}"


def decode(line: str) -> tuple[str, bytes, list[int]] | None:
    """An answer's host, operation codes and waits; None where it is malformed."""
    host, _, data = line.partition("\t")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return None
    count = len(raw) // 5
    if len(raw) != 5 * count:
        return None
    waits = array("I", raw[count:])
    if not _LITTLE_ENDIAN:
        waits.byteswap()
    return host, raw[:count], waits.tolist()


def _sample(first: int, end: int, seed: int) -> list[int]:
    """The collectives compared: at most :data:`SAMPLE` of ``first`` to ``end - 1``.

    Drawn at random (the same on every rank, from rank 0's seed), so that no pattern of
    the steps lines up with the sample.
    """
    if end - first <= SAMPLE:
        return list(range(first, end))
    drawn = random.Random(seed).sample(range(first, end), SAMPLE)  # noqa: S311 - a sample
    return sorted(drawn)


@dataclass
class Rounds:
    """One rank's part of the report: its thread, its store and the latest report.

    Args:
        rank: This rank.
        world_size: The number of ranks.
        period: Seconds between two rounds.
        base: The store keys of this group's report.
        connect: Opens this rank's own connection to the job's store (on the thread, so
            init never waits for it); None where it cannot.
        arrivals: This rank's arrivals, which the collective tap fills.
        say: Where rank 0 writes a report's line.
    """

    rank: int
    world_size: int
    period: float
    base: str
    connect: Callable[[], Any | None]
    arrivals: Arrivals
    say: Callable[[str], None]
    host: str = field(default_factory=socket.gethostname)
    stopping: threading.Event = field(default_factory=threading.Event)
    latest: StragglerReport | None = None
    thread: threading.Thread | None = None
    failed: int = 0
    answered: int = 0
    """The last round this rank answered."""
    wait: float = 0.0
    """Seconds until its next look at the round counter."""
    step: float = _LOOK
    seeds: random.Random = field(default_factory=random.Random)
    """Rank 0's samples' seeds: its own generator, never the program's ``random``."""

    def start(self) -> None:
        """Start the thread."""
        self.thread = threading.Thread(target=self.run, name="helios-stragglers", daemon=True)
        self.thread.start()

    def run(self) -> None:
        """The thread: rank 0 leads the rounds, the others answer.

        A round whose store requests fail is skipped; after :data:`_GIVE_UP` in a row (the
        store went with the job), the report ends. It never breaks the job.
        """
        try:
            store = self.connect()
        except Exception:
            store = None
        if store is None:
            if self.rank == 0:
                self.say(
                    "helios straggler: no report: rank 0 could not open a connection of its "
                    "own to the job's store"
                )
            return
        (self._lead if self.rank == 0 else self._follow)(store)

    def _survived(self, step: Callable[[], object]) -> bool:
        """Run one round's ``step``; False once too many rounds in a row failed."""
        try:
            step()
        except Exception:
            self.failed += 1
            return self.failed < _GIVE_UP
        self.failed = 0
        return True

    def _answer(self, store: Any, prefix: str, sample: list[int]) -> None:
        """Send this rank's waits in ``sample`` once they are known (or ``_SETTLE`` passed)."""
        arrivals = self.arrivals
        poll(lambda: arrivals.known(sample[-1]), _SETTLE, limit=0.01, stop=self.stopping)
        waits, ops = arrivals.waits(sample)
        send_line(store, prefix, self.rank, encode(self.host, waits, ops))

    def _follow(self, store: Any) -> None:
        self.wait = max(_LOOK, self.period - 1.0)
        while not self.stopping.wait(self.wait) and self._survived(partial(self._look, store)):
            pass

    def _look(self, store: Any) -> None:
        """Answer the latest round, if it is new; else look again, later the longer it takes."""
        asked = int(store.add(f"{self.base}/asked", 0))
        if asked <= self.answered:
            self.step = self.wait = min(self.step * 2, _LOOK_LIMIT)
            return
        self.answered, self.wait, self.step = asked, max(_LOOK, self.period - 1.0), _LOOK
        key = f"{self.base}/ask/{asked}"
        if not store.check([key]):  # a round long gone: its key was removed
            return
        first, end, seed = map(int, bytes(store.get(key)).split())
        self._answer(store, f"{self.base}/round/{asked}", _sample(first, end, seed))

    def _lead(self, store: Any) -> None:
        done = self.arrivals.count
        asked = 0
        while not self.stopping.wait(self.period):
            end = self.arrivals.count
            first = max(done, end - SIZE // 2)
            if end - first >= _FEWEST:
                asked += 1
                if not self._survived(partial(self._round, store, asked, first, end)):
                    return
                done = end

    def _round(self, store: Any, asked: int, first: int, end: int) -> None:
        """Rank 0: ask about collectives ``first`` to ``end - 1``, answer, gather, judge."""
        prefix = f"{self.base}/round/{asked}"
        seed = self.seeds.getrandbits(32)
        store.set(f"{self.base}/ask/{asked}", f"{first} {end} {seed}")
        store.add(f"{self.base}/asked", 1)
        sample = _sample(first, end, seed)
        self._answer(store, prefix, sample)
        period = self.arrivals.span(first, end) or self.period
        every = self.world_size
        poll(lambda: arrived(store, prefix) >= every, min(self.period, 10.0), stop=self.stopping)
        if self.stopping.is_set():  # shutdown: the answers may not all be in
            return
        self._judge(read_lines(store, prefix, every), end - first, period, len(sample))
        if asked > 2:  # a round's keys, once every rank has long read them
            old = f"{self.base}/round/{asked - 2}"
            for key in (f"{old}/entries", f"{old}/count", f"{self.base}/ask/{asked - 2}"):
                with contextlib.suppress(RuntimeError, NotImplementedError):
                    store.delete_key(key)

    def _judge(
        self, lines: dict[int, list[str]], collectives: int, period: float, size: int
    ) -> None:
        waits: dict[int, list[int]] = {}
        ops: dict[int, bytes] = {}
        hosts = [""] * self.world_size
        for rank, answers in lines.items():
            answer = decode(answers[-1]) if rank < self.world_size else None
            if answer is not None and len(answer[1]) == size:
                hosts[rank], ops[rank], waits[rank] = answer
        report = judge(waits, ops, hosts, collectives=collectives, period=period)
        self.latest = report
        if report.line:
            self.say(report.line)
