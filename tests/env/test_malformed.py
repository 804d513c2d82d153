"""Malformed launcher variables: a ValueError subclass that names the variable and value."""

from __future__ import annotations

import pickle
import re
import time
from collections.abc import Callable

import pytest

from helios_env import (
    LauncherEnvError,
    get_dist_info,
    get_global_rank,
    get_local_rank,
    get_local_world_size,
    get_world_size,
    inspect_environment,
)
from tests.env.launchers import set_environ, slurm_env, torchrun_env
from tests.support.fault_records import RecordProperty, error_outcome, record_fault

# (environment, the offending variable, its value as set)
MALFORMED: list[object] = [
    pytest.param({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK", "abc", id="rank-not-an-integer"),
    pytest.param({"RANK": "1_0", "WORLD_SIZE": "20"}, "RANK", "1_0", id="rank-with-underscore"),
    pytest.param({"RANK": "\u0663", "WORLD_SIZE": "4"}, "RANK", "\u0663", id="rank-not-ascii"),
    pytest.param({"RANK": "0", "WORLD_SIZE": "1.5"}, "WORLD_SIZE", "1.5", id="world-size-float"),
    pytest.param(
        {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": ""}, "LOCAL_RANK", "", id="local-rank-empty"
    ),
    pytest.param(
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "two"},
        "LOCAL_WORLD_SIZE",
        "two",
        id="local-world-size-word",
    ),
    pytest.param({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK", "-1", id="rank-negative"),
    pytest.param(
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"},
        "LOCAL_RANK",
        "-1",
        id="local-rank-negative",
    ),
    pytest.param({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE", "0", id="world-size-zero"),
    pytest.param({"RANK": "0", "WORLD_SIZE": "-4"}, "WORLD_SIZE", "-4", id="world-size-negative"),
    pytest.param(
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "0"},
        "LOCAL_WORLD_SIZE",
        "0",
        id="local-world-size-zero",
    ),
    pytest.param({"RANK": "2", "WORLD_SIZE": "2"}, "RANK", "2", id="rank-equals-world-size"),
    pytest.param({"RANK": "7", "WORLD_SIZE": "4"}, "RANK", "7", id="rank-above-world-size"),
    pytest.param(
        {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
        "LOCAL_RANK",
        "2",
        id="local-rank-equals-local-world-size",
    ),
    pytest.param(
        {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "4"},
        "LOCAL_RANK",
        "4",
        id="local-rank-beyond-world-size",
    ),
    pytest.param(
        {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "5"},
        "LOCAL_WORLD_SIZE",
        "5",
        id="local-world-size-above-world-size",
    ),
    pytest.param(torchrun_env() | {"RANK": "x"}, "RANK", "x", id="torchrun-rank-not-an-integer"),
    pytest.param({"LOCAL_RANK": "0"}, "LOCAL_RANK", "0", id="local-rank-alone"),
    pytest.param({"MASTER_PORT": "0"}, "MASTER_PORT", "0", id="master-port-zero"),
    pytest.param({"MASTER_PORT": "70000"}, "MASTER_PORT", "70000", id="master-port-too-big"),
    pytest.param({"MASTER_PORT": "abc"}, "MASTER_PORT", "abc", id="master-port-not-an-integer"),
    pytest.param({"MASTER_ADDR": ""}, "MASTER_ADDR", "", id="master-addr-empty"),
    pytest.param({"MASTER_ADDR": "  "}, "MASTER_ADDR", "  ", id="master-addr-blank"),
    pytest.param(
        {"OMPI_COMM_WORLD_RANK": "one", "OMPI_COMM_WORLD_SIZE": "2"},
        "OMPI_COMM_WORLD_RANK",
        "one",
        id="open-mpi-rank-not-an-integer",
    ),
    pytest.param(
        {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2"},
        "OMPI_COMM_WORLD_RANK",
        "2",
        id="open-mpi-rank-equals-size",
    ),
    pytest.param(
        {
            "OMPI_COMM_WORLD_RANK": "0",
            "OMPI_COMM_WORLD_SIZE": "2",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
        },
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "3",
        id="open-mpi-local-size-above-size",
    ),
    pytest.param(
        {"SLURM_PROCID": "-3", "SLURM_STEP_NUM_TASKS": "4"},
        "SLURM_PROCID",
        "-3",
        id="slurm-procid-negative",
    ),
    pytest.param(
        slurm_env(rank=0, world_size=2, local_rank=0, node=0, tasks_per_node="2(x)", num_nodes=1),
        "SLURM_STEP_TASKS_PER_NODE",
        "2(x)",
        id="slurm-tasks-per-node-garbled",
    ),
    pytest.param(
        slurm_env(rank=0, world_size=2, local_rank=0, node=0, tasks_per_node="0,2", num_nodes=2),
        "SLURM_STEP_TASKS_PER_NODE",
        "0,2",
        id="slurm-tasks-per-node-zero",
    ),
    pytest.param(
        slurm_env(rank=0, world_size=2, local_rank=0, node=0, tasks_per_node="4", num_nodes=1),
        "SLURM_STEP_TASKS_PER_NODE",
        "4",
        id="slurm-tasks-per-node-above-world-size",
    ),
    pytest.param(
        slurm_env(rank=1, world_size=4, local_rank=2, node=0, tasks_per_node="2(x2)", num_nodes=2),
        "SLURM_LOCALID",
        "2",
        id="slurm-localid-beyond-node",
    ),
    pytest.param(
        slurm_env(rank=0, world_size=2, local_rank=0, node=0, tasks_per_node="2", num_nodes=1)
        | {"SLURM_NODEID": "first"},
        "SLURM_NODEID",
        "first",
        id="slurm-nodeid-not-an-integer",
    ),
]

GETTERS: list[Callable[[], object]] = [
    get_dist_info,
    get_local_rank,
    get_global_rank,
    get_local_world_size,
    get_world_size,
]


def test_launcher_env_error_is_a_value_error() -> None:
    assert issubclass(LauncherEnvError, ValueError)


@pytest.mark.parametrize(("environ", "variable", "value"), MALFORMED)
def test_get_dist_info_names_the_malformed_variable_and_its_value(
    monkeypatch: pytest.MonkeyPatch,
    environ: dict[str, str],
    variable: str,
    value: str,
    record_property: RecordProperty,
) -> None:
    set_environ(monkeypatch, environ)

    start = time.monotonic()
    with pytest.raises(LauncherEnvError) as caught:
        get_dist_info()
    record_fault(
        record_property,
        kind="malformed",
        scenario=f"malformed-get_dist_info-{variable}={value}",
        case=f"malformed {variable}={value!r}: get_dist_info",
        claim=f"LauncherEnvError (a ValueError) naming {variable} and {value!r}",
        ranks=[error_outcome(caught.value, time.monotonic() - start)],
    )

    assert (caught.value.variable, caught.value.value) == (variable, value)
    assert f"{variable}={value!r}" in str(caught.value)


@pytest.mark.parametrize(("environ", "variable", "value"), MALFORMED)
def test_inspect_environment_names_the_malformed_variable_and_its_value(
    environ: dict[str, str], variable: str, value: str
) -> None:
    with pytest.raises(LauncherEnvError) as caught:
        inspect_environment(environ)

    assert (caught.value.variable, caught.value.value) == (variable, value)
    assert f"{variable}={value!r}" in str(caught.value)


# Each getter and a malformed variable its own answer is read from.
GETTER_INPUTS: list[tuple[Callable[[], object], dict[str, str], str]] = [
    (get_dist_info, {"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1'"),
    (get_global_rank, {"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1'"),
    (get_world_size, {"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0'"),
    (get_local_rank, {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x"}, "LOCAL_RANK='x'"),
    (get_local_rank, {"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1'"),
    (
        get_local_world_size,
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3"},
        "LOCAL_WORLD_SIZE='3'",
    ),
]


@pytest.mark.parametrize(
    ("getter", "environ", "named"), GETTER_INPUTS, ids=[g.__name__ for g, _, _ in GETTER_INPUTS]
)
def test_every_getter_raises_on_a_malformed_variable_it_reads(
    monkeypatch: pytest.MonkeyPatch,
    getter: Callable[[], object],
    environ: dict[str, str],
    named: str,
) -> None:
    set_environ(monkeypatch, environ)

    with pytest.raises(LauncherEnvError, match=named):
        getter()


@pytest.mark.parametrize(
    ("getter", "expected"),
    [(get_global_rank, 3), (get_world_size, 4), (get_local_rank, 1), (get_local_world_size, 2)],
)
def test_single_value_getters_ignore_a_malformed_rendezvous_variable(
    monkeypatch: pytest.MonkeyPatch, getter: Callable[[], object], expected: int
) -> None:
    environ = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    set_environ(monkeypatch, {**environ, "MASTER_PORT": "70000"})

    with pytest.raises(LauncherEnvError, match="MASTER_PORT"):
        get_dist_info()
    assert getter() == expected


def test_the_global_rank_ignores_a_malformed_world_size(monkeypatch: pytest.MonkeyPatch) -> None:
    set_environ(monkeypatch, {"RANK": "1", "WORLD_SIZE": "two"})

    assert get_global_rank() == 1
    with pytest.raises(LauncherEnvError, match="WORLD_SIZE='two'"):
        get_world_size()


@pytest.mark.parametrize(("present", "missing"), [("RANK", "WORLD_SIZE"), ("WORLD_SIZE", "RANK")])
def test_half_a_rank_pair_names_both_variables(
    monkeypatch: pytest.MonkeyPatch, present: str, missing: str
) -> None:
    monkeypatch.setenv(present, "1")

    with pytest.raises(LauncherEnvError) as caught:
        get_dist_info()

    assert (caught.value.variable, caught.value.value) == (missing, None)
    assert f"{present}='1'" in str(caught.value)
    assert re.search(rf"\b{missing}\b", str(caught.value))


def test_rank_at_world_size_names_both_values() -> None:
    with pytest.raises(LauncherEnvError, match=r"RANK='4'.*WORLD_SIZE='4'"):
        inspect_environment({"RANK": "4", "WORLD_SIZE": "4"})


def test_local_rank_beyond_local_world_size_names_both_values() -> None:
    environ = {"RANK": "0", "WORLD_SIZE": "8", "LOCAL_RANK": "5", "LOCAL_WORLD_SIZE": "4"}

    with pytest.raises(LauncherEnvError, match=r"LOCAL_RANK='5'.*LOCAL_WORLD_SIZE='4'"):
        inspect_environment(environ)


def test_error_survives_pickling_with_its_attributes() -> None:
    # Errors raised in worker processes travel back through pickle (multiprocessing,
    # concurrent.futures); a lost variable name would hide the cause.
    with pytest.raises(LauncherEnvError) as caught:
        inspect_environment({"RANK": "abc", "WORLD_SIZE": "2"})

    copy = pickle.loads(pickle.dumps(caught.value))

    assert isinstance(copy, LauncherEnvError)
    assert (copy.variable, copy.value, str(copy)) == ("RANK", "abc", str(caught.value))


@pytest.mark.parametrize("getter", GETTERS)
def test_a_local_rank_alone_gets_the_same_verdict_from_every_getter(
    monkeypatch: pytest.MonkeyPatch, getter: Callable[[], object]
) -> None:
    set_environ(monkeypatch, {"LOCAL_RANK": "1"})

    with pytest.raises(LauncherEnvError) as caught:
        getter()

    assert caught.value.variable == "LOCAL_RANK"
    assert "RANK and WORLD_SIZE are not" in str(caught.value)
