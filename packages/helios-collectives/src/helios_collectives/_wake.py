"""Blocking waits for the barrier on a ``TCPStore``, in place of polling its count.

A waiting rank blocks in one ``get`` of a wake key of its own, on a connection to the
store that only waits (so a wait that ends badly never leaves the group's own
connection in a half-read state). The rank that completes the barrier, or the first
that gives up on it, sets the wake keys of the ranks that wait. A rank's own timeout
sets its own key, from a thread the calling thread starts: so a wait ends by a key
being set (by the store's own timeout only where the store is gone), and its store
requests do not grow with the time waited.

The waiting connection is opened in the background, on a rank's first barrier, which
polls meanwhile. The wake keys live in the store's root namespace (a ``PrefixStore``'s
prefix cannot be read back), each named by a token of this process and group and the
barrier's number, which the rank publishes with its arrival.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from datetime import timedelta
from typing import Any

from torch._C._distributed_c10d import TCPStore

__all__ = [
    "GAVE_UP",
    "MET",
    "TIMED_OUT",
    "Alarm",
    "Pool",
    "Waiter",
    "new_token",
    "open_waiter",
    "tcp_root",
    "wake",
    "wake_key",
]

_PREFIX = "helios_collectives/wake"
MET = "met"
"""A wake key's value: the barrier met."""
GAVE_UP = "gave-up"
"""A wake key's value: a rank gave up on the barrier (its verdict is in the store)."""
TIMED_OUT = "timed-out"
"""A wake key's value: this rank's own timeout expired."""

_OPEN_TIMEOUT = timedelta(seconds=60)


def tcp_root(store: Any) -> TCPStore | None:
    """The ``TCPStore`` under ``store``'s prefixes, or None on any other kind of store."""
    root = getattr(store, "_underlying_non_prefix_store", store)
    return root if isinstance(root, TCPStore) else None


def new_token() -> str:
    """A fresh random name for this process's wake keys (each adds a barrier's number)."""
    return secrets.token_hex(12)


def wake_key(token: str) -> str:
    """The root-namespace key that the rank which published ``token`` waits on."""
    return f"{_PREFIX}/{token}"


def wake(root: TCPStore, tokens: list[str], value: str) -> None:
    """Wake the ranks that published ``tokens``, in one request."""
    tokens = [t for t in tokens if t]  # a rank that polls published none
    if tokens:
        # torch's stubs leave out multi_set, which every supported torch has.
        root.multi_set([wake_key(t) for t in tokens], [value] * len(tokens))  # type: ignore[attr-defined]


def open_waiter(host: str, port: int, timeout: timedelta) -> TCPStore:
    """A new client connection to the store at ``host:port``, used only for waiting."""
    return TCPStore(host, port, is_master=False, wait_for_workers=False, timeout=timeout)


class Waiter:
    """A connection that only waits, and the wake key its last wait left in the store."""

    def __init__(self, store: TCPStore) -> None:
        self._store = store
        self._stale: str | None = None

    def set_timeout(self, timeout: timedelta) -> None:
        """Bound each of the next waits by ``timeout``."""
        self._store.set_timeout(timeout)

    def wait_for(self, token: str) -> str:
        """Block until the wake key of ``token`` is set, and return its value.

        The key of the previous wait is deleted first (off the critical path: this
        rank is about to wait anyway), so each rank leaves at most one key behind.
        """
        if self._stale is not None:
            self._store.delete_key(self._stale)
            self._stale = None
        key = wake_key(token)
        value = bytes(self._store.get(key)).decode()
        self._stale = key
        return value


class Pool:
    """This process's waiting connections to the default group's store server.

    Kept with the default group (``helios_collectives._barrier_state``), whose store every
    barrier meets in, so subgroups share them and they close when it is destroyed. The
    first :meth:`borrow` starts opening one in a daemon thread and returns None, and the
    barrier polls meanwhile: a barrier never waits for a new connection, since when many
    ranks open TCPStore connections at once torch's client can take seconds to get one.
    A forked child never uses its parent's connections.
    """

    def __init__(self, root: TCPStore) -> None:
        self._host = root.host
        self._port = root.port
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._idle: list[Waiter] = []
        self._opening = False

    def borrow(self, timeout: timedelta) -> Waiter | None:
        """An idle waiting connection, its waits bounded by ``timeout``; None if none."""
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._idle, self._opening = os.getpid(), [], False
            if self._idle:
                waiter = self._idle.pop()
                waiter.set_timeout(timeout)
                return waiter
            if self._opening:
                return None
            self._opening = True
        threading.Thread(target=self._open, name="helios-barrier-connect", daemon=True).start()
        return None

    def _open(self) -> None:
        waiter: Waiter | None = None
        # Where no connection can be had the barrier polls, and the next one tries again.
        with contextlib.suppress(Exception):
            waiter = Waiter(open_waiter(self._host, self._port, _OPEN_TIMEOUT))
        with self._lock:
            self._opening = False
            if waiter is not None and self._pid == os.getpid():
                self._idle.append(waiter)

    def give_back(self, waiter: Waiter) -> None:
        """Keep ``waiter``, whose last wait ended by its key being set, for the next barrier."""
        with self._lock:
            if self._pid == os.getpid():
                self._idle.append(waiter)

    def idle(self) -> list[Waiter]:
        """The connections not in use now."""
        with self._lock:
            return list(self._idle)


class Alarm:
    """Sets a waiting rank's own wake key when its timeout expires.

    The barrier's thread arms it right before it blocks on its waiting connection and
    disarms it right after; the caller's thread rings it at the deadline, on the group's
    own connection, which the barrier's thread does not use while armed.
    """

    def __init__(self, root: TCPStore) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._key: str | None = None

    def arm(self, token: str) -> None:
        with self._lock:
            self._key = wake_key(token)

    def disarm(self) -> None:
        with self._lock:
            self._key = None

    def ring(self) -> None:
        with self._lock:
            if self._key is None:
                return
            # Where the store is gone, the wait ends on its own timeout, and the barrier
            # reports the store.
            with contextlib.suppress(Exception):
                self._root.set(self._key, TIMED_OUT)
            self._key = None
