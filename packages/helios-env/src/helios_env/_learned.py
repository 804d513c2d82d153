"""The node layout that ``helios_pg.init()`` learned from the group it formed.

Where no launcher variable says which node a rank runs on (mpirun places ranks
round-robin or by slot and says neither), ``helios_pg.init()`` exchanges host names
once and records the layout here; :func:`helios_env.get_dist_info` answers from it
while that same default group lives. ``helios_pg.shutdown()`` forgets it. Never
imports torch: the group is found through ``sys.modules``.
"""

from __future__ import annotations

import sys
from typing import Any

from helios_env._info import DistributedInfo

__all__ = ["LEARNED", "forget_layout", "learned_layout", "record_layout"]

LEARNED = "process group: host names exchanged by helios_pg.init()"
"""The source reported for values taken from a learned layout."""


_learned: tuple[int, DistributedInfo] | None = None


def _world() -> Any:
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        return dist.group.WORLD
    except AttributeError:
        return None


def record_layout(layout: DistributedInfo) -> None:
    """Remember ``layout`` for the live default group (call right after creating it).

    Args:
        layout: This rank's place in the group, with its node and node count known, and
            the job's attempt: the largest any rank's launcher variables say.
    """
    global _learned  # noqa: PLW0603 - one layout per process, tied to the live group
    world = _world()
    _learned = None if world is None else (id(world), layout)


def forget_layout() -> None:
    """Forget the learned layout (the group is being destroyed)."""
    global _learned  # noqa: PLW0603 - see record_layout
    _learned = None


def learned_layout(group: tuple[int, int] | None) -> DistributedInfo | None:
    """The recorded layout, if it belongs to the live default group ``group``.

    Args:
        group: The live group's ``(rank, world_size)``, or None when there is none.

    Returns:
        The layout learned when that group was created, else None.
    """
    if group is None or _learned is None:
        return None
    owner, layout = _learned
    if owner != id(_world()) or (layout.rank, layout.world_size) != group:
        return None
    return layout
