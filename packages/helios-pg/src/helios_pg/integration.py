"""What the packages built on helios-pg share with it, beyond init and shutdown.

helios-collectives uses these names, and so may any package whose collectives take
helios's timeouts or compare the ranks' fingerprints as init does. Importing this
module does not import torch; :func:`own_fingerprint` does, when called.
"""

from typing import TYPE_CHECKING

from helios_pg._timeouts import Timeout, as_timedelta, seconds_of

if TYPE_CHECKING:
    import torch

    from helios_env.integration import Fingerprint

__all__ = ["Timeout", "as_timedelta", "own_fingerprint", "seconds_of"]
del TYPE_CHECKING  # only public names in the module's namespace


def own_fingerprint(backend: str, device: "torch.device | None") -> "Fingerprint":
    """Return this rank's fingerprint, as ``init`` compares it across the ranks.

    Args:
        backend: The backend the group uses.
        device: The rank's device, or None for the CPU.

    Returns:
        The fingerprint: versions (torch with its CUDA and NCCL), the main script's
        digest, the backend, the device type and the settings.
    """
    from helios_pg._setup import own_fingerprint as build

    return build(backend, device)
