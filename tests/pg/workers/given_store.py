"""Worker: init on a ``TCPStore`` the program made and passed as ``store``; report init's error.

Started for two ranks of ``WORLD_SIZE=3``: rank 2 never comes.
"""

from __future__ import annotations

import os
from datetime import timedelta

from torch._C._distributed_c10d import TCPStore

import helios_pg
from tests.support.worker import report


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # The store waits long for its server (rank 0's process may start seconds later on
    # busy cores); init's own timeout is short.
    wait = timedelta(seconds=60)
    store = TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world,
        rank == 0,
        timeout=wait,
        wait_for_workers=False,
    )
    try:
        helios_pg.init(backend="gloo", store=store, rank=rank, world_size=world, timeout=5)
    except helios_pg.ProcessGroupInitError as exc:
        report(rank=rank, error=str(exc))
    else:
        report(rank=rank, error=None)
        helios_pg.shutdown()


if __name__ == "__main__":
    main()
