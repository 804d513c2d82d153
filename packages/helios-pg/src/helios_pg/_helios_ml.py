"""helios-ml's ``init_dist``, ``shutdown_dist`` and ``is_dist_active``, without its bugs."""

from __future__ import annotations

import os

import torch.distributed as dist

from helios_pg._backend import check_backend
from helios_pg._errors import RendezvousConfigError
from helios_pg._setup import init, shutdown

__all__ = [
    "init_dist",
    "is_dist_active",
    "shutdown_dist",
]

DEFAULT_MASTER_ADDR = "127.0.0.1"
"""``MASTER_ADDR`` that ``init_dist`` sets for hand-started processes when it is unset."""
DEFAULT_MASTER_PORT = "29500"
"""``MASTER_PORT`` that ``init_dist`` sets for hand-started processes when it is unset."""


def init_dist(
    backend: str = "nccl", rank: int | None = None, world_size: int | None = None
) -> None:
    """Initialize the distributed process group.

    Omit ``rank`` and ``world_size`` under torchrun (or any launcher that sets the
    rank variables). For processes started by hand, such as with ``mp.spawn``, pass
    both: world size one then needs no port at all (a local store), and larger worlds
    meet at ``MASTER_ADDR:MASTER_PORT``, which default to ``127.0.0.1:29500`` only
    when unset; ``RANK`` and ``WORLD_SIZE`` default to the arguments and
    ``LOCAL_RANK`` to ``rank`` (processes on one node), each only when unset. Nothing
    already set is overwritten.

    Args:
        backend: The backend to use. Defaults to ``"nccl"``.
        rank: The global rank of this process, for hand-started processes.
        world_size: The number of processes, for hand-started processes.

    Raises:
        RendezvousConfigError: Only one of ``rank`` and ``world_size`` is given, or
            either is out of range (a ``ValueError``, as from :func:`init`).
        BackendUnavailableError: The backend cannot run here: nccl without CUDA names
            the fix, an unknown name lists the backends torch offers (a
            ``ValueError``).
        helios_env.LauncherEnvError: A launcher variable is malformed (a
            ``ValueError``).
        ProcessGroupInitError: PyTorch could not create the process group (a
            ``RuntimeError``).
    """
    if (rank is None) != (world_size is None):
        message = (
            f"pass both rank and world_size or neither, got rank={rank!r} and "
            f"world_size={world_size!r}; omit both under torchrun"
        )
        raise RendezvousConfigError(message)
    check_backend(backend)
    if rank is None or world_size is None:
        init(backend=backend)
        return
    if world_size < 1 or not 0 <= rank < world_size:
        message = f"need 0 <= rank < world_size, got rank={rank} and world_size={world_size}"
        raise RendezvousConfigError(message)
    if world_size > 1:
        os.environ.setdefault("MASTER_ADDR", DEFAULT_MASTER_ADDR)
        os.environ.setdefault("MASTER_PORT", DEFAULT_MASTER_PORT)
        # A LOCAL_RANK without RANK and WORLD_SIZE is a malformed launcher environment
        # (helios_env rejects it), so the process describes itself in full, as mp.spawn
        # users are told to: whatever is already set is kept.
        os.environ.setdefault("RANK", str(rank))
        os.environ.setdefault("WORLD_SIZE", str(world_size))
        os.environ.setdefault("LOCAL_RANK", str(rank))
    init(backend=backend, rank=rank, world_size=world_size)


def shutdown_dist() -> None:
    """Shut down the distributed process group.

    A no-op before initialization, after shutdown, or without torch.distributed.
    """
    shutdown()


def is_dist_active() -> bool:
    """Check whether a default process group is initialized.

    Returns:
        True if torch.distributed is available and its default group is live.
    """
    return dist.is_available() and dist.is_initialized()
