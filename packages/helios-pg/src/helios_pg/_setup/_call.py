"""One call of ``init``: what it was asked and what it resolved, once, before any step.

``init`` builds an :class:`InitCall` at its top, once the arguments and the environment
are checked, and hands it to every step that can fail (reaching the store, exchanging
host names, creating the group) and to the error explanation, so that each step and
each message reads the same backend, ranks and timeouts. torch's default timeout is
resolved here, and only here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

from torch.distributed import constants

from helios_pg._setup._store import Meeting

__all__ = ["InitCall"]


def _torch_default(backend: str) -> timedelta:
    """Torch's default process-group timeout for ``backend``.

    Args:
        backend: The backend name.

    Returns:
        The timeout torch would use when none is given.
    """
    if "nccl" in backend.lower() and isinstance(constants.default_pg_nccl_timeout, timedelta):
        return constants.default_pg_nccl_timeout
    return constants.default_pg_timeout


@dataclass(frozen=True, slots=True)
class InitCall:
    """What one call of ``init`` knows, resolved once: made by :meth:`start`.

    Attributes:
        backend: The backend the group will use, checked.
        world_size: The number of ranks: the argument, else the environment's.
        rank: This rank: the argument, else the environment's.
        timeout: init's ``timeout`` as given; torch's own for the group.
        wait: How long helios waits for the other ranks (at the store, for their host
            names): ``timeout``, else torch's default for ``backend``.
        init_method: The ``init_method`` given to ``init``, if any.
        meeting: Where the ranks meet, when init forms the rendezvous itself.
        called: When init was called, in wall-clock seconds.
    """

    backend: str
    world_size: int
    rank: int
    timeout: timedelta | None
    wait: timedelta
    init_method: str | None = None
    meeting: Meeting | None = None
    called: float = 0.0

    @classmethod
    def start(
        cls,
        *,
        backend: str,
        world_size: int,
        rank: int,
        timeout: timedelta | None,
        init_method: str | None = None,
        meeting: Meeting | None = None,
    ) -> InitCall:
        """Resolve the wait of a call: ``timeout``, else torch's default for ``backend``.

        Args:
            backend: The backend the group will use.
            world_size: The number of ranks.
            rank: This rank.
            timeout: init's ``timeout``, or None for torch's default.
            init_method: The ``init_method`` given to ``init``, if any.
            meeting: Where the ranks meet, when init forms the rendezvous itself.

        Returns:
            The call, its ``wait`` resolved.
        """
        wait = timeout if timeout is not None else _torch_default(backend)
        return cls(backend, world_size, rank, timeout, wait, init_method, meeting, time.time())
