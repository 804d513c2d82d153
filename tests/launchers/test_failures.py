"""Under real srun and mpirun, the ranks that survive a failure name the rank that failed.

Rank 1 of 3 raises ``ValueError`` while ranks 0 and 2 wait in an all-reduce; they fail
when rank 1 is gone, and each says ``rank 1 on HOST failed first: ...`` before its own
traceback. srun lets both report; mpirun stops the job at the first non-zero exit, so
there at least one survivor reports, and none names another culprit.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from tests.support.mpi import run_mpich, run_openmpi
from tests.support.procs import Finished
from tests.support.slurm import Cluster, require

WORKERS = Path(__file__).parents[1] / "pg" / "workers"
WORKER = [sys.executable, str(WORKERS / "failing.py")]
ENV = {"HELIOS_TEST_FAILURE": "raise", "HELIOS_TEST_PG_TIMEOUT": "20"}
LIMIT = 90.0

pytestmark = pytest.mark.launchers


def culprit_lines(finished: Finished) -> list[str]:
    output = finished.stdout + finished.stderr
    assert "ValueError: bad batch 7" in output, finished.describe()
    return [line for line in output.splitlines() if "failed first" in line]


def test_srun_survivors_name_the_rank_that_failed_first(slurm_cluster: Cluster) -> None:
    finished = slurm_cluster.finish(["srun", "-n", "3", *WORKER], limit=LIMIT, env=ENV)

    assert finished.returncode != 0
    lines = culprit_lines(finished)
    expected = f"rank 1 on {socket.gethostname()} failed first: ValueError: bad batch 7"
    assert lines == [expected, expected], finished.describe()


@pytest.mark.parametrize("flavour", ["openmpi", "mpich"])
def test_mpirun_survivors_name_the_rank_that_failed_first(flavour: str) -> None:
    require(flavour)
    run = run_openmpi if flavour == "openmpi" else run_mpich
    finished = run(3, WORKER, extra_env=ENV, limit=LIMIT)

    assert finished.returncode != 0
    lines = culprit_lines(finished)
    expected = f"rank 1 on {socket.gethostname()} failed first: ValueError: bad batch 7"
    assert lines, finished.describe()
    assert set(lines) == {expected}


def test_srun_hang_roll_call_names_the_hung_rank(slurm_cluster: Cluster) -> None:
    env = {"HELIOS_TEST_HANG": "skip", "HELIOS_HANG_TIMEOUT": "5", "HELIOS_TEST_PG_TIMEOUT": "15"}
    command = ["srun", "-n", "3", sys.executable, str(WORKERS / "hanging.py")]
    finished = slurm_cluster.finish(command, limit=LIMIT, env=env)

    assert finished.returncode != 0
    output = finished.stdout + finished.stderr
    calls = [line for line in output.splitlines() if "helios hang roll call" in line]
    assert len(calls) == 1, finished.describe()
    assert "ranks [0, 2] in all_reduce #2 at hanging.py:" in calls[0]
    assert "rank 1 in no collective, at hanging.py:" in calls[0]
    expected = f"rank 1 on {socket.gethostname()} failed first: hang: "
    assert output.count(expected) == 2, finished.describe()  # both survivors
