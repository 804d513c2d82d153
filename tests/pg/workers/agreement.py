"""Worker: init's agreement check, where the ranks run different copies of this file.

Three inits in turn, each at a rendezvous of its own: ``env://`` at ``MASTER_PORT``
(the check before the group forms), ``init_method`` at ``HELIOS_TEST_PORT_2`` (the
check through the store of the group that formed), and ``env://`` at
``HELIOS_TEST_PORT_3`` with ``check_agreement=False``. Prints one ``RESULT`` line: each
init's error (and whether a group was left) or the sum of an all-reduce.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

import helios_pg


def attempt(**options: Any) -> dict[str, Any]:
    timeout = timedelta(seconds=float(os.environ["HELIOS_TEST_PG_TIMEOUT"]))
    started = time.monotonic()
    try:
        helios_pg.init(backend="gloo", timeout=timeout, **options)
    except helios_pg.ProcessGroupInitError as exc:
        seconds = time.monotonic() - started
        return {"error": str(exc), "seconds": seconds, "group": dist.is_initialized()}
    total = torch.ones(1)
    dist.all_reduce(total)
    helios_pg.shutdown()
    return {"total": total.item()}


def main() -> int:
    rank = int(os.environ["RANK"])
    result: dict[str, Any] = {"rank": rank, "env": attempt()}
    method = f"tcp://127.0.0.1:{os.environ['HELIOS_TEST_PORT_2']}"
    result["init_method"] = attempt(init_method=method, rank=rank, world_size=2)
    os.environ["MASTER_PORT"] = os.environ["HELIOS_TEST_PORT_3"]
    result["off"] = attempt(check_agreement=False)
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
