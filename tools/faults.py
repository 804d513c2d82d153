"""The failure table of docs/failures.md, rendered from what the fault tests measured.

The tests judge every fault scenario on real processes (tests/integration/
test_reliability.py: peers that never join, die, skip a call or disagree on one;
tests/pg and tests/env: malformed launcher variables and a busy ``MASTER_PORT``), and
each records what it measured through pytest's ``record_property``
(tests/support/fault_records.py), which ``--junitxml`` writes beside each test's
verdict. This tool reads such a file and renders one row per scenario: the fault, what
the tests that judge it assert, what the ranks got, the time to the slowest error, and
whether every one of those tests passed. Run it with::

    uv run pytest -m "not launchers and not slow and not multinode" --junitxml=faults.xml \\
        tests/env/test_malformed.py tests/pg/test_validation.py tests/pg/test_init.py \\
        tests/integration/test_reliability.py
    uv run python -m tools.faults --from faults.xml   # write faults.{md,json}
    uv run python -m tools.faults --no-run            # rewrite faults.md from faults.json

It judges nothing itself and starts no process.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from xml.etree import ElementTree

from tests.support.fault_records import PROPERTY

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tools" / "results"
KINDS = ("malformed", "busy port", "never joins", "death", "skip", "mismatch")
"""The table's order of the families of faults."""

SOURCE_PREFIX = re.compile(r"^\[[^\]]*\.(?:cc|cpp|h):\d+\] ")
PEER_PORT = re.compile(r"(\[127\.0\.0\.1\]):\d+")
MESSAGE_WIDTH = 170


@dataclass(frozen=True)
class Row:
    """One scenario of the table, merged from the records of the tests that judge it."""

    case: str
    expected: str
    observed: str
    seconds: float | None
    passed: bool
    tests: list[str]
    ranks: list[dict[str, Any]]


def _short(message: str) -> str:
    """A message as the table shows it: no C++ source path, no peer port, not too long."""
    text = PEER_PORT.sub(r"\1:<port>", SOURCE_PREFIX.sub("", message))
    if len(text) <= MESSAGE_WIDTH:
        return text
    return text[: MESSAGE_WIDTH - 3].rstrip() + "..."


def _rank_text(entry: dict[str, Any]) -> str:
    if "error" in entry:
        text = f"{entry['error']}: {_short(entry['message'])}"
        return f"next call: {text}" if entry.get("in_next_call") else text
    if "returned" in entry:
        return f"returned {entry['returned']}"
    status = entry.get("exit_status")
    return "killed at the limit" if status is None else f"exit status {status}"


EVERY = {"death": "every survivor", "skip": "every waiting rank"}
"""Who the ranks of a record are, when they all got the same; else every rank."""


def observed(kind: str, ranks: Sequence[dict[str, Any]]) -> str:
    """What the ranks got: one text when they agree, else each rank's."""
    texts = [_rank_text(entry) for entry in ranks]
    if not texts:
        return "nothing recorded"
    if len(set(texts)) == 1:
        return texts[0] if len(texts) == 1 else f"{EVERY.get(kind, 'every rank')}: {texts[0]}"
    return "; ".join(
        f"rank {entry['rank']}: {text}" for entry, text in zip(ranks, texts, strict=True)
    )


def merge(records: Sequence[dict[str, Any]]) -> list[Row]:
    """One row per scenario, in the order of :data:`KINDS`, then of the first record.

    Raises:
        ValueError: A record's kind is not one of :data:`KINDS`.
    """
    grouped: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record["kind"] not in KINDS:
            message = (
                f"a record of {record['test']} has kind {record['kind']!r}, not one of {KINDS}"
            )
            raise ValueError(message)
        grouped.setdefault(record["scenario"], []).append(record)
    ordered = sorted(grouped.values(), key=lambda group: KINDS.index(group[0]["kind"]))
    rows = []
    for group in ordered:
        first = group[0]
        claims = list(dict.fromkeys(record["claim"] for record in group))
        seconds = [entry["seconds"] for entry in first["ranks"] if "seconds" in entry]
        rows.append(
            Row(
                case=first["case"],
                expected="; ".join(claims),
                observed=observed(first["kind"], first["ranks"]),
                seconds=max(seconds) if seconds else None,
                passed=all(record["passed"] for record in group),
                tests=[record["test"] for record in group],
                ranks=first["ranks"],
            )
        )
    return rows


def _cell(text: str) -> str:
    """Text for a Markdown table cell: no line breaks, no column bars, no HTML tags."""
    return text.replace("<", "&lt;").replace("|", "\\|").replace("\n", " ")


