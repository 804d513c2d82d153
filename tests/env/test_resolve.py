"""get_dist_info and its four getters, from the launcher's variables or the defaults."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from helios_env import (
    DistributedInfo,
    LauncherEnvError,
    get_dist_info,
    get_global_rank,
    get_local_rank,
    get_local_world_size,
    get_world_size,
    inspect_environment,
)
from helios_env._marker import marker_path
from helios_env.integration import consume_requeue_marker, requeue_marker
from tests.env.launchers import hand_set_env, open_mpi_env, set_environ, slurm_env, torchrun_env


def test_a_plain_process_gets_the_defaults() -> None:
    assert get_dist_info() == DistributedInfo()


@pytest.mark.parametrize(
    ("getter", "expected"),
    [
        (get_local_rank, 0),
        (get_global_rank, 0),
        (get_local_world_size, 1),
        (get_world_size, 1),
    ],
)
def test_getters_default_to_a_single_process(getter: Callable[[], int], expected: int) -> None:
    assert getter() == expected


@pytest.mark.parametrize(
    ("getter", "field"),
    [
        (get_local_rank, "local_rank"),
        (get_global_rank, "rank"),
        (get_local_world_size, "local_world_size"),
        (get_world_size, "world_size"),
    ],
)
def test_each_getter_returns_its_field_of_get_dist_info(
    monkeypatch: pytest.MonkeyPatch, getter: Callable[[], int], field: str
) -> None:
    set_environ(monkeypatch, torchrun_env(rank=5, world_size=8, node_rank=1, num_nodes=2))

    assert getter() == getattr(get_dist_info(), field)


def test_torchrun_variables_give_every_value(monkeypatch: pytest.MonkeyPatch) -> None:
    set_environ(monkeypatch, torchrun_env(rank=5, world_size=8, node_rank=1, num_nodes=2))

    assert get_dist_info() == DistributedInfo(
        local_rank=1, rank=5, local_world_size=4, world_size=8, node_rank=1, num_nodes=2
    )


def test_values_are_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_global_rank() == 0
    set_environ(monkeypatch, hand_set_env(rank=1, world_size=2))

    assert get_global_rank() == 1


def test_hand_set_rank_and_world_size_assume_a_single_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_environ(monkeypatch, hand_set_env(rank=2, world_size=3))

    assert get_dist_info() == DistributedInfo(
        local_rank=2, rank=2, local_world_size=3, world_size=3
    )


def test_local_rank_without_local_world_size_assumes_a_single_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_environ(monkeypatch, hand_set_env(rank=3, world_size=4) | {"LOCAL_RANK": "1"})

    assert get_dist_info() == DistributedInfo(
        local_rank=1, rank=3, local_world_size=4, world_size=4
    )


@pytest.mark.parametrize("rank", range(4))
def test_local_world_size_without_local_rank_derives_the_local_rank(
    monkeypatch: pytest.MonkeyPatch, rank: int
) -> None:
    # Two nodes of two: every rank must agree on that layout, whatever its rank.
    set_environ(monkeypatch, hand_set_env(rank=rank, world_size=4) | {"LOCAL_WORLD_SIZE": "2"})

    assert get_dist_info() == DistributedInfo(
        local_rank=rank % 2,
        rank=rank,
        local_world_size=2,
        world_size=4,
        node_rank=rank // 2,
        num_nodes=2,
    )


def test_torchrun_variables_win_over_open_mpi_and_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    set_environ(
        monkeypatch,
        # One torchrun agent per MPI task and per srun task: GROUP_WORLD_SIZE matches.
        open_mpi_env(rank=1, world_size=2, local_rank=0, local_world_size=1)
        | slurm_env(rank=1, world_size=2, local_rank=0, node=1, tasks_per_node="1(x2)", num_nodes=2)
        | torchrun_env(rank=5, world_size=8, node_rank=1, num_nodes=2),
    )

    assert get_dist_info() == DistributedInfo(
        local_rank=1, rank=5, local_world_size=4, world_size=8, node_rank=1, num_nodes=2
    )


def test_open_mpi_variables_give_every_value(monkeypatch: pytest.MonkeyPatch) -> None:
    set_environ(monkeypatch, open_mpi_env(rank=5, world_size=6, local_rank=2, local_world_size=3))

    assert get_dist_info() == DistributedInfo(
        local_rank=2, rank=5, local_world_size=3, world_size=6
    )


def test_open_mpi_without_local_variables_assumes_a_single_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_environ(monkeypatch, {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"})

    assert get_dist_info() == DistributedInfo(
        local_rank=2, rank=2, local_world_size=3, world_size=3
    )


@pytest.mark.parametrize(
    ("node", "rank", "local_rank", "local_world_size"),
    [(0, 1, 1, 2), (2, 5, 1, 2), (3, 6, 0, 1)],
)
def test_slurm_reads_this_nodes_task_count(
    monkeypatch: pytest.MonkeyPatch, node: int, rank: int, local_rank: int, local_world_size: int
) -> None:
    # "2(x3),1": two tasks on each of the first three nodes, one on the fourth.
    set_environ(
        monkeypatch,
        slurm_env(
            rank=rank,
            world_size=7,
            local_rank=local_rank,
            node=node,
            tasks_per_node="2(x3),1",
            num_nodes=4,
        ),
    )

    assert get_dist_info() == DistributedInfo(
        local_rank=local_rank,
        rank=rank,
        local_world_size=local_world_size,
        world_size=7,
        node_rank=node,
        num_nodes=4,
    )


def test_slurm_without_tasks_per_node_assumes_a_single_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_environ(
        monkeypatch, {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "0"}
    )

    assert get_dist_info() == DistributedInfo(
        local_rank=0, rank=2, local_world_size=4, world_size=4
    )


def test_a_slurm_node_beyond_the_step_s_nodes_is_an_error_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_environ(
        monkeypatch,
        slurm_env(rank=2, world_size=3, local_rank=0, node=5, tasks_per_node="1(x3)", num_nodes=3),
    )

    with pytest.raises(LauncherEnvError) as caught:
        get_dist_info()

    assert caught.value.variable == "SLURM_NODEID"
    assert "SLURM_NODEID='5'" in str(caught.value)
    assert "SLURM_STEP_NUM_NODES='3'" in str(caught.value)


def test_a_slurm_batch_script_outside_srun_gets_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_environ(monkeypatch, {"SLURM_JOB_ID": "4242", "SLURM_PROCID": "0", "SLURM_NNODES": "2"})

    assert get_dist_info() == DistributedInfo()


def test_sources_name_the_variable_behind_each_value() -> None:
    environ = torchrun_env(rank=5, world_size=8, node_rank=1, num_nodes=2)

    sources = inspect_environment(environ).sources

    assert dict(sources) == {
        "rank": "RANK",
        "world_size": "WORLD_SIZE",
        "local_rank": "LOCAL_RANK",
        "local_world_size": "LOCAL_WORLD_SIZE",
        "node_rank": "GROUP_RANK",
        "num_nodes": "GROUP_WORLD_SIZE",
        "master_addr": "MASTER_ADDR",
        "master_port": "MASTER_PORT",
        "job": "TORCHELASTIC_RUN_ID",
        "gloo_interface": "gloo's default: MASTER_ADDR is loopback (one host)",
        "attempt": "TORCHELASTIC_RESTART_COUNT",
    }


@pytest.mark.parametrize(
    ("variables", "attempt", "source"),
    [
        ({}, 0, "default: no restart count is set"),
        ({"SLURM_RESTART_COUNT": "2"}, 2, "SLURM_RESTART_COUNT"),
        ({"TORCHELASTIC_RESTART_COUNT": "1"}, 1, "TORCHELASTIC_RESTART_COUNT"),
        # srun torchrun: a requeue and a restart of the worker group are two attempts.
        (
            {"SLURM_RESTART_COUNT": "1", "TORCHELASTIC_RESTART_COUNT": "1"},
            2,
            "SLURM_RESTART_COUNT + TORCHELASTIC_RESTART_COUNT",
        ),
    ],
)
def test_the_attempt_counts_requeues_and_restarts(
    variables: dict[str, str], attempt: int, source: str
) -> None:
    report = inspect_environment(hand_set_env(rank=0, world_size=2) | variables)

    assert report.info.attempt == attempt
    assert report.sources["attempt"] == source
    assert f"attempt        {attempt}  [{source}]" in report.format()


@pytest.mark.parametrize("restarts", [{}, {"SLURM_RESTART_COUNT": "1"}])
def test_a_run_a_requeue_marker_asked_for_is_the_next_attempt(
    tmp_path: Path, restarts: dict[str, str]
) -> None:
    marker = tmp_path / f"marker-{len(restarts)}"
    marker.write_text(json.dumps({"attempt": 2, "job": None, "detail": "", "time": 0.0}))
    environ = hand_set_env(rank=0, world_size=2) | restarts | {"HELIOS_REQUEUE_FILE": str(marker)}
    report = inspect_environment(environ)

    assert report.info.attempt == 3 + len(restarts)
    said = f"the requeue marker {marker} (attempt 2 + 1)"
    assert report.sources["attempt"] == " + ".join([*restarts, said])
    # Read once per process: the marker gone, or rewritten by this run, changes nothing.
    marker.write_text(json.dumps({"attempt": 3}))
    assert inspect_environment(environ).info.attempt == 3 + len(restarts)
    marker.unlink()
    assert inspect_environment(environ).info.attempt == 3 + len(restarts)


def test_a_marker_written_after_the_first_look_does_not_count(tmp_path: Path) -> None:
    environ = {"HELIOS_REQUEUE_FILE": str(tmp_path / "marker")}
    assert inspect_environment(environ).info.attempt == 0
    (tmp_path / "marker").write_text(json.dumps({"attempt": 0}))  # this run's requeue()
    assert inspect_environment(environ).info.attempt == 0
    assert consume_requeue_marker(environ) is None  # never a marker this run wrote
    assert (tmp_path / "marker").exists()


@pytest.mark.parametrize("text", ["{}", "{", ""])
def test_the_counted_marker_is_removed_once(tmp_path: Path, text: str) -> None:
    marker = tmp_path / "marker"
    marker.write_text(text)  # an older helios's, or cut short: still a run asked for this one
    environ = {"HELIOS_REQUEUE_FILE": str(marker)}
    assert inspect_environment(environ).info.attempt == 1
    assert consume_requeue_marker(environ) == marker
    assert not marker.exists()
    marker.write_text("{}")  # the next stop of this run
    assert consume_requeue_marker(environ) is None
    assert marker.exists()


@pytest.mark.parametrize(
    ("variables", "name"),
    [
        ({}, "helios-requeue-job"),
        ({"SLURM_JOB_NAME": "train run/1"}, "helios-requeue-train_run_1"),
        ({"SLURM_JOB_NAME": "train", "SLURM_ARRAY_TASK_ID": "4"}, "helios-requeue-train-4"),
    ],
)
def test_the_marker_keeps_its_name_when_the_job_submits_itself_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert marker_path((variables | {"SLURM_JOB_ID": "123"}).get) == tmp_path / name
    assert marker_path({"HELIOS_REQUEUE_FILE": "m"}.get) == tmp_path / "m"
    # Where this process looked first, also after a change of directory.
    environ = {"HELIOS_REQUEUE_FILE": f"marker-{tmp_path.name}"}  # a name of its own
    assert requeue_marker(environ) == tmp_path / f"marker-{tmp_path.name}"
    monkeypatch.chdir("/")
    assert requeue_marker(environ) == tmp_path / f"marker-{tmp_path.name}"


def test_a_malformed_restart_count_is_named() -> None:
    with pytest.raises(LauncherEnvError, match=r"SLURM_RESTART_COUNT='x'"):
        inspect_environment({"SLURM_RESTART_COUNT": "x"})


def test_sources_say_when_a_single_node_is_assumed() -> None:
    sources = inspect_environment(hand_set_env(rank=0, world_size=2)).sources

    assert sources["local_rank"] == sources["local_world_size"] == "assumed: one node"


def test_sources_say_default_in_a_plain_process() -> None:
    sources = inspect_environment({}).sources

    assert {sources[key] for key in ("rank", "world_size", "local_rank", "local_world_size")} == {
        "default"
    }


def test_slurm_node_variables_describe_a_slurm_step() -> None:
    environ = slurm_env(
        rank=5, world_size=7, local_rank=1, node=2, tasks_per_node="2(x3),1", num_nodes=4
    )

    report = inspect_environment(environ)

    assert (report.node_rank, report.num_nodes) == (2, 4)
    assert (report.sources["node_rank"], report.sources["num_nodes"]) == (
        "SLURM_NODEID",
        "SLURM_STEP_NUM_NODES",
    )


def test_slurm_node_variables_are_ignored_outside_an_srun_step() -> None:
    # A plain process in a batch script on the third of four allocated nodes.
    environ = {"SLURM_JOB_ID": "4242", "SLURM_NODEID": "2", "SLURM_NNODES": "4"}

    report = inspect_environment(environ)

    assert (report.node_rank, report.num_nodes) == (0, 1)


def test_rendezvous_joins_master_addr_and_port() -> None:
    report = inspect_environment(torchrun_env(master_addr="10.0.0.7", master_port=29400))

    assert (report.master_addr, report.master_port) == ("10.0.0.7", 29400)
    assert report.rendezvous == "10.0.0.7:29400"


def test_rendezvous_brackets_an_ipv6_address() -> None:
    report = inspect_environment(torchrun_env(master_addr="::1", master_port=29400))

    assert report.rendezvous == "[::1]:29400"


def test_rendezvous_is_none_without_a_port() -> None:
    assert inspect_environment({"MASTER_ADDR": "127.0.0.1"}).rendezvous is None
