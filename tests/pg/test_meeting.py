"""Where ranks meet when nobody said: another job is refused, rank 0 checks its host.

The SLURM variables here are written by hand for processes on this host, so these
run without a cluster; ``tests/launchers`` runs the same paths under real srun.
"""

from __future__ import annotations

import importlib.util
import shlex
import socket
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from helios_env import inspect_environment
from helios_pg import ProcessGroupInitError, RendezvousConfigError, init
from tests.support.procs import base_env, free_port, results, run_processes

WORKER = Path(__file__).parents[1] / "launchers" / "workers" / "form_group.py"


WAIT_THEN_RUN = """
import runpy, sys, time
from pathlib import Path
import torch
flag, worker = sys.argv[1:]
while not Path(flag).exists():
    time.sleep(0.05)
sys.argv = [worker]
runpy.run_path(worker, run_name="__main__")
"""
"""``python -c`` program: import torch, wait for the file ``argv[1]``, then run ``argv[2]``."""


def slurm_task(*, job: int, rank: int, tasks: int, nodes: int, nodelist: str) -> dict[str, str]:
    """One task of an srun step, as srun sets it (one node unless ``nodes`` says more)."""
    return {
        "SLURM_JOB_ID": str(job),
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank if nodes == 1 else 0),
        "SLURM_NODEID": str(0 if nodes == 1 else rank),
        "SLURM_STEP_NUM_TASKS": str(tasks),
        "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_STEP_TASKS_PER_NODE": str(tasks) if nodes == 1 else f"1(x{nodes})",
        "SLURM_STEP_NODELIST": nodelist,
    }


def export(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str]) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)


def test_a_process_of_another_job_is_refused_and_the_job_still_forms(tmp_path: Path) -> None:
    port = free_port()
    common = {"MASTER_PORT": str(port), "HELIOS_TEST_PG_TIMEOUT": "40"}
    job_rank0 = base_env(
        common | slurm_task(job=71, rank=0, tasks=2, nodes=1, nodelist="localhost")
    )
    stray = base_env(
        common
        | slurm_task(job=72, rank=1, tasks=2, nodes=1, nodelist="localhost")
        | {"HELIOS_TEST_PG_TIMEOUT": "10"}
    )
    job_rank1 = base_env(
        common | slurm_task(job=71, rank=1, tasks=2, nodes=1, nodelist="localhost")
    )
    worker = [sys.executable, str(WORKER)]
    # Job 71's own rank 1 imports torch at once, but runs the worker only once the stray
    # has tried and left, so the stray is the first to knock on rank 0's store.
    flag = tmp_path / "stray-left"
    then_flag = f"status=$?; touch {shlex.quote(str(flag))}; exit $status"
    first = ["sh", "-c", f"{shlex.join(worker)}; {then_flag}"]
    late = [sys.executable, "-c", WAIT_THEN_RUN, str(flag), str(WORKER)]

    rank0, refused, rank1 = run_processes(
        [(worker, job_rank0), (first, stray), (late, job_rank1)], limit=90
    )

    (error,) = results(refused)
    assert error["error"] == "ProcessGroupInitError", refused.describe()
    assert "SLURM job 72 step 0 (2 ranks)" in error["message"]
    assert "serves SLURM job 71 step 0 (2 ranks)" in error["message"]
    assert "MASTER_PORT" in error["message"]
    # The stray neither joined nor spoilt the count: job 71 forms with its own rank 1.
    assert [item["total"] for item in results([rank0, rank1])] == [3.0, 3.0], rank0.describe()


def test_rank_zero_refuses_a_derived_address_of_another_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 192.0.2.0/24 is reserved for documentation: never an address of this host.
    export(monkeypatch, slurm_task(job=5, rank=0, tasks=2, nodes=2, nodelist="192.0.2.[1-2]"))

    with pytest.raises(RendezvousConfigError) as caught:
        init(backend="gloo", timeout=timedelta(seconds=5))

    message = str(caught.value)
    assert "'192.0.2.1'" in message
    assert "first host of SLURM_STEP_NODELIST" in message
    assert "MASTER_ADDR" in message
    assert not dist.is_initialized()


def test_a_busy_derived_port_names_its_origin_and_the_override(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    export(monkeypatch, slurm_task(job=9, rank=0, tasks=2, nodes=1, nodelist="localhost"))
    port = inspect_environment().master_port
    assert port is not None

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(ProcessGroupInitError) as caught:
            init(backend="gloo", timeout=timedelta(seconds=5))

    message = str(caught.value)
    assert f"port {port} (derived: SLURM_JOB_ID, SLURM_STEP_ID" in message
    assert "is already in use" in message
    assert "set MASTER_PORT to a free port" in message


@pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is not None, reason="mpi4py would find the address"
)
def test_multi_node_mpirun_without_master_addr_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    export(
        monkeypatch,
        {
            "OMPI_COMM_WORLD_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
            "OMPI_MCA_ess_base_jobid": "1234",
        },
    )

    with pytest.raises(RendezvousConfigError) as caught:
        init(backend="gloo", timeout=timedelta(seconds=5))

    message = str(caught.value)
    assert "MASTER_ADDR" in message
    assert "mpi4py" in message
    assert "MASTER_PORT" not in message.split("is not set", maxsplit=1)[0]


def test_several_ranks_without_a_meeting_point_name_what_is_missing_in_agreement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")

    with pytest.raises(RendezvousConfigError) as caught:
        init(backend="gloo", timeout=timedelta(seconds=5))

    assert "but MASTER_ADDR and MASTER_PORT are not set;" in str(caught.value)
