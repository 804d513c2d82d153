"""Worker: form the group with ``helios_pg.init()`` as the launcher left it, and check it.

No ``MASTER_ADDR`` or ``MASTER_PORT`` is set by the test: the rendezvous is derived.
Prints one ``RESULT`` line: the rank, the world size, the all-reduced sum of
``rank + 1`` and the derived rendezvous; or the error ``init`` raised, with the SLURM
task it ran in (``SLURM_PROCID``, when set).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import helios_pg
from helios_env import get_dist_info, inspect_environment
from tests.support.worker import group_timeout, report


def main() -> int:
    try:
        environment = inspect_environment()
        helios_pg.init(backend="gloo", timeout=group_timeout())
    except (ValueError, RuntimeError) as exc:
        report(error=type(exc).__name__, message=str(exc), task=os.environ.get("SLURM_PROCID"))
        return 3
    try:
        info = get_dist_info()
        total = torch.tensor([float(info.rank + 1)])
        dist.all_reduce(total)
        report(
            rank=info.rank,
            world_size=info.world_size,
            local_rank=info.local_rank,
            total=total.item(),
            launcher=str(environment.launcher),
            master_addr=environment.master_addr,
            master_port=environment.master_port,
            sources=dict(environment.sources),
            job=environment.job,
        )
    finally:
        helios_pg.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
