"""Fault scenarios on fresh groups of real ranks, forked from one process that imported torch.

Importing torch costs seconds of CPU per process, so ``python -m tests.support.groups``
imports it once and then forks the ranks of every scenario from itself: each scenario is
a fresh group of ``--world`` processes over gloo on 127.0.0.1, on a free port of its own,
met through hand-set launcher variables. Forking is safe because that process holds no
thread and no process group when it forks. :func:`run_scenarios` starts it with a
parent-side time limit. Importing this module does not import torch.

The ranks form their group and pass a first barrier within :data:`SETUP_TIMEOUT` (many
ranks start at once on a loaded machine); only then does the group (and its store) get
the scenario's own short timeout, under which the fault runs.

A scenario (a JSON object) has an ``id``, a ``kind`` and what the kind needs:

- ``death``: rank ``dying`` dies (``mode`` ``exit``: ``os._exit(1)``; ``sigkill``: ``SIGKILL``
  to itself) ``when``: ``before``, right after a first barrier, before anyone calls ``op``
  (the survivors call it 0.5 s later); ``waiting``, 0.4 s after that barrier without
  calling ``op``, while the survivors wait inside it; ``inside``, 0.4 s after it called
  ``op`` itself, while one survivor waits there with it and the last one has not arrived
  yet (it comes 1 s after the barrier). Rank 0 hosts the store: its death takes the store
  away too. A survivor whose ``op`` completed calls ``all_reduce_tensors`` once more.
  Optional: ``entry_delays`` (seconds, by rank), added to each survivor's wait before
  ``op`` (``before`` only); ``abandon`` (true), each survivor exits right after its first
  call, without ``helios_pg.shutdown()``, as a program ended by the error would.
- ``skip``: the last rank skips ``op`` but stays alive past the group timeout.
- ``mismatch``: rank 1 disagrees with the others on ``field`` (see :func:`mismatched_call`).

``op`` is one of :data:`OPERATIONS`; ``validate``, when given, is passed to it.

Every rank reports one ``RESULT`` line with its ``role``: ``dying`` right before it dies
(``died_at``: its ``time.time()``), ``survivor`` or ``caller`` after its
``helios_pg.shutdown()`` (``first`` and ``follow_up``: see :func:`attempt`), ``skipper``,
or ``crashed``. The forking process then reports each rank's ``exit``: its pid, its exit
status, and whether it was killed (by pid) at the scenario's limit.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from tests.support.procs import (
    Finished,
    free_port,
    launcher_variables,
    run_processes,
)
from tests.support.worker import report

__all__ = [
    "DEATH_DELAY",
    "LATE_ENTRY",
    "OPERATIONS",
    "SETUP_TIMEOUT",
    "SKIP_SLACK",
    "Outcome",
    "Scenario",
    "attempt",
    "main",
    "run_scenarios",
    "shorten_timeouts",
]

Scenario = dict[str, Any]
Outcome = dict[str, Any]

OPERATIONS = (
    "all_reduce_tensors",
    "gather_into_tensor",
    "gather_uneven",
    "safe_barrier",
    "barrier",
)
BEFORE_GAP = 0.5
"""Seconds the survivors wait after the first barrier when the peer dies ``before``."""
DEATH_DELAY = 0.4
"""Seconds after the first barrier at which the dying rank dies (``waiting``, ``inside``)."""
LATE_ENTRY = 1.0
"""Seconds after the first barrier at which the last survivor enters (``inside``)."""
SKIP_SLACK = 3.0
"""Seconds beyond the group timeout that a rank skipping a collective stays alive."""
SETUP_TIMEOUT = 60.0
"""Seconds: the group's and the store's timeout until every rank passed the first barrier.

Each scenario's limit counts from then on (``--limit``); the forking process allows this
much more for the setup."""
STACKS_SIGNAL = signal.SIGUSR1
"""Sent to a rank still running at its scenario's limit: it prints its Python stacks."""
STACKS_GRACE = 1.0
"""Seconds such a rank has to print them before it is killed."""


@dataclass(frozen=True)
class Settings:
    world: int
    timeout: float
    barrier_timeout: float


def run_scenarios(
    scenarios: Sequence[Scenario],
    *,
    env: Mapping[str, str],
    world: int,
    timeout: float,
    barrier_timeout: float,
    scenario_limit: float,
    parallel: int,
    limit: float,
    raise_on_timeout: bool = True,
) -> Finished:
    """Run ``scenarios``, ``parallel`` at a time, in one process killed at ``limit``.

    Args:
        scenarios: What to run (see the module's description).
        env: The environment of that process (``procs.base_env`` and more).
        world: Ranks per scenario.
        timeout: Seconds: the process-group timeout of every group.
        barrier_timeout: Seconds: the timeout given to ``helios_collectives.barrier``.
        scenario_limit: Seconds after which the ranks of a scenario still running are
            killed, beyond :data:`SETUP_TIMEOUT`.
        parallel: Scenarios at a time.
        limit: Seconds: the parent-side limit of the whole run.
        raise_on_timeout: As for :func:`tests.support.procs.run_processes`.
    """
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "scenarios.json"
        path.write_text(json.dumps(list(scenarios)))
        command = [
            sys.executable,
            "-m",
            "tests.support.groups",
            str(path),
            f"--world={world}",
            f"--timeout={timeout}",
            f"--barrier-timeout={barrier_timeout}",
            f"--limit={scenario_limit}",
            f"--parallel={parallel}",
        ]
        return run_processes([(command, env)], limit=limit, raise_on_timeout=raise_on_timeout)[0]


