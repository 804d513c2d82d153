"""Backend selection: nccl when CUDA is available, else gloo; and what this torch offers."""

from __future__ import annotations

import torch
import torch.distributed as dist

from helios_pg._errors import BackendUnavailableError

__all__ = ["check_backend", "default_backend", "offered_backends"]

_BUILT_IN = ("gloo", "nccl", "mpi", "ucc", "xccl")
_DEVICE_MAP = "a device map such as 'cpu:gloo,cuda:nccl'"


def default_backend() -> str:
    """Name the backend ``init`` uses when none is given, at every world size.

    Returns:
        ``"nccl"`` when CUDA is available, else ``"gloo"``.
    """
    return "nccl" if torch.cuda.is_available() else "gloo"


def offered_backends() -> tuple[str, ...]:
    """Name the backends this torch build offers: built in and available, or registered.

    Returns:
        Such as ``("gloo", "nccl")``: the built-in backends whose
        ``torch.distributed.is_backend_available`` is true, then any registered with
        ``torch.distributed.Backend.register_backend``.
    """
    built_in = [name for name in _BUILT_IN if dist.is_backend_available(name)]
    plugins: dict[str, object] = getattr(dist.Backend, "_plugins", {})
    return (*built_in, *(name.lower() for name in plugins if name.lower() not in built_in))


def _runs_here(name: str) -> bool:
    """Whether a backend this torch offers can run in this process (nccl needs CUDA)."""
    if name == "nccl":
        return torch.cuda.is_available()
    if name == "xccl":
        xpu = getattr(torch, "xpu", None)
        return bool(xpu is not None and xpu.is_available())
    return True


def _unknown(backend: str, what: str) -> BackendUnavailableError:
    runnable = [name for name in offered_backends() if _runs_here(name)]
    device_map = f", or {_DEVICE_MAP}" if torch.cuda.is_available() else ""
    message = (
        f"backend={backend!r}: {what}. In this process, this torch build "
        f"({torch.__version__}) can run {', '.join(map(repr, runnable))}{device_map}; pass "
        "one of them, or omit backend to choose automatically"
    )
    return BackendUnavailableError(message)


def _backend_names(backend: str) -> list[str]:
    # As torch reads it: a string without a colon is one name ("gloo"), one with a
    # colon a device map ("cpu:gloo,cuda:nccl").
    if ":" not in backend:
        name = backend.strip().lower()
        if not name:
            raise _unknown(backend, "names no backend")
        return [name]
    names, devices = [], set()
    for pair in backend.split(","):
        parts = [part.strip().lower() for part in pair.split(":")]
        if len(parts) != 2 or not all(parts):
            raise _unknown(backend, f"{pair!r} is not a device:backend pair")
        device, name = parts
        try:
            torch.device(device)
        except RuntimeError:
            raise _unknown(backend, f"{device!r} is not a torch device type") from None
        if device in devices:
            raise _unknown(backend, f"the device {device!r} is given twice")
        devices.add(device)
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
        BackendUnavailableError: torch knows no such backend (the message lists those
            it offers), the backend needs CUDA and CUDA is not available, or this torch
            build does not include it.
    """
    for name in _backend_names(backend):
        if name == "nccl" and not torch.cuda.is_available():
            message = (
                f"backend={backend!r} needs CUDA, but torch.cuda.is_available() is False in "
                "this process; pass backend='gloo' or omit backend to choose automatically"
            )
            raise BackendUnavailableError(message)
        if name == "undefined" or name not in dist.Backend.backend_list:
            raise _unknown(backend, f"torch has no backend {name!r}")
        if name in _BUILT_IN and not dist.is_backend_available(name):
            raise _unknown(backend, f"{name} is not built into this torch, or cannot run here")
    return backend
