"""One roll call's state on one rank: which round, whether it answered, what it waited in.

A rank's watchdog holds one :class:`Round` at a time; when a hang ends, the next round
begins with a fresh one, so no flag of an ended hang leaks into the next.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios_pg._reports._issued import Place
from helios_pg._reports._records import Collective, Verdict

__all__ = ["Round", "Waited", "describe"]


def describe(place: Place | None, top: str | None = None) -> str:
    """Where a rank is, as the roll call's report says it."""
    if place is None or place.op is None:
        return f"in no collective, at {top}" if top else "in no collective"
    group = place.group
    group = f" on {group}" if group else ""
    site = f"at {place.site}" if place.site else "issued from C++"
    return f"in {place.op} #{place.seq}{group} {site}"


@dataclass(frozen=True, slots=True)
class Waited:
    """What a rank waited in when it answered, to tell when that very call completed.

    Attributes:
        token: The wrapper's call number, or the issued work's key as ``-1 - key``.
        failures: How many collectives had failed on this rank by then.
        collective: The collective, as the verdict names the calling rank's.
    """

    token: int
    failures: int
    collective: Collective


@dataclass(slots=True)
class Round:
    """The roll call under way, or the next one, as one rank sees it.

    Attributes:
        number: The round: a new one begins when a hang has ended.
        answered: Whether this rank answered this round's roll call.
        waited: What it waited in when it answered, if anything.
        verdict: The calling rank's verdict, once read.
        convicted: Whether this rank wrote its error file as a culprit of this round.
        finished: How many of its collectives had completed when it was named, if it
            was: one more completing means it caught up, whatever the others wait in.
        acquitted: Whether it was named and has caught up since.
    """

    number: int = 0
    answered: bool = False
    waited: Waited | None = None
    verdict: Verdict | None = None
    convicted: bool = False
    finished: tuple[int, int] | None = None
    acquitted: bool = False

    def key(self, base: str) -> str:
        """The store key of this round under the group's roll-call key."""
        return f"{base}/{self.number}"

    def next(self) -> Round:
        """The round after this one, with nothing answered or decided."""
        return Round(self.number + 1)
