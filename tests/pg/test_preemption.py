"""Preemption: handlers that only set a flag, one answer on every rank, requeue once.

In this process: signal names, chaining and restoring the handlers installed before,
and what ``requeue()`` does under each launcher. On three ranks of the ranks plugin:
one rank's signal stops every rank after the same step. Under real torchrun: SIGTERM
to the agent, and a restart that resumes from the checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import pytest
import torch
import torch.distributed as dist

from helios_env import DistributedInfo
from helios_pg import PreemptionError, init, preemption, shutdown
from helios_pg._preempt._grace import GRACE_VARIABLE, Grace, find_grace
from helios_pg._preempt._preemption import _active, close_all
from helios_pg._preempt._requeue import EXIT_REQUEUE, Requeue
from tests.pg.torchrun_jobs import run_jobs
from tests.support.procs import (
    Finished,
    base_env,
    free_port,
    launcher_variables,
    results,
    run_hand_started,
    run_processes,
)

WORKER = Path(__file__).parent / "workers" / "preempted.py"
MISMATCH = Path(__file__).parent / "workers" / "stop_mismatch.py"
NO_SLURM = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "TORCHELASTIC_RUN_ID")


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in NO_SLURM:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HELIOS_REQUEUE_FILE", str(tmp_path / "requeue-marker"))


def test_an_unknown_signal_is_named_and_nothing_is_installed() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(ValueError, match="'SIGNOPE' is not a signal"):
        preemption(("SIGUSR1", "SIGNOPE"))
    assert signal.getsignal(signal.SIGUSR1) == before


def test_the_handler_installed_before_still_runs_and_comes_back() -> None:
    seen: list[int] = []

    def theirs(number: int, frame: FrameType | None) -> None:
        seen.append(number)

    before = signal.signal(signal.SIGUSR1, theirs)
    try:
        stop = preemption(("usr1", int(signal.SIGTERM)))
        assert not stop.should_stop()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]  # run before the flag was read
        assert stop.received == signal.SIGUSR1
        assert stop.should_stop()  # one process: its own flag
        stop.close()
        assert signal.getsignal(signal.SIGUSR1) is theirs
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        stop.close()
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_a_signal_that_cannot_be_caught_is_refused_and_nothing_stays() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(ValueError, match="SIGKILL cannot be caught"):
        preemption(("SIGUSR1", "SIGKILL"))
    assert signal.getsignal(signal.SIGUSR1) == before


def test_watchers_closed_in_any_order_give_back_the_first_handler() -> None:
    seen: list[int] = []

    def theirs(number: int, frame: FrameType | None) -> None:
        seen.append(number)

    before = signal.signal(signal.SIGUSR1, theirs)
    try:
        first, second = preemption(("SIGUSR1",)), preemption(("SIGUSR1",))
        first.close()  # under the second one: it stays, and only passes signals on
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]
        assert (first.received, second.received) == (None, signal.SIGUSR1)
        second.close()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1] * 2
        assert signal.getsignal(signal.SIGUSR1) is theirs
        preemption(("SIGUSR1",))
        preemption(("SIGUSR1",))
        close_all()  # the newest first
        assert signal.getsignal(signal.SIGUSR1) is theirs
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_what_rank_0_did_is_what_every_rank_reports() -> None:
    here = Requeue("marker", EXIT_REQUEUE, "77", Path("m"), "scontrol is not on PATH")
    done = here.with_code(Requeue("scontrol", 0, "77", None, "").code)
    assert (done.how, done.exit_status, done.requeued) == ("scontrol", 0, True)


def test_shutdown_closes_the_watchers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    init()
    preemption()
    assert signal.getsignal(signal.SIGTERM) != before
    shutdown()
    assert signal.getsignal(signal.SIGTERM) == before


SLURM = {"SLURM_JOB_ID": "7"}
TORCHRUN = {"TORCHELASTIC_RUN_ID": "r"}


@pytest.mark.parametrize(
    ("environ", "seconds", "source"),
    [
        (TORCHRUN, 30.0, "torchrun: SIGKILL 30 s after its SIGTERM"),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, 30.0, "Kubernetes: SIGKILL 30 s after"),
        (SLURM, 45.0, "SLURM: SIGKILL 45 s after its SIGTERM (KillWait)"),
        (SLURM | TORCHRUN, 30.0, "torchrun"),  # srun torchrun: the first to kill
        (SLURM | {GRACE_VARIABLE: "120"}, 120.0, "HELIOS_PREEMPTION_GRACE=120"),
        ({}, None, "no launcher here says it"),
    ],
)
def test_the_grace_is_the_variables_or_the_launchers(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    environ: dict[str, str],
    seconds: float | None,
    source: str,
) -> None:
    scontrol = tmp_path / "scontrol"  # as `scontrol show config` prints it
    scontrol.write_text("#!/bin/sh\necho 'InactiveLimit = 0 sec'\necho 'KillWait = 45 sec'\n")
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    grace = find_grace(None, environ)
    assert grace.seconds == seconds
    assert grace.source.startswith(source), grace
    assert find_grace(12.5, environ) == Grace(12.5, "preemption(grace=12.5)")


def test_a_grace_that_is_no_positive_number_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in (0, -3, float("nan")):
        with pytest.raises(ValueError, match=rf"grace={bad!r} is not a grace period"):
            preemption(grace=bad)
    monkeypatch.setenv(GRACE_VARIABLE, "thirty")
    with pytest.raises(ValueError, match="HELIOS_PREEMPTION_GRACE='thirty' is not a grace"):
        preemption()
    assert not [watcher for watcher in _active if not watcher.closed]


def test_the_deadline_counts_from_the_signal() -> None:
    with preemption("USR1", grace=5) as stop:
        assert [stop.deadline, stop.time_left()] == [None, None]
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.received_at is not None
        assert stop.deadline == stop.received_at + 5
        left = stop.time_left()
        assert left is not None
        assert 4 < left <= 5


def test_a_save_that_outlasts_the_grace_is_named_once(capsys: pytest.CaptureFixture[str]) -> None:
    with preemption(grace=0.05) as stop:
        with stop.saving():
            pass
        assert capsys.readouterr().err == ""
        for _ in range(2):
            with stop.saving():
                time.sleep(0.1)
        assert stop.last_save is not None
        assert stop.last_save >= 0.1
    said = capsys.readouterr().err
    assert said.count("helios preemption: the last checkpoint took") == 1, said
    assert "s, but preemption(grace=0.05): a save after a stop signal" in said


def test_it_is_refused_outside_the_main_thread() -> None:
    raised: list[BaseException] = []

    def make() -> None:
        try:
            preemption()
        except RuntimeError as exc:
            raised.append(exc)

    thread = threading.Thread(target=make, name="loader")
    thread.start()
    thread.join()
    assert "main thread" in str(raised[0])
    assert "'loader'" in str(raised[0])


def test_outside_slurm_requeue_writes_a_marker_and_asks_for_its_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with preemption() as stop:
        outcome = stop.requeue()
    assert (outcome.how, outcome.exit_status, outcome.requeued) == ("marker", EXIT_REQUEUE, False)
    assert outcome.marker == tmp_path / "requeue-marker"
    assert outcome.marker.exists()
    assert "not under SLURM" in capsys.readouterr().err


def test_a_marker_that_cannot_be_written_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HELIOS_REQUEUE_FILE", str(tmp_path / "file" / "marker"))
    with preemption() as stop:
        outcome = stop.requeue()
    assert (outcome.how, outcome.exit_status) == ("marker", EXIT_REQUEUE)
    said = capsys.readouterr().err
    assert "but the marker could not be written (" in said
    assert "point HELIOS_REQUEUE_FILE at a writable file" in said


def test_one_process_without_init_removes_the_marker_that_started_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "counted-marker"
    marker.write_text(json.dumps({"attempt": 4}))
    monkeypatch.setenv("HELIOS_REQUEUE_FILE", str(marker))
    with preemption():
        assert not marker.exists()
    assert "this run is attempt 5 of the job, asked for by the marker" in capsys.readouterr().err


def test_past_max_requeues_nothing_is_requeued_and_the_job_ends_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLURM_RESTART_COUNT", "3")  # the fourth run of the job
    with preemption() as stop:
        assert stop.requeue(max_requeues=4).how == "marker"
        outcome = stop.requeue(max_requeues=3)
        for bad in (-1, 2.5, True):
            with pytest.raises(ValueError, match=rf"requeue\(max_requeues={bad!r}\): give how"):
                stop.requeue(max_requeues=bad)  # type: ignore[arg-type]
    assert (outcome.how, outcome.exit_status, outcome.requeued) == ("limit", 1, False)
    said = capsys.readouterr().err.splitlines()[-1]
    assert said == (
        "helios requeue: this is attempt 3 of the job (SLURM's requeues, torchrun's restarts "
        "and runs started from a marker), at max_requeues=3: not requeuing it again; it ends "
        "here with status 1 (raise max_requeues to let it go on)"
    )
    assert Requeue("scontrol", 0, None, None, "").with_code(outcome.code).how == "limit"


def fake_scontrol(folder: Path, status: int, *, says: bool = True) -> Path:
    """An ``scontrol`` that records its arguments and exits with ``status``."""
    folder.mkdir()
    script = folder / "scontrol"
    said = 'echo "Job is not requeueable" >&2' if says else "true"
    script.write_text(
        f'#!/bin/sh\necho "$@" > "{folder}/called"\n[ {status} -eq 0 ] || {said}\nexit {status}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.mark.parametrize(
    ("variables", "job"),
    [
        ({"SLURM_JOB_ID": "77"}, "77"),
        ({"SLURM_JOB_ID": "80", "SLURM_ARRAY_JOB_ID": "77", "SLURM_ARRAY_TASK_ID": "3"}, "77_3"),
    ],
)
def test_under_slurm_rank_0_requeues_the_job_or_the_array_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], job: str
) -> None:
    bin_dir = fake_scontrol(tmp_path / "bin", 0)
    monkeypatch.setenv("PATH", str(bin_dir))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with preemption() as stop:
        outcome = stop.requeue()
    assert (bin_dir / "called").read_text().split() == ["requeue", job]
    assert (outcome.how, outcome.exit_status, outcome.job) == ("scontrol", 0, job)
    assert outcome.requeued


@pytest.mark.parametrize("scontrol", ["missing", "failing", "failing quietly"])
def test_under_slurm_without_a_working_scontrol_the_fallback_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scontrol: str
) -> None:
    if scontrol == "missing":
        bin_dir = tmp_path / "empty"
    else:
        bin_dir = fake_scontrol(tmp_path / "bin", 1, says=scontrol == "failing")
    bin_dir.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    with preemption() as stop:
        outcome = stop.requeue()
    assert (outcome.how, outcome.exit_status) == ("marker", EXIT_REQUEUE)
    why = {
        "missing": "scontrol is not on PATH",
        "failing": "Job is not requeueable",
        "failing quietly": "exit status 1",
    }[scontrol]
    assert why in outcome.detail
    assert outcome.marker is not None
    assert "78" in outcome.marker.read_text()


def test_under_torchrun_alone_the_end_is_a_clean_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run-1")
    with preemption() as stop:
        outcome = stop.requeue()
    assert (outcome.how, outcome.exit_status, outcome.marker) == ("launcher", 0, None)


@pytest.mark.ranks(3, timeout=60)
def test_one_rank_signal_stops_every_rank_after_the_same_step(
    dist_info: DistributedInfo,
) -> None:
    with preemption(("SIGUSR1",)) as stop:
        stopped = None
        for step in range(50):
            if step == 3 and dist_info.rank == 1:
                os.kill(os.getpid(), signal.SIGUSR1)
            dist.all_reduce(torch.ones(1))
            if stop.should_stop():
                stopped = step
                break
        steps = torch.tensor([stopped if stopped is not None else -1])
        every = [torch.zeros(1, dtype=steps.dtype) for _ in range(3)]
        dist.all_gather(every, steps)
        assert [int(t.item()) for t in every] == [3, 3, 3]
        assert (stop.received is not None) is (dist_info.rank == 1)
        outcome = stop.requeue()
        assert (outcome.how, outcome.exit_status) == ("marker", EXIT_REQUEUE)


def stopped_steps(done: Finished) -> dict[int, dict[str, object]]:
    """Each rank's report, with what its ``requeue()`` said merged in."""
    found: dict[int, dict[str, object]] = {}
    for result in results(done):
        found.setdefault(int(result["rank"]), {}).update(result)
    return found


