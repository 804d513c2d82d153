"""Reading a launcher's integer variables strictly: ASCII digits, within bounds."""

from __future__ import annotations

import re

from helios_env._environ import Getter
from helios_env._errors import LauncherEnvError

__all__ = ["parse_int", "read_int"]

_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def read_int(get: Getter, name: str | None, *, minimum: int) -> int | None:
    """The value of the integer variable ``name``; None when it is not set (or unnamed).

    Args:
        get: Looks a variable up by name.
        name: The variable, or None for a launcher that sets none.
        minimum: The smallest value allowed.

    Returns:
        The value, or None.

    Raises:
        LauncherEnvError: The value is not an integer, or is below ``minimum``.
    """
    if name is None:
        return None
    raw = get(name)
    if raw is None:
        return None
    return parse_int(name, raw, minimum=minimum)


def parse_int(name: str, raw: str, *, minimum: int) -> int:
    """The integer that the variable ``name`` holds as ``raw``.

    Args:
        name: The variable, named by the error.
        raw: Its value.
        minimum: The smallest value allowed.

    Returns:
        The value.

    Raises:
        LauncherEnvError: ``raw`` is not an integer in ASCII digits, or is below
            ``minimum``.
    """
    if raw.isdigit() and raw.isascii():  # the common case, without the regex
        value = int(raw)
        if value >= minimum:
            return value
    try:
        # ASCII digits only: int() would also take "1_0" and non-ASCII digits.
        if _INTEGER.fullmatch(raw) is None:
            raise ValueError(raw)
        value = int(raw.strip(), 10)
    except ValueError:
        kind = "a non-negative integer" if minimum == 0 else f"an integer >= {minimum}"
        message = f"{name} must be {kind}, got {name}={raw!r}; fix or unset it"
        raise LauncherEnvError(name, raw, message) from None
    if value < minimum:
        message = f"{name} must be >= {minimum}, got {name}={raw!r}; fix or unset it"
        raise LauncherEnvError(name, raw, message)
    return value
