"""A SLURM job on two nodes is stopped, saves once, is requeued, and resumes: real SLURM.

``sbatch -N2 --ntasks-per-node=2 --requeue`` of ``srun python preempted.py`` (or of
``srun torchrun``, one agent per node): once the first attempt is a few steps in, the
job is signalled (``scancel --signal=USR1``, or one rank's process alone with
``kill -USR1``), or SLURM signals it itself before its time limit
(``--time=1 --signal=USR1@30``). In the signalled jobs each rank draws its batches
from a DataLoader with two workers (forked, or spawned on rank 1, where SIGUSR1's
default action would end them), which SLURM's signal reaches too. Every rank
stops after the same step, with its workers alive until it ends them, rank 0
saves, ``requeue()`` runs ``scontrol requeue``; SLURM holds a requeued job for a while
(``BeginTime``), which the test lifts. The second attempt knows it is one, resumes at
the next step and ends the job ``COMPLETED``.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.multinode.checks import TEST_TIMEOUT, describe
from tests.support.netns import VirtualNodes
from tests.support.procs import REPO_ROOT, Finished, parse_results, torchrun_command
from tests.support.slurm import Cluster

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(2 * TEST_TIMEOUT)]

WORKER = REPO_ROOT / "tests" / "pg" / "workers" / "preempted.py"
LIMIT = 150.0
"""Seconds from submission to the end of the second attempt (eight processes importing
torch on two shared cores, twice)."""


def wait_for(what: str, check: Any, cluster: Cluster, output: Path) -> Any:
    """``check()``'s first true value, polled until :data:`LIMIT` (then the job's output)."""
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    cluster.cancel_all()
    text = output.read_text(errors="replace") if output.exists() else "(no output)"
    raise TimeoutError(f"{what} did not happen in {LIMIT} s\n{text}\n{cluster.logs()}")


def job_fields(cluster: Cluster, job: str) -> dict[str, str]:
    _, out, _ = cluster.run(["scontrol", "show", "job", job])
    return dict(re.findall(r"(\w+)=(\S*)", out))


def job_script(how: str, nodes: VirtualNodes, folder: Path) -> Path:
    """The batch script: srun of the worker, or srun of one torchrun per node."""
    script = folder / "job.sh"
    if how != "srun_torchrun":
        script.write_text(f"#!/bin/sh\nexec srun {sys.executable} {WORKER}\n")
        return script
    agent = torchrun_command(
        "--nnodes=2",
        "--nproc-per-node=2",
        "--max-restarts=0",
        f"--master-port={nodes.free_port(0)}",
    )
    (folder / "agent.sh").write_text(
        "#!/bin/sh\n"
        'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        f'exec {shlex.join(agent)} --node-rank="$SLURM_NODEID" --master-addr="$first" '
        f"{WORKER}\n"
    )
    # One agent per node: -n2 too, or srun takes the job's four tasks.
    agents = f"srun --nodes=2 --ntasks=2 --ntasks-per-node=1 sh {folder / 'agent.sh'}"
    script.write_text(f"#!/bin/sh\nexec {agents}\n")
    return script


@pytest.mark.parametrize("how", ["scancel", "one_rank", "srun_torchrun", "time_limit"])
def test_a_signalled_job_stops_together_saves_once_and_resumes_requeued(
    cluster: Cluster,
    nodes: VirtualNodes,
    tmp_path: Path,
    how: str,
    record_property: Any,
) -> None:
    progress, output = tmp_path / "progress", tmp_path / "job.out"
    progress.mkdir()
    script = job_script(how, nodes, tmp_path)
    env = {
        "PYTHONPATH": str(REPO_ROOT),
        "HELIOS_TEST_PREEMPT": "outside",
        "HELIOS_TEST_CHECKPOINT": str(tmp_path / "checkpoint.json"),
        "HELIOS_TEST_PROGRESS": str(progress),
        "HELIOS_TEST_PG_TIMEOUT": "30",
        # SLURM's warning comes up to a minute early: the first attempt outlasts it.
        "HELIOS_TEST_STEPS": "400" if how == "time_limit" else "40",
    }
    if how in ("scancel", "time_limit"):
        env["HELIOS_TEST_LOADER"] = "fork,spawn,fork,fork"  # SIGUSR1 ends a spawned one
    options = ["-N2", "--ntasks-per-node=2", "--requeue", "--open-mode=append", "--parsable"]
    if how == "time_limit":
        options += ["--time=1", "--signal=USR1@30"]
    submitted = cluster.finish(["sbatch", *options, "-o", str(output), str(script)], env=env)
    assert submitted.returncode == 0, describe(submitted)
    job = submitted.stdout.strip().split(";")[0]

    def step() -> int:
        text = (progress / "step").read_text() if (progress / "step").exists() else ""
        return int(text) if text.strip().isdigit() else -1

    if how != "time_limit":
        # SLURM's own warning may come before the first step: the worker holds it until
        # its handlers are in, so the first attempt may stop after any step.
        wait_for("the first attempt's third step", lambda: step() >= 3, cluster, output)
    sent = time.time()
    if how in ("scancel", "srun_torchrun"):
        signalled = cluster.finish(["scancel", "--signal=USR1", job])
        assert signalled.returncode == 0, describe(signalled)
    elif how == "one_rank":
        os.kill(int((progress / "rank-2.pid").read_text()), signal.SIGUSR1)

    def second_attempt_ended() -> dict[str, str] | None:
        fields = job_fields(cluster, job)
        if fields.get("Restarts") == "1" and fields.get("Reason") == "BeginTime":
            # SLURM holds a requeued job a while: lift the hold once the job waits. Its
            # time limit goes too: the second attempt runs to its end however slowly
            # its ranks import torch, with no second warning.
            limit = ["TimeLimit=UNLIMITED"] if how == "time_limit" else []
            lifted = cluster.finish(["scontrol", "update", f"JobId={job}", "StartTime=now", *limit])
            assert lifted.returncode == 0 or not limit, describe(lifted)
        ended = fields.get("Restarts") == "1" and fields.get("JobState") in {"COMPLETED", "FAILED"}
        return fields if ended else None

    fields = wait_for("the end of the second attempt", second_attempt_ended, cluster, output)
    text = output.read_text() if output.exists() else ""
    report = describe(Finished(["sbatch", job], 0, text, "")) + f"\n{fields}"
    assert fields["JobState"] == "COMPLETED", report
    assert fields["Restarts"] == "1", report
    by_attempt: dict[int, dict[int, dict[str, Any]]] = {0: {}, 1: {}}
    hows, returned = [], []
    for result in parse_results(text):
        if "how" in result:
            hows.append(result["how"])
            returned.append(float(result["at"]))
        else:
            by_attempt[int(result["attempt"])][int(result["rank"])] = result
    first, second = by_attempt[0], by_attempt[1]
    assert sorted(first) == sorted(second) == [0, 1, 2, 3], report
    stopped = {entry["stopped"] for entry in first.values()}
    assert len(stopped) == 1, report  # every rank stopped after the same step
    (last,) = stopped
    assert isinstance(last, int), report
    assert last >= (0 if how == "time_limit" else 3), report
    # Every step ran once per rank: the second attempt starts where the first stopped.
    assert {entry["start"] for entry in second.values()} == {last + 1}, report
    assert {entry["stopped"] for entry in second.values()} == {None}, report
    workers = [0, 0] if how in ("scancel", "time_limit") else []
    assert {rank: entry["workers"] for rank, entry in first.items()} == dict.fromkeys(
        range(4), workers
    ), report
    assert set(hows) <= {"scontrol"}, report
    if returned and how != "time_limit":  # SLURM may stop a rank before it says it
        record_property("signal_to_last_requeue_return_s", round(max(returned) - sent, 2))
