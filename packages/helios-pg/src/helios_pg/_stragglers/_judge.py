"""Who the others waited for: rank 0's reading of every rank's waits over one period.

Each rank sends how long it waited in the same sample of the default group's
collectives (by number, so the ranks' samples line up). In each collective compared, the
rank that waited least arrived last, and each other rank waited for it the difference
between their waits. Over the period, a rank stands out when it arrived last at most of
the collectives (at least half, 1.5 times its fair share, and more often than chance
would make it, at odds of :data:`CHANCE`) and the others spent at least :data:`MIN_COST`
of their time waiting for it. A node stands out the same way when its ranks were last
together: the earliest of them later than every other node's earliest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from helios_env.integration import ranks_on
from helios_pg._arrivals import MISSING
from helios_pg._stragglers._report import Straggler, StragglerReport

__all__ = ["CHANCE", "MIN_COST", "MIN_SHARE", "RELATIVE_TIE", "TIE", "judge"]

MIN_COST = 0.03
"""The least share of the other ranks' time spent waiting for a rank that names it."""
MIN_SHARE = 0.5
"""The least share of the waiting collectives a rank must have arrived last at."""
TIE = 0.0001
RELATIVE_TIE = 0.2
"""A collective at which the others waited less than ``TIE`` seconds for the last rank, on
average, or less than ``RELATIVE_TIE`` times the period's mean, is a tie: it counts
towards no rank's last arrivals."""
CHANCE = 0.001
"""The most likely a rank's last arrivals may be by chance alone (were every rank as likely
to be last) for it to be named: a few collectives with long waits name nobody."""
_MAX_SHARE = 0.9
_ALIGNED = 0.5
"""The least share of the sample whose operations agree on every rank: below it, the
ranks' collectives do not line up (some rank made others), and nothing is judged."""


def _needed(size: int, world_size: int) -> float:
    """The share of last arrivals that stands out for ``size`` ranks of ``world_size``."""
    return max(MIN_SHARE, min(_MAX_SHARE, 1.5 * size / world_size))


