"""One rank of three: a full group, then a rendezvous that a peer never joins.

Started by the test with the hand-started launcher variables of a world of three.

Phase ``group``: ``helios_pg.init`` (the group formed within the setup timeout of
tests/support/groups.py, then run under the group timeout), every collective of
helios_collectives once, then ``helios_pg.shutdown``. Phase ``never-joins``: ranks 0
and 1 call ``init`` for a world of three on a fresh port, and rank 2 of that world never
comes; this process's rank 2 meanwhile plays rank 1 of a world of two whose rank 0 (the
store host) never comes.

Before and after each phase the worker snapshots what a library could leave behind:
the environment, Python threads, native threads (``/proc/self/task``) and child
processes. A native thread may take a moment to end after ``shutdown`` returns (gloo's
TCP loop thread once did, under load), so the snapshot after a phase waits up to 3 s
for the native threads to be back to what they were, and reports how long that took.
Two controls show that the probes see what they look for: a gloo group created with
torch directly and not yet destroyed shows native threads, and a child process shows
up while it runs. The ``RESULT`` line has all of it; the process then
exits normally, so an undestroyed-group warning would reach stderr (torch prints it
for nccl groups only).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

# Snapshots before anything is imported: what the launcher handed us.
ENV_AT_START = dict(os.environ)
THREADS_AT_START = [t.name for t in threading.enumerate()]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch._C._distributed_c10d import HashStore  # noqa: E402

import helios_pg  # noqa: E402
from helios_collectives import (  # noqa: E402
    BarrierTimeoutError,
    _barrier_state,
    all_reduce_tensors,
    barrier,
    gather_into_tensor,
    gather_uneven,
    safe_barrier,
)
from tests.support.groups import SETUP_TIMEOUT, shorten_timeouts  # noqa: E402
from tests.support.store_count import count_requests, wait_for_waiting_connections  # noqa: E402
from tests.support.worker import report  # noqa: E402

SETTLE_LIMIT = 3.0
"""Seconds a thread may take to end after shutdown returned."""


def native_threads() -> list[str]:
    """The names (``comm``) of this process's native threads, sorted."""
    names = []
    for task in Path("/proc/self/task").iterdir():
        try:
            names.append(task.joinpath("comm").read_text().strip())
        except OSError:
            continue  # the thread ended meanwhile
    return sorted(names)


def children() -> list[int]:
    """Pids of this process's child processes (every thread's ``children`` list)."""
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            found.update(int(pid) for pid in task.joinpath("children").read_text().split())
        except OSError:
            continue
    return sorted(found)


def settle(baseline: list[str]) -> float | None:
    """Seconds until the native threads are back to ``baseline``; None if not in time."""
    start = time.monotonic()
    while time.monotonic() - start < SETTLE_LIMIT:
        if native_threads() == baseline:
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def snapshot() -> dict[str, Any]:
    return {
        "env": dict(os.environ),
        "threads": sorted(t.name for t in threading.enumerate()),
        "native": native_threads(),
        "children": children(),
    }


def env_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in {*before, *after} if before.get(k) != after.get(k))


def difference(before: list[str], after: list[str]) -> dict[str, list[str]]:
    """Names gained and lost between two snapshots, with multiplicity."""
    gained = Counter(after) - Counter(before)
    lost = Counter(before) - Counter(after)
    return {"gained": sorted(gained.elements()), "lost": sorted(lost.elements())}


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    return {
        "env_changed": env_changes(before["env"], after["env"]),
        "threads": difference(before["threads"], after["threads"]),
        "native": difference(before["native"], after["native"]),
        "children": after["children"],
    }


LATE = 1.0
"""Seconds by which the last rank comes to the barrier whose store requests are counted."""


def barrier_traffic(rank: int, world: int) -> dict[str, Any]:
    """A barrier that waits ``LATE`` s for the last rank, its store requests counted; then a
    barrier that the last rank reaches after the others' timeout."""
    wait_for_waiting_connections()
    dist.barrier()

    def late_barrier() -> None:
        if rank == world - 1:
            time.sleep(LATE)
        barrier(30.0)

    start = time.monotonic()
    requests = count_requests(late_barrier)
    outcome: dict[str, Any] = {"requests": requests, "waited": time.monotonic() - start}
    dist.barrier()
    outcome["timed_out"] = None
    if rank == world - 1:
        time.sleep(1.5)  # the others give up after 0.5 s; this rank then passes
        barrier(0.5)
    else:
        try:
            barrier(0.5)
        except BarrierTimeoutError as exc:
            outcome["timed_out"] = list(exc.missing_ranks)
    barrier(30.0)
    return outcome


