"""torch's errors, mapped to helios-pg's by type in one place, each chained to torch's."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch.distributed as dist

from helios_env import LauncherEnvError
from helios_pg import (
    BackendUnavailableError,
    DeviceBindingError,
    ProcessGroupInitError,
    RendezvousConfigError,
)
from helios_pg._errors import JoinTimeoutError
from helios_pg._setup._call import InitCall
from helios_pg._setup._store import Meeting
from helios_pg._setup._torch_errors import Step, explain_failure, map_torch_errors

MEETING = Meeting("127.0.0.1", 29999, "MASTER_ADDR", "MASTER_PORT", "a job")
BUSY = "failed to listen on any local network address ... EADDRINUSE, address already in use"
CALL = InitCall.start(
    backend="gloo", world_size=2, rank=0, timeout=timedelta(seconds=5), meeting=MEETING
)


def explained(exc: BaseException) -> str:
    return explain_failure(exc, CALL, Step.STORE)


def mapped(exc: Exception) -> Exception:
    try:
        with map_torch_errors(CALL, Step.STORE):
            raise exc
    except Exception as raised:
        return raised
    pytest.fail("map_torch_errors swallowed the error")


@pytest.mark.parametrize(
    ("torch_error", "expected"),
    [
        (dist.DistNetworkError("connect timed out"), ProcessGroupInitError),
        (dist.DistStoreError("Timed out. 1/2 clients joined."), ProcessGroupInitError),
        (dist.DistError("something"), ProcessGroupInitError),
        (TimeoutError("no answer"), ProcessGroupInitError),
        (ValueError("port number missing"), RendezvousConfigError),
        (RuntimeError("No rendezvous handler for bogus://"), ProcessGroupInitError),
    ],
    ids=lambda value: type(value).__name__,
)
def test_each_torch_error_becomes_its_helios_class_chained_from_it(
    torch_error: Exception, expected: type[BaseException]
) -> None:
    error = mapped(torch_error)

    assert type(error) is expected
    assert error.__cause__ is torch_error
    assert str(torch_error) in str(error)


@pytest.mark.parametrize(
    "own",
    [
        BackendUnavailableError("b"),
        DeviceBindingError("d"),
        LauncherEnvError("RANK", "x", "RANK must be a non-negative integer"),
        RendezvousConfigError("r"),
        ProcessGroupInitError("p"),
    ],
    ids=lambda value: type(value).__name__,
)
def test_helios_errors_pass_through_unchanged(own: Exception) -> None:
    assert mapped(own) is own


def test_an_error_outside_the_table_passes_through_unchanged() -> None:
    error = KeyError("not torch's")

    assert mapped(error) is error


def test_the_count_at_the_store_becomes_an_init_error_chained_from_its_cause() -> None:
    cause = TimeoutError("the rendezvous did not complete within 5 s")

    error = mapped(JoinTimeoutError(1, cause))

    assert type(error) is ProcessGroupInitError
    assert error.__cause__ is cause
    assert "only 1 of 2 ranks joined the rendezvous store at 127.0.0.1:29999" in str(error)


def test_a_busy_port_is_told_apart_from_an_unreachable_rank_zero_within_its_type() -> None:
    busy = explained(dist.DistNetworkError(BUSY))
    unreachable = explained(dist.DistNetworkError("The client socket has timed out"))

    assert "MASTER_PORT=29999 is already in use" in busy
    assert "rank 0, which hosts the rendezvous store at 127.0.0.1:29999" in unreachable


def test_a_busy_port_without_a_type_of_its_own_is_read_from_the_text() -> None:
    # torch before 2.5 raises a plain RuntimeError for a port that is taken.
    assert "MASTER_PORT=29999 is already in use" in explained(RuntimeError(BUSY))


def test_the_count_of_ranks_in_a_store_timeout_is_read_from_its_text() -> None:
    message = explained(dist.DistStoreError("Timed out after 5 s. 1/3 clients joined."))

    assert "only 1 of 3 ranks joined" in message


def test_the_ranks_that_never_came_are_named_with_where_they_were_to_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {
        "SLURM_STEP_NUM_TASKS": "8",
        "SLURM_STEP_NODELIST": "node[1-2]",
        "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_DISTRIBUTION", raising=False)
    call = InitCall.start(
        backend="gloo", world_size=8, rank=1, timeout=timedelta(seconds=5), meeting=MEETING
    )
    arrived = {0: "node1", 1: "node1", 2: "node1", 3: "node1", 5: "node2"}
    cause = TimeoutError("the rendezvous did not complete within 5 s")

    message = explain_failure(JoinTimeoutError(5, cause, arrived), call, Step.STORE)

    assert (
        "ranks 4, 6-7 (expected on node2) never joined the rendezvous store at "
        "127.0.0.1:29999 within 5 s; ranks 0-3, 5 (node1, node2) did: they never started" in message
    ), message


def test_without_a_launcher_that_places_them_the_missing_ranks_are_named_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    cause = TimeoutError("the rendezvous did not complete within 5 s")

    message = explained(JoinTimeoutError(1, cause, {0: "here"}))

    assert "rank 1 never joined the rendezvous store at 127.0.0.1:29999 within 5 s; " in message
    assert "rank 0 (here) did: it never started" in message


def test_a_rank_counted_but_not_listed_keeps_the_counts_words() -> None:
    # Rank 1 counted itself in and died before it left its entry (or runs a helios
    # that leaves none): naming it missing would be false.
    call = InitCall.start(
        backend="gloo", world_size=3, rank=0, timeout=timedelta(seconds=5), meeting=MEETING
    )
    cause = TimeoutError("the rendezvous did not complete within 5 s")

    message = explain_failure(JoinTimeoutError(2, cause, {0: "here"}), call, Step.STORE)

    assert "only 2 of 3 ranks joined the rendezvous store at 127.0.0.1:29999" in message
    assert "never joined" not in message
