"""Failure reports never blame the wrong rank: real torchrun jobs of three ranks.

Each case (see ``workers/blame.py``) is one job; all run at once. In every case the
three places that name a culprit agree: the survivors' ``failed first`` lines, the
error files of the ranks that failed after it, and torchrun's root cause.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.pg.torchrun_jobs import names_culprit, root_cause, run_jobs
from tests.pg.workers.blame import HUGE
from tests.support.procs import Finished

WORKER = Path(__file__).parent / "workers" / "blame.py"
TWICE = ("two_failures_a", "two_failures_b", "two_failures_c")
METRICS = ("dead_metrics", "all_dead_metrics")
CASES = (
    "recovered",
    "two_groups",
    "broken_str",
    "own_timeout",
    "huge",
    "thread_wait",
    "caught_up_elsewhere",
    *METRICS,
    *TWICE,
)
HANG_TIMEOUT = 4


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Finished, Path]]:
    def env_for(case: str, logs: Path) -> dict[str, str]:
        return {
            "HELIOS_TEST_BLAME": case.removesuffix("_a").removesuffix("_b").removesuffix("_c"),
            "HELIOS_HANG_TIMEOUT": str(HANG_TIMEOUT),
            "HELIOS_HANG_DIR": str(logs / "reports"),
            # recovered's late rank waits for its roll call, not for a time: its group
            # timeout only bounds a job gone wrong.
            "HELIOS_TEST_PG_TIMEOUT": "60" if case == "recovered" else "14",
        }

    return run_jobs(WORKER, CASES, env_for, tmp_path_factory)


def error_files(logs: Path) -> dict[int, dict[str, Any]]:
    found = {}
    for path in logs.glob("**/attempt_0/*/error.json"):
        found[int(path.parent.name)] = json.loads(path.read_text())["message"]
    return found


def first_lines(output: str) -> set[int]:
    """The ranks that the survivors' ``failed first`` lines name."""
    return {int(rank) for rank in re.findall(r"^rank (\d+) on \S+ failed first: ", output, re.M)}


def assert_blamed(done: Finished, logs: Path, rank: int, what: str) -> None:
    """Every report of the job names ``rank``, failed with ``what``."""
    output = done.stderr + done.stdout
    assert done.returncode != 0, done.describe()
    cause = root_cause(output)
    assert names_culprit(cause, rank, what), cause
    assert first_lines(output) == {rank}, output[-4000:]
    assert f"failed first: {what}" in output
    files = error_files(logs)
    for other, message in files.items():
        if other == rank:
            continue
        assert message["message"].startswith(f"rank {rank} on "), message
        assert f"failed first: {what}" in message["message"].splitlines()[0]
        if rank in files:
            stamp = int(message["extraInfo"]["timestamp"])
            assert stamp > int(files[rank]["extraInfo"]["timestamp"]), (files, other)


def roll_calls(done: Finished) -> list[str]:
    return [line for line in done.stderr.splitlines() if "helios hang roll call" in line]


@pytest.mark.faults
def test_a_hang_that_ended_is_no_failure(jobs: dict[str, tuple[Finished, Path]]) -> None:
    done, logs = jobs["recovered"]
    assert len(roll_calls(done)) == 2, done.describe()  # one per hang, each ended
    assert_blamed(done, logs, 2, "ValueError: bad batch 9")
    message = error_files(logs).get(1, {}).get("message", "")
    assert "hang: " not in message.splitlines()[-1] if message else True


@pytest.mark.faults
def test_in_a_hang_the_rank_in_no_collective_is_to_blame(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, logs = jobs["two_groups"]
    (line,) = roll_calls(done)
    assert "rank 2 in no collective, at blame.py:" in line, line
    assert_blamed(done, logs, 2, "hang: ")


@pytest.mark.faults
def test_a_straggler_that_caught_up_in_another_group_is_acquitted(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, logs = jobs["caught_up_elsewhere"]
    output = done.stderr + done.stdout
    (line,) = roll_calls(done)
    assert "rank 2 in no collective, at blame.py:" in line, line
    cause = root_cause(output)
    assert "rank      : 2 (local_rank: 2)" not in cause, cause  # it was not to blame
    assert "hang: rank 2" not in cause, cause
    assert "hang: " not in error_files(logs).get(2, {}).get("message", ""), output
    assert "failed first: hang: " not in output, output  # withdrawn: no victim names it


@pytest.mark.faults
@pytest.mark.parametrize("case", METRICS)
def test_a_thread_that_died_earlier_does_not_outrank_a_later_hang(
    jobs: dict[str, tuple[Finished, Path]], case: str
) -> None:
    done, logs = jobs[case]
    (line,) = roll_calls(done)
    assert "rank 1 in no collective, at blame.py:" in line, line
    # Where rank 1's own thread died too, that death explains its hang: it is named.
    died = "ConnectionError: metrics endpoint unreachable (in thread metrics)"
    what = died if case == "all_dead_metrics" else "hang: "
    assert_blamed(done, logs, 1, what)
    message = error_files(logs)[1]["message"]
    assert message.startswith(what if case == "all_dead_metrics" else "hang: rank 1 on "), message


@pytest.mark.faults
@pytest.mark.parametrize(
    ("case", "what"),
    [
        ("broken_str", "BrokenStrError: BrokenStrError()"),
        ("own_timeout", "TimeoutError: reading shard 17 timed out"),
        ("thread_wait", "OSError: shard 3 is unreadable (in thread loader)"),
    ],
)
def test_a_rank_own_failure_is_named_whatever_it_raised(
    jobs: dict[str, tuple[Finished, Path]], case: str, what: str
) -> None:
    done, logs = jobs[case]
    assert_blamed(done, logs, 1, what)
    message = error_files(logs)[1]
    assert message["message"] == what
    assert "Traceback (most recent call last)" in message["extraInfo"]["py_callstack"]


@pytest.mark.faults
def test_a_huge_message_is_reported_bounded_and_printed_once(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, logs = jobs["huge"]
    assert_blamed(done, logs, 1, "ValueError: xxx")
    output = done.stderr + done.stdout
    assert len(re.findall("x{10000,}", output)) == 1  # Python's own traceback, only
    assert len(output) < 1.2 * HUGE
    for message in error_files(logs).values():
        assert len(json.dumps(message)) < HUGE / 50


@pytest.mark.faults
@pytest.mark.parametrize("case", TWICE)
def test_of_two_failures_in_one_second_every_report_names_the_first(
    jobs: dict[str, tuple[Finished, Path]], case: str
) -> None:
    done, logs = jobs[case]
    named = first_lines(done.stderr + done.stdout)
    assert len(named) == 1, done.describe()
    (rank,) = named
    what = "TypeError: rank 2's batch" if rank == 2 else "ValueError: rank 1's batch"
    assert_blamed(done, logs, rank, what)
