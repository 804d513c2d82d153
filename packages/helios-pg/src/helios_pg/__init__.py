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
import time as _time
from typing import TYPE_CHECKING

# The start-up timeline (helios_pg._setup._timeline): when the program imported helios_pg,
# and when it first asked for init's module, which loads torch, and had it.
_IMPORTED = _time.time()
_SETUP_ASKED: float | None = None
_SETUP_LOADED: float | None = None

if TYPE_CHECKING:
    # What type checkers see of _PUBLIC (tests/pg/test_public_api.py holds them equal).
    from helios_pg._backend import default_backend as default_backend
    from helios_pg._device import local_device as local_device
    from helios_pg._errors import AdoptionWarning as AdoptionWarning
    from helios_pg._errors import AgreementWarning as AgreementWarning
    from helios_pg._errors import BackendUnavailableError as BackendUnavailableError
    from helios_pg._errors import DeviceBindingError as DeviceBindingError
    from helios_pg._errors import PreemptionError as PreemptionError
    from helios_pg._errors import ProcessGroupInitError as ProcessGroupInitError
    from helios_pg._errors import RendezvousConfigError as RendezvousConfigError
    from helios_pg._errors import StartupWarning as StartupWarning
    from helios_pg._helios_ml import init_dist as init_dist
    from helios_pg._helios_ml import is_dist_active as is_dist_active
    from helios_pg._helios_ml import shutdown_dist as shutdown_dist
    from helios_pg._preempt import Checkpoints as Checkpoints
    from helios_pg._preempt import Grace as Grace
    from helios_pg._preempt import Preemption as Preemption
    from helios_pg._preempt import Requeue as Requeue
    from helios_pg._preempt import Resumed as Resumed
    from helios_pg._preempt import StopCause as StopCause
    from helios_pg._preempt import preemption as preemption
    from helios_pg._setup import StartupMoments as StartupMoments
    from helios_pg._setup import init as init
    from helios_pg._setup import process_group as process_group
    from helios_pg._setup import shutdown as shutdown
    from helios_pg._setup import startup_moments as startup_moments
    from helios_pg._stragglers import Straggler as Straggler
    from helios_pg._stragglers import StragglerReport as StragglerReport
    from helios_pg._stragglers import straggler_report as straggler_report

_PUBLIC = {
    "AdoptionWarning": "helios_pg._errors",
    "AgreementWarning": "helios_pg._errors",
    "BackendUnavailableError": "helios_pg._errors",
    "Checkpoints": "helios_pg._preempt",
    "DeviceBindingError": "helios_pg._errors",
    "Grace": "helios_pg._preempt",
    "Preemption": "helios_pg._preempt",
    "PreemptionError": "helios_pg._errors",
    "ProcessGroupInitError": "helios_pg._errors",
    "RendezvousConfigError": "helios_pg._errors",
    "Requeue": "helios_pg._preempt",
    "Resumed": "helios_pg._preempt",
    "StartupMoments": "helios_pg._setup",
    "StartupWarning": "helios_pg._errors",
    "StopCause": "helios_pg._preempt",
    "Straggler": "helios_pg._stragglers",
    "StragglerReport": "helios_pg._stragglers",
    "default_backend": "helios_pg._backend",
    "init": "helios_pg._setup",
    "init_dist": "helios_pg._helios_ml",
    "is_dist_active": "helios_pg._helios_ml",
    "local_device": "helios_pg._device",
    "preemption": "helios_pg._preempt",
    "process_group": "helios_pg._setup",
    "shutdown": "helios_pg._setup",
    "shutdown_dist": "helios_pg._helios_ml",
    "startup_moments": "helios_pg._setup",
    "straggler_report": "helios_pg._stragglers",
}
"""Each public name and the private module that defines it, imported on first use."""

__all__ = list(_PUBLIC)
del TYPE_CHECKING  # only public names in the package's namespace

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    global _SETUP_ASKED, _SETUP_LOADED  # noqa: PLW0603 - the timeline's two moments
    module = _PUBLIC.get(name)
    if module is None:
        message = f"module 'helios_pg' has no attribute {name!r}"
        raise AttributeError(message)
    first = module == "helios_pg._setup" and _SETUP_ASKED is None
    if first:
        _SETUP_ASKED = _time.time()
    value = getattr(_importlib.import_module(module), name)
    if first:
        _SETUP_LOADED = _time.time()
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
