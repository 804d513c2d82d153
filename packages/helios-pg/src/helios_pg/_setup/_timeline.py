"""When each rank started, and the warning about ranks that reached the rendezvous late.

Four moments of a rank, in wall-clock seconds: its process started (the OS's record of
it, not when helios was imported), ``helios_pg`` was imported, ``init`` was called, the
rank reached the rendezvous store. They ride the exchange of host names that init makes
anyway (:mod:`helios_pg._setup._nodes`): no request of their own. Rank 0 then compares
them. Where, in the order of arrival, more than :data:`LATE` seconds pass with no rank
arriving, the ranks that came after are late (a node of four that started 38 s after
the others, or half the job); rank 0 warns once (:class:`~helios_pg._errors.StartupWarning`), naming
the late ranks with their hosts, how late the last one was, and the step where they
lost the most time against the others: the process started late (the launcher, the
scheduler), helios was imported late after it (Python's imports from a slow file
system), init was called late after that (the program's own work first), or reaching
the store took long (the network). Arrivals compare clocks of several hosts, so they
are as exact as the hosts' clocks agree (NTP: milliseconds); the steps compare each
rank's own clock with itself.
"""

from __future__ import annotations

import os
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import helios_pg
from helios_env.integration import ranks_on
from helios_pg._errors import StartupWarning
from helios_pg._setup._agreement import user_stacklevel

__all__ = ["IMPORTED", "LATE", "Arrival", "late_start", "process_started", "warn_of_late_start"]

IMPORTED: float = helios_pg._IMPORTED
"""When the program imported ``helios_pg`` (not torch: ``helios_pg`` loads it on first use)."""
LATE = 10.0
"""Seconds with no rank arriving at the store after which the ranks still to come are late."""


def process_started() -> float | None:
    """When this process started, in wall-clock seconds; None where the OS does not say."""
    try:
        fields = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
        lines = Path("/proc/stat").read_text().splitlines()
        boot = next(int(line.split()[1]) for line in lines if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


@dataclass(frozen=True, slots=True)
class Arrival:
    """One rank's moments, wall-clock seconds: from its start to the store."""

    started: float | None
    imported: float
    called: float
    reached: float

    def encode(self) -> str:
        """The moments as one short field of the exchange: ``started,imported,...``."""
        moments = (self.started, self.imported, self.called, self.reached)
        return ",".join("" if moment is None else f"{moment:.3f}" for moment in moments)

    @classmethod
    def decode(cls, text: str) -> Arrival | None:
        """The moments of :meth:`encode`; None for a rank that sent none (an older helios)."""
        parts = text.split(",")
        try:
            started, imported, called, reached = (float(part) if part else None for part in parts)
        except ValueError:
            return None
        if imported is None or called is None or reached is None:
            return None
        return cls(started, imported, called, reached)


_STEPS = (
    "their processes started {} s after the others' (the launcher or the scheduler)",
    "{} s more than the others from their processes' start to importing helios (Python's "
    "imports: a slow file system?)",
    "{} s more than the others from importing helios to calling init (the program's own "
    "work before it)",
    "{} s more than the others from calling init to reaching the store (the network)",
)


def _steps(arrival: Arrival, first_start: float) -> tuple[float, ...]:
    started = arrival.started if arrival.started is not None else arrival.imported
    imported = arrival.imported - started if arrival.started is not None else 0.0
    return (
        started - first_start,
        imported,
        arrival.called - arrival.imported,
        arrival.reached - arrival.called,
    )


def _medians(rows: list[tuple[float, ...]]) -> list[float]:
    """Each column's median."""
    return [statistics.median(row[column] for row in rows) for column in range(len(_STEPS))]


def late_start(arrivals: Sequence[Arrival | None], hosts: Sequence[str]) -> str | None:
    """The warning about ranks that reached the store late; None when none did.

    Args:
        arrivals: Each rank's moments, by rank (None where a rank sent none).
        hosts: Each rank's host, by rank.

    Returns:
        One line: the late ranks and their hosts, how late the last one was, and the
        step where they lost the most time against the ranks on time.
    """
    known = {rank: arrival for rank, arrival in enumerate(arrivals) if arrival is not None}
    order = sorted(known, key=lambda rank: known[rank].reached)
    gaps = range(1, len(order))
    cut = next((i for i in gaps if known[order[i]].reached - known[order[i - 1]].reached > LATE), 0)
    if not cut:
        return None
    late = sorted(order[cut:])
    on_time = [known[rank] for rank in order[:cut]]
    first = min(arrival.reached for arrival in known.values())
    last = max(known[rank].reached for rank in late)
    starts = [a.started if a.started is not None else a.imported for a in known.values()]
    first_start = min(starts)
    theirs = _medians([_steps(known[rank], first_start) for rank in late])
    ours = _medians([_steps(arrival, first_start) for arrival in on_time])
    excess = [mine - usual for mine, usual in zip(theirs, ours, strict=True)]
    step = max(range(len(excess)), key=excess.__getitem__)
    return (
        f"{ranks_on(late, hosts)} reached the rendezvous store {last - first:.0f} s after "
        f"the first rank; most of the difference: {_STEPS[step].format(f'{excess[step]:.0f}')}"
    )


def warn_of_late_start(timings: Sequence[str], hosts: Sequence[str]) -> None:
    """Warn once (rank 0 does) where ranks reached the store late; see :func:`late_start`.

    Args:
        timings: Each rank's :meth:`Arrival.encode`, by rank; empty where it sent none.
        hosts: Each rank's host, by rank.
    """
    message = late_start([Arrival.decode(timing) for timing in timings], hosts)
    if message is not None:
        warnings.warn(message, StartupWarning, stacklevel=user_stacklevel())
