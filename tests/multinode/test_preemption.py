"""A SLURM job on two nodes is stopped, saves once, is requeued, and resumes: real SLURM.

``sbatch -N2 --ntasks-per-node=2 --requeue`` of ``srun python preempted.py`` (or of
``srun torchrun``, one agent per node): once the first attempt is a few steps in, the
job is signalled (``scancel --signal=USR1``, or one rank's process alone with
``kill -USR1``), or SLURM signals it itself before its time limit
(``--time=1 --signal=USR1@30``), or a job of a higher partition preempts it (SLURM
sends SIGTERM and requeues it itself), or it is cancelled (``scancel``: stopped, saved,
not brought back). In the signalled jobs each rank draws its batches
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
from tests.support.slurm import PREEMPT_PARTITION, Cluster

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(2 * TEST_TIMEOUT)]

WORKER = REPO_ROOT / "tests" / "pg" / "workers" / "preempted.py"
LIMIT = 150.0
"""Seconds from submission to the end of the second attempt (eight processes importing
torch on two shared cores, twice)."""
HOLD = 2.0
"""Seconds a requeued job waits, once its first attempt has ended, before the test lifts
SLURM's hold on it: past the second of the first attempt's revocation."""


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


def worker_env(folder: Path, progress: Path) -> dict[str, str]:
    """The worker's variables: signalled from outside, its checkpoint and progress here."""
    return {
        "PYTHONPATH": str(REPO_ROOT),
        "HELIOS_TEST_PREEMPT": "outside",
        "HELIOS_TEST_CHECKPOINT": str(folder / "checkpoint.json"),
        "HELIOS_TEST_PROGRESS": str(progress),
        "HELIOS_TEST_PG_TIMEOUT": "30",
    }


def step_of(progress: Path) -> int:
    """Rank 0's last step, as the worker wrote it; -1 before the first."""
    text = (progress / "step").read_text() if (progress / "step").exists() else ""
    return int(text) if text.strip().isdigit() else -1


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


@pytest.mark.parametrize(
    "how", ["scancel", "one_rank", "srun_torchrun", "time_limit", "preempted", "cancelled"]
)
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
    env = worker_env(tmp_path, progress)
    # SLURM's warning comes up to a minute early: the first attempt outlasts it.
    env["HELIOS_TEST_STEPS"] = "400" if how == "time_limit" else "40"
    if how in ("scancel", "time_limit", "preempted"):
        env["HELIOS_TEST_LOADER"] = "fork,spawn,fork,fork"  # SIGUSR1 ends a spawned one
    options = ["-N2", "--ntasks-per-node=2", "--requeue", "--open-mode=append", "--parsable"]
    if how == "time_limit":
        options += ["--time=1", "--signal=USR1@30"]
    submitted = cluster.finish(["sbatch", *options, "-o", str(output), str(script)], env=env)
    assert submitted.returncode == 0, describe(submitted)
    job = submitted.stdout.strip().split(";")[0]

    if how != "time_limit":
        # SLURM's own warning may come before the first step: the worker holds it until
        # its handlers are in, so the first attempt may stop after any step.
        wait_for("the first attempt's third step", lambda: step_of(progress) >= 3, cluster, output)
    sent = time.time()
    if how in ("scancel", "srun_torchrun"):
        signalled = cluster.finish(["scancel", "--signal=USR1", job])
        assert signalled.returncode == 0, describe(signalled)
    elif how == "one_rank":
        os.kill(int((progress / "rank-2.pid").read_text()), signal.SIGUSR1)
    elif how == "cancelled":
        cancelled = cluster.finish(["scancel", job])
        assert cancelled.returncode == 0, describe(cancelled)
    elif how == "preempted":
        # All of both nodes: SLURM must preempt the job to start this one.
        urgent = ["sbatch", "-p", PREEMPT_PARTITION, "-N2", "--exclusive", "-o", "/dev/null"]
        preempting = cluster.finish([*urgent, "--wrap", "sleep 1"])
        assert preempting.returncode == 0, describe(preempting)

    waiting: list[float] = []  # when the requeued job was first seen waiting

    def second_attempt_ended() -> dict[str, str] | None:
        fields = job_fields(cluster, job)
        requeued = fields.get("Restarts") == "1" and fields.get("Reason") == "BeginTime"
        if requeued and fields.get("JobState") == "PENDING" and not waiting:
            waiting.append(time.monotonic())
        if requeued and waiting and time.monotonic() - waiting[0] >= HOLD:
            # SLURM holds a requeued job a while: lift the hold once the first attempt
            # has ended on every node (PENDING, no longer COMPLETING) and HOLD seconds
            # have passed. SLURM's nodes refuse a launch whose credential is not newer,
            # in whole seconds, than the first attempt's revocation: a job started in
            # that second fails at once (FAILED, ExitCode 1, RunTime 0), which the hold
            # of CredExpire + 1 s is there to prevent. Its time limit goes too: the
            # second attempt runs to its end however slowly its ranks import torch,
            # with no second warning.
            limit = ["TimeLimit=UNLIMITED"] if how == "time_limit" else []
            lifted = cluster.finish(["scontrol", "update", f"JobId={job}", "StartTime=now", *limit])
            assert lifted.returncode == 0 or not limit, describe(lifted)
        ended = fields.get("Restarts") == "1" and fields.get("JobState") in {"COMPLETED", "FAILED"}
        if how == "cancelled":
            ended = fields.get("JobState") in {"CANCELLED", "COMPLETED", "FAILED"}
        return fields if ended else None

    fields = wait_for("the end of the second attempt", second_attempt_ended, cluster, output)
    text = output.read_text() if output.exists() else ""
    report = describe(Finished(["sbatch", job], 0, text, "")) + f"\n{fields}\n{cluster.logs()}"
    if how == "cancelled":
        assert_cancelled(text, fields, report)
        return
    assert fields["JobState"] == "COMPLETED", report
    assert fields["Restarts"] == "1", report
    by_attempt: dict[int, dict[int, dict[str, Any]]] = {0: {}, 1: {}}
    hows, returned = [], []
    for result in parse_results(text):
        if "how" in result:
            hows.append(result["how"])
            returned.append(float(result["at"]))
        else:
            by_attempt.setdefault(int(result["attempt"]), {})[int(result["rank"])] = result
    assert sorted(by_attempt) == [0, 1], report  # a requeue counted once
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
    workers = [0, 0] if how in ("scancel", "time_limit", "preempted") else []
    assert {rank: entry["workers"] for rank, entry in first.items()} == dict.fromkeys(
        range(4), workers
    ), report
    assert set(hows) <= ({"slurm"} if how == "preempted" else {"scontrol"}), report
    if returned and how != "time_limit":  # SLURM may stop a rank before it says it
        record_property("signal_to_last_requeue_return_s", round(max(returned) - sent, 2))


