"""The process group a collective runs on: the check that one exists, and backend facts."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from helios_collectives._errors import ProcessGroupNotInitializedError
from helios_pg import local_device

__all__ = [
    "backend_of",
    "control_device",
    "global_ranks",
    "require_group",
]

# A torch built without distributed support has no is_initialized at all.
_AVAILABLE = dist.is_available()


def require_group(operation: str, group: Any = None) -> dist.ProcessGroup:
    """Return the group a collective runs on, raising when there is none.

    Args:
        operation: The public function asking, for the error message.
        group: The group the caller passed; None selects the default group.

    Returns:
        ``group``, or the default group when ``group`` is None.

    Raises:
        ProcessGroupNotInitializedError: No default process group is initialized.
        TypeError: ``group`` is neither None nor a ``ProcessGroup``.
    """
    if not (_AVAILABLE and dist.is_initialized()):
        message = (
            f"{operation} needs an initialized process group, but none is; call "
            "helios_pg.init() (or enter helios_pg.process_group()) first"
        )
        raise ProcessGroupNotInitializedError(message)
    if group is None:
        world = dist.group.WORLD
        assert world is not None  # dist.is_initialized() above
        return world
    if not isinstance(group, dist.ProcessGroup):
        message = (
            f"group must be a torch.distributed.ProcessGroup or None, got {group!r} of "
            f"type {type(group).__name__}"
        )
        raise TypeError(message)
    return group


def backend_of(group: dist.ProcessGroup) -> str:
    """Name the backend of ``group``, lower-cased (``"gloo"``, ``"nccl"``, or a device map).

    Args:
        group: A live process group.

    Returns:
        The backend string, such as ``"gloo"`` or ``"cpu:gloo,cuda:nccl"``.
    """
    return str(dist.get_backend(group)).lower()


def control_device(group: dist.ProcessGroup) -> torch.device:
    """Choose where small control messages (validation descriptions) travel.

    The CPU when the group has a gloo backend, else this process's device (nccl needs
    CUDA tensors).

    Args:
        group: A live process group.

    Returns:
        The device for control tensors.
    """
    if "gloo" in backend_of(group):
        return torch.device("cpu")
    return local_device()


def global_ranks(group: dist.ProcessGroup) -> list[int]:
    """List the global rank of each member of ``group``, in group-rank order.

    Args:
        group: A live process group.

    Returns:
        Global ranks, indexed by group rank.
    """
    return list(dist.get_process_group_ranks(group))
