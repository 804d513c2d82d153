"""Worker for hand-started processes: one process group after another, in phases.

The test sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``MASTER_*`` as a user who
starts processes by hand would. Phase ``env`` meets through them; then the worker
drops every launcher variable and meets again through a ``file://`` init method (with
a short timeout that one rank's skipped collective must hit), a ``tcp://`` init method,
a ``TCPStore`` of its own, and ``init_dist`` with ``MASTER_ADDR``/``MASTER_PORT`` preset
to the values the test chose. Each phase reports a ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore

import helios_env
import helios_pg
from tests.support.procs import LAUNCHER_VARIABLES
from tests.support.worker import group_timeout, report

SKIPPING_RANK = 1
PEER_WAIT = 40.0


def summed(value: float) -> float:
    tensor = torch.tensor([value])
    dist.all_reduce(tensor)
    return float(tensor.item())


def info() -> dict[str, int]:
    return dataclasses.asdict(helios_env.get_dist_info())


def env_phase(rank: int) -> None:
    before = info()
    helios_pg.init(timeout=group_timeout())
    world = dist.group.WORLD
    helios_pg.init(timeout=group_timeout())
    report(
        phase="env",
        rank=rank,
        before=before,
        after=info(),
        dist_rank=dist.get_rank(),
        dist_world_size=dist.get_world_size(),
        backend=dist.get_backend(),
        kept=dist.group.WORLD is world,
        total=summed(rank),
    )
    helios_pg.shutdown()
    helios_pg.shutdown()
    report(phase="env-shutdown", rank=rank, initialized=dist.is_initialized())


def timeout_phase(rank: int, world_size: int, directory: Path, seconds: float) -> None:
    helios_pg.init(
        init_method=f"file://{directory / 'file-rendezvous'}",
        world_size=world_size,
        rank=rank,
        timeout=timedelta(seconds=seconds),
    )
    markers = [directory / f"timed-out.{other}" for other in range(world_size)]
    del markers[SKIPPING_RANK]
    if rank == SKIPPING_RANK:
        # Skip the all-reduce, and stay alive until the others gave up on it: a peer
        # that exits would end their wait early with a closed connection.
        deadline = time.monotonic() + PEER_WAIT
        while time.monotonic() < deadline and not all(m.exists() for m in markers):
            time.sleep(0.05)
        report(phase="file", rank=rank, info=info(), skipped=True)
    else:
        start = time.monotonic()
        error = None
        try:
            summed(1.0)
        except RuntimeError as exc:
            error = f"{type(exc).__name__}: {exc}"[:400]
        elapsed = time.monotonic() - start
        markers[0].parent.joinpath(f"timed-out.{rank}").touch()
        report(phase="file", rank=rank, info=info(), skipped=False, error=error, elapsed=elapsed)
    helios_pg.shutdown()


def tcp_phase(rank: int, world_size: int, port: int) -> None:
    helios_pg.init(
        init_method=f"tcp://127.0.0.1:{port}",
        world_size=world_size,
        rank=rank,
        timeout=group_timeout(),
    )
    launcher = [name for name in LAUNCHER_VARIABLES if name in os.environ]
    report(phase="tcp", rank=rank, info=info(), launcher=launcher, total=summed(rank))
    helios_pg.shutdown()


def store_phase(rank: int, world_size: int, port: int) -> None:
    store = TCPStore("127.0.0.1", port, world_size, is_master=rank == 0, timeout=group_timeout())
    keys_before = store.num_keys()
    helios_pg.init(store=store, world_size=world_size, rank=rank, timeout=group_timeout())
    report(
        phase="store",
        rank=rank,
        info=info(),
        total=summed(rank),
        keys_before=keys_before,
        keys_after=store.num_keys(),
    )
    helios_pg.shutdown()


def init_dist_phase(rank: int, world_size: int, addr: str, port: int) -> None:
    # What the test presets, as a user would before calling init_dist: the address
    # and port, and on the last rank a LOCAL_RANK of its own (a node of its own).
    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = str(port)
    if rank == world_size - 1:
        os.environ["LOCAL_RANK"] = "0"
    helios_pg.init_dist(backend="gloo", rank=rank, world_size=world_size)
    names = ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")
    report(
        phase="init_dist",
        rank=rank,
        env={name: os.environ.get(name) for name in names},
        active=helios_pg.is_dist_active(),
        dist_rank=dist.get_rank(),
        info=info(),
        total=summed(rank),
    )
    helios_pg.shutdown_dist()
    helios_pg.shutdown_dist()
    report(phase="done", rank=rank, initialized=dist.is_initialized())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--directory", type=Path, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--tcp-port", type=int, required=True)
    parser.add_argument("--store-port", type=int, required=True)
    parser.add_argument("--init-dist-addr", required=True)
    parser.add_argument("--init-dist-port", type=int, required=True)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])

    env_phase(rank)
    for name in LAUNCHER_VARIABLES:
        os.environ.pop(name, None)
    timeout_phase(rank, world_size, args.directory, args.timeout)
    tcp_phase(rank, world_size, args.tcp_port)
    store_phase(rank, world_size, args.store_port)
    init_dist_phase(rank, world_size, args.init_dist_addr, args.init_dist_port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
