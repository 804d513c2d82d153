"""A store given to init: who signed in there, named when torch's group does not form.

torch's rendezvous through a store the program passes to ``init(store=...)`` counts no
ranks and lists none: a rank that never comes shows only as torch's key
(``wait timeout after 5000ms, keys: /0//cpu//0/2``). Each rank that reaches init
appends ``RANK@HOST;`` under a key of this init's own first (two requests), read only
when the group does not form: then every rank that came names the ones that did not.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import torch.distributed as dist

from helios_pg._errors import JoinTimeoutError
from helios_pg._setup._store import WHO, EnvStore
from helios_pg._store_poll import poll

__all__ = ["name_the_absent", "sign_in"]

_SESSIONS = "helios_pg/given"
"""Counts the ranks' sign-ins: a world's worth of them is one init's session."""
_READ_GRACE = 10.0
"""Seconds rank 0 waits, after a failed init, for the others to read who signed in."""


def sign_in(store: Any, rank: int, world_size: int) -> EnvStore | None:
    """Leave this rank and host at a store given to init, before the group forms.

    Args:
        store: The store given to init.
        rank: This rank.
        world_size: The number of ranks.

    Returns:
        The store and this init's key, whose :meth:`EnvStore.arrived` lists the ranks
        that came; None where the store cannot take it (a store written in Python
        without ``append``): init goes on, and a failure keeps torch's words.
    """
    try:
        session = -(-int(store.add(_SESSIONS, 1)) // world_size)
        key = f"{_SESSIONS}/{session}"
        store.append(key + WHO, f"{rank}@{socket.gethostname()};")
    except (RuntimeError, NotImplementedError, ValueError):
        return None
    return EnvStore(store, key, world_size, time.time())


def name_the_absent(exc: Exception, given: EnvStore | None, rank: int) -> None:
    """Where torch's group on a given store timed out with ranks that never signed in, say so.

    Each rank that came reads who did and counts itself as having read; rank 0, whose
    process usually serves the store, waits (at most 10 s) for the others' reads before
    its error ends it. The lowest rank that came counts the absent in, so that a later
    init on the same store pairs its ranks' sign-ins again.

    Args:
        exc: What torch raised.
        given: What :func:`sign_in` returned.
        rank: This rank.

    Raises:
        JoinTimeoutError: Some rank never reached init; listed from ``given``.
    """
    if given is None or not isinstance(exc, dist.DistStoreError):
        return
    arrived = given.arrived()
    if arrived is None or len(arrived) >= given.world_size:
        return
    store, read = given.store, given.joined_key + "/read"
    try:
        store.add(read, 1)
        if arrived and rank == min(arrived):
            store.add(_SESSIONS, given.world_size - len(arrived))
        if rank == 0:
            poll(lambda: int(store.add(read, 0)) >= len(arrived), _READ_GRACE)
    except (RuntimeError, ValueError):
        pass  # the store went: what was read stands
    raise JoinTimeoutError(None, exc, arrived) from exc
