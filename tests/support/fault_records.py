"""What the fault tests measured, written to a file for ``python -m tools.faults``.

A test that judges a fault scenario calls :func:`record_fault` (before its asserts) with
what it measured: each rank's error class, message head and seconds to the error, and
exit status where a process ended. pytest's ``record_property`` carries the record to
the session's controlling process, also from pytest-xdist workers; with
``--fault-results PATH`` the :class:`FaultRecorder` plugin writes every record there
when the session ends, with the test that made it and whether that test passed.
Without the option nothing is written, and recording costs one list append.
Importing this module does not import torch.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from datetime import date
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest

from tests.support.groups import first_line

__all__ = [
    "OPTION",
    "PROPERTY",
    "FaultRecorder",
    "error_outcome",
    "record_fault",
    "run_description",
]

OPTION = "--fault-results"
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
    }
    record_property(PROPERTY, record)


def run_description(seconds: float) -> dict[str, Any]:
    """What a session ran on, without importing torch: for the table's first line."""
    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = "not installed"
    return {
        "python": platform.python_version(),
        "torch": torch,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "date": date.today().isoformat(),
        "seconds": round(seconds),
    }


class FaultRecorder:
    """Collects the fault records of a session and writes them to ``path`` at its end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self.failed: list[str] = []
        self.started = time.monotonic()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.append(report.nodeid)
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, dict):
                self.records.append({**value, "test": report.nodeid, "passed": report.passed})

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        data = {
            "run": run_description(time.monotonic() - self.started),
            "exit_status": int(exitstatus),
            "tests_failed": sorted(set(self.failed)),
            "records": self.records,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
