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
    found = [info.base_name for info in filesystem.get_file_info(fs.FileSelector(folder))]
    groups = [name.partition("-") for name in found if name.partition("-")[0].isdigit()]
    for number, _, owner in groups:
        if owner == mine:
            return int(number)
    with filesystem.open_output_stream(f"{folder}/{len(groups)}-{mine}"):
        pass
    return len(groups)


def _own_attempt() -> int:
    """Rank 0's count; -1 where Ray's context or its storage cannot be read."""
    try:
        train = importlib.import_module("ray.train")
        return _count(train.get_context().get_storage())
    except Exception:  # Ray's storage API may change: then no attempt, and no failure
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
    try:
        if rank == 0:
            store.set(_KEY, str(_own_attempt()))
        else:
            wait_for_keys(store, [_KEY], time.monotonic() + wait.total_seconds(), _WHAT)
        attempt = int(bytes(store.get(_KEY)).decode())
    except (RuntimeError, TimeoutError, ValueError):
        # The store failed or rank 0 never said: no attempt here, rather than a failed
        # init (a rank whose count is lost says 0, the launcher variables' answer).
        return None
    return attempt if attempt >= 0 else None
