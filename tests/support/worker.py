"""Helpers for worker scripts: report a result line; read the test's group timeout."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any

__all__ = ["group_timeout", "report"]


def report(**values: Any) -> None:
    """Print one ``RESULT {json}`` line that :func:`tests.support.procs.results` reads."""
    # One write per line, so lines of processes that share a pipe never interleave.
    sys.stdout.write("RESULT " + json.dumps(values, sort_keys=True) + "\n")
    sys.stdout.flush()


def group_timeout() -> timedelta:
    """The short process-group timeout the test asked for (``HELIOS_TEST_PG_TIMEOUT``)."""
    return timedelta(seconds=float(os.environ.get("HELIOS_TEST_PG_TIMEOUT", "10")))
