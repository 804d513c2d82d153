"""Worker: rank 1 turns init's agreement check off, rank 0 keeps it, both under ``env://``.

The group forms, rank 0 warns that rank 1 did not take part, and one all-reduce sums
the ranks' ones. Prints one ``RESULT`` line: the sum, or init's error.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import helios_pg
from tests.support.worker import group_timeout, report


def main() -> None:
    rank = int(os.environ["RANK"])
    try:
        helios_pg.init(
            backend="gloo",
            init_method="env://",  # out of habit
            timeout=group_timeout(),
            check_agreement=rank != 1,
        )
    except helios_pg.ProcessGroupInitError as exc:
        report(rank=rank, error=str(exc))
        return
    total = torch.ones(1)
    dist.all_reduce(total)
    helios_pg.shutdown()
    report(rank=rank, total=total.item())


if __name__ == "__main__":
    main()
