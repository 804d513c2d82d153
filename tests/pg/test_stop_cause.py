"""Why the job stops, from SLURM's record of it, and what requeue() does about it.

The records are ``scontrol show job`` as SLURM 22.05 printed them at each kind of stop
on a private cluster (a warning before a one-minute limit, the limit itself, a
preemption by a higher partition that requeues and one that cancels, ``scancel``,
``scancel --signal``); the multi-node
tests stop real jobs most of these ways. Here: the cause each record gives, and
``requeue()`` under an ``scontrol`` that prints such a record.
"""

from __future__ import annotations

import stat
from datetime import datetime
from pathlib import Path

import pytest

from helios_pg import StopCause, preemption
from helios_pg._preempt._cause import cause_from_job, read_cause
from helios_pg._preempt._requeue import EXIT_STOPPED

WARNING = (
    "JobId=2 JobName=wrap JobState=RUNNING Reason=None Dependency=(null) Requeue=1 "
    "Restarts=0 BatchFlag=1 RunTime=00:00:27 TimeLimit=00:01:00 "
    "StartTime=2026-12-05T19:34:01 EndTime=2026-12-05T19:35:01"
)
TIME_LIMIT = (
    "JobId=4 JobName=wrap JobState=COMPLETING Reason=TimeLimit Requeue=1 Restarts=0 "
    "RunTime=00:01:00 TimeLimit=00:01:00 EndTime=2026-12-05T19:33:53"
)
PREEMPTED = (
    "JobId=2 JobName=wrap JobState=COMPLETING Reason=None Requeue=1 Restarts=1 "
    "RunTime=00:00:00 TimeLimit=UNLIMITED EndTime=Unknown"
)
CANCELLED = (
    "JobId=5 JobName=wrap JobState=COMPLETING Reason=None Requeue=1 Restarts=0 "
    "RunTime=00:00:08 TimeLimit=UNLIMITED EndTime=2026-12-05T19:32:47"
)
PREEMPTED_CANCELLED = (  # PreemptMode=CANCEL: ending like a cancelled job, PreemptTime set
    "JobId=2 JobName=wrap JobState=COMPLETING Reason=None Requeue=1 Restarts=0 "
    "RunTime=00:00:07 TimeLimit=UNLIMITED PreemptEligibleTime=2026-12-05T19:50:43 "
    "PreemptTime=2026-12-05T19:50:50 EndTime=2026-12-05T19:50:50"
)
SIGNALLED = (
    "JobId=3 JobName=wrap JobState=RUNNING Reason=None Requeue=1 Restarts=0 "
    "RunTime=00:00:07 TimeLimit=UNLIMITED EndTime=Unknown"
)
SIGNAL_AT = datetime.fromisoformat("2026-12-05T19:34:29").timestamp()


def fields(record: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in record.split())


@pytest.mark.parametrize(
    ("record", "restarts", "kind", "said"),
    [
        (
            WARNING,
            0,
            "signal",
            "SIGUSR1 while SLURM job 7 runs (JobState=RUNNING Reason=None, "
            "0:32 before its time limit (00:01:00))",
        ),
        (
            TIME_LIMIT,
            0,
            "time_limit",
            "SLURM's time limit (00:01:00) ends job 7 (JobState=COMPLETING Reason=TimeLimit)",
        ),
        (
            PREEMPTED,
            0,
            "requeued",
            "SLURM has requeued job 7 itself (Restarts=1, this "
            "attempt started at 0: a preemption, or scontrol requeue)",
        ),
        (
            PREEMPTED,
            1,
            "cancelled",
            "job 7 is being cancelled (JobState=COMPLETING Reason=None: scancel, not a preemption)",
        ),
        (CANCELLED, 0, "cancelled", "job 7 is being cancelled"),
        (SIGNALLED, 0, "signal", "SIGUSR1 while SLURM job 7 runs (JobState=RUNNING Reason=None)"),
        (
            PREEMPTED_CANCELLED,
            0,
            "preempted",
            "SLURM preempted job 7 "
            "(PreemptTime=2026-12-05T19:50:50 JobState=COMPLETING Reason=None)",
        ),
        (CANCELLED + " PreemptTime=None", 0, "cancelled", "job 7 is being cancelled"),
        (
            "JobState=COMPLETING Reason=NodeDown Restarts=0",
            0,
            "signal",
            "SIGUSR1 as SLURM ends job 7 (JobState=COMPLETING Reason=NodeDown)",
        ),
    ],
)
def test_each_record_gives_its_cause(record: str, restarts: int, kind: str, said: str) -> None:
    cause = cause_from_job(
        fields(record), job="7", restarts=restarts, signal="SIGUSR1", now=SIGNAL_AT
    )
    assert cause.kind == kind
    assert cause.detail.startswith(said)
    assert (cause.time_left is not None) == (record == WARNING)
    if record == WARNING:
        assert cause.time_left == pytest.approx(32.0)


