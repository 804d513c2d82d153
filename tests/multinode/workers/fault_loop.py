"""Worker: all-reduce in a loop across the nodes until the test breaks a node.

Hand-started (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT`` set by the test). Prints ``READY`` once the first
all-reduce has summed right, then loops. When a collective fails, it notes how long
after the fault that was (``HELIOS_TEST_FAULT_FILE`` holds the fault's wall time, written
by the test), asks ``helios_collectives.barrier`` who is missing, prints one
``RESULT {json}`` line in one write, and exits with status 1. Imports only torch and
helios: the nodes' environment has no ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import helios_pg
from helios_collectives import BarrierError, BarrierTimeoutError, barrier

GROUP_TIMEOUT = timedelta(seconds=float(os.environ.get("HELIOS_TEST_PG_TIMEOUT", "10")))
# Longer than the group timeout: every survivor's collective has failed, and it has
# counted in, before the first one's barrier gives up.
BARRIER_TIMEOUT = GROUP_TIMEOUT.total_seconds() + 5.0
LOOP_LIMIT = 120.0


def fault_time() -> float | None:
    path = Path(os.environ["HELIOS_TEST_FAULT_FILE"])
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        return None


def main() -> int:
    helios_pg.init(backend="gloo", timeout=GROUP_TIMEOUT, report_failures=False)
    rank = dist.get_rank()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    world = dist.get_world_size()
    assert total.item() == world * (world + 1) / 2
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    deadline = time.monotonic() + LOOP_LIMIT
    try:
        while time.monotonic() < deadline:
            dist.all_reduce(torch.ones(1024))
    except Exception as error:
        failed = time.time()
        result: dict[str, object] = {"rank": rank, "error": type(error).__name__}
        fault = fault_time()
        result["after_fault"] = None if fault is None else failed - fault
        try:
            barrier(timeout=BARRIER_TIMEOUT)
            result["barrier"] = "passed"
        except BarrierTimeoutError as missing:
            result["barrier"] = "BarrierTimeoutError"
            result["missing"] = list(missing.missing_ranks)
        except BarrierError as lost:
            result["barrier"] = type(lost).__name__
        result["done_after_fault"] = None if fault is None else time.time() - fault
        sys.stdout.write("RESULT " + json.dumps(result, sort_keys=True) + "\n")
        sys.stdout.flush()
        os._exit(1)  # the group is broken: no shutdown that could wait on a lost peer
    return 0


if __name__ == "__main__":
    sys.exit(main())
