"""init's arguments, checked before anything is sent: ranks, sizes and timeouts."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import HashStore

from helios_env.integration import switch
from helios_pg._errors import ProcessGroupInitError, RendezvousConfigError
from helios_pg._reports import FAILURE_REPORT, hang_timeout_from
from helios_pg._setup._agreement import VARIABLE as AGREEMENT_CHECK
from helios_pg._stragglers import report_seconds
from helios_pg._timeouts import Timeout, as_timedelta, seconds_of

__all__ = ["check_arguments", "local_store", "require_distributed"]


def require_distributed() -> None:
    """Refuse a torch built without ``torch.distributed``."""
    if not dist.is_available():
        message = (
            f"torch.distributed is not available in this torch build ({torch.__version__}); "
            "install a torch wheel built with distributed support"
        )
        raise ProcessGroupInitError(message)


def _check_ranks(world_size: int, rank: int) -> None:
    if world_size != -1 and world_size < 1:
        message = f"world_size must be -1 (from WORLD_SIZE) or >= 1, got world_size={world_size}"
        raise RendezvousConfigError(message)
    if rank != -1 and (rank < 0 or (world_size != -1 and rank >= world_size)):
        message = (
            f"rank must be -1 (from RANK) or in 0..world_size-1, got rank={rank} with "
            f"world_size={world_size}"
        )
        raise RendezvousConfigError(message)


def local_store(rank: int) -> dict[str, Any]:
    """The arguments of a direct world of one: a local ``HashStore``, no port."""
    if rank not in (-1, 0):
        message = f"rank={rank} is out of range for a world size of one; pass rank=0"
        raise RendezvousConfigError(message)
    return {"store": HashStore(), "world_size": 1, "rank": 0}


def check_arguments(
    world_size: int,
    rank: int,
    timeout: Timeout | None,
    hang_timeout: Timeout | None,
    straggler_report: Timeout | None = None,
) -> tuple[timedelta | None, float | None, float | None]:
    """Check init's own arguments before anything is sent.

    Returns:
        The group's timeout, the hang timeout and the straggler report's period, each
        None where not set (the last two also read from their variables).
    """
    _check_ranks(world_size, rank)
    try:
        group = None if timeout is None else as_timedelta(timeout, "init's timeout")
        hang = None if hang_timeout is None else seconds_of(hang_timeout, "hang_timeout")
    except ValueError as exc:
        raise RendezvousConfigError(f"{exc}; pass, e.g., 60 or timedelta(minutes=5)") from None
    try:
        for name in (FAILURE_REPORT, AGREEMENT_CHECK):  # read again where they act
            switch(name, os.environ.get(name), default=True)
        # HELIOS_HANG_TIMEOUT and HELIOS_STRAGGLER_REPORT where not given
        return group, hang_timeout_from(hang), report_seconds(straggler_report)
    except ValueError as exc:
        raise RendezvousConfigError(str(exc)) from None
