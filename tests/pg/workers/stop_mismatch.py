"""Worker for tests/pg/test_preemption.py: ``should_stop()`` on rank 0 only.

Rank 0 asks ``should_stop()`` (no signal was sent) while rank 1 makes its training
all-reduce: of one float32, or with ``--same-size`` of one float64, as many bytes as
``should_stop()`` sends. Each rank reports what its call returned or raised; no rank
may get an answer that stops the job.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

import helios_pg
from tests.support.worker import group_timeout, report


def main() -> None:
    helios_pg.init(timeout=group_timeout())
    rank = dist.get_rank()
    stop = helios_pg.preemption()
    try:
        if rank == 0:
            outcome = f"returned {stop.should_stop()}"
        else:
            same_size = "--same-size" in sys.argv
            grad = torch.ones(1, dtype=torch.float64 if same_size else torch.float32)
            dist.all_reduce(grad)
            outcome = f"reduced {grad.tolist()}"
    except Exception as exc:  # what each rank got is the finding
        outcome = f"raised {type(exc).__name__}: {exc}"
    report(rank=rank, outcome=outcome)
    # The group may be broken: leave without tearing it down together.
    os._exit(0)


if __name__ == "__main__":
    main()
