"""Worker: a training loop whose slowed ranks sleep longer each step; rank 0 reports.

``HELIOS_TEST_LOOP`` says what the step's collective is: ``ddp`` (DistributedDataParallel's
gradient all-reduce, issued from C++) or ``raw`` (a ``torch.distributed.all_reduce`` of the
loss). Each step sleeps ``HELIOS_TEST_STEP`` seconds, longer by ``HELIOS_TEST_SLOWED_BY``
(a fraction) on the ranks of ``HELIOS_TEST_SLOWED_RANKS`` (comma-separated) and on the
host ``HELIOS_TEST_SLOWED_HOST``; the model is one ``HELIOS_TEST_WIDTH``-square linear
layer (16 by default). Every step begins with a one-element all-reduce through
which rank 0 stops every rank together, once ``HELIOS_TEST_REPORTS`` straggler reports
came, or after ``HELIOS_TEST_RUN`` seconds. Rank 0 then reports every report it saw.
With ``HELIOS_TEST_TCP_PORT`` set, the group forms through ``init_method="tcp://..."`` on
that port of 127.0.0.1 instead of helios's own rendezvous.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict

import torch
import torch.distributed as dist
from torch import nn

import helios_pg
from tests.support.worker import group_timeout, report


def slowed(rank: int) -> bool:
    ranks = os.environ.get("HELIOS_TEST_SLOWED_RANKS", "")
    host = os.environ.get("HELIOS_TEST_SLOWED_HOST", "")
    return str(rank) in ranks.split(",") or socket.gethostname() == host


def main() -> None:
    port = os.environ.get("HELIOS_TEST_TCP_PORT")
    if port:  # as torch asks: the URL, the rank and the world size
        # Rank 0 serves this store itself: not torchrun's agent, whatever torch's version.
        os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        helios_pg.init(
            backend="gloo",
            timeout=group_timeout(),
            init_method=f"tcp://127.0.0.1:{port}",
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
        )
    else:
        helios_pg.init(backend="gloo", timeout=group_timeout())
    rank = dist.get_rank()
    loop = os.environ.get("HELIOS_TEST_LOOP", "raw")
    step = float(os.environ.get("HELIOS_TEST_STEP", "0.02"))
    if slowed(rank):
        step *= 1 + float(os.environ.get("HELIOS_TEST_SLOWED_BY", "0"))
    wanted = int(os.environ.get("HELIOS_TEST_REPORTS", "3"))
    deadline = time.monotonic() + float(os.environ.get("HELIOS_TEST_RUN", "30"))
    torch.manual_seed(0)
    width = int(os.environ.get("HELIOS_TEST_WIDTH", "16"))
    model: nn.Module = nn.Linear(width, width)
    if loop == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    seen: list[helios_pg.StragglerReport] = []
    steps = 0
    while True:
        latest = helios_pg.straggler_report()
        if latest is not None and (not seen or latest is not seen[-1]):
            seen.append(latest)
        done = len(seen) >= wanted or time.monotonic() > deadline
        stop = torch.tensor([1.0 if rank == 0 and done else 0.0])
        dist.all_reduce(stop)
        if stop.item():
            break
        time.sleep(step)
        loss = model(torch.ones(2, width)).sum()
        loss.backward()
        if loop == "raw":
            dist.all_reduce(loss.detach())
        steps += 1
    report(rank=rank, steps=steps, reports=[asdict(item) for item in seen])
    helios_pg.shutdown()


if __name__ == "__main__":
    main()
