"""Which attempt of a Ray Train run a worker group is: Ray restarts groups, not processes.

Ray Train gives its workers no restart count: after a failure its controller starts a
new worker group with the same variables. helios counts the groups of a run in the
run's own storage (``ray.train.get_context().get_storage()``, which every worker of
every attempt reaches): rank 0 of each group leaves one file in ``.helios-attempts``
there, named for its attempt, its host and its process, and the attempt is how many
such files it found. The other ranks read it through the group's store. A later
``init`` in the same group finds its own file and says the same attempt.
"""

from __future__ import annotations

import importlib
import os
import socket
import time
from datetime import timedelta
from typing import Any

from helios_pg._store_poll import wait_for_keys

__all__ = ["share_attempt"]

_KEY = "helios_pg/ray-attempt"
_FOLDER = ".helios-attempts"
_WHAT = "rank 0's count of the run's worker groups"


def _count(storage: Any) -> int:
    """This group's attempt, counted (and noted, once) in the run's storage."""
    fs = importlib.import_module("pyarrow.fs")  # Ray Train's storage is a pyarrow file system
    filesystem = storage.storage_filesystem
    folder = f"{storage.experiment_fs_path}/{_FOLDER}"
    filesystem.create_dir(folder, recursive=True)
    mine = f"{socket.gethostname()}-{os.getpid()}"
    names = [info.base_name for info in filesystem.get_file_info(fs.FileSelector(folder))]
    for name in names:
        number, _, owner = name.partition("-")
        if owner == mine and number.isdigit():
            return int(number)
    with filesystem.open_output_stream(f"{folder}/{len(names)}-{mine}"):
        pass
    return len(names)


def _own_attempt() -> int:
    """Rank 0's count; -1 where Ray's context or its storage cannot be read."""
    try:
        train = importlib.import_module("ray.train")
        return _count(train.get_context().get_storage())
    except Exception:
        return -1


def share_attempt(store: Any, rank: int, wait: timedelta) -> int | None:
    """The attempt of this Ray Train worker group, the same on every rank.

    Args:
        store: The group's store.
        rank: This rank: rank 0 counts, the others read its count.
        wait: How long the others wait for rank 0's count.

    Returns:
        The attempt (0 for the first group of the run), or None where it cannot be
        known (Ray's context or storage could not be read).
    """
    if rank == 0:
        store.set(_KEY, str(_own_attempt()))
    else:
        try:
            wait_for_keys(store, [_KEY], time.monotonic() + wait.total_seconds(), _WHAT)
        except TimeoutError:
            return None
    attempt = int(bytes(store.get(_KEY)).decode())
    return attempt if attempt >= 0 else None
