"""The rank side of the multi-process cases: ``python -m tools.bench.workers CASE``.

``collectives``: started by the ``collectives`` case (tools/bench/collectives.py) with
RANK/WORLD_SIZE/MASTER_* set; rank 0 prints one JSON line with the rows. Every rank
runs the same sequence of collectives, alternating the helios call and the alternative
behind a barrier, so both are measured under the same conditions.

``busbw SIZES ITERS WARMUP PATH``: run under torchrun, the plain ``torch.distributed``
sweep that the ``busbw`` case sets against ``python -m helios_collectives``: the same
sizes, the same warm-up and timed counts, the same slowest-rank time, with
``dist.all_reduce`` and the flat all-gather (``dist.all_gather_single`` where torch has
it, else ``dist.all_gather_into_tensor``) into an output allocated once per size. Rank
0 writes the points to PATH as JSON.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import helios_pg
from helios_collectives import all_reduce_tensors, gather_into_tensor, gather_uneven
from helios_collectives._main.sweep import bus_factor
from helios_collectives._torch import gather_function_name
from tools.bench import timing
from tools.bench.rows import Row

MiB = 1024 * 1024


def _interleaved(
    a: Callable[[], object], b: Callable[[], object], *, number: int, repeat: int = 9
) -> tuple[float, float]:
    """:func:`tools.bench.timing.interleaved`, every rank starting each measurement at once."""
    return timing.interleaved(a, b, number=number, repeat=repeat, sync=dist.barrier)


def row(
    case: str,
    helios: str,
    alternative: str,
    ours: float,
    theirs: float,
    *,
    speedup: bool,
    goal: str,
    met: Callable[[float], bool],
) -> Row:
    ratio = theirs / ours if speedup else ours / theirs
    return Row(
        case,
        helios,
        alternative,
        ours,
        theirs,
        "s",
        ratio,
        "alternative / helios (speed-up)" if speedup else "helios / alternative",
        goal,
        bool(met(ratio)),
    )


def coalescing() -> list[Row]:
    tensors = [torch.rand(16) for _ in range(64)]

    def loop() -> None:
        for t in tensors:
            dist.all_reduce(t)

    ours, theirs = _interleaved(lambda: all_reduce_tensors(tensors), loop, number=20)
    return [
        row(
            "coalescing: all-reduce of 64 tensors of 16 floats",
            "all_reduce_tensors(list)",
            "64 x dist.all_reduce",
            ours,
            theirs,
            speedup=True,
            goal=">= 10",
            met=lambda r: r >= 10,
        )
    ]


def overhead() -> list[Row]:
    rows = []
    world = dist.get_world_size()
    # The per-call goal is measured at world size one (the ``call-cost``
    # case), where no transport noise hides it; two ranks on two shared cores move by
    # 10-20% between runs, so the 1-element rows here are reported only.
    for label, elements, number, goal in (
        ("1 element", 1, 200, None),
        ("16 MiB", 4 * MiB, 3, 1.03),
    ):
        t = torch.rand(elements)
        ours, theirs = _interleaved(
            partial(all_reduce_tensors, t), partial(dist.all_reduce, t), number=number, repeat=21
        )
        rows.append(
            row(
                f"overhead: all-reduce, {label}",
                "all_reduce_tensors",
                "dist.all_reduce",
                ours,
                theirs,
                speedup=False,
                goal="report" if goal is None else f"<= {goal}",
                met=(lambda r: True) if goal is None else partial(operator.ge, goal),
            )
        )
        raw_name = "all_gather_single"
        if not hasattr(dist, raw_name):
            raw_name = "all_gather_into_tensor"
        raw_call = getattr(dist, raw_name)

        # gather_into_tensor returns a new tensor, so the raw call allocates one too.
        def raw(t: torch.Tensor = t, call: Callable[..., object] = raw_call) -> None:
            call(torch.empty(world * t.numel()), t)

        ours, theirs = _interleaved(
            partial(gather_into_tensor, t, (world * elements,)), raw, number=number, repeat=21
        )
        rows.append(
            row(
                f"overhead: gather, {label}",
                "gather_into_tensor",
                f"torch.empty + dist.{raw_name}",
                ours,
                theirs,
                speedup=False,
                goal="report" if goal is None else f"<= {goal}",
                met=(lambda r: True) if goal is None else partial(operator.ge, goal),
            )
        )
    return rows


def uneven() -> list[Row]:
    rank = dist.get_rank()
    world = dist.get_world_size()
    rows = []
    # About 4 KiB and 1 MiB per rank (rows of 1 KiB), first dimensions differing by rank.
    for label, base, step, number in (("~4 KiB", 4, 1, 200), ("~1 MiB", 1024, 64, 10)):
        t = torch.rand(base + step * rank, 256)

        def by_hand(t: torch.Tensor = t) -> torch.Tensor:
            # What a user would write: exchange the sizes, pad, all_gather, trim.
            size = torch.tensor([t.shape[0]])
            sizes = [torch.zeros_like(size) for _ in range(world)]
            dist.all_gather(sizes, size)
            counts = [int(s.item()) for s in sizes]
            longest = max(counts)
            padded = torch.zeros(longest, *t.shape[1:])
            padded[: t.shape[0]] = t
            parts = [torch.empty_like(padded) for _ in range(world)]
            dist.all_gather(parts, padded)
            return torch.cat([part[:count] for part, count in zip(parts, counts, strict=True)])

        def gather_objects(t: torch.Tensor = t) -> torch.Tensor:
            objects: list[Any] = [None] * world
            dist.all_gather_object(objects, t)
            return torch.cat(objects)

        ours, hand = _interleaved(partial(gather_uneven, t), by_hand, number=number, repeat=15)
        ours2, objects = _interleaved(
            partial(gather_uneven, t), gather_objects, number=number, repeat=15
        )
        rows += [
            row(
                f"uneven gather, {label} per rank",
                "gather_uneven",
                "by hand: all_gather sizes, pad, all_gather, trim",
                ours,
                hand,
                speedup=True,
                goal=">= 1",
                met=lambda r: r >= 1,
            ),
            row(
                f"uneven gather, {label} per rank",
                "gather_uneven",
                "all_gather_object",
                ours2,
                objects,
                speedup=True,
                goal=">= 2",
                met=lambda r: r >= 2,
            ),
        ]
    return rows


def validation() -> list[Row]:
    small = torch.rand(16)
    ours, plain = _interleaved(
        lambda: all_reduce_tensors(small, validate=True),
        lambda: all_reduce_tensors(small, validate=False),
        number=100,
    )
    return [
        row(
            "validation mode cost, all-reduce of 16 floats",
            "all_reduce_tensors(validate=True)",
            "all_reduce_tensors(validate=False)",
            ours,
            plain,
            speedup=False,
            goal="report",
            met=lambda r: True,
        )
    ]


GATHER_CALL = gather_function_name(dist)
"""The flat all-gather, chosen as helios-collectives chooses it."""


def _slowest_rank_seconds(op: Callable[[], object], *, iters: int, warmup: int) -> float:
    """Seconds per call of ``op`` on the slowest rank, timed as the main job times it."""
    for _ in range(warmup):
        op()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        op()
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item())


def plain_sweep(sizes: list[int], *, iters: int, warmup: int) -> list[dict[str, Any]]:
    """All-reduce and all-gather over ``sizes`` with the bare torch calls.

    Sizes, element counts and bus-bandwidth factors follow the main job's sweep: an
    all-reduce of ``size // 4`` floats, and an all-gather whose gathered output holds
    ``size // 4`` floats (``size // 4 // world`` from each rank).
    """
    world = dist.get_world_size()
    gather = getattr(dist, GATHER_CALL)
    points: list[dict[str, Any]] = []
    for operation in ("all_reduce", "all_gather"):
        for size in sizes:
            if operation == "all_reduce":
                elements = max(1, size // 4)
                tensor = torch.ones(elements, dtype=torch.float32)
                moved = elements * 4
                op: Callable[[], object] = partial(dist.all_reduce, tensor)
            else:
                elements = max(1, size // 4 // world)
                tensor = torch.ones(elements, dtype=torch.float32)
                out = torch.empty(elements * world, dtype=torch.float32)
                moved = elements * 4 * world
                op = partial(gather, out, tensor)
            seconds = _slowest_rank_seconds(op, iters=iters, warmup=warmup)
            points.append(
                {
                    "operation": operation,
                    "size_bytes": moved,
                    "elements": elements,
                    "latency_us": seconds * 1e6,
                    "algbw_gbps": moved / seconds / 1e9,
                    "busbw_gbps": moved / seconds / 1e9 * bus_factor(operation, world),
                }
            )
    return points


def busbw(args: list[str]) -> int:
    """The plain sweep under torchrun: ``SIZES ITERS WARMUP PATH``, sizes comma-separated."""
    sizes = [int(size) for size in args[0].split(",")]
    iters, warmup, path = int(args[1]), int(args[2]), Path(args[3])
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    try:
        points = plain_sweep(sizes, iters=iters, warmup=warmup)
    finally:
        dist.destroy_process_group()
    if os.environ.get("RANK") == "0":
        data = {"benchmark": points, "gather_call": f"dist.{GATHER_CALL}"}
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0


def collectives() -> int:
    helios_pg.init(backend="gloo", timeout=timedelta(seconds=120))
    try:
        rows = coalescing() + overhead() + uneven() + validation()
    finally:
        helios_pg.shutdown()
    if os.environ.get("RANK") == "0":
        print(json.dumps({"rows": [asdict(r) for r in rows]}), flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["busbw"]:
        return busbw(argv[1:])
    if argv[:1] in ([], ["collectives"]):
        return collectives()
    message = f"unknown benchmark worker case {argv[0]!r}; expected 'collectives' or 'busbw'"
    raise SystemExit(message)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
