"""DataLoader workers that outlive the job's stop signal until their rank ends them.

Each test starts one process in a session of its own that draws batches from
DataLoaders with two workers each, then sends a stop signal to its whole process
group, as a cluster does to every process of a job (tests/pg/workers/
loader_signalled.py). Under ``preemption()`` the process stops after ``should_stop()``
with every worker alive until its iterator ends it (status 0); without the shield
torch's workers die of the signal and drawing raises. Every start method here runs in
the faults session: spawned workers each import torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.procs import Finished, base_env, results, run_processes

WORKER = Path(__file__).parent / "workers" / "loader_signalled.py"
METHODS = "fork,spawn,forkserver"


def signalled(*args: str) -> tuple[Finished, dict[str, object]]:
    (done,) = run_processes([([sys.executable, str(WORKER), *args], base_env())], limit=90.0)
    (found,) = results(done)
    return done, found


def test_forked_workers_keep_serving_after_a_sigterm_to_the_whole_job() -> None:
    done, found = signalled("fork", "shield", "SIGTERM")
    assert found == {"batches": 5, "received": 15, "statuses": [0, 0]}, done.describe()


@pytest.mark.faults
@pytest.mark.parametrize("name", ["SIGTERM", "SIGUSR1"])
def test_workers_of_every_start_method_keep_serving(name: str) -> None:
    done, found = signalled(METHODS, "shield", name)
    received = {"SIGTERM": 15, "SIGUSR1": 10}[name]
    assert found == {"batches": 5, "received": received, "statuses": [0] * 6}, done.describe()


@pytest.mark.faults
def test_without_the_shield_the_workers_die_of_the_signal() -> None:
    done, found = signalled("fork", "plain", "SIGTERM")
    assert str(found.get("error", "")).startswith("DataLoader worker"), done.describe()


@pytest.mark.faults
def test_workers_of_a_forkserver_started_before_are_named() -> None:
    done, found = signalled("forkserver", "shield", "SIGTERM", "early")
    assert "error" in found, done.describe()
    assert "do not block SIGUSR1, SIGTERM" in done.stderr
    assert "call preemption() before the first DataLoader" in done.stderr