NOTES = (
    "Expected: what the tests that judge the scenario assert (their bounds are the "
    "timeout plus a margin for a loaded machine); pass: every one of them passed.",
    "Time to error: from the call to the slowest rank's error, except for a death, "
    "where it runs from the dying rank's `time.time()` just before it died.",
    "A death is detected at once by the ranks that talk to the dead peer: gloo sees the "
    "connection close. `barrier` meets in the store, which cannot tell a dead rank from a "
    "late one, so it raises when its own timeout expires, naming the dead rank; when rank "
    "0 dies, the store goes with it and the barrier fails at once.",
    "Without validation, ranks that disagree abort (SIGABRT, exit status -6), fail on a "
    "reset connection, time out, or return wrong values silently.",
)


def to_markdown(rows: Sequence[Row], header: str, failed: Sequence[str]) -> str:
    lines = [
        header,
        "",
        "| case | expected behaviour | observed | time to error (s) | pass |",
        "|---|---|---|---:|---|",
    ]
    for row in rows:
        seconds = "-" if row.seconds is None else f"{row.seconds:.2f}"
        lines.append(
            f"| {_cell(row.case)} | {_cell(row.expected)} | {_cell(row.observed)} "
            f"| {seconds} | {'pass' if row.passed else 'FAIL'} |"
        )
    passed = sum(row.passed for row in rows)
    lines += ["", f"{passed} of {len(rows)} scenarios passed."]
    if failed:
        lines.append(f"Tests that failed: {', '.join(f'`{test}`' for test in failed)}.")
    lines.append("")
    lines += [f"- {note}" for note in NOTES]
    return "\n".join(lines) + "\n"


def _node_id(case: ElementTree.Element) -> str:
    """pytest's node id of a JUnit test case: its file, then its classes and name."""
    classname, name, file = (case.get(key, "") for key in ("classname", "name", "file"))
    if not file:
        return f"{classname}::{name}"
    depth = len(PurePosixPath(file).with_suffix("").parts)
    return "::".join([file, *classname.split(".")[depth:], name])


def read_junit(path: Path) -> dict[str, Any]:
    """The fault records of a ``--junitxml`` file, with each test's verdict.

    Raises:
        ValueError: The file holds no fault record.
    """
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    records: list[dict[str, Any]] = []
    failed: list[str] = []
    for case in root.iter("testcase"):
        test = _node_id(case)
        passed = case.find("failure") is None and case.find("error") is None
        if not passed:
            failed.append(test)
        for prop in case.iter("property"):
            if prop.get("name") == PROPERTY:
                records.append({**json.loads(prop.get("value", "")), "test": test})
    verdicts = {test: test not in failed for test in (r["test"] for r in records)}
    for record in records:
        record["passed"] = verdicts[record["test"]]
    if not records:
        message = (
            f"{path} holds no fault record: run the fault tests with --junitxml={path} "
            "(pyproject.toml sets junit_family = xunit1, which keeps test properties)"
        )
        raise ValueError(message)
    stamp = suites[0].get("timestamp", "")
    run = {
        **records[0]["run"],
        "date": stamp[:10],
        "seconds": round(sum(float(s.get("time", 0)) for s in suites)),
    }
    return {"run": run, "tests_failed": sorted(set(failed)), "records": records}


def header_line(run: dict[str, Any]) -> str:
    """The table's first line: what the session that measured it ran on."""
    return (
        f"Python {run['python']}, torch {run['torch']}, {run['machine']}, gloo over "
        f"127.0.0.1, {run['date']}; the tests took {run['seconds']} s."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.faults",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from", dest="results", type=Path, help="render this --junitxml file of pytest's"
    )
    source.add_argument(
        "--no-run", action="store_true", help="read nothing: rewrite faults.md from faults.json"
    )
    args = parser.parse_args(argv)
    if args.no_run:
        stored = json.loads((args.out / "faults.json").read_text(encoding="utf-8"))
        rows = [Row(**row) for row in stored["rows"]]
        markdown = to_markdown(rows, stored["header"], stored["tests_failed"])
        (args.out / "faults.md").write_text(markdown, encoding="utf-8")
        print(markdown, end="")
        return 0
    recorded = read_junit(args.results)
    rows = merge(recorded["records"])
    header = header_line(recorded["run"])
    markdown = to_markdown(rows, header, recorded["tests_failed"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "faults.md").write_text(markdown, encoding="utf-8")
    payload = {
        "header": header,
        "tests_failed": recorded["tests_failed"],
        "rows": [asdict(row) for row in rows],
    }
    text = json.dumps(payload, indent=1, sort_keys=True) + "\n"
    (args.out / "faults.json").write_text(text, encoding="utf-8")
    print(markdown, end="")
    return 0 if not recorded["tests_failed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
