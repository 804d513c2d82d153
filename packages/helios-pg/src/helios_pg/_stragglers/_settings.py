"""The straggler report's one setting: how often, from ``init`` or the environment."""

from __future__ import annotations

import math
import os

from helios_pg._timeouts import Timeout, seconds_of

__all__ = ["LEAST", "VARIABLE", "report_seconds"]

VARIABLE = "HELIOS_STRAGGLER_REPORT"
LEAST = 1.0
"""The shortest period: each report costs every rank a few store requests."""
_OFF = ("", "0", "off", "no", "false")


def _checked(seconds: float, name: str, raw: object) -> float:
    if seconds < LEAST:
        message = (
            f"{name} must be a finite number of seconds, at least {LEAST:g} (each report costs "
            f"every rank a few store requests), got {raw!r}; pass, e.g., 30, or turn it off"
        )
        raise ValueError(message)
    return seconds


def report_seconds(argument: Timeout | None, environ: dict[str, str] | None = None) -> float | None:
    """The straggler report's period in seconds: the argument, else the variable, else off.

    Args:
        argument: ``init(straggler_report=...)``: seconds, or a ``timedelta``.
        environ: The environment; ``os.environ`` when omitted.

    Returns:
        The period, or None when the report is off (neither is set, or the variable
        says ``0`` or ``off``).

    Raises:
        TypeError: The argument is neither a number nor a ``timedelta``.
        ValueError: The period is not a finite number of seconds of at least one second.
    """
    if argument is not None:
        try:
            seconds = seconds_of(argument, "straggler_report")
        except ValueError as exc:
            raise ValueError(f"{exc}; leave it out (None) to turn the report off") from None
        return _checked(seconds, "straggler_report", argument)
    raw = (environ if environ is not None else os.environ).get(VARIABLE)
    if raw is None or raw.strip().lower() in _OFF:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        message = (
            f"{VARIABLE} must be a number of seconds (or 0 or off), got {raw!r}; fix it or unset it"
        )
        raise ValueError(message) from None
    if not math.isfinite(seconds):
        seconds = -1.0  # refused below, with the least it takes
    return _checked(seconds, VARIABLE, raw)
