"""The ``ranks`` marker: its name, its signature and the checks of its arguments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

import pytest

from helios_pg._timeouts import seconds_of

__all__ = ["DEFAULT_TIMEOUT", "MARKER", "MARKER_HELP", "RanksSpec", "read_marker"]

MARKER = "ranks"
DEFAULT_TIMEOUT = 60.0
_SIGNATURE = f"{MARKER}(n, *, timeout={DEFAULT_TIMEOUT}, group_timeout=None, backend=None)"
MARKER_HELP = (
    f"{_SIGNATURE}: run the test on n ranks, each a process in one process group formed "
    "by helios_pg.init, gloo on the CPU unless backend= says otherwise; timeout= is the "
    "test's deadline, group_timeout= the group's, each in seconds or a timedelta "
    "(helios-pg's plugin)"
)
"""The marker's line in ``pytest --markers``."""


@dataclass(frozen=True, slots=True)
class RanksSpec:
    """What a ``ranks`` marker asks for, checked."""

    world_size: int
    timeout: float
    """The test's deadline, in seconds."""
    group_timeout: float
    """The process group's timeout, in seconds."""
    backend: str | None
    """None for gloo with CUDA hidden from the ranks."""


def _bad_marker(message: str) -> NoReturn:
    pytest.fail(f"{message}; the marker is {_SIGNATURE}", pytrace=False)


def _seconds(marker: pytest.Mark, name: str, default: float) -> float:
    value = marker.kwargs.get(name)
    if value is None:
        return default
    try:
        return seconds_of(value, f"ranks({name}=...)")
    except (TypeError, ValueError):
        _bad_marker(
            f"ranks({name}={value!r}) is not a positive, finite number of seconds or a timedelta"
        )


def read_marker(marker: pytest.Mark) -> RanksSpec:
    """Read a ``ranks`` marker's arguments, failing the test on any it does not take.

    Args:
        marker: The test's ``ranks`` marker.

    Returns:
        The number of ranks, the deadline, the group's timeout and the backend.
    """
    if len(marker.args) != 1 or isinstance(marker.args[0], bool):
        _bad_marker(f"ranks{marker.args!r} does not name one number of ranks")
    world_size = marker.args[0]
    if not isinstance(world_size, int) or world_size < 1:
        _bad_marker(f"ranks({world_size!r}) is not a positive number of ranks")
    unknown = sorted(set(marker.kwargs) - {"timeout", "group_timeout", "backend"})
    if unknown:
        _bad_marker(f"ranks() got unknown arguments {unknown}")
    timeout = _seconds(marker, "timeout", DEFAULT_TIMEOUT)
    group_timeout = _seconds(marker, "group_timeout", timeout)
    backend = marker.kwargs.get("backend")
    if backend is not None and (not isinstance(backend, str) or not backend):
        _bad_marker(f"ranks(backend={backend!r}) is not a backend name such as 'nccl'")
    return RanksSpec(world_size, timeout, group_timeout, backend)
