"""What one straggler report found: the typed record a program reads, and its line."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Straggler", "StragglerReport"]


@dataclass(frozen=True)
class Straggler:
    """The rank, or the node, that the other ranks waited for.

    Attributes:
        ranks: The rank named, or every rank of the node named, in order.
        host: Its host.
        node: Whether the whole node is named (its ranks were late together), not one rank.
        last: The share of the collectives compared at which ranks waited (ties aside:
            all arrived together) that it arrived last at, 0 to 1.
        wait: Seconds the other ranks waited for it, on average, at each of those.
        cost: The share of the other ranks' time spent waiting for it (0 to 1).
    """

    ranks: tuple[int, ...]
    host: str
    node: bool
    last: float
    wait: float
    cost: float


@dataclass(frozen=True)
class StragglerReport:
    """One report: which rank arrived last how often, over one period, on rank 0.

    Every rank arrives at each collective of the default group; the one that arrives
    last waits least in it, and the others wait for it. No clock is shared: each rank
    measures its own waits, and the ranks' *k*-th collectives are compared.

    Attributes:
        period: Seconds the compared collectives spanned, on rank 0's clock.
        collectives: Collectives on the default group in the period at which every rank
            waits for every other (all-reduces, all-gathers, all-to-alls,
            reduce-scatters, barriers: not the rooted or point-to-point ones); at most
            the 8,192 most recent.
        compared: Of these, those compared: a random sample of at most 256, where every
            rank's wait is known and every rank made the same operation.
        last: Each rank's share, by rank, of the compared collectives at which ranks
            waited (ties aside) that it arrived last at.
        waited: Each rank's share of the other ranks' time spent waiting for it, by rank.
        hosts: Each rank's host, by rank (empty for a rank that did not answer).
        missing: The ranks that did not answer in time: nothing is judged then.
        straggler: The rank or node that stands out, or None.
        line: The line rank 0 printed (``helios straggler: ...``), empty when none.
    """

    period: float
    collectives: int
    compared: int
    last: tuple[float, ...]
    waited: tuple[float, ...]
    hosts: tuple[str, ...]
    missing: tuple[int, ...]
    straggler: Straggler | None
    line: str
