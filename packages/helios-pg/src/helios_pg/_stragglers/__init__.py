"""The straggler report: which rank, or node, the others wait for, named during training.

Owns ``straggler_report()``, ``StragglerReport`` and ``Straggler``, and the report's
thread (:mod:`helios_pg._stragglers._rounds`). May import helios-env's public names,
helios-pg's shared modules and the reports' front door (the collective tap). ``init``
starts the report through :func:`start_stragglers` once the group has formed and
``shutdown`` stops it through :func:`stop_stragglers`.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

from helios_pg._arrivals import Arrivals
from helios_pg._reports import STRAGGLERS, close_tap, open_tap
from helios_pg._stragglers._report import Straggler, StragglerReport
from helios_pg._stragglers._rounds import Rounds
from helios_pg._stragglers._settings import VARIABLE, report_seconds

__all__ = [
    "VARIABLE",
    "Straggler",
    "StragglerReport",
    "report_seconds",
    "start_stragglers",
    "stop_stragglers",
    "straggler_report",
]

_RUNNING: list[Rounds] = []
_LATEST: list[StragglerReport] = []


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def start_stragglers(
    *,
    rank: int,
    world_size: int,
    period: float,
    base: str,
    connect: Callable[[], Any | None],
    backend: str,
) -> None:
    """Start this rank's part of the straggler report.

    Args:
        rank: This rank.
        world_size: The number of ranks; with one, there is nobody to wait for.
        period: Seconds between two reports.
        base: The store keys of this group's report.
        connect: Opens this rank's own connection to the job's store; run on the
            report's thread, so init never waits for it.
        backend: The default group's backend.
    """
    stop_stragglers()
    _LATEST.clear()
    if world_size < 2:
        return
    if "nccl" in backend.lower():
        if rank == 0:
            message = (
                f"the straggler report (every {period:g} s, from straggler_report= or "
                "HELIOS_STRAGGLER_REPORT) does not measure nccl collectives yet (an nccl call "
                "returns before the GPU waits for its peers): it runs on gloo groups only, so "
                "none is made on this one"
            )
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        return
    arrivals = Arrivals()
    open_tap(STRAGGLERS, arrivals)
    rounds = Rounds(rank, world_size, period, base, connect, arrivals, _say)
    _RUNNING.append(rounds)
    rounds.start()


def stop_stragglers() -> None:
    """Stop the report, if it runs; its latest report stays readable."""
    while _RUNNING:
        rounds = _RUNNING.pop()
        rounds.stopping.set()
        if rounds.latest is not None:
            _LATEST[:] = [rounds.latest]
        close_tap(STRAGGLERS)


def straggler_report() -> StragglerReport | None:
    """The latest straggler report, on rank 0, for a program's own logging.

    Turned on by ``helios_pg.init(straggler_report=SECONDS)`` or
    ``HELIOS_STRAGGLER_REPORT=SECONDS``: every period, rank 0 compares how long each rank
    waited in the same collectives of the default group, and prints one line beginning
    with ``helios straggler:`` when one rank, or one node, is consistently the last to
    arrive. This function returns what that comparison found, also when nothing was
    printed (``report.straggler`` is None then); after ``shutdown``, the last report.

    Returns:
        The latest report; None on ranks other than 0, before the first report, and
        when the report is off.

    Example:
        >>> import helios_pg
        >>> helios_pg.straggler_report() is None  # no group here, so no report
        True
    """
    for rounds in _RUNNING:
        return rounds.latest
    return _LATEST[0] if _LATEST else None
