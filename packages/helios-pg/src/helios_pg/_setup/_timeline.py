"""When each rank started, and the warning about ranks that reached the rendezvous late.

Six moments of a rank, in wall-clock seconds: its process started (the OS's record of
it, not when helios was imported), the program imported ``helios_pg``, it first asked
for ``init`` (or ``process_group``, ``shutdown``), whose module loads torch, and had it,
``init`` was called, the rank reached the rendezvous store. They ride the exchange of
host names that init makes anyway (:mod:`helios_pg._setup._nodes`): no request of their
own; an init through ``init_method``, a ``store`` or an adopted group makes none and
notes nothing. Rank 0 then compares them. Each rank's arrival is when it reached the
store, less the time it waited there for rank 0 to open it (the others cannot count in
before), so that a late rank 0 is late itself rather than making every rank late. Where,
in the order of arrival, more than :data:`LATE` seconds pass with no rank arriving, the
ranks that came after are late (a node that started 38 s after the others, or half the
job; ranks that trickle in one after another are not); rank 0 warns once
(:class:`~helios_pg._errors.StartupWarning`), naming the late ranks with their hosts,
how late the last one was, and the step where they lost the most time against the
others: the process started late (the launcher, the scheduler), helios was imported late
after it (Python's imports: a slow file system), loading torch took long, the program's
own work before init took long, or reaching the store took long (the network). Arrivals
and the first step compare clocks of several hosts (the first step also the OS's boot
time, kept in whole seconds), so they are as exact as the hosts' clocks agree (NTP:
milliseconds); the other steps compare each rank's clock with itself.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import helios_pg
from helios_env.integration import ranks_on
from helios_pg._errors import StartupWarning
from helios_pg._setup._agreement import user_stacklevel

__all__ = [
    "LATE",
    "Arrival",
    "StartupMoments",
    "group_formed",
    "late_start",
    "process_started",
    "startup_moments",
    "warn_of_late_start",
]

_LOADED = time.time()
"""When this module loaded: init's module was imported directly, not through helios_pg."""
LATE = 10.0
"""Seconds with no rank arriving at the store after which the ranks still to come are late."""


@functools.cache
def process_started() -> float | None:
    """When this process started, in wall-clock seconds; None where the OS does not say."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        with Path("/proc/stat").open() as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _setup_loaded() -> tuple[float, float]:
    """When the program first asked for init's module (which loads torch), and had it."""
    asked, loaded = helios_pg._SETUP_ASKED, helios_pg._SETUP_LOADED
    if asked is None or loaded is None:  # init's module was imported directly
        return _LOADED, _LOADED
    return asked, loaded


@dataclass(frozen=True, slots=True)
class Arrival:
    """One rank's moments, wall-clock seconds: from its start to the store."""

    started: float | None
    imported: float
    asked: float
    loaded: float
    called: float
    reached: float

    @classmethod
    def now(cls, called: float, reached: float) -> Arrival:
        """This rank's moments, once it has called init (``called``) and reached the store."""
        asked, loaded = _setup_loaded()
        return cls(process_started(), helios_pg._IMPORTED, asked, loaded, called, reached)

    def encode(self) -> str:
        """The moments as one short field of the exchange: ``started,imported,...``."""
        moments = (self.started, self.imported, self.asked, self.loaded, self.called)
        text = ("" if moment is None else f"{moment:.3f}" for moment in (*moments, self.reached))
        return ",".join(text)

    @classmethod
    def decode(cls, text: str) -> Arrival | None:
        """The moments of :meth:`encode`; None for a rank that sent none (an older helios)."""
        parts = text.split(",")
        if len(parts) != 6:
            return None
        try:
            started, *rest = (float(part) if part else None for part in parts)
        except ValueError:
            return None
        moments = [moment for moment in rest if moment is not None]
        if len(moments) != 5:
            return None
        return cls(started, *moments)


_STEPS = (
    "their processes started {} s after the others' (the launcher or the scheduler)",
    "{} s more than the others from their processes' start to importing helios (Python's "
    "imports: a slow file system?)",
    "{} s more than the others loading torch (on init's first use: a slow file system?)",
    "{} s more than the others in the program's own work before calling init",
    "{} s more than the others from calling init to reaching the store (the network)",
)


def _steps(arrival: Arrival, first_start: float, reached: float) -> tuple[float, ...]:
    """Each step's seconds; moments inherited from a parent (a forked rank) count as 0."""
    started = arrival.started if arrival.started is not None else arrival.imported
    imported = max(arrival.imported, started)
    asked = max(arrival.asked, imported)
    loaded = max(arrival.loaded, asked)
    called = max(arrival.called, loaded)
    return (
        started - first_start,
        imported - started,
        loaded - asked,
        (asked - imported) + (called - loaded),
        max(reached - called, 0.0),
    )


def _arrivals(known: dict[int, Arrival]) -> dict[int, float]:
    """When each rank would have reached the store, less its wait for rank 0 to open it."""
    host = known.get(0)
    if host is None:
        return {rank: arrival.reached for rank, arrival in known.items()}
    found = {}
    for rank, arrival in known.items():
        waited = max(0.0, min(host.reached, arrival.reached) - arrival.called) if rank else 0.0
        found[rank] = arrival.reached - waited
    return found


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
    came = _arrivals(known)
    order = sorted(known, key=came.__getitem__)
    gaps = range(1, len(order))
    cut = next((i for i in gaps if came[order[i]] - came[order[i - 1]] > LATE), 0)
    if not cut:
        return None
    late, on_time = sorted(order[cut:]), order[:cut]
    first, last = came[order[0]], max(came[rank] for rank in late)
    first_start = min(a.started if a.started is not None else a.imported for a in known.values())
    theirs = _medians([_steps(known[rank], first_start, came[rank]) for rank in late])
    ours = _medians([_steps(known[rank], first_start, came[rank]) for rank in on_time])
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


@dataclass(frozen=True, slots=True)
class StartupMoments:
    """When this rank started, in wall-clock seconds (:func:`time.time`).

    From :func:`helios_pg.startup_moments`; a moment not noted is None: ``init`` not
    called yet, or an ``init`` through ``init_method``, a ``store`` or an adopted group,
    which reaches no store of helios's.

    Attributes:
        process_started: The process's start, as the OS records it (Linux).
        helios_imported: The program's ``import helios_pg``.
        torch_loaded: ``init``'s module, and torch with it, loaded (on first use).
        init_called: The latest ``init`` was called.
        store_reached: That ``init`` reached the rendezvous store (helios's own).
        group_formed: Its process group formed.
    """

    process_started: float | None
    helios_imported: float
    torch_loaded: float | None
    init_called: float | None
    store_reached: float | None
    group_formed: float | None


_noted: dict[str, float | None] = {}


def group_formed(called: float | None, reached: float | None) -> None:
    """Note the latest init's moments, once its group has formed (init calls it)."""
    _noted.update(init_called=called, store_reached=reached or None, group_formed=time.time())


def startup_moments() -> StartupMoments:
    """This rank's start-up: the process's start, helios's import, the latest init's steps.

    ``python -m helios_collectives`` gathers every rank's and prints them by node.

    Returns:
        The moments noted so far, in wall-clock seconds.
    """
    return StartupMoments(
        process_started(),
        helios_pg._IMPORTED,
        _setup_loaded()[1],
        _noted.get("init_called"),
        _noted.get("store_reached"),
        _noted.get("group_formed"),
    )
