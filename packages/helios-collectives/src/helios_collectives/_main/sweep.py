"""Latency and bandwidth of all-reduce and all-gather over a sweep of message sizes.

Bandwidths follow nccl-tests: the algorithm bandwidth is the message size over the
time of one operation, and the bus bandwidth scales it by what each link must carry,
``2(n-1)/n`` for all-reduce and ``(n-1)/n`` for all-gather, so that figures are
comparable across world sizes. For all-gather the message size is the gathered
output, as in nccl-tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TextIO

import torch
import torch.distributed as dist

from helios_collectives._gather import gather_into_tensor
from helios_collectives._main.sizes import format_bytes
from helios_collectives._reduce import all_reduce_tensors
from helios_collectives._safe_barrier import safe_barrier

__all__ = ["SweepPoint", "bus_factor", "run_sweep", "synchronize"]

OPERATIONS = ("all_reduce", "all_gather")


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One measured operation at one message size (times are the slowest rank's).

    Attributes:
        operation: ``"all_reduce"`` or ``"all_gather"``.
        size_bytes: The message size, in bytes.
        elements: The element count of each rank's input tensor (float32).
        latency_us: Microseconds per operation.
        algbw_gbps: Algorithm bandwidth, GB/s (10**9 bytes per second).
        busbw_gbps: Bus bandwidth, GB/s.
    """

    operation: str
    size_bytes: int
    elements: int
    latency_us: float
    algbw_gbps: float
    busbw_gbps: float


def bus_factor(operation: str, world_size: int) -> float:
    """Return nccl-tests' bus bandwidth factor for an operation and world size.

    Args:
        operation: ``"all_reduce"`` or ``"all_gather"``.
        world_size: The number of ranks.

    Returns:
        ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather.
    """
    n = world_size
    if operation == "all_reduce":
        return 2 * (n - 1) / n
    return (n - 1) / n


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a CUDA device); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(op: Callable[[], object], device: torch.device, *, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        op()
    synchronize(device)
    safe_barrier()
    start = time.perf_counter()
    for _ in range(iters):
        op()
    synchronize(device)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    # The slowest rank sets the pace.
    elapsed = elapsed.to(device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item())


def run_sweep(
    sizes: Sequence[int],
    *,
    device: torch.device,
    iters: int,
    warmup: int,
    progress: TextIO | None = None,
) -> list[SweepPoint]:
    """Measure all-reduce and all-gather at every size, on every rank together.

    Every rank must call this with the same arguments.

    Args:
        sizes: Message sizes in bytes (rounded down to whole float32 elements, at least
            one element per rank).
        device: The device that holds the tensors.
        iters: Timed operations per size.
        warmup: Untimed operations per size before timing.
        progress: A terminal where one line, rewritten in place and cleared at the
            end, names the size just measured (rank 0's stderr when it is a terminal).

    Returns:
        One point per operation and size, in sweep order.
    """
    world_size = dist.get_world_size()
    points: list[SweepPoint] = []
    for operation in OPERATIONS:
        for size in sizes:
            if operation == "all_reduce":
                elements = max(1, size // 4)
                tensor = torch.ones(elements, dtype=torch.float32, device=device)
                moved = elements * 4

                # The link's bandwidth, without the check that every rank makes the same
                # call (the verification before the sweep runs with it).
                op: Callable[[], object] = partial(all_reduce_tensors, tensor, validate=False)

            else:
                elements = max(1, size // 4 // world_size)
                tensor = torch.ones(elements, dtype=torch.float32, device=device)
                moved = elements * 4 * world_size
                shape = (elements * world_size,)
                # Gathered into one preallocated result, as a training loop would.
                out = torch.empty(shape, dtype=torch.float32, device=device)
                op = partial(gather_into_tensor, tensor, shape, out=out, validate=False)

            seconds = _timed(op, device, iters=iters, warmup=warmup)
            algbw = moved / seconds / 1e9
            point = SweepPoint(
                operation=operation,
                size_bytes=moved,
                elements=elements,
                latency_us=seconds * 1e6,
                algbw_gbps=algbw,
                busbw_gbps=algbw * bus_factor(operation, world_size),
            )
            points.append(point)
            if progress is not None:
                # One line, rewritten in place: the table follows on stdout.
                status = f"helios-collectives: {operation} {format_bytes(moved)}"
                print(f"\r\033[K{status}", end="", file=progress, flush=True)
    if progress is not None:
        print("\r\033[K", end="", file=progress, flush=True)
    return points