def test_without_a_group_under_a_multi_rank_launcher_should_stop_names_init(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(name, value)
    stop = preemption()
    try:
        with pytest.raises(PreemptionError, match=r"launcher started 2 ranks.*helios_pg.init\(\)"):
            stop.should_stop()
        with pytest.raises(PreemptionError, match=r"requeue\(\) needs the process group"):
            stop.requeue()
    finally:
        stop.close()


@pytest.mark.parametrize(
    ("args", "raised"),
    [
        # gloo pairs the two all-reduces byte for byte: the marked words come back
        # wrong, and rank 0 says what happened.
        (["--same-size"], "raised PreemptionError: Preemption.should_stop() met another"),
        # Sizes differ: gloo waits for bytes that never come, until the group timeout.
        ([], "raised "),
    ],
)
def test_should_stop_on_one_rank_only_never_answers_true(args: list[str], raised: str) -> None:
    timeout = {"HELIOS_TEST_PG_TIMEOUT": "3"}
    finished = run_hand_started(MISMATCH, 2, args=args, extra_env=timeout, limit=60)
    outcomes = {r["rank"]: r["outcome"] for r in results(finished)}
    detail = "\n".join(f.describe() for f in finished)
    assert outcomes.get(0, "").startswith(raised), detail


@pytest.mark.long
def test_a_run_started_from_the_marker_counts_its_attempt_and_removes_the_marker(
    tmp_path: Path,
) -> None:
    """Two ranks without a launcher stop, leave the marker, and are started again."""
    marker = tmp_path / "helios-requeue-job"  # the default name, in the working directory
    env = {
        "HELIOS_TEST_PREEMPT": "usr1_one",
        "HELIOS_TEST_CHECKPOINT": str(tmp_path / "checkpoint.json"),
        "HELIOS_TEST_PG_TIMEOUT": "15",
        "HELIOS_TEST_STEPS": "8",
    }

    def run() -> tuple[list[Finished], dict[int, dict[str, object]]]:
        port = free_port()
        commands = []
        for rank in range(2):
            variables = base_env(env) | launcher_variables(rank, 2, port)
            variables.pop("HELIOS_REQUEUE_FILE", None)
            commands.append(([sys.executable, str(WORKER)], variables))
        finished = run_processes(commands, limit=60, cwd=tmp_path)
        by_rank = {int(r["rank"]): r for r in results(finished) if "attempt" in r}
        return finished, by_rank

    first, stopped = run()
    detail = "\n".join(f.describe() for f in first)
    assert [f.returncode for f in first] == [EXIT_REQUEUE] * 2, detail
    assert json.loads(marker.read_text())["attempt"] == 0, detail
    second, resumed = run()
    detail += "\n".join(f.describe() for f in second)
    assert [f.returncode for f in second] == [0, 0], detail
    assert {entry["attempt"] for entry in resumed.values()} == {1}, detail
    (last,) = {entry["stopped"] for entry in stopped.values()}
    assert {entry["start"] for entry in resumed.values()} == {int(str(last)) + 1}, detail
    assert not marker.exists(), detail
    said = f"helios requeue: this run is attempt 1 of the job, asked for by the marker {marker}"
    assert said in second[0].stderr, detail
    assert said not in second[1].stderr, detail


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Finished, Path]]:
    def env_for(case: str, logs: Path) -> dict[str, str]:
        return {
            "HELIOS_TEST_PREEMPT": case,
            "HELIOS_TEST_CHECKPOINT": str(logs / "checkpoint.json"),
            "HELIOS_TEST_EVERY": "2" if case == "restart" else "0",
            "HELIOS_TEST_PG_TIMEOUT": "15",
            "HELIOS_REQUEUE_FILE": str(logs / "marker"),
        }

    def env_for_mode(mode: str, logs: Path) -> dict[str, str]:
        if mode == "loader":  # SIGTERM to the agent, with DataLoader workers on every rank
            # Rank 1's spawned workers import torch before its first batch: on two busy
            # cores that takes longer than 15 s, while the others wait for it in the
            # first step's all-reduce. The group timeout only bounds a job gone wrong.
            loader = {"HELIOS_TEST_LOADER": "fork,spawn,forkserver", "HELIOS_TEST_PG_TIMEOUT": "60"}
            return env_for("sigterm", logs) | loader
        return env_for(mode, logs)

    modes = ("sigterm", "restart", "loader")
    return run_jobs(WORKER, modes, env_for_mode, tmp_path_factory, restarts=1)


