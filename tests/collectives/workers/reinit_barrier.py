"""Two sessions on one store, as under torchrun's agent store; rank 1 skips session 2's barrier.

Run with two ranks. Both ranks init, pass a barrier and shut down; then both init
again on the same store, and only rank 0 calls the barrier, which must time out
naming rank 1 rather than pass on the keys the first session left behind.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from torch._C._distributed_c10d import TCPStore

import helios_pg
from helios_collectives import BarrierTimeoutError, barrier
from tests.support.worker import group_timeout, report


def main() -> None:
    rank = int(os.environ["RANK"])
    store = TCPStore(
        "127.0.0.1",
        int(os.environ["MASTER_PORT"]),
        2,
        rank == 0,
        timeout=timedelta(seconds=30),
    )
    for session in (1, 2):
        helios_pg.init(
            backend="gloo", store=store, world_size=2, rank=rank, timeout=group_timeout()
        )
        outcome = "skipped"
        if session == 1 or rank == 0:
            try:
                barrier(timeout=2.0)
                outcome = "passed"
            except BarrierTimeoutError as exc:
                outcome = f"timed out, missing {list(exc.missing_ranks)}"
        report(session=session, rank=rank, outcome=outcome)
        if session == 2 and rank == 1:
            # Rank 0 hosts the store: stay until its barrier has timed out.
            time.sleep(3)
        helios_pg.shutdown()


if __name__ == "__main__":
    main()
