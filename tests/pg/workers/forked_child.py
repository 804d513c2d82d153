"""Worker: rank 0 forks a child that ends with ``sys.exit(0)``; then every rank all-reduces.

The child runs the atexit handlers it inherited (``os.fork``, not multiprocessing, whose
children leave through ``os._exit``): those of helios must leave its parent's group and
its failure report alone.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

import helios_pg
from tests.support.worker import group_timeout, report


def main() -> None:
    helios_pg.init(backend="gloo", timeout=group_timeout())
    rank = dist.get_rank()
    if rank == 0:
        child = os.fork()
        if child == 0:
            sys.exit(0)
        os.waitpid(child, 0)
    dist.barrier()
    total = torch.ones(1)
    dist.all_reduce(total)
    report(rank=rank, total=total.item())
    helios_pg.shutdown()


if __name__ == "__main__":
    main()
