"""Wait for keys to appear in a rendezvous store, polling with a growing delay."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["wait_for_keys"]

_POLL_LIMIT = 0.05


def wait_for_keys(store: Any, keys: list[str], deadline: float, what: str) -> None:
    """Return once every key of ``keys`` is in ``store``.

    Args:
        store: A torch store (``check`` answers whether keys are set).
        keys: The keys to wait for.
        deadline: ``time.monotonic()`` by which they must be there.
        what: What the keys hold, for the error.

    Raises:
        TimeoutError: Some key was still missing at the deadline.
    """
    delay = 0.001
    while not store.check(keys):
        left = deadline - time.monotonic()
        if left <= 0:
            message = f"{what} did not arrive at the rendezvous store in time"
            raise TimeoutError(message)
        time.sleep(min(delay, left))
        delay = min(delay * 2, _POLL_LIMIT)
