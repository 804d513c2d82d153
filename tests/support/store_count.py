"""Count the store requests of ``helios_collectives.barrier`` on a live group.

Every connection the barrier uses is wrapped in a counting stand-in for the duration
of the calls: the group's own, the store's root (where the wake keys live) and the
waiting connections that earlier barriers opened. Used by the reliability tests and by
the ``scale`` benchmark; it imports torch, so only a rank imports it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from helios_collectives import _barrier_state, _wake

__all__ = ["count_requests", "wait_for_waiting_connections"]


class _Counting:
    """Forwards every call to a store connection, and counts the requests."""

    def __init__(self, inner: Any, counts: list[int]) -> None:
        self._inner = inner
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name in {"host", "port"} or not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            if name != "set_timeout":  # local: sends nothing
                self._counts[0] += 1
            return value(*args, **kwargs)

        return counted


def wait_for_waiting_connections(limit: float = 30.0) -> None:
    """Return once this process has a waiting connection for the default group's barriers.

    A process's first barrier on a store polls while that connection opens in the
    background; call this after it, so the barriers counted next wait as all later do.
    """
    deadline = time.monotonic() + limit
    group = dist.distributed_c10d._get_default_group()
    while True:
        pool = _barrier_state.POOLS.get(group)
        if pool is not None and pool.idle():
            return
        if time.monotonic() > deadline:
            message = f"no waiting connection opened within {limit:g} s"
            raise TimeoutError(message)
        time.sleep(0.01)


def count_requests(calls: Callable[[], object]) -> int:
    """Run ``calls`` and return the store requests made by its barriers."""
    counts = [0]
    store = dist.distributed_c10d._get_default_store()
    root = _wake.tcp_root(store)
    if root is None:
        message = "counting the barrier's store requests needs a TCPStore"
        raise RuntimeError(message)
    waiters = [w for pool in _barrier_state.POOLS.values() for w in pool.idle()]
    patched: dict[tuple[object, str], object] = {
        (dist.distributed_c10d, "_get_default_store"): lambda: _Counting(store, counts),
        (_wake, "tcp_root"): lambda _store: _Counting(root, counts),
        **{(w, "_store"): _Counting(w._store, counts) for w in waiters},
    }
    saved = {key: getattr(*key) for key in patched}
    for (owner, name), value in patched.items():
        setattr(owner, name, value)
    try:
        calls()
    finally:
        for (owner, name), value in saved.items():
            setattr(owner, name, value)
    return counts[0]
