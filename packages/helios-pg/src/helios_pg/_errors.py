"""Errors raised by process-group setup."""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "DeviceBindingError",
    "ProcessGroupInitError",
    "RendezvousConfigError",
]


class BackendUnavailableError(ValueError):
    """The requested backend cannot run in this process (nccl without CUDA, say)."""


class DeviceBindingError(ValueError):
    """The requested device does not fit this process (a CUDA device without CUDA, say)."""


class RendezvousConfigError(ValueError):
    """The arguments and environment do not say how the ranks should meet."""


class ProcessGroupInitError(RuntimeError):
    """torch.distributed could not create the process group; the cause is chained."""
