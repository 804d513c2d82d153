"""The straggler report's cases: how soon it names a slowed rank, and what it costs a step.

``stragglers``: 3-rank DDP jobs under ``torchrun`` on gloo (``tests/pg/workers/stragglers.py``),
one rank's step slowed by 10%, 20% and 50%, each reporting every 2 s: the reports until
the slowed rank was first named, against the goal; and a job where no rank is slowed,
for 5 minutes: the reports that named nobody, against all its reports.

``straggler-cost`` (:func:`on_ranks_stragglers`, at 2 and 8 ranks): a 10 ms step (a DDP
forward and backward on a small model, then a sleep) in blocks of 100 steps, the report
on (a round every second) and off in alternating blocks, which goes first alternating.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from tests.support.procs import base_env, parse_results, run_processes, torchrun_command
from tools.bench.common import ROOT, Measured, Row, paired, row

__all__ = ["detection", "on_ranks_stragglers"]

WORKER = ROOT / "tests" / "pg" / "workers" / "stragglers.py"
PERIOD = 2
"""Seconds between two reports in the detection jobs."""
_QUIET = 300
"""Seconds of the job in which no rank is slowed."""
_SLOWED = ((0.1, 6), (0.2, 3), (0.5, 3))
"""Each slowdown of rank 1's step, and the reports within which it must be named."""


def _job(slowed_by: float, reports: int, run: float) -> list[dict[str, Any]]:
    """Rank 0's reports of one 3-rank DDP job whose rank 1 is ``slowed_by`` slower."""
    command = torchrun_command("--standalone", "--nproc-per-node=3", str(WORKER))
    env = base_env({
        "PYTHONPATH": str(ROOT),
        "HELIOS_STRAGGLER_REPORT": str(PERIOD),
        "HELIOS_TEST_LOOP": "ddp",
        "HELIOS_TEST_STEP": "0.02",
        "HELIOS_TEST_SLOWED_RANKS": "1" if slowed_by else "",
        "HELIOS_TEST_SLOWED_BY": str(slowed_by),
        "HELIOS_TEST_REPORTS": str(reports),
        "HELIOS_TEST_RUN": str(run),
        "HELIOS_TEST_PG_TIMEOUT": "120",
    })  # fmt: skip
    [finished] = run_processes([(command, env)], limit=run + 180)
    if finished.returncode != 0:
        raise RuntimeError(f"the straggler job failed:\n{finished.describe()[-4000:]}")
    (found,) = [item for item in parse_results(finished.stdout) if item["rank"] == 0]
    reports_seen: list[dict[str, Any]] = found["reports"]
    return reports_seen


def detection() -> Measured:
    """Reports until a slowed rank is named; reports that name nobody without one."""
    rows: list[Row] = []
    lines: dict[str, list[str]] = {}
    job = "3-rank DDP job (gloo), 20 ms step, a report every 2 s"
    for slowed_by, goal in _SLOWED:
        reports = _job(slowed_by, 2 * goal, 2 * goal * PERIOD + 60)
        named = [(r["straggler"] or {}).get("ranks") == [1] for r in reports]
        first = named.index(True) + 1 if True in named else len(named) + 1
        case = f"straggler report, {job}: rank 1 slowed by {slowed_by:.0%}"
        measured = (float(first), float(goal))
        rows.append(row(case, "reports until rank 1 is named", "goal", measured,
                        unit="reports", goal="<= 1"))  # fmt: skip
        lines[f"{slowed_by:.0%}"] = [r["line"] for r in reports]
    reports = _job(0.0, 10**6, _QUIET)
    quiet = sum(r["straggler"] is None for r in reports)
    case = f"straggler report, {job}: no rank slowed, {_QUIET // 60} minutes"
    rows.append(row(case, "reports that named nobody", "reports", (float(quiet), len(reports)),
                    unit="reports", goal=">= 1"))  # fmt: skip
    lines["none"] = [r["line"] for r in reports if r["line"]]
    return rows, {"lines": lines}


def on_ranks_stragglers(out: Path) -> None:
    """One world size: a 10 ms step with the report on against off; rank 0 writes the rows."""
    import torch
    import torch.distributed as dist
    from torch import nn

    from helios_pg._setup._after_init import own_connection
    from helios_pg._stragglers import start_stragglers, stop_stragglers

    rank, world = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, blocks, steps = torch.randn(8, 64), itertools.count(), 100

    def block(on: bool) -> None:
        if on:
            start_stragglers(rank=rank, world_size=world, period=1.0,
                             base=f"bench/stragglers/{next(blocks)}",
                             connect=partial(own_connection, store), backend="gloo")  # fmt: skip
        for _ in range(steps):
            time.sleep(0.01)
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        if on:
            stop_stragglers()

    block(False)
    on, off, ratio = paired(partial(block, True), partial(block, False), number=1, repeat=15,
                            before=dist.barrier)  # fmt: skip
    case = f"straggler report, {world} ranks: 10 ms step (DDP, gloo), a report every second"
    measured = (on / steps, off / steps, ratio)
    rows = [row(case, "straggler_report=1", "off", measured, goal="<= 1.01")]
    if rank == 0:
        out.joinpath(f"{world}.json").write_text(json.dumps([asdict(r) for r in rows]))


if __name__ == "__main__":
    print(json.dumps(detection()[1], indent=2), file=sys.stderr)
