"""Worker: rank 0 forks a child that runs its atexit handlers and ends; then every rank
all-reduces.

A child of ``os.fork`` that ends with ``sys.exit`` runs the atexit handlers it inherited
(multiprocessing's children leave through ``os._exit``): those of helios must leave its
parent's group and its failure report alone. The child runs them as ``sys.exit`` would,
then leaves through ``os._exit``: the rest of a forked child's finalization aborts under
some torch versions (2.4), whatever helios does.
"""

from __future__ import annotations

import atexit
import os

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
            atexit._run_exitfuncs()
            os._exit(0)
        os.waitpid(child, 0)
    dist.barrier()
    total = torch.ones(1)
    dist.all_reduce(total)
    report(rank=rank, total=total.item())
    helios_pg.shutdown()


if __name__ == "__main__":
    main()
