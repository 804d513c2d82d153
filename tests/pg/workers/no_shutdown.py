"""Worker: init, all-reduce, and exit without ``shutdown()``, as a forgetful program does.

helios destroys the group it made at the interpreter's exit: without that, gloo's
threads abort some of these processes ("terminate called without an active
exception", status 134), and torch warns that ``destroy_process_group()`` was not
called.
"""

from __future__ import annotations

import atexit
import os

import torch
import torch.distributed as dist

import helios_pg
from tests.support.worker import group_timeout, report


def at_exit() -> None:
    """Registered before init, so it runs after what init registered: is a group left?"""
    report(rank=int(os.environ["RANK"]), initialized_at_exit=dist.is_initialized())


def main() -> None:
    atexit.register(at_exit)
    helios_pg.init(backend="gloo", timeout=group_timeout())
    total = torch.ones(1)
    dist.all_reduce(total)
    report(rank=dist.get_rank(), total=total.item())


if __name__ == "__main__":
    main()
