"""gloo's network interface, set by ``init`` where needed and unset by ``shutdown``.

Where this host's name means loopback and the job spans nodes, ``init`` sets
``GLOO_SOCKET_IFNAME`` to the interface that ``helios_env`` chooses, before the group
forms; ``shutdown`` (and a failed ``init``) unsets it again, unless someone changed it
in between. A value set by the user is never touched.
"""

from __future__ import annotations

import os

from helios_env.integration import GLOO_INTERFACE_VARIABLE as GLOO_INTERFACE
from helios_env.integration import gloo_interface
from helios_pg._errors import RendezvousConfigError

__all__ = ["bind_gloo", "release_gloo"]

_chosen_interface: str | None = None


def bind_gloo(backend: str, addr: str | None, num_nodes: int | None) -> None:
    """Set GLOO_SOCKET_IFNAME when this host's name means loopback on several nodes.

    Args:
        backend: The backend the group will use; anything but gloo is left alone.
        addr: The address the ranks meet at, if known.
        num_nodes: The number of nodes the job spans, if known.

    Raises:
        RendezvousConfigError: The job spans nodes, this host's name means loopback,
            and no interface can be chosen.
    """
    global _chosen_interface  # noqa: PLW0603 - undone by shutdown()
    if "gloo" not in backend.lower():
        return
    decision = gloo_interface(os.environ.get, addr, num_nodes)
    if decision.problem is not None:
        raise RendezvousConfigError(decision.problem)
    if decision.name is not None and not os.environ.get(GLOO_INTERFACE):
        os.environ[GLOO_INTERFACE] = decision.name
        _chosen_interface = decision.name


def release_gloo() -> None:
    """Unset the GLOO_SOCKET_IFNAME that :func:`bind_gloo` set, if it still holds."""
    global _chosen_interface  # noqa: PLW0603 - see bind_gloo
    if _chosen_interface is not None and os.environ.get(GLOO_INTERFACE) == _chosen_interface:
        del os.environ[GLOO_INTERFACE]
    _chosen_interface = None
