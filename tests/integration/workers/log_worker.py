"""Worker for tests/integration/test_log_torchrun.py: print and log before and after init.

Every line it prints carries a marker ``@@<kind> <phase>:<rank>:<local_rank>@@``; the
parent counts markers to learn which ranks printed. Each line leaves in one write, so
lines from several processes sharing a pipe never interleave mid-line.
"""

from __future__ import annotations

import io
import logging
import sys

import torch.distributed as dist

from helios_env import get_dist_info, inspect_environment
from helios_log import (
    global_print,
    local_print,
    on_global_rank,
    on_local_rank,
    setup_rank_logging,
)
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


def main() -> None:
    if isinstance(sys.stdout, io.TextIOWrapper):
        # Buffer each line whole: with PYTHONUNBUFFERED, print writes the text and its
        # newline separately, and another process's output could land in between.
        sys.stdout.reconfigure(line_buffering=True, write_through=False)
    setup_rank_logging(stream=sys.stdout)
    emit("before")
    dist.init_process_group("gloo", init_method="env://", timeout=group_timeout())
    try:
        dist.barrier()
        emit("after")
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
