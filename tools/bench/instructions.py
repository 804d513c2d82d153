"""Case ``call-instructions``: what helios adds per call, counted in instructions.

The per-call rows of ``call-cost`` are times, and on a shared machine two runs of the same
call differ by several percent, as much as what they measure. Counted by valgrind's
callgrind, the instructions a call executes are the same from run to run, whatever else
the machine is doing. Each variant runs in a process of its own under
``valgrind --tool=callgrind --instr-atstart=no``, which counts nothing until the process
turns counting on (``callgrind_control -i on``) right before its timed loop and off right
after it. Two runs of each variant, of :data:`CALLS` and of twice as many calls, give the
instructions of one call as their difference over :data:`CALLS`, so that what is counted
once (turning counting on and off) drops out. Counted in every thread: torch's gloo
threads and the watchdog's (one check a second) included.

The variants, at world size one on gloo (``helios_pg.init(backend="gloo")``), each after
:data:`WARMUP` uncounted calls:

- ``all_reduce_tensors``: helios's all-reduce of one one-element tensor;
- ``dist.all_reduce``: torch's, with no watchdog;
- ``watchdog``: ``dist.all_reduce`` after ``init(hang_timeout=600)``: the watchdog's
  wrapper, and its process-group hooks where the torch has them.

Needs valgrind (Debian's ``valgrind``). The worker side is
``python -m tools.bench.instructions VARIANT CALLS``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tools.bench.rows import CaseResult, Settings, at_most

__all__ = ["CALLS", "VARIANTS", "WARMUP", "count", "run"]

ROOT = Path(__file__).resolve().parents[2]

CALLS = 500
"""The calls of the shorter counted loop; the longer one makes twice as many."""
WARMUP = 100
"""Uncounted calls before each counted loop."""
VARIANTS = ("all_reduce_tensors", "dist.all_reduce", "watchdog")
_TOTALS = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)


def _toggle(state: str) -> None:
    subprocess.run(
        ["callgrind_control", "-i", state, str(os.getpid())], check=True, capture_output=True
    )


def _worker(variant: str, calls: int) -> None:
    import torch
    import torch.distributed as dist

    import helios_pg
    from helios_collectives import all_reduce_tensors

    helios_pg.init(backend="gloo", hang_timeout=600 if variant == "watchdog" else None)
    try:
        t = torch.rand(1)
        call: Callable[[], object] = (
            (lambda: all_reduce_tensors(t))
            if variant == "all_reduce_tensors"
            else (lambda: dist.all_reduce(t))
        )
        for _ in range(WARMUP):
            call()
        _toggle("on")
        for _ in range(calls):
            call()
        _toggle("off")
    finally:
        helios_pg.shutdown()


def count(variant: str, calls: int, *, limit: float) -> int:
    """Instructions counted in ``calls`` calls of ``variant``, in a process of its own."""
    valgrind = shutil.which("valgrind")
    if valgrind is None or shutil.which("callgrind_control") is None:
        message = "call-instructions needs valgrind: install it (apt-get install valgrind)"
        raise RuntimeError(message)
    with tempfile.TemporaryDirectory(prefix="helios-callgrind-") as folder:
        out = Path(folder, "callgrind.out")
        command = [
            valgrind,
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            # As it is (a virtual environment's link): its place finds the environment.
            sys.executable,
            "-m",
            "tools.bench.instructions",
            variant,
            str(calls),
        ]
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=limit, check=False
        )
        found = _TOTALS.search(out.read_text()) if out.exists() else None
        if done.returncode != 0 or found is None:
            message = (
                f"callgrind run of {variant!r} ({calls} calls) failed with exit status "
                f"{done.returncode}:\n{done.stderr[-3000:]}"
            )
            raise RuntimeError(message)
        return int(found.group(1))


def per_call(variant: str, *, limit: float) -> float:
    """Instructions of one call of ``variant``: two counted loops, differenced."""
    short, long = (count(variant, n, limit=limit) for n in (CALLS, 2 * CALLS))
    return (long - short) / CALLS


def run(settings: Settings) -> CaseResult:
    with ThreadPoolExecutor(max_workers=2) as pool:
        counted = dict(
            zip(
                VARIANTS,
                pool.map(lambda v: per_call(v, limit=settings.timeout), VARIANTS),
                strict=True,
            )
        )
    plain = counted["dist.all_reduce"]
    return CaseResult(
        [
            at_most(
                "per-call instructions, all-reduce of 1 element, world size one (gloo)",
                "all_reduce_tensors",
                "dist.all_reduce",
                (counted["all_reduce_tensors"], plain),
                "instructions",
                1.1,
            ),
            at_most(
                "hang watchdog: per-call instructions, all-reduce of 1 element, "
                "world size one (gloo)",
                "dist.all_reduce with init(hang_timeout=600)",
                "dist.all_reduce without the watchdog",
                (counted["watchdog"], plain),
                "instructions",
                1.05,
            ),
        ]
    )


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]))
