"""Worker: rank 1 of a job hangs, as the test asks, while the others wait in an all-reduce.

``HELIOS_TEST_HANG`` says how: ``skip`` (rank 1 skips the all-reduce and sleeps in
Python; ``skip_preempt`` the same under ``preemption()``, whose handler must not keep
torchrun's SIGTERM from ending it once the roll call has named it), ``loop`` (rank 1
spins in a Python loop until its report of the roll call is written), ``gil`` (rank 1
sleeps in C holding the GIL), ``ddp`` (every rank builds a DistributedDataParallel
model; rank 1 sleeps instead of its backward pass, so the others wait in the
gradients' all-reduce, which torch issues from C++). Run with ``HELIOS_HANG_TIMEOUT``
and ``HELIOS_HANG_DIR`` set, and a group timeout longer than the hang timeout.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from helios_pg import preemption, process_group
from tests.support.worker import group_timeout

HANGING_RANK = 1
# Under preemption(), longer than torchrun's 30 s from its SIGTERM (at the group timeout)
# to SIGKILL: a rank that kept sleeping would be killed, and torchrun would say so.
HANG = 60.0 if os.environ.get("HELIOS_TEST_HANG") == "skip_preempt" else 25.0


def hang(mode: str) -> None:
    if mode in ("skip", "skip_preempt"):
        time.sleep(HANG)  # where rank 1 is: the roll call must name this line
    elif mode == "loop":
        # Spins in Python until the roll call has its report, then sleeps out the rest:
        # a core spun for the whole hang slows every other process of the test run.
        # os.access, a builtin: the roll call finds this line, not a frame of pathlib's.
        report = str(Path(os.environ["HELIOS_HANG_DIR"], f"rank-{HANGING_RANK}.txt"))
        deadline = time.monotonic() + HANG
        while time.monotonic() < deadline and not os.access(report, os.F_OK):  # spinning
            pass
        time.sleep(max(0.0, deadline - time.monotonic()))
    elif mode == "gil":
        ctypes.PyDLL(None).sleep(int(HANG))  # in C, with the GIL held


def ddp_step(rank: int) -> None:
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    loss = model(torch.ones(2, 4)).sum()
    if rank == HANGING_RANK:
        hang("skip")
    loss.backward()  # ranks 0 and 2 wait in DDP's gradient all-reduce


def main() -> None:
    mode = os.environ["HELIOS_TEST_HANG"]
    stop = preemption() if mode == "skip_preempt" else contextlib.nullcontext()
    with process_group(timeout=group_timeout()) as info, stop:
        if mode == "ddp":
            ddp_step(info.rank)
            return
        dist.all_reduce(torch.ones(1))
        if info.rank == HANGING_RANK:
            hang(mode)
        dist.all_reduce(torch.ones(1))  # the others wait here


if __name__ == "__main__":
    main()
