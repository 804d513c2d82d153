"""The hang watchdog's settings: its timeout, its dump signal and its directory."""

from __future__ import annotations

import os
import signal

from helios_pg._signals import signal_from
from helios_pg._timeouts import Timeout, seconds_of

__all__ = [
    "DIRECTORY_VARIABLE",
    "SIGNAL_VARIABLE",
    "TIMEOUT_VARIABLE",
    "hang_timeout_from",
    "signal_number",
]

TIMEOUT_VARIABLE = "HELIOS_HANG_TIMEOUT"
SIGNAL_VARIABLE = "HELIOS_HANG_SIGNAL"
DIRECTORY_VARIABLE = "HELIOS_HANG_DIR"


def hang_timeout_from(
    argument: Timeout | None, environ: dict[str, str] | None = None
) -> float | None:
    """The hang timeout in seconds: the argument, else ``HELIOS_HANG_TIMEOUT``, else off.

    Both are read by the one timeout reader (:func:`helios_pg._timeouts.seconds_of`), so
    a value one of them refuses the other refuses too.

    Args:
        argument: ``init(hang_timeout=...)``: seconds, or a ``timedelta``.
        environ: The environment; ``os.environ`` when omitted.

    Returns:
        The timeout, or None when the watchdog is off.

    Raises:
        ValueError: The timeout is not a positive, finite number of seconds.
    """
    if argument is not None:
        return seconds_of(argument, "hang_timeout")
    raw = (environ if environ is not None else os.environ).get(TIMEOUT_VARIABLE)
    if raw is None or not raw.strip():
        return None
    try:
        return seconds_of(float(raw), TIMEOUT_VARIABLE)
    except ValueError:
        message = (
            f"{TIMEOUT_VARIABLE} must be a positive, finite number of seconds, got {raw!r}; "
            "fix it or unset it"
        )
        raise ValueError(message) from None


def signal_number(raw: str | None) -> int | None:
    """The signal that dumps a rank's stacks: ``HELIOS_HANG_SIGNAL``'s value, or None.

    Args:
        raw: The variable's value; unset means ``SIGUSR2``.

    Returns:
        The signal's number, or None for ``none``.

    Raises:
        ValueError: The value names no signal.
    """
    if raw is None:
        return int(signal.SIGUSR2)
    if raw.strip().lower() in ("", "none", "0", "off"):
        return None
    return signal_from(raw, f"{SIGNAL_VARIABLE} (or none)")
