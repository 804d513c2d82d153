"""Validate rank arguments and read this process's rank when a call needs it."""

from __future__ import annotations

from helios_env import get_global_rank, get_local_rank

__all__ = ["check_rank", "current_rank"]


def check_rank(value: object, name: str) -> int:
    """Return ``value`` when it is a usable rank, else raise an error that names it.

    Args:
        value: The rank a caller passed.
        name: The parameter's name, for the error message.

    Returns:
        ``value``, known to be a non-negative ``int``.

    Raises:
        TypeError: ``value`` is not an ``int`` (a ``bool`` is refused too).
        ValueError: ``value`` is negative.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        message = (
            f"{name} must be an int, got {value!r} of type {type(value).__name__}; "
            f"pass a rank such as {name}=0"
        )
        raise TypeError(message)
    if value < 0:
        message = (
            f"{name} must be a non-negative rank, got {name}={value}; "
            f"ranks count from 0 (use {name}=0 for the first process)"
        )
        raise ValueError(message)
    return value


def current_rank(*, local: bool) -> int:
    """Read this process's local or global rank now, through helios-env.

    Args:
        local: True for the rank on this node, False for the rank in the whole run.

    Returns:
        The rank from the live process group, else the launcher's variables, else 0.

    Raises:
        helios_env.LauncherEnvError: A launcher variable is malformed.
    """
    return get_local_rank() if local else get_global_rank()