def first_line(text: str) -> str:
    """The first line of a message (and the next, when the first ends in a colon)."""
    lines = text.strip().splitlines()
    if not lines:
        return ""
    line = lines[0]
    if line.endswith(":") and len(lines) > 1:
        line = f"{line} {lines[1].strip()}"
    return line[:400]


def attempt(call: Callable[[], object]) -> Outcome:
    """Run ``call``; what it raised (or that it returned), with ``time.time()`` stamps."""
    start = time.time()
    try:
        value = call()
    except Exception as exc:
        outcome: Outcome = {
            "raised": True,
            "error": type(exc).__name__,
            "message": first_line(str(exc)),
            "is_value_error": isinstance(exc, ValueError),
            "is_runtime_error": isinstance(exc, RuntimeError),
            "entered_at": start,
            "raised_at": time.time(),
        }
        for name in ("missing_ranks", "disagreeing_ranks"):
            ranks = getattr(exc, name, None)
            if ranks is not None:
                outcome[name] = list(ranks)
        return outcome
    outcome = {"raised": False, "entered_at": start, "returned_at": time.time()}
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        outcome["value"] = tolist()
    return outcome


def operation(
    name: str, rank: int, validate: bool | None, settings: Settings
) -> Callable[[], object]:
    import torch

    from helios_collectives import (
        all_reduce_tensors,
        barrier,
        gather_into_tensor,
        gather_uneven,
        safe_barrier,
    )

    world = settings.world
    if name == "all_reduce_tensors":
        return lambda: all_reduce_tensors(torch.ones(8), validate=validate)
    if name == "gather_into_tensor":
        return lambda: gather_into_tensor(torch.ones(8), (8 * world,), validate=validate)
    if name == "gather_uneven":
        return lambda: gather_uneven(torch.ones(rank + 1, 2)).tensor
    if name == "safe_barrier":
        return lambda: safe_barrier(validate=validate)
    if name == "barrier":
        return lambda: barrier(settings.barrier_timeout)
    message = f"unknown operation {name!r}"
    raise ValueError(message)


def mismatched_call(field: str, rank: int, world: int, validate: bool) -> Callable[[], object]:
    """The call rank ``rank`` makes when rank 1 disagrees with the others on ``field``."""
    import torch
    import torch.distributed as dist

    from helios_collectives import all_reduce_tensors, gather_into_tensor

    odd = rank == 1
    if field == "dtype":
        dtype = torch.int64 if odd else torch.float32
        return lambda: all_reduce_tensors(torch.ones(4, dtype=dtype), validate=validate)
    if field == "numel":
        numel = 6 if odd else 4
        return lambda: all_reduce_tensors(torch.ones(numel), validate=validate)
    if field == "op":
        op = dist.ReduceOp.MAX if odd else dist.ReduceOp.SUM
        return lambda: all_reduce_tensors(torch.ones(4), op=op, validate=validate)
    if field == "gather numel":
        numel = 4 if odd else 3
        return lambda: gather_into_tensor(torch.ones(numel), (world * numel,), validate=validate)
    if field == "operation":
        if odd:
            return lambda: gather_into_tensor(torch.ones(4), (4 * world,), validate=validate)
        return lambda: all_reduce_tensors(torch.ones(4), validate=validate)
    message = f"unknown field {field!r}"
    raise ValueError(message)


def _die(scenario: Scenario, rank: int, where: str) -> NoReturn:
    report(scenario=scenario["id"], rank=rank, role="dying", where=where, died_at=time.time())
    if scenario["mode"] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(1)


def _dying_rank(scenario: Scenario, rank: int, call: Callable[[], object]) -> NoReturn:
    when = scenario["when"]
    if when == "before":
        _die(scenario, rank, "before the operation")
    if when == "waiting":
        time.sleep(DEATH_DELAY)
        _die(scenario, rank, "while the others wait in the operation")
    threading.Timer(DEATH_DELAY, _die, (scenario, rank, "inside the operation")).start()
    outcome = attempt(call)
    # Only reached if the operation returned before the timer fired.
    report(scenario=scenario["id"], rank=rank, role="dying", where="returned", **outcome)
    time.sleep(2 * DEATH_DELAY)
    os._exit(3)


