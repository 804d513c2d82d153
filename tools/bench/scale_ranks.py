"""The rank side of the ``scale`` case: ``python -m tools.bench.scale_ranks WORLD OUT``.

This process imports torch and helios once, then forks ``WORLD`` ranks from itself, as
helios-pg's ranks plugin does from its forkserver. Each rank, over gloo on 127.0.0.1:

1. starts ``helios_pg.init`` at one moment agreed in advance (the group's init time is
   the slowest rank's);
2. times, alternating behind ``dist.barrier``, ``helios_collectives.barrier``,
   ``safe_barrier``, ``dist.barrier`` and ``dist.monitored_barrier``, and
   ``all_reduce_tensors`` of one element against ``dist.all_reduce``;
3. counts the store requests of its barriers (through a counting stand-in for the
   store's connections), with every rank on time and with one rank late by
   ``LATE`` s;
4. leaves the last rank out of a barrier with a ``MISSING_TIMEOUT`` s timeout, and
   times how long the others take to name it;
5. reads its PSS and RSS (``/proc/self/smaps_rollup``), shuts down, and times
   ``init_process_group`` on a ``TCPStore`` the same way.

Each rank writes one JSON file under OUT; the forking process exits 0 when every rank
did.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore

import helios_pg
from helios_collectives import (
    BarrierTimeoutError,
    all_reduce_tensors,
    barrier,
    safe_barrier,
)
from tests.support.procs import free_port, launcher_variables
from tests.support.store_count import count_requests, wait_for_waiting_connections
from tools.bench import timing

# What init imports on first use, imported here once (helios_pg's names load lazily).
for _module in ("_init", "_failure", "_stackdump", "_watchdog"):
    importlib.import_module(f"helios_pg.{_module}")

LATE = 0.5
"""Seconds by which one rank comes late to the barriers whose store requests are counted."""
MISSING_TIMEOUT = 5.0
"""Seconds: the timeout of the barrier that one rank never reaches."""
GROUP_TIMEOUT = timedelta(seconds=120)
START_DELAY = 1.0
"""Seconds from the fork of the last rank to the agreed start of the first init."""


def requests_per_barrier(late_rank: int | None, rank: int, number: int) -> float:
    """Store requests of this rank per barrier, over ``number`` barriers."""

    def barriers() -> None:
        for _ in range(number):
            if rank == late_rank:
                time.sleep(LATE)
            barrier(60.0)

    return count_requests(barriers) / number


def memory() -> dict[str, int]:
    """This process's PSS and RSS in bytes."""
    found = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in {"Pss", "Rss"}:
            found[name.lower()] = int(rest.split()[0]) * 1024
    return found


def wait_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def rank_main(rank: int, world: int, ports: tuple[int, int], start: float, out: Path) -> None:
    os.environ.update(launcher_variables(rank, world, ports[0]))
    result: dict[str, Any] = {"rank": rank}
    wait_until(start)
    helios_pg.init(timeout=GROUP_TIMEOUT)
    result["init_end"] = time.time() - start
    dist.barrier()
    one = torch.ones(1)
    number = 20
    ours, theirs = timing.interleaved(
        lambda: barrier(60.0), dist.barrier, number=number, repeat=5, sync=dist.barrier
    )
    result.update(barrier=ours, dist_barrier=theirs)
    ours, theirs = timing.interleaved(
        safe_barrier,
        lambda: dist.monitored_barrier(timeout=GROUP_TIMEOUT),
        number=number,
        repeat=5,
        sync=dist.barrier,
    )
    result.update(safe_barrier=ours, monitored_barrier=theirs)
    ours, theirs = timing.interleaved(
        lambda: all_reduce_tensors(one),
        lambda: dist.all_reduce(one),
        number=number,
        repeat=5,
        sync=dist.barrier,
    )
    result.update(all_reduce_tensors=ours, all_reduce=theirs)
    wait_for_waiting_connections()
    dist.barrier()
    result["requests_on_time"] = requests_per_barrier(None, rank, 10)
    dist.barrier()
    result["requests_one_late"] = requests_per_barrier(world - 1, rank, 4)
    dist.barrier()
    began = time.monotonic()
    if rank == world - 1:
        time.sleep(MISSING_TIMEOUT + 3.0)
        barrier(60.0)  # late: passes, so the next barrier meets
    else:
        try:
            barrier(MISSING_TIMEOUT)
        except BarrierTimeoutError as exc:
            result["missing_named"] = list(exc.missing_ranks)
            result["missing_after"] = time.monotonic() - began
    barrier(60.0)
    result.update(memory())
    # The alternative's init, from a moment rank 0 picks for every rank.
    moment = torch.tensor([time.time() + 1.0], dtype=torch.float64)
    dist.broadcast(moment, 0)
    helios_pg.shutdown()
    start_tcp = float(moment.item())
    wait_until(start_tcp)
    store = TCPStore("127.0.0.1", ports[1], world, rank == 0, timeout=GROUP_TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=GROUP_TIMEOUT)
    result["tcp_init_end"] = time.time() - start_tcp
    dist.barrier()
    dist.destroy_process_group()
    out.joinpath(f"rank{rank}.json").write_text(json.dumps(result))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    world, out = int(args[0]), Path(args[1])
    out.mkdir(parents=True, exist_ok=True)
    ports = (free_port(), free_port())
    start = time.time() + START_DELAY + 0.05 * world
    pids = []
    for rank in range(world):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                rank_main(rank, world, ports, start, out)
            except BaseException as exc:
                print(f"rank {rank}: {exc!r}", file=sys.stderr, flush=True)
                status = 1
            finally:
                os._exit(status)
        pids.append(pid)
    failed = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        failed += os.waitstatus_to_exitcode(status) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
