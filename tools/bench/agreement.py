"""The ``agreement`` case: ``helios_pg.init()`` with its agreement check against without.

Run on the ranks of ``ranks.on_ranks``: every rank leaves the plugin's group, then times
inits in pairs, check on and off, which one first alternating, all ranks starting each
init at one moment agreed in the group before (an all-reduce of the ranks' clocks), on a
port of its own. Two ways of meeting: ``env://`` on gloo,
where init exchanges host names anyway and the check rides that exchange; and a
``TCPStore`` passed as ``store`` with launcher variables that say the layout, where
init makes no exchange and the check makes one small exchange of its own. An init's
time is its slowest rank's; a row's values are each arm's first quartile, and its ratio
theirs. At 8 ranks on two cores torch's clients now and then retry a connection for 0.5
to 5 s, in either arm (the check runs after every rank reached the store, so it has no
part in it): the first quartile is the init those retries left alone.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore

import helios_pg
from tests.support.procs import free_port, launcher_variables
from tools.bench.common import row

__all__ = ["on_ranks_agreement"]

_PAIRS = 48
_TIMEOUT = timedelta(seconds=60)
_WAYS = ("env", "store")


def _init(way: str, check: bool, rank: int, world: int, port: int) -> None:
    if way == "env":
        helios_pg.init(timeout=_TIMEOUT, check_agreement=check)
        return
    store = TCPStore("127.0.0.1", port, world, rank == 0, timeout=_TIMEOUT)
    helios_pg.init(
        store=store, rank=rank, world_size=world, timeout=_TIMEOUT, check_agreement=check
    )


def on_ranks_agreement(out: Path) -> None:
    """One world size: both ways of meeting, ``_PAIRS`` pairs each; rank 0 writes the rows."""
    rank, world = dist.get_rank(), dist.get_world_size()
    count = 2 * _PAIRS * len(_WAYS)
    margin = 0.1 + 0.02 * world  # seconds for every rank to leave a group and be ready
    plan: list[Any] = [[free_port() for _ in range(count)]]
    dist.broadcast_object_list(plan, 0)
    mine: list[tuple[str, bool, int, float]] = []
    for index, port in enumerate(plan[0]):
        clock = torch.tensor([time.time()], dtype=torch.float64)
        dist.all_reduce(clock, op=dist.ReduceOp.MAX)
        dist.barrier()  # no rank tears the group down while another still uses it
        helios_pg.shutdown()  # the plugin's group first, then each one timed here
        start = float(clock.item()) + margin
        way, pair, second = _WAYS[index // (2 * _PAIRS)], index // 2 % _PAIRS, index % 2
        check = (pair + second) % 2 == 0  # which goes first alternates by pair
        os.environ.update(launcher_variables(rank, world, port))
        time.sleep(max(0.0, start - time.time()))
        _init(way, check, rank, world, port)
        mine.append((way, check, pair, time.time() - start))
    ranks: list[Any] = [None] * world
    dist.all_gather_object(ranks, mine)
    helios_pg.shutdown()
    if rank != 0:
        return
    slowest: dict[tuple[str, bool, int], float] = {}
    for measured in ranks:
        for way, check, pair, seconds in measured:
            key = (way, check, pair)
            slowest[key] = max(slowest.get(key, 0.0), seconds)
    rows = []
    for way, case, goal in (
        ("env", "the check rides the exchange of host names (env://, gloo)", "<= 1.05"),
        ("store", "one small exchange of its own (store=, layout known)", "report"),
    ):
        on, off = (
            statistics.quantiles([slowest[way, check, p] for p in range(_PAIRS)], n=4)[0]
            for check in (True, False)
        )
        measured = [on, off, on / off]
        at = f"agreement, {world} ranks: init, slowest rank, {case}"
        names = ("helios_pg.init()", "helios_pg.init(check_agreement=False)")
        rows.append(row(at, *names, measured, goal=goal))
    out.joinpath(f"{world}.json").write_text(json.dumps([asdict(r) for r in rows]))
