"""Worker for torchrun: report the ranks before and after init, and one all-reduce.

With ``--fail-first-attempt N``, the worker of local rank N on every node exits with
status 3 on torch elastic's first attempt (``TORCHELASTIC_RESTART_COUNT=0``), before
importing torch, so that the agent restarts the whole group.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from tests.support.worker import group_timeout, report

FAILURE_STATUS = 3


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-first-attempt", type=int, metavar="LOCAL_RANK")
    args = parser.parse_args()
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    local_rank = os.environ.get("LOCAL_RANK")
    if attempt == "0" and local_rank == str(args.fail_first_attempt):
        report(event="failing", attempt=attempt, local_rank=local_rank)
        return FAILURE_STATUS

    import torch
    import torch.distributed as dist

    import helios_env
    import helios_pg

    before = helios_env.get_dist_info()
    helios_pg.init(timeout=group_timeout())
    try:
        after = helios_env.get_dist_info()
        total = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(total)
        report(
            event="ran",
            attempt=attempt,
            torchrun=helios_env.is_using_torchrun(),
            before=dataclasses.asdict(before),
            after=dataclasses.asdict(after),
            dist_rank=dist.get_rank(),
            dist_world_size=dist.get_world_size(),
            backend=dist.get_backend(),
            group_rank=os.environ.get("GROUP_RANK"),
            total=total.item(),
        )
    finally:
        helios_pg.shutdown()
    report(event="finished", attempt=attempt, initialized=dist.is_initialized())
    return 0


if __name__ == "__main__":
    sys.exit(main())
