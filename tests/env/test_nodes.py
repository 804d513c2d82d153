"""Which node a rank runs on, and rank 0's host, on several nodes.

The node is taken from the launcher where it says it, from the layout that
``helios_pg.init()`` learned from the group, or not claimed; never computed from
the ranks, which is wrong for SLURM's 3+1 placement and for round-robin ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helios_env import (
    DistributedInfo,
    get_dist_info,
    get_local_rank,
    get_local_world_size,
    inspect_environment,
)
from helios_env._hydra import hydra_control
from helios_env._learned import LEARNED, forget_layout, learned_layout, record_layout
from tests.env.launchers import LiveGroup, hand_set_env, open_mpi_env, set_environ, slurm_env


def test_srun_three_plus_one_names_the_second_node_from_slurm_nodeid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # srun -N2 -n4: tasks 0-2 on the first node, task 3 alone on the second.
    set_environ(
        monkeypatch,
        slurm_env(rank=3, world_size=4, local_rank=0, node=1, tasks_per_node="3,1", num_nodes=2),
    )

    info = get_dist_info()

    assert (info.local_world_size, info.node_rank, info.num_nodes) == (1, 1, 2)


def test_mpirun_on_several_nodes_does_not_claim_a_node_before_init(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_environ(monkeypatch, open_mpi_env(rank=3, world_size=4, local_rank=1, local_world_size=2))

    report = inspect_environment()

    assert (report.node_rank, report.num_nodes) == (None, None)
    assert report.sources["node_rank"].startswith("not known: open-mpi")
    assert "helios_pg.init()" in report.sources["node_rank"]
    assert "  node           unknown  [not known: open-mpi" in report.format()


def test_a_learned_layout_answers_while_its_group_lives(
    monkeypatch: pytest.MonkeyPatch, live_group: LiveGroup
) -> None:
    # MPICH round-robin: rank 3 of 4 is the second rank of the second node.
    set_environ(monkeypatch, open_mpi_env(rank=3, world_size=4, local_rank=1, local_world_size=2))
    live_group(rank=3, world_size=4)
    record_layout(
        DistributedInfo(
            rank=3, world_size=4, node_rank=1, num_nodes=2, local_rank=1, local_world_size=2
        )
    )
    try:
        report = inspect_environment()
        assert (report.node_rank, report.num_nodes) == (1, 2)
        assert report.sources["node_rank"] == LEARNED
        assert (get_dist_info().node_rank, get_dist_info().num_nodes) == (1, 2)
    finally:
        forget_layout()
    assert get_dist_info().node_rank is None


def test_a_learned_layout_of_another_group_is_ignored(live_group: LiveGroup) -> None:
    live_group(rank=1, world_size=2)
    record_layout(
        DistributedInfo(
            rank=1, world_size=2, node_rank=1, num_nodes=2, local_rank=0, local_world_size=1
        )
    )
    try:
        live_group(rank=1, world_size=2)  # a new group object, created without helios
        assert learned_layout((1, 2)) is None
        assert get_dist_info().num_nodes == 1  # local values assume one node, as before
    finally:
        forget_layout()


def test_a_learned_layout_gives_the_local_values_no_variable_gave(live_group: LiveGroup) -> None:
    # init_method="tcp://..." with nothing in the environment, ranks on two hosts.
    live_group(rank=2, world_size=3)
    record_layout(
        DistributedInfo(
            rank=2, world_size=3, node_rank=1, num_nodes=2, local_rank=0, local_world_size=1
        )
    )
    try:
        info = get_dist_info()
    finally:
        forget_layout()

    assert (info.local_rank, info.local_world_size, info.node_rank, info.num_nodes) == (0, 1, 1, 2)


def test_a_learned_layout_replaces_an_assumed_local_world_size(
    monkeypatch: pytest.MonkeyPatch, live_group: LiveGroup
) -> None:
    # mp.spawn on two hosts: RANK and WORLD_SIZE alone, so one node would be assumed.
    set_environ(monkeypatch, hand_set_env(rank=2, world_size=3))
    live_group(rank=2, world_size=3)
    record_layout(
        DistributedInfo(
            rank=2, world_size=3, node_rank=1, num_nodes=2, local_rank=0, local_world_size=1
        )
    )
    try:
        info = get_dist_info()
        queried = (get_local_rank(), get_local_world_size())
        sources = inspect_environment().sources
    finally:
        forget_layout()

    assert (info.local_rank, info.local_world_size, info.node_rank, info.num_nodes) == (0, 1, 1, 2)
    assert queried == (0, 1)
    assert sources["local_world_size"] == LEARNED


def test_arbitrary_distribution_meets_at_the_first_host_of_the_hostfile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node2\nnode1\nnode1\n")
    environ = slurm_env(
        rank=1, world_size=3, local_rank=0, node=0, tasks_per_node="2,1", num_nodes=2
    ) | {"SLURM_DISTRIBUTION": "arbitrary", "SLURM_HOSTFILE": str(hostfile)}

    report = inspect_environment(environ)

    assert report.master_addr == "node2"
    assert report.sources["master_addr"] == "derived: first host of SLURM_HOSTFILE (arbitrary)"


def test_arbitrary_distribution_without_a_readable_hostfile_names_master_addr(
    tmp_path: Path,
) -> None:
    environ = slurm_env(
        rank=1, world_size=3, local_rank=0, node=0, tasks_per_node="2,1", num_nodes=2
    ) | {"SLURM_DISTRIBUTION": "arbitrary", "SLURM_HOSTFILE": str(tmp_path / "missing")}

    report = inspect_environment(environ)

    assert report.master_addr is None
    assert "cannot be read" in report.sources["master_addr"]
    assert "set MASTER_ADDR" in report.sources["master_addr"]


def test_lsf_meets_at_the_first_compute_host_of_the_rankfile(tmp_path: Path) -> None:
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("batch1\nh41n07\nh41n07\nh41n08\nh41n08\n")
    environ = {
        "JSM_NAMESPACE_RANK": "2",
        "JSM_NAMESPACE_SIZE": "4",
        "JSM_NAMESPACE_LOCAL_RANK": "0",
        "JSM_NAMESPACE_LOCAL_SIZE": "2",
        "LSB_DJOB_RANKFILE": str(rankfile),
        "LSB_MCPU_HOSTS": "batch1 1 other 42",
        "PMIX_NAMESPACE": "900010",
    }

    report = inspect_environment(environ)

    assert report.master_addr == "h41n07"
    assert report.sources["master_addr"] == "derived: first compute host of LSB_DJOB_RANKFILE"


def test_hydra_names_the_job_by_its_mpiexec_on_every_node(tmp_path: Path) -> None:
    proxy = tmp_path / "4242"
    proxy.mkdir()
    args = ["/usr/bin/hydra_pmi_proxy", "--control-port", "node1:45623", "--pgid", "0"]
    (proxy / "cmdline").write_bytes(b"\0".join(arg.encode() for arg in args) + b"\0")

    assert hydra_control(4242, tmp_path) == "node1:45623 (pgid 0)"
    assert hydra_control(4243, tmp_path) is None


def test_a_set_gloo_socket_ifname_always_wins() -> None:
    environ = open_mpi_env(rank=0, world_size=4, local_rank=0, local_world_size=2) | {
        "MASTER_ADDR": "node7",
        "GLOO_SOCKET_IFNAME": "ib0",
    }

    report = inspect_environment(environ)

    assert report.gloo_interface == "ib0"
    assert report.sources["gloo_interface"] == "GLOO_SOCKET_IFNAME"
    assert "  interface      ib0  [GLOO_SOCKET_IFNAME]" in report.format()


@pytest.mark.parametrize(
    ("environ", "reason"),
    [
        (
            slurm_env(rank=0, world_size=2, local_rank=0, node=0, tasks_per_node="2", num_nodes=1),
            "gloo's default: one node",
        ),
        (
            open_mpi_env(rank=0, world_size=4, local_rank=0, local_world_size=2)
            | {"MASTER_ADDR": "127.0.0.1"},
            "MASTER_ADDR is loopback",
        ),
    ],
)
def test_gloo_keeps_its_own_choice_on_one_host(environ: dict[str, str], reason: str) -> None:
    report = inspect_environment(environ)

    assert report.gloo_interface is None
    assert reason in report.sources["gloo_interface"]