@pytest.mark.faults
@pytest.mark.parametrize("mode", ["sigterm", "loader"])
def test_sigterm_to_torchrun_stops_every_rank_after_the_same_step(
    jobs: dict[str, tuple[Finished, Path]], mode: str
) -> None:
    """With DataLoader workers too: torchrun signals each rank's whole process group."""
    done, logs = jobs[mode]
    found = stopped_steps(done)
    expected = [0, 0] if mode == "loader" else []
    assert {rank: entry["workers"] for rank, entry in found.items()} == dict.fromkeys(
        range(3), expected
    ), done.describe()
    assert sorted(found) == [0, 1, 2], done.describe()
    assert len({entry["stopped"] for entry in found.values()}) == 1, found
    assert {entry["how"] for entry in found.values()} == {"launcher"}
    stopped = int(str(found[0]["stopped"]))
    assert stopped >= 3
    assert (logs / "checkpoint.json").read_text() == f'{{"next": {stopped + 1}}}'


@pytest.mark.faults
def test_a_restarted_group_knows_its_attempt_and_resumes(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, logs = jobs["restart"]
    assert done.returncode == 0, done.describe()
    found = stopped_steps(done)
    assert {int(str(entry["attempt"])) for entry in found.values()} == {1}, found
    assert {int(str(entry["start"])) for entry in found.values()} == {4}  # the last checkpoint
    assert {entry["stopped"] for entry in found.values()} == {None}  # ran to the end
    (first,) = logs.glob("**/attempt_0/1/error.json")
    assert "rank 1 fails at step 5" in first.read_text()
