"""The hang watchdog's settings: its timeout, its dump signal and its directory."""

from __future__ import annotations

import os
import signal

from helios_pg._signals import signal_from

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
    argument: float | None, environ: dict[str, str] | None = None
) -> float | None:
    """The hang timeout in seconds: the argument, else ``HELIOS_HANG_TIMEOUT``, else off.

    Args:
        argument: ``init(hang_timeout=...)``.
        environ: The environment; ``os.environ`` when omitted.

    Returns:
        The timeout, or None when the watchdog is off.

    Raises:
        ValueError: The timeout is not a positive number.
    """
    raw: object = argument
    source = "hang_timeout"
    if argument is None:
        raw = (environ if environ is not None else os.environ).get(TIMEOUT_VARIABLE)
        source = TIMEOUT_VARIABLE
        if raw is None or not str(raw).strip():
            return None
    try:
        value = float(str(raw))
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        message = f"{source} must be a positive number of seconds, got {raw!r}; fix it or unset it"
        raise ValueError(message)
    return value


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
