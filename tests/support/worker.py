"""Helpers for worker scripts: report a result line; read the test's group timeout."""

from __future__ import annotations

import itertools
import json
import os
import sys
from datetime import timedelta
from typing import Any

__all__ = ["group_timeout", "report"]


PART_SIZE = 800
"""Characters of JSON per ``RESULT-PART`` line."""
_PARTS = itertools.count()


def report(**values: Any) -> None:
    """Print one ``RESULT {json}`` line that :func:`tests.support.procs.results` reads.

    One write per line, so lines of processes that share a pipe never interleave. A
    launcher that forwards its ranks' output (mpirun) reads it in chunks of a few KiB
    and may cut a longer line in two around another rank's output, so a result longer
    than :data:`PART_SIZE` goes out as numbered ``RESULT-PART ID I N chunk`` lines,
    each written at once, which ``results`` puts back together.
    """
    text = json.dumps(values, sort_keys=True)
    if len(text) <= PART_SIZE:
        _write(f"RESULT {text}\n")
        return
    ident = f"{os.getpid()}.{next(_PARTS)}"
    chunks = [text[i : i + PART_SIZE] for i in range(0, len(text), PART_SIZE)]
    for index, chunk in enumerate(chunks):
        _write(f"RESULT-PART {ident} {index} {len(chunks)} {chunk}\n")


def _write(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()


def group_timeout() -> timedelta:
    """The short process-group timeout the test asked for (``HELIOS_TEST_PG_TIMEOUT``)."""
    return timedelta(seconds=float(os.environ.get("HELIOS_TEST_PG_TIMEOUT", "10")))
