"""Put a job back in the queue, or say plainly how the batch script should.

Rank 0 does it, once every rank has saved (``Preemption.requeue``):

- under SLURM with ``scontrol`` on ``PATH``: ``scontrol requeue JOB``, where ``JOB`` is
  ``SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID`` for an array task and ``SLURM_JOB_ID``
  otherwise (the job must be submitted with ``--requeue``). SLURM then stops the
  job's processes and queues it again; the program exits with status 0;
- under torchrun without SLURM: nothing to call. The documented end is a clean exit
  (status 0), after which the operator that runs the job (Kubernetes' controller, say)
  starts it again;
- otherwise, and where ``scontrol`` is missing or fails: rank 0 writes a marker file
  (``HELIOS_REQUEUE_FILE``, by default ``helios-requeue-JOB`` in the working directory)
  and the program is to exit with :data:`EXIT_REQUEUE` (75, ``EX_TEMPFAIL``), which
  the batch script tests to resubmit itself. Never a silent no-op: rank 0 prints what
  it did, or why it could not.

Past ``max_requeues`` (the job's attempt, :attr:`helios_env.DistributedInfo.attempt`,
which counts SLURM's requeues and torchrun's restarts, has reached it), nothing is
requeued: the job ends with :data:`EXIT_LIMIT` and a line that says so. A job
resubmitted by its batch script on a marker starts at attempt 0 again: the cap does
not count those.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "EXIT_LIMIT",
    "EXIT_REQUEUE",
    "MARKER_VARIABLE",
    "Requeue",
    "decide_requeue",
    "requeue_job",
]

EXIT_REQUEUE = 75
"""The exit status that asks the batch script to resubmit the job (``EX_TEMPFAIL``)."""
EXIT_LIMIT = 1
"""The exit status of a job stopped past its requeues: it did not finish its work."""
MARKER_VARIABLE = "HELIOS_REQUEUE_FILE"
How = Literal["scontrol", "launcher", "marker", "limit"]
_CODES: dict[How, int] = {"scontrol": 1, "launcher": 2, "marker": 3, "limit": 4}


@dataclass(frozen=True)
class Requeue:
    """What ``requeue()`` did, the same on every rank.

    Attributes:
        how: ``"scontrol"`` (SLURM requeued the job), ``"launcher"`` (torchrun alone:
            exit cleanly, the operator restarts the job), ``"marker"`` (a marker
            file was written; the batch script resubmits on :attr:`exit_status`) or
            ``"limit"`` (the job's attempt has reached ``max_requeues``: nothing was
            done, and the job ends with status 1).
        exit_status: The status to end the program with.
        job: The job requeued or to requeue, where a launcher names one.
        marker: The marker file, for ``"marker"``.
        detail: One line that says what was done, or why it could not be.
    """

    how: How
    exit_status: int
    job: str | None
    marker: Path | None
    detail: str

    @property
    def requeued(self) -> bool:
        """Whether the job is back in SLURM's queue."""
        return self.how == "scontrol"

    @property
    def code(self) -> int:
        """A number for :attr:`how`, which rank 0 sends to the others."""
        return _CODES[self.how]

    def with_code(self, code: int) -> Requeue:
        """What rank 0 did, from the number it sent, as this rank reports it."""
        how: How = next((name for name, number in _CODES.items() if number == code), "marker")
        if how == self.how:
            return self
        if how == "scontrol":
            return Requeue("scontrol", 0, self.job, None, f"rank 0 requeued SLURM job {self.job}")
        if how == "launcher":
            return _fallback(self.job, "", how="launcher")
        if how == "limit":
            detail = "rank 0 found the job at max_requeues: not requeuing it again"
            return Requeue("limit", EXIT_LIMIT, self.job, None, detail)
        return _fallback(self.job, "rank 0 could not requeue the job")


def _job(environ: dict[str, str] | os._Environ[str]) -> str | None:
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return environ.get("SLURM_JOB_ID") or None


def _marker(job: str | None) -> Path:
    configured = os.environ.get(MARKER_VARIABLE)
    return Path(configured) if configured else Path.cwd() / f"helios-requeue-{job or 'job'}"


def _fallback(job: str | None, why: str, *, how: How = "marker") -> Requeue:
    if how == "launcher":
        detail = (
            "torchrun without SLURM, nothing to requeue: exit with status 0 and let the "
            "job's operator start it again"
        )
        return Requeue("launcher", 0, job, None, detail)
    marker = _marker(job)
    detail = (
        f"{why}: wrote {marker}; exit with status {EXIT_REQUEUE} and let the batch "
        "script resubmit the job"
    )
    return Requeue("marker", EXIT_REQUEUE, job, marker, detail)


def decide_requeue(
    environ: dict[str, str] | None = None,
    *,
    attempt: int = 0,
    max_requeues: int | None = None,
) -> Requeue:
    """What ``requeue()`` will do here, from the launcher's variables.

    Args:
        environ: The environment; ``os.environ`` when omitted.
        attempt: The job's attempt, the same on every rank.
        max_requeues: How many times the job may be requeued; None: no limit.

    Returns:
        The plan, the same on every rank of a job.
    """
    env = os.environ if environ is None else environ
    job = _job(env)
    if max_requeues is not None and attempt >= max_requeues:
        detail = (
            f"this is attempt {attempt} of the job (SLURM's requeues and torchrun's "
            f"restarts), at max_requeues={max_requeues}: not requeuing it again; it ends "
            f"here with status {EXIT_LIMIT} (raise max_requeues to let it go on)"
        )
        return Requeue("limit", EXIT_LIMIT, job, None, detail)
    if job is not None:
        if shutil.which("scontrol") is None:
            return _fallback(job, f"cannot requeue SLURM job {job}: scontrol is not on PATH")
        return Requeue("scontrol", 0, job, None, f"requeue SLURM job {job} (scontrol requeue)")
    if env.get("TORCHELASTIC_RUN_ID"):
        return _fallback(None, "", how="launcher")
    return _fallback(None, "not under SLURM, nothing to requeue")


def requeue_job(plan: Requeue, *, timeout: float) -> Requeue:
    """Carry out ``plan`` (rank 0 does), and say what was done on stderr.

    Args:
        plan: From :func:`decide_requeue`.
        timeout: Seconds ``scontrol`` may take.

    Returns:
        What was done: ``plan``, or the marker file where ``scontrol`` failed.
    """
    outcome = plan
    if plan.how == "scontrol" and plan.job is not None:
        command = ["scontrol", "requeue", plan.job]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, check=False
            )
            said = done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}"
            failure = said if done.returncode else ""
        except (OSError, subprocess.TimeoutExpired) as exc:
            failure = str(exc)
        if failure:
            why = f"scontrol requeue {plan.job} failed ({failure}; submitted with --requeue?)"
            outcome = _fallback(plan.job, why)
    if outcome.how == "marker" and outcome.marker is not None:
        record = {"job": outcome.job, "detail": outcome.detail, "time": time.time()}
        with contextlib.suppress(OSError):
            outcome.marker.parent.mkdir(parents=True, exist_ok=True)
            outcome.marker.write_text(json.dumps(record) + "\n")
    sys.stderr.write(f"helios requeue: {outcome.detail}\n")
    sys.stderr.flush()
    return outcome
