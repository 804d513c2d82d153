"""When this rank arrived at each collective of the default group, and when it left.

One ring of the most recent :data:`SIZE` collectives, filled by the collective tap
(``helios_pg._reports``: its wrappers for the calls the main thread waits in, its hook for
the work issued without a wait, DistributedDataParallel's included) and read by the
straggler report (``helios_pg._stragglers``). The *k*-th collective of the default group
is the same collective on every rank, so the ranks' rings line up by that number with
no clock shared between hosts: the rank that waited least in collective *k* arrived last.
"""

from __future__ import annotations

import itertools
import zlib
from array import array
from collections.abc import Iterable

__all__ = ["MISSING", "SIZE", "Arrivals", "op_code"]

SIZE = 1 << 14
"""Collectives kept: the oldest are overwritten."""
MISSING = 0xFFFFFFFF
"""A wait not known: the collective has not completed, or was overwritten."""
_MASK = SIZE - 1
_MAX_WAIT = MISSING - 1


def op_code(name: str) -> int:
    """One byte that names an operation, to tell whether two ranks' *k*-th calls agree."""
    return zlib.crc32(name.encode()) & 0xFF


class Arrivals:
    """The ring of this rank's most recent collectives on the default group.

    ``count`` collectives were noted so far; collective ``k`` (from 0) sits at
    ``k % SIZE`` as one tuple, written at once: its number, its operation's code, when it
    was issued and when it completed (0.0 until then), as ``time.monotonic()``. A slot
    read back is the collective asked for only where its number says so.

    Threads that note at once (the main thread's wrapper, the hook's future callbacks)
    never share a number: each is drawn from one counter in a single step. ``count``
    may lag behind by the collectives being noted at that moment.
    """

    __slots__ = ("_numbers", "count", "ring")

    def __init__(self) -> None:
        self.count = 0
        self._numbers = itertools.count()
        self.ring: list[tuple[int, int, float, float]] = [(-1, 0, 0.0, 0.0)] * SIZE

    def add(self, op: int, start: float, end: float) -> None:
        """Note a collective this rank waited in from ``start`` to ``end``."""
        number = next(self._numbers)
        self.ring[number & _MASK] = (number, op, start, end)
        self.count = number + 1

    def issue(self, op: int, start: float) -> int:
        """Note a collective issued at ``start`` whose completion comes later; its number."""
        number = next(self._numbers)
        self.ring[number & _MASK] = (number, op, start, 0.0)
        self.count = number + 1
        return number

    def done(self, number: int, end: float) -> None:
        """Note that collective ``number`` completed at ``end`` (ignored once overwritten)."""
        slot = self.ring[number & _MASK]
        if slot[0] == number:
            self.ring[number & _MASK] = (number, slot[1], slot[2], end)

    def _slot(self, number: int) -> tuple[int, int, float, float] | None:
        """Collective ``number``'s slot, where it is still kept and has completed."""
        slot = self.ring[number & _MASK]
        return slot if slot[0] == number and slot[3] != 0.0 else None

    def known(self, number: int) -> bool:
        """Whether collective ``number`` was noted and has completed (and is still kept)."""
        return self._slot(number) is not None

    def span(self, first: int, end: int) -> float:
        """Seconds from the issue of collective ``first`` to the completion of ``end - 1``.

        Returns:
            The seconds, or 0.0 where either is not known.
        """
        begun, ended = self._slot(first), self._slot(end - 1)
        if end <= first or begun is None or ended is None:
            return 0.0
        return max(0.0, ended[3] - begun[2])

    def waits(self, numbers: Iterable[int]) -> tuple[array[int], bytes]:
        """Each collective's wait in microseconds (:data:`MISSING` where not known), and ops.

        Args:
            numbers: The collectives asked for, by number.

        Returns:
            Their waits and their operations' codes, in the order of ``numbers``.
        """
        waits = array("I")
        ops = bytearray()
        for number in numbers:
            slot = self._slot(number)
            if slot is None:
                waits.append(MISSING)
                ops.append(0)
                continue
            waits.append(min(max(round((slot[3] - slot[2]) * 1e6), 0), _MAX_WAIT))
            ops.append(slot[1])
        return waits, bytes(ops)
