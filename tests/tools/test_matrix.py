"""The runner of CI's matrix (tools/matrix.py): whole logs, named failures, killed sessions."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

import pytest

from tools.matrix import Job, JobError, run, run_jobs

# Prints NAME 0, NAME 1, NAME 2; with a file to wait for, waits until it exists first (at
# most 30 s, then fails); with a file to make, makes it after its first line.
PRINTER = """
import pathlib, sys, time
name, wait_for, make = sys.argv[1:]
print(name, 0, flush=True)
if make:
    pathlib.Path(make).touch()
deadline = time.monotonic() + 30
while wait_for and not pathlib.Path(wait_for).exists():
    if time.monotonic() > deadline:
        sys.exit(f"{wait_for} never appeared")
    time.sleep(0.05)
for i in (1, 2):
    print(name, i, flush=True)
sys.exit(name == "bad")
"""


def printer(name: str, *, wait_for: Path | str = "", make: Path | str = "") -> Job:
    def steps(out: TextIO) -> None:
        run([sys.executable, "-c", PRINTER, name, str(wait_for), str(make)], out=out)

    return Job(name, steps)


def printed(out: str, *names: str) -> list[str]:
    return [line for line in out.splitlines() if line.split(" ")[0] in names]


def test_jobs_run_side_by_side_and_each_log_is_printed_whole(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Each waits for the file the other makes: one at a time, the first would fail.
    jobs = [
        printer("first", wait_for=tmp_path / "second", make=tmp_path / "first"),
        printer("second", wait_for=tmp_path / "first", make=tmp_path / "second"),
    ]
    assert run_jobs(jobs, parallel=2) == []
    lines = printed(capfd.readouterr().out, "first", "second")
    first = ["first 0", "first 1", "first 2"]
    second = ["second 0", "second 1", "second 2"]
    assert lines in (first + second, second + first)


def test_a_failed_job_is_named_and_the_others_still_run(capfd: pytest.CaptureFixture[str]) -> None:
    jobs = [printer("bad"), printer("good"), printer("late")]
    assert run_jobs(jobs, parallel=2) == ["bad"]
    out = capfd.readouterr().out
    assert "FAILED bad" in out
    assert "exit status 1" in out
    assert "ok good" in out
    assert "ok late" in out


def test_one_at_a_time_the_jobs_run_in_their_order(capfd: pytest.CaptureFixture[str]) -> None:
    assert run_jobs([printer("second"), printer("first")]) == []
    lines = printed(capfd.readouterr().out, "first", "second")
    assert lines == ["second 0", "second 1", "second 2", "first 0", "first 1", "first 2"]


def is_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_a_command_past_its_limit_goes_with_every_process_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    with (tmp_path / "log").open("w") as out, pytest.raises(JobError, match="no result within 1 s"):
        run(["sh", "-c", script], out=out, limit=1.0)
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while not is_gone(child):
        assert time.monotonic() < deadline, f"the command's child {child} outlived its limit"
        time.sleep(0.05)


def test_capture_returns_what_the_command_printed(tmp_path: Path) -> None:
    with (tmp_path / "log").open("w") as out:
        assert run([sys.executable, "-c", "print('hello')"], out=out, capture=True) == "hello\n"
    assert (tmp_path / "log").read_text().startswith("+ ")


# A matrix of one job whose command leaves a child behind: the child's pid goes to a file.
RUNNER = """
import sys
from tools.matrix import Job, run, run_jobs

pid_file, parallel = sys.argv[1], int(sys.argv[2])
script = f"sleep 60 & echo $! > {pid_file}; wait"
jobs = [Job(name, lambda out: run(["sh", "-c", script], out=out)) for name in ("a", "b")]
sys.exit(1 if run_jobs(jobs[:parallel], parallel=parallel) else 0)
"""


@pytest.mark.parametrize("parallel", [1, 2])
def test_sigterm_ends_the_run_with_every_process_it_started(tmp_path: Path, parallel: int) -> None:
    pid_file = tmp_path / "child.pid"
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(pid_file), str(parallel)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline, "the job never started its command"
            time.sleep(0.05)
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=30) == 1
    finally:
        runner.kill()
        runner.wait()
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while not is_gone(child):
        assert time.monotonic() < deadline, f"the command's child {child} outlived the run"
        time.sleep(0.05)
