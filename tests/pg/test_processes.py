"""Real processes over gloo on 127.0.0.1: hand-started, torchrun, one process.

Starting a process costs several seconds (importing torch), so each launch below is a
module-scoped fixture that several tests read: every worker reports what it saw on
``RESULT`` lines. Every launch has a parent-side time limit (tests/support/procs.py),
every group a short timeout, and every port is a fresh free one. Workers run with
``CUDA_VISIBLE_DEVICES`` empty, so these are the gloo paths on any machine. Two torchrun
agents that stand for two nodes run in tests/integration/test_torchrun.py, whose launch
also checks helios_log.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from helios_env import DistributedInfo
from tests.support.procs import (
    Finished,
    base_env,
    free_port,
    results,
    run_hand_started,
    run_processes,
    run_torchrun,
)

WORKERS = Path(__file__).resolve().parent / "workers"
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}
LIMIT = 110.0
"""Seconds: a launch on two loaded, shared cores (torchrun's restart starts six interpreters
that import torch); under the 120 s test timeout, which counts a module fixture's setup."""
HAND_STARTED = 3
TORCHRUN_NPROC = 3
PROBE_TIMEOUT = 2.0  # seconds: the group timeout that a skipped all-reduce must hit
UNDESTROYED = "destroy_process_group"


def expect_clean_exit(finished: Sequence[Finished]) -> None:
    """Every process exited with status 0 and without torch's undestroyed-group warning."""
    for item in finished:
        assert item.returncode == 0, item.describe()
        assert UNDESTROYED not in item.stderr, item.describe()


def info(rank: int, world_size: int, local_rank: int, local_world_size: int) -> dict[str, Any]:
    return dataclasses.asdict(DistributedInfo(local_rank, rank, local_world_size, world_size))


def phase(reports: list[dict[str, Any]], name: str) -> dict[int, dict[str, Any]]:
    """The reports of one phase of hand_started.py, by rank; one per rank."""
    found = {r["rank"]: r for r in reports if r.get("phase") == name}
    assert sorted(found) == list(range(HAND_STARTED)), reports
    return found


# --- hand-started processes ---------------------------------------------------------


@pytest.fixture(scope="module")
def hand_started(tmp_path_factory: pytest.TempPathFactory) -> list[Finished]:
    directory = tmp_path_factory.mktemp("hand-started")
    args = [
        f"--directory={directory}",
        f"--timeout={PROBE_TIMEOUT}",
        f"--tcp-port={free_port()}",
        f"--store-port={free_port()}",
        # Neither the default address nor the default port: overwriting shows.
        "--init-dist-addr=localhost",
        f"--init-dist-port={free_port()}",
    ]
    return run_hand_started(
        WORKERS / "hand_started.py", HAND_STARTED, args=args, extra_env=CPU_ONLY, limit=LIMIT
    )


@pytest.fixture(scope="module")
def hand_started_reports(hand_started: list[Finished]) -> list[dict[str, Any]]:
    expect_clean_exit(hand_started)
    return results(hand_started)


def test_hand_started_processes_see_their_ranks_before_and_after_init(
    hand_started_reports: list[dict[str, Any]],
) -> None:
    for rank, report in phase(hand_started_reports, "env").items():
        expected = info(rank, HAND_STARTED, rank, HAND_STARTED)
        assert report["before"] == expected
        assert report["after"] == expected
        assert report["dist_rank"] == rank
        assert report["dist_world_size"] == HAND_STARTED
        assert report["backend"] == "gloo"
        assert report["total"] == sum(range(HAND_STARTED))


def test_init_on_a_live_group_in_every_process_keeps_it(
    hand_started_reports: list[dict[str, Any]],
) -> None:
    for report in phase(hand_started_reports, "env").values():
        assert report["kept"] is True


def test_shutdown_twice_in_every_process_leaves_no_group(
    hand_started_reports: list[dict[str, Any]],
) -> None:
    for report in phase(hand_started_reports, "env-shutdown").values():
        assert report["initialized"] is False


def test_the_timeout_reaches_the_group_so_a_skipped_collective_fails_fast(
    hand_started_reports: list[dict[str, Any]],
) -> None:
    # Rank 1 skips the all-reduce and stays alive; the others must give up after the
    # 2 s timeout that init was given, not torch's default of 30 minutes.
    reports = phase(hand_started_reports, "file")
    assert reports[1]["skipped"] is True
    for rank in (0, 2):
        report = reports[rank]
        assert report["error"] is not None, report
        assert "Timed out" in report["error"]
        assert PROBE_TIMEOUT * 0.75 <= report["elapsed"] < PROBE_TIMEOUT + 4, report


