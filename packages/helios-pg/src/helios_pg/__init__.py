"""Process-group init and shutdown for PyTorch, with device binding.

``init`` chooses nccl with CUDA and gloo without, binds ``cuda:LOCAL_RANK``, checks
launcher variables before any network activity, and runs a world-size-one program on
a local ``HashStore``, with no ``MASTER_PORT`` and no ``TCPStore``. ``shutdown`` is
safe to call at any time.

Importing ``helios_pg`` does not import torch: each name is loaded on first use, so
the pytest plugin this package registers costs nothing in sessions that never start
a multi-rank test.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from helios_pg._backend import default_backend
    from helios_pg._device import local_device
    from helios_pg._errors import (
        BackendUnavailableError,
        DeviceBindingError,
        ProcessGroupInitError,
        RendezvousConfigError,
    )
    from helios_pg._helios_ml import init_dist, is_dist_active, shutdown_dist
    from helios_pg._init import init, process_group, shutdown

__all__ = [
    "BackendUnavailableError",
    "DeviceBindingError",
    "ProcessGroupInitError",
    "RendezvousConfigError",
    "default_backend",
    "init",
    "init_dist",
    "is_dist_active",
    "local_device",
    "process_group",
    "shutdown",
    "shutdown_dist",
]

__version__ = "0.1.0"

_MODULES = {
    "BackendUnavailableError": "helios_pg._errors",
    "DeviceBindingError": "helios_pg._errors",
    "ProcessGroupInitError": "helios_pg._errors",
    "RendezvousConfigError": "helios_pg._errors",
    "default_backend": "helios_pg._backend",
    "init": "helios_pg._init",
    "init_dist": "helios_pg._helios_ml",
    "is_dist_active": "helios_pg._helios_ml",
    "local_device": "helios_pg._device",
    "process_group": "helios_pg._init",
    "shutdown": "helios_pg._init",
    "shutdown_dist": "helios_pg._helios_ml",
}


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        message = f"module 'helios_pg' has no attribute {name!r}"
        raise AttributeError(message)
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
