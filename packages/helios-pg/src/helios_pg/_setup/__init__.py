"""Init and rendezvous: making, adopting and destroying the process group.

Owns ``init``, ``shutdown`` and ``process_group``, the meeting point and its store,
the node layout learned at init and the agreement check. May import helios-env's public
names, helios-pg's shared modules and the front doors of ``_reports`` and ``_preempt``.
"""

from helios_pg._setup._agreement import own_fingerprint
from helios_pg._setup._lifecycle import init, process_group, shutdown
from helios_pg._setup._timeline import StartupMoments, startup_moments

__all__ = [
    "StartupMoments",
    "init",
    "own_fingerprint",
    "process_group",
    "shutdown",
    "startup_moments",
]