def fake_scontrol(folder: Path, record: str) -> Path:
    """An ``scontrol`` that prints ``record`` for ``show job`` and logs each call."""
    folder.mkdir()
    script = folder / "scontrol"
    script.write_text(
        f'#!/bin/sh\necho "$@" >> "{folder}/calls"\nif [ "$1" = show ]; then echo "{record}"; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.fixture
def slurm_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    monkeypatch.setenv("HELIOS_REQUEUE_FILE", str(tmp_path / "requeue-marker"))


@pytest.mark.usefixtures("slurm_job")
@pytest.mark.parametrize(
    ("record", "how", "status", "calls"),
    [
        (PREEMPTED, "slurm", 0, ["show job --oneliner 7"]),
        (CANCELLED, "cancelled", EXIT_STOPPED, ["show job --oneliner 7"]),
        (TIME_LIMIT, "scontrol", 0, ["show job --oneliner 7", "requeue 7"]),
        (PREEMPTED_CANCELLED, "scontrol", 0, ["show job --oneliner 7", "requeue 7"]),
        (SIGNALLED, "scontrol", 0, ["show job --oneliner 7", "requeue 7"]),
    ],
)
def test_requeue_follows_what_slurm_says(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    record: str,
    how: str,
    status: int,
    calls: list[str],
) -> None:
    bin_dir = fake_scontrol(tmp_path / "bin", record)
    monkeypatch.setenv("PATH", str(bin_dir))
    with preemption() as stop:
        outcome = stop.requeue()
        assert stop.cause() is stop.cause()  # asked once
    assert (outcome.how, outcome.exit_status) == (how, status)
    assert outcome.requeued == (how in ("slurm", "scontrol"))
    assert (bin_dir / "calls").read_text().splitlines() == calls
    said = capsys.readouterr().err
    assert said.startswith(f"helios requeue: {stop.cause().detail}")
    assert not (tmp_path / "requeue-marker").exists()


@pytest.mark.usefixtures("slurm_job")
@pytest.mark.parametrize("ends", ["TERM", "KILL", "KILL before SLURM took it"])
def test_a_requeue_that_signals_scontrol_itself_is_read_from_slurms_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ends: str
) -> None:
    """SLURM signals every process of a requeued job, the rank's ``scontrol`` included.

    The fake ``scontrol requeue`` marks the job requeued (``show job`` then prints
    ``Restarts=1``) and sends itself the signal: SIGTERM, which it must outlive to say
    SLURM's answer, or SIGKILL, after which SLURM's record decides. Where SLURM never
    took the request, the marker is the way out.
    """
    folder = tmp_path / "bin"
    folder.mkdir()
    took = "" if ends.endswith("took it") else f': > "{folder}/requeued"; '
    sent = ends.partition(" ")[0]
    script = folder / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = requeue ]; then {took}kill -{sent} $$; exit 0; fi\n'
        f'if [ -e "{folder}/requeued" ]; then echo "{PREEMPTED}"; else echo "{SIGNALLED}"; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(folder))
    with preemption() as stop:
        outcome = stop.requeue()
    said = capsys.readouterr().err
    marker = tmp_path / "requeue-marker"
    if ends == "KILL before SLURM took it":
        assert (outcome.how, outcome.exit_status) == ("marker", 75)
        assert "scontrol requeue 7 failed (exit status -9;" in said
        assert marker.exists()
        return
    assert (outcome.how, outcome.exit_status) == ("scontrol", 0)
    assert not marker.exists()
    if ends == "KILL":
        assert "scontrol requeue 7 ended without success (exit status -9), but SLURM" in said
        assert "Restarts=1, this attempt started at 0" in said
    else:
        assert "ended without success" not in said


def test_a_cause_asked_before_any_stop_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm_job: None
) -> None:
    bin_dir = fake_scontrol(tmp_path / "bin", SIGNALLED)
    monkeypatch.setenv("PATH", str(bin_dir))
    with preemption() as stop:
        first = stop.cause()
        assert "a stop without a signal while SLURM job 7 runs" in first.detail
        assert stop.cause() is not first


@pytest.mark.parametrize(
    ("environ", "path", "said"),
    [
        ({}, "", "SIGTERM, not under SLURM"),
        ({"SLURM_JOB_ID": "9"}, "missing", "SIGTERM to SLURM job 9 (scontrol is not on PATH)"),
        ({"SLURM_JOB_ID": "9"}, "failing", "scontrol show job --oneliner 9: Invalid job id"),
    ],
)
def test_without_slurms_record_the_cause_is_the_signal_and_why(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    environ: dict[str, str],
    path: str,
    said: str,
) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    if path == "failing":
        script = folder / "scontrol"
        script.write_text("#!/bin/sh\necho 'Invalid job id specified' >&2\nexit 1\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(folder))
    cause = read_cause("SIGTERM", environ)
    assert cause == StopCause("signal", cause.detail)
    assert said in cause.detail
