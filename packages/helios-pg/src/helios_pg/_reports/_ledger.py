"""The job's failures in the store, in the store's order: the first still standing is the culprit.

Every rank's failure reporter and the hang roll call write here. A failure is an entry,
numbered by the store (one atomic ``add``), so the order is the store's order of
publication, never a comparison of clocks. Three kinds:

- ``own``: a rank's own code failed (an uncaught exception that is not a collective
  broken by a peer, a non-zero ``SystemExit``);
- ``thread``: one of a rank's threads died of an uncaught exception;
- ``hang``: the roll call's culprit, published while the hang lasts and withdrawn when
  it ends (the waiting ranks' collective completed): a hang that ended is no failure;
- ``exit``: a rank shut its group down without an error (a clean exit; published where
  torchrun's agent serves the store). At the end of a job every rank does, and nobody
  reads it; a rank that leaves in the middle deserts
  the others, whose next collective breaks: they name it.

The culprit of the job is the first own failure standing; else the first hang standing
(or the death of one of its culprit's threads); else the first rank that left (or the
death of one of its threads, which explains it); else the first thread that died
(:meth:`Ledger.first`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Entry", "Kind", "Ledger"]

Kind = Literal["own", "thread", "hang", "exit"]
_POLL = 0.02


@dataclass(frozen=True)
class Entry:
    """One failure published in the ledger."""

    number: int
    rank: int
    line: str
    """``rank R on HOST failed: what``."""
    timestamp: int
    """When it happened (Unix seconds), for torchrun's error files."""
    kind: Kind
    answered: bool = True
    """False for a hung rank that could not answer the roll call (it writes no file)."""

    def first_line(self) -> str:
        """The line as another rank prints it: ``rank R on HOST failed first: what``."""
        if self.kind == "exit":
            return self.line
        return self.line.replace(" failed: ", " failed first: ", 1)

    def later(self, stamp: int) -> int:
        """A timestamp for a failure that came after this one: never before it.

        A hung rank that could not answer writes no error file: torchrun dates it when
        it stops it, so a later failure is dated well after that.
        """
        margin = 10 if self.kind == "hang" and not self.answered else 0
        return max(stamp, self.timestamp + 1) + margin


class Ledger:
    """The failures of one job, under one key of its store.

    Args:
        store: A store client (``compare_set``-capable c10d store) with a short timeout.
        key: The key under which the entries are kept.
    """

    def __init__(self, store: Any, key: str) -> None:
        self.store = store
        self.key = key

    def publish(
        self, *, rank: int, line: str, timestamp: int, kind: Kind, answered: bool = True
    ) -> int:
        """Append a failure; its number is its place in the store's order.

        Returns:
            The entry's number, from 1.
        """
        number = int(self.store.add(f"{self.key}/count", 1))
        record = {
            "rank": rank,
            "line": line,
            "timestamp": timestamp,
            "kind": kind,
            "answered": answered,
        }
        self.store.set(f"{self.key}/{number}", json.dumps(record))
        return number

    def withdraw(self, number: int) -> None:
        """Withdraw entry ``number`` (a hang that ended): it no longer names a culprit."""
        self.store.set(f"{self.key}/{number}/withdrawn", "1")

    def own_failure(self) -> Entry | None:
        """The first rank's own failure published, if any: the culprit whatever follows."""
        count = int(self.store.add(f"{self.key}/count", 0))
        for number in range(1, count + 1):
            key = f"{self.key}/{number}"
            if self.store.check([key]):
                entry = _entry(number, self.store.get(key))
                if entry.kind == "own":
                    return entry
        return None

    def first(self, wait: float) -> Entry | None:
        """The culprit, waiting up to ``wait`` seconds for one to be published.

        The first rank's own failure standing, in the store's order (or the death of one
        of that rank's threads before it, which explains it); else the first
        hang standing, or the death of a thread of its culprit's, which explains it;
        else the first thread that died (a thread may die while its rank goes on). An
        entry whose number is taken but whose text is not yet written is waited for,
        an entry numbered later never going before it; once the wait is over, one still
        unwritten (its rank died in between) is passed over.
        """
        deadline = time.monotonic() + wait
        while True:
            late = time.monotonic() >= deadline
            count = int(self.store.add(f"{self.key}/count", 0))
            standing: list[Entry] = []
            for number in range(1, count + 1):
                key = f"{self.key}/{number}"
                if not self.store.check([key]):
                    if late:
                        continue
                    break
                if self.store.check([f"{key}/withdrawn"]):
                    continue
                entry = _entry(number, self.store.get(key))
                if entry.kind == "own":
                    # A thread of the same rank that died before explains its failure.
                    died = [e for e in standing if e.kind == "thread" and e.rank == entry.rank]
                    return died[0] if died else entry
                standing.append(entry)
            if late:
                return _provisional(standing)
            time.sleep(_POLL)


def _provisional(standing: list[Entry]) -> Entry | None:
    """Of hangs, ranks that left and threads that died, the one to name."""
    threads = [entry for entry in standing if entry.kind == "thread"]
    for kind in ("hang", "exit"):
        found = [entry for entry in standing if entry.kind == kind]
        if found:
            explained = [entry for entry in threads if entry.rank == found[0].rank]
            return explained[0] if explained else found[0]
    return threads[0] if threads else None


def _entry(number: int, raw: object) -> Entry:
    data = json.loads(bytes(raw).decode())  # type: ignore[call-overload]
    kind = data.get("kind")
    return Entry(
        number=number,
        rank=int(data["rank"]),
        line=str(data["line"]),
        timestamp=int(data["timestamp"]),
        kind=kind if kind in ("own", "thread", "hang", "exit") else "own",
        answered=bool(data.get("answered", True)),
    )
