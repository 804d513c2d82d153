"""Worker for tests/integration/test_torchrun.py: print and log before and after init.

Every line it prints carries a marker ``@@<kind> <phase>:<rank>:<local_rank>@@``; the
parent counts markers to learn which ranks printed. Each line leaves in one write, so
lines from several processes sharing a pipe never interleave mid-line.

The group is torch's own (``init_process_group``), or with ``--helios-pg`` the one that
``helios_pg.init`` forms; then the worker also reports, on a ``ranks`` line, what
helios_env saw before and after init, one all-reduce, and that ``helios_pg.shutdown``
left no group.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import logging
import os
import sys

import torch
import torch.distributed as dist

import helios_pg
from helios_env import get_dist_info, inspect_environment, is_using_torchrun
from helios_log import (
    global_print,
    local_print,
    on_global_rank,
    on_local_rank,
    setup_rank_logging,
)
from helios_pg._torch import destroy_without_deadlock
from tests.support.worker import group_timeout, report

logger = logging.getLogger("log_worker")


@on_global_rank()
def global_job(tag: str) -> str:
    return tag


@on_local_rank()
def local_job(tag: str) -> str:
    return tag


def emit(phase: str) -> None:
    info = get_dist_info()
    tag = f"{phase}:{info.rank}:{info.local_rank}"
    global_print(f"@@global {tag}@@")
    global_print(f"@@global-last {tag}@@", global_rank=info.world_size - 1)
    local_print(f"@@local {tag}@@")
    local_print(f"@@local-1 {tag}@@", local_rank=1)
    logger.info(f"@@info {tag}@@")
    logger.warning(f"@@warning {tag}@@")
    report(
        phase=phase,
        rank=info.rank,
        local_rank=info.local_rank,
        world_size=info.world_size,
        process_group=inspect_environment().process_group,
        global_job=global_job(tag),
        local_job=local_job(tag),
    )


def report_ranks(before: dict[str, object]) -> None:
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    report(
        phase="ranks",
        rank=dist.get_rank(),
        torchrun=is_using_torchrun(),
        before=before,
        after=dataclasses.asdict(get_dist_info()),
        dist_rank=dist.get_rank(),
        dist_world_size=dist.get_world_size(),
        backend=dist.get_backend(),
        group_rank=os.environ.get("GROUP_RANK"),
        total=total.item(),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--helios-pg", action="store_true", help="form the group by helios_pg")
    args = parser.parse_args()
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Buffer each line whole: with PYTHONUNBUFFERED, print writes the text and its
        # newline separately, and another process's output could land in between.
        sys.stdout.reconfigure(line_buffering=True, write_through=False)
    setup_rank_logging(stream=sys.stdout)
    before = dataclasses.asdict(get_dist_info())
    emit("before")
    if args.helios_pg:
        helios_pg.init(timeout=group_timeout())
    else:
        dist.init_process_group("gloo", init_method="env://", timeout=group_timeout())
    try:
        dist.barrier()
        emit("after")
        if args.helios_pg:
            report_ranks(before)
        dist.barrier()
    finally:
        if args.helios_pg:
            helios_pg.shutdown()
        else:
            # Plain torch's group, destroyed past torch 2.4's gloo deadlock (a destroy
            # just after a collective can hang on gloo's worker thread before 2.8).
            destroy_without_deadlock()
    if args.helios_pg:
        report(phase="shutdown", initialized=dist.is_initialized())


if __name__ == "__main__":
    main()
