"""The fault records of a pytest session, and the table python -m tools.faults renders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools.faults import DEFAULT_OUT, Row, merge, observed, read_junit, to_markdown


def record(kind: str, scenario: str, claim: str, passed: bool, **extra: Any) -> dict[str, Any]:
    ranks = extra.pop("ranks", [{"error": "ValueError", "message": "bad", "seconds": 0.5}])
    return {
        "kind": kind,
        "scenario": scenario,
        "case": f"case {scenario}",
        "claim": claim,
        "ranks": ranks,
        "since": "the call",
        "test": f"test_{scenario}_{claim}",
        "passed": passed,
    }


def test_the_tests_that_judge_one_scenario_make_one_row_that_passes_only_if_all_pass() -> None:
    rows = merge(
        [
            record("death", "a", "raises", True),
            record("death", "a", "exits", False),
            record("death", "b", "raises", True),
        ]
    )
    assert [(r.case, r.expected, r.passed) for r in rows] == [
        ("case a", "raises; exits", False),
        ("case b", "raises", True),
    ]


def test_rows_follow_the_order_of_the_kinds_then_of_the_records() -> None:
    rows = merge(
        [
            record("mismatch", "m", "x", True),
            record("death", "d2", "x", True),
            record("malformed", "v", "x", True),
            record("death", "d1", "x", True),
        ]
    )
    assert [r.case for r in rows] == ["case v", "case d2", "case d1", "case m"]


def test_a_record_of_an_unknown_kind_is_refused_naming_its_test() -> None:
    with pytest.raises(ValueError, match=r"test_s_x has kind 'fire'"):
        merge([record("fire", "s", "x", True)])


def test_the_time_to_error_is_the_slowest_rank_s() -> None:
    ranks = [
        {"rank": 0, "error": "RuntimeError", "message": "closed", "seconds": 0.02},
        {"rank": 1, "error": "RuntimeError", "message": "closed", "seconds": 0.61},
    ]
    (row,) = merge([record("death", "d", "x", True, ranks=ranks)])
    assert row.seconds == 0.61
    assert row.observed == "every survivor: RuntimeError: closed"


def test_ranks_that_got_different_things_are_shown_one_by_one() -> None:
    ranks: list[dict[str, Any]] = [
        {"rank": 0, "exit_status": -6},
        {"rank": 1, "error": "RuntimeError", "message": "reset [127.0.0.1]:4242", "seconds": 1},
        {"rank": 2, "returned": [2.0]},
    ]
    assert observed("mismatch", ranks) == (
        "rank 0: exit status -6; rank 1: RuntimeError: reset [127.0.0.1]:<port>; "
        "rank 2: returned [2.0]"
    )


def test_the_table_marks_a_failed_scenario_and_names_the_failed_tests() -> None:
    rows = merge([record("skip", "s", "raises | times out", False)])
    text = to_markdown(rows, "header", ["tests/x.py::test_s"])
    assert "| case s | raises \\| times out | ValueError: bad | 0.50 | FAIL |" in text
    assert "0 of 1 scenarios passed." in text
    assert "Tests that failed: `tests/x.py::test_s`." in text


def test_the_committed_table_is_the_one_rendered_from_the_committed_json() -> None:
    # python -m tools.faults --no-run rewrites faults.md from faults.json.
    stored = json.loads((DEFAULT_OUT / "faults.json").read_text(encoding="utf-8"))
    rows = [Row(**row) for row in stored["rows"]]
    text = to_markdown(rows, stored["header"], stored["tests_failed"])
    assert (DEFAULT_OUT / "faults.md").read_text(encoding="utf-8") == text


RECORDING_TESTS = """
from tests.support.fault_records import record_fault


def _record(record_property, claim):
    record_fault(
        record_property,
        kind="skip",
        scenario="s",
        case="a rank skips",
        claim=claim,
        ranks=[{"error": "RuntimeError", "message": "timed out", "seconds": 5.0}],
    )


def test_holds(record_property):
    _record(record_property, "raises")


def test_breaks(record_property):
    _record(record_property, "times out")
    assert False


def test_records_nothing():
    pass
"""


def test_a_session_s_junit_xml_carries_each_record_with_its_test_and_verdict(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_recording=RECORDING_TESTS)
    pytester.makeini("[pytest]\njunit_family = xunit1\nfilterwarnings = error\n")
    path = tmp_path / "results.xml"
    result = pytester.runpytest_inprocess(f"--junitxml={path}")
    result.assert_outcomes(passed=2, failed=1)

    data = read_junit(path)

    assert data["tests_failed"] == ["test_recording.py::test_breaks"]
    assert [(r["test"], r["claim"], r["passed"]) for r in data["records"]] == [
        ("test_recording.py::test_holds", "raises", True),
        ("test_recording.py::test_breaks", "times out", False),
    ]
    assert set(data["run"]) == {"python", "torch", "machine", "date", "seconds"}


def test_a_junit_xml_without_records_is_an_error_that_says_how_to_get_them(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    path = tmp_path / "results.xml"
    pytester.runpytest_inprocess(f"--junitxml={path}").assert_outcomes(passed=1)

    with pytest.raises(ValueError, match="holds no fault record: run the fault tests with"):
        read_junit(path)
