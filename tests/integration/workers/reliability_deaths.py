"""A peer dies before or during a collective; the survivors must raise, then shut down.

Importing torch costs seconds of CPU per process, so this worker imports it once and
then forks the ranks of every scenario from itself: each scenario is a fresh group of
``--world`` real processes over gloo on 127.0.0.1, on a port of its own, met through
the hand-started launcher variables (``RANK``, ``WORLD_SIZE``, ``MASTER_*``). Forking is
safe here because this process holds no thread and no process group when it forks.

A scenario (JSON, from the file given as the first argument) names the operation
(``all_reduce_tensors``, ``gather_into_tensor`` or ``barrier``), how the dying rank dies
(``exit``: ``os._exit(1)``; ``sigkill``: ``SIGKILL`` to itself), when, and which rank
dies. When is one of: ``before``, right after a first barrier, before anyone calls the
operation (the survivors call it 0.5 s later); ``waiting``, 0.4 s after that barrier
without calling the operation, while every survivor waits inside it; ``inside``, 0.4 s
after it called the operation itself, while one survivor waits there with it and the
other has not arrived yet (it comes 1 s after the barrier). Rank 0 hosts the
rendezvous store, so its death also takes the store away.

Every rank reports one ``RESULT`` line: the dying rank right before it dies (with the
``time.time()`` of its death), each survivor after its ``helios_pg.shutdown()`` (with
when it raised, what, and how long shutdown took). A survivor whose operation
completed (a barrier the dying rank had already reached) calls ``all_reduce_tensors``
once more, which must raise. This process reports each rank's pid and exit status,
kills (by pid) any rank still running at the scenario's limit, and reports that too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

# numpy, when installed, starts an OpenBLAS thread pool as torch imports it; this
# process must hold a single thread when it forks.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch
import torch.distributed as dist

import helios_pg
from helios_collectives import BarrierTimeoutError, all_reduce_tensors, barrier, gather_into_tensor
from tests.support.procs import free_port
from tests.support.worker import report

Scenario = dict[str, Any]

BEFORE_GAP = 0.5
"""Seconds the survivors wait after the first barrier when the peer dies before."""
DEATH_DELAY = 0.4
"""Seconds after the first barrier at which the dying rank dies ("waiting", "inside")."""
LATE_ENTRY = 1.0
"""Seconds after the first barrier at which the late survivor enters ("inside")."""


def operation(name: str, world: int, barrier_timeout: float) -> Callable[[], object]:
    if name == "all_reduce_tensors":
        return lambda: all_reduce_tensors(torch.ones(8))
    if name == "gather_into_tensor":
        return lambda: gather_into_tensor(torch.ones(8), (8 * world,))
    if name == "barrier":
        return lambda: barrier(barrier_timeout)
    message = f"unknown operation {name!r}"
    raise ValueError(message)


def die(scenario: Scenario, rank: int, where: str) -> None:
    report(scenario=scenario["id"], rank=rank, role="dying", where=where, died_at=time.time())
    if scenario["mode"] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(1)


def attempt(call: Callable[[], object]) -> dict[str, Any]:
    start = time.time()
    try:
        call()
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [""])[0]
        missing = list(exc.missing_ranks) if isinstance(exc, BarrierTimeoutError) else None
        return {
            "raised": True,
            "error": type(exc).__name__,
            "is_runtime_error": isinstance(exc, RuntimeError),
            "message": first_line[:300],
            "missing_ranks": missing,
            "entered_at": start,
            "raised_at": time.time(),
        }
    return {"raised": False, "entered_at": start, "returned_at": time.time()}


def rank_main(scenario: Scenario, rank: int, port: int, args: argparse.Namespace) -> None:
    world = args.world
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    helios_pg.init(timeout=timedelta(seconds=args.timeout))
    call = operation(scenario["op"], world, args.barrier_timeout)
    dist.barrier()
    dying = scenario["dying"]
    survivors = [r for r in range(world) if r != dying]
    late = survivors[-1]
    when = scenario["when"]
    if rank == dying:
        if when == "before":
            die(scenario, rank, "before the operation")
        if when == "waiting":
            time.sleep(DEATH_DELAY)
            die(scenario, rank, "while the others wait in the operation")
        threading.Timer(DEATH_DELAY, die, (scenario, rank, "inside the operation")).start()
        outcome = attempt(call)
        # Only reached if the operation returned before the timer fired.
        report(scenario=scenario["id"], rank=rank, role="dying", where="returned", **outcome)
        time.sleep(DEATH_DELAY * 2)
        os._exit(3)
    if when == "before":
        time.sleep(BEFORE_GAP)
    elif when == "inside" and rank == late:
        time.sleep(LATE_ENTRY)
    first = attempt(call)
    follow_up = None
    if not first["raised"]:
        follow_up = attempt(lambda: all_reduce_tensors(torch.ones(2)))
    start = time.time()
    helios_pg.shutdown()
    report(
        scenario=scenario["id"],
        rank=rank,
        role="survivor",
        late=when == "inside" and rank == late,
        first=first,
        follow_up=follow_up,
        shutdown_s=time.time() - start,
        initialized_after_shutdown=dist.is_initialized(),
    )


def start_rank(scenario: Scenario, rank: int, port: int, args: argparse.Namespace) -> int:
    threads = len(list(Path("/proc/self/task").iterdir()))
    if threads != 1:
        message = f"refusing to fork with {threads} threads: a child could inherit a held lock"
        raise RuntimeError(message)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    status = 0
    try:
        rank_main(scenario, rank, port, args)
    except BaseException as exc:
        status = 2
        report(scenario=scenario["id"], rank=rank, role="crashed", error=repr(exc)[:500])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def wait_all(pids: dict[int, tuple[str, int]], deadline: float) -> dict[int, int | None]:
    """Reap every pid by the deadline; SIGKILL (by pid) and reap those still running."""
    statuses: dict[int, int | None] = {}
    while len(statuses) < len(pids) and time.monotonic() < deadline:
        for pid in pids:
            if pid in statuses:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                statuses[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    for pid in pids:
        if pid not in statuses:
            statuses[pid] = None  # killed at the limit
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return statuses


def main() -> int:
    warnings.simplefilter("error", FutureWarning)
    parser = argparse.ArgumentParser()
    parser.add_argument("scenarios", type=Path)
    parser.add_argument("--world", type=int, default=3)
    parser.add_argument("--timeout", type=float, required=True, help="group timeout, s")
    parser.add_argument("--barrier-timeout", type=float, required=True)
    parser.add_argument("--limit", type=float, required=True, help="per scenario, s")
    parser.add_argument("--parallel", type=int, default=4, help="scenarios at once")
    args = parser.parse_args()
    scenarios: list[Scenario] = json.loads(args.scenarios.read_text())
    for batch_start in range(0, len(scenarios), args.parallel):
        batch = scenarios[batch_start : batch_start + args.parallel]
        pids: dict[int, tuple[str, int]] = {}
        for scenario in batch:
            port = free_port()
            for rank in range(args.world):
                pids[start_rank(scenario, rank, port, args)] = (scenario["id"], rank)
        statuses = wait_all(pids, time.monotonic() + args.limit)
        for pid, (scenario_id, rank) in pids.items():
            status = statuses[pid]
            report(
                scenario=scenario_id,
                rank=rank,
                role="exit",
                pid=pid,
                status=status,
                killed_at_limit=status is None,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
