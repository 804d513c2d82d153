"""Worker for a CUDA machine: a world of one on nccl, ended with or without shutdown.

``--leak`` leaves the group alive at exit (the control: torch warns about it); without
it the program uses ``process_group``, which must leave nothing to warn about.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist

import helios_pg
from tests.support.worker import group_timeout, report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leak", action="store_true")
    args = parser.parse_args()
    if args.leak:
        helios_pg.init(timeout=group_timeout())
        tensor = torch.ones(1, device=helios_pg.local_device())
        dist.all_reduce(tensor)
        report(backend=dist.get_backend(), total=tensor.item(), leaked=True)
        return 0
    with helios_pg.process_group(timeout=group_timeout()):
        tensor = torch.ones(1, device=helios_pg.local_device())
        dist.all_reduce(tensor)
        report(backend=dist.get_backend(), total=tensor.item(), leaked=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
