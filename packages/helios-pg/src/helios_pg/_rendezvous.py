"""The ``env://`` rendezvous, done here so a failed init can say who joined.

torch's own ``env://`` path connects to the store at ``MASTER_ADDR:MASTER_PORT`` and
wraps it in ``PrefixStore("default_pg", ...)``; this does the same, and each rank also
counts itself in under a key of its own. When the group then fails to form, every rank
that reached the store can read how many ranks did, and the error says so instead of
gloo's "wait timeout ... keys: /default_pg/0//cpu//0/0".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from torch.distributed import constants
from torch.distributed.rendezvous import rendezvous

__all__ = ["EnvStore", "default_timeout", "explain_failure", "open_env_store"]

_PORT_IN_USE = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)
_CLIENTS_JOINED = re.compile(r"(\d+)/(\d+) clients joined")


@dataclass(frozen=True)
class EnvStore:
    """The store every rank reached, and the key under which ranks count in.

    Without torchrun's agent store, rank 0 hosts the store and stays inside torch's
    rendezvous until every rank has connected, so it cannot count itself in while one
    is missing: the ranks that reached its store know it is there all the same.
    """

    store: Any
    joined_key: str
    host_is_rank_zero: bool

    def joined(self) -> int | None:
        """How many ranks reached the rendezvous, or None when the store is gone."""
        try:
            count = int(self.store.add(self.joined_key, 0))
            if self.host_is_rank_zero and not self.store.check([f"{self.joined_key}/0"]):
                count += 1
        except (RuntimeError, ValueError):
            return None
        return count


def default_timeout(backend: str) -> timedelta:
    """Torch's default process-group timeout for ``backend``.

    Args:
        backend: The backend name.

    Returns:
        The timeout torch would use when none is given.
    """
    if "nccl" in backend.lower() and isinstance(constants.default_pg_nccl_timeout, timedelta):
        return constants.default_pg_nccl_timeout
    return constants.default_pg_timeout


def open_env_store(rank: int, world_size: int, timeout: timedelta) -> EnvStore:
    """Reach the rendezvous store at ``MASTER_ADDR:MASTER_PORT`` and count this rank in.

    Args:
        rank: This process's global rank.
        world_size: The number of processes.
        timeout: How long to wait for the store (rank 0 waits for every rank).

    Returns:
        The store, to be wrapped in ``PrefixStore("default_pg", ...)`` as torch does.
    """
    store, _, _ = next(rendezvous("env://", rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    # torchrun's agent store serves every init of a restart attempt, and a program may
    # init again after shutdown: each init of the job gets a session number of its own.
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    session = -(-int(store.add(f"helios_pg/inits/{attempt}", 1)) // world_size)
    key = f"helios_pg/joined/{attempt}/{session}"
    store.add(key, 1)
    if rank == 0:
        store.set(f"{key}/0", "1")
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    return EnvStore(store, key, host_is_rank_zero=not agent_store)


def _where() -> str:
    port = os.environ.get("MASTER_PORT")
    return f"{os.environ.get('MASTER_ADDR', '?')}:{port}" if port else "the rendezvous"


def explain_failure(
    exc: BaseException,
    *,
    backend: str,
    world_size: int,
    rank: int,
    timeout: timedelta | None,
    joined: int | None = None,
) -> str:
    """Turn torch's init error into one that says what happened and what to do.

    Args:
        exc: What torch raised.
        backend: The backend being created.
        world_size: The expected number of ranks.
        rank: This rank.
        timeout: The rendezvous timeout, when known.
        joined: How many ranks reached the store, when known.

    Returns:
        The message for ``ProcessGroupInitError``; torch's text is kept at its end.
    """
    text = str(exc)
    where = _where()
    within = f" within {timeout.total_seconds():g} s" if timeout is not None else ""
    head = f"could not create the {backend} process group (rank {rank} of {world_size})"
    # By type first. A busy port has no type of its own (a DistNetworkError from torch
    # 2.5, a plain RuntimeError before), and the count of joined ranks is only in the
    # text of torch's DistStoreError: those two are read from the message.
    if _PORT_IN_USE.search(text):
        port = os.environ.get("MASTER_PORT")
        return (
            f"{head}: MASTER_PORT={port} is already in use on this host, so rank 0 cannot "
            f"serve the rendezvous store at {where}; pick a free port (MASTER_PORT=..., "
            f"torchrun --master-port ...) and retry. torch said: {text}"
        )
    counted = _CLIENTS_JOINED.search(text) if isinstance(exc, dist.DistStoreError) else None
    if counted is not None:
        joined, world_size = int(counted.group(1)), int(counted.group(2))
    if joined is not None and joined < world_size:
        return (
            f"{head}: only {joined} of {world_size} ranks joined the rendezvous at {where}"
            f"{within}; the others never started, failed before init, or were given another "
            f"MASTER_ADDR/MASTER_PORT or WORLD_SIZE. torch said: {text}"
        )
    if isinstance(exc, dist.DistNetworkError):
        return (
            f"{head}: rank 0, which hosts the rendezvous store at {where}, could not be "
            f"reached{within}; it never started, died, or MASTER_ADDR/MASTER_PORT differ "
            f"between ranks. torch said: {text}"
        )
    return f"{head}, rendezvous {where}: {text}"
