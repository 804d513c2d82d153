"""The front door's two calls: start watching a group's ranks, and stop.

``init`` calls :func:`watch` once the group has formed and ``shutdown`` calls
:func:`stop_reports`; the failure reporter and the hang watchdog behind them are this
package's own business. Here too: starting this process's watchdog thread, with what it
needs (the wrappers, the hooks, its stack-dump file), and stopping it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

from helios_pg._reports import _watchdog
from helios_pg._reports._hang_directory import report_directory, tidy
from helios_pg._reports._hang_settings import SIGNAL_VARIABLE, signal_number
from helios_pg._reports._reporter import install as install_reporter
from helios_pg._reports._reporter import uninstall as uninstall_reporter
from helios_pg._reports._stackdump import RankDumpFile
from helios_pg._reports._tap import WATCHDOG, close_tap, open_tap
from helios_pg._reports._watchdog import STOP_WAIT, Watchdog

__all__ = [
    "WATCHDOG_SOURCE",
    "named_hung",
    "start_watchdog",
    "stop_reports",
    "stop_watchdog",
    "watch",
]

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
    stop_watchdog()
    uninstall_reporter(hand_back=hand_back)


def start_watchdog(
    *,
    rank: int,
    world_size: int,
    store: Any,
    key: str,
    timeout: float,
    job: str,
    failure_key: str = "",
) -> Watchdog:
    """Start this rank's watchdog and wrap ``torch.distributed``'s collectives.

    Args:
        rank: This rank.
        world_size: The number of ranks.
        store: A store client of its own, with a short timeout.
        key: The store key under which this group's roll call runs.
        timeout: Seconds in one collective after which the roll is called.
        job: The job's identity, for the name of the report directory.
        failure_key: The failure reporter's key of the job's first failure, where the
            roll call's culprit is published.

    Returns:
        The running watchdog.

    Raises:
        ValueError: ``HELIOS_HANG_SIGNAL`` names no signal.
    """
    stop_watchdog()
    number = signal_number(os.environ.get(SIGNAL_VARIABLE))
    base, own = report_directory(job)
    tap = open_tap(WATCHDOG)
    watchdog = Watchdog(
        rank,
        world_size,
        store,
        key,
        timeout,
        base,
        current=tap.current,
        main=tap.main,
        originals=tap.originals,
        failure_key=failure_key,
        issued=tap.issued,
        wrapper_code=tap.code,
    )
    watchdog.own_directory = own
    with contextlib.suppress(OSError):
        watchdog.dump = RankDumpFile(base, rank).open(watchdog.main, signal_number=number)
    if watchdog.dump is not None:  # armed now: the main thread may never let the loop run
        watchdog.dump.arm(timeout + 1)
    watchdog.thread = threading.Thread(
        target=watchdog.run, name="helios-hang-watchdog", daemon=True
    )
    watchdog.thread.start()
    _watchdog._watchdog = watchdog  # one a process, for the default group
    return watchdog


def named_hung() -> bool:
    """Whether the hang roll call has named this rank a culprit, and the hang goes on.

    Such a rank is stuck where no stop flag is looked at: a stop signal must end it
    (``helios_pg._preempt`` asks, from its signal handler).
    """
    watchdog = _watchdog._watchdog
    if watchdog is None:
        return False
    verdict = watchdog.round.verdict
    named = verdict is not None and watchdog.rank in verdict.culprits
    return named and not watchdog.round.acquitted


def stop_watchdog() -> None:
    """Stop the watchdog, if one runs, and put ``torch.distributed`` back as it was."""
    watchdog = _watchdog._watchdog
    if watchdog is None:
        return
    _watchdog._watchdog = None
    watchdog.stopping.set()
    if watchdog.thread is not None and watchdog.thread is not threading.current_thread():
        # It wakes at once, unless a store request is under way (its timeout is short).
        watchdog.thread.join(timeout=STOP_WAIT)
    close_tap(WATCHDOG)
    if watchdog.dump is not None:
        watchdog.dump.close()
    if not watchdog.spoke:
        tidy(watchdog.directory, watchdog.dump, remove_directory=watchdog.own_directory)
