"""Case ``collectives``: the two-rank cases, measured by tools/bench/workers.py.

Coalescing (``all_reduce_tensors`` on 64 small tensors against 64
``torch.distributed.all_reduce`` calls), overhead (``all_reduce_tensors`` and
``gather_into_tensor`` against the raw calls, for 1 element and 16 MiB), the uneven
gather (against pad-to-largest-then-gather and ``all_gather_object``, 1 MiB per rank)
and validation (``all_reduce_tensors(validate=True)`` against the unvalidated call).
"""

from __future__ import annotations

import json

from tests.support.procs import run_hand_started
from tools.bench.rows import CaseResult, Row, Settings

__all__ = ["run"]

WORLD = 2


def run(settings: Settings) -> CaseResult:
    # ``python -m tools.bench.workers collectives`` on each rank.
    finished = run_hand_started(
        "-m",
        WORLD,
        args=["tools.bench.workers", "collectives"],
        extra_env={"PYTHONWARNINGS": "ignore"},
        limit=settings.timeout,
    )
    for item in finished:
        if item.returncode != 0:
            message = f"benchmark worker 'collectives' failed with status {item.returncode}"
            raise RuntimeError(message)
    line = next(ln for ln in finished[0].stdout.splitlines() if ln.startswith("{"))
    return CaseResult([Row(**row) for row in json.loads(line)["rows"]])
