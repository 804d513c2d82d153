"""Backend selection: nccl when CUDA is available, else gloo."""

from __future__ import annotations

import torch
import torch.distributed as dist

from helios_pg._errors import BackendUnavailableError

__all__ = ["check_backend", "default_backend"]


def default_backend() -> str:
    """Name the backend ``init`` uses when none is given, at every world size.

    Returns:
        ``"nccl"`` when CUDA is available, else ``"gloo"``.
    """
    return "nccl" if torch.cuda.is_available() else "gloo"


def _backend_names(backend: str) -> list[str]:
    # Accepts plain names ("gloo") and device maps ("cpu:gloo,cuda:nccl").
    names = []
    for part in backend.split(","):
        name = part.split(":", 1)[-1].strip().lower()
        if name:
            names.append(name)
    return names


def check_backend(backend: str) -> str:
    """Check that ``backend`` can run in this process, before anything starts.

    Args:
        backend: A backend name such as ``"gloo"`` or ``"nccl"``, or a device map
            such as ``"cpu:gloo,cuda:nccl"``.

    Returns:
        The backend string, unchanged.

    Raises:
        BackendUnavailableError: The backend needs CUDA and CUDA is not available, or
            this torch build does not include it.
    """
    names = _backend_names(backend)
    if not names:
        message = f"backend={backend!r} names no backend; pass 'gloo', 'nccl', or omit it"
        raise BackendUnavailableError(message)
    for name in names:
        if name == "nccl" and not torch.cuda.is_available():
            message = (
                f"backend={backend!r} needs CUDA, but torch.cuda.is_available() is False in "
                "this process; pass backend='gloo' or omit backend to choose automatically"
            )
            raise BackendUnavailableError(message)
        known = name in {"gloo", "nccl", "mpi", "ucc", "xccl"}
        if known and not dist.is_backend_available(name):
            message = (
                f"backend={backend!r}: this torch build ({torch.__version__}) does not "
                f"include {name}; pass backend='gloo' or omit backend to choose automatically"
            )
            raise BackendUnavailableError(message)
    return backend
