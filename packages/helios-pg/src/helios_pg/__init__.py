"""Process-group init and shutdown for PyTorch, with device binding.

``init`` chooses nccl with CUDA and gloo without, binds ``cuda:LOCAL_RANK``, checks
launcher variables before any network activity, and runs a world-size-one program on
a local ``HashStore``, with no ``MASTER_PORT`` and no ``TCPStore``. ``shutdown`` is
safe to call at any time.
"""

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
