"""The real launchers: a private SLURM cluster, Open MPI's and MPICH's mpirun."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.launchers.record import OUT, RECORD, expect
from tests.support.mpi import run_mpich, run_openmpi
from tests.support.procs import parse_results, results
from tests.support.slurm import MARKER, Cluster, private_cluster, require


@pytest.mark.launchers
def test_srun_starts_one_task_per_rank(slurm_cluster: Cluster) -> None:
    finished = slurm_cluster.finish(["srun", "-n", "3", *RECORD], limit=60)
    assert finished.returncode == 0, finished.describe()
    environs = results(finished)
    assert sorted(item["environ"]["SLURM_PROCID"] for item in environs) == ["0", "1", "2"]
    assert {item["environ"]["SLURM_STEP_NUM_TASKS"] for item in environs} == {"3"}


def _without_scheduling(err: str) -> list[str]:
    """Stderr's lines but srun's notices that the job waited for, then got, its CPUs."""
    notice = re.compile(r"srun: job \d+ (queued and waiting for|has been allocated) resources")
    return [line for line in err.splitlines() if not notice.fullmatch(line)]


@pytest.mark.launchers
def test_run_returns_status_and_output(slurm_cluster: Cluster) -> None:
    code, out, err = slurm_cluster.run(["srun", "-n", "2", "sh", "-c", "echo $SLURM_PROCID"])
    assert (code, sorted(out.split()), _without_scheduling(err)) == (0, ["0", "1"], [])
    code, _, _ = slurm_cluster.run(["srun", "-n", "1", "false"])
    assert code != 0


@pytest.mark.launchers
def test_run_kills_and_cancels_at_the_limit(slurm_cluster: Cluster) -> None:
    with pytest.raises(TimeoutError, match="limit"):
        slurm_cluster.run(["srun", "-n", "1", "sleep", "60"], limit=2)
    code, out, _ = slurm_cluster.run(["squeue", "-h", "-o", "%i"], limit=10)
    assert (code, out.strip()) == (0, "")


@pytest.mark.launchers
def test_sbatch_wait_runs_the_script_and_its_step(slurm_cluster: Cluster, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    output = tmp_path / "job.out"
    script.write_text(f"#!/bin/sh\n{' '.join(RECORD)} --tag batch\nsrun {' '.join(RECORD)}\n")
    code, _, err = slurm_cluster.run(
        ["sbatch", "--wait", "-n", "2", "-o", str(output), str(script)]
    )
    assert code == 0, err
    lines = parse_results(output.read_text())
    assert sorted(item["tag"] for item in lines) == ["", "", "batch"]
    batch = next(item["environ"] for item in lines if item["tag"] == "batch")
    assert "SLURM_STEP_NUM_TASKS" not in batch
    assert expect(batch)["launcher"] == "none"


@pytest.mark.launchers
def test_openmpi_and_mpich_start_their_ranks() -> None:
    require("openmpi", "mpich")
    for run, variable in ((run_openmpi, "OMPI_COMM_WORLD_RANK"), (run_mpich, "PMI_RANK")):
        finished = run(2, RECORD, limit=60)
        assert finished.returncode == 0, finished.describe()
        assert sorted(item["environ"][variable] for item in results(finished)) == ["0", "1"]


@pytest.mark.launchers
def test_private_cluster_leaves_nothing_running() -> None:
    require("slurm")
    with private_cluster() as cluster:
        marker = f"{MARKER}={cluster.root}".encode()
        root = cluster.root
        cluster.run(["sbatch", "--wrap", "sleep 300"], limit=30)
    assert not root.exists()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            data = environ.read_bytes()
        except OSError:
            continue
        stat = (environ.parent / "stat").read_text(errors="replace")
        if stat.rpartition(")")[2].split()[0] != "Z":
            assert marker not in data.split(b"\0"), environ.parent


@pytest.mark.parametrize("path", sorted(OUT.glob("*.json")), ids=lambda p: p.stem)
def test_recorded_expectations_follow_the_recorded_environment(path: Path) -> None:
    data = json.loads(path.read_text())
    assert set(data) == {"scenario", "origin", "ranks"}
    assert data["origin"].startswith("recorded: ")
    for rank in data["ranks"]:
        assert list(rank["environ"]) == sorted(rank["environ"])
        assert rank["expect"] == expect(rank["environ"])


def test_recorder_keeps_only_launcher_variables() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(OUT.parents[2]), "SLURM_PROCID": "3"}
    env |= {"RANK": "1", "HOME": "/nowhere", "MASTER_PORT": "5", "PMIX_RANK": "0"}
    out = subprocess.run(RECORD, env=env, capture_output=True, text=True, check=True, timeout=60)
    assert results_of(out.stdout) == {
        "MASTER_PORT": "5",
        "PMIX_RANK": "0",
        "RANK": "1",
        "SLURM_PROCID": "3",
    }


def results_of(stdout: str) -> dict[str, str]:
    (found,) = parse_results(stdout)
    environ: dict[str, str] = found["environ"]
    return environ
