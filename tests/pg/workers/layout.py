"""Worker: report the node helios-env gives before init, while the group lives, and after.

The test starts each rank in a UTS namespace of its own, named as a node of a
round-robin placement, with Open MPI's variables, which say the processes per node
but not which node.
"""

from __future__ import annotations

import dataclasses
import socket

import torch
import torch.distributed as dist

import helios_env
import helios_pg
from tests.support.worker import group_timeout, report


def main() -> None:
    before = dataclasses.asdict(helios_env.get_dist_info())
    helios_pg.init(timeout=group_timeout())
    during = dataclasses.asdict(helios_env.get_dist_info())
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    helios_pg.shutdown()
    report(
        rank=before["rank"],
        host=socket.gethostname(),
        before=before,
        during=during,
        after=dataclasses.asdict(helios_env.get_dist_info()),
        total=float(total.item()),
    )


if __name__ == "__main__":
    main()
