"""The front door's two calls: start watching a group's ranks, and stop.

``init`` calls :func:`watch` once the group has formed and ``shutdown`` calls
:func:`stop_reports`; the failure reporter and the hang watchdog behind them are this
package's own business.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helios_pg._reports import _watchdog
from helios_pg._reports._reporter import install as install_reporter
from helios_pg._reports._reporter import uninstall as uninstall_reporter
from helios_pg._reports._watchdog import start as start_watchdog

__all__ = ["WATCHDOG_SOURCE", "start_watchdog", "stop_reports", "watch"]

WATCHDOG_SOURCE = str(Path(_watchdog.__file__))
"""The watchdog's source file, as its thread's frames name it in a stack dump."""


def watch(
    *,
    rank: int,
    world_size: int,
    report_store: Any | None,
    watch_store: Any | None,
    key: str,
    job: str,
    report_failures: bool,
    hang: float | None,
    shared: bool = True,
) -> None:
    """Install the failure reporter and start the hang watchdog, as asked.

    Args:
        rank: This rank.
        world_size: The number of ranks.
        report_store: The reporter's own connection to the job's store (requests wait a
            short while for it), or None to write only this rank's error file.
        watch_store: The watchdog's own connection to the job's store, open now.
        key: The store key of this group's first failure (``.../failed/...``): the
            roll call runs beside it, under ``.../hang/...``.
        job: The job's identity, for the name of the watchdog's report folder.
        report_failures: Whether to install the failure reporter.
        hang: The hang timeout in seconds; None starts no watchdog.
        shared: Whether ``watch_store`` reaches the ledger ``report_store`` writes (the
            same store): where not, the watchdog keeps a roll call of its own under
            ``key`` and neither reads nor writes the reporter's failures.

    Raises:
        ValueError: A hang timeout is asked for but no store was given for it.
    """
    reporter = None
    if report_failures:
        reporter = install_reporter(rank, report_store, key if report_store is not None else "")
    if hang is None:
        return
    if watch_store is None:
        message = f"the hang watchdog (hang_timeout={hang:g}) needs a connection to the store"
        raise ValueError(message)
    watchdog = start_watchdog(
        rank=rank,
        world_size=world_size,
        store=watch_store,
        key=key.replace("/failed", "/hang", 1),
        timeout=hang,
        job=job,
        failure_key=key if shared else "",
    )
    if reporter is not None:
        reporter.settle = watchdog.settle


def stop_reports(*, hand_back: bool = False) -> None:
    """Stop the watchdog and take the failure reporter's hooks back.

    Args:
        hand_back: Take them back also while an exception propagates (it is reported
            first): the group was adopted, and its owner catches that exception.
    """
    _watchdog.stop()
    uninstall_reporter(hand_back=hand_back)
