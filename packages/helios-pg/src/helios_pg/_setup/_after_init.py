"""What ``init`` sets up beside the group once it has formed, for ``shutdown`` to undo.

The layout learned from the ranks' host names is recorded for ``helios_env``, and the
requeue marker that asked for this run is removed. The failure reporter and the hang
watchdog (:mod:`helios_pg._reports`) are started, each with a connection of its own to
the job's store: a new client of the store init met at
(:func:`helios_pg._setup._store.side_channel`), or, where the group was made from
``init_method=`` or ``store=``, a clone of the group's store where torch can clone it
(a ``TCPStore``; an in-process ``HashStore`` is shared as it is).
"""

from __future__ import annotations

import itertools
import os
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from helios_env import DistributedInfo
from helios_env.integration import record_layout
from helios_pg._preempt import marker_consumed
from helios_pg._reports import watch
from helios_pg._setup._store import EnvStore, Meeting, side_channel
from helios_pg._setup._timeline import group_formed
from helios_pg._stragglers import start_stragglers

__all__ = ["after_init", "own_connection"]

_SIDE_TIMEOUT = timedelta(seconds=2)
_INITS = itertools.count()
"""This process's inits of a group it did not meet for: each gets keys of its own."""
_REPORTS = itertools.count()
"""The same for the straggler report, whose keys go apart: the watchdog's keys are the
same on every rank whether the report is on or off."""


def own_connection(store: Any) -> Any:
    """A connection of its own to ``store``, with a short timeout, else ``store`` itself.

    Args:
        store: The group's store (torch's ``PrefixStore`` over the store it was made on).

    Returns:
        A clone of ``store`` (a new client of the same server, under the same prefix)
        where torch can clone it, else ``store``.
    """
    clone = getattr(store, "clone", None)
    if clone is None:
        return store
    try:
        own = clone()
        own.set_timeout(_SIDE_TIMEOUT)
    except (RuntimeError, NotImplementedError, ValueError):
        return store
    return own


def _group_store() -> Any | None:
    """A connection of its own to the default group's store; None where it has none."""
    getter = getattr(dist.distributed_c10d, "_get_default_store", None)
    try:
        return None if getter is None else own_connection(getter())
    except (RuntimeError, ValueError):
        return None


def _start_stragglers(period: float, meeting: Meeting | None, env_store: EnvStore | None) -> None:
    """Start the straggler report, on its own connection to the job's store."""
    if meeting is not None and env_store is not None:
        base = env_store.joined_key.replace("/joined/", "/stragglers/", 1)

        def connect() -> Any | None:
            opened = side_channel(meeting, env_store)
            return opened[0] if opened is not None else None

    else:
        base = f"helios_pg/stragglers/{next(_REPORTS)}"
        connect = _group_store
    start_stragglers(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        period=period,
        base=base,
        connect=connect,
        backend=str(dist.get_backend()),
    )


def after_init(
    layout: DistributedInfo | None,
    meeting: Meeting | None,
    env_store: EnvStore | None,
    *,
    report_failures: bool,
    hang: float | None,
    stragglers: float | None = None,
    job: str | None = None,
    called: float | None = None,
) -> None:
    """Record what init learned; install the failure reporter, the watchdog, the report.

    Rank 0 also removes the requeue marker that asked for this run: every rank has
    counted it before the group could form.

    Args:
        layout: The layout learned from the ranks' host names, if any.
        meeting: Where the ranks met, when init reached the store itself.
        env_store: The store they met at, when init reached it itself.
        report_failures: Whether to install the failure reporter.
        hang: The hang timeout in seconds; None starts no watchdog. A group without a
            store (an adopted one) gets none.
        stragglers: The straggler report's period in seconds; None starts none.
        job: The job's identity as the launcher says it, where init did not meet the
            others itself: every rank's reports then go to one folder per host.
        called: When init was called, for :func:`helios_pg.startup_moments`; None for
            an adopted group.
    """
    group_formed(called, env_store.reached if env_store is not None else None)
    if layout is not None:
        record_layout(layout)
    marker_consumed(dist.get_rank())
    _watch(meeting, env_store, report_failures=report_failures, hang=hang, job=job)
    if stragglers is not None:  # once what can fail has not
        _start_stragglers(stragglers, meeting, env_store)


def _watch(
    meeting: Meeting | None,
    env_store: EnvStore | None,
    *,
    report_failures: bool,
    hang: float | None,
    job: str | None,
) -> None:
    """Install the failure reporter and start the watchdog, each with its connection."""
    if not report_failures and hang is None:
        return
    job = meeting.job if meeting else job or f"pid-{os.getpid()}"
    report_store = watch_store = None
    key = ""
    if meeting is not None and env_store is not None:
        # The reporter's opens in the background: a failing rank's request waits at
        # most 2 s for it. The watchdog's opens now: its first tick must find it.
        late = side_channel(meeting, env_store, 2.0) if report_failures else None
        now = side_channel(meeting, env_store) if hang is not None else None
        key = (late or now or (None, ""))[1]
        report_store = late[0] if late else None
        watch_store = now[0] if now else None
    else:
        group_store = _group_store()
        key = f"helios_pg/failed/{next(_INITS)}"
        report_store = group_store if report_failures else None
        watch_store = group_store if hang is not None else None
    shared = True
    if hang is not None and watch_store is None:
        # The job's store could not be reached now: the watchdog watches on a clone of
        # the group's, where nothing it publishes reaches the reporter's ledger.
        watch_store = _group_store()
        shared = report_store is None
        key = f"helios_pg/failed/{next(_INITS)}" if shared else key
    watch(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        report_store=report_store,
        watch_store=watch_store,
        key=key,
        job=job,
        report_failures=report_failures,
        hang=hang if watch_store is not None else None,
        shared=shared,
    )
