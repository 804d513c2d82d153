"""The rank-local device: which one ``init`` binds, and which one is current."""

from __future__ import annotations

import os
from typing import cast

import torch

from helios_pg._errors import DeviceBindingError

__all__ = ["local_device", "resolve_device"]


def local_device() -> torch.device:
    """Return the device of this process.

    ``init`` selects the CUDA device named by ``LOCAL_RANK``; this reads the current
    CUDA device when CUDA is available and returns the CPU otherwise. It is valid
    before ``init``, and world size does not affect it.

    Returns:
        The current CUDA device when CUDA is available, otherwise the CPU device.
    """
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _visible() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")


def _checked_cuda_index(index: int, what: str) -> torch.device:
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        message = (
            f"{what} selects CUDA device {index}, but {count} CUDA device(s) are visible "
            f"(CUDA_VISIBLE_DEVICES={_visible()}); start at most {count} processes per node "
            "(torchrun --nproc-per-node) or pass device_id explicitly"
        )
        raise DeviceBindingError(message)
    return torch.device("cuda", index)


def resolve_device(
    device_id: torch.device | int | None, *, local_rank: int, local_rank_known: bool
) -> torch.device | None:
    """Decide the device to bind, checking it against CUDA availability.

    Args:
        device_id: What the caller asked for; None selects ``cuda:LOCAL_RANK`` when
            CUDA is available.
        local_rank: This process's local rank.
        local_rank_known: Whether a launcher (or ``LOCAL_RANK``) gave the local rank,
            rather than a default.

    Returns:
        The CUDA device to bind, or None when there is none to bind (no CUDA).

    Raises:
        DeviceBindingError: ``device_id`` does not fit CUDA availability, names a
            device that is not visible, or the local rank is needed and unknown.
        TypeError: ``device_id`` is neither a device, an int nor None.
    """
    cuda = torch.cuda.is_available()
    if device_id is None:
        if not cuda:
            return None
        if not local_rank_known:
            message = (
                "cannot tell which GPU this process should use: LOCAL_RANK is not set and "
                "no launcher set it; set LOCAL_RANK or pass device_id=torch.device('cuda', i)"
            )
            raise DeviceBindingError(message)
        return _checked_cuda_index(local_rank, f"LOCAL_RANK={local_rank}")
    if isinstance(device_id, bool) or not isinstance(cast(object, device_id), (int, torch.device)):
        message = (
            f"device_id must be a torch.device, an int or None, got {device_id!r} "
            f"of type {type(device_id).__name__}"
        )
        raise TypeError(message)
    if isinstance(device_id, int):
        if not cuda:
            message = (
                f"device_id={device_id} is a CUDA device index, but CUDA is not available; "
                "omit device_id or pass torch.device('cpu')"
            )
            raise DeviceBindingError(message)
        return _checked_cuda_index(device_id, f"device_id={device_id}")
    if cuda:
        if device_id.type != "cuda":
            message = (
                f"device_id={device_id} is not a CUDA device, but CUDA is available and each "
                "process is bound to one GPU; pass torch.device('cuda', LOCAL_RANK) or omit "
                "device_id"
            )
            raise DeviceBindingError(message)
        given = cast("int | None", device_id.index)  # None for a bare "cuda"
        index = local_rank if given is None else given
        return _checked_cuda_index(index, f"device_id={device_id}")
    if device_id.type != "cpu":
        message = (
            f"device_id={device_id} is not the CPU, and CUDA is not available; omit "
            "device_id or pass torch.device('cpu')"
        )
        raise DeviceBindingError(message)
    return None
