"""Rank 1 dies (``os._exit``) after a first barrier; rank 0 reports how each call fails.

Run with two ranks. Rank 0 reports one ``RESULT`` line per call (``step``, ``ok``,
``error``, ``elapsed``); rank 1 exits with status 17 right after the first barrier.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist

import helios_pg
from helios_collectives import (
    BarrierTimeoutError,
    all_reduce_tensors,
    barrier,
    gather_into_tensor,
)
from tests.support.worker import group_timeout, report

DEATH_STATUS = 17


def attempt(step: str, call: Callable[[], object]) -> None:
    start = time.monotonic()
    try:
        call()
    except Exception as exc:
        missing = list(exc.missing_ranks) if isinstance(exc, BarrierTimeoutError) else None
        report(
            step=step,
            ok=False,
            error=type(exc).__name__,
            is_runtime_error=isinstance(exc, RuntimeError),
            message=str(exc)[:500],
            missing_ranks=missing,
            elapsed=time.monotonic() - start,
        )
    else:
        report(step=step, ok=True, elapsed=time.monotonic() - start)


def main() -> int:
    warnings.simplefilter("error", FutureWarning)
    helios_pg.init(timeout=group_timeout())
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        barrier(30.0)
        if rank == 1:
            os._exit(DEATH_STATUS)
        time.sleep(0.5)  # let rank 1 go
        attempt("barrier", lambda: barrier(2.0))
        attempt("all_reduce_tensors", lambda: all_reduce_tensors(torch.ones(3)))
        attempt("gather_into_tensor", lambda: gather_into_tensor(torch.ones(3), (3 * world,)))
    finally:
        helios_pg.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
