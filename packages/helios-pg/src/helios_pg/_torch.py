"""What differs between the torch releases helios-pg supports, found by feature detection.

- Before torch 2.8, destroying a ``ProcessGroup`` destroys its gloo backend while the
  GIL is held, and that backend's destructor joins its worker threads. A worker that
  is just dropping the last reference to a finished collective's tensors needs the GIL
  to do so, so the two wait for each other forever. :func:`destroy_without_deadlock`
  first lets go of the GIL for a moment, so that such a worker finishes (then a group
  that outlives the call, held by a model, say, dies later with idle workers), and
  keeps a Python reference to every backend across ``destroy_process_group``: torch
  binds the backend classes with a holder that releases the GIL before destruction,
  so the backends go last, without the GIL. Both are harmless on every release.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["destroy_without_deadlock"]

_DEVICES = (torch.device("cpu"), torch.device("cuda"))
_DRAIN = 0.002  # seconds without the GIL before destroying


def _groups(group: dist.ProcessGroup | None) -> Iterable[Any]:
    if group is not None:
        return (group,)
    # Destroying the default group destroys every group; torch keeps them in _world.
    world = getattr(dist.distributed_c10d, "_world", None)
    pg_map = getattr(world, "pg_map", None)
    found = list(pg_map) if isinstance(pg_map, dict) else []
    default = dist.group.WORLD
    return found if default in found else [*found, default]


def _backends(groups: Iterable[Any]) -> list[object]:
    kept: list[object] = []
    for pg in groups:
        get_backend = getattr(pg, "_get_backend", None)
        if get_backend is None:
            continue
        for device in _DEVICES:
            try:
                kept.append(get_backend(device))
            except (RuntimeError, ValueError, TypeError):
                continue  # no backend for that device type
    return kept


def destroy_without_deadlock(group: dist.ProcessGroup | None = None) -> None:
    """Destroy ``group`` (or the default group and all others) without gloo's deadlock.

    Args:
        group: The group to destroy; None destroys the default group, as
            ``torch.distributed.destroy_process_group()`` does.

    Raises:
        ValueError: torch no longer knows ``group`` (it was destroyed already).
    """
    # A worker thread waiting for the GIL takes it now: it is never held for long.
    time.sleep(_DRAIN)
    kept = _backends(_groups(group))
    if group is None:
        dist.destroy_process_group()
    else:
        dist.destroy_process_group(group)
    # The backends go last, each destructor running with the GIL released.
    kept.clear()
