"""The rendezvous derived under srun and mpirun: address, port and job, each explained."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helios_env import LauncherEnvError, _hydra, _rendezvous, inspect_environment
from helios_env._rendezvous import ephemeral_ports, port_range
from tests.env.launchers import open_mpi_env, slurm_env


def step(*, job: str = "4242", step_id: str = "0", nodes: int = 1, **extra: str) -> dict[str, str]:
    environ = slurm_env(
        rank=1,
        world_size=2,
        local_rank=1 if nodes == 1 else 0,
        node=0 if nodes == 1 else 1,
        tasks_per_node="2" if nodes == 1 else "1(x2)",
        num_nodes=nodes,
    )
    environ |= {"SLURM_JOB_ID": job, "SLURM_STEP_ID": step_id, "SLURM_STEP_NODELIST": "n[07-08]"}
    return environ | extra


def test_one_node_meets_on_loopback_at_a_port_outside_the_ephemeral_range() -> None:
    report = inspect_environment(step())
    low, high = ephemeral_ports()

    assert report.master_addr == "127.0.0.1"
    assert report.master_port is not None
    assert not low <= report.master_port <= high
    assert report.master_port >= 10000
    assert report.job == "SLURM job 4242 step 0"
    assert report.sources["master_addr"] == "derived: one node (SLURM_STEP_NUM_NODES=1)"
    assert report.sources["master_port"].startswith("derived: SLURM_JOB_ID, SLURM_STEP_ID")


def test_several_nodes_meet_at_the_first_host_of_the_step() -> None:
    report = inspect_environment(step(nodes=2))

    assert report.master_addr == "n07"
    assert report.sources["master_addr"] == "derived: first host of SLURM_STEP_NODELIST"


def test_two_steps_of_one_job_and_two_jobs_get_different_ports() -> None:
    ports = {
        inspect_environment(step(job=job, step_id=step_id)).master_port
        for job, step_id in (("4242", "0"), ("4242", "1"), ("4243", "0"), ("4243", "1"))
    }

    assert len(ports) == 4


def test_set_variables_win_over_derived_ones() -> None:
    report = inspect_environment(step(nodes=2, MASTER_ADDR="head", MASTER_PORT="23456"))

    assert (report.master_addr, report.master_port) == ("head", 23456)
    assert (report.sources["master_addr"], report.sources["master_port"]) == (
        "MASTER_ADDR",
        "MASTER_PORT",
    )


def test_a_malformed_nodelist_names_the_variable() -> None:
    with pytest.raises(LauncherEnvError) as caught:
        inspect_environment(step(nodes=2, SLURM_STEP_NODELIST="n[07-"))

    assert caught.value.variable == "SLURM_STEP_NODELIST"
    assert "SLURM_STEP_NODELIST='n[07-'" in str(caught.value)


def test_mpirun_on_one_node_derives_loopback_and_on_several_asks_for_master_addr() -> None:
    job = {"OMPI_MCA_ess_base_jobid": "79560705"}
    one = inspect_environment(
        open_mpi_env(rank=1, world_size=2, local_rank=1, local_world_size=2) | job
    )
    several = inspect_environment(
        open_mpi_env(rank=1, world_size=4, local_rank=1, local_world_size=2) | job
    )

    assert one.master_addr == "127.0.0.1"
    assert one.master_port is not None
    assert one.job == several.job == "open-mpi job 79560705"
    assert several.master_addr is None
    assert "set MASTER_ADDR" in several.sources["master_addr"]
    assert "mpi4py" in several.sources["master_addr"]


def test_a_torchrun_or_hand_set_job_derives_nothing() -> None:
    report = inspect_environment({"RANK": "0", "WORLD_SIZE": "2"})

    assert (report.master_addr, report.master_port) == (None, None)


@pytest.mark.parametrize(
    ("ephemeral", "expected"),
    [
        ((32768, 60999), (10000, 22768)),  # Linux's default: below it
        ((1024, 50000), (50001, 15535)),  # a range that starts low: above it
        ((10000, 65535), (10000, 55536)),  # nothing left: the whole range from 10000
    ],
)
def test_derived_ports_avoid_the_ephemeral_range(
    ephemeral: tuple[int, int], expected: tuple[int, int]
) -> None:
    assert port_range(ephemeral) == expected


def test_the_ephemeral_range_is_read_from_the_kernel_or_defaulted(tmp_path: Path) -> None:
    custom = tmp_path / "ip_local_port_range"
    custom.write_text("40000\t50000\n")
    broken = tmp_path / "broken"
    broken.write_text("nonsense")

    assert ephemeral_ports(custom) == (40000, 50000)
    assert ephemeral_ports(broken) == (32768, 60999)
    assert ephemeral_ports(tmp_path / "missing") == (32768, 60999)


def test_the_report_shows_the_derived_rendezvous_and_where_it_came_from() -> None:
    text = inspect_environment(step()).format()

    assert "127.0.0.1:" in text
    assert "derived: one node (SLURM_STEP_NUM_NODES=1)" in text
    assert "SLURM job 4242 step 0" in text


def test_a_job_without_an_id_derives_no_port_and_says_so() -> None:
    # MPICH's Hydra sets no job variable; outside Hydra's proxy there is nothing to use.
    report = inspect_environment(
        {"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
    )

    assert report.master_addr == "127.0.0.1"
    assert report.master_port is None
    assert (
        report.sources["master_port"]
        == "not derived: not known: mpich sets no job id; set MASTER_PORT"
    )


def fake_process(proc: Path, pid: int, name: str, parent: int) -> None:
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "stat").write_text(f"{pid} ({name}) S {parent} {pid} {pid} 0 -1\n")


def test_hydra_s_proxy_is_found_above_any_wrapper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_process(tmp_path, 500, "hydra_pmi_proxy", 400)
    fake_process(tmp_path, 600, "uv", 500)
    fake_process(tmp_path, 700, "sh (a wrapper)", 600)
    monkeypatch.setattr(os, "getppid", lambda: 700)

    assert _hydra.proxy_ancestor(tmp_path) == 500


def test_no_proxy_above_this_process_gives_no_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_process(tmp_path, 600, "bash", 1)
    monkeypatch.setattr(os, "getppid", lambda: 600)

    assert _hydra.proxy_ancestor(tmp_path) is None
    assert _hydra.proxy_ancestor(tmp_path / "missing") is None


def test_across_nodes_every_rank_assumes_linux_s_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_rendezvous, "ephemeral_ports", lambda path=None: (1024, 65000))
    several = inspect_environment(step(nodes=2))
    one = inspect_environment(step())

    assert several.master_port is not None
    assert 10000 <= several.master_port < 32768
    assert "32768-60999" in several.sources["master_port"]
    assert "1024-65000" in one.sources["master_port"]
