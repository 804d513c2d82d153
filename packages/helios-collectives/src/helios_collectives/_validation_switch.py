"""The check's switch: whether a call describes itself to the other ranks first.

A call's ``validate`` decides; None reads ``HELIOS_VALIDATE_COLLECTIVES`` (on when unset),
as cheaply as an unset variable allows, since every collective asks.
"""

from __future__ import annotations

import os
from typing import cast

from helios_collectives._errors import ValidationSettingError
from helios_env.integration import switch

__all__ = ["VALIDATE_ENV_VAR", "validation_enabled"]

VALIDATE_ENV_VAR = "HELIOS_VALIDATE_COLLECTIVES"
"""Environment variable that turns the check off (``0``) or on (``1``, the default) for
every call that passes no ``validate``."""


# os.environ.get raises and catches KeyError twice for an unset variable; the mapping
# behind os.environ answers a miss in a dict lookup. Writes through os.environ (and
# pytest's monkeypatch) update it at once.
_ENVIRON_BYTES: dict[bytes, bytes] | None = (
    getattr(os.environ, "_data", None) if os.name == "posix" else None
)
_VALIDATE_KEY = VALIDATE_ENV_VAR.encode()


def _environment_flag() -> str | None:
    if _ENVIRON_BYTES is not None and os.name == "posix":
        raw = _ENVIRON_BYTES.get(_VALIDATE_KEY)
        return None if raw is None else os.fsdecode(raw)
    return os.environ.get(VALIDATE_ENV_VAR)


def validation_enabled(validate: bool | None) -> bool:
    """Decide whether this call checks first that every rank makes the same call.

    Args:
        validate: The caller's choice; None reads ``HELIOS_VALIDATE_COLLECTIVES``.

    Returns:
        True when the descriptions should be exchanged: always, unless ``validate`` is
        False or the variable turns the check off.

    Raises:
        TypeError: ``validate`` is neither a bool nor None.
        ValidationSettingError: ``HELIOS_VALIDATE_COLLECTIVES`` is set to something
            that is neither on nor off (a ``ValueError``).
    """
    if validate is not None:
        if not isinstance(cast(object, validate), bool):
            message = f"validate must be True, False or None, got {validate!r}"
            raise TypeError(message)
        return validate
    raw = _environment_flag()
    if raw is None:
        return True
    try:
        return switch(VALIDATE_ENV_VAR, raw, default=True)
    except ValueError as exc:
        raise ValidationSettingError(str(exc), value=raw or "") from None
