"""The tap on ``torch.distributed``: one set of wrappers and hooks for those who need it.

The hang watchdog needs to know which collective each rank is in; the straggler report
needs when each rank arrived at each collective of the default group and when it left.
Both read the same wrappers (``helios_pg._reports._wrappers``) and hooks
(``helios_pg._reports._issued``), installed once by the first to open the tap and taken
off when the last closes it, so that a collective pays for one wrapper whoever listens.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from helios_pg._arrivals import Arrivals
from helios_pg._reports._issued import IssuedWork, Place, hooks_supported
from helios_pg._reports._wrappers import unwrap, wrap

__all__ = ["STRAGGLERS", "WATCHDOG", "Tap", "close_tap", "open_tap"]

WATCHDOG = "watchdog"
"""The hang watchdog, as a user of the tap."""
STRAGGLERS = "stragglers"
"""The straggler report, as a user of the tap."""


@dataclass
class Tap:
    """The wrappers and hooks in place, and who uses them."""

    current: Place
    main: int
    world: Any = None
    """The default group when the tap was opened: its hooks and the wrappers' test."""
    originals: dict[str, Callable[..., Any]] = field(default_factory=dict)
    issued: IssuedWork | None = None
    code: CodeType | None = None
    users: set[str] = field(default_factory=set)


_TAP: list[Tap] = []


def open_tap(user: str, arrivals: Arrivals | None = None) -> Tap:
    """Install the wrappers and hooks unless they are in place; count ``user`` in.

    Args:
        user: :data:`WATCHDOG` or :data:`STRAGGLERS`.
        arrivals: Where the straggler report's user wants the arrivals noted.

    Returns:
        The tap.
    """
    import torch.distributed as dist

    world = dist.group.WORLD
    users: set[str] = set()
    if _TAP and _TAP[0].world is not world:
        # The default group was destroyed and made again while a user held the tap (a
        # torch.distributed.destroy_process_group() of the program's own, then init):
        # the wrappers and hooks are put on the new group, for every user.
        users = _TAP[0].users
        _remove(_TAP.pop())
    if not _TAP:
        tap = Tap(Place(), threading.get_ident(), world, users=users)
        if hooks_supported():
            issued = IssuedWork(tap.current, tap.main, notes=WATCHDOG in users)
            if issued.install(world, default=True):
                tap.issued = issued
        tap.code = wrap(dist, tap.current, tap.main, tap.originals, tap.issued, world=world)
        _TAP.append(tap)
    tap = _TAP[0]
    tap.users.add(user)
    if user == WATCHDOG and tap.issued is not None:
        tap.issued.notes = True
    if user == STRAGGLERS:
        tap.current.arrivals = arrivals
    return tap


def close_tap(user: str) -> None:
    """Count ``user`` out; the last to leave puts ``torch.distributed`` back as it was.

    Args:
        user: :data:`WATCHDOG` or :data:`STRAGGLERS`.
    """
    if not _TAP:
        return
    tap = _TAP[0]
    tap.users.discard(user)
    if user == WATCHDOG and tap.issued is not None:
        tap.issued.notes = False
        tap.issued.noted.clear()
    if user == STRAGGLERS:
        tap.current.arrivals = None
    if tap.users:
        return
    _TAP.clear()
    _remove(tap)


def _remove(tap: Tap) -> None:
    """Put ``torch.distributed`` back as it was before ``tap``."""
    dist: Any = sys.modules.get("torch.distributed")
    if dist is not None:
        unwrap(dist, tap.originals, tap.issued)
