"""Case ``scale``: init, barriers and a one-element all-reduce at 8, 16, 32 and 64 ranks,
against torch's own, with the barrier's store requests, a missing rank and PSS.

Each world size is one run of ``python -m tools.bench.scale_ranks`` (its docstring says
what each rank does); the ranks are forked from a process that imported torch, as the
ranks plugin forks them. Per world size: the group's init (its slowest rank), the time
per call of each barrier and all-reduce (median over ranks), the store requests per
barrier and rank with every rank on time and with one rank 0.5 s late, how long the
others take to name a rank that never arrives, and PSS against RSS per rank. Then how
each time grows per rank added, from 8 to 64 ranks.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support.procs import base_env, run_processes
from tools.bench.rows import CaseResult, Row, Settings

__all__ = ["WORLDS", "run"]

WORLDS = (8, 16, 32, 64)
MISSING_TIMEOUT = 5.0
"""As ``tools.bench.scale_ranks.MISSING_TIMEOUT`` (not imported: that module imports torch)."""
MiB = 1024 * 1024

_CALLS = (
    ("barrier", "helios_collectives.barrier", "dist_barrier", "dist.barrier", 3.0),
    ("barrier", "helios_collectives.barrier", "monitored_barrier", "dist.monitored_barrier", None),
    ("safe_barrier", "helios_collectives.safe_barrier", "dist_barrier", "dist.barrier", None),
    (
        "all_reduce_tensors",
        "all_reduce_tensors, 1 element",
        "all_reduce",
        "dist.all_reduce, 1 element",
        None,
    ),
)
"""Each timed call: helios's key and name, the alternative's, and the goal at 64 ranks."""


def _ranks(world: int, limit: float) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="hb-scale-") as folder:
        command = [sys.executable, "-m", "tools.bench.scale_ranks", str(world), folder]
        env = base_env({"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""})
        [finished] = run_processes([(command, env)], limit=limit)
        if finished.returncode != 0:
            message = f"the scale case failed at {world} ranks:\n{finished.describe()[-4000:]}"
            raise RuntimeError(message)
        found = [json.loads(p.read_text()) for p in sorted(Path(folder).glob("rank*.json"))]
    if len(found) != world:
        message = f"the scale case at {world} ranks got {len(found)} rank reports"
        raise RuntimeError(message)
    return found


def _row(case: str, ours: str, theirs: str, values: tuple[float, float], **kw: Any) -> Row:
    unit, goal = kw.get("unit", "s"), kw.get("goal")
    ratio = values[0] / values[1]
    return Row(
        case,
        ours,
        theirs,
        values[0],
        values[1],
        unit,
        ratio,
        "helios / alternative",
        "report" if goal is None else f"<= {goal:g}",
        goal is None or ratio <= goal,
    )


def _rows(world: int, ranks: list[dict[str, Any]]) -> list[Row]:
    def median(key: str) -> float:
        return float(statistics.median(r[key] for r in ranks))

    def slowest(key: str) -> float:
        return float(max(r[key] for r in ranks))

    at = f"{world} ranks"
    last = world == WORLDS[-1]
    rows = [
        _row(
            f"scale, {at}: init, slowest rank",
            "helios_pg.init (env://, TCPStore)",
            "init_process_group on a TCPStore",
            (slowest("init_end"), slowest("tcp_init_end")),
        )
    ]
    for key, ours, other, theirs, goal in _CALLS:
        rows.append(
            _row(
                f"scale, {at}: {ours} per call",
                ours,
                theirs,
                (median(key), median(other)),
                goal=goal if last else None,
            )
        )
    on_time = sum(r["requests_on_time"] for r in ranks) / world
    late = sum(r["requests_one_late"] for r in ranks) / world
    rows.append(
        _row(
            f"scale, {at}: store requests per barrier and rank",
            "barrier, one rank 0.5 s late",
            "barrier, every rank on time",
            (late, on_time),
            unit="requests",
            goal=1.2,
        )
    )
    named = [r["missing_after"] for r in ranks if r.get("missing_named") == [world - 1]]
    if len(named) != world - 1:
        message = f"at {world} ranks not every survivor named rank {world - 1}: {ranks}"
        raise RuntimeError(message)
    rows.append(
        _row(
            f"scale, {at}: a rank that never arrives, named by every other",
            f"barrier({MISSING_TIMEOUT:g} s), the last survivor to raise",
            "its timeout + 2 s",
            (max(named), MISSING_TIMEOUT + 2),
            goal=1.0,
        )
    )
    rows.append(
        _row(
            f"scale, {at}: memory per rank",
            "PSS (shared pages counted once)",
            "RSS",
            (median("pss") / MiB, median("rss") / MiB),
            unit="MiB",
        )
    )
    return rows


def _growth(by_world: dict[int, list[dict[str, Any]]]) -> list[Row]:
    first, last = WORLDS[0], WORLDS[-1]

    def slope(key: str, pick: Any) -> float:
        return float(pick(by_world[last], key) - pick(by_world[first], key)) / (last - first)

    def median(ranks: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(r[key] for r in ranks))

    def slowest(ranks: list[dict[str, Any]], key: str) -> float:
        return float(max(r[key] for r in ranks))

    span = f"{first} to {last} ranks"
    rows = [
        _row(
            f"scale, per rank added ({span}): init",
            "helios_pg.init",
            "init_process_group on a TCPStore",
            (slope("init_end", slowest), slope("tcp_init_end", slowest)),
        )
    ]
    for key, ours, other, theirs, _goal in _CALLS:
        if other == "monitored_barrier":
            continue
        rows.append(
            _row(
                f"scale, per rank added ({span}): {ours}",
                ours,
                theirs,
                (slope(key, median), slope(other, median)),
            )
        )
    return rows


def run(settings: Settings) -> CaseResult:
    by_world = {world: _ranks(world, settings.timeout) for world in WORLDS}
    rows = [row for world in WORLDS for row in _rows(world, by_world[world])]
    return CaseResult([*rows, *_growth(by_world)])
