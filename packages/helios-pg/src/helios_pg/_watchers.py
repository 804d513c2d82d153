"""What ``init`` sets up beside the group once it has formed, for ``shutdown`` to undo.

The layout learned from the ranks' host names is recorded for ``helios_env``. The
failure reporter (:mod:`helios_pg._failure`) and the hang watchdog
(:mod:`helios_pg._watchdog`) are started, each with a connection of its own to the
job's store (:func:`helios_pg._rendezvous.side_channel`) where init reached that store
itself; otherwise the reporter writes only this rank's error file and the watchdog
uses the group's own store.
"""

from __future__ import annotations

import os

import torch.distributed as dist

from helios_env._layout import Layout, record_layout
from helios_pg._failure import install as install_reporter
from helios_pg._rendezvous import EnvStore, Meeting, side_channel
from helios_pg._watchdog import start as start_watchdog

__all__ = ["after_init"]


def after_init(
    layout: Layout | None,
    meeting: Meeting | None,
    env_store: EnvStore | None,
    *,
    report_failures: bool,
    hang: float | None,
) -> None:
    """Record what init learned; install the failure reporter and the watchdog.

    Args:
        layout: The layout learned from the ranks' host names, if any.
        meeting: Where the ranks met, when init reached the store itself.
        env_store: The store they met at, when init reached it itself.
        report_failures: Whether to install the failure reporter.
        hang: The hang timeout in seconds; None starts no watchdog.
    """
    if layout is not None:
        record_layout(layout)
    reporter = None
    if report_failures:
        # Opened in the background: a request of a failing rank waits at most 2 s for it.
        channel = side_channel(meeting, env_store, 2.0) if meeting and env_store else None
        reporter = install_reporter(dist.get_rank(), *(channel or (None, "")))
    if hang is not None:
        # Opened now: the watchdog's first tick must find it (else the group's store).
        watch = side_channel(meeting, env_store) if meeting and env_store else None
        store, key = watch or (dist.distributed_c10d._get_default_store(), "helios_pg/failed")
        watchdog = start_watchdog(
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            store=store,
            key=key.replace("/failed", "/hang", 1),
            timeout=hang,
            job=meeting.job if meeting else f"pid-{os.getpid()}",
            failure_key=key if watch else "",
        )
        if reporter is not None:
            reporter.settle = watchdog.settle
