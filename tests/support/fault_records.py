"""What the fault tests measured, carried by pytest's own JUnit XML for ``python -m tools.faults``.

A test that judges a fault scenario calls :func:`record_fault` (before its asserts) with
what it measured: each rank's error class, message head and seconds to the error, and
exit status where a process ended. pytest's ``record_property`` carries the record, as
JSON, to the session's controlling process (also from pytest-xdist workers), and
``--junitxml PATH`` writes it with the test that made it and its verdict; the table of
docs/failures.md is rendered from that file. Importing this module does not import torch.
"""

from __future__ import annotations

import functools
import json
import os
import platform
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from tests.support.groups import first_line

__all__ = ["PROPERTY", "error_outcome", "record_fault", "run_description"]

PROPERTY = "fault"
"""The ``record_property`` name of a fault record."""

RecordProperty = Callable[[str, object], None]


def error_outcome(exc: BaseException, seconds: float) -> dict[str, Any]:
    """One rank's outcome: the error ``exc``, raised ``seconds`` after the fault."""
    return {"error": type(exc).__name__, "message": first_line(str(exc)), "seconds": seconds}


def record_fault(
    record_property: RecordProperty,
    *,
    kind: str,
    scenario: str,
    case: str,
    claim: str,
    ranks: Sequence[dict[str, Any]],
    since: str = "the call",
) -> None:
    """Record what one test measured of one fault scenario.

    Args:
        record_property: The test's ``record_property`` fixture.
        kind: The family of faults, which orders the table: ``malformed``,
            ``busy port``, ``never joins``, ``death``, ``skip`` or ``mismatch``.
        scenario: The scenario's identity; the tests that judge the same scenario
            record it under the same identity, and make one row together.
        case: The fault, as the table's first column says it.
        claim: What this test asserts, as the "expected" column says it.
        ranks: Each affected rank's outcome: ``rank`` (when several), and ``error``,
            ``message`` and ``seconds``, or ``returned`` (a value), or ``exit_status``.
        since: What ``seconds`` count from: ``the call`` or ``the death``.
    """
    record = {
        "kind": kind,
        "scenario": scenario,
        "case": case,
        "claim": claim,
        "ranks": list(ranks),
        "since": since,
        "run": run_description(),
    }
    record_property(PROPERTY, json.dumps(record))


@functools.cache
def run_description() -> dict[str, str]:
    """What a session ran on, without importing torch: for the table's first line."""
    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "not installed"
    return {
        "python": platform.python_version(),
        "torch": torch,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
