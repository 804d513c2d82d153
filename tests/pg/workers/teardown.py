"""Worker: many world-of-one gloo groups, each shut down right after its collectives.

Before torch 2.8, destroying a gloo group could deadlock with its own worker thread
when that thread dropped the last reference to a finished collective's tensors
(one run in a few hundred here); ``helios_pg.shutdown`` must never do so.
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
    parser.add_argument("--rounds", type=int, required=True)
    args = parser.parse_args()
    for _ in range(args.rounds):
        helios_pg.init(backend="gloo", timeout=group_timeout())
        subgroup = dist.new_group([0])
        assert isinstance(subgroup, dist.ProcessGroup)
        for _ in range(3):
            # Fresh tensors that nobody holds once each call returns.
            dist.all_reduce(torch.ones(4))
            dist.all_gather([torch.empty(4)], torch.ones(4), group=subgroup)
        helios_pg.shutdown()
    report(rounds=args.rounds, initialized=dist.is_initialized())
    return 0


if __name__ == "__main__":
    sys.exit(main())
