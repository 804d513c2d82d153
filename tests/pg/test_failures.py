"""The failure reporter under real torchrun: the failing rank, its traceback, its victims.

One job per way of failing, all started at once: rank 1 of 3 fails, ranks 0 and 2 then
fail in a collective; once in a group made with ``init_method="env://"``. torchrun
keeps every worker's error file under ``--log-dir``.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from helios_pg import BackendUnavailableError, init, process_group, shutdown
from helios_pg._reports import _reporter
from helios_pg._reports._error_file import write_error_file
from helios_pg._reports._peer import is_peer_failure
from tests.pg.torchrun_jobs import names_culprit, root_cause, run_jobs
from tests.support.procs import Finished, results

WORKER = Path(__file__).parent / "workers" / "failing.py"
MODES = (
    "raise",
    "env_raise",
    "record",
    "thread",
    "exit",
    "os_exit",
    "sigint",
    "init_backend",
    "desert",
    "mismatch",
)
NPROC = 3


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Finished, Path]]:
    def env_for(mode: str, logs: Path) -> dict[str, str]:
        return {"HELIOS_TEST_FAILURE": mode, "HELIOS_TEST_PG_TIMEOUT": "20"}

    return run_jobs(WORKER, MODES, env_for, tmp_path_factory, nproc=NPROC)


def error_files(log_dir: Path) -> dict[int, dict[str, Any]]:
    found = {}
    for path in log_dir.glob("**/attempt_0/*/error.json"):
        found[int(path.parent.name)] = json.loads(path.read_text())
    return found


def rank_one_exited_with(cause: str, status: int) -> bool:
    """Whether torchrun's root cause, where it is rank 1 itself, shows exit ``status``.

    Where a victim is the root cause instead (see
    :func:`~tests.pg.torchrun_jobs.names_culprit`), rank 1's status is not shown there;
    where torchrun stopped rank 1 while it was tearing down, after its error file was
    written, the status is torchrun's SIGTERM.
    """
    rank_one = "rank      : 1 (local_rank: 1)\n  exitcode  : "
    if rank_one not in cause:
        return True
    shown = cause.split(rank_one, 1)[1].split(maxsplit=1)[0]
    return shown in (str(status), f"-{int(signal.SIGTERM)}")


@pytest.mark.faults
@pytest.mark.parametrize("mode", ["raise", "env_raise"])
def test_the_root_cause_is_the_failing_rank_with_its_traceback(
    jobs: dict[str, tuple[Finished, Path]], mode: str
) -> None:
    done, logs = jobs[mode]
    assert done.returncode != 0
    cause = root_cause(done.stderr + done.stdout)
    assert names_culprit(cause, 1, "ValueError: bad batch 7"), cause
    files = error_files(logs)
    assert "raise ValueError(message)" in files[1]["message"]["extraInfo"]["py_callstack"]
    assert files[1]["message"]["message"] == "ValueError: bad batch 7"
    assert "Traceback (most recent call last)" in files[1]["message"]["extraInfo"]["py_callstack"]


@pytest.mark.faults
@pytest.mark.parametrize("mode", ["raise", "env_raise"])  # env://: out of habit
def test_the_other_ranks_name_the_rank_that_failed_first(
    jobs: dict[str, tuple[Finished, Path]], mode: str
) -> None:
    done, logs = jobs[mode]
    line = "failed first: ValueError: bad batch 7"
    # torchrun stops the other ranks once rank 1 has failed, sometimes before one of
    # them has reported: at least one does, and every error file of theirs says it.
    assert line in done.stderr + done.stdout
    files = error_files(logs)
    assert 0 in files or 2 in files
    culprit = int(files[1]["message"]["extraInfo"]["timestamp"])
    for rank in (0, 2):
        if rank not in files:
            continue  # torchrun stopped it before its collective failed
        message = files[rank]["message"]
        assert message["message"].startswith("rank 1 on "), message
        assert line in message["message"].splitlines()[0]
        assert message["extraInfo"]["py_callstack"].startswith("rank 1 on ")
        assert int(message["extraInfo"]["timestamp"]) > culprit


@pytest.mark.faults
def test_ranks_whose_calls_differ_all_fail_and_name_the_rank_that_differs(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    # Every rank raises the same CollectiveMismatchError at once; the report names the
    # rank whose call is not the most common one, whichever rank published first.
    done, logs = jobs["mismatch"]
    cause = root_cause(done.stderr + done.stdout)
    assert names_culprit(cause, 1, "CollectiveMismatchError: "), cause
    files = error_files(logs)
    own = files[1]["message"]
    assert own["message"].startswith("CollectiveMismatchError: "), own
    assert "(rank 1 differs from ranks 0, 2)" in own["message"], own
    assert "(2, 4)" in own["extraInfo"]["py_callstack"], own
    for rank in (0, 2):
        if rank not in files:
            continue  # torchrun stopped it before it wrote its file
        message = files[rank]["message"]["message"]
        assert message.startswith("rank 1 on "), message
        assert "failed first: CollectiveMismatchError: " in message.splitlines()[0], message


@pytest.mark.faults
def test_ctrl_c_on_one_rank_is_its_failure_with_its_traceback(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, logs = jobs["sigint"]
    output = done.stderr + done.stdout
    said = "KeyboardInterrupt (SIGINT: Ctrl-C, or kill -INT)"
    assert names_culprit(root_cause(output), 1, said), output
    assert f"failed first: {said}" in output, output
    files = error_files(logs)
    assert files[1]["message"]["message"] == said
    assert ", in fail\n" in files[1]["message"]["extraInfo"]["py_callstack"]  # where it came


@pytest.mark.faults
def test_a_rank_that_leaves_in_the_middle_is_named_by_the_ranks_it_deserted(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, _ = jobs["desert"]
    output = done.stderr + done.stdout
    said = "left the job early: sys.exit(0) left its process_group() block, without an error"
    (agent,) = [r["agent_store"] for r in results(done) if "agent_store" in r]
    if agent != "True":  # rank 0 serves the store (torch 2.4's torchrun): nothing is said
        assert said not in output, output
        return
    assert re.search(rf"^rank 1 on \S+ {re.escape(said)}", output, re.M), output
    cause = root_cause(output)
    assert "rank      : 1 (local_rank: 1)" not in cause, cause  # it exited 0
    assert "rank 1 on " in cause, cause
    assert said in cause, cause


@pytest.mark.faults
def test_an_error_init_raises_is_torchruns_root_cause_with_the_programs_frames(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, logs = jobs["init_backend"]
    output = done.stderr + done.stdout
    assert "rank      : 1 (local_rank: 1)" in root_cause(output), output
    message = error_files(logs)[1]["message"]
    assert message["message"].startswith("BackendUnavailableError: "), message
    stack = message["extraInfo"]["py_callstack"]
    assert stack.index("in main") < stack.index("in init"), stack  # the program's first
    assert "error_file: <N/A>" not in root_cause(output), output


@pytest.mark.faults
def test_a_file_written_by_record_stands(jobs: dict[str, tuple[Finished, Path]]) -> None:
    # @record writes every rank's file after shutdown() and overwrites any other: its
    # own files stand, dated by @record (so its root cause is whoever it dated first).
    done, logs = jobs["record"]
    assert "ValueError: bad batch 7" in done.stderr + done.stdout
    files = error_files(logs)
    assert files[1]["message"]["message"] == "ValueError: bad batch 7"
    for data in files.values():
        callstack = data["message"]["extraInfo"]["py_callstack"]
        assert "in wrapper" in callstack  # record's own traceback.format_exc()
        assert not callstack.startswith("rank 1 on ")


@pytest.mark.faults
def test_a_thread_exception_is_reported_at_exit(jobs: dict[str, tuple[Finished, Path]]) -> None:
    done, logs = jobs["thread"]
    cause = root_cause(done.stderr + done.stdout)
    assert names_culprit(cause, 1, "RuntimeError: loader thread died"), cause
    assert rank_one_exited_with(cause, 3), cause
    message = error_files(logs)[1]["message"]
    assert message["message"] == "RuntimeError: loader thread died (in thread loader)"
    assert "raise RuntimeError(message)" in message["extraInfo"]["py_callstack"]


@pytest.mark.faults
def test_a_non_zero_system_exit_is_the_root_cause(jobs: dict[str, tuple[Finished, Path]]) -> None:
    done, logs = jobs["exit"]
    cause = root_cause(done.stderr + done.stdout)
    assert names_culprit(cause, 1, "SystemExit: 3"), cause
    assert rank_one_exited_with(cause, 3), cause
    assert error_files(logs)[1]["message"]["message"] == "SystemExit: 3"
    assert "failed first: SystemExit: 3" in done.stderr + done.stdout


@pytest.mark.faults
def test_os_exit_leaves_torchrun_only_the_exit_status(
    jobs: dict[str, tuple[Finished, Path]],
) -> None:
    done, logs = jobs["os_exit"]
    output = done.stderr + done.stdout
    assert "rank      : 1 (local_rank: 1)\n  exitcode  : 3" in output, output
    assert 1 not in error_files(logs)
    assert "failed first" not in output  # nothing was published: no culprit is made up


@pytest.mark.faults
def test_every_error_file_is_whole_json(jobs: dict[str, tuple[Finished, Path]]) -> None:
    for _, logs in jobs.values():
        for path in logs.glob("**/error.json"):
            data = json.loads(path.read_text())
            assert set(data["message"]["extraInfo"]) == {"py_callstack", "timestamp"}
        assert not list(logs.glob("**/.helios-error-*"))


def test_an_existing_error_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    path.write_text('{"message": "from @record"}')

    assert write_error_file(str(path), "ValueError: x", "tb", 1) is False
    assert path.read_text() == '{"message": "from @record"}'

    fresh = tmp_path / "fresh.json"
    assert write_error_file(str(fresh), "ValueError: x", "tb", 1) is True
    assert json.loads(fresh.read_text())["message"]["extraInfo"]["timestamp"] == "1"


def test_an_init_that_fails_leaves_a_file_that_a_later_init_takes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    unavailable = "no-such-backend" if torch.cuda.is_available() else "nccl"
    with pytest.raises(BackendUnavailableError) as raised:
        init(backend=unavailable)
    message = json.loads(path.read_text())["message"]
    assert message["message"] == f"BackendUnavailableError: {str(raised.value).splitlines()[0]}"
    stack = message["extraInfo"]["py_callstack"]
    assert stack.index("test_failures.py") < stack.index("in init"), stack
    init(backend="gloo")  # a retry that works: the rank did not fail
    try:
        assert not path.exists()
    finally:
        shutdown()
    with pytest.raises(BackendUnavailableError):
        init(backend=unavailable, report_failures=False)
    assert not path.exists()


def test_a_shutdown_that_fails_writes_the_error_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    destroy = dist.destroy_process_group

    def failing(group: object = None) -> None:
        message = "the backend would not let go"
        raise RuntimeError(message)

    init(backend="gloo")
    monkeypatch.setattr(dist, "destroy_process_group", failing)
    try:
        with pytest.raises(RuntimeError, match="would not let go"):
            shutdown()
    finally:
        monkeypatch.setattr(dist, "destroy_process_group", destroy)
        shutdown()
    message = json.loads(path.read_text())["message"]
    assert message["message"] == "RuntimeError: the backend would not let go"
    stack = message["extraInfo"]["py_callstack"]
    assert stack.index("test_failures.py") < stack.index("in shutdown"), stack


def train_one_step() -> None:
    with process_group(backend="gloo"):
        message = "bad batch 9"
        raise ValueError(message)


def train() -> None:
    train_one_step()


def test_a_failure_inside_process_group_reads_as_python_would_print_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    with pytest.raises(ValueError, match="bad batch 9"):
        train()
    stack = json.loads(path.read_text())["message"]["extraInfo"]["py_callstack"]
    frames = [line.strip() for line in stack.splitlines() if line.strip().startswith("File ")]
    names = [frame.rsplit(" in ", 1)[1] for frame in frames]
    # The program's frames, outermost first, down to the raise; none of helios's.
    assert names[-3:] == [
        "test_a_failure_inside_process_group_reads_as_python_would_print_it",
        "train",
        "train_one_step",
    ], stack
    assert "process_group" not in names, stack
    assert stack.rstrip().endswith("ValueError: bad batch 9"), stack


def read_shard() -> None:
    with process_group(backend="gloo"):
        try:
            open_shard()
        except OSError as exc:
            message = "shard 3 is unreadable"
            raise RuntimeError(message) from exc


def open_shard() -> None:
    message = "checksum mismatch"
    raise OSError(message)


def test_the_programs_frames_lead_the_traceback_of_the_exception_raised_not_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    with pytest.raises(RuntimeError, match="shard 3"):
        read_shard()
    stack = json.loads(path.read_text())["message"]["extraInfo"]["py_callstack"]
    cause, raised = stack.split("The above exception was the direct cause", 1)
    assert "in open_shard" in cause, stack
    assert "in test_the_programs_frames_lead" not in cause, stack
    assert raised.index("in test_the_programs_frames_lead") < raised.index("in read_shard"), stack


def raised_in(path: Path, error: BaseException) -> BaseException:
    """``error``, raised by code whose file is ``path`` (its traceback's innermost frame)."""
    code = compile("raise error", str(path), "exec")
    try:
        exec(code, {"error": error})
    except BaseException as raised:
        return raised
    raise AssertionError


TORCH = Path(torch.__file__).parent
GLOO = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Connection reset by peer"
GLOO_TIMEOUT = "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting"
ARGUMENT = "ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (4), got (3))"


class MarkedError(ValueError):
    helios_peer_failure = True


@pytest.mark.parametrize(
    ("error", "peer"),
    [
        # A transport's error, tagged by torch's C++ with gloo's source file: wherever it
        # surfaces (a collective, work.wait() in the program, DDP's backward).
        (raised_in(TORCH / "distributed" / "distributed_c10d.py", RuntimeError(GLOO)), True),
        (raised_in(Path("train.py"), RuntimeError(GLOO)), True),
        (raised_in(TORCH / "autograd" / "graph.py", RuntimeError(GLOO)), True),
        (raised_in(TORCH / "distributed" / "x.py", RuntimeError(f"{GLOO_TIMEOUT} 20000ms")), True),
        # A collective's own argument checks, an out-of-memory error: the rank's own.
        (raised_in(TORCH / "distributed" / "x.py", RuntimeError(ARGUMENT)), False),
        (raised_in(TORCH / "autograd" / "graph.py", RuntimeError("out of memory")), False),
        # The program's own errors, whatever their words.
        (raised_in(Path("train.py"), TimeoutError("reading shard 17 timed out")), False),
        (raised_in(Path("train.py"), RuntimeError("connection reset by peer: timeout")), False),
        (ValueError("bad batch 7"), False),
        (raised_in(Path("train.py"), MarkedError("rank 2's value")), True),
        (raised_in(Path("train.py"), dist.DistNetworkError("gone")), True),
    ],
)
def test_a_peer_failure_is_told_by_type_and_origin(error: BaseException, peer: bool) -> None:
    assert is_peer_failure(error) is peer


def test_a_peer_failure_is_found_in_what_an_error_was_raised_from() -> None:
    cause = raised_in(TORCH / "distributed" / "distributed_c10d.py", RuntimeError(GLOO))
    wrapped = ValueError("the step failed")
    wrapped.__cause__ = cause
    assert is_peer_failure(wrapped)


def test_installing_twice_and_removing_restores_the_hooks() -> None:
    import sys

    before, before_thread = sys.excepthook, threading.excepthook
    _reporter.install(0, None, "")
    _reporter.install(0, None, "")
    assert sys.excepthook is not before
    _reporter.uninstall()
    assert (sys.excepthook, threading.excepthook) == (before, before_thread)
    assert _reporter.active() is None


@pytest.fixture(autouse=True)
def _no_reporter_left() -> Iterator[None]:
    yield
    _reporter.uninstall()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_exits_is_no_failure() -> None:
    reporter = _reporter.install(0, None, "")
    assert reporter is not None
    thread = threading.Thread(target=sys.exit, args=(0,))
    thread.start()
    thread.join()

    assert reporter.kept is None


def test_shutdown_after_torch_destroyed_the_group_still_removes_the_reporter() -> None:
    init()
    assert sys.excepthook is _reporter._excepthook
    dist.destroy_process_group()
    shutdown()

    assert sys.excepthook is not _reporter._excepthook  # torch's own hook may stay
    assert _reporter.active() is None
