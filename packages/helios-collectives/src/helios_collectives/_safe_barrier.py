"""safe_barrier: torch's barrier, a no-op without a process group, on the right nccl device."""

from __future__ import annotations

import weakref
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from helios_collectives._checks import as_timedelta
from helios_collectives._errors import CollectiveArgumentError
from helios_collectives._group import backend_of, require_group
from helios_collectives._torch_api import BARRIER_TAKES_TIMEOUT
from helios_collectives._validation import Description, exchange
from helios_collectives._validation_switch import validation_enabled

__all__ = ["safe_barrier"]

_AVAILABLE = dist.is_available()
_CUDA: bool | None = None
_NCCL: weakref.WeakKeyDictionary[dist.ProcessGroup, bool] = weakref.WeakKeyDictionary()


def safe_barrier(
    *,
    group: dist.ProcessGroup | None = None,
    async_op: bool = False,
    device_ids: list[int] | None = None,
    timeout: float | timedelta | None = None,
    validate: bool | None = None,
) -> None:
    """Wait for every process in the group, and return at once without a group.

    Safe in the sense that it is valid whether or not the program runs distributed:
    without an initialized process group it does nothing. On nccl, the current CUDA
    device is passed as ``device_ids`` unless the caller gave ``device_ids``, so torch
    never has to guess which GPU to synchronize on.

    Args:
        group: The process group; the default group when None.
        async_op: Only False: the barrier has completed when this returns.
        device_ids: The GPUs nccl synchronizes on; the current CUDA device when None.
        timeout: Seconds, or a ``timedelta``, for torch's own barrier (torch 2.12 and
            later); the group's timeout when None. :func:`barrier` takes a timeout on
            every torch, and names the ranks that did not arrive.
        validate: Check first that every rank is in this barrier; on gloo the check
            is the barrier. None (the default) reads ``HELIOS_VALIDATE_COLLECTIVES``,
            on when unset; False skips the check.

    Raises:
        CollectiveMismatchError: Some ranks are in another helios collective (a
            ``ValueError``, raised on every rank).
        CollectiveArgumentError: ``async_op=True`` was given, ``timeout`` on a torch
            older than 2.12, or a ``timeout`` that is not positive (a ``ValueError``,
            raised before anything is sent).
        TypeError: ``group`` is not a process group.
    """
    if async_op:
        message = (
            "safe_barrier(async_op=True) would return before the barrier completes and "
            "drop its handle; call torch.distributed.barrier(async_op=True) for a handle"
        )
        raise CollectiveArgumentError(message)
    # A bad value is named first, on every torch, with or without a group.
    limit = None if timeout is None else as_timedelta(timeout)
    if limit is not None and not BARRIER_TAKES_TIMEOUT:
        message = (
            f"safe_barrier(timeout=...) needs torch 2.12 or later, whose barrier takes a "
            f"timeout; this is torch {torch.__version__}. Use helios_collectives.barrier("
            "timeout), which works on every torch, or drop timeout"
        )
        raise CollectiveArgumentError(message)
    if not (_AVAILABLE and dist.is_initialized()):
        return
    plain = group is None and device_ids is None and limit is None
    checked = validation_enabled(validate)
    world = dist.group.WORLD
    alone = world is not None and world.size() == 1
    if plain and not _cuda_available() and (alone or not checked):
        # The common unchecked call without CUDA: no nccl device to name.
        dist.barrier()
        return
    pg = require_group("safe_barrier", group)
    if checked and pg.size() > 1:
        exchange(Description("safe_barrier"), pg)
        if limit is None and device_ids is None and not _uses_nccl(pg):
            # No rank leaves an all-gather before every rank has entered it: the check
            # was the barrier.
            return
    options: dict[str, Any] = {} if limit is None else {"timeout": limit}
    if device_ids is not None or _uses_nccl(pg):
        options["device_ids"] = [torch.cuda.current_device()] if device_ids is None else device_ids
    dist.barrier(group=group, **options)


def _cuda_available() -> bool:
    # Asked once, on the first barrier (not at import: CUDA's driver query is slow
    # and must not run in every process that merely imports helios).
    global _CUDA  # noqa: PLW0603
    if _CUDA is None:
        _CUDA = torch.cuda.is_available()
    return _CUDA


def _uses_nccl(group: dist.ProcessGroup) -> bool:
    # A group's backend never changes: ask torch once per group object.
    known = _NCCL.get(group)
    if known is None:
        known = _NCCL[group] = "nccl" in backend_of(group)
    return known