def assert_cancelled(text: str, fields: dict[str, str], report: str) -> None:
    """A cancelled job: every rank stopped after the same step, none requeued it."""
    assert fields["JobState"] == "CANCELLED", report
    assert fields["Restarts"] == "0", report
    results = list(parse_results(text))
    stopped = {entry["stopped"] for entry in results if "stopped" in entry}
    assert len(stopped) == 1, report
    assert {int(entry["rank"]) for entry in results if "how" in entry} == {0, 1, 2, 3}, report
    assert {entry["how"] for entry in results if "how" in entry} == {"cancelled"}, report
    assert "helios requeue: job " in text, report
    assert "is being cancelled (JobState=COMPLETING" in text, report


def test_a_job_that_cannot_be_requeued_leaves_a_marker_and_its_next_run_counts_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``--no-requeue``: the marker, status 75, the batch script submits itself again."""
    progress, output = tmp_path / "progress", tmp_path / "job.out"
    progress.mkdir()
    name = "helios-marker-test"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"#SBATCH -N2 --ntasks-per-node=2 --no-requeue --open-mode=append -o {output}\n"
        f"srun {sys.executable} {WORKER}\n"
        "status=$?\n"
        'if [ "$status" -eq 75 ]; then sbatch --job-name="$SLURM_JOB_NAME" "$0"; fi\n'
        'exit "$status"\n'
    )
    env = worker_env(tmp_path, progress)
    submit = ["sbatch", "--parsable", f"--job-name={name}", str(script)]
    submitted = cluster.finish(submit, env=env, cwd=tmp_path)
    assert submitted.returncode == 0, describe(submitted)
    job = submitted.stdout.strip().split(";")[0]

    wait_for("the first run's third step", lambda: step_of(progress) >= 3, cluster, output)
    signalled = cluster.finish(["scancel", "--signal=USR1", job])
    assert signalled.returncode == 0, describe(signalled)

    def second_run_ended() -> bool:
        text = output.read_text() if output.exists() else ""
        second = [r for r in parse_results(text) if r.get("attempt") == 1]
        _, queued, _ = cluster.run(["squeue", "-h", "-n", name, "-o", "%i"])
        return len(second) == 4 and not queued.strip()

    wait_for("the end of the run the marker asked for", second_run_ended, cluster, output)
    text = output.read_text()
    report = describe(Finished(["sbatch", job], 0, text, ""))
    runs: dict[int, dict[int, dict[str, Any]]] = {0: {}, 1: {}}
    hows = set()
    for result in parse_results(text):
        if "how" in result:
            hows.add(result["how"])
        else:
            runs[int(result["attempt"])][int(result["rank"])] = result
    assert hows == {"marker"}, report
    (last,) = {entry["stopped"] for entry in runs[0].values()}
    assert sorted(runs[1]) == [0, 1, 2, 3], report
    assert {entry["start"] for entry in runs[1].values()} == {int(last) + 1}, report
    marker = tmp_path / f"helios-requeue-{name}"
    assert "scontrol requeue" in text, report
    assert f"wrote {marker}" in text, report
    assert f"this run is attempt 1 of the job, asked for by the marker {marker}" in text, report
    assert not marker.exists(), report
