"""Timeouts as the public API takes them: seconds as a number, or a ``timedelta``.

One reading for ``init(timeout=, hang_timeout=)``, ``process_group`` and the ranks
marker. Imports no torch (the pytest plugin reads its marker with it).
"""

from __future__ import annotations

from datetime import timedelta

__all__ = ["Timeout", "as_timedelta", "seconds_of"]

_LONGEST = timedelta.max.total_seconds()
Timeout = float | timedelta
"""A timeout: seconds as an ``int`` or ``float``, or a ``datetime.timedelta``."""


def seconds_of(value: object, name: str) -> float:
    """Return a timeout's seconds, checked to be positive and finite.

    Args:
        value: Seconds as a number, or a ``timedelta``.
        name: How the caller names it in a message, such as ``"init's timeout"``.

    Returns:
        The seconds, as a float.

    Raises:
        TypeError: ``value`` is neither a number nor a ``timedelta``.
        ValueError: It is zero, negative, infinite or NaN.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        message = (
            f"{name} must be seconds (a number) or a datetime.timedelta, got "
            f"{type(value).__name__}: {value!r}"
        )
        raise TypeError(message)
    if not (0 < seconds <= _LONGEST):
        message = f"{name} must be a positive, finite number of seconds, got {value!r}"
        raise ValueError(message)
    return seconds


def as_timedelta(value: object, name: str) -> timedelta:
    """Return a timeout given in seconds or as a ``timedelta`` as a ``timedelta``.

    Args:
        value: Seconds as a number, or a ``timedelta``.
        name: How the caller names it in a message.

    Returns:
        The timeout.

    Raises:
        TypeError: ``value`` is neither a number nor a ``timedelta``.
        ValueError: It is not positive, or too long for a ``timedelta``.
    """
    return timedelta(seconds=seconds_of(value, name))
