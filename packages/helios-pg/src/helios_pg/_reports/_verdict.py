"""The roll call's verdict: from the ranks' answers, where each rank is and who is to blame.

The rank that called the roll groups the answers by where each rank is
(:func:`decide`); of a rank that did not answer it says what its faulthandler dump says,
where that file is on its host (:func:`silent`). The culprits are the ranks that are
in no collective while others wait in one, never a rank that waits.
:func:`announce` publishes the verdict for the other ranks' watchdogs, publishes the
first culprit in the job's ledger of failures (withdrawn if the hang ends), and
prints the grouped report on stderr (``ranks [0, 2] in all_reduce #57 at train.py:88;
rank 1 in no collective, at loader.py:42; rank 5 did not answer``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from helios_pg._reports._ledger import Ledger
from helios_pg._reports._records import Answer, Collective, Verdict
from helios_pg._reports._stackdump import RankDumpFile

__all__ = ["announce", "decide", "silent"]


def decide(
    answers: dict[int, Answer], *, caller: int, world_size: int, directory: Path
) -> tuple[str, list[int], float]:
    """Group the answers by where each rank is; name the culprits and when it began.

    Args:
        answers: Each answering rank's answer, by rank.
        caller: The rank that called the roll.
        world_size: The number of ranks.
        directory: Where the ranks' faulthandler dumps are, on this host.

    Returns:
        The grouped report, the culprits, and when the hang began (a Unix time).
    """
    places: dict[str, list[int]] = {}
    for rank in range(world_size):
        found = answers.get(rank)
        where = found.where if found else silent(directory, rank)
        places.setdefault(where, []).append(rank)
    culprits = _culprits(answers, places, world_size)
    waiting = [a.since for a in answers.values() if a.waiting and a.since is not None]
    began = min(waiting, default=time.time())
    parts = []
    for where, ranks in sorted(places.items(), key=lambda item: item[1][0]):
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"
        parts.append(f"{who} {where}")
    return "; ".join(parts), culprits, began


def _culprits(
    answers: dict[int, Answer], places: dict[str, list[int]], world_size: int
) -> list[int]:
    """Who the hang is on: never a rank that waits for others.

    The ranks in no collective (or that did not answer) while others wait in one; where
    every rank is in a collective, those in one that nobody else is in; where no two
    ranks are in the same one, all of them (each waits for a collective no other joins).
    A collective is its operation and group (:class:`Collective`).
    """
    waiting = {rank for rank, answer in answers.items() if answer.waiting}
    elsewhere = [rank for rank in range(world_size) if rank not in waiting]
    if waiting and elsewhere:
        return elsewhere
    if not waiting:
        return sorted(rank for ranks in places.values() for rank in ranks)
    collectives: dict[Collective, list[int]] = {}
    for rank in sorted(waiting):
        collectives.setdefault(answers[rank].collective, []).append(rank)
    alone = [ranks[0] for ranks in collectives.values() if len(ranks) == 1]
    if len(alone) < len(collectives):
        return sorted(alone)
    return sorted(waiting)


def silent(directory: Path, rank: int) -> str:
    """What can be said of a rank that did not answer: its C-level dump, if here."""
    frame = RankDumpFile(directory, rank).main_frame()
    return f"did not answer (faulthandler: {frame})" if frame else "did not answer"


def announce(
    answers: dict[int, Answer],
    *,
    caller: int,
    world_size: int,
    directory: Path,
    store: Any,
    key: str,
    failure_key: str,
) -> Verdict:
    """Decide the verdict from the answers gathered, publish it and print it.

    Args:
        answers: Each answering rank's answer, by rank.
        caller: The rank that called the roll.
        world_size: The number of ranks.
        directory: Where each rank's report file is, on its host.
        store: The store of the roll call.
        key: The store key under which this group's roll call runs.
        failure_key: The failure reporter's key of the job's first failure, where the
            first culprit is published; empty to publish none.

    Returns:
        The verdict, as published.
    """
    line, culprits, began = decide(
        answers, caller=caller, world_size=world_size, directory=directory
    )
    entry = None
    if culprits and failure_key:
        # Published while the hang lasts: the ranks that fail later in their
        # collectives name the culprit first; withdrawn if the hang ends.
        culprit = answers.get(culprits[0])
        host = culprit.host if culprit and culprit.host else "its host"
        entry = Ledger(store, failure_key).publish(
            rank=culprits[0],
            line=f"rank {culprits[0]} on {host} failed: hang: {line}",
            timestamp=int(began),
            kind="hang",
            answered=culprit is not None,
        )
    # The collective the calling rank waits in: the hang ends when it completes.
    mine = answers.get(caller)
    verdict = Verdict(
        line=line,
        culprits=tuple(culprits),
        began=began,
        collective=Collective(mine.op, mine.group) if mine else Collective(None),
        entry=entry,
    )
    store.set(f"{key}/verdict", verdict.encode())
    files = f"each rank's stack is in {directory}/rank-N.txt on its host"
    sys.stderr.write(f"helios hang roll call (rank {caller}): {line}; {files}\n")
    sys.stderr.flush()
    return verdict
