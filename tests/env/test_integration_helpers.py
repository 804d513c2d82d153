"""helios-env's small shared readers and writers: on/off variables, host:port endpoints."""

from __future__ import annotations

import pytest

from helios_env.integration import endpoint, expected_hosts, switch


@pytest.mark.parametrize("raw", ["1", "true", "Yes", " ON "])
def test_the_spellings_of_on(raw: str) -> None:
    assert switch("HELIOS_X", raw, default=False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", " off "])
def test_the_spellings_of_off(raw: str) -> None:
    assert switch("HELIOS_X", raw, default=True) is False


@pytest.mark.parametrize("default", [True, False])
@pytest.mark.parametrize("raw", [None, "", "  "])
def test_unset_or_empty_is_the_default(default: bool, raw: str | None) -> None:
    assert switch("HELIOS_X", raw, default=default) is default


@pytest.mark.parametrize(("default", "fix"), [(True, "HELIOS_X=0"), (False, "HELIOS_X=1")])
def test_anything_else_is_refused_naming_the_variable_and_the_fix(default: bool, fix: str) -> None:
    with pytest.raises(ValueError, match=r"HELIOS_X must be 1 or 0 .*got 'maybe'") as caught:
        switch("HELIOS_X", "maybe", default=default)
    assert fix in str(caught.value)


@pytest.mark.parametrize(
    ("host", "written"),
    [
        ("node1", "node1:29500"),
        ("10.0.0.4", "10.0.0.4:29500"),
        ("fd00::1", "[fd00::1]:29500"),
        ("[fd00::1]", "[fd00::1]:29500"),
    ],
)
def test_an_endpoint_brackets_an_ipv6_address_once(host: str, written: str) -> None:
    assert endpoint(host, 29500) == written


SRUN = {
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_STEP_NODELIST": "node[1-3]",
    "SLURM_STEP_TASKS_PER_NODE": "3(x2),2",
}


@pytest.mark.parametrize(
    ("distribution", "hosts"),
    [
        (None, "node1 node1 node1 node2 node2 node2 node3 node3"),
        ("block", "node1 node1 node1 node2 node2 node2 node3 node3"),
        ("block:cyclic", "node1 node1 node1 node2 node2 node2 node3 node3"),
        ("cyclic", "node1 node2 node3 node1 node2 node3 node1 node2"),
        ("plane=2", None),
        ("arbitrary", None),
    ],
)
def test_an_srun_steps_ranks_are_placed_as_slurm_places_them(
    distribution: str | None, hosts: str | None
) -> None:
    environ = SRUN if distribution is None else {**SRUN, "SLURM_DISTRIBUTION": distribution}
    expected = expected_hosts(8, environ)
    assert expected == (hosts.split() if hosts else None)


@pytest.mark.parametrize(
    ("environ", "world_size"),
    [
        (SRUN, 4),  # srun started the agents of another launcher: its tasks are not the ranks
        ({**SRUN, "SLURM_STEP_TASKS_PER_NODE": "3(x3)"}, 8),  # counts that do not add up
        ({**SRUN, "SLURM_STEP_NODELIST": "node[1-2]"}, 8),  # fewer nodes than counts
        ({**SRUN, "SLURM_STEP_TASKS_PER_NODE": "three"}, 8),  # refused where it is read
        ({"TORCHELASTIC_RUN_ID": "r", "LOCAL_WORLD_SIZE": "3"}, 8),
        ({}, 8),
    ],
)
def test_where_the_variables_do_not_say_it_there_is_no_answer(
    environ: dict[str, str], world_size: int
) -> None:
    assert expected_hosts(world_size, environ) is None


def test_torchrun_names_each_ranks_node_by_its_place_in_the_rendezvous() -> None:
    environ = {"TORCHELASTIC_RUN_ID": "r", "LOCAL_WORLD_SIZE": "2"}
    assert expected_hosts(4, environ) == ["torchrun node 0"] * 2 + ["torchrun node 1"] * 2
