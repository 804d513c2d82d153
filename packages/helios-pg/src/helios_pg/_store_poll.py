"""Wait for a store to hold something: the one polling loop of helios-pg.

Polled rather than ``store.wait()``: a client whose wait was pending when another client
of the same store vanished has been seen to lose its connection. The delay between two
looks starts at a millisecond and doubles up to a limit, so a key that is already there
costs one request and one that comes late costs a few per second.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["poll", "wait_for_keys"]

_FIRST_DELAY = 0.001
_POLL_LIMIT = 0.05


def poll(
    done: Callable[[], bool],
    seconds: float,
    *,
    limit: float = _POLL_LIMIT,
    stop: threading.Event | None = None,
) -> bool:
    """Call ``done()`` until it is true or ``seconds`` have passed.

    Args:
        done: The question, asked of the store at each look.
        seconds: How long to keep asking.
        limit: The longest delay between two looks.
        stop: An event that ends the wait early when set.

    Returns:
        Whether ``done()`` answered true in time.
    """
    deadline = time.monotonic() + seconds
    delay = _FIRST_DELAY
    while not done():
        left = deadline - time.monotonic()
        if left <= 0 or (stop is not None and stop.is_set()):
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, limit)
    return True


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
    if not poll(lambda: bool(store.check(keys)), deadline - time.monotonic()):
        message = f"{what} did not arrive at the rendezvous store in time"
        raise TimeoutError(message)