def test_a_file_init_method_groups_processes_without_launcher_variables(
    hand_started_reports: list[dict[str, Any]],
) -> None:
    for rank, report in phase(hand_started_reports, "file").items():
        assert report["info"] == info(rank, HAND_STARTED, rank, HAND_STARTED)


def test_a_tcp_group_without_launcher_variables_answers_get_dist_info(
    hand_started_reports: list[dict[str, Any]],
) -> None:
    for rank, report in phase(hand_started_reports, "tcp").items():
        assert report["launcher"] == []
        assert report["info"] == info(rank, HAND_STARTED, rank, HAND_STARTED)
        assert report["total"] == sum(range(HAND_STARTED))


def test_init_groups_processes_through_the_store_it_is_given(
    hand_started_reports: list[dict[str, Any]],
) -> None:
    # No MASTER_* and no init_method: the TCPStore is the only way to meet.
    for rank, report in phase(hand_started_reports, "store").items():
        assert report["info"] == info(rank, HAND_STARTED, rank, HAND_STARTED)
        assert report["total"] == sum(range(HAND_STARTED))


@pytest.mark.long
def test_a_rank_that_never_reaches_init_on_a_given_store_is_named() -> None:
    # Two processes of a world of three, on a TCPStore the program made: torch's own
    # rendezvous lists nobody, so each rank signs in at the store before the group forms.
    both = {"WORLD_SIZE": "3", **CPU_ONLY}
    finished = run_hand_started(
        WORKERS / "given_store.py", 2, per_rank_env={0: both, 1: both}, limit=LIMIT
    )

    errors = {entry["rank"]: entry["error"] for entry in results(finished)}
    assert sorted(errors) == [0, 1], [item.describe() for item in finished]
    for rank, error in errors.items():
        assert error.startswith(f"could not create the gloo process group (rank {rank} of 3): "), (
            error
        )
        assert "rank 2 never joined the store given to init within 5 s; ranks 0-1 (" in error, error


def test_a_forked_child_that_exits_normally_leaves_its_parents_group_working() -> None:
    # The child runs the atexit handlers inherited from rank 0: helios's destroy at exit
    # there closed rank 0's connections, and rank 1 timed out in the next collective.
    finished = run_hand_started(
        WORKERS / "forked_child.py", 2, extra_env={**CPU_ONLY, "HELIOS_TEST_PG_TIMEOUT": "10"},
        limit=LIMIT,
    )  # fmt: skip

    for item in finished:
        assert item.returncode == 0, item.describe()
    totals = {entry["rank"]: entry["total"] for entry in results(finished)}
    assert totals == {0: 2.0, 1: 2.0}, [item.describe() for item in finished]


def test_init_dist_keeps_a_preset_master_address_port_and_local_rank(
    hand_started_reports: list[dict[str, Any]],
) -> None:
    reports = phase(hand_started_reports, "init_dist")
    ports = {report["env"]["MASTER_PORT"] for report in reports.values()}
    assert len(ports) == 1
    last = HAND_STARTED - 1
    for rank, report in reports.items():
        local_rank = 0 if rank == last else rank  # the last rank preset its own
        assert report["env"]["MASTER_ADDR"] == "localhost"
        assert report["env"]["LOCAL_RANK"] == str(local_rank)
        assert report["active"] is True
        assert report["dist_rank"] == rank
        assert report["info"] == info(rank, HAND_STARTED, local_rank, HAND_STARTED)
        assert report["total"] == sum(range(HAND_STARTED))
    for report in phase(hand_started_reports, "done").values():
        assert report["initialized"] is False


# --- torchrun -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def standalone() -> Finished:
    """``torchrun --standalone --nproc-per-node 3 --max-restarts 1`` whose local rank 1
    fails the first attempt, so the group is started twice."""
    return run_torchrun(
        [str(WORKERS / "ranks.py"), "--fail-first-attempt=1"],
        nproc=TORCHRUN_NPROC,
        options=["--max-restarts=1", "--monitor-interval=0.1"],
        extra_env=CPU_ONLY,
        limit=LIMIT,
    )