def with_stderr_kept(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``call()``'s result, with what it wrote to file descriptor 2 (C++ included)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as kept:
        os.dup2(kept.fileno(), 2)
        try:
            result = call()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        kept.seek(0)
        result["stderr"] = kept.read().decode(errors="replace")
    return result


def group_phase(rank: int, world: int, timeout: timedelta) -> dict[str, Any]:
    # The three ranks import torch at once, which can take longer than the group's own
    # timeout on a loaded machine: they form the group and pass a first barrier within
    # the setup's, as every scenario's group does, and run under their own after it.
    helios_pg.init(timeout=timedelta(seconds=SETUP_TIMEOUT))
    dist.barrier()
    shorten_timeouts(timeout)
    inside = snapshot()
    reduced = all_reduce_tensors([torch.tensor(float(rank)), torch.ones(2)])
    gathered = gather_into_tensor(torch.full((2,), float(rank)), (2 * world,))
    uneven = gather_uneven(torch.ones(rank + 1, 2))
    validated = all_reduce_tensors(torch.ones(3), validate=True)
    barrier(timeout)
    safe_barrier()
    traffic = with_stderr_kept(lambda: barrier_traffic(rank, world))
    helios_pg.shutdown()
    gc.collect()
    return {
        "traffic": traffic,
        "waiting_connections_after_shutdown": len(_barrier_state.POOLS),
        "reduced": reduced.tolist(),
        "gathered": gathered.tolist(),
        "uneven_rows": int(uneven.tensor.shape[0]),
        "validated": validated.tolist(),
        "threads_inside": inside["threads"],
        "native_inside": inside["native"],
        "initialized_after_shutdown": dist.is_initialized(),
    }


def never_joins_phase(rank: int, world: int, port: int, timeout: timedelta) -> dict[str, Any]:
    """Call init as ``rank`` of ``world`` at ``port``; report how it fails."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_PORT=str(port),
    )
    before = dict(os.environ)
    start = time.monotonic()
    outcome: dict[str, Any] = {"rank": rank, "world": world, "raised": False}
    try:
        helios_pg.init(timeout=timeout)
    except Exception as exc:
        outcome.update(
            raised=True,
            error=type(exc).__name__,
            is_runtime_error=isinstance(exc, RuntimeError),
            message=str(exc),
            cause=type(exc.__cause__).__name__ if exc.__cause__ else None,
        )
    outcome["elapsed"] = time.monotonic() - start
    outcome["initialized_after_failure"] = dist.is_initialized()
    helios_pg.shutdown()  # a no-op after a failed init; must not raise
    outcome["env_changed_by_init"] = env_changes(before, dict(os.environ))
    return outcome


def controls() -> dict[str, Any]:
    """What the probes see when something is left: a live gloo group, a child process."""
    before = native_threads()
    dist.init_process_group("gloo", store=HashStore(), world_size=1, rank=0)
    live_group = difference(before, native_threads())["gained"]
    dist.destroy_process_group()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        seen = child.pid in children()
    finally:
        child.kill()
        child.wait()
    return {"threads_of_a_live_group": live_group, "child_seen": seen}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, required=True, help="group timeout, s")
    parser.add_argument("--never-joins-port", type=int, required=True)
    parser.add_argument("--no-host-port", type=int, required=True)
    args = parser.parse_args()
    timeout = timedelta(seconds=args.timeout)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    launcher_env = dict(os.environ)

    before_group = snapshot()
    group = group_phase(rank, world, timeout)
    group["native_right_after"] = native_threads()
    group["native_settled_in"] = settle(before_group["native"])
    after_group = snapshot()

    if rank == world - 1:
        # Rank 1 of a world of two whose rank 0 never opens the store.
        never = never_joins_phase(1, 2, args.no_host_port, timeout)
        never["case"] = "store host never joins"
    else:
        never = never_joins_phase(rank, world, args.never_joins_port, timeout)
        never["case"] = "last rank never joins"
    os.environ.clear()
    os.environ.update(launcher_env)
    never["native_right_after"] = native_threads()
    never["native_settled_in"] = settle(after_group["native"])
    after_never = snapshot()
    control = controls()

    report(
        pid=os.getpid(),
        rank=rank,
        threads_at_start=THREADS_AT_START,
        env_changed_by_imports=env_changes(ENV_AT_START, before_group["env"]),
        threads_before_init=before_group["threads"],
        native_before_init=before_group["native"],
        group=group,
        after_group=compare(before_group, after_group),
        never_joins=never,
        after_never_joins=compare(after_group, after_never),
        controls=control,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
