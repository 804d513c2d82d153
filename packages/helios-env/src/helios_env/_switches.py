"""helios's on/off variables, read one way: ``1``, ``true``, ``yes``, ``on`` or their opposites.

``HELIOS_FAILURE_REPORT`` and ``HELIOS_AGREEMENT_CHECK`` (helios-pg) and
``HELIOS_VALIDATE_COLLECTIVES`` (helios-collectives) are read here, so each accepts the
same spellings and refuses anything else with the same message, naming the variable.
"""

from __future__ import annotations

__all__ = ["OFF", "ON", "switch"]

ON = frozenset({"1", "true", "yes", "on"})
"""The values that turn a switch on, in any case, blanks around them ignored."""
OFF = frozenset({"0", "false", "no", "off"})
"""The values that turn it off. An empty value counts as unset."""


def switch(name: str, raw: str | None, *, default: bool) -> bool:
    """Read the on/off variable ``name``, whose value is ``raw``.

    Args:
        name: The variable, for the error.
        raw: Its value; None when it is not set.
        default: What an unset (or empty) variable means.

    Returns:
        Whether the switch is on.

    Raises:
        ValueError: ``raw`` is neither on nor off; the message names the variable, the
            value and what it may be.
    """
    text = "" if raw is None else raw.strip().lower()
    if not text:
        return default
    if text in ON:
        return True
    if text in OFF:
        return False
    message = (
        f"{name} must be 1 or 0 (or true/false, yes/no, on/off), got {raw!r}; "
        f"set {name}={'0' if default else '1'} to turn it {'off' if default else 'on'}, "
        "or unset it"
    )
    raise ValueError(message)
