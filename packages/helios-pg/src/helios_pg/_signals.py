"""Signals named as people write them: ``SIGUSR1``, ``USR1``, ``usr1`` or ``10``."""

from __future__ import annotations

import signal

__all__ = ["signal_from"]


def signal_from(value: object, what: str) -> int:
    """The number of the signal ``value`` names.

    Args:
        value: A name, with or without ``SIG``, in any case, or a number.
        what: Where the value came from, for the error.

    Returns:
        The signal's number.

    Raises:
        ValueError: ``value`` names no signal of this platform.
    """
    valid = {int(s) for s in signal.valid_signals()}
    if isinstance(value, int) and not isinstance(value, bool):
        if value in valid:
            return value
    elif isinstance(value, str):
        text = value.strip().upper()
        if text.isdigit() and int(text) in valid:
            return int(text)
        found = getattr(signal, text if text.startswith("SIG") else f"SIG{text}", None)
        if isinstance(found, signal.Signals):
            return int(found)
    message = (
        f"{what}: {value!r} is not a signal of this platform; "
        "name one as SIGUSR1, USR1 or its number"
    )
    raise ValueError(message)
