"""The ``agreement`` and ``reporter`` cases: ``helios_pg.init()`` with a part on and off.

``agreement``: init with its agreement check against without; ``reporter``: init with
the failure reporter (``report_failures``, on by default) against without, on
``env://``. Run on the ranks of ``ranks.on_ranks``: every rank leaves the plugin's
group, then times inits in pairs, the part on and off, which one first alternating, all
ranks starting each init at one moment agreed in the group before (an all-reduce of the
ranks' clocks), on a port of its own. The agreement check meets two ways: ``env://`` on
gloo, where init exchanges host names anyway and the check rides that exchange; and a
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
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore

import helios_pg
from tests.support.procs import free_port, launcher_variables
from tools.bench.common import Row, row

__all__ = ["on_ranks_agreement", "on_ranks_reporter"]

_PAIRS = 48
_TIMEOUT = timedelta(seconds=60)
_WAYS = ("env", "store")
Part = Literal["check_agreement", "report_failures"]
Slowest = dict[tuple[str, bool, int], float]
"""An init's time by way, arm (the part on or off) and pair: its slowest rank's."""


def _init(way: str, part: Part, on: bool, rank: int, world: int, port: int) -> None:
    check, report = on or part != "check_agreement", on or part != "report_failures"
    init = partial(helios_pg.init, timeout=_TIMEOUT, check_agreement=check, report_failures=report)
    if way == "env":
        init()
        return
    store = TCPStore("127.0.0.1", port, world, rank == 0, timeout=_TIMEOUT)
    init(store=store, rank=rank, world_size=world)


def _paired_inits(part: Part, ways: tuple[str, ...]) -> Slowest | None:
    """Each way, ``_PAIRS`` pairs of inits with ``part`` on and off; rank 0 gets them."""
    rank, world = dist.get_rank(), dist.get_world_size()
    count = 2 * _PAIRS * len(ways)
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
        way, pair, second = ways[index // (2 * _PAIRS)], index // 2 % _PAIRS, index % 2
        on = (pair + second) % 2 == 0  # which goes first alternates by pair
        os.environ.update(launcher_variables(rank, world, port))
        time.sleep(max(0.0, start - time.time()))
        _init(way, part, on, rank, world, port)
        mine.append((way, on, pair, time.time() - start))
    ranks: list[Any] = [None] * world
    dist.all_gather_object(ranks, mine)
    helios_pg.shutdown()
    if rank != 0:
        return None
    slowest: Slowest = {}
    for measured in ranks:
        for way, on, pair, seconds in measured:
            key = (way, on, pair)
            slowest[key] = max(slowest.get(key, 0.0), seconds)
    return slowest


def _rows(
    slowest: Slowest, cases: tuple[tuple[str, str, str], ...], names: tuple[str, str]
) -> list[Row]:
    """One row per way: each arm's first quartile, and their ratio."""
    rows = []
    for way, at, goal in cases:
        on, off = (
            statistics.quantiles([slowest[way, arm, p] for p in range(_PAIRS)], n=4)[0]
            for arm in (True, False)
        )
        rows.append(row(at, *names, [on, off, on / off], goal=goal))
    return rows


def on_ranks_agreement(out: Path) -> None:
    """One world size: both ways of meeting, ``_PAIRS`` pairs each; rank 0 writes the rows."""
    world = dist.get_world_size()
    slowest = _paired_inits("check_agreement", _WAYS)
    if slowest is None:
        return
    at = f"agreement, {world} ranks: init, slowest rank, "
    cases = (
        ("env", at + "the check rides the exchange of host names (env://, gloo)", "<= 1.05"),
        ("store", at + "one small exchange of its own (store=, layout known)", "report"),
    )
    names = ("helios_pg.init()", "helios_pg.init(check_agreement=False)")
    rows = _rows(slowest, cases, names)
    out.joinpath(f"{world}.json").write_text(json.dumps([asdict(r) for r in rows]))


def on_ranks_reporter(out: Path) -> None:
    """One world size: ``env://``, ``_PAIRS`` pairs of inits; rank 0 writes the row."""
    world = dist.get_world_size()
    slowest = _paired_inits("report_failures", ("env",))
    if slowest is None:
        return
    at = f"failure reporter, {world} ranks: init, slowest rank (env://, gloo)"
    names = ("helios_pg.init()", "helios_pg.init(report_failures=False)")
    rows = _rows(slowest, (("env", at, "<= 1.02"),), names)
    out.joinpath(f"{world}.json").write_text(json.dumps([asdict(r) for r in rows]))
