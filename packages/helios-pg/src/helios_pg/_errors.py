"""Every error helios-pg raises, by what the caller can do about it.

Hierarchy::

    ValueError                      the arguments or the environment are wrong: fix them
    ├── helios_env.LauncherEnvError a launcher variable is malformed (from helios-env)
    ├── BackendUnavailableError     the backend cannot run here (nccl without CUDA)
    ├── DeviceBindingError          device_id or LOCAL_RANK does not fit the visible GPUs
    └── RendezvousConfigError       several ranks, but nothing says where they meet
    RuntimeError                    torch could not do it: see the chained cause
    └── ProcessGroupInitError       the group could not be created (how many ranks
                                    joined, a busy port, an unreachable rank 0)

All are raised before any network activity, except ``ProcessGroupInitError``.
"""

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