def _amount(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms" if seconds >= 0.0001 else f"{seconds * 1e6:.0f} us"


def _period(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


def _line(straggler: Straggler, collectives: int, period: float) -> str:
    if straggler.node:
        who = f"node {straggler.host} ({ranks_on(list(straggler.ranks), [])})"
    else:
        who = f"rank {straggler.ranks[0]} ({straggler.host or 'host unknown'})"
    return (
        f"helios straggler: {who} arrived last at {straggler.last:.0%} of the collectives at "
        f"which ranks waited ({collectives:,} in the last {_period(period)}); the other ranks "
        f"waited {_amount(straggler.wait)} each time for it ({straggler.cost:.0%} of their time)"
    )


class _Stats(NamedTuple):
    """Each row's (a rank's, or a node's) part in one period's waiting."""

    last: list[float]
    """The share of the waiting collectives at which it arrived last."""
    cost: list[float]
    """The share of the others' time spent waiting for it."""
    wait: list[float]
    """The others' mean wait for it where it arrived last (ties aside), in seconds."""
    hits: list[int]
    """The waiting collectives at which it arrived last."""
    total: int
    """The waiting collectives (those that were no tie)."""


def _stats(columns: Sequence[Sequence[float]], rows: int, scale: float) -> _Stats:
    """Who arrived last at each collective (a column of waits, in seconds), and its cost."""
    lasts, others = [], []
    for column in columns:
        least = min(column)
        lasts.append(column.index(least))
        others.append((sum(column) - least * rows) / (rows - 1))
    tie = max(TIE, RELATIVE_TIE * sum(others) / len(others))
    excess, hits, held = [0.0] * rows, [0] * rows, [0.0] * rows
    for row, waited in zip(lasts, others, strict=True):
        excess[row] += waited
        if waited >= tie:  # where every row arrived together, nobody was last: a tie
            hits[row] += 1
            held[row] += waited
    total = sum(hits)
    return _Stats(
        [n / max(1, total) for n in hits],
        [e * scale for e in excess],
        [h / max(1, n) for h, n in zip(held, hits, strict=True)],
        hits,
        total,
    )


def _chance(hits: int, trials: int, share: float) -> float:
    """How likely a row with a fair ``share`` of last arrivals is last ``hits`` times or more.

    Of ``trials`` collectives, by chance alone: the upper tail of the binomial distribution.
    """
    if hits <= 0 or share >= 1.0:
        return 1.0
    log_share, log_rest = math.log(share), math.log1p(-share)
    terms = (
        math.lgamma(trials + 1) - math.lgamma(j + 1) - math.lgamma(trials - j + 1)
        + j * log_share + (trials - j) * log_rest
        for j in range(hits, trials + 1)
    )  # fmt: skip
    return min(1.0, sum(math.exp(term) for term in terms))


def _standing(stats: _Stats, sizes: Sequence[int], world_size: int) -> int | None:
    """The row that stands out, if one does: the one the others waited for most."""
    best = max(range(len(sizes)), key=stats.cost.__getitem__)
    fair = sizes[best] / world_size
    often = stats.last[best] >= _needed(sizes[best], world_size)
    unlikely = _chance(stats.hits[best], stats.total, fair) <= CHANCE
    return best if often and unlikely and stats.cost[best] >= MIN_COST else None


def _by_node(hosts: Sequence[str]) -> dict[str, list[int]]:
    """The ranks of each host; empty unless they are on several nodes, one with more."""
    nodes: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        nodes.setdefault(host, []).append(rank)
    several = len(nodes) > 1 and any(len(ranks) > 1 for ranks in nodes.values())
    return nodes if several else {}


def _straggler(stats: _Stats, row: int, ranks: tuple[int, ...], host: str) -> Straggler:
    return Straggler(
        ranks=ranks,
        host=host,
        node=len(ranks) > 1,
        last=stats.last[row],
        wait=stats.wait[row],
        cost=stats.cost[row],
    )


def _judged(
    columns: list[tuple[float, ...]], hosts: Sequence[str], scale: float
) -> tuple[_Stats, Straggler | None]:
    """Each rank's part, and the node or rank that stands out.

    A node's ranks arrived last together where the earliest of them arrived after every
    other node's earliest: the node is named, before any one rank.
    """
    world_size = len(hosts)
    stats = _stats(columns, world_size, scale)
    nodes = _by_node(hosts)
    if nodes:
        members = list(nodes.values())
        earliest = [tuple(max(column[r] for r in ranks) for ranks in members) for column in columns]
        node_stats = _stats(earliest, len(members), scale)
        found = _standing(node_stats, [len(ranks) for ranks in members], world_size)
        if found is not None and len(members[found]) > 1:
            ranks = tuple(members[found])
            return stats, _straggler(node_stats, found, ranks, hosts[ranks[0]])
    found = _standing(stats, [1] * world_size, world_size)
    if found is None:
        return stats, None
    return stats, _straggler(stats, found, (found,), hosts[found])


def judge(
    waits: Mapping[int, Sequence[int]],
    ops: Mapping[int, bytes],
    hosts: Sequence[str],
    *,
    collectives: int,
    period: float,
) -> StragglerReport:
    """Judge one period from every rank's waits.

    Args:
        waits: Each answering rank's waits in microseconds, the same sample of
            collectives in the same order (``MISSING`` where a rank's is not known).
        ops: Each answering rank's operation codes for the same sample.
        hosts: Each rank's host, by rank (its length is the world size; empty where a
            rank did not answer).
        collectives: How many collectives the period held (the sample is drawn from them).
        period: Seconds the period spanned.

    Returns:
        The report. Its ``straggler`` is None when no rank or node stands out, and when
        some rank did not answer (it may be the one the others waited for): those are
        its ``missing``.
    """
    world_size = len(hosts)
    missing = tuple(rank for rank in range(world_size) if rank not in waits)
    last = [0.0] * world_size
    waited = [0.0] * world_size
    compared = 0
    straggler = None
    if world_size >= 2 and not missing and period > 0:
        rows = [waits[rank] for rank in range(world_size)]
        codes = [ops[rank] for rank in range(world_size)]
        kept = [
            tuple(row[k] / 1e6 for row in rows)
            for k in range(len(rows[0]))
            if all(row[k] != MISSING for row in rows) and all(c[k] == codes[0][k] for c in codes)
        ]
        if kept and len(kept) >= _ALIGNED * len(rows[0]):
            compared = len(kept)
            scale = max(collectives, compared) / compared / period
            stats, straggler = _judged(kept, hosts, scale)
            last, waited = stats.last, stats.cost
    return StragglerReport(
        period=period,
        collectives=collectives,
        compared=compared,
        last=tuple(last),
        waited=tuple(waited),
        hosts=tuple(hosts),
        missing=missing,
        straggler=straggler,
        line=_line(straggler, collectives, period) if straggler is not None else "",
    )