def shorten_timeouts(timeout: timedelta) -> None:
    """Give the default group and its store ``timeout`` (after the setup's long one)."""
    import torch.distributed as dist

    c10d = dist.distributed_c10d
    # torch.distributed.set_timeout is public in newer torch; its older name warns there.
    setter = getattr(dist, "set_timeout", None) or c10d._set_pg_timeout
    setter(timeout)
    store = c10d._get_default_store()
    getattr(store, "underlying_store", store).set_timeout(timeout)


def rank_main(scenario: Scenario, rank: int, port: int, settings: Settings) -> None:
    import torch
    import torch.distributed as dist

    import helios_pg
    from helios_collectives import all_reduce_tensors

    world = settings.world
    os.environ.update(launcher_variables(rank, world, port))
    helios_pg.init(timeout=timedelta(seconds=SETUP_TIMEOUT))
    kind = scenario["kind"]
    if kind == "mismatch":
        call = mismatched_call(scenario["field"], rank, world, scenario["validate"])
    else:
        call = operation(scenario["op"], rank, scenario.get("validate"), settings)
    dist.barrier()
    shorten_timeouts(timedelta(seconds=settings.timeout))
    role = "survivor"
    if kind == "death":
        dying, when = scenario["dying"], scenario["when"]
        if rank == dying:
            _dying_rank(scenario, rank, call)
        if when == "before":
            delays = scenario.get("entry_delays") or [0.0] * world
            time.sleep(BEFORE_GAP + delays[rank])
        elif when == "inside" and rank == [r for r in range(world) if r != dying][-1]:
            time.sleep(LATE_ENTRY)
    elif kind == "skip" and rank == world - 1:
        # Skip the call, but stay alive: a peer that exits would be a death instead.
        time.sleep(settings.timeout + SKIP_SLACK)
        helios_pg.shutdown()
        report(scenario=scenario["id"], rank=rank, role="skipper")
        return
    elif kind == "mismatch":
        role = "caller"
    first = attempt(call)
    if scenario.get("abandon"):
        report(scenario=scenario["id"], rank=rank, role=role, first=first, follow_up=None)
        return
    follow_up = None
    if kind == "death" and not first["raised"]:
        follow_up = attempt(lambda: all_reduce_tensors(torch.ones(2)))
    start = time.time()
    helios_pg.shutdown()
    report(
        scenario=scenario["id"],
        rank=rank,
        role=role,
        first=first,
        follow_up=follow_up,
        shutdown_s=time.time() - start,
        initialized_after_shutdown=dist.is_initialized(),
    )


def start_rank(scenario: Scenario, rank: int, port: int, settings: Settings) -> int:
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
    # A rank still running at the scenario's limit prints its stacks before it is killed.
    faulthandler.register(STACKS_SIGNAL, all_threads=True)
    try:
        rank_main(scenario, rank, port, settings)
    except BaseException as exc:
        status = 2
        report(scenario=scenario["id"], rank=rank, role="crashed", error=repr(exc)[:500])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def wait_all(pids: Sequence[int], deadline: float) -> dict[int, int | None]:
    """Reap every pid by the deadline; SIGKILL (by pid) and reap those still running.

    Each one still running first gets :data:`STACKS_SIGNAL`, and a moment to print where
    its threads are.
    """
    statuses: dict[int, int | None] = {}
    while len(statuses) < len(pids) and time.monotonic() < deadline:
        for pid in pids:
            if pid in statuses:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                statuses[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    late = [pid for pid in pids if pid not in statuses]
    for pid in late:
        os.kill(pid, STACKS_SIGNAL)
    if late:
        time.sleep(STACKS_GRACE)
    for pid in pids:
        if pid not in statuses:
            statuses[pid] = None  # killed at the limit
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return statuses


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenarios", type=Path)
    parser.add_argument("--world", type=int, default=3)
    parser.add_argument("--timeout", type=float, required=True, help="group timeout, s")
    parser.add_argument("--barrier-timeout", type=float, required=True)
    parser.add_argument("--limit", type=float, required=True, help="per scenario, s")
    parser.add_argument("--parallel", type=int, default=4, help="scenarios at once")
    args = parser.parse_args(argv)
    settings = Settings(args.world, args.timeout, args.barrier_timeout)
    # numpy, when installed, starts an OpenBLAS thread pool as torch imports it; this
    # process must hold a single thread when it forks.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import torch  # noqa: F401

    import helios_collectives  # noqa: F401
    import helios_pg  # noqa: F401  (imported once here, before any fork)

    warnings.simplefilter("error", FutureWarning)
    scenarios: list[Scenario] = json.loads(args.scenarios.read_text())
    for batch_start in range(0, len(scenarios), args.parallel):
        pids: dict[int, tuple[str, int]] = {}
        for scenario in scenarios[batch_start : batch_start + args.parallel]:
            port = free_port()
            for rank in range(settings.world):
                pids[start_rank(scenario, rank, port, settings)] = (scenario["id"], rank)
        statuses = wait_all(list(pids), time.monotonic() + SETUP_TIMEOUT + args.limit)
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
