"""Real srun, sbatch, salloc and mpirun form the group with no MASTER_* set.

Each test starts the launcher on this project's private SLURM cluster (or Open MPI's
and MPICH's mpirun on this host); every rank runs ``helios_pg.init()`` on the derived
rendezvous and checks an all-reduce. Skipped without the launchers (failed under
``CI=true``); ``bash tools/install_launchers.sh`` installs them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.mpi import run_mpich, run_openmpi
from tests.support.procs import Finished, results
from tests.support.slurm import Cluster, require

WORKER = [sys.executable, str(Path(__file__).parent / "workers" / "form_group.py")]
LIMIT = 90.0

pytestmark = pytest.mark.launchers


def formed(finished: Finished | list[dict[str, Any]], world_size: int) -> list[dict[str, Any]]:
    """Check that every rank formed one group of ``world_size`` and summed right."""
    ranks = finished if isinstance(finished, list) else results(finished)
    description = finished.describe() if isinstance(finished, Finished) else str(ranks)
    assert sorted(item.get("rank", -1) for item in ranks) == list(range(world_size)), description
    expected = world_size * (world_size + 1) / 2
    assert {item["total"] for item in ranks} == {expected}, description
    assert len({(item["master_addr"], item["master_port"], item["job"]) for item in ranks}) == 1
    return ranks


@pytest.mark.parametrize("tasks", [2, 3])
def test_srun_forms_the_group(slurm_cluster: Cluster, tasks: int) -> None:
    finished = slurm_cluster.finish(["srun", "-n", str(tasks), *WORKER], limit=LIMIT)

    assert finished.returncode == 0, finished.describe()
    ranks = formed(finished, tasks)
    assert {item["launcher"] for item in ranks} == {"slurm"}
    assert {item["master_addr"] for item in ranks} == {"127.0.0.1"}
    assert ranks[0]["sources"]["master_port"].startswith("derived: SLURM_JOB_ID, SLURM_STEP_ID")


def test_srun_with_the_pmi2_plugin_forms_the_group(slurm_cluster: Cluster) -> None:
    finished = slurm_cluster.finish(["srun", "--mpi=pmi2", "-n", "2", *WORKER], limit=LIMIT)

    assert finished.returncode == 0, finished.describe()
    assert {item["launcher"] for item in formed(finished, 2)} == {"slurm"}


def test_salloc_then_srun_forms_the_group(slurm_cluster: Cluster) -> None:
    command = ["salloc", "-n", "2", "srun", *WORKER]
    finished = slurm_cluster.finish(command, limit=LIMIT)

    assert finished.returncode == 0, finished.describe()
    formed(finished, 2)


def test_an_sbatch_script_forms_the_group_in_two_concurrent_steps(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    script = tmp_path / "job.sh"
    output = tmp_path / "job.out"
    worker = " ".join(WORKER)
    # Two steps of one job at once on one node: their derived ports must differ.
    script.write_text(
        f"#!/bin/sh\nsrun -n 2 --exact {worker} &\nsrun -n 2 --exact {worker} &\nwait\n"
    )
    code, _, err = slurm_cluster.run(
        ["sbatch", "--wait", "-n", "4", "-o", str(output), str(script)], limit=LIMIT
    )

    text = output.read_text()
    assert code == 0, f"{err}\n{text}"
    ranks = [item for item in results(Finished(["sbatch"], 0, text, "")) if "rank" in item]
    steps: dict[str, list[dict[str, Any]]] = {}
    for item in ranks:
        steps.setdefault(item["job"], []).append(item)
    assert len(steps) == 2, text
    for step in steps.values():
        formed(step, 2)
    assert len({step[0]["master_port"] for step in steps.values()}) == 2


@pytest.mark.parametrize("processes", [2, 3])
def test_open_mpi_mpirun_forms_the_group(processes: int) -> None:
    require("openmpi")
    finished = run_openmpi(processes, WORKER, limit=LIMIT)

    assert finished.returncode == 0, finished.describe()
    ranks = formed(finished, processes)
    assert {item["launcher"] for item in ranks} == {"open-mpi"}
    assert ranks[0]["sources"]["job"] == "OMPI_MCA_ess_base_jobid"


def test_mpich_mpirun_forms_the_group() -> None:
    require("mpich")
    finished = run_mpich(2, WORKER, limit=LIMIT)

    assert finished.returncode == 0, finished.describe()
    assert {item["launcher"] for item in formed(finished, 2)} == {"mpich"}


def test_srun_of_torchrun_per_task_is_flagged(slurm_cluster: Cluster) -> None:
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    command = ["srun", "-n", "2", torchrun, "--standalone", "--nproc-per-node", "2", *WORKER[1:]]
    finished = slurm_cluster.finish(command, limit=LIMIT)
    errors = results(finished)

    assert finished.returncode != 0
    # A task's torchrun stops its second worker once the first has failed, sometimes
    # before that one has reported: each of the two tasks reports one or two errors.
    assert {item.get("task") for item in errors} == {"0", "1"}, finished.describe()
    assert 2 <= len(errors) <= 4, finished.describe()
    for item in errors:
        assert item["error"] == "LauncherEnvError"
        assert "GROUP_WORLD_SIZE='1'" in item["message"]
        assert "SLURM_STEP_NUM_TASKS='2'" in item["message"]


def test_the_main_job_runs_under_srun(slurm_cluster: Cluster) -> None:
    command = [
        "srun",
        "-n",
        "2",
        sys.executable,
        "-m",
        "helios_collectives",
        "--json",
        "--sizes",
        "8,64K",
        "--iters",
        "3",
    ]
    finished = slurm_cluster.finish(command, limit=LIMIT)

    assert finished.returncode == 0, finished.describe()
    assert '"world_size": 2' in finished.stdout


def test_the_main_job_runs_under_mpirun() -> None:
    require("openmpi")
    finished = run_openmpi(
        2,
        [sys.executable, "-m", "helios_collectives", "--json", "--sizes", "8,64K", "--iters", "3"],
        limit=LIMIT,
    )

    assert finished.returncode == 0, finished.describe()
    assert '"world_size": 2' in finished.stdout