@pytest.mark.long
def test_torchrun_standalone_workers_see_their_ranks_before_and_after_init(
    standalone: Finished,
) -> None:
    expect_clean_exit([standalone])
    ran = [r for r in results(standalone) if r["event"] == "ran"]
    assert sorted(r["dist_rank"] for r in ran) == list(range(TORCHRUN_NPROC)), ran
    for report in ran:
        rank = report["dist_rank"]
        # The group that ran is torchrun's second attempt: the first failed on purpose.
        expected = info(rank, TORCHRUN_NPROC, rank, TORCHRUN_NPROC) | {"attempt": 1}
        assert report["torchrun"] is True
        assert report["before"] == expected
        assert report["after"] == expected
        assert report["dist_world_size"] == TORCHRUN_NPROC
        assert report["backend"] == "gloo"
        assert report["total"] == sum(range(TORCHRUN_NPROC))


@pytest.mark.long
def test_an_elastic_restart_initializes_the_second_attempt_cleanly(standalone: Finished) -> None:
    expect_clean_exit([standalone])
    reports = results(standalone)
    failing = [r for r in reports if r["event"] == "failing"]
    assert failing == [{"event": "failing", "attempt": "0", "local_rank": "1"}]
    ran = [r for r in reports if r["event"] == "ran"]
    finished = [r for r in reports if r["event"] == "finished"]
    assert [r["attempt"] for r in ran] == ["1"] * TORCHRUN_NPROC
    assert finished == [{"event": "finished", "attempt": "1", "initialized": False}] * 3


# --- one plain process --------------------------------------------------------------


@pytest.fixture(scope="module")
def single() -> Finished:
    command = [sys.executable, str(WORKERS / "single.py")]
    return run_processes([(command, base_env(CPU_ONLY))], limit=LIMIT)[0]


def single_report(single: Finished, check: str) -> dict[str, Any]:
    expect_clean_exit([single])
    found = [r for r in results(single) if r["check"] == check]
    assert len(found) == 1, single.describe()
    return found[0]


def test_a_plain_process_runs_a_world_of_one_and_changes_no_environment_variable(
    single: Finished,
) -> None:
    report = single_report(single, "world-of-one")
    assert report["world_size"] == 1
    assert report["backend"] == "gloo"
    assert report["total"] == [1.0, 1.0]
    assert report["changed"] == []


def test_the_listening_socket_probe_sees_a_listening_socket(single: Finished) -> None:
    assert single_report(single, "control")["seen"] is True


def test_a_world_of_one_listens_only_on_the_transports_ephemeral_port(single: Finished) -> None:
    # No TCPStore: gloo's own transport listener (one, on a port the kernel picked) is
    # all that a world of one opens.
    report = single_report(single, "world-of-one")
    low, high = report["ephemeral"]
    ports = [int(address.split(":")[1], 16) for address in report["new_listeners"]]
    assert len(ports) <= 1, report
    assert all(low <= port <= high for port in ports), report


def test_pg_options_and_timeout_reach_the_backend_unchanged(single: Finished) -> None:
    report = single_report(single, "forwarding")
    assert report["backend"] == "heliosprobe"
    assert report["pg_options_is_given"] is True
    assert report["timeout"] == 42.0


def test_a_program_using_process_group_exits_with_its_group_destroyed(
    single: Finished,
) -> None:
    # single_report also checks stderr for torch's undestroyed-group warning.
    assert single_report(single, "world-of-one-exit")["initialized"] is False


# --- teardown ------------------------------------------------------------------------


@pytest.mark.long
def test_shutdown_right_after_collectives_never_hangs() -> None:
    # Without helios's care, torch before 2.8 hangs here within a few hundred rounds.
    rounds = 300
    command = [sys.executable, str(WORKERS / "teardown.py"), f"--rounds={rounds}"]
    (finished,) = run_processes([(command, base_env(CPU_ONLY))], limit=LIMIT)
    expect_clean_exit([finished])
    assert results(finished) == [{"rounds": rounds, "initialized": False}]


def test_a_group_init_made_is_destroyed_at_exit_when_the_program_forgot() -> None:
    # Without the destroy at exit, about one process in twenty here aborts as Python
    # finalizes (status 134, "terminate called without an active exception"): each rank
    # checks, after helios's exit hook and before finalization, that no group is left.
    finished = run_hand_started(WORKERS / "no_shutdown.py", 2, extra_env=CPU_ONLY, limit=LIMIT)
    expect_clean_exit(finished)
    reports = results(finished)
    assert [item["total"] for item in reports if "total" in item] == [2.0] * 2
    left = [item["initialized_at_exit"] for item in reports if "initialized_at_exit" in item]
    assert left == [False] * 2, reports
